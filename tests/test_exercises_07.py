"""The checks of notebook 07 accept right answers and explain typical wrong ones."""

import copy
import gc

import numpy as np
import pytest
import torch
from torch import nn

from helpers.exercises import ex07_memory as check
from helpers.lab.memory_budget import LiveBytes
from helpers.lesson.memory import (
    estimate_training_memory,
    is_out_of_memory,
    largest_batch_that_fits,
    measure_training_memory,
)

COPIES = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def unwritten(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- (1) estimate training memory
def _saved_bytes(model, inputs, targets, dedupe=True, skip_params=True):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()} if skip_params else set()
    params.add(inputs.untyped_storage().data_ptr())
    seen, total = {}, [0]

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in params:
            seen[key] = t.untyped_storage().nbytes()
            total[0] += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nn.functional.cross_entropy(model(inputs), targets)
    return sum(seen.values()) if dedupe else total[0]


def _param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def est_helper(model, inputs, targets, optimizer_name):
    return estimate_training_memory(model, inputs, targets, optimizer=optimizer_name).total


def est_hooks(model, inputs, targets, optimizer_name):
    p = _param_bytes(model)
    batch = inputs.nbytes + targets.nbytes
    return (2 + COPIES[optimizer_name]) * p + _saved_bytes(model, inputs, targets) + batch


def est_measure(model, inputs, targets, optimizer_name):
    return measure_training_memory(model, inputs, targets, optimizer=optimizer_name).total


def est_real_step(model, inputs, targets, optimizer_name):
    """Train one real step on a copy and sum what exists afterwards, plus the saved activations."""
    model = copy.deepcopy(model)
    opt = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
        "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "adam": lambda ps: torch.optim.Adam(ps),
    }[optimizer_name](model.parameters())
    activations = _saved_bytes(model, inputs, targets)
    nn.functional.cross_entropy(model(inputs), targets).backward()
    opt.step()
    grads = sum(p.grad.nbytes for p in model.parameters())
    state = sum(v.nbytes for s in opt.state.values() for k, v in s.items() if k != "step")
    return _param_bytes(model) + grads + state + activations + inputs.nbytes + targets.nbytes


def est_live_bytes(model, inputs, targets, optimizer_name):
    """Activations as the bytes still alive after the forward pass (the loss itself is 4 bytes)."""
    with LiveBytes() as live:
        loss = nn.functional.cross_entropy(model(inputs), targets)
        activations = live.now - loss.nbytes
    return round((2 + COPIES[optimizer_name]) * _param_bytes(model) + activations + inputs.nbytes)


def est_float_mib(model, inputs, targets, optimizer_name):
    """A float, computed in MiB and converted back."""
    mib = 2**20
    parts = [_param_bytes(model) / mib] * (2 + COPIES[optimizer_name])
    parts.append(_saved_bytes(model, inputs, targets) / mib)
    parts.append((inputs.nbytes + targets.nbytes) / mib)
    return float(sum(parts) * mib)


def est_no_activations(model, inputs, targets, optimizer_name):
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + inputs.nbytes + targets.nbytes


def est_no_state(model, inputs, targets, optimizer_name):
    return 2 * _param_bytes(model) + _saved_bytes(model, inputs, targets) + inputs.nbytes


def est_adam_everywhere(model, inputs, targets, optimizer_name):
    return 4 * _param_bytes(model) + _saved_bytes(model, inputs, targets) + inputs.nbytes


def est_no_dedupe(model, inputs, targets, optimizer_name):
    acts = _saved_bytes(model, inputs, targets, dedupe=False)
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + acts + inputs.nbytes


def est_weights_in_activations(model, inputs, targets, optimizer_name):
    acts = _saved_bytes(model, inputs, targets, skip_params=False)
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + acts + inputs.nbytes


def est_no_batch(model, inputs, targets, optimizer_name):
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + _saved_bytes(model, inputs, targets)


def est_numpy_int(model, inputs, targets, optimizer_name):
    """The estimate as numpy.int64: a whole number, just not Python's int."""
    return np.int64(est_hooks(model, inputs, targets, optimizer_name))


