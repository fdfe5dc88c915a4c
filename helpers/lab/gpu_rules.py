"""A GPU's device rules on ``meta``: run a learner's training towards ``meta`` as towards a GPU.

Notebook 09's first exercise runs the learner's script under :func:`like_a_gpu`: an operator that mixes
tensors of two devices raises, as it does on a GPU (:class:`GpuRules`), and ``module.to()`` keeps each
Parameter object, as it does for a GPU. :class:`HostGenerator` stands in for ``torch.Generator`` while code that
makes a generator for its device runs towards ``meta`` (notebook 06's loader check).
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch
from torch import nn
from torch.nn.parameter import is_lazy
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_CROSSES_DEVICES = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "lift_fresh", "lift_fresh_copy"}
"""Operators a GPU runs with tensors on another device: copies."""
_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
"""Indexing: a GPU tensor takes CPU indices (with a blocking copy); a CPU tensor refuses GPU indices."""


class HostGenerator(torch.Generator):
    """``torch.Generator(device=...)`` while code runs towards ``meta``: meta holds no random state, so a generator
    for it is made on the CPU (meta's random functions accept one and ignore it). A GPU holds its own generator.
    Use it with ``mock.patch.object(torch, "Generator", HostGenerator)``."""

    def __new__(cls, device="cpu"):
        device = torch.device(device)
        return super().__new__(cls, device="cpu" if device.type == "meta" else device)

    def __init__(self, device="cpu"):
        pass


class GpuRules(TorchDispatchMode):
    """Within the block, an operator given tensors on two devices raises, as it does on a GPU.

    On ``meta`` PyTorch's own kernels let some mixes through that a GPU refuses: a convolution with CPU
    weights, ``meta @ cpu``, ``meta.add_(cpu)``, an Embedding with CPU weights and meta indices. Exempt, as
    on a GPU: copies, indexing a tensor with CPU indices (a CPU tensor indexed with device indices raises,
    as on a GPU), and CPU tensors of 0 dimensions (a GPU kernel takes them as numbers). Each refusal is
    kept in ``refusals`` as
    (operator, the arguments on the odd device, that device, the others' device, inside optimizer.step()).
    The optimizers that stepped are kept in ``optimizers``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[tuple[str, list[str], torch.device, torch.device, bool]] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.stepping = False

    def __torch_dispatch__(self, func, arg_types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _INDEXING:
            self._check_indices(name, args, kwargs)
        elif name not in _CROSSES_DEVICES:
            placed = [
                (arg, t.device)
                for arg, value in _named_arguments(func, args, kwargs)
                for t in tree_leaves(value)
                if isinstance(t, torch.Tensor) and not (t.device.type == "cpu" and t.dim() == 0)
            ]
            devices = {d for _, d in placed}
            if len(devices) > 1:
                main = next(d for _, d in placed if d.type != "cpu")
                odd = next(d for d in devices if d != main)
                args_there = list(dict.fromkeys(arg for arg, d in placed if d == odd))
                self.refusals.append((name, args_there, odd, main, self.stepping))
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but got {args_there[0]} is on {odd}, "
                    f"different from other tensors on {main} (when checking argument in method {name})"
                )
        return func(*args, **kwargs)

    def _check_indices(self, name, args, kwargs) -> None:
        named = dict(_named_arguments(func=None, args=args, kwargs=kwargs, names=("self", "indices")))
        indexed, indices = named.get("self"), named.get("indices") or ()
        if not isinstance(indexed, torch.Tensor):
            return
        for index in indices:
            if isinstance(index, torch.Tensor) and index.device not in (torch.device("cpu"), indexed.device):
                self.refusals.append((name, ["indices"], index.device, indexed.device, self.stepping))
                raise RuntimeError(
                    f"indices should be either on cpu or on the same device as the indexed tensor ({indexed.device})"
                )

    @contextlib.contextmanager
    def watching_optimizers(self):
        def before(optimizer, args, kwargs):
            self.stepping = True
            if optimizer not in self.optimizers:
                self.optimizers.append(optimizer)

        def after(optimizer, args, kwargs):
            self.stepping = False

        handles = [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


def _named_arguments(func, args, kwargs, names=None):
    names = names or [a.name for a in func._schema.arguments]
    return list(zip(names, args, strict=False)) + list(kwargs.items())


def _lazy_entries(module: nn.Module) -> dict[tuple[str, str], torch.Tensor]:
    """The module's own parameters and buffers whose shape a lazy module has not inferred yet."""
    return {
        (kind, key): value
        for kind in ("_parameters", "_buffers")
        for key, value in getattr(module, kind).items()
        if is_lazy(value)
    }


@contextlib.contextmanager
def _lazy_kept_like_a_gpu():
    """``module.to(meta)`` as ``module.to("cuda")`` treats a lazy module (``nn.LazyLinear``) that has not run yet.

    Towards a GPU each uninitialised parameter stays the same object and only changes device, so it later
    materialises there (on the device it was moved to). Towards meta PyTorch would replace it by an ordinary
    parameter with 0 elements, which a GPU never does."""
    apply = nn.Module._apply

    def _apply(module, fn, *args, **kwargs):
        lazy = _lazy_entries(module)
        for kind, key in lazy:
            getattr(module, kind)[key] = None  # _apply skips it
        try:
            return apply(module, fn, *args, **kwargs)
        finally:
            for (kind, key), value in lazy.items():
                moved = fn(torch.empty(0, device=value.device, dtype=value.dtype))
                fresh = type(value)(value.requires_grad, device=moved.device, dtype=moved.dtype)
                if kind == "_parameters":
                    torch.utils.swap_tensors(value, fresh)  # the same Parameter, now on the new device
                else:
                    value = fresh
                getattr(module, kind)[key] = value

    with mock.patch.object(nn.Module, "_apply", _apply):
        yield


@contextlib.contextmanager
def like_a_gpu():
    """Run towards ``meta`` as towards a GPU: :class:`GpuRules` on, optimizers watched, and ``module.to()``
    keeping each Parameter object, a lazy module's uninitialised ones included (it does so for a GPU; for
    meta PyTorch would make new ones)."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    rules = GpuRules()
    try:
        with _lazy_kept_like_a_gpu(), rules.watching_optimizers(), rules:
            yield rules
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
