"""The checks of notebook 09 accept right answers and explain typical wrong ones."""

import functools
import json
import multiprocessing
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    StackDataset,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    default_collate,
)
from torch.utils.data.distributed import DistributedSampler

from helpers.exercises import ex09_clinic as check
from helpers.lab.gpu_rules import like_a_gpu
from helpers.lesson.checkpoints import load
from helpers.lesson.models import Tudui


def unwritten(*args):
    raise NotImplementedError


def rejects(feedback, fragment: str) -> None:
    assert not feedback and fragment in feedback.message, feedback.message


# ---------------------------------------------------------------- (1) a training script with device bugs
def features():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class Net(nn.Module):  # the starter's model
    def __init__(self):
        super().__init__()
        self.features = features()

    def forward(self, x):
        classifier = nn.Linear(16, 10)  # a new layer at every call, on the CPU
        return classifier(self.features(x))


class FixedNet(Net):
    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(16, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


class HeadFirstNet(nn.Module):  # the layers created in another order, in one Sequential
    def __init__(self):
        super().__init__()
        head = nn.Linear(16, 10)
        self.layers = nn.Sequential(*features(), head)

    def forward(self, x):
        return self.layers(x)


class FollowsInputNet(Net):  # the device is right, the layer is still new at every call
    def forward(self, x):
        return nn.Linear(16, 10).to(x.device)(self.features(x))


class LazyHeadNet(Net):  # the head's input size is inferred at the first call; built in __init__, moved by .to()
    def __init__(self):
        super().__init__()
        self.classifier = nn.LazyLinear(10)

    def forward(self, x):
        return self.classifier(self.features(x))


class LazyInForwardNet(Net):  # a lazy layer made in forward() is still new, and on the CPU, at every call
    def forward(self, x):
        return nn.LazyLinear(10)(self.features(x))


def starter_train(make_model, start, batches, class_weights, device):
    model = make_model()
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=class_weights)
    losses = []
    for images, labels in batches:
        outputs = model(images.to(device))
        loss = loss_fn(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach().numpy()))
    return losses


def train_fixed(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        outputs = model(images.to(device))
        loss = loss_fn(outputs, labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_functional_one_sync(make_model, start, batches, class_weights, device):
    model = make_model()
    model.load_state_dict(start["model"])
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)  # load_state_dict restores lr and momentum
    optimizer.load_state_dict(start["optimizer"])
    weight = class_weights.to(device)
    losses = []
    for images, labels in batches:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        loss = F.cross_entropy(model(images), labels, weight=weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()  # one copy to the host, after the loop


def train_batches_moved_first(make_model, start, batches, class_weights, device):
    device = torch.device(device)
    on_device = [(x.to(device), y.to(device)) for x, y in batches]
    model = make_model()
    model.to(device)
    model.load_state_dict(start["model"])
    model.train()
    loss_fn = nn.CrossEntropyLoss(weight=class_weights)
    loss_fn.to(device)  # modules move in place
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    losses = []
    for step, (images, labels) in enumerate(on_device):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach().cpu().numpy()))
        print(f"step {step}: loss {losses[-1]:.3f}")
    return losses


def train_moves_optimizer_state(make_model, start, batches, class_weights, device):
    model = make_model()
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    model.to(device)
    for state in optimizer.state.values():  # the late move, repaired by hand
        for key, value in state.items():
            if torch.is_tensor(value):
                state[key] = value.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=class_weights.to(device))
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_tuple_and_clip(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for batch in batches:
        images, labels = (t.to(device) for t in batch)
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e6)  # never clips here
        optimizer.step()
        losses.append(float(loss))
    return tuple(losses)


@pytest.mark.parametrize(
    "train, make_model",
    [
        (train_fixed, FixedNet),
        (train_functional_one_sync, FixedNet),
        (train_batches_moved_first, HeadFirstNet),
        (train_moves_optimizer_state, FixedNet),
        (train_tuple_and_clip, HeadFirstNet),
        (train_fixed, LazyHeadNet),
        (train_moves_optimizer_state, LazyHeadNet),
    ],
)
def test_fixed_training_accepts(train, make_model, capsys):
    assert check.fixed_training(train, make_model), capsys.readouterr().out


