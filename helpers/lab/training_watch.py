"""Watching a learner's training code from outside (notebook 06's and 09's checks): what each optimizer step found,
and which models a model factory built.

``StepWatch(optimizer)`` notes, before each step, how large the gradients are (a tensor on their device: nothing is
read on the host while the code under test runs); ``cleared()`` then says whether every step found them cleared,
the mark of ``zero_grad()`` called between ``backward()`` and ``step()``. ``BuiltModels(make_model)`` is the factory
itself, remembering each model it built, so a check can look at the model the code trained.
"""

from __future__ import annotations

import torch
from torch import nn


class StepWatch:
    """Watches an optimizer: ``cleared()`` is True when every step found its gradients cleared (None or zero)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.sizes: list[torch.Tensor | None] = []  # per step: the gradients' total size, on their device
        optimizer.register_step_pre_hook(self._look)

    def _look(self, opt, args, kwargs) -> None:
        grads = [
            p.grad.detach().abs().sum() for group in opt.param_groups for p in group["params"] if p.grad is not None
        ]
        self.sizes.append(torch.stack(grads).sum() if grads else None)

    def cleared(self) -> bool:
        return bool(self.sizes) and all(s is None or float(s) == 0 for s in self.sizes)


class BuiltModels:
    """``make_model``, remembering each model it built (``models``, in order)."""

    def __init__(self, make_model) -> None:
        self.make_model = make_model
        self.models: list[nn.Module] = []

    def __call__(self, *args, **kwargs):
        model = self.make_model(*args, **kwargs)
        self.models.append(model)
        return model
