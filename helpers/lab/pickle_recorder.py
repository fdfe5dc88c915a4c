"""What a DataLoader worker started by spawn or forkserver would have to import (notebook 09's loader check).

A worker gets its dataset, ``collate_fn`` and ``worker_init_fn`` pickled; pickle saves classes and functions by
reference (module and name), and the worker imports them. :class:`RecordingPickler` pickles as that does and notes
each reference; :func:`not_importable` says which modules a fresh process cannot import (a notebook's ``__main__``),
so a check can tell, without starting a worker, whether one would die. :func:`unimportable_in_workers` does both for
a ``DataLoader``, :func:`start_method` says how its workers would start, and :func:`in_process` is the same loader
read without workers (they change where batches are made, not what they hold).
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
import types


class RecordingPickler(pickle.Pickler):
    """Pickles as a worker's arguments are pickled, noting each class and function saved by reference."""

    def __init__(self, file) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.by_reference: list[tuple[str, str]] = []

    def reducer_override(self, obj):
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            self.by_reference.append((getattr(obj, "__module__", None) or "", getattr(obj, "__qualname__", "")))
        return NotImplemented


def not_importable(module: str) -> bool:
    """True for a module a fresh Python process cannot import: ``__main__`` (a notebook's or a script's own code),
    or one that is not a real module here."""
    found = sys.modules.get(module)
    return module in ("__main__", "__mp_main__") or found is None or getattr(found, "__spec__", None) is None


def unimportable_in_workers(loader) -> list[str]:
    """What each worker of ``loader`` (a ``DataLoader``) must unpickle and a fresh process cannot import, as sorted
    ``module.qualname`` names; raises what pickling its dataset, ``collate_fn`` and ``worker_init_fn`` raises (a
    lambda: pickling fails in the parent itself)."""
    recorder = RecordingPickler(io.BytesIO())
    recorder.dump((loader.dataset, loader.collate_fn, loader.worker_init_fn))
    return sorted({f"{m}.{q}" for m, q in recorder.by_reference if not_importable(m)})


def start_method(loader) -> str:
    """How ``loader``'s workers start when its ``multiprocessing_context`` names it (``"spawn"``...), else ``""``."""
    context = loader.multiprocessing_context
    if context is None:
        return ""
    return context.get_start_method() if hasattr(context, "get_start_method") else str(context)


def in_process(loader):
    """The same loader read without worker processes."""
    view = copy.copy(loader)
    view.num_workers, view.timeout = 0, 0
    return view
