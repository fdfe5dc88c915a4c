"""Compare the speed of several runs fairly on a busy machine: alternate them, take medians of ratios.

Each repeat runs every variant once, back to back, in forward order on even repeats and reversed on
odd ones (A B C, C B A, ...), so a machine that slows down for a while slows all variants alike. A
variant's rate is the median over repeats; its ratio to the baseline is the median of the ratios
measured within each repeat, which is robust to load that changes between repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from helpers.lesson.timing import synchronize


@dataclass
class Alternated:
    """Per variant: median items/s, median ratio to the baseline, and the untimed warm-up's seconds."""

    rates: dict[str, float]
    ratios: dict[str, float]
    warmup_seconds: dict[str, float]
    baseline: str
    round_ratios: dict[str, list[float]] = field(default_factory=dict)
    """Per variant, its ratio to the baseline in each repeat (the spread behind the median)."""


def timed(run: Callable[[], object], device) -> float:
    """Seconds of ``run()``, waiting for the device before and after."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def alternated(runs: dict[str, Callable[[], object]], items: dict[str, int] | int, device, repeats: int,
               baseline: str | None = None, warmup: bool = True) -> Alternated:  # fmt: skip
    """Alternate ``runs`` ``repeats`` times; ``items`` is what one run processes (e.g. images), per run or for all.

    One untimed warm-up each first (``warmup``), timed all the same: its seconds include one-off costs
    such as a compilation or a first allocation.
    """
    names = list(runs)
    baseline = baseline if baseline is not None else names[0]
    per_run = items if isinstance(items, dict) else dict.fromkeys(names, items)
    warm = {name: timed(runs[name], device) for name in names} if warmup else {}
    rates: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names if i % 2 == 0 else reversed(names):
            rates[name].append(per_run[name] / timed(runs[name], device))
    round_ratios = {name: [a / b for a, b in zip(rates[name], rates[baseline], strict=True)] for name in names}
    ratios = {name: statistics.median(r) for name, r in round_ratios.items()}
    return Alternated({n: statistics.median(r) for n, r in rates.items()}, ratios, warm, baseline, round_ratios)
