"""Record the operations PyTorch runs, with the device each one names (notebook 03, going deeper), or only count
them (notebook 06's loader check: how many operators one epoch costs).

``RecordOps`` is a ``TorchDispatchMode``: while it is active, every operator that reaches the
dispatcher is noted as ``name(device)``, e.g. ``zeros(cpu)`` then ``_to_copy(meta)`` for
``torch.zeros(3).to("meta")``. It shows where a tensor is made and whether a copy follows.

It builds on ``torch.utils._python_dispatch``, a private PyTorch module (the leading ``_``: it may
change without notice). Use it only to look; lesson code never depends on it.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class RecordOps(TorchDispatchMode):
    """``with RecordOps() as rec: ...`` then ``rec.ops``: the operators run, in order, as ``name(device)``.

    The device is the ``device=`` keyword the operator received ('' when it had none).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops.append(f"{func.overloadpacket.__name__}({kwargs.get('device', '')})")
        return func(*args, **kwargs)


class CountOps(TorchDispatchMode):
    """``with CountOps() as ops: ...`` then ``ops.count``: how many operators reached the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))
