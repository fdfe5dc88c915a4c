"""Checkpoints: atomic saves, GPU files opened on a CPU, the weights_only rule, resuming."""

import pickle

import pytest
import torch
from torch import nn

from helpers.lesson import checkpoints
from helpers.lesson.models import Tudui


def test_save_load_round_trip_same_predictions(tmp_path):
    torch.manual_seed(0)
    model = Tudui().eval()
    x = torch.randn(4, 3, 32, 32)
    path = checkpoints.save(model.state_dict(), tmp_path / "sub" / "tudui.pt")
    restored = Tudui().eval()
    restored.load_state_dict(checkpoints.load(path))
    with torch.no_grad():
        assert torch.equal(model(x), restored(x))
    assert path.stat().st_mode & 0o044  # readable like any torch.save file, not mkstemp's 0600


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_interrupted_save_keeps_the_good_file(tmp_path, monkeypatch, interruption):
    path = tmp_path / "tudui.pt"
    checkpoints.save({"w": torch.ones(3)}, path)

    def broken_save(obj, f):
        f.write(b"PK\x03\x04 half a zip file")
        raise interruption("interrupted while writing")

    monkeypatch.setattr(checkpoints.torch, "save", broken_save)
    with pytest.raises(interruption):
        checkpoints.save({"w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(checkpoints.load(path)["w"], torch.ones(3))  # still the old, good file
    assert [p.name for p in tmp_path.iterdir()] == ["tudui.pt"]  # no temp file left behind


def test_gpu_checkpoint_loads_on_cpu_with_map_location(tmp_path):
    torch.manual_seed(0)
    model = Tudui().eval()
    path = tmp_path / "tudui_gpu.pt"
    with checkpoints.tag_as_saved_on("cuda:0"):
        torch.save(model.state_dict(), path)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            torch.load(path, weights_only=True)
    state = checkpoints.load(path, map_location="cpu")
    assert {t.device for t in state.values()} == {torch.device("cpu")}
    restored = Tudui().eval()
    restored.load_state_dict(state)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), restored(x))


def test_whole_model_refused_by_default_and_trusted_path(tmp_path):
    path = tmp_path / "tudui_0.pth"
    torch.save(Tudui(), path)  # what the original course does
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(path)
    with pytest.raises(pickle.UnpicklingError):
        checkpoints.load(path)
    model = torch.load(path, map_location="cpu", weights_only=False)  # only for files you trust
    assert isinstance(model, Tudui)


def test_resume_restores_model_optimizer_and_moves_state(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    model = Tudui()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    path = tmp_path / "train.pt"
    with checkpoints.tag_as_saved_on("cuda:0"):  # as if saved on a GPU machine
        checkpoints.save_training(path, model, opt, epoch=2, data_name="d")

    model2 = Tudui()
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.5, momentum=0.0)
    state = checkpoints.resume_training(path, model2, opt2, "cpu")
    assert state["epoch"] == 2 and state["data_name"] == "d"
    assert opt2.param_groups[0]["lr"] == 0.01 and opt2.param_groups[0]["momentum"] == 0.9
    assert checkpoints.optimizer_state_devices(opt2) == {torch.device("cpu")}
    for a, b in zip(opt.state.values(), opt2.state.values(), strict=True):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    # the next step is exactly the step the uninterrupted run would take
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.filterwarnings("ignore:for model.*copying from a non-meta parameter:UserWarning")
def test_optimizer_state_follows_the_parameters_and_order_matters(tmp_path):
    """load_state_dict puts the state where the parameters are; moving the model afterwards leaves it behind."""
    model = Tudui()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    path = checkpoints.save_training(tmp_path / "train.pt", model, opt, epoch=1)

    meta_model = Tudui().to("meta")  # a device that is not the CPU
    meta_opt = torch.optim.SGD(meta_model.parameters(), lr=0.01, momentum=0.9)
    checkpoints.resume_training(path, meta_model, meta_opt, "meta")
    assert checkpoints.optimizer_state_devices(meta_opt) == {torch.device("meta")}

    late = Tudui()
    late_opt = torch.optim.SGD(late.parameters(), lr=0.01, momentum=0.9)
    late_opt.load_state_dict(torch.load(path, weights_only=True)["optimizer"])
    late.to("meta")  # the pitfall: moved after the optimizer was loaded
    assert checkpoints.optimizer_state_devices(late_opt) == {torch.device("cpu")}
    with pytest.raises(ValueError, match="before resume_training"):
        checkpoints.resume_training(path, Tudui(), torch.optim.SGD(Tudui().parameters(), lr=0.01), "meta")


def test_refusal_summary_names_what_was_refused(tmp_path):
    path = tmp_path / "tudui_0.pth"
    torch.save(Tudui(), path)
    with pytest.raises(pickle.UnpicklingError) as info:
        torch.load(path)
    first, culprit = checkpoints.refusal_summary(info.value).splitlines()
    assert first == "UnpicklingError: Weights only load failed."
    assert "Unsupported global" in culprit and "helpers.lesson.models.Tudui" in culprit


def test_a_dtype_change_after_loading_keeps_parameters_but_leaves_the_state_behind(tmp_path):
    """The notebook's stand-in for a GPU move: like .to("cuda"), .to(float64) keeps the Parameter objects."""
    model = Tudui()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    assert checkpoints.optimizer_state_dtypes(opt) == set()
    nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    path = checkpoints.save_training(tmp_path / "train.pt", model, opt, epoch=1)

    late = Tudui()
    late_opt = torch.optim.SGD(late.parameters(), lr=0.01, momentum=0.9)
    late_opt.load_state_dict(checkpoints.load(path)["optimizer"])
    before = list(late.parameters())
    late.to(torch.float64)
    assert all(p is q for p, q in zip(before, late.parameters(), strict=True))
    assert checkpoints.optimizer_state_dtypes(late_opt) == {torch.float32}

    moved = Tudui()
    before = list(moved.parameters())
    moved.to("meta")  # a move to meta, by contrast, replaces them
    assert not any(p is q for p, q in zip(before, moved.parameters(), strict=True))
