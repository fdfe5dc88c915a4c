"""Checks for notebook 06's exercises (speed).

They judge what a GPU would observe, on any machine: the host synchronisations a loop makes (counted
by :mod:`helpers.lab.sync_recorder`, the same on every device, over runs long enough to see one every few
steps), where batches live and where their indices come from (also run with the data on ``meta``, a device
that is never the CPU, where a ``torch.Generator`` for the data's device is made on the CPU), and what a
mixed-precision step computes (with a GradScaler that is really enabled, as it is for float16 on a CUDA
GPU; once with an inf gradient, which must skip the step; and, without a CUDA GPU, with tensors that
report ``cuda``, to see the autocast device type follow the data: :mod:`helpers.exercises.speed_amp`, which
also holds what the three checks share).

Feedback says what is wrong, where it was observed and which section of the notebook to reread; it never
shows the solution's code.
"""

from __future__ import annotations

import functools
from unittest import mock

import torch

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import OTHER_DEVICE, exercise_check, failed, passed
from helpers.exercises.speed_amp import (
    AMP_HINT,
    CLEARED,
    amp_verdict,
    autocast_follows_data,
    fresh_setup,
    quietly,
    random_batches,
    report,
)
from helpers.lab.gpu_rules import HostGenerator
from helpers.lab.op_recorder import CountOps
from helpers.lab.sync_recorder import BLOCKING_COPY, CPU_INDICES, NEW_ON_DEVICE, PAGEABLE_COPY, record_syncs
from helpers.lab.training_watch import StepWatch
from helpers.lesson.devices import pick_device
from helpers.lesson.speed import grad_scaler_works

# ---------------------------------------------------------------- Exercise 1: a loop without hidden syncs

SYNC_FIXES = {  # the recorder's name for a synchronisation: what to do instead
    ".item() / float() / int() / bool() / `if` on a tensor": tr_lazy(
        "`.item()`, `float()`, an `if` on a tensor (`if loss > 100`) and an f-string of a tensor each read a value "
        "on the host: keep what the loop collects (the sum, the largest loss) as tensors on the device and read them "
        "after the loop"
    ),
    "print() or repr() of a tensor": tr_lazy("printing a tensor reads it on the host: do not print inside the loop"),
    ".cpu()": tr_lazy("a tensor moved to the host inside the loop is a wait: move one result after the loop"),
    ".tolist()": tr_lazy("a tensor turned into a list inside the loop is a wait: do it once after the loop"),
    ".numpy()": tr_lazy("a tensor turned into an array inside the loop is a wait: do it once after the loop"),
}
WHERE_SYNCS = tr_lazy(
    "Section 1, 'Hidden synchronisations', lists the calls that make the CPU wait and what to do instead."
)
SHORT_RUN, LONG_RUN = 5, 30  # long enough to see a sync that comes every few steps (`if step % 10 == 0: print(...)`)


@functools.cache
def _reference(device: torch.device) -> tuple[float, list[torch.Tensor]]:
    """The original loop's mean loss over LONG_RUN batches and the weights it leaves (computed once per device)."""
    model, loss_fn, optimizer = fresh_setup(device)
    expected = _reference_loop(model, random_batches(device, LONG_RUN), loss_fn, optimizer)
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


