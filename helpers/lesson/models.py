"""The model the course trains: Tudui, from the well-known Chinese PyTorch course (xiaotudui/pytorch-tutorial).

Kept exactly as the original ``src/model.py`` writes it (same layers, same ``self.model`` name, so its
``state_dict`` keys match the original's): three 5x5 convolutions with max pooling, then two linear
layers. Note that it has **no activation function** between its layers: every layer is linear (max
pooling is the only non-linear step), so the notebook's exercise adds ``nn.ReLU`` and compares.
"""

from torch import nn


# 搭建神经网络 (build the network), as in the original course
class Tudui(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(3, 32, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, 64),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        x = self.model(x)
        return x


def count_parameters(model: nn.Module) -> int:
    """Number of trainable numbers in ``model`` (145,578 for Tudui)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
