"""helpers.distributed.launch: a port already in use, for real with torchrun on 2 CPU processes, and the advice it
gets."""

import socket

import pytest

from helpers.distributed.launch import LaunchError, Run, port_in_use_advice, torchrun

TIMEOUT = 300  # seconds; torchrun gives up on a taken port in about 3 s

# torch 2.7.1 and 2.14.1 word it alike: torchrun's rendezvous (--master-port) or a process's init_process_group
TAKEN = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
)


def test_the_advice_names_the_port_and_the_fixes():
    advice = port_in_use_advice("Traceback (most recent call last):\n  ...\n" + TAKEN + "\n")
    assert advice.startswith("port 29500 is already in use")
    assert "--standalone" in advice and "--master-port" in advice and "--rdzv-endpoint" in advice
    assert port_in_use_advice("RuntimeError: Connection closed by peer [127.0.0.1]:29500") == ""
    assert port_in_use_advice("port: 29500 is fine\nEADDRINUSE elsewhere") == "", "one message, one line"


def test_a_failed_run_ends_its_error_with_the_advice():
    with pytest.raises(LaunchError, match=r"(?s)exited with code 1:.*\nport 29500 is already in use"):
        Run("torchrun --master-port=29500 ...", 1, "", TAKEN, 1.0).check()
    with pytest.raises(LaunchError) as failed:
        Run("torchrun ...", 1, "", "RuntimeError: boom", 1.0).check()
    assert "already in use" not in str(failed.value)


def test_torchrun_on_a_port_in_use_fails_at_once_with_what_to_do():
    """``torchrun --master-port=P`` with P taken: torchrun's rendezvous fails before any process starts."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = torchrun("helpers", "train-tudui", "--quick", "--device", "cpu", master_port=port, timeout=TIMEOUT)
    assert f"--master-port={port}" in run.command and "--standalone" not in run.command
    assert run.returncode != 0 and not run.timed_out
    assert "data: " not in run.stdout, "no process of the job started"
    with pytest.raises(LaunchError, match=f"port {port} is already in use"):
        run.check()
