"""Notebooks 00 and 01 on machines CI does not have: their own cells, run under simulated machine states.

Each test takes the cells that decide what a notebook prints and asserts, straight from the notebook
file, and runs them under ``helpers.lab.simulate.simulated_machine`` (or, for the child processes of notebook
00 section 4, against what CUDA reports with 0 to 8 GPUs). The cells' own asserts must hold everywhere.
Notebook 02's branches all put real tensors on the device, which no simulated GPU can hold; its
timing-dependent cells ignore their output and assert only the structure.
"""

from __future__ import annotations

import os
from unittest import mock

import nbformat
import pytest
import torch

from helpers.lab import simulate, visible_gpus
from helpers.lab.simulate import simulated_machine
from tools import course

NB00 = course.NOTEBOOKS / "00_prerequisites.ipynb"
NB01 = course.NOTEBOOKS / "01_cpu_to_gpu_cuda.ipynb"

UNUSABLE = {  # a GPU NVML counts, a CUDA that cannot start
    "driver too old": dict(cuda=2, cuda_init_error=simulate.DRIVER_TOO_OLD),
    "CUDA unknown error": dict(cuda=1, cuda_init_error=simulate.UNKNOWN_ERROR),
    "CUDA driver initialization failed": dict(cuda=1, cuda_init_error=simulate.INIT_FAILED),
}
MACHINES = {
    **UNUSABLE,
    "no driver": dict(cuda=0),
    "CPU-only build": dict(cuda=0, cuda_build=False),
    "one GPU": dict(cuda=1),
    "two GPUs": dict(cuda=2, memory_gib=[23.6, 10.7]),
    "a Mac": dict(cuda=0, mps=True, cuda_build=False),
    "an Intel GPU (xpu), CUDA build": dict(other_accelerator="xpu"),
    "an Intel GPU (xpu), no CUDA": dict(other_accelerator="xpu", cuda_build=False),
}


def cells(path, *fragments: str) -> list[str]:
    """The source of the one code cell holding each fragment, and of the code cells that follow it up to
    the next markdown cell (its asserts)."""
    nb = nbformat.read(path, as_version=4)
    sources = []
    for fragment in fragments:
        hits = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and fragment in c.source]
        assert len(hits) == 1, f"{fragment!r} is in {len(hits)} code cells of {path.name}"
        i = hits[0]
        while i < len(nb.cells) and nb.cells[i].cell_type == "code":
            sources.append(nb.cells[i].source)
            i += 1
    return sources


def run(sources: list[str], namespace: dict | None = None) -> dict:
    namespace = {"torch": torch} if namespace is None else namespace
    for source in sources:
        exec(compile(source, "<notebook cell>", "exec"), namespace)
    return namespace


# --- notebook 00 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", MACHINES, ids=list(MACHINES))
def test_00_sections_2_3_6_hold_on_every_machine(machine, capsys):
    with simulated_machine(gpu_name="Sim", **MACHINES[machine]):
        ns = run(
            cells(NB00, "name = torch.cuda.get_device_name(0)", "count = torch.cuda.device_count()")
            + cells(NB00, 'print("built for:         "')
        )
    out = capsys.readouterr().out
    if machine in UNUSABLE:
        assert ns["count"] == 0 and isinstance(ns["failure"], RuntimeError)
        assert str(ns["failure"]) == MACHINES[machine]["cuda_init_error"]
        assert "No usable GPU" in out
    if machine == "two GPUs":
        assert "cuda:1  Sim 1  10.7 GiB" in out and ns["count"] == 2
    if machine == "CPU-only build":
        assert isinstance(ns["failure"], AssertionError)


@pytest.mark.parametrize("machine", UNUSABLE)
def test_00_the_unguarded_count_would_fail_where_nvml_counts_an_unusable_gpu(machine):
    """What section 3 guards against: device_count() > 0 while CUDA cannot start."""
    with simulated_machine(**UNUSABLE[machine]):
        assert torch.cuda.device_count() > 0 and not torch.cuda.is_available()
        with pytest.raises(RuntimeError):
            torch.cuda.get_device_properties(0)


def test_00_old_accelerator_assert_was_wrong_on_xpu():
    """The assert this notebook used to make, ``is_available() == (cuda or mps)``, fails on an Intel GPU."""
    with simulated_machine(other_accelerator="xpu"):
        assert torch.accelerator.is_available() != (torch.cuda.is_available() or torch.backends.mps.is_available())


