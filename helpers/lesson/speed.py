"""The speed ladder: Tudui trained one improvement at a time, each rung measured in the same run.

Rungs are cumulative: each one keeps everything the rungs above it did and adds one change.

1. ``article loop``: the article's loop over a ``DataLoader`` with per-image ``ToTensor()``, batch 64,
   ``imgs.to(device)`` per batch (a blocking copy: on a CUDA GPU it waits for the copy to finish), and a
   running loss read with ``loss.item()`` every step (as notebook 05's method-1 loop and the original
   course's test loop do);
2. ``no hidden syncs``: the same, with the loss summed on the device and read once at the end, and the batches
   copied with :func:`helpers.lesson.devices.to_device`: on a CUDA GPU the ``DataLoader`` pins each batch
   (``pin_memory=True``) and the copy is queued with ``non_blocking=True``; elsewhere it stays blocking (a
   non-blocking copy from pageable memory has no effect on CUDA and no guarantee on MPS);
3. ``data on device``: the dataset kept as one tensor on the device, shuffled and sliced there;
4. ``larger batch``: batch 256 instead of 64;
5. ``channels_last``: model and inputs in the channels-last memory format;
6. ``mixed precision``: ``torch.autocast`` (bfloat16 where the device runs it natively: the CPU and CUDA
   GPUs of compute capability 8.0 or more; else float16 with a GradScaler);
7. ``compile``: ``torch.compile`` of the model.

:func:`run_ladder` times them with :func:`helpers.lab.alternate.alternated` (runs alternated, ratios to
the article's loop as medians of pairs) and gives each rung's test accuracy after the same number of
steps (all rungs use Adam, so that a short run learns). ``benchmarks/bench_ladder.py`` and notebook 06 both
use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.torch_version import TorchVersion
from torch.utils.data import DataLoader

from helpers.course.i18n import columns, tr, tr_lazy
from helpers.lab.alternate import alternated
from helpers.lesson.data import CourseData, as_tensors
from helpers.lesson.devices import to_device
from helpers.lesson.models import Tudui
from helpers.lesson.training import TensorBatches

SMALL_BATCH, LARGE_BATCH = 64, 256
# Adam, not the article's SGD(lr=0.01): the ladder's runs are short (about a hundred steps), and with the article's
# optimizer Tudui is still near chance after them, so the accuracy column could not show a rung that hurts learning.
LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class Rung:
    """One configuration of the training loop."""

    name: str
    loader: str = "dataloader"  # "dataloader" (per-image ToTensor) or "device" (one tensor, sliced)
    item_every_step: bool = True
    pinned_copies: bool = False  # the article copies each batch with a plain .to(device)
    batch_size: int = SMALL_BATCH
    channels_last: bool = False
    amp: bool = False
    compile: bool = False


def ladder() -> list[Rung]:
    """The seven rungs, each adding one change to the one before."""
    r1 = Rung("article loop")
    r2 = replace(r1, name="no hidden syncs", item_every_step=False, pinned_copies=True)
    r3 = replace(r2, name="data on device", loader="device")
    r4 = replace(r3, name="larger batch", batch_size=LARGE_BATCH)
    r5 = replace(r4, name="channels_last", channels_last=True)
    r6 = replace(r5, name="mixed precision", amp=True)
    r7 = replace(r6, name="compile", compile=True)
    return [r1, r2, r3, r4, r5, r6, r7]


def amp_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 on the CPU and on CUDA GPUs that run it natively (compute capability 8.0 or more: A100, RTX 30xx,
    H100, and AMD GPUs); float16 elsewhere (a T4, MPS).

    ``torch.cuda.is_bf16_supported()`` alone would say True on a T4 too: by default it also counts bfloat16 that
    the GPU only emulates (slowly). ``including_emulation=False`` asks for native support.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False):
        return torch.bfloat16
    return torch.float16


def needs_grad_scaler(device: torch.device) -> bool:
    """float16 gradients can underflow to zero: scale the loss. bfloat16 has float32's range: no scaler."""
    return amp_dtype(device) == torch.float16


def grad_scaler_works(device: torch.device) -> bool:
    """An enabled ``GradScaler`` steps on the CPU and CUDA; on MPS from torch 2.8 (2.7 unscales in float64, which
    MPS lacks)."""
    device = torch.device(device)
    return device.type != "mps" or TorchVersion(torch.__version__) >= (2, 8)


