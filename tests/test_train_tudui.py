"""python -m helpers train-tudui: help, device errors, training, resuming, Ctrl-C."""

import subprocess
import sys

import pytest
import torch

from helpers.distributed.train_tudui import main
from helpers.lesson import checkpoints, training
from helpers.lesson import data as D


def run(*args):
    return subprocess.run([sys.executable, "-m", "helpers", "train-tudui", *args], capture_output=True, text=True)


def test_help_documents_the_options():
    result = run("--help")
    assert result.returncode == 0
    for option in ("--device", "--epochs", "--batch-size", "--lr", "--data-dir", "--checkpoint", "--quick", "resume"):
        assert option in result.stdout


def test_bad_device_exits_2_with_the_pickers_message():
    result = run("--device", "cuda: 0", "--quick")
    assert result.returncode == 2
    assert "Write 'cuda:0' instead" in result.stderr and "Traceback" not in result.stderr


def test_gpu_typo_in_process(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "gpu", "--quick"])
    assert exit_info.value.code == 2
    assert "Write 'cuda' instead (PyTorch calls NVIDIA GPUs 'cuda')" in capsys.readouterr().err


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_trains_saves_and_resumes(tiny, capsys):
    ckpt = tiny / "ck" / "tudui.pt"
    common = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32"]
    assert main([*common, "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "synthetic CIFAR-shaped data" in out and "not CIFAR-10 results" in out
    assert checkpoints.load(ckpt)["epoch"] == 1

    assert main([*common, "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "resumed from" in out and "epoch 1 done" in out and "epoch 2:" in out
    state = checkpoints.load(ckpt)
    assert state["epoch"] == 2 and state["history"]["epochs"] == [1, 2]

    assert main([*common, "--epochs", "2"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_ctrl_c_keeps_the_last_good_checkpoint(tiny, monkeypatch, capsys):
    ckpt = tiny / "tudui.pt"
    real = training.train_one_epoch
    calls = []

    def interrupted_on_second_epoch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "train_one_epoch", interrupted_on_second_epoch)
    args = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--epochs", "3"]
    assert main(args) == 130
    assert "tudui.pt (epoch 1) is intact; run the same command to resume" in capsys.readouterr().err
    assert checkpoints.load(ckpt)["epoch"] == 1


def offline_full_data(monkeypatch):
    """A full (not quick) run without internet: the synthetic fallback at its full size (small here)."""
    monkeypatch.setattr(D, "SYNTHETIC_SIZES", (192, 64))
    monkeypatch.setattr(D, "load_cifar10", lambda root, quick: D.synthetic(False, reason="offline"))


def quick_checkpoint(ckpt):
    common = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32"]
    assert main([*common, "--epochs", "1"]) == 0


def test_a_quick_checkpoint_is_not_resumed_by_a_full_run(tiny, monkeypatch, capsys):
    ckpt = tiny / "tudui.pt"
    quick_checkpoint(ckpt)
    offline_full_data(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32", "--epochs", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "data size (train, test) was [128, 64], now [192, 64]" in err and "--quick" in err and "--no-resume" in err
    assert checkpoints.load(ckpt)["epoch"] == 1  # untouched


SETTINGS = [
    ("--lr", "0.1", "--lr was 0.01, now 0.1"),
    ("--momentum", "0.9", "--momentum was 0.0, now 0.9"),
    ("--batch-size", "16", "--batch-size was 32, now 16"),
]


@pytest.mark.parametrize("option, value, fragment", SETTINGS)
def test_changed_settings_are_refused_on_resume(tiny, capsys, option, value, fragment):
    ckpt = tiny / "tudui.pt"
    quick_checkpoint(ckpt)
    args = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32"]
    args += [option, value]  # the last --batch-size wins
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--epochs", "2"])
    assert exit_info.value.code == 2 and fragment in capsys.readouterr().err


@pytest.mark.parametrize("preload", [False, True])
def test_a_resumed_run_sees_the_data_order_of_an_uninterrupted_one(tiny, capsys, preload):
    common = ["--quick", "--device", "cpu", "--no-progress", "--batch-size", "32"] + (["--preload"] if preload else [])
    assert main([*common, "--checkpoint", str(tiny / "straight.pt"), "--epochs", "2"]) == 0
    assert main([*common, "--checkpoint", str(tiny / "resumed.pt"), "--epochs", "1"]) == 0
    assert main([*common, "--checkpoint", str(tiny / "resumed.pt"), "--epochs", "2"]) == 0
    straight, resumed = checkpoints.load(tiny / "straight.pt"), checkpoints.load(tiny / "resumed.pt")
    assert straight["history"] == resumed["history"]
    assert all(torch.equal(straight["model"][k], resumed["model"][k]) for k in straight["model"])


def test_ctrl_c_during_the_download_exits_130_with_a_message(tiny, monkeypatch, capsys):
    def ctrl_c(root, quick):
        raise KeyboardInterrupt

    monkeypatch.setattr(D, "load_cifar10", ctrl_c)
    assert main(["--device", "cpu", "--checkpoint", str(tiny / "tudui.pt")]) == 130
    err = capsys.readouterr().err
    assert "interrupted while getting CIFAR-10" in err and "Traceback" not in err
    assert not (tiny / "tudui.pt").exists()
