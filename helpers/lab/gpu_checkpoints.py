"""The checkpoint files a GPU machine writes, for a loader to read on a machine without one.

Tensors tagged ``cuda:0``, state_dicts of wrapped models (DDP's ``module.``, ``torch.compile``'s
``_orig_mod.``), training checkpoints, and one file that runs code if it is unpickled unsafely
(notebook 09, exercise 2).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from helpers.course.i18n import tr_lazy
from helpers.lesson.checkpoints import save, save_training, tag_as_saved_on

# (file name, what a GPU machine saved, the wrappers around the model from the outside in, saved as a training dict)
CHECKPOINTS = [
    ("plain.pt", tr_lazy("a plain Tudui's state_dict"), (), False),
    ("ddp.pt", tr_lazy("DDP's state_dict (keys 'module.…')"), ("module",), False),
    ("compiled.pt", tr_lazy("a training checkpoint of a torch.compile'd model (keys '_orig_mod.…')"),
     ("_orig_mod",), True),
    ("compiled_ddp.pt", tr_lazy("torch.compile(DDP(model))'s state_dict (keys '_orig_mod.module.…')"),
     ("_orig_mod", "module"), False),
    ("ddp_compiled.pt", tr_lazy("a training checkpoint of DDP(torch.compile(model)) (keys 'module._orig_mod.…')"),
     ("module", "_orig_mod"), True),
]  # fmt: skip

CODE_RAN: list[str] = []


def _code_in_the_file() -> str:
    """What an unsafe unpickler calls when it opens the last file of ``load_anywhere`` (it only takes a note)."""
    CODE_RAN.append("ran")
    return "code from the file ran here"


class _RunsCodeWhenUnpickled:
    def __reduce__(self):
        return (_code_in_the_file, ())


def wrapped(model: nn.Module, names) -> nn.Module:
    """``model`` inside modules that hold it as ``names[-1]``, ..., ``names[0]`` (as DDP and compile do)."""
    for name in reversed(names):
        outer = nn.Module()
        setattr(outer, name, model)
        model = outer
    return model


def write_checkpoints(folder: Path, trained: nn.Module) -> list[tuple[Path, str, bool, list[str]]]:
    """The files a GPU machine writes (tensors tagged cuda:0), and one that runs code when unpickled."""
    files = []
    with tag_as_saved_on("cuda:0"):
        for name, what, wrappers, training in CHECKPOINTS:
            wrapper = wrapped(trained, wrappers)
            if training:
                optimizer = torch.optim.SGD(wrapper.parameters(), lr=0.01, momentum=0.9)
                save_training(folder / name, wrapper, optimizer, epoch=3)
            else:
                save(wrapper.state_dict(), folder / name)
            files.append((folder / name, what, training, list(wrapper.state_dict())))
        save({"model": trained.state_dict(), "epoch": 3, "note": _RunsCodeWhenUnpickled()}, folder / "unsafe.pt")
    return files
