"""The course's train/eval loop: the article's loop, done right, and cheap per step.

What the article's loop does (and notebook 05 shows line by line) is kept: the model, the inputs and
the labels go to ``device`` with ``.to(device)``; ``model.train()`` / ``model.eval()``;
``torch.no_grad()`` for evaluation. What it does loosely is fixed: losses are summed as numbers,
not as a growing graph of GPU tensors, and accuracy is a fraction of the test set. To keep each
step cheap, the sums stay on the device and are fetched once per epoch (one synchronisation per
epoch instead of one per batch).

Progress bars (tqdm.auto) and TensorBoard (only when ``tensorboard`` is installed) are optional.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from helpers.course.i18n import tr
from helpers.lesson.devices import to_device


@dataclass
class History:
    """Per-epoch results. Losses are means per image; accuracy is a fraction (0.0 to 1.0)."""

    data_name: str = ""
    epochs: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)

    def add(self, epoch: int, train_loss: float, test_loss: float, test_accuracy: float) -> None:
        self.epochs.append(epoch)
        self.train_loss.append(train_loss)
        self.test_loss.append(test_loss)
        self.test_accuracy.append(test_accuracy)

    def to_dict(self) -> dict:
        """Plain lists and strings (what ``torch.load(weights_only=True)`` accepts in a checkpoint)."""
        return {
            "data_name": self.data_name,
            "epochs": list(self.epochs),
            "train_loss": list(self.train_loss),
            "test_loss": list(self.test_loss),
            "test_accuracy": list(self.test_accuracy),
        }

    @classmethod
    def from_dict(cls, d: dict) -> History:
        return cls(**{k: (list(v) if isinstance(v, list) else v) for k, v in d.items()})

    def summary(self) -> str:
        if not self.epochs:
            return tr("no epochs yet ({data})", data=self.data_name)
        return tr(
            "epoch {epoch}: train loss {train_loss:.3f}, test loss {test_loss:.3f}, "
            "test accuracy {accuracy:.1%} on {data}",
            epoch=self.epochs[-1],
            train_loss=self.train_loss[-1],
            test_loss=self.test_loss[-1],
            accuracy=self.test_accuracy[-1],
            data=self.data_name,
        )


class TensorBatches:
    """A dataset kept as one tensor (on any device), served in batches by slicing: no per-image work.

    Iterates like a DataLoader (``for imgs, targets in batches``); ``shuffle`` draws a new order
    each epoch, where the data is (no copy), or from ``generator`` where that generator is (a CPU generator's
    order is copied to the data's device once per epoch, with :func:`helpers.lesson.devices.to_device`).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 64, shuffle: bool = False,
                 generator: torch.Generator | None = None):  # fmt: skip
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.generator = batch_size, shuffle, generator

    def __len__(self) -> int:
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.labels)
        if self.shuffle:
            where = self.labels.device if self.generator is None else self.generator.device
            order = to_device(torch.randperm(n, generator=self.generator, device=where), self.labels.device)
            for start in range(0, n, self.batch_size):
                idx = order[start : start + self.batch_size]
                yield self.images[idx], self.labels[idx]
        else:
            for start in range(0, n, self.batch_size):
                yield self.images[start : start + self.batch_size], self.labels[start : start + self.batch_size]


