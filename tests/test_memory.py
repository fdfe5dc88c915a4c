"""The memory estimator, the live-bytes counter, the simulated GPU budget, the batch-size finder, peak RSS."""

import pytest
import torch
from torch import nn

from helpers.lab.memory_budget import LiveBytes, SimulatedGpuMemory
from helpers.lab.peak_rss import peak_rss
from helpers.lab.simulate import simulated_machine
from helpers.lesson.memory import (
    EXAMPLE_OOM,
    MiB,
    SavedTensors,
    estimate_training_memory,
    is_out_of_memory,
    largest_batch_that_fits,
    measure_training_memory,
    parse_size,
    read_oom_message,
)
from helpers.lesson.models import Tudui


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


@pytest.mark.parametrize("optimizer, copies", [("sgd", 0), ("sgd_momentum", 1), ("adam", 2), ("adamw", 2)])
def test_estimate_matches_a_real_step(optimizer, copies):
    model, x, y = mlp(), torch.rand(128, 64), torch.randint(0, 10, (128,))
    estimate = estimate_training_memory(model, x, y, optimizer=optimizer)
    measured = measure_training_memory(mlp(), x, y, optimizer=optimizer)
    assert estimate.optimizer_state == copies * estimate.parameters
    for part in ("parameters", "gradients", "optimizer_state", "activations", "batch", "total"):
        assert abs(getattr(estimate, part) - getattr(measured, part)) <= 0.10 * max(getattr(measured, part), 1), part


def test_estimate_allocates_nothing_and_works_on_meta():
    with torch.device("meta"):
        big = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)])
    with LiveBytes() as live:
        estimate = estimate_training_memory(big, torch.empty(4, 4096, device="meta"), optimizer="adam")
    assert live.peak == 0
    assert estimate.parameters == 8 * (4096 * 4096 + 4096) * 4 and estimate.optimizer_state == 2 * estimate.parameters


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="sgd_momentum"):
        estimate_training_memory(mlp(), torch.rand(2, 64), optimizer="lion")


def test_saved_tensors_counts_shared_storage_once_and_leaves_parameters_out():
    model, x = mlp(), torch.rand(32, 64)
    with SavedTensors(exclude=[*model.parameters(), x]) as saved:
        model(x).sum()
    # inputs of the 2nd and 3rd Linear = outputs of the two ReLUs, saved twice each, stored once
    assert saved.bytes == 2 * 32 * 256 * 4


def test_alive_bytes_follow_the_graph():
    model, x = mlp(), torch.rand(32, 64)
    with SavedTensors(exclude=[*model.parameters(), x]) as saved:
        out = model(x)
    assert saved.alive_bytes() == saved.bytes > 0
    del out
    assert saved.alive_bytes() == 0


def test_live_bytes_counts_what_is_alive_and_the_peak():
    with LiveBytes() as live:
        a = torch.empty(1024, dtype=torch.uint8)
        b = a.view(32, 32)  # a view: no new bytes
        c = torch.empty(2048, dtype=torch.uint8)
        del a, c
    assert live.peak == 3072 and live.now == 1024
    del b
    assert live.now == 0


def test_live_bytes_ignores_tensors_made_before_the_block():
    before = torch.ones(1000)
    with LiveBytes() as live:
        before.add_(1)
        before.view(10, 100)
    assert live.peak == 0


def test_simulated_gpu_raises_the_real_out_of_memory_error():
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate") as caught:
        with SimulatedGpuMemory(capacity=1 * MiB):
            torch.empty(2 * MiB, dtype=torch.uint8)
    assert isinstance(caught.value, torch.cuda.OutOfMemoryError) and isinstance(caught.value, RuntimeError)
    assert set(read_oom_message(str(caught.value))) >= {"tried to allocate", "total capacity", "free on the GPU"}


def test_simulated_gpu_runs_out_in_backward_too():
    model = Tudui()
    x, y = torch.rand(16, 3, 32, 32), torch.randint(0, 10, (16,))
    loss_fn = nn.CrossEntropyLoss()
    with LiveBytes() as forward_only:
        loss_fn(model(x), y)
    with pytest.raises(torch.OutOfMemoryError):
        with SimulatedGpuMemory(capacity=forward_only.peak + 1024):
            loss_fn(model(x), y).backward()


def fitting_step(limit_bytes):
    tried = []

    def try_batch(size):
        tried.append(size)
        with SimulatedGpuMemory(capacity=limit_bytes):
            torch.empty(size * 1024, dtype=torch.uint8)

    return try_batch, tried


def test_finder_halves_until_it_fits():
    try_batch, tried = fitting_step(100 * 1024)
    assert largest_batch_that_fits(try_batch, 512) == 64
    assert tried == [512, 256, 128, 64]


