"""The checks of notebook 05 accept right answers and explain typical wrong ones."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises import ex05_training as check


def unwritten(*args):
    raise NotImplementedError


# (a) method 2 -> method 1
def loop_method1(model, loss_fn, optimizer, train_dataloader, device):
    model = model.to(device)
    loss_fn = loss_fn.to(device)
    model.train()
    for imgs, targets in train_dataloader:
        imgs = imgs.to(device)
        targets = targets.to(device)
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_method2(model, loss_fn, optimizer, train_dataloader, device):
    if torch.cuda.is_available():
        model = model.cuda()
    for imgs, targets in train_dataloader:
        if torch.cuda.is_available():
            imgs, targets = imgs.cuda(), targets.cuda()
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_inputs_not_kept(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    for imgs, targets in train_dataloader:
        imgs.to(device)  # result thrown away
        targets.to(device)
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_labels_not_moved(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    for imgs, targets in train_dataloader:
        loss = loss_fn(model(imgs.to(device)), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_inputs_not_moved(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    for imgs, targets in train_dataloader:
        loss = loss_fn(model(imgs), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_no_step(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    for imgs, targets in train_dataloader:
        loss = loss_fn(model(imgs.to(device)), targets.to(device))
    return loss


def loop_returns_item(model, loss_fn, optimizer, train_dataloader, device):
    return loop_method1(model, loss_fn, optimizer, train_dataloader, device).item()


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (loop_method2, "A method-2 loop decides the device itself"),
        (loop_inputs_not_kept, "the inputs and the labels of each batch stayed"),
        (loop_labels_not_moved, "but the labels of each batch stayed"),
        (loop_inputs_not_moved, "but the inputs of each batch stayed"),
        (loop_no_step, "The parameters did not change"),
        (loop_returns_item, "not float"),
    ],
)
def test_method1_rejects(fn, fragment, capsys):
    assert not check.method1_loop(fn)
    assert fragment in capsys.readouterr().out


def test_method1_accepts():
    assert check.method1_loop(loop_method1)


# (b) class weights
def loss_right(class_counts, device):
    counts = torch.tensor(class_counts, dtype=torch.float32)
    weight = counts.sum() / (len(counts) * counts)
    return nn.CrossEntropyLoss(weight=weight).to(device)


def loss_weight_moved_first(class_counts, device):
    weight = 1.0 / torch.tensor(class_counts, dtype=torch.float32, device=device)
    return nn.CrossEntropyLoss(weight=weight)


def loss_not_moved(class_counts, device):
    return nn.CrossEntropyLoss(weight=1.0 / torch.tensor(class_counts, dtype=torch.float32))


def loss_proportional(class_counts, device):
    return nn.CrossEntropyLoss(weight=torch.tensor(class_counts, dtype=torch.float32)).to(device)


def loss_float64(class_counts, device):
    return nn.CrossEntropyLoss(weight=1.0 / torch.tensor(class_counts, dtype=torch.float64)).to(device)


def loss_unweighted(class_counts, device):
    return nn.CrossEntropyLoss().to(device)


@pytest.mark.parametrize("fn", [loss_right, loss_weight_moved_first])
def test_weighted_loss_accepts(fn):
    assert check.weighted_loss(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (loss_not_moved, "the class weights are on cpu"),
        (loss_proportional, "inversely proportional"),
        (loss_unweighted, "no class weights"),
        (loss_float64, "dtype=torch.float32"),
    ],
)
def test_weighted_loss_rejects(fn, fragment, capsys):
    assert not check.weighted_loss(fn)
    assert fragment in capsys.readouterr().out


# (c) ReLU
def conv(i, o):
    return nn.Conv2d(i, o, 5, 1, 2)


class TuduiReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            conv(3, 32), nn.ReLU(), nn.MaxPool2d(2),
            conv(32, 32), nn.ReLU(), nn.MaxPool2d(2),
            conv(32, 64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1024, 64), nn.ReLU(), nn.Linear(64, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.model(x)


class TuduiFunctional(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(*[m for m in self.model if not isinstance(m, nn.ReLU)])

    def forward(self, x):
        for layer in self.model:
            x = layer(x)
            if isinstance(layer, (nn.Conv2d,)) or (isinstance(layer, nn.Linear) and layer.out_features == 64):
                x = F.relu(x)
        return x


class ReluAtTheEnd(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model.append(nn.ReLU())


class ReluOnlyInConvs(TuduiReLU):
    def __init__(self):
        super().__init__()
        del self.model[11]  # the ReLU between the Linear layers


class SigmoidInstead(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(*[nn.Sigmoid() if isinstance(m, nn.ReLU) else m for m in self.model])


class SoftmaxAtTheEnd(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model.append(nn.Softmax(dim=1))


class OneReluOnly(TuduiReLU):
    def __init__(self):
        super().__init__()
        for i in (7, 4, 1):  # keep only the ReLU between the Linear layers
            del self.model[i]


class LayerInForward(TuduiFunctional):
    def forward(self, x):
        x = self.model[:-1](x)
        x = nn.ReLU()(x)
        return nn.Linear(64, 10)(x)  # a new, untrained layer on the CPU, every call


class WiderHead(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model[-3] = nn.Linear(1024, 128)
        self.model[-1] = nn.Linear(128, 10)


@pytest.mark.parametrize("cls", [TuduiReLU, TuduiFunctional])
def test_relu_accepts(cls, capsys):
    assert check.tudui_relu(cls)
    assert "with 4 ReLU activations" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (unwritten, "Not written yet"),
        (ReluAtTheEnd, "ends with ReLU"),
        (ReluOnlyInConvs, "between the two Linear layers"),
        (SigmoidInstead, "uses sigmoid, not ReLU"),
        (SoftmaxAtTheEnd, "ends with softmax"),
        (OneReluOnly, "No ReLU after convolution 1, convolution 2, convolution 3"),
        (LayerInForward, "created inside forward()"),
        (WiderHead, "parameters"),
    ],
)
def test_relu_rejects(cls, fragment, capsys):
    assert not check.tudui_relu(cls)
    assert fragment in capsys.readouterr().out
