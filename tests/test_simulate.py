"""helpers.lab.simulate: the machine states the checks and tests fake, as torch itself would report them."""

import os

import pytest
import torch

from helpers.course.config import DEVICE_ENV
from helpers.lab import simulate
from helpers.lab.simulate import simulated_machine
from helpers.lesson import devices

INIT_ERRORS = [simulate.NO_DRIVER, simulate.DRIVER_TOO_OLD, simulate.UNKNOWN_ERROR, simulate.INIT_FAILED]


@pytest.mark.parametrize(
    "text, fragment",
    [
        (simulate.NO_DRIVER, "Found no NVIDIA driver on your system"),
        (simulate.DRIVER_TOO_OLD, "The NVIDIA driver on your system is too old (found version 11040)"),
        (simulate.UNKNOWN_ERROR, "CUDA unknown error - this may be due to an incorrectly set up environment"),
        (simulate.INIT_FAILED, "CUDA driver initialization failed, you might not have a CUDA gpu."),
        (simulate.NO_GPUS, "No CUDA GPUs are available"),
    ],
)
def test_error_texts_are_torchs_own(text, fragment):
    assert text.startswith(fragment)
    if torch.version.cuda is None:
        pytest.skip("a CPU-only build holds no CUDA error texts")
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10_cuda.so")
    if not os.path.exists(library):
        pytest.skip("no libc10_cuda.so in this build")
    with open(library, "rb") as f:
        binary = f.read()
    head = fragment.split(" (found version")[0]  # the version number is filled in at run time
    assert head.encode() in binary


def test_two_gpus_differ_in_memory_and_accept_every_device_spelling():
    with simulated_machine(cuda=2, gpu_name="Sim", memory_gib=[23.6, 10.7]):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 2
        for spelling in (1, "cuda:1", torch.device("cuda", 1), torch.device("cuda:1")):
            props = torch.cuda.get_device_properties(spelling)
            assert props.name == "Sim 1" and round(props.total_memory / 2**30, 1) == 10.7
            assert torch.cuda.get_device_name(spelling) == "Sim 1"
        for spelling in (None, 0, "cuda", "cuda:0", torch.device("cuda")):
            assert torch.cuda.get_device_name(spelling) == "Sim 0"
            assert round(torch.cuda.get_device_properties(spelling).total_memory / 2**30, 1) == 23.6
        with pytest.raises(AssertionError, match="Invalid device id"):
            torch.cuda.get_device_properties("cuda:2")
        with pytest.raises(ValueError, match="Expected a cuda device"):
            torch.cuda.get_device_properties("cpu")


def test_memory_list_must_fit_the_gpus():
    with pytest.raises(ValueError, match="2 sizes for 3 GPUs"), simulated_machine(cuda=3, memory_gib=[1, 2]):
        pass


def test_one_number_is_every_gpus_memory():
    with simulated_machine(cuda=2, memory_gib=40):
        assert {torch.cuda.get_device_properties(i).total_memory for i in range(2)} == {40 * 2**30}


def test_no_gpu_raises_like_a_laptop_with_a_cuda_build():
    with simulated_machine(cuda=0):
        assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match="Found no NVIDIA driver"):
            torch.cuda.get_device_name(0)
        assert torch.accelerator.current_accelerator() == torch.device("cuda")  # the build's accelerator
        assert torch.accelerator.current_accelerator(check_available=True) is None


@pytest.mark.parametrize("error", INIT_ERRORS)
def test_nvml_counts_gpus_that_cuda_cannot_use(error):
    with simulated_machine(cuda=2, cuda_init_error=error):
        assert torch.cuda.device_count() == 2, "device_count() counts through NVML"
        assert not torch.cuda.is_available()
        assert not torch.cuda.is_initialized()
        for call in (
            torch.cuda.init,
            torch.cuda.current_device,
            lambda: torch.cuda.get_device_properties(0),
            lambda: torch.cuda.get_device_name("cuda:1"),
            lambda: torch.zeros(2, device="cuda"),
            lambda: torch.ones(2).to("cuda"),
            lambda: torch.ones(2).cuda(),
        ):
            with pytest.raises(RuntimeError) as info:
                call()
            assert str(info.value) == error
        assert not torch.accelerator.is_available() and torch.accelerator.device_count() == 0
        assert torch.accelerator.current_accelerator(check_available=True) is None
        assert devices.pick_device() == torch.device("cpu")
        assert devices.available_devices() == ["cpu"]


def test_nvml_count_can_be_set_apart_from_the_gpus():
    with simulated_machine(cuda=0, nvml_gpus=2, cuda_init_error=simulate.DRIVER_TOO_OLD):
        assert torch.cuda.device_count() == 2 and not torch.cuda.is_available()
    with simulated_machine(cuda=4, nvml_gpus=1):  # NVML re-reading CUDA_VISIBLE_DEVICES, CUDA already started
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.get_device_name(3) == "Simulated GPU 3"


