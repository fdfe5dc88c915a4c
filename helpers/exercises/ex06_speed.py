"""Checks for notebook 06's exercises (speed).

They judge what a GPU would observe, on any machine: the host synchronisations a loop makes (counted
by :mod:`helpers.sync_recorder`, the same on every device), where batches live (also run towards
``meta``, a device that is never the CPU), and what a mixed-precision step computes (with a GradScaler
that is really enabled, as it is for float16 on a CUDA GPU).
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.devices import pick_device
from helpers.exercises import NOT_WRITTEN, OTHER_DEVICE, exercise_check, failed, passed
from helpers.speed import grad_scaler_works
from helpers.sync_recorder import record_syncs

# ---------------------------------------------------------------- Exercise 1: a loop without hidden syncs

SYNC_FIXES = {
    ".item() / float() / int() / bool() / `if` on a tensor": (
        "sum on the device (total = total + loss.detach()), keep the largest loss with torch.maximum, and read "
        "both once after the loop; an `if loss > 100` inside the loop reads the loss every step"
    ),
    "print() or repr() of a tensor": "do not print tensors inside the loop",
    ".cpu()": "keep the running values on the device; move one number to the host at the end",
    ".tolist()": "keep the running values on the device; move one number to the host at the end",
    ".numpy()": "keep the running values on the device; move one number to the host at the end",
}
QUIET_HINT = (
    "Keep two running tensors on the device: total = total + loss.detach() and "
    "worst = torch.maximum(worst, loss.detach()). After the loop: if worst.item() > 100: raise RuntimeError(...); "
    "return total.item() / len(batches)."
)


SIDE = 8  # the checks train a small CNN on 8x8 images: the same kinds of layers as Tudui, a fraction of the work


def _net() -> nn.Sequential:
    """A small image classifier: convolution first (autocast runs it in 16 bits), then a linear layer."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * (SIDE // 2) ** 2, 10)
    )


def _batches(device, n: int, scale: float = 1.0, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            (scale * torch.rand(8, 3, SIDE, SIDE, generator=gen)).to(device),
            torch.randint(0, 10, (8,), generator=gen).to(device),
        )
        for _ in range(n)
    ]


def _setup(device):
    torch.manual_seed(0)
    model = _net().to(device)
    return model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01)


@functools.cache
def _reference(device: torch.device) -> tuple[float, list[torch.Tensor]]:
    """The original loop's mean loss over 6 batches and the weights it leaves (computed once per device)."""
    model, loss_fn, optimizer = _setup(device)
    expected = _reference_loop(model, _batches(device, 6), loss_fn, optimizer)
    return expected, [p.detach().clone() for p in model.parameters()]


def _reference_loop(model, batches, loss_fn, optimizer) -> float:
    total = 0.0
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(batches)


