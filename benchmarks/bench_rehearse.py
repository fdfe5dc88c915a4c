"""What does the rehearsal cost? One training script run plainly on the CPU and rehearsed as a GPU, in one run.

The script (written to a temporary folder) trains the lesson's Tudui network on CIFAR-shaped random tensors with
the articles' method 1 (``.to(device)``), for exactly ``--batches`` batches of one epoch, and prints its loss. The
rehearsal runs it with ``--steps`` equal to that number, so both runs do the same work: the rehearsed run pays for
the pretend device (a tag on every tensor, every op checked), the ledger of syncs and copies, and its own start.
Whole processes are timed (what a learner waits for), alternating plain and rehearsed runs so a busy machine slows
both alike; the ratio is the median of the ratios within each repeat. The issue's budget: at most 1.5x.

    python benchmarks/bench_rehearse.py                      # 48 batches of 64, 5 repeats
    python benchmarks/bench_rehearse.py --batches 96 --repeats 7
    python benchmarks/bench_rehearse.py --model mlp --batches 300   # a small MLP with Adam: per-operator cost

``--model mlp`` trains a three-layer MLP on 32 features with Adam instead: each op is tiny, so the pretend device's
work on every op (its tags, its checks), which the convolutions hide, is most of what the rehearsal adds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.lab.alternate import alternated

MAX_RATIO = 1.5

SCRIPT = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.lesson.models import Tudui

torch.manual_seed(0)
torch.set_num_threads({threads})
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.randn({images}, {shape}), torch.randint(0, 10, ({images},)))
loader = DataLoader(data, batch_size={batch})
model = {model}.to(device)
loss_fn = nn.CrossEntropyLoss().to(device)
optimizer = {optimizer}
for step, (imgs, targets) in enumerate(loader):
    imgs, targets = imgs.to(device), targets.to(device)
    loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 8 == 0:
        print(f"step {{step}} loss {{loss.item():.4f}}")
"""
MODELS = {
    "tudui": {"shape": "3, 32, 32", "model": "Tudui()", "optimizer": "torch.optim.SGD(model.parameters(), lr=0.01)"},
    "mlp": {
        "shape": "32",
        "model": "nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))",
        "optimizer": "torch.optim.Adam(model.parameters(), lr=1e-3)",
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=48, help="batches in the script's one epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads inside the script")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", choices=sorted(MODELS), default="tudui", help="tudui (conv-bound) or mlp")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train_method1.py"
        images = args.batches * args.batch_size
        script.write_text(
            SCRIPT.format(threads=args.threads, images=images, batch=args.batch_size, **MODELS[args.model])
        )
        root = str(Path(__file__).resolve().parent.parent)
        plain = [sys.executable, str(script)]
        rehearsed = [sys.executable, "-m", "helpers.rehearse", "--as", "gpu"]
        rehearsed += ["--steps", str(args.batches), "--loops", "1", str(script)]

        def run(command):
            def go():
                done = subprocess.run(command, capture_output=True, text=True, cwd=root)
                if done.returncode != 0:
                    raise SystemExit(f"{' '.join(command[1:3])} failed ({done.returncode}):\n{done.stderr[-1500:]}")
                return done.stdout

            return go

        outputs = {"plain": run(plain)(), "rehearsed": run(rehearsed)()}
        plain_losses = [line for line in outputs["plain"].splitlines() if line.startswith("step ")]
        rehearsed_losses = [line for line in outputs["rehearsed"].splitlines() if line.startswith("step ")]
        result = alternated({"plain": run(plain), "rehearsed": run(rehearsed)}, images, "cpu", args.repeats)

    print(
        f"{args.model}: {args.batches} batches of {args.batch_size}, {args.threads} thread(s), {args.repeats} repeats"
    )
    for name in ("plain", "rehearsed"):
        print(f"  {name:<10} {images / result.rates[name]:6.2f} s per run (median)")
    ratio = 1 / result.ratios["rehearsed"]
    spread = ", ".join(f"{1 / r:.2f}" for r in result.round_ratios["rehearsed"])
    print(f"rehearsed / plain time: {ratio:.2f}x (per repeat: {spread}); budget {MAX_RATIO}x")
    same = plain_losses == rehearsed_losses
    print(f"the script's printed losses: {'the same' if same else 'DIFFERENT'} in both runs")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
