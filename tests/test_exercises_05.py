"""The checks of notebook 05 accept right answers and explain typical wrong ones."""

import numpy as np
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
        (loop_no_step, "the parameters did not change"),
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


# The test bank: more right answers in different styles, and wrong ones with their hints.
def loop_sums_item(model, loss_fn, optimizer, train_dataloader, device):
    model = model.to(device)
    total = 0.0
    for imgs, targets in train_dataloader:
        imgs, targets = imgs.to(device), targets.to(device)
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()  # a copy to the host per batch: slow on a GPU, but right
    print(f"mean loss {total / len(train_dataloader):.3f}")
    return loss


def loop_logs_and_counts(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    loss_fn.to(device)
    model.train()
    correct = 0
    for step, batch in enumerate(train_dataloader):
        imgs, targets = (t.to(device, non_blocking=True) for t in batch)
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        correct += (outputs.argmax(1) == targets).sum()
        if step % 100 == 0:
            print(f"step {step}: loss {loss:.3f}")
    print("accuracy", float(correct) / sum(len(t) for _, t in train_dataloader))
    return loss


def loop_device_object(model, loss_fn, optimizer, train_dataloader, device):
    device = torch.device(device)
    model = model.to(device=device)
    for imgs, targets in train_dataloader:
        outputs = model(imgs.to(device))
        loss = loss_fn(outputs, targets.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return loss.detach()


def loop_keeps_loss_values(model, loss_fn, optimizer, train_dataloader, device):
    model.to(device)
    losses = []
    for imgs, targets in train_dataloader:
        loss = loss_fn(model(imgs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    print("losses:", torch.stack(losses).cpu().tolist())
    return losses[-1]


@pytest.mark.parametrize("fn", [loop_sums_item, loop_logs_and_counts, loop_device_object, loop_keeps_loss_values])
def test_method1_accepts_more(fn, capsys):
    assert check.method1_loop(fn)
    assert "[PASS]" in capsys.readouterr().out


def loop_model_not_moved(model, loss_fn, optimizer, train_dataloader, device):
    for imgs, targets in train_dataloader:
        loss = loss_fn(model(imgs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def loop_returns_loss_on_cpu(model, loss_fn, optimizer, train_dataloader, device):
    return loop_method1(model, loss_fn, optimizer, train_dataloader, device).cpu()


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (loop_model_not_moved, "the model stayed on cpu"),
        (loop_returns_loss_on_cpu, "the returned loss is on cpu"),
        (lambda *args: None, "left the model on cpu and did not train it"),
    ],
)
def test_method1_rejects_more(fn, fragment, capsys):
    assert not check.method1_loop(fn)
    assert fragment in capsys.readouterr().out


def loss_reciprocal(class_counts, device):
    weight = torch.tensor(class_counts).float().reciprocal().to(device)
    return nn.CrossEntropyLoss(weight=weight)


def loss_normalised(class_counts, device):
    weight = 1.0 / np.asarray(class_counts, dtype=np.float32)
    weight = torch.from_numpy(weight / weight.sum())
    loss_fn = nn.CrossEntropyLoss(weight=weight)
    loss_fn.to(device)  # modules move in place
    return loss_fn


def loss_max_over_count(class_counts, device):
    weight = [max(class_counts) / count for count in class_counts]
    return nn.CrossEntropyLoss(weight=torch.tensor(weight, dtype=torch.float32, device=device), reduction="mean")


@pytest.mark.parametrize("fn", [loss_reciprocal, loss_normalised, loss_max_over_count])
def test_weighted_loss_accepts_more(fn):
    assert check.weighted_loss(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (
            lambda counts, device: nn.CrossEntropyLoss(weight=torch.ones(10)).to(device),
            "got no more weight than the others",
        ),
        (lambda counts, device: nn.CrossEntropyLoss(weight=torch.ones(5, device=device)), "10 floats"),
        (lambda counts, device: nn.NLLLoss(weight=1 / torch.tensor(counts).float()).to(device), "not NLLLoss"),
    ],
)
def test_weighted_loss_rejects_more(fn, fragment, capsys):
    assert not check.weighted_loss(fn)
    assert fragment in capsys.readouterr().out


class TuduiSeparateLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = conv(3, 32), conv(32, 32), conv(32, 64)
        self.pool = nn.MaxPool2d(2)
        self.fc1, self.fc2 = nn.Linear(1024, 64), nn.Linear(64, 10)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.pool(self.relu(self.conv3(x)))
        return self.fc2(self.relu(self.fc1(torch.flatten(x, 1))))


class TuduiReluAfterPool(TuduiReLU):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            conv(3, 32), nn.MaxPool2d(2), nn.ReLU(),
            conv(32, 32), nn.MaxPool2d(2), nn.ReLU(),
            conv(32, 64), nn.MaxPool2d(2), nn.ReLU(),
            nn.Flatten(), nn.Linear(1024, 64), nn.ReLU(), nn.Linear(64, 10),
        )  # fmt: skip


class TuduiMethodRelu(TuduiFunctional):
    def forward(self, x):
        for layer in self.model:
            x = layer(x)
            if isinstance(layer, nn.Conv2d) or (isinstance(layer, nn.Linear) and layer.out_features == 64):
                x = x.relu()
        return x


class TuduiClamp(TuduiFunctional):
    def forward(self, x):
        for layer in self.model:
            x = layer(x)
            if isinstance(layer, nn.Conv2d) or (isinstance(layer, nn.Linear) and layer.out_features == 64):
                x = torch.clamp(x, min=0)  # the same function as ReLU
        return x


@pytest.mark.parametrize("cls", [TuduiSeparateLayers, TuduiReluAfterPool, TuduiMethodRelu, TuduiClamp])
def test_relu_accepts_more(cls, capsys):
    assert check.tudui_relu(cls)
    assert "with 4 ReLU activations" in capsys.readouterr().out


class TuduiReturnsTuple(TuduiReLU):
    def forward(self, x):
        return self.model(x), x


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (TuduiReturnsTuple, "Expected 2x10 outputs on"),
        (lambda: nn.Linear(3, 10), "parameters"),
        (lambda: None, "must be an nn.Module"),
    ],
)
def test_relu_rejects_more(cls, fragment, capsys):
    assert not check.tudui_relu(cls)
    assert fragment in capsys.readouterr().out