def _saved_on_meta(model, inputs, targets, key):
    """Activations counted on meta copies (nothing allocated), each storage once by ``key``."""
    meta_model = copy.deepcopy(model).to("meta")
    x, y = inputs.to("meta"), targets.to("meta")
    skip = {key(t) for t in [*meta_model.parameters(), x, y]}
    saved = {}

    def pack(t):
        if key(t) not in skip:
            saved[key(t)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nn.functional.cross_entropy(meta_model(x), y)
    return sum(saved.values())


def est_meta_cdata(model, inputs, targets, optimizer_name):
    acts = _saved_on_meta(model, inputs, targets, key=lambda t: t.untyped_storage()._cdata)
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + acts + inputs.nbytes + targets.nbytes


def est_meta_data_ptr(model, inputs, targets, optimizer_name):
    """Keyed by data_ptr() on meta, where every data_ptr() is 0: no activations survive the skip set."""
    acts = _saved_on_meta(model, inputs, targets, key=lambda t: t.untyped_storage().data_ptr())
    return (2 + COPIES[optimizer_name]) * _param_bytes(model) + acts + inputs.nbytes + targets.nbytes


def est_tensor(model, inputs, targets, optimizer_name):
    return torch.tensor(est_hooks(model, inputs, targets, optimizer_name))


@pytest.mark.parametrize(
    "fn",
    [est_helper, est_hooks, est_measure, est_real_step, est_live_bytes, est_float_mib, est_numpy_int, est_meta_cdata],
    ids=lambda f: f.__name__,
)
def test_training_memory_accepts(fn, capsys):
    assert check.training_memory(fn), capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (est_no_activations, "leaves out the activations"),
        (est_no_state, "Adam keeps two tensors per parameter"),
        (est_adam_everywhere, "SGD with momentum keeps one"),
        (est_no_dedupe, "Count each storage once"),
        (est_weights_in_activations, "Layers save their weights"),
        (est_tensor, "return a number of bytes"),
        (est_no_batch, "leaves out the batch itself"),
        (est_meta_data_ptr, "on meta every data_ptr() is 0"),
    ],
)
def test_training_memory_explains(fn, fragment, capsys):
    assert not check.training_memory(fn)
    out = capsys.readouterr().out
    assert fragment in out
    if "a real step keeps" in out:  # the table shows the measurement, headed as such
        assert "real step" in out.split("\n")[1] and "estimate" not in out.split("\n")[1]
    if fn is est_meta_data_ptr:  # it did count activations, on pointers that are all 0: say that, not "left out"
        assert "leaves out the activations" not in out


# ---------------------------------------------------------------- (2) the batch-size finder
def find_while(try_batch, start):
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError too
            if not is_out_of_memory(err) or size == 1:
                raise
        size //= 2


def find_flag_recursive(try_batch, start):
    fits = False
    try:
        try_batch(start)
        fits = True
    except Exception as err:
        if not is_out_of_memory(err) or start == 1:
            raise
    if fits:
        return start
    return find_flag_recursive(try_batch, start // 2)


def find_for_continue(try_batch, start):
    sizes = [start >> k for k in range(start.bit_length())]
    for size in sizes:
        try:
            try_batch(size)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as err:
            if not is_out_of_memory(err) or size == sizes[-1]:
                raise
            continue
        return size


def find_helper(try_batch, start):
    return largest_batch_that_fits(try_batch, start)


def find_with_cleanup(try_batch, start):
    """Keeps only the text of the error, so nothing holds the failed step's tensors."""
    size, error = start, None
    while size >= 1:
        error = None
        try:
            try_batch(size)
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            error = str(err)
        if error is None:
            return size
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        size //= 2
    raise torch.OutOfMemoryError(f"nothing fits: {error}")


def find_upwards(try_batch, start):
    """From 1 upwards, doubling, until the first failure (the same answer for a power-of-two start)."""
    try_batch(1)  # let the error through if not even 1 fits
    size = 1
    while size * 2 <= start:
        failed = False
        try:
            try_batch(size * 2)
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            failed = True
        if failed:
            break
        size *= 2
    return size


def _own_oom_test(err):
    """A learner's own test, by the words each device uses."""
    text = str(err)
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
    )


def find_own_words(try_batch, start):
    size = start
    while size >= 1:
        oom = False
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not _own_oom_test(err) or size == 1:
                raise
            oom = True
        if oom:
            size = size // 2


