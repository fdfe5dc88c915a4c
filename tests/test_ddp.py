"""Real torchrun jobs with gloo on CPU processes: DDP, a collective timeout, two nodes, FSDP2.

Every job runs through helpers.distributed.launch with a timeout (the whole process group is killed when it
expires) and on a free loopback port, so a hang fails the test instead of blocking the suite.
"""

import datetime
import json
import os
import re
from unittest import mock

import pytest
import torch

from helpers.distributed import ddp_train
from helpers.distributed.launch import Run, free_port, joined_text, torchrun, torchrun_nodes
from helpers.lab.simulate import simulated_machine
from tools import course

TIMEOUT = 300  # seconds for one job on a loaded 2-core machine; a job takes about 10 s on an idle one


def test_run_text_sorts_the_ranked_lines():
    run = Run("torchrun ...", 0, "[rank 1] b\nepoch 1\n[rank 0] a\n\nepoch 2\n", "", 1.0)
    assert run.text() == "epoch 1\nepoch 2\n[rank 0] a\n[rank 1] b"
    assert joined_text([Run("", 0, "[rank 1] x\n", "", 0), Run("", 0, "log\n[rank 0] y\n", "", 0)]) == (
        "log\n[rank 0] y\n[rank 1] x"
    )


def test_run_text_keeps_each_ranks_lines_in_order_and_ranks_in_number_order():
    run = Run("", 0, "[rank 10] x\n[rank 2] zz first\n[rank 2] aa second\n", "", 1.0)
    assert run.text() == "[rank 2] zz first\n[rank 2] aa second\n[rank 10] x"


def test_only_an_abort_at_shutdown_counts_as_one():
    from helpers.distributed.launch import SHUTDOWN_ABORT, _aborted_at_shutdown

    assert _aborted_at_shutdown([Run("", -6, "done", SHUTDOWN_ABORT, 1.0)])
    assert not _aborted_at_shutdown([Run("", 1, "", "RuntimeError: Timed out", 1.0)])
    assert not _aborted_at_shutdown([Run("", 0, "done", "", 1.0), Run("", -9, "", SHUTDOWN_ABORT, 1.0, timed_out=True)])


def test_free_port_is_a_loopback_port_one_can_bind():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_two_processes_train_as_one_and_resume_on_one(tmp_path):
    """2 processes x 32 == 1 process x 64; rank 0's checkpoint has no prefix and resumes in one process."""
    ckpt, result = str(tmp_path / "ddp.pt"), str(tmp_path / "ddp.json")
    args = ["--device", "cpu", "--samples", "256", "--seed", "3"]
    run = torchrun("helpers", "ddp-train", *args, "--epochs", "1", "--checkpoint", ckpt, "--result", result,
                   timeout=TIMEOUT).check()  # fmt: skip
    assert "2 process(es) x batch 32 = effective batch 64" in run.text()
    assert "parameters identical on all 2 process(es): True" in run.text()
    with open(result) as f:
        two = json.load(f)
    assert len(set(two["fingerprints"])) == 1

    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert state["epoch"] == 1 and not any(k.startswith("module.") for k in state["model"])

    one = ddp_train.main([*args, "--batch-size", "64", "--epochs", "2"])  # uninterrupted, one process
    assert max(abs(a - b) for a, b in zip(one["losses"], two["losses"], strict=False)) < 1e-4
    resumed = ddp_train.main([*args, "--batch-size", "64", "--epochs", "2", "--checkpoint", ckpt, "--resume"])
    assert len(resumed["losses"]) == 4  # epoch 2 only: 256 images / 64
    assert max(abs(a - b) for a, b in zip(resumed["losses"], one["losses"][4:], strict=True)) < 1e-4
    # Two ranks' averaged gradients are one batch's summed in another order: after 8 steps the weights differ by up
    # to about 1.3e-5 (one thread per process; 5e-6 with two), where one epoch more or less moves each tensor by 2e-4
    # or more.
    for k, v in one["state_dict"].items():
        assert torch.allclose(resumed["state_dict"][k], v, rtol=0, atol=5e-5), k


def test_a_collective_only_rank_0_calls_fails_fast():
    run = torchrun("helpers", "collective-timeout", "--timeout", "3", timeout=TIMEOUT)
    assert run.returncode != 0 and not run.timed_out
    assert "rank 0 gave up" in run.text() and "timed out" in run.text().lower()
    waited = float(re.search(r"gave up after ([\d.]+) s \(timeout 3 s\)", run.text()).group(1))
    assert 3 * 0.99 <= waited < 3 + 60  # not before the timeout; the margin is for a loaded machine


def test_the_default_timeouts_are_the_ones_the_notebook_names():
    from torch.distributed import constants

    assert constants.default_pg_timeout == datetime.timedelta(minutes=30)
    assert constants.default_pg_nccl_timeout in (None, datetime.timedelta(minutes=10))


def test_a_job_past_its_timeout_is_killed():
    run = torchrun("helpers", "collective-timeout", "--timeout", "600", timeout=5)
    assert run.timed_out and run.seconds < 60
    with pytest.raises(RuntimeError, match="timed out"):
        run.check()


def test_two_nodes_on_localhost():
    nodes = torchrun_nodes("helpers", "ddp-train", "--device", "cpu", "--samples", "128", "--epochs", "1",
                           nnodes=2, nproc_per_node=1, timeout=TIMEOUT)  # fmt: skip
    for node in nodes:
        node.check()
        assert "--nnodes=2" in node.command and "--rdzv-endpoint=127.0.0.1:" in node.command
    text = joined_text(nodes)
    assert "2 process(es) x batch 32" in text and "parameters identical on all 2 process(es): True" in text