def fake_nvidia_smi(tmp_path, text: str | None) -> dict[str, str]:
    """An environment whose PATH has only a fake nvidia-smi printing ``text`` (or no nvidia-smi)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if text is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{text}'\n")  # a shell builtin: PATH holds nothing else
        smi.chmod(0o755)
    return {"PATH": str(bin_dir)}


HEADER = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"


@pytest.mark.parametrize(
    "machine, smi, says",
    [
        ("no driver", None, "normal without an NVIDIA GPU"),
        ("one GPU", None, "yet PyTorch uses the GPU"),  # a container with CUDA but without the tool
        ("one GPU", HEADER, "CUDA Version: 12.4"),
        ("driver too old", HEADER, "CUDA Version: 12.4"),
        ("a Mac", None, "on a Mac"),
    ],
    ids=["no driver", "container without nvidia-smi", "one GPU", "driver too old", "a Mac"],
)
def test_00_nvidia_smi_section(tmp_path, capsys, machine, smi, says):
    if smi is not None and os.name == "nt":
        pytest.skip("the fake nvidia-smi is a POSIX shell script")
    env = fake_nvidia_smi(tmp_path, smi)
    with simulated_machine(**MACHINES[machine]), mock.patch.dict(os.environ, env):
        run(cells(NB00, 'if shutil.which("nvidia-smi"):'))
    assert says in capsys.readouterr().out


def cuda_sees(total: int, visible: str | None) -> int:
    """How many GPUs CUDA uses with ``CUDA_VISIBLE_DEVICES=visible`` on a machine with ``total`` GPUs:
    the listed indices, up to the first that does not exist."""
    if visible is None:
        return total
    count = 0
    for entry in visible.split(","):
        if not entry.strip().isdigit() or int(entry) >= total:
            break
        count += 1
    return count


@pytest.mark.parametrize("total", [0, 1, 2, 3, 4, 8])
def test_00_section_4_asserts_hold_for_any_gpu_count(total):
    """The section's asserts, against what CUDA itself reports with 0 to 8 GPUs (the late setting is ignored)."""
    seen = {
        "not set": cuda_sees(total, None),
        "'0' (before CUDA starts)": cuda_sees(total, "0"),
        "'1,2,3,4'": cuda_sees(total, "1,2,3,4"),
        "'' (hides every GPU)": cuda_sees(total, ""),
        "'0' set after is_available()": cuda_sees(total, None),
    }
    asserts = cells(NB00, 'total = seen["not set"]')
    run(asserts, {"seen": seen})


def test_00_section_4_labels_match_the_asserts():
    """The settings the lesson cell runs are the ones its asserts read."""
    nb = nbformat.read(NB00, as_version=4)
    lesson = next(c.source for c in nb.cells if "seen = gpus_seen({" in c.source)
    asserts = cells(NB00, 'total = seen["not set"]')[0]
    for label in ("not set", "'0' (before CUDA starts)", "'1,2,3,4'", "'' (hides every GPU)"):
        assert f'"{label}"' in lesson and f'"{label}"' in asserts
    assert '"\'0\' set after is_available()": {"late": "0"}' in lesson


def fake_gpus(n: int):
    """torch.zeros as on a machine where CUDA uses ``n`` GPUs (a meta tensor stands in for the GPU one)."""
    real_zeros = torch.zeros

    def zeros(*size, device=None, **kwargs):
        index = torch.device(device).index or 0
        if index >= n:
            raise RuntimeError("CUDA error: invalid device ordinal")
        return real_zeros(*size, device="meta", **kwargs)

    return zeros


@pytest.mark.parametrize("late", [None, "0"])
def test_00_child_counts_what_cuda_uses_not_what_device_count_says(monkeypatch, capsys, late):
    """Two GPUs, the variable set late: as in PyTorch 2.7, device_count() would re-read it through NVML and
    answer 1. The child's program asks CUDA (a tensor on each GPU) and answers 2."""
    monkeypatch.setattr(torch, "zeros", fake_gpus(2))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 if late else 2)
    env = {"SET_LATE": late} if late else {}
    with mock.patch.dict(os.environ, env):
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        exec(compile(visible_gpus.PROGRAM, "<child>", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out == "2\n"


def test_00_children_on_this_machine_agree_with_the_asserts():
    """The real children, on this machine (no GPU in CI): every setting answers the same count."""
    if torch.cuda.is_available():
        pytest.skip("the notebook itself checks this on a GPU machine")
    seen = visible_gpus.gpus_seen({"not set": {}, "'0'": {"visible": "0"}, "late": {"late": "0"}})
    assert seen == {"not set": 0, "'0'": 0, "late": 0}


# --- notebook 01 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", [*UNUSABLE, "no driver"])
def test_01_no_usable_gpu_section_holds_whatever_the_error(machine, capsys):
    """Section 6 asserts the kind of failure, so every no-GPU message passes, the newer ones too."""
    if machine == "no driver" and torch.cuda.is_available():
        pytest.skip("only CUDA errors are simulated for .cuda(); this machine's GPU would take the tensor")
    with simulated_machine(**MACHINES[machine]):
        ns = run(cells(NB01, "HAS_CUDA = torch.cuda.is_available()", "g = torch.tensor([1.0]).cuda()"))
    assert ns["failure"] is not None and not ns["HAS_CUDA"]
    expected = MACHINES[machine].get("cuda_init_error")
    if expected:
        assert str(ns["failure"]) == expected
    out = capsys.readouterr().out
    assert f"{type(ns['failure']).__name__}: " in out


def test_00_doctor_without_nvidia_smi_but_with_a_working_gpu():
    """Section 8's report in a container that has CUDA but not nvidia-smi: the driver works."""
    from helpers.clinic.doctor import Facts, Gpu, diagnose

    facts = Facts(
        torch_version="2.14.1+cu130",
        cuda_build="13.0",
        cuda_available=True,
        gpus=[Gpu(0, "NVIDIA H200", 139.8, "9.0")],
        nvidia_smi="missing",
    )
    driver = next(check for check in diagnose(facts) if check.topic == "NVIDIA driver")
    assert (
        driver.status == "OK"
        and driver.detail.startswith("works")
        and "normal on a machine without" not in driver.detail
    )