def test_no_driver_and_no_gpus_states():
    with simulated_machine(cuda=0, cuda_init_error=simulate.NO_DRIVER):
        assert torch.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match="Found no NVIDIA driver"):
            torch.cuda.init()
    with simulated_machine(cuda=0, nvml_gpus=0, cuda_init_error=simulate.NO_GPUS):
        with pytest.raises(RuntimeError, match="No CUDA GPUs are available"):
            torch.tensor([1.0], device="cuda")


def test_the_cpu_still_works_when_cuda_cannot_start():
    with simulated_machine(cuda=1, cuda_init_error=simulate.UNKNOWN_ERROR):
        assert torch.ones(3).sum().item() == 3.0
        assert torch.ones(2).to("meta").device.type == "meta"


def test_other_accelerator_is_the_only_one():
    with simulated_machine(other_accelerator="xpu"):
        assert torch.accelerator.current_accelerator() == torch.device("xpu")
        assert torch.accelerator.current_accelerator(check_available=True) == torch.device("xpu")
        assert torch.accelerator.is_available() and torch.accelerator.device_count() == 1
        assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
        assert not torch.backends.mps.is_available()
        if hasattr(torch, "xpu"):
            assert torch.xpu.is_available() and torch.xpu.device_count() == 1
        assert devices.pick_device() == torch.device("cpu"), "the course picks CUDA, MPS or the CPU"
    with pytest.raises(ValueError, match="only accelerator"), simulated_machine(cuda=1, other_accelerator="xpu"):
        pass


@pytest.mark.parametrize("mps", [True, False])
def test_mps_is_simulated_in_both_places(mps):
    with simulated_machine(mps=mps, cuda_build=not mps):
        assert torch.backends.mps.is_available() is mps
        if hasattr(torch, "mps") and hasattr(torch.mps, "is_available"):
            assert torch.mps.is_available() is mps
        if hasattr(torch, "mps") and hasattr(torch.mps, "device_count"):
            assert torch.mps.device_count() == int(mps)
        assert (torch.accelerator.current_accelerator(check_available=True) == torch.device("mps")) is mps


def test_cpu_only_build():
    with simulated_machine(cuda=0, cuda_build=False):
        assert torch.version.cuda is None and torch.cuda.device_count() == 0
        assert torch.accelerator.current_accelerator() is None
        with pytest.raises(AssertionError, match="not compiled with CUDA"):
            torch.cuda.get_device_name(0)


def test_everything_is_restored_and_course_device_unset(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    before = (torch.cuda.is_available(), torch.cuda.device_count(), torch.version.cuda, torch.cuda._lazy_init)
    with simulated_machine(cuda=2, cuda_init_error=simulate.DRIVER_TOO_OLD):
        assert DEVICE_ENV not in os.environ
    assert os.environ[DEVICE_ENV] == "cpu"
    assert before == (torch.cuda.is_available(), torch.cuda.device_count(), torch.version.cuda, torch.cuda._lazy_init)
    assert torch.ones(2).sum().item() == 2.0


def test_memory_queries_and_init_on_usable_gpus():
    with simulated_machine(cuda=2, memory_gib=[80, 40]):
        torch.cuda.init()  # CUDA starts: nothing raised
        free, total = torch.cuda.mem_get_info(1)
        assert total == 40 * 2**30 and 0 < free < total
        assert torch.cuda.mem_get_info()[1] == 80 * 2**30
        assert torch.cuda.get_device_capability("cuda:1") == (8, 9)
    with simulated_machine(cuda=0), pytest.raises(RuntimeError, match="Found no NVIDIA driver"):
        torch.cuda.init()


def test_capability_and_arch_list_are_simulated():
    real = torch.cuda.get_arch_list
    with simulated_machine(cuda=2, capability=(6, 1), arch_list=["sm_75", "compute_90"]):
        assert torch.cuda.get_device_capability(1) == (6, 1)
        assert torch.cuda.get_arch_list() == ["sm_75", "compute_90"]
    assert torch.cuda.get_arch_list == real
    with simulated_machine(cuda=1):
        assert torch.cuda.get_device_capability(0) == (8, 9), "an Ada GPU by default"
        assert torch.cuda.get_arch_list == real, "the build's own list unless one is given"


def test_rocm_build_serves_amd_gpus_through_torch_cuda():
    with simulated_machine(cuda=1, rocm="6.4", gpu_name="AMD Instinct MI300X"):
        assert torch.version.hip == "6.4" and torch.version.cuda is None
        assert torch.cuda.is_available() and torch.cuda.get_device_name(0) == "AMD Instinct MI300X 0"
        assert torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx942")
        assert devices.pick_device() == torch.device("cuda", 0)
    assert getattr(torch.version, "hip", None) is None or torch.version.hip != "6.4"
    with pytest.raises(ValueError, match="cuda_build=True"), simulated_machine(rocm="6.4", cuda_build=False):
        pass
