"""The course's loop: learns, reports means and fractions, and keeps numbers rather than graphs."""

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from helpers.lesson import training
from helpers.lesson.data import SyntheticCIFAR, as_tensors
from helpers.lesson.models import Tudui
from helpers.lesson.timing import Timing, timeit
from helpers.lesson.training import History, TensorBatches, evaluate, fit, train_one_epoch

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tensors():
    return as_tensors(SyntheticCIFAR(256, seed=0)), as_tensors(SyntheticCIFAR(128, seed=1))


def test_fit_learns_and_records_history(tensors):
    (x, y), (xt, yt) = tensors
    torch.manual_seed(0)
    model = Tudui()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    seen = []
    hist = fit(
        model,
        TensorBatches(x, y, 32, shuffle=True, generator=torch.Generator().manual_seed(0)),
        TensorBatches(xt, yt, 64),
        nn.CrossEntropyLoss(),
        opt,
        CPU,
        3,
        data_name="synthetic",
        progress=False,
        on_epoch_end=lambda epoch, h: seen.append(epoch),
    )
    assert hist.epochs == [1, 2, 3] == seen and hist.data_name == "synthetic"
    assert all(isinstance(v, float) for v in hist.train_loss + hist.test_loss + hist.test_accuracy)
    assert hist.train_loss[-1] < hist.train_loss[0]
    assert hist.test_accuracy[-1] > 0.2  # chance is 0.1
    assert "on synthetic" in hist.summary()
    # continuing a run numbers the epochs on
    hist = fit(model, TensorBatches(x, y, 64), TensorBatches(xt, yt, 64), nn.CrossEntropyLoss(), opt, CPU, 1,
               history=hist, progress=False)  # fmt: skip
    assert hist.epochs == [1, 2, 3, 4]
    assert History.from_dict(hist.to_dict()) == hist


def test_evaluate_is_mean_loss_and_fraction(tensors):
    _, (xt, yt) = tensors
    model = Tudui()
    loss, acc = evaluate(model, TensorBatches(xt, yt, 50), nn.CrossEntropyLoss(), CPU)
    with torch.no_grad():
        out = model.eval()(xt)
    assert loss == pytest.approx(nn.functional.cross_entropy(out, yt).item(), rel=1e-5)
    assert acc == (out.argmax(1) == yt).float().mean().item()
    assert 0.0 <= acc <= 1.0


def test_train_one_epoch_returns_a_float_and_sets_train_mode(tensors):
    (x, y), _ = tensors
    model = Tudui().eval()
    loss = train_one_epoch(model, TensorBatches(x[:64], y[:64], 32), nn.CrossEntropyLoss(),
                           torch.optim.SGD(model.parameters(), lr=0.01), CPU, progress=True)  # fmt: skip
    assert isinstance(loss, float) and model.training


def test_tensor_batches_cover_the_data_once():
    x, y = torch.arange(10.0).view(10, 1), torch.arange(10)
    plain = list(TensorBatches(x, y, 4))
    assert len(TensorBatches(x, y, 4)) == 3 and [len(b[1]) for b in plain] == [4, 4, 2]
    shuffled = torch.cat(
        [b[1] for b in TensorBatches(x, y, 4, shuffle=True, generator=torch.Generator().manual_seed(1))]
    )
    assert sorted(shuffled.tolist()) == list(range(10)) and shuffled.tolist() != list(range(10))


def test_tensorboard_is_optional(monkeypatch, tmp_path):
    monkeypatch.setattr(training, "tensorboard_available", lambda: False)
    assert training.tensorboard_writer(str(tmp_path / "runs")) is None


def test_timeit_warms_up_and_takes_the_median():
    calls = []
    result = timeit(lambda: calls.append(1), "cpu", repeats=3, warmup=2)
    assert len(calls) == 5 and isinstance(result, Timing) and len(result.times) == 3
    assert result.median == sorted(result.times)[1]


def test_progress_bars_do_not_change_the_data_order(tensors, monkeypatch):
    """A bar that called iter(loader) itself would draw from the global RNG and reshuffle the data."""
    from torch.utils.data import DataLoader, TensorDataset

    monkeypatch.setattr(training, "_text_bars_in_notebook", lambda: False)  # batch bars on, as in a terminal

    (x, y), (xt, yt) = tensors
    results = []
    for progress in (False, True):
        torch.manual_seed(0)
        model = Tudui()
        train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32, shuffle=True)
        test = DataLoader(TensorDataset(xt[:32], yt[:32]), batch_size=32)
        hist = fit(model, train, test, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01), CPU,
                   2, progress=progress)  # fmt: skip
        results.append((hist.train_loss, [p.detach().clone() for p in model.parameters()]))
    (loss0, params0), (loss1, params1) = results
    assert loss0 == loss1
    assert all(torch.equal(p, q) for p, q in zip(params0, params1, strict=True))