def _try(fn, *args):
    """Call the learner's code with its printing hidden (it may print losses that vary by machine).

    Returns (result, None) or (None, the exception); prints nothing.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*args), None
    except Exception as err:  # the learner's bug is the feedback
        return None, err


def _report(err: Exception, when: str = "", hint: str = ""):
    if isinstance(err, NotImplementedError) and not str(err):  # the starter's bare `raise NotImplementedError`
        return failed(NOT_WRITTEN)
    where = f"{when}, your" if when else "Your"
    return failed(f"{where} code raised {type(err).__name__}: {err}", hint)


@exercise_check
def quiet_loop(fn):
    """``fn(model, batches, loss_fn, optimizer)``: train on each batch; return the mean loss per batch as a
    float; raise RuntimeError if any loss exceeded 100; no host synchronisation per step (a few after the
    loop are fine)."""
    device = pick_device()
    counts, logs = {}, {}
    for n in (3, 6):
        learner_model, loss_fn, optimizer = _setup(device)
        batches = _batches(device, n)
        with record_syncs() as log:
            result, error = _try(fn, learner_model, batches, loss_fn, optimizer)
        if error is not None:
            return _report(error, hint=QUIET_HINT)
        counts[n], logs[n] = len(log), log
    if counts[6] > counts[3]:
        extra = logs[6].counts() - logs[3].counts()
        per_step = ", ".join(f"{n // 3} x {name}" for name, n in extra.most_common())
        fixes = "; ".join(dict.fromkeys(SYNC_FIXES.get(name, "") for name in extra))
        return failed(
            f"Your loop still makes host synchronisations every step: {per_step} per step "
            f"({counts[3]} in 3 steps, {counts[6]} in 6). On a GPU each one makes the CPU wait for the GPU.",
            f"{fixes}. {QUIET_HINT}",
        )
    expected, reference_weights = _reference(device)
    if isinstance(result, torch.Tensor):
        return failed("Your function returns a tensor: return a Python float (one .item() after the loop).", QUIET_HINT)
    if not isinstance(result, float | int) or abs(result - expected) > 1e-4 * max(1.0, abs(expected)):
        return failed(
            f"Your function returns {result!r}; the mean loss per batch over these 6 batches is {expected:.4f}.",
            "Sum every batch's loss on the device and divide by len(batches) at the end.",
        )
    pairs = zip(learner_model.parameters(), reference_weights, strict=True)  # the model trained on 6 batches
    if not all(torch.allclose(a, b, atol=1e-5) for a, b in pairs):
        return failed(
            "The returned loss is right, but the model was not trained as the original loop trains it.",
            "Keep zero_grad(), backward() and step() for every batch, in that order.",
        )
    model, loss_fn, optimizer = _setup(device)
    _, error = _try(fn, model, _batches(device, 1, scale=1e5), loss_fn, optimizer)
    if not isinstance(error, RuntimeError):
        return failed(
            "With a loss far over 100 your function did not raise RuntimeError: the check that a run diverged is gone.",
            "Keep the largest loss on the device (torch.maximum) and test it once after the loop.",
        )
    return passed(
        f"{counts[6]} host synchronisation(s) in 6 steps, as in 3: none per step. The same mean loss and "
        "weights as the original loop, and a diverged run still raises."
    )


# ---------------------------------------------------------------- Exercise 2: a loader that stays on the device

LOADER_HINT = (
    "In __iter__: order = torch.randperm(n, device=self.images.device); then for each start in "
    "range(0, n, batch_size): idx = order[start:start + batch_size]; yield self.images[idx], self.labels[idx]."
)


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _numbered(n: int, device):
    """Image i is filled with the value i, label i is i: a batch tells which samples it holds."""
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 4, 4).contiguous()
    return images.to(device), torch.arange(n).to(device)


def _epoch(loader):
    return list(loader)


@exercise_check
def device_loader(cls):
    """``cls(images, labels, batch_size)``: iterating gives shuffled ``(images, labels)`` batches on the data's
    device, a new order each epoch, every sample once, the last batch possibly smaller; ``len()`` is the
    number of batches."""
    device, n, bs = pick_device(), 50, 16
    images, labels = _numbered(n, device)
    loader, error = _try(cls, images, labels, bs)
    if error is not None:
        return _report(error, hint=LOADER_HINT)
    torch.manual_seed(0)
    ops = _OpCounter()
    with record_syncs() as log, ops:
        first, error = _try(_epoch, loader)
    if error is not None:
        return _report(error, hint=LOADER_HINT)
    if not first or not all(isinstance(b, tuple | list) and len(b) == 2 for b in first):
        return failed("Iterating your loader must give (images, labels) pairs.", LOADER_HINT)
    places = {t.device for b in first for t in b}
    if places != {images.device}:
        moves = f" ({log})" if len(log) else ""
        return failed(
            f"Your batches are on {', '.join(sorted(map(str, places)))}, the data on {images.device}{moves}: "
            "a loader that keeps data on the device slices it there and gives it back there.",
            LOADER_HINT,
        )
    if len(log):
        return failed(
            f"One epoch of your loader makes {len(log)} host synchronisation(s) ({log}): on a GPU each one "
            "waits for the GPU. Shuffle with a tensor of indices, not a Python list.",
            LOADER_HINT,
        )
    if ops.count >= n:
        return failed(
            f"One epoch ran {ops.count} tensor operations for {n} samples: your loader handles the samples one "
            "at a time (as a DataLoader over a TensorDataset does). Index a whole batch at once.",
            LOADER_HINT,
        )
    got_labels = torch.cat([b[1] for b in first]).cpu()
    got_images = torch.cat([b[0] for b in first]).cpu()
    sizes = [len(b[1]) for b in first]
    if sorted(got_labels.tolist()) != list(range(n)):
        missing = n - len(set(got_labels.tolist()))
        return failed(
            f"One epoch gave {len(got_labels)} samples, {missing} of the {n} missing"
            + (" (the last, smaller batch was dropped)." if len(got_labels) < n else "."),
            "Every sample once per epoch: slice the permutation in steps of batch_size up to n, keeping the "
            "last, smaller batch.",
        )
    if sizes[:-1] != [bs] * (len(sizes) - 1):
        return failed(f"Batch sizes {sizes}: all but the last must be {bs}.", LOADER_HINT)
    if not torch.equal(got_images[:, 0, 0, 0].long(), got_labels):
        return failed(
            "Images and labels do not match any more: they were shuffled with different orders.",
            "Draw one permutation per epoch and index both tensors with it.",
        )
    if torch.equal(got_labels, torch.arange(n)):
        return failed("The first epoch gives the samples in their stored order: it is not shuffled.", LOADER_HINT)
    second = _epoch(loader)
    if torch.equal(torch.cat([b[1] for b in second]).cpu(), got_labels):
        return failed(
            "Two epochs give the same order: the permutation is drawn once (in __init__?), not each epoch.",
            "Draw the permutation in __iter__, so each epoch gets a new one.",
        )
    if len(loader) != len(first):
        return failed(f"len() of your loader is {len(loader)}, but an epoch has {len(first)} batches.",
                      "__len__: (n + batch_size - 1) // batch_size.")  # fmt: skip
    meta_images, meta_labels = torch.empty(n, 3, 4, 4, device=OTHER_DEVICE), torch.empty(n, device=OTHER_DEVICE)
    meta_loader, error = _try(cls, meta_images, meta_labels, bs)
    if error is None:
        meta_batches, error = _try(_epoch, meta_loader)
    if error is not None:
        return _report(error, when=f"With data on {OTHER_DEVICE} (a device that is never the CPU)", hint=LOADER_HINT)
    places = {t.device for b in meta_batches for t in b}
    if places != {OTHER_DEVICE}:
        return failed(
            f"With data on {OTHER_DEVICE} (a device that is never the CPU), your batches are on "
            f"{', '.join(sorted(map(str, places)))}: the loader moves the data.",
            LOADER_HINT,
        )
    return passed(
        f"{len(first)} batches per epoch, on {images.device}, every sample once, a new order each epoch, "
        "no host synchronisation."
    )


# ---------------------------------------------------------------- Exercise 3: a mixed-precision step

AMP_HINT = (
    "with torch.autocast(device_type=imgs.device.type, dtype=dtype): loss = loss_fn(model(imgs), targets); "
    "then optimizer.zero_grad(); scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update(); "
    "return loss. dtype: torch.bfloat16 on the CPU (and CUDA GPUs that have it), else torch.float16."
)
LOW = (torch.bfloat16, torch.float16)
INIT_SCALE = 2.0**8


def _amp_setup(device):
    torch.manual_seed(0)
    model = _net().to(device)
    gen = torch.Generator().manual_seed(1)
    imgs = torch.rand(16, 3, SIDE, SIDE, generator=gen).to(device)
    targets = torch.randint(0, 10, (16,), generator=gen).to(device)
    return model, imgs, targets, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.05)


@functools.cache
def _amp_reference(device: torch.device, dtype: torch.dtype):
    """Computed once per device and type: the initial weights, the loss under autocast, a float32 step's update."""
    model, imgs, targets, loss_fn, optimizer = _amp_setup(device)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
        loss = loss_fn(model(imgs), targets).float()
    fp32_loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    fp32_loss.backward()
    optimizer.step()
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)])
    return before, loss, delta


