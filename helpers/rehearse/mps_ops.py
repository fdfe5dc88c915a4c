"""The operators a Mac's GPU (MPS) has no kernel for, in the torch installed here: read from PyTorch's own
operator table (``native_functions.yaml``, which every torch wheel ships inside ``torchgen``).

An operator runs on MPS when its table entry has an ``MPS`` kernel or a composite one (``Composite*``, or no
``dispatch`` at all: made of other operators), or is an in-place or ``out=`` form of such an operator
(``structured_delegate``). The others raise on a Mac unless ``PYTORCH_ENABLE_MPS_FALLBACK=1`` sends them to the
CPU. Kernels registered outside the table are not seen: an operator missing here may still run on a Mac, so the
rehearsal checks only the names a script calls by their operator's own name (``torch.take``, ``x.take``).
"""

from __future__ import annotations

import functools
from pathlib import Path

MESSAGE = (
    "The operator 'aten::{name}' is not currently implemented for the MPS device. As a temporary fix, you can set "
    "the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this op. WARNING: "
    "this will be slower than running natively on MPS."
)


@functools.cache
def missing() -> frozenset[str]:
    """Operator names (without overload) with no MPS kernel and no composite one; empty if the table is absent."""
    try:
        import torchgen
        import yaml
    except ImportError:
        return frozenset()
    table = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not table.is_file():
        return frozenset()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(table.read_text(encoding="utf-8"), Loader=loader)
    runs, delegates, names = set(), {}, set()
    for entry in entries:
        name = entry["func"].split("(", 1)[0].split(".", 1)[0]
        names.add(name)
        if "structured_delegate" in entry:
            delegates.setdefault(name, set()).add(entry["structured_delegate"].split(".", 1)[0])
            continue
        dispatch = entry.get("dispatch")
        keys = {key.strip() for spec in (dispatch or {}) for key in spec.split(",")}
        if dispatch is None or "MPS" in keys or any(key.startswith("Composite") for key in keys):
            runs.add(name)
    for name, targets in delegates.items():
        if targets & runs:
            runs.add(name)
    return frozenset(name for name in names - runs if not name.startswith("_"))
