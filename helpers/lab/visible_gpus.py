"""Notebook 00's experiment: how many GPUs a fresh Python can use under a given ``CUDA_VISIBLE_DEVICES``.

Each setting runs :data:`PROGRAM` in its own fresh process (:mod:`helpers.lab.child`), because CUDA reads the
variable once per process, when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping

from helpers.lab.child import run_parallel, run_python

PROGRAM = """\
import os

import torch

late = os.environ.pop("SET_LATE", None)
if late is not None:
    torch.cuda.is_available()                  # starts CUDA, which reads CUDA_VISIBLE_DEVICES now ...
    os.environ["CUDA_VISIBLE_DEVICES"] = late  # ... so this comes too late

# Count the GPUs this process can put a tensor on: the GPUs CUDA really uses.
count = 0
while True:
    try:
        torch.zeros(1, device=f"cuda:{count}")
    except (AssertionError, RuntimeError):  # no GPU with that index (or no usable CUDA at all)
        break
    count += 1
print(count)
"""

# Not inherited from the notebook: its own CUDA_VISIBLE_DEVICES, and the switch that makes
# torch.cuda.is_available() ask NVML instead of starting CUDA (the late setting would then count).
_UNSET = ("CUDA_VISIBLE_DEVICES", "SET_LATE", "PYTORCH_NVML_BASED_CUDA_CHECK")


def gpus_seen_by_one(visible: str | None = None, late: str | None = None) -> int:
    """Run :data:`PROGRAM` in a fresh Python: ``visible`` set before it starts, or ``late`` set after
    ``torch.cuda.is_available()``; return how many GPUs it could use."""
    env = {}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    if late is not None:
        env["SET_LATE"] = late
    return int(run_python(PROGRAM, env=env, unset=_UNSET).split()[-1])


def gpus_seen(settings: Mapping[str, Mapping[str, str]]) -> dict[str, int]:
    """``{label: {"visible": ...} or {"late": ...} or {}}`` -> ``{label: GPUs used}``; the children run in parallel
    (each needs a few seconds to import torch)."""
    return run_parallel({label: (lambda kw=kw: gpus_seen_by_one(**kw)) for label, kw in settings.items()})