def test_fsdp_shards_and_matches_one_process(tmp_path):
    result = tmp_path / "fsdp.json"
    args = ["--device", "cpu", "--samples", "256", "--epochs", "1"]
    torchrun("helpers", "fsdp-train", *args, "--result", result, timeout=TIMEOUT).check()
    fsdp = json.loads(result.read_text())
    for name, size in fsdp["full"].items():
        assert [s[name] for s in fsdp["shards"]] == [(size + 1) // 2, size // 2], name
    for rank in range(2):  # gradients and Adam's state are DTensors sharded like the parameters
        assert fsdp["grad_shards"][rank] == fsdp["shards"][rank]
        adam = fsdp["adam_shards"][rank]
        assert set(adam) == {f"{n}.{k}" for n in fsdp["full"] for k in ("exp_avg", "exp_avg_sq")}
        assert all(adam[f"{n}.exp_avg"] == adam[f"{n}.exp_avg_sq"] == v for n, v in fsdp["shards"][rank].items())
    one = ddp_train.main([*args, "--batch-size", "64"])
    assert max(abs(a - b) for a, b in zip(fsdp["losses"], one["losses"], strict=True)) < 1e-4


def test_the_old_gloo_workaround_does_nothing_where_gloo_averages():
    import torch.distributed as dist

    from helpers.distributed import fsdp_train

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert not fsdp_train.gloo_average_sums()  # one process: nothing to sum
        assert not fsdp_train.average_on_old_gloo(torch.nn.Linear(2, 2), 1)
    finally:
        dist.destroy_process_group()


def test_the_unused_parameter_cell_runs_again_after_an_earlier_run_stopped_half_way():
    """Notebook 08's cell that joins a one-process group: a group left over from a failed run is no obstacle."""
    import torch.distributed as dist

    cells = json.loads((course.ROOT / "notebooks" / "08_many_devices.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "class TwoHeads" in "".join(c["source"]))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # what a failed run leaves
    namespace = {"nn": torch.nn, "torch": torch}
    exec(compile(source, "cell", "exec"), namespace)
    assert namespace["steps_done"] == 1 and not dist.is_initialized()
    with pytest.raises(RuntimeError):  # an edit that raises inside the cell still leaves no group behind
        exec(compile(source.replace("x = torch.randn(4, 8)", "x = torch.randn(4, 9)"), "cell", "exec"), namespace)
    assert not dist.is_initialized()


def test_more_processes_than_gpus_is_refused_with_a_message():
    with simulated_machine(cuda=2):
        os.environ.update(RANK="2", LOCAL_RANK="2", WORLD_SIZE="3")
        with pytest.raises(SystemExit, match=r"LOCAL_RANK=2, but this machine has 2 GPU\(s\).*--device cpu"):
            ddp_train.setup()


def test_each_process_takes_the_gpu_of_its_local_rank():
    chosen = []
    with simulated_machine(cuda=4), mock.patch.object(torch.cuda, "set_device", chosen.append):
        os.environ.update(RANK="5", LOCAL_RANK="1", WORLD_SIZE="1")  # world size 1: no process group to join
        rank, world_size, device = ddp_train.setup()
    assert (rank, world_size, device) == (5, 1, torch.device("cuda", 1)) and chosen == [torch.device("cuda", 1)]


def test_cpu_is_used_when_asked_or_without_gpus():
    with simulated_machine(cuda=2):
        assert ddp_train.setup("cpu")[2] == torch.device("cpu")
    with simulated_machine(cuda=0):
        assert ddp_train.setup()[2] == torch.device("cpu")


def test_the_ddp_benchmark_runs_quickly(capsys):
    bench = course.load_benchmark("bench_ddp")
    assert bench.main(["--quick", "--timeout", str(TIMEOUT)]) == 0
    out = capsys.readouterr().out
    assert "2 DDP processes x 1 thread (gloo):" in out and "DDP / one process:" in out


@pytest.mark.parametrize("nccl", [True, False], ids=["a PyTorch with NCCL", "a PyTorch without NCCL (Windows)"])
def test_gpus_get_nccl_only_where_this_pytorch_has_it(monkeypatch, nccl):
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    with simulated_machine(cuda=2), mock.patch.object(torch.cuda, "set_device", lambda device: None):
        device, backend = ddp_train.rank_device("auto", local_rank=1)
    assert device == torch.device("cuda", 1) and backend == ("nccl" if nccl else "gloo")
    assert ddp_train.backend_for(torch.device("cuda", 0)) == backend
    assert ddp_train.backend_for(torch.device("cpu")) == "gloo"


def test_every_script_joins_with_the_one_backend_choice(monkeypatch):
    """ddp_train, fsdp_train (through ddp_train.setup) and train_tudui start their process group with the backend
    that ddp_train.backend_for picks: on GPUs without NCCL, gloo in each."""
    import torch.distributed as dist

    from helpers.distributed import fsdp_train, train_tudui

    assert fsdp_train.setup is ddp_train.setup and fsdp_train.backend_for is ddp_train.backend_for
    joined = []

    class Joined(Exception):
        pass

    def init_process_group(backend, *args, **kwargs):
        joined.append(backend)
        raise Joined  # stop here: no job to run

    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with simulated_machine(cuda=2):
        with pytest.raises(Joined):
            ddp_train.setup()
        with pytest.raises(Joined):
            train_tudui.main(["--device", "cuda"])
    assert joined == ["gloo", "gloo"]