def test_finder_raises_when_nothing_fits_and_lets_other_errors_through():
    try_batch, tried = fitting_step(512)
    with pytest.raises(torch.OutOfMemoryError):
        largest_batch_that_fits(try_batch, 8)
    assert tried == [8, 4, 2, 1]

    def buggy(size):
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError):
        largest_batch_that_fits(buggy, 8)


def cpu_out_of_memory() -> RuntimeError:
    """The CPU allocator's real error: 1 EiB is more than any address space, refused before anything is touched."""
    try:
        torch.empty(2**60, dtype=torch.uint8)
    except RuntimeError as err:
        return err
    raise AssertionError("1 EiB was allocated")


def shape_error() -> RuntimeError:
    try:
        torch.zeros(4, 3) @ torch.zeros(4, 5)
    except RuntimeError as err:
        return err
    raise AssertionError("no shape error")


def test_out_of_memory_is_recognised_on_every_device_and_nothing_else():
    cpu = cpu_out_of_memory()
    assert type(cpu) is RuntimeError and "DefaultCPUAllocator: can't allocate memory" in str(cpu)
    mps = SimulatedGpuMemory(MiB, backend="mps").error(2 * MiB)
    assert type(mps) is RuntimeError and str(mps).startswith("MPS backend out of memory")
    assert "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in str(mps)
    cuda = SimulatedGpuMemory(MiB, backend="cuda").error(2 * MiB)
    windows = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you "
        "tried to allocate 8 bytes."
    )
    for err in (cpu, mps, cuda, windows, torch.OutOfMemoryError("CUDA out of memory.")):
        assert is_out_of_memory(err), err
    for err in (shape_error(), ValueError("out of memory"), RuntimeError("Expected all tensors to be on the same")):
        assert not is_out_of_memory(err), err


def test_a_huge_cpu_allocation_fails_fast_without_touching_memory():
    code = """
import time
start = time.perf_counter()
try:
    torch.empty(2**60, dtype=torch.uint8)
except RuntimeError:
    pass
assert time.perf_counter() - start < 5
"""
    peaks = peak_rss(code, setup="import torch")
    assert peaks["after code"] - peaks["after setup"] < 16 * MiB  # refused before a page was touched


@pytest.mark.parametrize(
    "backend, kind", [("cuda", torch.OutOfMemoryError), ("mps", RuntimeError), ("cpu", RuntimeError)]
)
def test_simulated_gpu_raises_each_devices_own_error(backend, kind):
    with pytest.raises(RuntimeError) as caught:
        with SimulatedGpuMemory(capacity=MiB, backend=backend):
            torch.empty(2 * MiB, dtype=torch.uint8)
    assert type(caught.value) is kind and is_out_of_memory(caught.value)


def test_simulated_gpu_on_a_simulated_mac_words_it_as_mps():
    with simulated_machine(mps=True):
        assert SimulatedGpuMemory(MiB, backend="auto").backend == "mps"
        assert SimulatedGpuMemory(MiB).backend == "cuda"  # the default: CUDA's error, as notebook 09 shows it
    with simulated_machine(cuda=1, mps=True):
        assert SimulatedGpuMemory(MiB, backend="auto").backend == "cuda"
    with simulated_machine():
        assert SimulatedGpuMemory(MiB, backend="auto").backend == "cuda"
    with pytest.raises(ValueError, match="xpu"):
        SimulatedGpuMemory(MiB, backend="xpu")


@pytest.mark.parametrize("backend", ["cuda", "mps", "cpu"])
def test_finder_works_on_every_device(backend):
    tried = []

    def try_batch(size):
        tried.append(size)
        with SimulatedGpuMemory(capacity=100 * 1024, backend=backend):
            torch.empty(size * 1024, dtype=torch.uint8)

    assert largest_batch_that_fits(try_batch, 512) == 64 and tried == [512, 256, 128, 64]


def test_finder_lets_a_shape_error_through_at_once():
    tried = []

    def buggy(size):
        tried.append(size)
        torch.zeros(size, 3) @ torch.zeros(4, 5)

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        largest_batch_that_fits(buggy, 8)
    assert tried == [8]


def test_reading_the_out_of_memory_message():
    fields = read_oom_message(EXAMPLE_OOM)
    assert fields["tried to allocate"] == "2.00 GiB" and fields["reserved but unallocated"] == "1.05 GiB"
    assert parse_size("2.00 GiB") == 2 * 2**30 and parse_size("0 bytes") == 0
    assert read_oom_message("something else") == {}


def test_peak_rss_of_a_child_sees_a_large_allocation():
    peaks = peak_rss("x = bytearray(64 * 2**20)", setup="import sys")
    assert peaks["after code"] - peaks["after setup"] >= 48 * MiB


def test_peak_rss_after_a_further_step():
    peaks = peak_rss("x = bytearray(16 * 2**20)", setup="import sys", then="y = bytearray(64 * 2**20)")
    assert list(peaks) == ["after setup", "after code", "after then"]
    assert peaks["after then"] - peaks["after code"] >= 48 * MiB
