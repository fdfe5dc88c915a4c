"""The checks of notebook 06 accept right answers and explain typical wrong ones."""

import pytest
import torch

from helpers.exercises import ex06_speed as check


def unwritten(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- (1) a loop without hidden syncs
def starter_loop(model, batches, loss_fn, optimizer):
    total = 0.0
    for step, (imgs, targets) in enumerate(batches):
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        if loss > 100:
            raise RuntimeError("the loss diverged")
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    return total / len(batches)


def quiet_detach(model, batches, loss_fn, optimizer):
    total = torch.zeros((), device=batches[0][0].device)
    worst = torch.zeros((), device=batches[0][0].device)
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
        worst = torch.maximum(worst, loss.detach())
    if worst.item() > 100:
        raise RuntimeError("the loss diverged")
    return total.item() / len(batches)


def quiet_stack(model, batches, loss_fn, optimizer):
    losses = []
    for imgs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(imgs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    losses = torch.stack(losses).cpu()  # one copy to the host
    if (losses > 100).any():
        raise RuntimeError("diverged")
    return float(losses.mean())


def quiet_one_sync(model, batches, loss_fn, optimizer):
    stats = None
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        row = torch.stack([loss.detach(), loss.detach()])
        stats = row if stats is None else torch.stack([stats[0] + row[0], torch.maximum(stats[1], row[1])])
    total, worst = stats.tolist()  # both numbers in one trip
    if worst > 100:
        raise RuntimeError("diverged")
    return total / len(batches)


def quiet_inplace(model, batches, loss_fn, optimizer):
    device = next(model.parameters()).device
    total = torch.tensor(0.0, device=device)
    diverged = torch.tensor(False, device=device)
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())
        diverged |= loss.detach() > 100
    if diverged:
        raise RuntimeError("diverged")
    return (total / len(batches)).item()


def quiet_numpy(model, batches, loss_fn, optimizer):
    losses = torch.empty(len(batches), device=batches[0][1].device)
    for i, (imgs, targets) in enumerate(batches):
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[i] = loss.detach()
    values = losses.cpu().numpy()
    if values.max() > 100:
        raise RuntimeError("diverged")
    return float(values.mean())


def loop_no_divergence_check(model, batches, loss_fn, optimizer):
    total = torch.zeros(())
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
    return total.item() / len(batches)


def loop_returns_tensor(model, batches, loss_fn, optimizer):
    total, worst = 0, torch.zeros(())
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
        worst = torch.maximum(worst, loss.detach())
    if worst.item() > 100:
        raise RuntimeError("diverged")
    return total / len(batches)


def loop_if_each_step(model, batches, loss_fn, optimizer):
    total = 0
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
        if loss > 100:
            raise RuntimeError("diverged")
    return total.item() / len(batches)


def loop_sum_not_mean(model, batches, loss_fn, optimizer):
    total, worst = 0, torch.zeros(())
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
        worst = torch.maximum(worst, loss.detach())
    if worst.item() > 100:
        raise RuntimeError("diverged")
    return total.item()


def loop_item_every_10_steps(model, batches, loss_fn, optimizer):
    total = torch.zeros((), device=batches[0][0].device)
    worst = torch.zeros((), device=batches[0][0].device)
    for step, (imgs, targets) in enumerate(batches):
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
        worst = torch.maximum(worst, loss.detach())
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.3f}")  # a wait every 10 steps
    if worst.item() > 100:
        raise RuntimeError("the loss diverged")
    return total.item() / len(batches)


def loop_zero_grad_between(model, batches, loss_fn, optimizer):
    total = torch.zeros((), device=batches[0][0].device)
    worst = torch.zeros((), device=batches[0][0].device)
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        loss.backward()
        optimizer.zero_grad()  # clears what backward() just computed
        optimizer.step()
        total = total + loss.detach()
        worst = torch.maximum(worst, loss.detach())
    if worst.item() > 100:
        raise RuntimeError("the loss diverged")
    return total.item() / len(batches)


@pytest.mark.parametrize("fn", [quiet_detach, quiet_stack, quiet_one_sync, quiet_inplace, quiet_numpy])
def test_quiet_loop_accepts(fn, capsys):
    assert check.quiet_loop(fn), capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (starter_loop, "grow with the number of steps: 11 in 5 steps, 63 in 30"),
        (starter_loop, "Section 1, 'Hidden synchronisations'"),
        (loop_if_each_step, "1 x .item() / float() / int() / bool() / `if` on a tensor per step"),
        (loop_if_each_step, "an `if` on a tensor (`if loss > 100`)"),
        (loop_item_every_10_steps, "3 in 5 steps, 5 in 30 (2 more x .item()"),
        (loop_zero_grad_between, "zero_grad() ran between backward() and step()"),
        (loop_no_divergence_check, "did not raise RuntimeError"),
        (loop_returns_tensor, "returns a tensor"),
        (loop_sum_not_mean, "mean loss per batch"),
    ],
)
def test_quiet_loop_explains(fn, fragment, capsys):
    assert not check.quiet_loop(fn)
    assert fragment in capsys.readouterr().out