def find_numpy_sizes(try_batch, start):
    """Sizes as numpy integers: whole numbers, which torch takes as shapes."""
    for size in np.array([start >> k for k in range(start.bit_length())], dtype=np.int64):
        try:
            try_batch(size)
            return int(size)
        except RuntimeError as err:
            if not is_out_of_memory(err) or size == 1:
                raise


def find_cuda_only(try_batch, start):
    """Catches CUDA's error only: a Mac's (and the CPU allocator's) out of memory is a plain RuntimeError."""
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except torch.OutOfMemoryError:
            if size == 1:
                raise
        size //= 2


def find_catch_runtime(try_batch, start):
    """Takes every RuntimeError for out of memory: a shape bug is halved away."""
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError:
            if size == 1:
                raise
        size //= 2


def find_out_of_memory_words(try_batch, start):
    """Knows CUDA's and MPS's wording, not the CPU allocator's."""
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if "out of memory" not in str(err) or size == 1:
                raise
        size //= 2


def find_keeps_the_error(try_batch, start):
    """Leaves the except block, but keeps the error (and its traceback) in a variable until the end."""
    size, last = start, None
    while size >= 1:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            last = err
        size //= 2
    raise last


def find_float_halving(try_batch, start):
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not is_out_of_memory(err) or size == 1:
                raise
        size /= 2


def find_catch_everything(try_batch, start):
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except Exception:
            if size == 1:
                raise
        size //= 2


