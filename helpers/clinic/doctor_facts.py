"""What the doctor knows about this machine, and how it finds out.

``gather_facts()`` reads Python, torch and torchvision, nvidia-smi (its GPU list, driver and CUDA version), the
environment and the course's device into :class:`Facts`: plain values, which tests build by hand. :class:`Check`
is one line of the report the rules make from them (:mod:`helpers.clinic.doctor_rules`).

This is the only part of the doctor that touches torch, subprocesses and the environment; torch, torchvision and
``helpers.lesson.devices`` are imported inside functions, so the doctor runs without torch, or with a broken one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from typing import Literal

from helpers.course.config import DEVICE_ENV
from helpers.course.i18n import tr

Status = Literal["OK", "WARN", "FAIL"]
SMI_TIMEOUT_S = 10


@dataclass(frozen=True)
class Gpu:
    """One CUDA GPU as PyTorch sees it."""

    index: int
    name: str
    memory_gib: float
    capability: str  # "9.0"
    arch: str | None = None  # ROCm: the AMD architecture name ("gfx942:sramecc+:xnack-")


@dataclass
class Facts:
    """What ``gather_facts()`` found, as plain values (tests build these by hand)."""

    python_version: tuple[int, int, int] = (3, 12, 0)
    torch_version: str | None = None
    torch_error: str | None = None  # "ModuleNotFoundError: No module named 'torch'"
    torchvision_version: str | None = None
    torchvision_error: str | None = None
    cuda_build: str | None = None  # torch.version.cuda: None for a CPU-only (or ROCm) build
    hip_build: str | None = None  # torch.version.hip: set for a ROCm build
    cuda_available: bool = False
    gpus: list[Gpu] = field(default_factory=list)
    cuda_arch_list: list[str] = field(default_factory=list)  # torch.cuda.get_arch_list(): ["sm_75", ..., "compute_90"]
    cuda_init_error: str | None = None  # what torch.cuda.init() raised where NVML counts a GPU CUDA cannot use
    torch_warnings: list[str] = field(default_factory=list)  # warnings torch gave while we looked
    nvidia_smi: Literal["ok", "missing", "failed"] = "missing"
    nvidia_smi_error: str | None = None
    driver_version: str | None = None
    driver_cuda: str | None = None  # "CUDA Version" in nvidia-smi's header: the newest CUDA the driver runs
    smi_gpus: list[str] = field(default_factory=list)  # GPU names nvidia-smi lists (it ignores CUDA_VISIBLE_DEVICES)
    smi_uuids: list[str] = field(default_factory=list)  # their UUIDs, in the same order ("GPU-5c1e...")
    cuda_visible_devices: str | None = None  # None: not set
    mps_available: bool = False
    mps_fallback_env: str | None = None  # PYTORCH_ENABLE_MPS_FALLBACK as set in this process, None when unset
    start_method: str | None = None  # multiprocessing's start method: "fork", "spawn" or "forkserver"
    start_method_explicit: bool = False  # set by this program (set_start_method), not this Python's default
    accelerator_api: bool = False  # torch.accelerator exists (torch >= 2.6)
    accelerator: str | None = None  # torch.accelerator.current_accelerator()
    accelerator_available: bool | None = None  # torch.accelerator.is_available() where it exists
    course_device_env: str | None = None  # COURSE_DEVICE as set, None when unset
    course_device: str | None = None  # str(pick_device())
    course_device_detail: str | None = None  # describe(pick_device())
    course_device_error: str | None = None  # the DeviceError message
    available_devices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    """One line of the report, with a fix when something is wrong (or a tip when something could be better)."""

    status: Status
    topic: str
    detail: str
    fix: str | None = None


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


def _run_nvidia_smi(*args: str) -> tuple[Literal["ok", "missing", "failed"], str]:
    """Run nvidia-smi: ("ok", stdout), ("missing", why) or ("failed", why)."""
    try:
        proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except FileNotFoundError:
        return "missing", "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return "failed", tr("nvidia-smi did not answer within {seconds} s", seconds=SMI_TIMEOUT_S)
    except OSError as err:
        return "failed", _error(err)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        return "failed", lines[0].strip() if lines else tr("nvidia-smi exited with code {code}", code=proc.returncode)
    return "ok", proc.stdout


SMI_QUERY = ("--query-gpu=uuid,driver_version,name", "--format=csv,noheader")


def parse_smi_query(text: str) -> tuple[str | None, list[str], list[str]]:
    """Driver version, GPU names and UUIDs, in nvidia-smi's index order, from ``nvidia-smi`` with SMI_QUERY."""
    driver, names, uuids = None, [], []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",", 2)]  # the name goes last: it may hold a comma
        if len(parts) == 3 and parts[2]:
            uuids.append(parts[0])
            driver = parts[1] or driver
            names.append(parts[2])
    return driver, names, uuids


def parse_smi_header(text: str) -> str | None:
    """The "CUDA Version" in plain ``nvidia-smi`` output: the newest CUDA this driver supports."""
    match = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return match.group(1) if match else None


