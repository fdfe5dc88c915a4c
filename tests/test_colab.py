"""helpers.colab.setup(): what it prints in Colab, and that it never starts CUDA.

CUDA reads CUDA_VISIBLE_DEVICES once, when it starts; notebook 00 teaches setting it after the setup
cell, so setup() must not start CUDA. ``torch.cuda.is_initialized()`` alone would not tell:
``torch.cuda.is_available()`` starts the CUDA driver (and reads the variable) but leaves it False.
So these tests also make every call that would start CUDA fail, and check that setup() imports no torch.
"""

import os
import subprocess
import sys
import types

import pytest
import torch

from helpers import colab


@pytest.fixture
def in_colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))


@pytest.fixture
def cuda_must_not_start(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("setup() started CUDA: CUDA_VISIBLE_DEVICES set after the setup cell would be ignored")

    for name in ("is_available", "device_count", "init", "_lazy_init", "get_device_name", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, started)
    for name in ("_cuda_getDeviceCount", "_cuda_init"):
        if hasattr(torch._C, name):
            monkeypatch.setattr(torch._C, name, started)


POSIX_SHELL = pytest.mark.skipif(os.name == "nt", reason="the fake nvidia-smi is a POSIX shell script")


def fake_smi(tmp_path, monkeypatch, script: str | None) -> None:
    """PATH holds only a fake nvidia-smi (or none); /proc/driver/nvidia is replaced by an empty folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if script is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + script + "\n")
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(colab, "PROC_GPUS", tmp_path / "no-proc")


def test_outside_colab_prints_nothing(capsys, cuda_must_not_start):
    colab.setup()
    assert capsys.readouterr().out == ""


@POSIX_SHELL
def test_colab_gpu_named_by_nvidia_smi(tmp_path, monkeypatch, capsys, in_colab, cuda_must_not_start):
    fake_smi(tmp_path, monkeypatch, 'echo "Tesla T4"')
    initialized_before = torch.cuda.is_initialized()  # True on a GPU machine where an earlier test used CUDA
    colab.setup()
    assert capsys.readouterr().out == "Colab GPU runtime: Tesla T4\n"
    assert torch.cuda.is_initialized() == initialized_before


def test_colab_without_gpu_gives_the_runtime_hint(tmp_path, monkeypatch, capsys, in_colab, cuda_must_not_start):
    fake_smi(tmp_path, monkeypatch, None)
    colab.setup()
    assert capsys.readouterr().out == colab.COLAB_GPU_HINT + "\n"


@POSIX_SHELL
def test_failing_nvidia_smi_counts_as_no_gpu(tmp_path, monkeypatch, capsys, in_colab, cuda_must_not_start):
    fake_smi(
        tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed because it could not communicate with the driver'; exit 9"
    )
    colab.setup()
    assert "Runtime > Change runtime type" in capsys.readouterr().out


def test_proc_driver_names_the_gpu_without_nvidia_smi(tmp_path, monkeypatch, capsys, in_colab, cuda_must_not_start):
    fake_smi(tmp_path, monkeypatch, None)
    gpu = tmp_path / "proc" / "0000:00:04.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: \t\t Tesla T4\nIRQ:   \t\t 35\n")
    monkeypatch.setattr(colab, "PROC_GPUS", tmp_path / "proc")
    colab.setup()
    assert capsys.readouterr().out == "Colab GPU runtime: Tesla T4\n"


def test_setup_in_a_fresh_colab_process_leaves_cuda_unstarted():
    """A fresh Python, as a Colab kernel: after setup(), torch is not even imported, so CUDA cannot have started."""
    code = (
        "import sys, types; sys.modules['google.colab'] = types.ModuleType('google.colab')\n"
        "from helpers.colab import setup; setup()\n"
        "assert 'torch' not in sys.modules, 'setup() imported torch'\n"
        "import torch; assert not torch.cuda.is_initialized()\n"
        "print('unstarted')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "unstarted"
