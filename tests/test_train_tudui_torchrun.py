"""python -m helpers train-tudui under torchrun: 2 CPU processes (gloo), resuming across process counts, errors,
a process that fails, a port already in use, the test set shared out.

The torchrun job runs through helpers.distributed.launch with a timeout (the whole process group is killed when
it expires) so a hang fails the test instead of blocking the suite.
"""

import re
import socket
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.distributed.launch import torchrun
from helpers.distributed.train_tudui import main
from helpers.lab.simulate import simulated_machine
from helpers.lesson import checkpoints
from helpers.lesson import data as D
from helpers.lesson.models import Tudui
from helpers.lesson.training import evaluate

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

    run = torchrun("helpers", "train-tudui", *common, "--epochs", "2", timeout=TIMEOUT).check()  # two processes
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


# helpers.distributed.train_tudui as torchrun runs it, with what a test needs and the command has no option for:
# tiny data (an odd-sized test set, which 2 ranks cannot share evenly), each rank's data order and test images printed,
# and rank 1 failing at a chosen optimizer step (FAIL_RANK_1_AT_STEP).
FAULTY = textwrap.dedent("""\
    import os, sys, zlib

    import torch
    from torch.utils.data import DistributedSampler

    from helpers.lesson import data, training
    from helpers.distributed import train_tudui

    data.SYNTHETIC_QUICK_SIZES = (256, 101)
    rank, fail_at, steps = int(os.environ["RANK"]), int(os.environ.get("FAIL_RANK_1_AT_STEP", 0)), [0]
    sgd_step, sampler_iter, evaluate = torch.optim.SGD.step, DistributedSampler.__iter__, training.evaluate

    def say(text):  # one write: lines of the two processes do not interleave
        sys.stdout.write(f"[rank {rank}] {text}\\n")
        sys.stdout.flush()

    def step(self, *args, **kwargs):
        steps[0] += 1
        if rank == 1 and steps[0] == fail_at:
            raise RuntimeError(f"rank 1 fails on purpose at step {fail_at}")
        return sgd_step(self, *args, **kwargs)

    def order(self):
        indices = list(sampler_iter(self))
        say(f"epoch {self.epoch} order {zlib.crc32(str(indices).encode())}")
        return iter(indices)

    def counted(model, loader, *args, **kwargs):
        say(f"evaluates {sum(len(targets) for _, targets in loader)} images")
        return evaluate(model, loader, *args, **kwargs)

    torch.optim.SGD.step, DistributedSampler.__iter__, training.evaluate = step, order, counted
    sys.exit(train_tudui.main(sys.argv[1:]))
    """)


def orders_seen(stdout: str) -> dict[tuple[int, int], str]:
    """{(rank, epoch): a checksum of the order of the training images} from what FAULTY prints."""
    return {(int(r), int(e)): crc for r, e, crc in re.findall(r"\[rank (\d)\] epoch (\d+) order (\d+)", stdout)}


def test_a_failing_process_ends_the_job_and_the_resumed_run_keeps_the_data_order(tmp_path, monkeypatch):
    """Rank 1 fails in epoch 2: no hang, the failure and a non-zero exit code. Resumed: epoch 2's order unchanged."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "tudui_faulty.py"
    script.write_text(FAULTY)
    ckpt = tmp_path / "tudui.pt"
    args = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32",
            "--epochs", "2", "--log-dir", str(tmp_path / "runs")]  # fmt: skip
    # 256 images, 2 ranks x 32: 4 steps per epoch; step 6 is the second of epoch 2, after epoch 1's checkpoint
    failed = torchrun(str(script), *args, timeout=TIMEOUT, env={"FAIL_RANK_1_AT_STEP": "6"})
    assert not failed.timed_out, "the other process waited for the one that failed"
    assert failed.returncode != 0
    assert "rank 1 fails on purpose at step 6" in failed.stderr  # the failure, named in the output
    assert re.search(r"rank\s*:\s*1\b", failed.stderr), "torchrun's summary names the failed rank"
    assert checkpoints.load(ckpt)["epoch"] == 1

    resumed = torchrun(str(script), *args, timeout=TIMEOUT).check()
    text = resumed.text()
    assert "resumed from" in text and "epoch 1 done" in text and "done in " in text
    orders = {"failed": orders_seen(failed.stdout), "resumed": orders_seen(resumed.stdout)}
    assert sorted(orders["failed"]) == [(0, 1), (0, 2), (1, 1), (1, 2)]  # (rank, epoch)
    assert sorted(orders["resumed"]) == [(0, 2), (1, 2)]  # epoch 2 only, in the order the failed run gave it
    assert all(orders["resumed"][key] == orders["failed"][key] for key in orders["resumed"])

    # the test set shared out exactly (101 images: 51 + 50, none repeated) and the results added up: the
    # accuracy of one process evaluating the whole test set with the same model
    assert sorted(set(re.findall(r"\[rank (\d)\] evaluates (\d+) images", text))) == [("0", "51"), ("1", "50")]
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (256, 101))
    state = checkpoints.load(ckpt)
    model = Tudui()
    model.load_state_dict(state["model"])
    test_set = D.load_cifar10(str(tmp_path / "data"), quick=True, verbose=False).test
    loss, accuracy = evaluate(model, DataLoader(test_set, batch_size=32), torch.nn.CrossEntropyLoss(), "cpu")
    assert state["history"]["test_accuracy"][-1] == accuracy
    assert state["history"]["test_loss"][-1] == pytest.approx(loss, rel=1e-5)


def test_a_port_in_use_is_named_with_what_to_do(torchrun_env, monkeypatch, capsys):
    """Processes started with MASTER_PORT set (as a cluster's launcher does) and the port taken: exit 2, not a trace."""
    monkeypatch.setenv("RANK", "0")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        with pytest.raises(SystemExit) as exit_info:
            main(["--device", "cpu", "--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"cannot start at 127.0.0.1:{port}: port {port} is already in use" in err
    assert "--standalone" in err and "--master-port" in err