def _gather_nvidia(facts: Facts) -> None:
    state, out = _run_nvidia_smi(*SMI_QUERY)
    facts.nvidia_smi = state
    if state != "ok":
        facts.nvidia_smi_error = out
        return
    facts.driver_version, facts.smi_gpus, facts.smi_uuids = parse_smi_query(out)
    state, out = _run_nvidia_smi()
    facts.driver_cuda = parse_smi_header(out) if state == "ok" else None


def _gather_torch(facts: Facts) -> None:
    try:
        import torch
    except Exception as err:  # not installed, or installed but broken (missing shared library, ...)
        facts.torch_error = _error(err)
        return
    facts.torch_version = torch.__version__
    try:
        import torchvision

        facts.torchvision_version = torchvision.__version__
    except Exception as err:
        facts.torchvision_error = _error(err)
    facts.cuda_build = torch.version.cuda
    facts.hip_build = getattr(torch.version, "hip", None)
    failed = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _query_devices(torch, facts)
        except Exception as err:  # a torch that imports but breaks when asked about its devices
            failed.append(tr("asking PyTorch about devices failed: {error}", error=_error(err)))
    facts.torch_warnings = list(dict.fromkeys(str(w.message).strip() for w in caught)) + failed


def _query_devices(torch, facts: Facts) -> None:
    """CUDA GPUs, MPS and torch.accelerator, as ``torch`` sees them."""
    facts.cuda_available = torch.cuda.is_available()
    for i in range(torch.cuda.device_count() if facts.cuda_available else 0):
        props = torch.cuda.get_device_properties(i)
        memory = round(props.total_memory / 2**30, 1)
        arch = getattr(props, "gcnArchName", None) if facts.hip_build else None
        facts.gpus.append(Gpu(i, props.name, memory, f"{props.major}.{props.minor}", arch))
    mps = getattr(torch.backends, "mps", None)
    facts.mps_available = bool(mps is not None and mps.is_available())
    accelerator = getattr(torch, "accelerator", None)
    facts.accelerator_api = accelerator is not None
    if accelerator is not None:
        current = accelerator.current_accelerator()
        facts.accelerator = current.type if current is not None else None
        if hasattr(accelerator, "is_available"):
            facts.accelerator_available = accelerator.is_available()
    if facts.cuda_build:
        facts.cuda_arch_list = list(torch.cuda.get_arch_list())  # torch 2.7 answers [] without a usable GPU
        if not facts.cuda_available and torch.cuda.device_count() > 0:  # NVML counts a GPU CUDA cannot use
            try:
                torch.cuda.init()  # raises why CUDA cannot start (CUDA stays uninitialised)
            except Exception as err:
                facts.cuda_init_error = str(err).strip()


def _gather_course_device(facts: Facts) -> None:
    from helpers.lesson import devices

    facts.available_devices = devices.available_devices()
    try:
        device = devices.pick_device()
    except devices.DeviceError as err:
        facts.course_device_error = str(err)
        return
    facts.course_device = str(device)
    facts.course_device_detail = devices.describe(device)


def default_start_method(platform: str, python: tuple[int, int]) -> str:
    """multiprocessing's default start method, as CPython's ``multiprocessing/context.py`` picks it: ``spawn``
    on Windows and macOS; elsewhere ``fork`` up to Python 3.13 and ``forkserver`` from 3.14 (3.14 falls back
    to ``spawn`` on the rare POSIX system that cannot pass file descriptors, which this does not model)."""
    if platform in ("win32", "darwin"):
        return "spawn"
    return "forkserver" if python >= (3, 14) else "fork"


def _gather_start_method(facts: Facts) -> None:
    import multiprocessing

    chosen = multiprocessing.get_start_method(allow_none=True)  # None: not chosen yet; asking sets nothing
    facts.start_method_explicit = chosen is not None
    facts.start_method = chosen or default_start_method(sys.platform, tuple(sys.version_info[:2]))


def gather_facts() -> Facts:
    """Look at this machine: Python, torch, torchvision, nvidia-smi, the environment, the course device."""
    facts = Facts(
        python_version=tuple(sys.version_info[:3]),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        course_device_env=os.environ.get(DEVICE_ENV),
        mps_fallback_env=os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK"),
    )
    try:
        _gather_start_method(facts)
    except Exception:  # a Python without a working multiprocessing: the report just leaves the line out
        facts.start_method = None
    _gather_nvidia(facts)
    _gather_torch(facts)
    if facts.torch_version is not None:
        try:
            _gather_course_device(facts)
        except Exception as err:  # a torch that imports but breaks when used
            facts.course_device_error = _error(err)
    return facts


def _torch_said(facts: Facts) -> list[str]:
    """What torch said about its devices: its warnings, then the CUDA init error if no warning carries it."""
    said = list(facts.torch_warnings)
    error = facts.cuda_init_error
    if error and not any(error.split(". ")[0] in text for text in said):
        said.append(error)
    return said