class GpuCopiesOnTheCpu(TorchFunctionMode):
    """Code meant for a simulated GPU (``cuda`` or ``mps``) runs on the CPU; every copy it asks for is recorded.

    ``Tensor.to`` to such a device is logged in ``copies`` (the target's type, whether the source is pinned, the
    ``non_blocking`` asked for) and gives back the CPU tensor; a factory given such a device makes its tensor on the
    CPU; ``pin_memory()`` gives a CPU copy that ``is_pinned()`` then calls pinned, as do the tensors in ``pinned``;
    ``.device`` of the tensors in ``placed`` is the simulated GPU.
    """

    def __init__(self, pinned=(), placed=(), device=None):
        super().__init__()
        self.pinned = list(pinned)  # kept alive, so that their ids stay theirs
        self.placed, self.device = list(placed), device
        self.copies = []

    def _is(self, t, kept) -> bool:
        return any(t is k for k in kept)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        reads_device = name == "__get__" and getattr(func, "__self__", None) is torch.Tensor.device
        if reads_device and self._is(args[0], self.placed):
            return self.device
        if name == "is_pinned":
            return self._is(args[0], self.pinned)
        if name == "pin_memory":
            self.pinned.append(args[0].clone())
            return self.pinned[-1]
        if name == "to":
            target, _, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            if target is not None and target.type in GPU_TYPES:
                pinned = self._is(args[0], self.pinned)
                self.copies.append({"to": target.type, "pinned": pinned, "non_blocking": non_blocking})
                return args[0]
        device = kwargs.get("device")
        if device is not None and torch.device(device).type in GPU_TYPES:
            kwargs["device"] = CPU
        return func(*args, **kwargs)


GPU_TYPES = ("cuda", "mps")
MACHINES = {"a Mac": dict(mps=True), "a CUDA machine": dict(cuda=1)}


def _batches(n=4, size=8):
    gen = torch.Generator().manual_seed(0)
    return [(torch.rand(size, 3, 32, 32, generator=gen), torch.randint(10, (size,), generator=gen)) for _ in range(n)]


@pytest.mark.parametrize("machine", MACHINES)
def test_the_loops_copy_non_blocking_only_from_pinned_memory_to_a_cuda_gpu(machine):
    from helpers.lab.simulate import simulated_machine
    from helpers.lesson.devices import pick_device

    torch.manual_seed(0)
    model, loss_fn = Tudui(), nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    pageable, pinned = _batches(), _batches()
    with simulated_machine(**MACHINES[machine]):
        device = pick_device()
        with GpuCopiesOnTheCpu(pinned=[t for batch in pinned for t in batch]) as mode:
            train_one_epoch(model, pageable + pinned, loss_fn, optimizer, device)
            evaluate(model, pageable + pinned, loss_fn, device)
    assert device.type == ("mps" if machine == "a Mac" else "cuda")
    assert len(mode.copies) == 2 * 2 * 2 * 4  # two tensors per batch, 8 batches, two loops
    for copy in mode.copies:
        assert copy["to"] == device.type
        # a Mac: never non_blocking (no guarantee there without a synchronisation); CUDA: only from pinned memory
        assert copy["non_blocking"] == (device.type == "cuda" and copy["pinned"]), (machine, copy)
    assert any(c["non_blocking"] for c in mode.copies) == (device.type == "cuda")


@pytest.mark.parametrize("machine", MACHINES)
def test_tensor_batches_copies_a_cpu_generators_order_blocking(machine):
    from helpers.lab.simulate import simulated_machine
    from helpers.lesson.devices import pick_device

    images, labels = torch.rand(20, 3, 4, 4), torch.arange(20)
    with simulated_machine(**MACHINES[machine]):
        device = pick_device()
        batches = TensorBatches(images, labels, 8, shuffle=True, generator=torch.Generator().manual_seed(0))
        with GpuCopiesOnTheCpu(placed=[images, labels], device=device) as mode:
            seen = torch.cat([t for _, t in batches])
    assert sorted(seen.tolist()) == list(range(20))
    assert mode.copies == [{"to": device.type, "pinned": False, "non_blocking": False}]  # the order, once per epoch


def test_tensor_batches_draws_its_order_where_the_data_is():
    from helpers.lab.sync_recorder import record_syncs

    images, labels = torch.empty(20, 3, 4, 4, device="meta"), torch.empty(20, device="meta")  # meta: never the CPU
    with record_syncs() as log:
        batches = list(TensorBatches(images, labels, 8, shuffle=True))
    assert len(log) == 0 and [len(t) for _, t in batches] == [8, 8, 4]
    assert all(t.device.type == "meta" for batch in batches for t in batch)


def test_to_device_asks_for_non_blocking_only_from_pinned_memory_to_cuda(monkeypatch):
    from helpers.lesson.devices import to_device

    calls = []

    def to(self, device, non_blocking=False):
        calls.append((device.type, non_blocking))
        return self

    host = torch.ones(3)
    monkeypatch.setattr(torch.Tensor, "to", to)
    for pinned in (False, True):
        monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, pinned=pinned: pinned)
        for device in ("cuda:0", "mps", "cpu", "meta"):
            to_device(host, device)
    pageable, pinned = calls[:4], calls[4:]
    assert pageable == [("cuda", False), ("mps", False), ("cpu", False), ("meta", False)]
    assert pinned == [("cuda", True), ("mps", False), ("cpu", False), ("meta", False)]
