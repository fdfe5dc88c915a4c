"""helpers.lesson.devices on simulated machines: no GPU, one GPU, two GPUs, Apple MPS only."""

import contextlib

import pytest
import torch

from helpers.course.config import DEVICE_ENV
from helpers.lab.simulate import simulated_machine
from helpers.lesson import devices
from helpers.lesson.devices import DeviceError, all_gpus, available_devices, parse_device, pick_device


@pytest.fixture
def machine():
    """Simulate a machine with ``cuda`` CUDA GPUs and optional MPS; COURSE_DEVICE unset."""
    with contextlib.ExitStack() as stack:
        yield lambda **kwargs: stack.enter_context(simulated_machine(**kwargs))


def test_no_gpu_picks_cpu(machine):
    machine(cuda=0)
    assert pick_device() == torch.device("cpu")
    assert available_devices() == ["cpu"]
    assert all_gpus() == [torch.device("cpu")]


def test_one_gpu_picks_cuda0_with_index(machine):
    machine(cuda=1)
    assert pick_device() == torch.device("cuda", 0)
    assert pick_device("cuda") == torch.device("cuda", 0), "'cuda' gets its index so tensor.device == device holds"
    assert all_gpus() == [torch.device("cuda", 0)]


def test_two_gpus(machine):
    machine(cuda=2)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert all_gpus() == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert available_devices() == ["cuda:0", "cuda:1", "cpu"]


def test_mps_only(machine):
    machine(cuda=0, mps=True, cuda_build=False)
    assert pick_device() == torch.device("mps", 0)
    assert pick_device("mps") == torch.device("mps", 0)
    assert all_gpus() == [torch.device("mps", 0)]
    with pytest.raises(DeviceError, match="CPU-only build"):
        pick_device("cuda")


def test_cuda_preferred_over_mps(machine):
    machine(cuda=1, mps=True)
    assert pick_device() == torch.device("cuda", 0)


def test_missing_gpu_index_names_what_exists(machine):
    machine(cuda=1)
    with pytest.raises(DeviceError) as err:
        pick_device("cuda:1")
    assert "has 1 CUDA GPU," in str(err.value)
    assert "cuda:0, cpu" in str(err.value)


def test_cuda_requested_without_gpu_is_an_error_not_a_swap(machine):
    machine(cuda=0)
    with pytest.raises(DeviceError, match="sees no CUDA GPU.*Available here: cpu"):
        pick_device("cuda")
    with pytest.raises(DeviceError, match="Apple MPS is not available"):
        pick_device("mps")


@pytest.mark.parametrize(
    ("typo", "fix"),
    [
        ("cuda: 0", "'cuda:0'"),
        ("CUDA:0", "'cuda:0'"),
        ("gpu", "'cuda'"),
        ("cuda0", "'cuda:0'"),
        ("GPU:1", "'cuda:1'"),
        (" cpu", "'cpu'"),
        ("Mps", "'mps'"),
    ],
)
def test_typos_get_the_fix(machine, typo, fix):
    machine(cuda=2)
    with pytest.raises(DeviceError) as err:
        pick_device(typo)
    assert f"Write {fix} instead" in str(err.value)


def test_gpu_typo_explains_the_name(machine):
    machine(cuda=1)
    with pytest.raises(DeviceError, match="PyTorch calls NVIDIA GPUs 'cuda'"):
        pick_device("gpu")


@pytest.mark.parametrize("nonsense", ["tpu", "cuda:x", "", "cuda:-1"])
def test_nonsense_lists_valid_names(machine, nonsense):
    machine(cuda=0)
    with pytest.raises(DeviceError, match="Device names are lower case"):
        parse_device(nonsense)


def test_non_string_request():
    with pytest.raises(DeviceError, match="not int"):
        parse_device(0)


def test_env_var_forces_device(machine, monkeypatch):
    machine(cuda=2)
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert pick_device() == torch.device("cpu")
    assert all_gpus() == [torch.device("cpu")]
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")
    assert pick_device() == torch.device("cuda", 1)
    monkeypatch.setenv(DEVICE_ENV, "auto")
    assert pick_device() == torch.device("cuda", 0)


def test_explicit_request_beats_env_var(machine, monkeypatch):
    machine(cuda=1)
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert pick_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.parametrize("bad", ["cuda: 0", "cuda:3", "banana"])
def test_invalid_env_var_is_an_error_naming_the_variable(machine, monkeypatch, bad):
    machine(cuda=1)
    monkeypatch.setenv(DEVICE_ENV, bad)
    with pytest.raises(DeviceError) as err:
        pick_device()
    assert f"{DEVICE_ENV}={bad!r}" in str(err.value)
    if bad == "cuda:3":
        assert f"unset {DEVICE_ENV}" in str(err.value)


def test_device_objects_pass_through(machine):
    machine(cuda=1)
    assert pick_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    with pytest.raises(DeviceError):
        pick_device(torch.device("cuda", 5))


def test_describe_cpu_and_gpu(machine):
    machine(cuda=1, gpu_name="Fake GPU")
    assert devices.describe(torch.device("cuda", 0)) == "cuda:0 (Fake GPU 0, 16.0 GiB, compute capability 8.9)"
    assert devices.describe(torch.device("cpu")) == "cpu"


def test_real_machine_agrees_with_torch():
    """No simulation: on whatever runs the tests, the picker's choice is really usable."""
    device = pick_device("auto")
    assert torch.zeros(1, device=device).device == device
