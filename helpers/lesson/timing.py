"""Honest timing: warm up first, wait for the GPU (``torch.cuda.synchronize()``), report the median.

CUDA runs asynchronously: a timer read right after launching GPU work measures the launch, not
the work. ``synchronize(device)`` waits for it; ``timeit`` does so around every repeat.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from helpers.course.i18n import tr


def synchronize(device: torch.device | str) -> None:
    """Wait until all queued work on ``device`` has finished (no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass
class Timing:
    """Seconds per call: the median of ``times`` (robust to a slow outlier)."""

    median: float
    times: list[float]

    def __str__(self) -> str:
        return tr("{ms:.1f} ms (median of {n})", ms=self.median * 1000, n=len(self.times))


def timeit(fn: Callable[[], object], device: torch.device | str = "cpu", repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn()`` on ``device``: ``warmup`` untimed calls, then the median of ``repeats`` timed ones."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(statistics.median(times), times)
