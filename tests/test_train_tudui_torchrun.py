"""python -m helpers.train_tudui under torchrun: 2 CPU processes (gloo), resuming across process counts, errors.

The torchrun job runs through helpers.launch with a timeout (the whole process group is killed when
it expires) so a hang fails the test instead of blocking the suite.
"""

import pytest
import torch

from helpers import checkpoints
from helpers.launch import torchrun
from helpers.simulate import simulated_machine
from helpers.train_tudui import main

TIMEOUT = 300  # seconds for the job on a loaded 2-core machine; about 10 s on an idle one


@pytest.fixture
def one_thread():
    """The in-process runs on one thread, as each torchrun process: no oversubscription on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_processes_resume_one_and_are_resumed_by_one(tmp_path, monkeypatch, capsys, one_thread):
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "tudui.pt"
    common = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32"]
    common += ["--log-dir", str(tmp_path / "runs")]
    assert main([*common, "--epochs", "1"]) == 0  # one process
    capsys.readouterr()

    run = torchrun("helpers.train_tudui", *common, "--epochs", "2", timeout=TIMEOUT).check()  # two processes
    text = run.text()
    assert "device: cpu in each of 2 processes (DDP, gloo), batch 32 each = effective batch 64" in text
    assert "resumed from" in text and "epoch 1 done" in text and "epoch 2:" in text
    for line in ("data: ", "device: ", "done in "):  # rank 0 alone prints
        assert sum(row.startswith(line) for row in text.splitlines()) == 1, line
    state = checkpoints.load(ckpt)
    assert state["epoch"] == 2 and state["history"]["epochs"] == [1, 2]
    assert not any(key.startswith("module.") for key in state["model"])

    assert main([*common, "--epochs", "3"]) == 0  # one process again
    out = capsys.readouterr().out
    assert "resumed from" in out and "epoch 2 done" in out and "epoch 3:" in out
    assert checkpoints.load(ckpt)["history"]["epochs"] == [1, 2, 3]


@pytest.fixture
def torchrun_env(monkeypatch):
    """The environment torchrun gives rank 1 of 2 (no process group is joined: the run stops before)."""
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)


def test_an_explicit_gpu_index_under_torchrun_is_refused(torchrun_env, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cuda:1", "--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "under torchrun, --device cuda:1 cannot be used: use --device cuda (each rank takes cuda:LOCAL_RANK)" in err


def test_more_processes_than_gpus_is_refused(torchrun_env, capsys):
    with simulated_machine(cuda=1), pytest.raises(SystemExit) as exit_info:  # rank 1 has no GPU of its own
        main(["--device", "cuda", "--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "LOCAL_RANK=1, but this machine has 1 GPU(s)" in err and "--nproc_per_node=1" in err
    assert "--device cpu" in err