def _autocast_types() -> list[str]:
    """The device types torch.autocast is on for right now."""
    return [t for t in ("cpu", "cuda", "mps", "xpu") if torch.is_autocast_enabled(t)]


def _amp_check_on(fn, device):
    model, imgs, targets, loss_fn, optimizer = _amp_setup(device)
    seen = []
    autocast_on = set()  # the device types autocast was on for during the forward pass

    def look(module, inputs, output):
        seen.append(output.dtype)
        autocast_on.update(_autocast_types())

    model[0].register_forward_hook(look)
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE, growth_interval=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss, error = _try(fn, model, imgs, targets, loss_fn, optimizer, scaler)
    if error is not None:
        if "_scale is None" in str(error):
            return failed(
                f"On {device}, scaler.step() found no scaled loss: call scaler.scale(loss).backward() first.",
                AMP_HINT,
            )
        if "No inf checks were recorded" in str(error):
            return failed(
                f"On {device}, scaler.update() found no scaler.step(optimizer): step through the scaler. It unscales "
                "the gradients first (optimizer.step() alone moves the weights by the scaled gradients) and skips "
                "a step whose gradients hold inf or NaN.",
                AMP_HINT,
            )
        return _report(error, when=f"On {device}", hint=AMP_HINT)
    disabled = [str(w.message) for w in caught if "isabl" in str(w.message)]
    if any(p.dtype != torch.float32 for p in model.parameters()):
        return failed(
            "Your step changed the model's weights to a lower precision (.half() or .to(bfloat16)). Autocast keeps "
            "the weights in float32 and runs selected operations in lower precision.",
            AMP_HINT,
        )
    if not seen or seen[0] not in LOW:
        must = f"its device_type must be the tensors' device type, {device.type!r} here."
        if disabled:
            why = f" Autocast disabled itself with a warning ({disabled[0]}): {must}"
        elif autocast_on:
            why = f" Autocast was on for {', '.join(sorted(map(repr, autocast_on)))}, not for {device.type!r}: {must}"
        else:
            why = ""
        return failed(
            f"On {device} the first convolution ran in {seen[0] if seen else 'no'} precision: the forward pass did "
            f"not run under torch.autocast for this device.{why}",
            AMP_HINT,
        )
    if scaler._scale is None:
        return failed(
            "The GradScaler was never used. On a CUDA GPU in float16, small gradients underflow to zero without it "
            "(here it is enabled, as it is there).",
            AMP_HINT,
        )
    before, ref_loss, ref_delta = _amp_reference(device, seen[0])
    delta = torch.cat([(p.detach() - b).flatten().float() for p, b in zip(model.parameters(), before, strict=True)])
    if float(delta.norm()) == 0:
        return failed("The model's weights did not change: the step did not update them.", AMP_HINT)
    ratio = float(delta.norm() / ref_delta.norm())
    if ratio > 4:
        return failed(
            f"The weights moved about {ratio:.0f} times too far: the gradients were still multiplied by the "
            f"scale ({INIT_SCALE:.0f}) when the optimizer stepped. Use scaler.step(optimizer): it unscales first.",
            AMP_HINT,
        )
    if ratio < 0.25 or float(torch.nn.functional.cosine_similarity(delta, ref_delta, dim=0)) < 0.9:
        return failed(
            f"The weights moved {ratio:.3f} times as far as a float32 step would: the gradients were divided by "
            "the scale without having been multiplied by it. Call backward() on scaler.scale(loss).",
            AMP_HINT,
        )
    if scaler.get_scale() == INIT_SCALE:
        return failed(
            "scaler.update() was not called: the scale never adapts (it must shrink after an overflow and grow "
            "after good steps).",
            AMP_HINT,
        )
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        return failed(f"Return the loss tensor (got {type(loss).__name__}).", AMP_HINT)
    if abs(float(loss.detach().float()) - float(ref_loss)) > 0.05 * abs(float(ref_loss)) + 1e-3:
        return failed(
            f"Your step returns {float(loss.detach().float()):.4g}, the loss is {float(ref_loss):.4g}: return the "
            "loss itself, not scaler.scale(loss).",
            AMP_HINT,
        )
    return None, seen[0]


@exercise_check
def amp_step(fn):
    """``fn(model, imgs, targets, loss_fn, optimizer, scaler)``: one training step with the forward pass under
    ``torch.autocast`` for the tensors' device, the backward pass and optimizer step through ``scaler``;
    returns the loss."""
    devices = list(dict.fromkeys([torch.device("cpu"), pick_device()]))
    untested = [d for d in devices if not grad_scaler_works(d)]  # MPS before torch 2.8: no GradScaler there
    devices = [d for d in devices if d not in untested]
    used = {}
    for device in devices:
        verdict = _amp_check_on(fn, device)
        if not isinstance(verdict, tuple):
            return verdict
        used[device] = verdict[1]
    where = "; ".join(f"{str(dt).replace('torch.', '')} on {d}" for d, dt in used.items())
    also = "".join(f" (Not run on {d}: this torch's GradScaler does not work there; 2.8 adds it.)" for d in untested)
    return passed(f"Autocast ran the forward pass in {where}; weights stayed float32; the scaler scaled, unscaled "
                  f"and updated.{also}")  # fmt: skip