def labels_left(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def weights_left(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def late_move(make_model, start, batches, class_weights, device):
    model = make_model()
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    model.to(device)  # after the optimizer's state was put beside the CPU parameters
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def model_not_moved(make_model, start, batches, class_weights, device):
    model = make_model()
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def images_left(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        images.to(device)  # the moved copy is thrown away
        loss = loss_fn(model(images), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def logs_numpy(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach().numpy()))
    return losses


def no_optimizer_state(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # the momentum starts from zero
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def unweighted(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    losses = []
    for images, labels in batches:
        loss = F.cross_entropy(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def no_model_state(make_model, start, batches, class_weights, device):
    model = make_model().to(device)  # trains the fresh model, not the checkpoint's
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def ignores_device(make_model, start, batches, class_weights, device):
    device = "cuda" if torch.cuda.is_available() else "cpu"  # decides the device itself
    return train_fixed(make_model, start, batches, class_weights, device)


def returns_tensors(make_model, start, batches, class_weights, device):
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(start["optimizer"])
    loss_fn = nn.CrossEntropyLoss(weight=class_weights).to(device)
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


@pytest.mark.parametrize(
    "train, make_model, fragment",
    [
        (unwritten, FixedNet, "Not written yet"),
        (starter_train, Net, "a layer (or tensor) created inside forward()"),
        (train_fixed, Net, "a layer (or tensor) created inside forward()"),
        (train_fixed, FollowsInputNet, "new and random at every call"),
        (train_fixed, LazyInForwardNet, "a layer (or tensor) created inside forward()"),
        (model_not_moved, LazyHeadNet, "the model stayed on cpu"),
        (late_move, LazyHeadNet, "optimizer.load_state_dict() puts the state beside the parameters"),
        (starter_train, FixedNet, "The labels and the loss's class weights stayed on cpu"),
        (labels_left, FixedNet, "The labels stayed on cpu"),
        (weights_left, FixedNet, "The loss's class weights stayed on cpu"),
        (late_move, FixedNet, "optimizer.load_state_dict() puts the state beside the parameters"),
        (model_not_moved, FixedNet, "the model stayed on cpu"),
        (images_left, FixedNet, "The images reached the model on cpu"),
        (logs_numpy, FixedNet, "can't convert meta device type tensor to numpy"),
        (no_optimizer_state, FixedNet, "Its momentum from the checkpoint was not loaded"),
        (unweighted, FixedNet, "ignores the class weights"),
        (no_model_state, FixedNet, "Load the checkpoint's model state into the model"),
        (ignores_device, FixedNet, "Use the `device` argument you are given"),
        (returns_tensors, FixedNet, "not tensors"),
    ],
)
def test_fixed_training_rejects(train, make_model, fragment):
    rejects(check.fixed_training(train, make_model), fragment)


META_MISSES = {  # mixes that meta's own kernels let through and a GPU refuses
    "a Conv2d with CPU weights on a meta input": lambda m: nn.Conv2d(3, 4, 3)(torch.ones(1, 3, 8, 8, device=m)),
    "meta @ cpu": lambda m: torch.ones(2, 2, device=m) @ torch.ones(2, 2),
    "meta.add_(cpu)": lambda m: torch.ones(2, device=m).add_(torch.ones(2)),
    "an Embedding with CPU weights and meta indices": lambda m: nn.Embedding(5, 3)(torch.zeros(2, 1, device=m).long()),
    "a CPU tensor indexed with meta indices": lambda m: torch.ones(5)[torch.tensor([0, 1], device=m)],
}  # fmt: skip


@pytest.mark.parametrize("mix", META_MISSES)
def test_gpu_rules_refuse_what_meta_lets_through(mix):
    with like_a_gpu() as rules, pytest.raises(RuntimeError, match="same device|indices should be either on"):
        META_MISSES[mix](torch.device("meta"))
    assert rules.refusals


def test_gpu_rules_allow_what_a_gpu_allows():
    meta = torch.device("meta")
    with like_a_gpu() as rules:
        assert torch.ones(5, device=meta)[torch.tensor([0, 1])].device == meta  # CPU indices (a blocking copy)
        assert torch.ones(5, device=meta)[torch.ones(5, dtype=torch.bool)].device == meta
        assert (torch.ones(2, device=meta) * torch.tensor(2.0)).device == meta  # a 0-dim CPU tensor
        assert torch.ones(2).to(meta).device == meta
    assert not rules.refusals


def test_like_a_gpu_keeps_a_lazy_module_lazy_until_its_first_call():
    head = nn.LazyLinear(10)
    weight = head.weight
    with like_a_gpu():
        head.to("meta")
        assert head.weight is weight and head.has_uninitialized_params() and weight.device.type == "meta"
        assert head(torch.ones(2, 16, device="meta")).shape == (2, 10)
    assert head.weight is weight and tuple(weight.shape) == (10, 16) and weight.device.type == "meta"


FIXTURE = Path(__file__).parent / "fixtures" / "gpu_error_messages.json"
CLINIC = Path(__file__).parent.parent / "notebooks" / "09_error_clinic.ipynb"


def _clinic_code() -> str:
    """The code of notebook 09, string literals joined as Python joins them."""
    cells = json.loads(CLINIC.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return re.sub(r'"\s*\n\s*"', "", code)


@pytest.mark.parametrize(
    "key", ["same_device_add", "linear_cpu_input", "same_device_matmul", "conv_cuda_input_cpu_weight"]
)
def test_the_clinic_quotes_cuda_as_recorded(key):
    """Notebook 09 shows CUDA's wordings as a GPU raised them (the fixture), word for word."""
    message = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"][key]["message"]
    assert f'"{message}"' in _clinic_code()


# ---------------------------------------------------------------- (2) a checkpoint loader for any machine
PREFIXES = ("module.", "_orig_mod.")


def plain_key(key: str) -> str:
    while key.startswith(PREFIXES):
        key = key.split(".", 1)[1]
    return key


def starter_loader(path, device):
    state = torch.load(path, weights_only=False)
    model = Tudui()
    model.load_state_dict(state)
    return model


def load_strip_loop(path, device):
    state = torch.load(path, map_location="cpu", weights_only=True)
    if "model" in state:
        state = state["model"]
    model = Tudui()
    model.load_state_dict({plain_key(k): v for k, v in state.items()})
    return model.to(device)


def load_consume_assign(path, device):
    state = torch.load(path, map_location=device)  # weights_only=True is the default
    state = state.get("model", state)
    for _ in range(2):  # two wrappers at most, in either order
        for prefix in PREFIXES:
            consume_prefix_in_state_dict_if_present(state, prefix)
    model = Tudui()
    model.load_state_dict(state, assign=True)  # the model takes the loaded tensors, already on device
    return model


def load_regex_into_device_model(path, device):
    checkpoint = load(path)  # the course's helper: map_location='cpu', weights_only=True
    state = checkpoint["model"] if "epoch" in checkpoint else checkpoint
    model = Tudui().to(device)
    model.load_state_dict({re.sub(r"^((module|_orig_mod)\.)+", "", k): v for k, v in state.items()})
    return model


def load_built_on_device(path, device):
    state = torch.load(path, map_location=lambda storage, location: storage, weights_only=True, mmap=True)
    if isinstance(state.get("model"), dict):
        state = state["model"]
    with torch.device(device):
        model = Tudui()
    cleaned = {}
    for key, value in state.items():
        while key.startswith("module.") or key.startswith("_orig_mod."):
            key = key.removeprefix("module.").removeprefix("_orig_mod.")
        cleaned[key] = value
    model.load_state_dict(cleaned)
    return model.eval()


def load_dict_location(path, device):
    state = torch.load(path, map_location={"cuda:0": "cpu"}, weights_only=True)
    state = state["model"] if "optimizer" in state else state
    names = Tudui().state_dict().keys()  # match each saved key to the plain name it ends with
    return _into({name: v for k, v in state.items() for name in names if k == name or k.endswith("." + name)}, device)


def _into(state, device):
    model = Tudui()
    model.load_state_dict(state)
    model.to(device)
    return model


@pytest.mark.parametrize(
    "fn",
    [load_strip_loop, load_consume_assign, load_regex_into_device_model, load_built_on_device, load_dict_location],
)
def test_load_anywhere_accepts(fn, capsys):
    assert check.load_anywhere(fn), capsys.readouterr().out


def load_unsafe(path, device):
    state = torch.load(path, map_location="cpu", weights_only=False)
    return _into({plain_key(k): v for k, v in state.get("model", state).items()}, device)


def load_unsafe_fallback(path, device):
    try:
        return load_strip_loop(path, device)
    except Exception:  # "it failed, so load it the old way"
        state = torch.load(path, map_location="cpu", weights_only=False)
        return _into({plain_key(k): v for k, v in state["model"].items()}, device)


def load_swallows_refusal(path, device):
    try:
        return load_strip_loop(path, device)
    except Exception:
        return None


def load_module_prefix_only(path, device):
    state = torch.load(path, map_location="cpu")
    state = state.get("model", state)
    consume_prefix_in_state_dict_if_present(state, "module.")
    return _into(state, device)


def load_one_order(path, device):
    state = torch.load(path, map_location="cpu")
    state = state.get("model", state)
    return _into({k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state.items()}, device)


def load_not_moved(path, device):
    state = torch.load(path, map_location="cpu")
    return _into({plain_key(k): v for k, v in state.get("model", state).items()}, "cpu")


def load_whole_dict(path, device):
    state = torch.load(path, map_location="cpu")
    return _into({plain_key(k): v for k, v in state.items()}, device)


def load_always_model(path, device):
    state = torch.load(path, map_location="cpu")["model"]
    return _into({plain_key(k): v for k, v in state.items()}, device)


def load_not_strict(path, device):
    state = torch.load(path, map_location="cpu")
    model = Tudui()
    model.load_state_dict(state.get("model", state), strict=False)
    return model.to(device)


def load_lstrip(path, device):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("model", state)
    state = {k.lstrip("module.").lstrip("_orig_mod."): v for k, v in state.items()}  # noqa: B005
    model = Tudui()
    model.load_state_dict(state)
    return model.to(device)


def load_lstrip_when_prefixed(path, device):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("model", state)
    plain = {}
    for k, v in state.items():
        while k.startswith(PREFIXES):
            k = k.lstrip("module.") if k.startswith("module.") else k.lstrip("_orig_mod.")  # noqa: B005
        plain[k] = v
    model = Tudui()
    model.load_state_dict(plain)
    return model.to(device)


def load_returns_state(path, device):
    state = torch.load(path, map_location=device)
    return {plain_key(k): v for k, v in state.get("model", state).items()}


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (starter_loader, "torch.load tried to put the tensors of a plain Tudui's state_dict back on cuda:0"),
        (load_unsafe, "ran code stored in it"),
        (load_unsafe_fallback, "ran code stored in it"),
        (load_swallows_refusal, "instead of raising"),
        (load_module_prefix_only, "the keys of a training checkpoint of a torch.compile'd model"),
        (load_one_order, "the keys of torch.compile(DDP(model))'s state_dict"),
        (load_not_moved, "load_state_dict copies values into the parameters where they are"),
        (load_whole_dict, "holds the model's state_dict under 'model'"),
        (load_always_model, "that file is the state_dict itself"),
        (load_not_strict, "does not hold the saved weights"),
        (load_returns_state, "you returned a dict"),
        (
            load_lstrip,
            "Your code turned the file's key 'model.0.weight' into '0.weight'; a plain Tudui's key is "
            "'model.0.weight'. str.lstrip('module.') strips any of the characters m o d u l e .",
        ),
        (load_lstrip_when_prefixed, "turned the file's key 'module.model.0.weight' into '0.weight'"),
    ],
)
def test_load_anywhere_rejects(fn, fragment):
    rejects(check.load_anywhere(fn), fragment)


# ---------------------------------------------------------------- (3) a DataLoader that works in notebooks
class Numbered(Dataset):  # in a module: a worker can import it
    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class NotebookNumbered(Numbered):
    """The same class as if a notebook cell defined it: it lives in __main__."""


def notebook_seed_worker(worker_id):
    torch.manual_seed(worker_id)


NOTEBOOK = [NotebookNumbered, notebook_seed_worker]


@pytest.fixture(autouse=True)
def defined_in_a_notebook(monkeypatch):
    """What a notebook cell defines is an attribute of __main__ (so it pickles, by reference to __main__)."""
    for obj in NOTEBOOK:
        monkeypatch.setattr(obj, "__module__", "__main__")
        monkeypatch.setattr(sys.modules["__main__"], obj.__qualname__, obj, raising=False)


def starter_make_loader(images, labels):
    return DataLoader(NotebookNumbered(images, labels), batch_size=16, shuffle=True, num_workers=2)


def loader_tensor_dataset(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2)


def loader_no_workers(images, labels):
    return DataLoader(NotebookNumbered(images, labels), batch_size=16, shuffle=True)  # num_workers=0


def loader_module_class_spawn(images, labels):
    return DataLoader(Numbered(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      persistent_workers=True, multiprocessing_context="spawn")  # fmt: skip


def loader_stack_dataset(images, labels):
    generator = torch.Generator().manual_seed(0)
    return DataLoader(StackDataset(images, labels), 16, shuffle=True, num_workers=1, generator=generator,
                      multiprocessing_context=torch.multiprocessing.get_context("spawn"))  # fmt: skip


def loader_list_pinned(images, labels):
    return DataLoader(list(zip(images, labels, strict=True)), batch_size=16, shuffle=True, num_workers=2,
                      pin_memory=True, prefetch_factor=4)  # fmt: skip


def loader_random_sampler(images, labels):
    dataset = TensorDataset(images, labels)
    return DataLoader(dataset, batch_size=16, sampler=RandomSampler(dataset), num_workers=2)


def loader_batch_sampler(images, labels):
    dataset = Subset(Numbered(images, labels), range(len(labels)))
    return DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), 16, drop_last=False), num_workers=2)


def loader_stdlib_spawn_context(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      multiprocessing_context=multiprocessing.get_context("spawn"),
                      collate_fn=functools.partial(default_collate))  # fmt: skip


class RedrawnSampler(Sampler):
    """A new permutation at each iteration, as hand-written samplers in public code draw it (e.g.
    https://github.com/5teffen/DL-Data-Vis, my_classes.py)."""

    def __init__(self, indices):
        self.indices = indices

    def __iter__(self):
        return (self.indices[i] for i in torch.randperm(len(self.indices)).tolist())

    def __len__(self):
        return len(self.indices)


def loader_redrawn_sampler(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, sampler=RedrawnSampler(range(len(labels))))


def loader_subset_random_sampler(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, sampler=SubsetRandomSampler(range(len(labels))))


@pytest.mark.parametrize(
    "fn",
    [loader_tensor_dataset, loader_no_workers, loader_module_class_spawn, loader_stack_dataset, loader_list_pinned,
     loader_random_sampler, loader_batch_sampler, loader_stdlib_spawn_context, loader_redrawn_sampler,
     loader_subset_random_sampler],
)  # fmt: skip
def test_notebook_safe_loader_accepts(fn, capsys):
    assert check.notebook_safe_loader(fn), capsys.readouterr().out


def loader_notebook_spawn(images, labels):
    return DataLoader(NotebookNumbered(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      multiprocessing_context="spawn")  # fmt: skip


def loader_fork(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      multiprocessing_context="fork")  # fmt: skip


def loader_forkserver(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      multiprocessing_context="forkserver")  # fmt: skip


def loader_notebook_init_fn(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      worker_init_fn=notebook_seed_worker)  # fmt: skip


def loader_shuffled_once(images, labels):
    """The order drawn once when the loader is built: a dataset shuffled once, then read in order (the idiom of
    https://github.com/meta-pytorch/torchforge/pull/609, a dataset's .shuffle() before its loader)."""
    return DataLoader(Subset(TensorDataset(images, labels), torch.randperm(len(labels)).tolist()), batch_size=16)


def loader_permuted_indices(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, sampler=torch.randperm(len(labels)).tolist())


def loader_distributed_sampler(images, labels):
    """A DistributedSampler without set_epoch repeats its order (https://github.com/lucidrains/DALLE-pytorch/pull/230)."""
    dataset = TensorDataset(images, labels)
    return DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))


def loader_lambda_collate(images, labels):
    return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2,
                      collate_fn=lambda batch: tuple(torch.stack(t) for t in zip(*batch, strict=True)))  # fmt: skip


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (starter_make_loader, "__main__.NotebookNumbered, defined in this notebook"),
        (loader_notebook_spawn, "A worker started by spawn imports what it unpickles"),
        (loader_fork, "multiprocessing_context='fork' is not portable"),
        (loader_forkserver, "Windows only has spawn"),
        (loader_notebook_init_fn, "__main__.notebook_seed_worker, defined in this notebook"),
        (loader_lambda_collate, "pickles its dataset, collate_fn and worker_init_fn"),
        (lambda x, y: DataLoader(TensorDataset(x, y), batch_size=16), "does not shuffle"),
        (loader_shuffled_once, "a Dataset permuted once, gives the order drawn at the start every time"),
        (loader_permuted_indices, "a list of indices"),
        (loader_distributed_sampler, "DistributedSampler draws a new order only when the training loop calls"),
        (lambda x, y: DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, drop_last=True), "missing"),
        (lambda x, y: DataLoader(TensorDataset(x, y), batch_size=10, shuffle=True), "Batch sizes [10, 10, 10, 10]"),
        (lambda x, y: list(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)), "not list"),
    ],
)
def test_notebook_safe_loader_rejects(fn, fragment):
    rejects(check.notebook_safe_loader(fn), fragment)


