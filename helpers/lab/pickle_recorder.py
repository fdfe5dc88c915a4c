"""What a DataLoader worker started by spawn or forkserver would have to import (notebook 09's loader check).

A worker gets its dataset, ``collate_fn`` and ``worker_init_fn`` pickled; pickle saves classes and functions by
reference (module and name), and the worker imports them. :class:`RecordingPickler` pickles as that does and notes
each reference; :func:`not_importable` says which modules a fresh process cannot import (a notebook's ``__main__``),
so a check can tell, without starting a worker, whether one would die.
"""

from __future__ import annotations

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
