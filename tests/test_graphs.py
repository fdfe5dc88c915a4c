"""graph_nodes: what a tensor total keeps alive (notebook 05's going-deeper section)."""

import torch
from torch import nn

from helpers.lab.graphs import graph_nodes
from helpers.lesson.models import Tudui


def test_a_loss_total_keeps_every_batchs_graph():
    model, loss_fn = Tudui(), nn.CrossEntropyLoss()
    params = len(list(model.parameters()))
    total, kept = 0, []
    for _ in range(3):
        loss = loss_fn(model(torch.randn(2, 3, 32, 32)), torch.tensor([0, 1]))
        loss.backward()
        total = total + loss
        kept.append(graph_nodes(total))
    batch = graph_nodes(loss)
    assert batch > params  # the operations plus one AccumulateGrad per parameter tensor
    assert kept == [batch + 1 + i * (batch - params + 1) for i in range(3)]


def test_no_graph_no_nodes():
    x = torch.ones(3, requires_grad=True)
    assert graph_nodes(x) == 0 and graph_nodes((x * 2).detach()) == 0
    assert graph_nodes(x * 2) == 2  # MulBackward0 and x's AccumulateGrad