def test_quiet_loop_feedback_says_where_and_never_shows_the_solution(capsys):
    assert not check.quiet_loop(starter_loop)
    out = capsys.readouterr().out
    assert "Observed on" in out and "Section 1" in out  # where it was seen, where to read
    assert out.count("Hint:") == 1 and out.count("Section 1") == 1  # said once
    for code in ("torch.maximum(", "loss.detach()", "total.item()", "worst.item()", "torch.zeros("):
        assert code not in out, code
    assert not check.quiet_loop(loop_zero_grad_between)
    out = capsys.readouterr().out
    assert "average" not in out and "Add up" not in out  # the real fault, not the loss bookkeeping


# ---------------------------------------------------------------- (2) a loader that stays on the device
class LoaderRandperm:
    def __init__(self, images, labels, batch_size):
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self):
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        order = torch.randperm(len(self.labels), device=self.labels.device)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderSplit:
    def __init__(self, images, labels, batch_size):
        self.images, self.labels, self.bs = images, labels, batch_size

    def __len__(self):
        return -(-len(self.images) // self.bs)

    def __iter__(self):
        perm = torch.randperm(self.images.shape[0], device=self.images.device)
        return zip(self.images[perm].split(self.bs), self.labels[perm].split(self.bs), strict=True)


class LoaderSeededOnDevice:
    def __init__(self, images, labels, batch_size, seed=0):
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.gen = torch.Generator(device=images.device).manual_seed(seed)  # a generator on the data's device

    def __len__(self):
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.labels)
        order = torch.randperm(n, device=self.images.device, generator=self.gen)
        for start in range(0, n, self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderCopiedOrder(LoaderRandperm):
    def __iter__(self):
        order = torch.randperm(len(self.labels)).to(self.labels.device)  # a blocking copy each epoch
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderCpuIndices(LoaderRandperm):
    def __iter__(self):
        order = torch.randperm(len(self.labels))  # on the CPU, indexing data on the device
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderIndexSelectCpu(LoaderRandperm):
    def __iter__(self):
        for idx in torch.randperm(len(self.labels)).split(self.batch_size):  # CPU indices: a GPU refuses them here
            yield self.images.index_select(0, idx), self.labels.index_select(0, idx)


class LoaderLenPlusOne(LoaderRandperm):
    def __len__(self):
        return len(self.labels) // self.batch_size + 1  # one too many when the batches divide evenly


class LoaderShuffledAtBuild(LoaderRandperm):
    def __init__(self, images, labels, batch_size):
        order = torch.randperm(len(labels), device=labels.device)
        super().__init__(images[order], labels[order], batch_size)  # shuffled once, when built

    def __iter__(self):
        for start in range(0, len(self.labels), self.batch_size):
            yield self.images[start : start + self.batch_size], self.labels[start : start + self.batch_size]


class LoaderOneShot(LoaderRandperm):
    def __init__(self, images, labels, batch_size):
        super().__init__(images, labels, batch_size)
        self.batches = super().__iter__()  # one pass, made when built

    def __iter__(self):
        return self.batches


class LoaderArgsort:
    def __init__(self, images, labels, batch_size):
        self.data = (images, labels)
        self.batch_size = batch_size

    def __len__(self):
        import math

        return math.ceil(len(self.data[1]) / self.batch_size)

    def __iter__(self):
        images, labels = self.data
        order = torch.rand(len(labels), device=labels.device).argsort()
        for idx in order.split(self.batch_size):
            yield images.index_select(0, idx), labels.index_select(0, idx)


class LoaderTensorBatches:
    def __init__(self, images, labels, batch_size):
        from helpers.lesson.training import TensorBatches

        self.inner = TensorBatches(images, labels, batch_size, shuffle=True)

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        yield from self.inner


class LoaderGenerator:
    def __init__(self, images, labels, batch_size, seed=0):
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(range(0, len(self.labels), self.batch_size))

    def __iter__(self):
        order = torch.randperm(len(self.labels), generator=self.gen)
        order = order.to(self.labels.device, non_blocking=True)  # from pageable memory: no effect, blocking
        batches = []
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            batches.append((self.images[idx], self.labels[idx]))
        return iter(batches)


class LoaderSortedNoise(LoaderRandperm):
    def __iter__(self):
        order = torch.randn(len(self.labels), device=self.labels.device).sort().indices  # random keys, sorted there
        for idx in order.split(self.batch_size):
            yield self.images[idx], self.labels[idx]


class LoaderCopiedIntoBuffer(LoaderRandperm):
    def __init__(self, images, labels, batch_size):
        super().__init__(images, labels, batch_size)
        self.order = torch.empty(len(labels), dtype=torch.long, device=labels.device)

    def __iter__(self):
        self.order.copy_(torch.randperm(len(self.labels)), non_blocking=True)  # from pageable memory: still blocking
        for start in range(0, len(self.order), self.batch_size):
            idx = self.order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderNoShuffle(LoaderRandperm):
    def __iter__(self):
        for start in range(0, len(self.labels), self.batch_size):
            yield self.images[start : start + self.batch_size], self.labels[start : start + self.batch_size]


class LoaderShuffleOnce(LoaderRandperm):
    def __init__(self, images, labels, batch_size):
        super().__init__(images, labels, batch_size)
        self.order = torch.randperm(len(labels), device=labels.device)

    def __iter__(self):
        for start in range(0, len(self.order), self.batch_size):
            idx = self.order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderDropLast(LoaderRandperm):
    def __iter__(self):
        order = torch.randperm(len(self.labels), device=self.labels.device)
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


class LoaderToCpu(LoaderRandperm):
    def __iter__(self):
        for imgs, labels in super().__iter__():
            yield imgs.cpu(), labels.cpu()


class LoaderTwoOrders(LoaderRandperm):
    def __iter__(self):
        a = torch.randperm(len(self.labels), device=self.labels.device)
        b = torch.randperm(len(self.labels), device=self.labels.device)
        for start in range(0, len(a), self.batch_size):
            yield self.images[a[start : start + self.batch_size]], self.labels[b[start : start + self.batch_size]]


class LoaderPythonShuffle(LoaderRandperm):
    def __iter__(self):
        import random

        order = list(range(len(self.labels)))
        random.shuffle(order)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            yield torch.stack([self.images[i] for i in chunk]), torch.stack([self.labels[i] for i in chunk])


class LoaderItemOrder(LoaderRandperm):
    def __iter__(self):
        order = torch.randperm(len(self.labels), device=self.labels.device).tolist()
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


@pytest.mark.parametrize(
    "cls", [LoaderRandperm, LoaderSplit, LoaderArgsort, LoaderTensorBatches, LoaderSeededOnDevice, LoaderSortedNoise]
)
def test_device_loader_accepts(cls, capsys):
    assert check.device_loader(cls), capsys.readouterr().out


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (unwritten, "Not written yet"),
        (LoaderNoShuffle, "it is not shuffled"),
        (LoaderShuffleOnce, "give the same order"),
        (LoaderDropLast, "the last, smaller batch was dropped"),
        (LoaderToCpu, "8 x .cpu()"),
        (LoaderTwoOrders, "shuffled with different orders"),
        (LoaderPythonShuffle, "one at a time"),
        (LoaderItemOrder, "host synchronisation"),
        (LoaderCpuIndices, "the order (or the indices) is drawn on the CPU"),
        (LoaderCopiedOrder, "blocking copy to the device"),
        (LoaderGenerator, "only from pinned memory; a tensor just made on the CPU is in pageable memory"),
        (LoaderCopiedIntoBuffer, "the argument has no effect and the CPU waits for the copy"),
        (LoaderIndexSelectCpu, "Expected all tensors to be on the same device"),
        (LoaderLenPlusOne, "len() of your loader is 4 for 48 samples"),
        (LoaderShuffledAtBuild, "Two epochs"),
        (LoaderOneShot, "The second epoch"),
    ],
)
def test_device_loader_explains(cls, fragment, capsys):
    assert not check.device_loader(cls)
    assert fragment in capsys.readouterr().out