def cpu_has_bf16_units() -> bool:
    """True on x86 CPUs with AVX-512 BF16 or AMX instructions (what makes bfloat16 fast on a CPU)."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):  # private helpers: absent in some builds
        return False


# Why a rung may not pay on a device: shown beside a rung slower than the one before it (full runs only).
WHY_NOT = {
    "no hidden syncs": {
        "cpu": "on the CPU .item() and .to(device) wait for nothing (each operation has finished when it returns); "
        "on a GPU every .item() and every blocking copy stalls the queue until the GPU catches up",
        "any": "the rung drops one .item() per step and, on a CUDA GPU, has the DataLoader pin each batch in the "
        "loop's own thread (it has no workers): a host copy per batch that can cost as much as the wait it saves",
    },
    "data on device": {
        "any": "the DataLoader was not the bottleneck: its per-image work is small next to a training step here",
    },
    "larger batch": {
        "any": "the device was already fully used at batch 64: more work per step brings no more images/s",
    },
    "channels_last": {
        "cpu": "this CPU's convolution kernels gain nothing from the layout at this size; GPUs with tensor cores "
        "gain most",
        "any": "this GPU's convolutions gain nothing from the layout at this size",
    },
    "mixed precision": {
        "cpu-bf16": "this CPU has bfloat16 instructions, but at this size converting to and from bfloat16 costs "
        "more than it saves",
        "cpu": "this CPU has no bfloat16 units (AVX-512 BF16 or AMX): bfloat16 is converted to float32 and back, "
        "which only adds work",
        "any": "a small model's steps are bound by kernel launches and the input pipeline, not by arithmetic",
    },
    "compile": {
        "any": "compiling pays most where many small operations can be fused; Tudui is a few large convolutions "
        "that already run as library kernels, and the compiled step came out slower",
    },
}


def why_not(rung: str, device: torch.device) -> str:
    table = WHY_NOT.get(rung, {})
    kind = torch.device(device).type
    if kind == "cpu" and cpu_has_bf16_units() and "cpu-bf16" in table:
        kind = "cpu-bf16"
    return table.get(kind, table.get("any", ""))


def endless(batches) -> Iterator:
    """Batches forever, epoch after epoch (a new shuffle each epoch)."""
    while True:
        yield from batches


@dataclass
class RungRun:
    """A model, optimizer and batch source set up for one rung; ``train()`` runs ``steps`` steps."""

    rung: Rung
    data: CourseData
    device: torch.device
    steps: int
    train_tensors: tuple[torch.Tensor, torch.Tensor]
    seed: int = 0
    losses: list[float] = field(default_factory=list)

    def __post_init__(self):
        torch.manual_seed(self.seed)
        self.model = Tudui().to(self.device)
        if self.rung.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LEARNING_RATE)
        self.loss_fn = nn.CrossEntropyLoss().to(self.device)
        gen = torch.Generator().manual_seed(self.seed)
        if self.rung.loader == "dataloader":
            pin = self.rung.pinned_copies and self.device.type == "cuda"  # pinned by the loader, in this thread
            source = DataLoader(
                self.data.train, batch_size=self.rung.batch_size, shuffle=True, generator=gen, pin_memory=pin
            )
        else:
            images, labels = self.train_tensors
            source = TensorBatches(images, labels, self.rung.batch_size, shuffle=True, generator=gen)
        self.batches = endless(source)
        self.forward = torch.compile(self.model) if self.rung.compile else self.model
        self.dtype = amp_dtype(self.device)
        use_scaler = self.rung.amp and needs_grad_scaler(self.device) and grad_scaler_works(self.device)
        self.scaler = torch.amp.GradScaler(self.device.type) if use_scaler else None

    @property
    def images_per_run(self) -> int:
        return self.steps * self.rung.batch_size

    def train(self) -> None:
        """``steps`` training steps; the running loss is kept as the rung says."""
        rung, device = self.rung, self.device
        self.model.train()
        total = torch.zeros((), device=device)
        for _ in range(self.steps):
            imgs, targets = next(self.batches)
            if rung.pinned_copies:  # non_blocking=True from pinned memory on a CUDA GPU, else blocking
                imgs, targets = to_device(imgs, device), to_device(targets, device)
            else:  # the article: imgs.to(device)
                imgs, targets = imgs.to(device), targets.to(device)
            if rung.channels_last:
                imgs = imgs.contiguous(memory_format=torch.channels_last)
            amp = torch.autocast(device.type, dtype=self.dtype) if rung.amp else contextlib.nullcontext()
            with amp:
                loss = self.loss_fn(self.forward(imgs), targets)
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
            if rung.item_every_step:
                self.losses.append(loss.item())  # waits for the device, every step
            else:
                total += loss.detach()  # stays on the device
        if not rung.item_every_step:
            self.losses.append(total.item() / self.steps)  # one wait per run

    @torch.no_grad()
    def accuracy(self, test_images: torch.Tensor, test_labels: torch.Tensor) -> float:
        """Test accuracy (fraction) of the trained weights, in float32, eager (the same parameters)."""
        self.model.eval()
        correct = torch.zeros((), dtype=torch.long, device=self.device)
        for start in range(0, len(test_labels), 512):
            out = self.model(test_images[start : start + 512])
            correct += (out.argmax(1) == test_labels[start : start + 512]).sum()
        return correct.item() / len(test_labels)


ACCURACY_DROP = 0.05  # a rung this much less accurate than the one above it gets a note
MIN_ROUNDS = 3  # fewer timed rounds than this cannot tell a rung's speed from the article loop's
NOT_DISTINGUISHABLE = "not distinguishable"
# The rungs as the ladder's table names them (rows() keeps the English names: the plot and the benchmarks use them).
RUNG_NAMES = {
    "article loop": tr_lazy("article loop"),
    "no hidden syncs": tr_lazy("no hidden syncs"),
    "data on device": tr_lazy("data on device"),
    "larger batch": tr_lazy("larger batch"),
    "channels_last": tr_lazy("channels_last"),
    "mixed precision": tr_lazy("mixed precision"),
    "compile": tr_lazy("compile"),
}
# The reasons notebook 06 and the benchmark give for a skipped rung (shown through tr in the table's note).
SKIP_REASONS = (
    tr_lazy("quick mode (a first compilation takes tens of seconds on a CPU)"),
    tr_lazy("torch.compile is not available here"),
)


def _pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded to ``width`` terminal columns (a Chinese character takes two)."""
    fill = " " * max(0, width - columns(text))
    return fill + text if right else text + fill


