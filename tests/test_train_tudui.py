"""python -m helpers.train_tudui: help, device errors, training, resuming, Ctrl-C."""

import subprocess
import sys

import pytest

from helpers import checkpoints, training
from helpers import data as D
from helpers.train_tudui import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "helpers.train_tudui", *args], capture_output=True, text=True)


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