# ---------------------------------------------------------------- hints teach, they do not hand over the fix
SOLUTION_LINES = [  # lines of the worked solutions (notebooks/solutions/09_error_clinic_solutions.ipynb)
    "self.classifier = nn.Linear(16, 10)",
    "make_model().to(device)",
    "nn.CrossEntropyLoss(weight=class_weights).to(device)",
    "labels.to(device)",
    "loss.item()",
    "map_location='cpu'",
    "key.split('.', 1)[1]",
    "state['model']",
    "model.to(device)",
    "TensorDataset(images, labels)",
    "num_workers=0",
]


def _bank(test) -> list[tuple]:
    """The wrong answers of a parametrized rejects test: each case without its expected fragment."""
    return [case[:-1] for case in test.pytestmark[0].args[1]]


@pytest.mark.parametrize(
    "check_fn, test",
    [
        (check.fixed_training, test_fixed_training_rejects),
        (check.load_anywhere, test_load_anywhere_rejects),
        (check.notebook_safe_loader, test_notebook_safe_loader_rejects),
    ],
)
def test_no_feedback_prints_a_line_of_the_solution(check_fn, test, capsys):
    for case in _bank(test):
        feedback = check_fn(*case)
        assert not feedback
        printed = feedback.message.replace('"', "'")
        assert not [line for line in SOLUTION_LINES if line in printed], printed
