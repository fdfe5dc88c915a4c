"""The course's loop: learns, reports means and fractions, and keeps numbers rather than graphs."""

import pytest
import torch
from torch import nn

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