def find_retry_inside_except(try_batch, start):
    try:
        try_batch(start)
        return start
    except RuntimeError as err:
        if not is_out_of_memory(err) or start == 1:
            raise
        return find_retry_inside_except(try_batch, start // 2)


def find_returns_zero(try_batch, start):
    size = start
    while size > 0:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
        size //= 2
    return size


def find_to_zero(try_batch, start):
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
        size //= 2


def find_no_catch(try_batch, start):
    try_batch(start)
    return start


def find_three_quarters(try_batch, start):
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:
            if not is_out_of_memory(err) or size == 1:
                raise
        size = size * 3 // 4


@pytest.mark.parametrize(
    "fn",
    [
        find_while,
        find_flag_recursive,
        find_for_continue,
        find_helper,
        find_with_cleanup,
        find_upwards,
        find_own_words,
        find_numpy_sizes,
    ],
    ids=lambda f: f.__name__,
)
def test_batch_finder_accepts(fn, capsys):
    assert check.batch_finder(fn), capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, fragments",
    [
        (unwritten, ["Not written yet"]),
        (find_cuda_only, ["On a simulated Mac (MPS)", "torch.OutOfMemoryError is CUDA's error only"]),
        (find_out_of_memory_words, ["On a simulated CPU allocator", "DefaultCPUAllocator: can't allocate memory"]),
        (find_catch_runtime, ["RuntimeError: mat1 and mat2 shapes", "the bug was taken for out of memory"]),
        (find_catch_everything, ["raises ValueError", "Catching Exception (or everything)"]),
        (find_keeps_the_error, ["still alive", "it kept the error object", "__traceback__"]),
        (find_retry_inside_except, ["still alive", "retried from inside an `except` block"]),
        (find_float_halving, ["a batch size of 256.0 (float)", "TypeError", "Halve with `//`"]),
        (find_returns_zero, ["the out-of-memory error again"]),
        (find_to_zero, ["tried a batch of 0"]),
        (find_no_catch, ["let an out-of-memory error through"]),
        (find_three_quarters, ["the largest of 512, 256, ... that fits is"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "",
)
def test_batch_finder_explains(fn, fragments, capsys):
    assert not check.batch_finder(fn)
    out = capsys.readouterr().out
    for fragment in fragments:
        assert fragment in out, out
    if fn is find_keeps_the_error:  # it did leave the except block: the hint must not say otherwise
        assert "Leave the except block first" not in out
    if fn is find_float_halving:  # nothing was alive: the error is the float size
        assert "still alive" not in out


# ---------------------------------------------------------------- (3) gradient accumulation
def acc_chunk(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad()
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        (loss_fn(model(x), y) / micro_batches).backward()
    optimizer.step()


def acc_split_weighted(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad(set_to_none=True)
    size = len(imgs) // micro_batches
    for x, y in zip(imgs.split(size), targets.split(size), strict=True):
        loss = loss_fn(model(x), y) * len(x) / len(imgs)
        loss.backward()
    optimizer.step()


def acc_indices(model, loss_fn, optimizer, imgs, targets, micro_batches):
    n = len(imgs)
    step = n // micro_batches
    model.zero_grad()
    for i in range(micro_batches):
        part = slice(i * step, (i + 1) * step)
        loss_fn(model(imgs[part]), targets[part]).div(micro_batches).backward()
    optimizer.step()
    optimizer.zero_grad()  # an extra safe step: tidy up afterwards


def acc_sum_loss(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad()
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        total = nn.functional.cross_entropy(model(x), y, reduction="sum")
        (total / len(imgs)).backward()
    optimizer.step()


def acc_autograd_grad(model, loss_fn, optimizer, imgs, targets, micro_batches):
    params = list(model.parameters())
    summed = [torch.zeros_like(p) for p in params]
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        grads = torch.autograd.grad(loss_fn(model(x), y) / micro_batches, params)
        summed = [s + g for s, g in zip(summed, grads, strict=True)]
    for p, g in zip(params, summed, strict=True):
        p.grad = g
    optimizer.step()


def acc_no_divide(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad()
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        loss_fn(model(x), y).backward()
    optimizer.step()


def acc_zero_inside(model, loss_fn, optimizer, imgs, targets, micro_batches):
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        optimizer.zero_grad()
        (loss_fn(model(x), y) / micro_batches).backward()
    optimizer.step()


def acc_step_inside(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad()
    for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True):
        (loss_fn(model(x), y) / micro_batches).backward()
        optimizer.step()


def acc_whole_batch(model, loss_fn, optimizer, imgs, targets, micro_batches):
    optimizer.zero_grad()
    loss_fn(model(imgs), targets).backward()
    optimizer.step()


def acc_summed_graph(model, loss_fn, optimizer, imgs, targets, micro_batches):
    """Sums the losses first, then one backward: every micro-batch's activations are alive at once."""
    optimizer.zero_grad()
    total = sum(
        loss_fn(model(x), y) for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches), strict=True)
    )
    (total / micro_batches).backward()
    optimizer.step()


@pytest.mark.parametrize(
    "fn", [acc_chunk, acc_split_weighted, acc_indices, acc_sum_loss, acc_autograd_grad], ids=lambda f: f.__name__
)
def test_accumulation_accepts(fn, capsys):
    assert check.accumulation(fn), capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (acc_no_divide, "micro_batches times too large"),
        (acc_zero_inside, "Only the last micro-batch's gradient is left"),
        (acc_step_inside, "steps the optimizer after every micro-batch"),
        (acc_whole_batch, "the batch was not split"),
        (acc_summed_graph, "the batch was not split"),
    ],
)
def test_accumulation_explains(fn, fragment, capsys):
    assert not check.accumulation(fn)
    assert fragment in capsys.readouterr().out


ACCUMULATION_KEY_LINES = (
    "imgs.chunk(micro_batches)",
    "(loss_fn(model(x), y) / micro_batches).backward()",
    "for x, y in zip(",
)


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize(
    "fn",
    [unwritten, acc_no_divide, acc_zero_inside, acc_step_inside, acc_whole_batch, acc_summed_graph],
    ids=lambda f: f.__name__,
)
def test_accumulation_feedback_never_shows_the_solution(fn, level, capsys):
    assert not check.accumulation(fn, hint=level)
    out = capsys.readouterr().out
    for code in ACCUMULATION_KEY_LINES:
        assert code not in out, (fn.__name__, code)


def test_accumulation_peak_hint_says_where_and_goes_deeper(capsys):
    assert not check.accumulation(acc_summed_graph)
    first = capsys.readouterr().out
    assert "peak memory" in first and '"Gradient accumulation"' in first and "hint=2" in first
    assert not check.accumulation(acc_summed_graph, hint=2)
    assert "measure your step the same way" in capsys.readouterr().out


def test_checks_never_raise(capsys):
    assert not check.training_memory(42)
    assert not check.batch_finder("not a function")
    assert not check.accumulation(lambda *a: (1, 2))