def speed_verdict(round_ratios: list[float], min_rounds: int = MIN_ROUNDS) -> str:
    """``"faster"`` or ``"slower"`` than the article's loop when every round says so, else ``"not distinguishable"``.

    ``round_ratios`` are one rung's ratios to the article's loop, one per timed round. A spread that
    includes 1.0 (some rounds faster, some slower), or fewer than ``min_rounds`` rounds, cannot tell the
    rung from the article's loop on this machine."""
    if len(round_ratios) < min_rounds or min(round_ratios) <= 1.0 <= max(round_ratios):
        return NOT_DISTINGUISHABLE
    return "faster" if min(round_ratios) > 1.0 else "slower"


@dataclass
class LadderResult:
    rungs: list[Rung]
    rates: dict[str, float]
    ratios: dict[str, float]
    accuracy: dict[str, float]
    steps: int
    first_call_seconds: dict[str, float]
    skipped: dict[str, str]
    device: torch.device
    repeats: int = 5
    round_ratios: dict[str, list[float]] = field(default_factory=dict)
    """Per rung, its ratio to the article's loop in each timed round (empty: only the medians are known)."""

    @property
    def steps_per_run(self) -> int:
        """Training steps in one run of a rung (``steps`` counts them over the warm-up run and every round)."""
        return self.steps // (1 + self.repeats)

    def length(self) -> str:
        """How long each rung trained, in the words the notebook's heading line and the plot's title both use."""
        from helpers.lab.plots import label  # Chinese where the plot's title can draw it, as that title

        return label(
            tr_lazy("{per_run} steps per run, {runs} runs (warm-up + {repeats} timed): accuracy after {steps} steps"),
            per_run=self.steps_per_run,
            runs=1 + self.repeats,
            repeats=self.repeats,
            steps=self.steps,
        )

    @property
    def too_short(self) -> bool:
        """Fewer than 3 timed rounds: differences between rungs are noise (quick mode)."""
        return self.repeats < MIN_ROUNDS

    def spread(self, name: str) -> tuple[float, float]:
        """The lowest and highest of a rung's round ratios (the median twice when the rounds are unknown)."""
        rounds = self.round_ratios.get(name) or [self.ratios[name]]
        return min(rounds), max(rounds)

    def verdict(self, name: str) -> str:
        """``baseline`` for the article's loop; else :func:`speed_verdict` of the rung's rounds."""
        if name == self.rungs[0].name:
            return "baseline"
        if self.too_short:
            return NOT_DISTINGUISHABLE
        return speed_verdict(self.round_ratios.get(name) or [self.ratios[name]] * self.repeats)

    def rows(self, shown: bool = False) -> list[dict]:
        """One dict per rung measured: name, images/s, ratio to the article's loop, accuracy, a note: in English
        (as the benchmarks, the plot and the notebook's checks read it), or with ``shown`` in the course's language
        (the table's)."""
        rows, previous = [], None
        for rung in self.rungs:
            name = rung.name
            if name in self.skipped:
                reason = self.skipped[name]
                note = tr("skipped: {reason}", reason=tr(reason)) if shown else f"skipped: {reason}"
                rows.append({"rung": name, "images_per_s": None, "ratio": None, "accuracy": None,
                             "verdict": "skipped", "note": note})  # fmt: skip
                continue
            notes, verdict = [], self.verdict(name)  # (message, fields) for each part of the note
            if verdict == NOT_DISTINGUISHABLE and self.too_short:
                notes.append((
                    tr_lazy("not distinguishable here: {repeats} round(s) of {per_run} steps are too few to tell"),
                    {"repeats": self.repeats, "per_run": self.steps_per_run},
                ))  # fmt: skip
            elif verdict == NOT_DISTINGUISHABLE:
                low, high = self.spread(name)
                notes.append((
                    tr_lazy("not distinguishable here: the rounds gave {low:.2f}x to {high:.2f}x, on both sides of 1"),
                    {"low": low, "high": high},
                ))  # fmt: skip
            if previous is not None and not self.too_short and self.ratios[name] < self.ratios[previous]:
                notes.append((tr_lazy("did not pay here: {why}"), {"why": why_not(name, self.device)}))
            if previous is not None and not self.too_short:
                now, before = self.accuracy[name], self.accuracy[previous]
                if now < before - ACCURACY_DROP:
                    notes.append((
                        tr_lazy("lower accuracy after the same steps ({now:.1%}, the rung above {before:.1%})"),
                        {"now": now, "before": before},
                    ))  # fmt: skip
            note = "; ".join(message.format(**fields) for message, fields in notes)
            if shown:
                note = ""
                for message, fields in notes:
                    part = tr(message, **fields)
                    note = tr("{note}; {more}", note=note, more=part) if note else part
            rows.append({"rung": name, "images_per_s": self.rates[name], "ratio": self.ratios[name],
                         "accuracy": self.accuracy[name], "verdict": verdict, "note": note})  # fmt: skip
            previous = name
        return rows

    def table(self) -> str:
        head = [tr("rung"), tr("images/s"), tr("x article"), tr("accuracy")]
        rows = self.rows(shown=True)
        names = [tr(RUNG_NAMES.get(row["rung"], row["rung"])) for row in rows]
        # columns wide enough for the longest name or heading, however many columns a Chinese character takes
        first = max(18, *(columns(text) + 2 for text in [head[0], *names]))
        w1, w2, w3 = (max(width, columns(text) + 1) for width, text in zip((10, 11, 10), head[1:], strict=True))
        lines = [f"{_pad(head[0], first)}{_pad(head[1], w1, True)}{_pad(head[2], w2, True)}{_pad(head[3], w3, True)}  "
                 + tr("notes")]  # fmt: skip
        for row, name in zip(rows, names, strict=True):
            rung = _pad(name, first)
            if row["ratio"] is None:
                lines.append(f"{rung}{'-':>{w1}}{'-':>{w2}}{'-':>{w3}}  {row['note']}")
            else:
                rate, ratio, accuracy = row["images_per_s"], row["ratio"], row["accuracy"]
                lines.append(f"{rung}{rate:>{w1}.0f}{ratio:>{w2 - 1}.2f}x{accuracy:>{w3}.1%}  {row['note']}")
        return "\n".join(lines)