# ---------------------------------------------------------------- (3) a mixed-precision step
def _dtype(device):
    if device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False) or device.type == "cpu":
        return torch.bfloat16
    return torch.float16


def amp_standard(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(device_type=imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_fp16_everywhere(model, imgs, targets, loss_fn, optimizer, scaler):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(imgs.device.type, dtype=torch.float16):
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def amp_loss_outside(model, imgs, targets, loss_fn, optimizer, scaler):
    device_type = next(model.parameters()).device.type
    with torch.amp.autocast(device_type, dtype=torch.bfloat16 if device_type == "cpu" else torch.float16):
        outputs = model(imgs)
    loss = loss_fn(outputs.float(), targets)  # the loss in float32, outside autocast
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_explicit_unscale(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=100.0)  # an extra safe step
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_decorated(model, imgs, targets, loss_fn, optimizer, scaler):
    forward = torch.autocast(imgs.device.type, dtype=_dtype(imgs.device))(lambda x: loss_fn(model(x), targets))
    loss = forward(imgs)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.float()


def amp_cuda_hardcoded(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_no_scaler(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def amp_plain_step(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss


def amp_half_model(model, imgs, targets, loss_fn, optimizer, scaler):
    model.to(torch.bfloat16)
    loss = loss_fn(model(imgs.to(torch.bfloat16)), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def amp_no_update(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    return loss


def amp_step_without_scale(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_returns_scaled(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaled


def amp_course_dtype(model, imgs, targets, loss_fn, optimizer, scaler):
    from helpers.lesson.speed import amp_dtype

    optimizer.zero_grad()
    with torch.autocast(imgs.device.type, dtype=amp_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_unscale_then_plain_step(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    optimizer.step()  # steps even when the gradients hold inf
    scaler.update()
    return loss


def amp_cpu_hardcoded(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_zero_grad_between(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    scaler.scale(loss).backward()
    optimizer.zero_grad()  # clears the gradients backward() just computed
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_zero_grad_between_keep(model, imgs, targets, loss_fn, optimizer, scaler):
    with torch.autocast(imgs.device.type, dtype=_dtype(imgs.device)):
        loss = loss_fn(model(imgs), targets)
    scaler.scale(loss).backward()
    optimizer.zero_grad(set_to_none=False)  # zeros instead of None: the step runs, with nothing to apply
    scaler.step(optimizer)
    scaler.update()
    return loss


@pytest.mark.parametrize(
    "fn", [amp_standard, amp_fp16_everywhere, amp_loss_outside, amp_explicit_unscale, amp_decorated, amp_course_dtype]
)
def test_amp_step_accepts(fn, capsys):
    assert check.amp_step(fn), capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (amp_cuda_hardcoded, "device_type must be the tensors' device type"),
        (amp_no_scaler, "The GradScaler was never used"),
        (amp_plain_step, "found a step the scaler did not take: the optimizer stepped by itself"),
        (amp_half_model, "lower precision (.half() or .to(bfloat16))"),
        (amp_no_update, "scaler.update() was not called"),
        (amp_step_without_scale, "gradients it had not scaled: backward() ran on the loss itself"),
        (amp_returns_scaled, "not scaler.scale(loss)"),
        (amp_unscale_then_plain_step, "in a step whose gradients held inf"),
        (amp_cpu_hardcoded, "'cpu', not for 'cuda'"),
        (amp_zero_grad_between, "the gradients were cleared before the optimizer stepped"),
        (amp_zero_grad_between_keep, "the gradients were cleared before the optimizer stepped"),
    ],
)
def test_amp_step_explains(fn, fragment, capsys):
    assert not check.amp_step(fn)
    assert fragment in capsys.readouterr().out


AMP_WRONG = (
    unwritten,
    amp_cuda_hardcoded,
    amp_no_scaler,
    amp_plain_step,
    amp_half_model,
    amp_no_update,
    amp_step_without_scale,
    amp_returns_scaled,
    amp_unscale_then_plain_step,
    amp_cpu_hardcoded,
    amp_zero_grad_between,
    amp_zero_grad_between_keep,
)


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("fn", AMP_WRONG, ids=lambda f: f.__name__)
def test_amp_feedback_never_shows_the_solution(fn, level, capsys):
    assert not check.amp_step(fn, hint=level)
    out = capsys.readouterr().out
    for code in ("with torch.autocast(", "scaler.scale(loss).backward()", "scaler.step(optimizer)", "return loss"):
        assert code not in out, (fn.__name__, code)


@pytest.mark.parametrize(
    "fn, where",
    [(amp_plain_step, "found a step the scaler did not take"), (amp_unscale_then_plain_step, "held inf")],
)
def test_amp_hint_names_the_section_and_goes_deeper(fn, where, capsys):
    assert not check.amp_step(fn)
    first = capsys.readouterr().out
    assert where in first and '"Mixed precision: torch.autocast"' in first and "hint=2" in first
    assert not check.amp_step(fn, hint=2)
    assert "GradScaler wraps three moments of the step" in capsys.readouterr().out


def test_amp_pass_message_is_the_same_on_every_machine(capsys):
    # the solutions notebook stores it: nothing in it may name this machine's device or 16-bit type
    assert check.amp_step(amp_standard)
    out = capsys.readouterr().out
    for word in ("cpu", "cuda", "mps", "bfloat16", "float16 on"):
        assert word not in out, word


def test_checks_never_raise(capsys):
    assert not check.quiet_loop(42)
    assert not check.device_loader("not a class")
    assert not check.amp_step(lambda *a: (1, 2))


def test_amp_step_names_the_autocast_device_type_where_cuda_autocast_stays_on(monkeypatch, capsys):
    # On a CUDA machine torch.autocast("cuda") stays on (no warning) while the CPU tensors run in float32;
    # the hint must still say why.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not check.amp_step(amp_cuda_hardcoded)
    out = capsys.readouterr().out
    assert "Autocast was on for 'cuda', not for 'cpu'" in out and "device_type must be the tensors' device" in out
