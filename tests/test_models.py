"""Tudui is exactly the original course's model."""

import torch
from torch import nn

from helpers.lesson.models import Tudui, count_parameters


def test_parameter_count():
    assert count_parameters(Tudui()) == 145_578


def test_layers_and_shapes_as_the_original():
    model = Tudui()
    x = torch.ones(64, 3, 32, 32)  # the original's own smoke test
    shapes = []
    for layer in model.model:
        x = layer(x)
        shapes.append((type(layer).__name__, tuple(x.shape[1:])))
    assert shapes == [
        ("Conv2d", (32, 32, 32)),
        ("MaxPool2d", (32, 16, 16)),
        ("Conv2d", (32, 16, 16)),
        ("MaxPool2d", (32, 8, 8)),
        ("Conv2d", (64, 8, 8)),
        ("MaxPool2d", (64, 4, 4)),
        ("Flatten", (1024,)),
        ("Linear", (64,)),
        ("Linear", (10,)),
    ]
    assert model(torch.ones(64, 3, 32, 32)).shape == (64, 10)


def test_conv_settings_and_no_activation():
    convs = [m for m in Tudui().modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (3, 32, (5, 5), (1, 1), (2, 2)),
        (32, 32, (5, 5), (1, 1), (2, 2)),
        (32, 64, (5, 5), (1, 1), (2, 2)),
    ]
    activations = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.LeakyReLU)
    assert not any(isinstance(m, activations) for m in Tudui().modules())


def test_state_dict_keys_match_the_original():
    # the original names its nn.Sequential `model`, so its checkpoints' keys read model.N.weight
    keys = list(Tudui().state_dict())
    assert keys[:2] == ["model.0.weight", "model.0.bias"]
    assert keys[-1] == "model.8.bias"