def run_ladder(data: CourseData, device: torch.device, steps: int, repeats: int,
               rungs: list[Rung] | None = None, skip: dict[str, str] | None = None) -> LadderResult:  # fmt: skip
    """Time every rung (alternated, ``repeats`` times after one warm-up run each), then measure accuracy.

    Every rung trains ``steps`` steps per run, from the same initial weights, for ``1 + repeats`` runs:
    the accuracies compare models trained for the same number of steps. ``skip`` maps rung names to
    the reason they are not run (e.g. compile in quick mode).
    """
    device = torch.device(device)
    rungs = rungs if rungs is not None else ladder()
    skip = dict(skip or {})
    train_tensors = as_tensors(data.train, device)
    test_images, test_labels = as_tensors(data.test, device)
    runs = {r.name: RungRun(r, data, device, steps, train_tensors) for r in rungs if r.name not in skip}
    result = alternated({n: rr.train for n, rr in runs.items()},
                        {n: rr.images_per_run for n, rr in runs.items()}, device, repeats)  # fmt: skip
    accuracy = {n: rr.accuracy(test_images, test_labels) for n, rr in runs.items()}
    return LadderResult(rungs, result.rates, result.ratios, accuracy, steps * (1 + repeats),
                        result.warmup_seconds, skip, device, repeats, result.round_ratios)  # fmt: skip
