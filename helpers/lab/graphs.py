"""Counting what an autograd graph holds (supporting code for notebooks 02 and 05)."""

from __future__ import annotations

import torch


def graph_nodes(tensor: torch.Tensor) -> int:
    """How many autograd nodes ``tensor`` keeps alive: its ``grad_fn`` and everything reachable from it.

    Nodes shared by several paths (e.g. the ``AccumulateGrad`` node of each parameter) count once.
    0 for a tensor outside any graph (a leaf, or a result computed under ``no_grad``/``detach``).
    """
    seen: set = set()
    todo = [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(parent for parent, _ in node.next_functions)
    return len(seen)