def _per_step(extra, more: int) -> str:
    parts = []
    for name, n in extra.most_common():
        if n % more == 0:
            parts.append(tr("{n} x {name} per step", n=n // more, name=tr(name)))
        else:
            parts.append(tr("{n} more x {name} in {more} more steps", n=n, name=tr(name), more=more))
    return tr(", ").join(parts)


@exercise_check
def quiet_loop(fn):
    """``fn(model, batches, loss_fn, optimizer)``: train on each batch; return the mean loss per batch as a
    float; raise RuntimeError if any loss exceeded 100; no host synchronisation per step (a few after the
    loop are fine)."""
    device = pick_device()
    counts, logs = {}, {}
    for n in (SHORT_RUN, LONG_RUN):
        learner_model, loss_fn, optimizer = fresh_setup(device)
        steps = StepWatch(optimizer)
        batches = random_batches(device, n)
        with record_syncs() as log:
            result, error = quietly(fn, learner_model, batches, loss_fn, optimizer)
        if error is not None:
            return report(error, when=tr("On {device} with {n} batches", device=str(device), n=n), hint=tr(WHERE_SYNCS))
        counts[n], logs[n] = len(log), log
    if counts[LONG_RUN] > counts[SHORT_RUN]:
        more = LONG_RUN - SHORT_RUN
        extra = logs[LONG_RUN].counts() - logs[SHORT_RUN].counts()
        fixes = tr("; ").join(dict.fromkeys(tr(SYNC_FIXES[name]) for name in extra if name in SYNC_FIXES))
        return failed(
            tr(
                "Your loop makes host synchronisations that grow with the number of steps: {short_count} in "
                "{short} steps, {long_count} in {long} ({per_step}). Observed on {device} with {short} and {long} "
                "batches, counted by the recorder of section 1 (what a GPU would wait for). On a GPU each one makes "
                "the CPU wait until the GPU has finished.",
                short_count=counts[SHORT_RUN],
                short=SHORT_RUN,
                long_count=counts[LONG_RUN],
                long=LONG_RUN,
                per_step=_per_step(extra, more),
                device=str(device),
            ),
            tr("{fixes}. {where}", fixes=fixes, where=tr(WHERE_SYNCS)) if fixes else tr(WHERE_SYNCS),
        )
    if steps.cleared():
        return failed(
            tr(
                "Your loop trains nothing: {cleared} (observed on {device}, {n} batches).",
                cleared=tr(CLEARED),
                device=str(device),
                n=LONG_RUN,
            ),
            tr("Each step: clear the old gradients, then backward(), then step()."),
        )
    expected, reference_weights = _reference(device)
    if isinstance(result, torch.Tensor):
        return failed(
            tr(
                "Your function returns a tensor: the statement asks for a Python float (read on the host once, after "
                "the loop)."
            ),
            tr(WHERE_SYNCS),
        )
    if not isinstance(result, float | int) or abs(result - expected) > 1e-4 * max(1.0, abs(expected)):
        return failed(
            tr(
                "Your function returns {result!r}; the mean loss per batch over these {n} batches (on {device}) is "
                "{expected:.4f}.",
                result=result,
                n=LONG_RUN,
                device=str(device),
                expected=expected,
            ),
            tr("Add up every batch's loss and divide by the number of batches, once, after the loop."),
        )
    pairs = zip(learner_model.parameters(), reference_weights, strict=True)  # the model trained on LONG_RUN batches
    if not all(torch.allclose(a, b, atol=1e-5) for a, b in pairs):
        return failed(
            tr(
                "The returned loss is right, but after {n} batches the weights differ from the original loop's.",
                n=LONG_RUN,
            ),
            tr("Keep zero_grad(), backward() and step() for every batch, in that order."),
        )
    model, loss_fn, optimizer = fresh_setup(device)
    _, error = quietly(fn, model, random_batches(device, 1, scale=1e5), loss_fn, optimizer)
    if not isinstance(error, RuntimeError):
        return failed(
            tr(
                "With a loss far over 100 (inputs scaled by 1e5) your function did not raise RuntimeError: the check "
                "that a run diverged is gone."
            ),
            tr("Keep the largest loss as a tensor on the device during the loop and test it once after the loop."),
        )
    return passed(
        tr(
            "{count} host synchronisation(s) in {long} steps, as in {short}: none per step. The same mean loss and "
            "weights as the original loop, and a diverged run still raises.",
            count=counts[LONG_RUN],
            long=LONG_RUN,
            short=SHORT_RUN,
        )
    )


# ---------------------------------------------------------------- Exercise 2: a loader that stays on the device

LOADER_WHERE = tr_lazy(
    "Section 3, 'The data kept on the device', describes such a loader (one permutation per epoch, drawn where the "
    "data is, sliced into batches); section 1 lists what makes the CPU wait."
)
DRAW_ON_DEVICE = tr_lazy("Draw the random order where the data is (the random functions take a device).")


def _numbered(n: int, device):
    """Image i is filled with the value i, label i is i: a batch tells which samples it holds."""
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 4, 4).contiguous()
    return images.to(device), torch.arange(n).to(device)


def _epoch(loader):
    return list(loader)


def _sync_failure(when: str, log):
    """What one epoch's synchronisations (or GPU-refused indexing) mean, the same wherever they were seen."""
    if log.mixed:
        return failed(
            tr(
                "{when}, your loader calls {call}: on a CUDA GPU that raises 'Expected all tensors to be on the same "
                "device' (the indices must be where the data is).",
                when=when,
                call=log.mixed[0],
            ),
            tr("{advice} {where}", advice=tr(DRAW_ON_DEVICE), where=tr(LOADER_WHERE)),
        )
    if len(log):
        kinds = log.counts()
        if CPU_INDICES in kinds:
            why = tr(
                "the order (or the indices) is drawn on the CPU and indexes data on the device: on a CUDA GPU each "
                "batch first copies its indices to the GPU, and the CPU waits for that copy"
            )
            advice = tr(DRAW_ON_DEVICE)
        elif PAGEABLE_COPY in kinds:
            why = tr(
                "non_blocking=True makes a copy to a CUDA GPU asynchronous only from pinned memory; a tensor just made "
                "on the CPU is in pageable memory, so the argument has no effect and the CPU waits for the copy (on "
                "a Mac, a non-blocking copy has no guarantee without a synchronisation at all)"
            )
            advice = tr(
                "{draw} Section 2, 'Host to device copies', says when non_blocking=True makes a copy asynchronous.",
                draw=tr(DRAW_ON_DEVICE),
            )
        elif BLOCKING_COPY in kinds or NEW_ON_DEVICE in kinds:
            why = tr("a copy from the CPU to the device that the CPU waits for (on a CUDA GPU, behind all queued work)")
            advice = tr(DRAW_ON_DEVICE)
        else:
            why = tr("on a GPU each one makes the CPU wait for the GPU")
            advice = tr("Keep the order as a tensor where the data is and index with slices of it (no Python list).")
        return failed(
            tr(
                "{when}, one epoch of your loader makes {n} host synchronisation(s) ({log}): {why}.",
                when=when,
                n=len(log),
                log=str(log),
                why=why,
            ),
            tr("{advice} {where}", advice=advice, where=tr(LOADER_WHERE)),
        )
    return None


def _on_other_device(cls, n: int, bs: int):
    """The loader built and read for one epoch with its data on meta: (batches, sync log) or a verdict."""
    images, labels = torch.empty(n, 3, 4, 4, device=OTHER_DEVICE), torch.empty(n, device=OTHER_DEVICE)
    when = tr("With data on {device} (a device that is never the CPU, standing in for a GPU)", device=str(OTHER_DEVICE))
    with mock.patch.object(torch, "Generator", HostGenerator), record_syncs() as log:
        loader, error = quietly(cls, images, labels, bs)
        if error is None:
            batches, error = quietly(_epoch, loader)
    if error is not None:
        return report(error, when=when, hint=tr(LOADER_WHERE))
    places = {t.device for b in batches for t in b}
    if places != {OTHER_DEVICE}:
        return failed(
            tr(
                "{when}, your batches are on {places}: the loader moves the data.",
                when=when,
                places=", ".join(sorted(map(str, places))),
            ),
            tr(LOADER_WHERE),
        )
    if log.mixed or len(log):
        return _sync_failure(when, log)
    return None


@exercise_check
def device_loader(cls):
    """``cls(images, labels, batch_size)``: iterating gives shuffled ``(images, labels)`` batches on the data's
    device, a new order each epoch, every sample once, the last batch possibly smaller; ``len()`` is the
    number of batches."""
    device, n, bs = pick_device(), 50, 16
    where = tr("on {device}, {n} samples in batches of {bs}", device=str(device), n=n, bs=bs)
    images, labels = _numbered(n, device)
    loader, error = quietly(cls, images, labels, bs)
    if error is not None:
        return report(error, hint=tr(LOADER_WHERE))
    torch.manual_seed(0)
    ops = CountOps()
    with record_syncs() as log, ops:
        first, error = quietly(_epoch, loader)
    if error is not None:
        return report(error, when=tr("Reading one epoch ({where})", where=where), hint=tr(LOADER_WHERE))
    if not first or not all(isinstance(b, tuple | list) and len(b) == 2 for b in first):
        return failed(tr("Iterating your loader ({where}) must give (images, labels) pairs.", where=where),
                      tr(LOADER_WHERE))  # fmt: skip
    places = {t.device for b in first for t in b}
    if places != {images.device}:
        on = ", ".join(sorted(map(str, places)))
        if len(log):
            message = tr(
                "Your batches are on {places}, the data on {device} ({log}): a loader that keeps data on the device "
                "slices it there and gives it back there.",
                places=on,
                device=str(images.device),
                log=str(log),
            )
        else:
            message = tr(
                "Your batches are on {places}, the data on {device}: a loader that keeps data on the device slices "
                "it there and gives it back there.",
                places=on,
                device=str(images.device),
            )
        return failed(message, tr(LOADER_WHERE))
    if log.mixed or len(log):
        return _sync_failure(tr("Reading one epoch ({where})", where=where), log)
    if ops.count >= n:
        return failed(
            tr(
                "One epoch ran {ops} tensor operations for {n} samples: your loader handles the samples one at a "
                "time (as a DataLoader over a TensorDataset does). Index a whole batch at once.",
                ops=ops.count,
                n=n,
            ),
            tr(LOADER_WHERE),
        )
    got_labels = torch.cat([b[1] for b in first]).cpu()
    got_images = torch.cat([b[0] for b in first]).cpu()
    sizes = [len(b[1]) for b in first]
    if sorted(got_labels.tolist()) != list(range(n)):
        missing = n - len(set(got_labels.tolist()))
        if len(got_labels) < n:
            message = tr(
                "One epoch ({where}) gave {got} samples, {missing} of the {n} missing (the last, smaller batch was "
                "dropped).",
                where=where,
                got=len(got_labels),
                missing=missing,
                n=n,
            )
        else:
            message = tr(
                "One epoch ({where}) gave {got} samples, {missing} of the {n} missing.",
                where=where,
                got=len(got_labels),
                missing=missing,
                n=n,
            )
        return failed(
            message,
            tr("Every sample once per epoch: batches of batch_size up to n, keeping the last, smaller batch."),
        )
    if sizes[:-1] != [bs] * (len(sizes) - 1):
        return failed(
            tr("Batch sizes {sizes} ({where}): all but the last must be {bs}.", sizes=sizes, where=where, bs=bs),
            tr(LOADER_WHERE),
        )
    if not torch.equal(got_images[:, 0, 0, 0].long(), got_labels):
        return failed(
            tr(
                "Images and labels do not match any more ({where}): they were shuffled with different orders.",
                where=where,
            ),
            tr("Use one permutation per epoch for both tensors."),
        )
    if torch.equal(got_labels, torch.arange(n)):
        return failed(
            tr("The first epoch ({where}) gives the samples in their stored order: it is not shuffled.", where=where),
            tr(LOADER_WHERE),
        )
    second, error = quietly(_epoch, loader)
    if error is not None:
        return report(error, when=tr("Reading a second epoch ({where})", where=where), hint=tr(LOADER_WHERE))
    second_labels = torch.cat([b[1] for b in second]).cpu() if second else torch.zeros(0, dtype=torch.long)
    if sorted(second_labels.tolist()) != list(range(n)):
        return failed(
            tr(
                "The second epoch ({where}) gave {got} samples, not each of the {n} once: the loader must start a "
                "new pass every time it is iterated.",
                where=where,
                got=len(second_labels),
                n=n,
            ),
            tr(LOADER_WHERE),
        )
    if torch.equal(second_labels, got_labels):
        return failed(
            tr(
                "Two epochs ({where}) give the same order: the samples are shuffled once (when the loader is "
                "built?), not for each epoch.",
                where=where,
            ),
            tr("Shuffle at the start of every pass over the data (each call of __iter__)."),
        )
    for size in (n, 48, 64, 7):  # sizes that split evenly into batches and sizes that do not
        sized = cls(*_numbered(size, device), bs) if size != n else loader
        batches = -(-size // bs)
        if len(sized) != batches:
            return failed(
                tr(
                    "len() of your loader is {length} for {size} samples in batches of {bs}; an epoch has {batches} "
                    "batches.",
                    length=len(sized),
                    size=size,
                    bs=bs,
                    batches=batches,
                ),
                tr(
                    "len() counts the batches of one epoch: the full ones plus one smaller batch only if samples are "
                    "left over."
                ),
            )
    verdict = _on_other_device(cls, n, bs)
    if verdict is not None:
        return verdict
    return passed(
        tr(
            "{count} batches per epoch, on {device}, every sample once, a new order each epoch, no host "
            "synchronisation (also with the data on {other}, standing in for a GPU).",
            count=len(first),
            device=str(images.device),
            other=str(OTHER_DEVICE),
        )
    )


# ---------------------------------------------------------------- Exercise 3: a mixed-precision step


# ---------------------------------------------------------------- Exercise 3: a mixed-precision step (speed_amp)


@exercise_check
def amp_step(fn):
    """``fn(model, imgs, targets, loss_fn, optimizer, scaler)``: one training step with the forward pass under
    ``torch.autocast`` for the tensors' device, the backward pass and optimizer step through ``scaler``;
    returns the loss."""
    devices = list(dict.fromkeys([torch.device("cpu"), pick_device()]))
    untested = [d for d in devices if not grad_scaler_works(d)]  # MPS before torch 2.8: no GradScaler there
    devices = [d for d in devices if d not in untested]
    for device in devices:
        verdict = amp_verdict(fn, device)
        if not isinstance(verdict, tuple):
            return verdict
    if all(d.type != "cuda" for d in devices):  # a CPU-only machine: is the autocast device type read from the data?
        autocast_on = autocast_follows_data(fn)
        if autocast_on is not None and "cuda" not in autocast_on:
            on = ", ".join(map(repr, autocast_on)) or tr("no device type")
            return failed(
                tr(
                    "With the model and tensors on a CUDA GPU (simulated: tensors that report device cuda:0), your "
                    "forward pass ran with autocast on for {on}, not for 'cuda': the device type is fixed in your "
                    "code. It must come from the tensors (or the model), so that the same step runs in 16 bits on "
                    "every device.",
                    on=on,
                ),
                tr(AMP_HINT),
            )
    return passed(
        tr(
            "Autocast ran your forward pass in 16 bits for the device of its tensors, the weights stayed float32, "
            "the scaler scaled, unscaled and updated, and a step with inf gradients was skipped."
        )
    )


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy(
        "`fn(model, batches, loss_fn, optimizer)`: train on each batch; return the mean loss per batch as a float; "
        "raise RuntimeError if any loss exceeded 100; no host synchronisation per step (a few after the loop are "
        "fine)."
    ),
    tr_lazy(
        "`cls(images, labels, batch_size)`: iterating gives shuffled `(images, labels)` batches on the data's "
        "device, a new order each epoch, every sample once, the last batch possibly smaller; `len()` is the number "
        "of batches."
    ),
    tr_lazy(
        "`fn(model, imgs, targets, loss_fn, optimizer, scaler)`: one training step with the forward pass under "
        "`torch.autocast` for the tensors' device, the backward pass and optimizer step through `scaler`; returns "
        "the loss."
    ),
)
