"""What does tracking devices cost per op? A small MLP's training steps, in one process: plainly, under the
rehearsal's function mode (``helpers.rehearse.pretend_gpu``), under a pass-through ``TorchDispatchMode``, and both.

Each op of a three-layer MLP with Adam is tiny, so the per-op cost of a mode is most of the step: the figure that
chose a function mode over a dispatch mode (the module's docstring). The best of ``--repeats`` runs per variant.

    python benchmarks/bench_mode_cost.py                 # 300 steps, 3 repeats
    python benchmarks/bench_mode_cost.py --steps 600
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.rehearse.pretend_gpu import Ledger, Machine, pretend


class PassThrough(TorchDispatchMode):
    """Sees every aten op and only runs it: the least a dispatch-level rehearsal would add."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def steps(device: str, n: int) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 32).to(device), torch.randint(0, 10, (64,)).to(device)
    start = time.perf_counter()
    for _ in range(n):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    best = {}
    for name in ("plain", "function mode", "dispatch mode", "both"):
        times = []
        for _ in range(args.repeats):
            with contextlib.ExitStack() as stack:
                device = "cpu"
                if name in ("function mode", "both"):
                    stack.enter_context(pretend(Ledger(Machine.parse("gpu"), lambda *a: None, lambda: ("", 0))))
                    device = "cuda"
                if name in ("dispatch mode", "both"):
                    stack.enter_context(PassThrough())
                times.append(steps(device, args.steps))
        best[name] = min(times)
    print(f"{args.steps} steps of a small MLP with Adam, best of {args.repeats}, torch {torch.__version__}")
    for name, seconds in best.items():
        print(f"  {name:<14} {seconds * 1000 / args.steps:6.3f} ms per step  {seconds / best['plain']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
