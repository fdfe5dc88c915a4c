"""Checkpoints that survive interruptions and load on any device.

- :func:`save` writes atomically: to a temporary file in the same folder, then ``os.replace``. A
  save interrupted half-way (Ctrl-C, full disk, crash) never leaves a corrupt file where a good
  one was: the old file stays until the new one is complete.
- :func:`load` uses ``map_location`` (a checkpoint written on a GPU opens on a CPU-only machine) and
  ``weights_only=True`` (tensors and plain containers only: no code runs while loading).
- :func:`save_training` / :func:`resume_training` keep model, optimizer, epoch and history together.
  ``Optimizer.load_state_dict`` itself puts each state tensor (e.g. SGD momentum) on the device of
  the parameter it belongs to, so the model must be on its device *before* the optimizer is
  loaded: moving the model afterwards leaves the optimizer's state behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from torch import nn

from helpers.course.i18n import tr


def save(obj, path: str | Path) -> Path:
    """``torch.save(obj, path)``, atomically. Creates the folder if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt included: remove the half-written file, keep the old one
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load(path: str | Path, map_location: torch.device | str | None = "cpu"):
    """``torch.load`` with ``map_location`` and ``weights_only=True`` (the safe default since torch 2.6)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def save_training(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                  history=None, **extra) -> Path:  # fmt: skip
    """Save everything needed to resume: model and optimizer ``state_dict``, epoch, history."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": int(epoch),
        "history": history.to_dict() if history is not None else None,
        **extra,
    }
    return save(state, path)


def resume_training(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    device: torch.device | str) -> dict:  # fmt: skip
    """Load a :func:`save_training` checkpoint into ``model`` (already on ``device``) and ``optimizer``.

    The file is opened with ``map_location="cpu"``, which only decides where its tensors are
    first read (any checkpoint opens on any machine). ``model.load_state_dict`` copies into the
    parameters where they are, and ``optimizer.load_state_dict`` moves each state tensor to its
    parameter's device. So the one rule is the order: model on ``device`` first, then load; a
    model moved after its optimizer was loaded leaves the optimizer's state on the old device.
    Raises ValueError when the model is not on ``device``. Returns the checkpoint dict.
    """
    device = torch.device(device)
    where = {p.device for p in model.parameters()}
    if any(not _same_device(d, device) for d in where):
        raise ValueError(
            tr(
                "Move the model to {device} before resume_training (it is on {where}): "
                "the optimizer's state follows the parameters' device when it is loaded.",
                device=device,
                where=", ".join(sorted(map(str, where))),
            )
        )
    state = load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` (no index) names the current GPU, ``mps`` the only one."""

    def full(d: torch.device) -> torch.device:
        if d.index is None and d.type == "cuda" and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(d.type, 0) if d.index is None and d.type in ("cuda", "mps") else d

    return full(a) == full(b)


def refusal_summary(err: Exception) -> str:
    """Two lines of a ``weights_only`` refusal: its first sentence and its "Unsupported global" line.

    The full message goes on with advice; what the lesson reads is what was refused and why.
    """
    lines = str(err).splitlines()
    first = lines[0].split(".")[0] + "." if lines else ""
    culprit = next((line.strip() for line in lines if "Unsupported global" in line), "")
    return f"{type(err).__name__}: {first}\n{culprit}".rstrip()


def optimizer_state_devices(optimizer: torch.optim.Optimizer) -> set[torch.device]:
    """The devices holding the optimizer's state tensors (empty before its first step)."""
    return {v.device for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0}


def optimizer_state_dtypes(optimizer: torch.optim.Optimizer) -> set[torch.dtype]:
    """The dtypes of the optimizer's state tensors (empty before its first step)."""
    return {v.dtype for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0}


def tag_as_saved_on(device: str):
    """Context manager: tensors saved inside it are tagged as living on ``device`` (e.g. ``"cuda:0"``).

    Lets a CPU-only machine write the file a GPU machine would write, to show (and test) what
    loading it takes. Supporting code for the course, not something to use in real work.
    """
    from unittest import mock

    return mock.patch.object(torch.serialization, "location_tag", lambda storage: device)