def _tqdm():
    """tqdm.auto's class, without its warning when a notebook lacks ipywidgets (it names a local path)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm
    return tqdm


def _text_bars_in_notebook() -> bool:
    """True in Jupyter without ipywidgets: text bars there print a line per update, so nest none."""
    if "ipykernel" not in sys.modules:
        return False
    from tqdm.notebook import tqdm as widget_tqdm

    return not issubclass(_tqdm(), widget_tqdm)


def _bar(iterable, total: int | None, desc: str, progress: bool, leave: bool = False):
    """Yield from ``iterable``, with a progress bar when ``progress``.

    The bar is given ``total`` and updated by hand, never handed the iterable: in a terminal
    tqdm.auto's class calls ``iter()`` on what it wraps, and a second ``iter(loader)`` draws from
    the global RNG (shuffled order) and starts the loader's workers twice.
    """
    if not progress:
        yield from iterable
        return
    with _tqdm()(total=total, desc=desc, leave=leave, mininterval=0.5) as bar:
        for item in iterable:
            yield item
            bar.update(1)


def train_one_epoch(model: nn.Module, loader: Iterable, loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
                    device: torch.device, progress: bool = False, desc: str = "train") -> float:  # fmt: skip
    """One pass over ``loader``; returns the mean training loss per image."""
    model.train()  # 训练步骤开始
    total_loss = torch.zeros((), device=device)  # summed on the device, fetched once
    count = 0
    for imgs, targets in _bar(loader, _len(loader), desc, progress):
        imgs, targets = to_device(imgs, device), to_device(targets, device)  # non_blocking where it is safe
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        total_loss += loss.detach() * len(targets)  # detach: keep a number, not the graph
        count += len(targets)
    return total_loss.item() / max(count, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, loss_fn: nn.Module, device: torch.device, progress: bool = False,
             desc: str = "test") -> tuple[float, float]:  # fmt: skip
    """Mean test loss per image and accuracy as a fraction of the test set."""
    model.eval()  # 测试步骤开始
    total_loss = torch.zeros((), device=device)
    total_correct = torch.zeros((), dtype=torch.long, device=device)
    count = 0
    for imgs, targets in _bar(loader, _len(loader), desc, progress):
        imgs, targets = to_device(imgs, device), to_device(targets, device)  # non_blocking where it is safe
        outputs = model(imgs)
        total_loss += loss_fn(outputs, targets) * len(targets)
        total_correct += (outputs.argmax(1) == targets).sum()
        count += len(targets)
    return total_loss.item() / max(count, 1), total_correct.item() / max(count, 1)


def _len(loader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def tensorboard_available() -> bool:
    """True when the ``tensorboard`` package is installed (``torch.utils.tensorboard`` needs it)."""
    return importlib.util.find_spec("tensorboard") is not None


def tensorboard_writer(log_dir: str = "runs/tudui"):
    """A ``SummaryWriter`` into ``log_dir`` (git-ignored ``runs/``), or None without tensorboard."""
    if not tensorboard_available():
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir)


def fit(
    model: nn.Module,
    train_loader: Iterable,
    test_loader: Iterable,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epochs: int,
    *,
    data_name: str = "",
    history: History | None = None,
    progress: bool = True,
    writer=None,
    on_epoch_end: Callable[[int, History], None] | None = None,
    on_epoch_start: Callable[[int], None] | None = None,
) -> History:
    """Train for ``epochs`` more epochs, evaluating after each; returns the (extended) history.

    ``history`` continues a resumed run (epoch numbers carry on). ``writer`` is a TensorBoard
    ``SummaryWriter`` or None. ``on_epoch_end(epoch, history)`` runs after each epoch (e.g. to save
    a checkpoint); ``on_epoch_start(epoch)`` before it (e.g. ``sampler.set_epoch``).
    """
    history = history if history is not None else History(data_name=data_name)
    if data_name and not history.data_name:
        history.data_name = data_name
    first = (history.epochs[-1] + 1) if history.epochs else 1
    epoch_range = range(first, first + epochs)
    batch_bars = progress and not _text_bars_in_notebook()
    for epoch in _bar(epoch_range, epochs, tr("epochs"), progress, leave=True):
        if on_epoch_start is not None:
            on_epoch_start(epoch)
        train_desc, test_desc = tr("epoch {epoch}", epoch=epoch), tr("test {epoch}", epoch=epoch)
        train_loss = train_one_epoch(model, train_loader, loss_fn, optimizer, device, batch_bars, train_desc)
        test_loss, test_acc = evaluate(model, test_loader, loss_fn, device, batch_bars, test_desc)
        history.add(epoch, train_loss, test_loss, test_acc)
        if writer is not None:
            writer.add_scalar("train_loss", train_loss, epoch)
            writer.add_scalar("test_loss", test_loss, epoch)
            writer.add_scalar("test_accuracy", test_acc, epoch)
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
    if writer is not None:
        writer.flush()
    return history
