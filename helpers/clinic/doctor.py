"""Device doctor: ``python -m helpers doctor`` says whether the course can run here, and on what.

It prints one ``[OK]`` / ``[WARN]`` / ``[FAIL]`` line per fact (Python, torch and torchvision and whether
they match, the NVIDIA driver, the CUDA or ROCm build, the GPUs and whether the build has kernels for
them, ``CUDA_VISIBLE_DEVICES``, Apple MPS and its CPU fallback, ``torch.accelerator``, how ``DataLoader``
workers start) and ends with the device the course will use. Each problem comes with a
concrete fix. The exit code is 0 when the course can run (the CPU counts), 1 when it cannot.

The doctor works without torch, and with a broken one: torch, torchvision and ``helpers.lesson.devices`` are
imported inside functions only. Three steps, each testable alone: ``gather_facts()`` looks at this
machine, ``diagnose(facts)`` turns facts into checks (pure), ``render(checks)`` formats them.

In a notebook, ``run_child()`` runs the doctor in a fresh Python process: the report then shows what a
fresh start sees (``CUDA_VISIBLE_DEVICES`` is read only once, when CUDA initializes) and the kernel's
own CUDA state is left alone.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from typing import Literal

from helpers.course.config import DEVICE_ENV
from helpers.course.i18n import columns, tr, tr_lazy

Status = Literal["OK", "WARN", "FAIL"]
DESCRIPTION = tr_lazy("Device doctor: ``python -m helpers doctor`` says whether the course can run here, and on what.")

MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 7)  # keep in step with pyproject.toml (tests/test_doctor.py checks it)
SMI_TIMEOUT_S = 10
SELECTOR = "https://pytorch.org/get-started/locally/"
WHEEL_INDEX = "https://download.pytorch.org/whl/"
INSTALL = 'pip install -e ".[lab]"'  # the learner's install (README's quick start)
COLAB_GPU = tr_lazy("in Colab: Runtime > Change runtime type > GPU, then run the notebook again")


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


# --- gathering: the only part that touches torch, subprocesses and the environment -------------------


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


# --- diagnosis: pure functions of Facts ---------------------------------------------------------------


def _release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of "2.14.1+cu130", or None."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _local_tag(version: str | None) -> str | None:
    """The wheel variant in "2.14.1+cu130": "cu130" ("cpu", "rocm6.4", ...), or None."""
    return version.partition("+")[2] or None if version else None


def matching_torchvision(torch_version: str) -> tuple[int, int] | None:
    """The torchvision release that pairs with a torch release: 2.6 -> 0.21, 2.14 -> 0.29 (None: unknown)."""
    release = _release(torch_version)
    if release is None:
        return None
    major, minor = release
    if major == 2:
        return (0, minor + 15)
    if major == 1:
        return (0, minor + 1)
    return None


def _index_hint(torch_version: str | None) -> str:
    """The wheel index the installed torch came from, as a pip option ('' for a plain PyPI wheel)."""
    tag = _local_tag(torch_version)
    return f" --index-url {WHEEL_INDEX}{tag}" if tag else ""


def _gpus(n: int) -> str:
    """ "1 GPU", "2 GPUs"."""
    return tr("1 GPU") if n == 1 else tr("{n} GPUs", n=n)


def _build(facts: Facts) -> str:
    if facts.cuda_build:
        return tr("CUDA {version} build", version=facts.cuda_build)
    if facts.hip_build:
        return tr("ROCm {version} build", version=facts.hip_build)
    return tr("CPU-only build")


def _leading_int(text: str) -> int | None:
    """The whole number ``text`` starts with, as C's ``strtoul``/``std::stoi`` read it: "1gpu" -> 1, "gpu" -> None."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else None


def _indices(count: int) -> str:
    """nvidia-smi's GPU indices: "index 0", "indices 0-3"."""
    return tr("index 0") if count == 1 else tr("indices 0-{last}", last=count - 1)


def _smi_lists(facts: Facts) -> str:
    return tr(
        "nvidia-smi lists {gpus}: {indices}", gpus=_gpus(len(facts.smi_gpus)), indices=_indices(len(facts.smi_gpus))
    )


def cvd_selects(value: str, count: int, uuids: list[str]) -> tuple[list[int], str | None] | None:
    """The nvidia-smi indices CUDA uses under ``CUDA_VISIBLE_DEVICES=value`` on a machine with ``count`` GPUs,
    and what stopped the list early (None for a deliberate stop such as "" or "-1").

    CUDA's rules, as ``torch.cuda._parse_visible_devices`` mirrors them: the entries in order (numbers read
    like ``strtoul``, or ``GPU-`` UUIDs and their unique prefixes), up to the first one that names no GPU;
    a GPU named twice hides them all. None when this cannot be told here (MIG devices, UUIDs unknown)."""
    by_uuid = value.startswith("GPU-")
    if value.startswith("MIG-") or (by_uuid and not uuids):
        return None
    chosen: list[int] = []
    for entry in (part.strip() for part in value.split(",")):
        if by_uuid:
            hits = [i for i, uuid in enumerate(uuids) if entry.startswith("GPU-") and uuid.startswith(entry)]
            index = hits[0] if len(hits) == 1 else None
            problem = (
                tr("no GPU has the UUID {entry!r}", entry=entry)
                if not hits
                else tr("{entry!r} matches {count} GPUs' UUIDs", entry=entry, count=len(hits))
            )
        else:
            number = _leading_int(entry)
            index = number if number is not None and 0 <= number < count else None
            if number is None:
                problem = tr("{entry!r} is not a GPU index", entry=entry) if entry else None
            else:
                problem = tr("there is no GPU {number}", number=number) if number >= 0 else None
        if index is None:
            return chosen, problem
        if index in chosen:
            return [], tr("GPU {index} is named twice", index=index)
        chosen.append(index)
    return chosen, None


def _cvd_reading(facts: Facts) -> tuple[list[int], str | None] | None:
    """cvd_selects() for this machine, or None where it cannot be told (variable unset, no nvidia-smi list)."""
    if facts.cuda_visible_devices is None or facts.nvidia_smi != "ok" or not facts.smi_gpus:
        return None
    return cvd_selects(facts.cuda_visible_devices, len(facts.smi_gpus), facts.smi_uuids)


def _cvd_fix(facts: Facts) -> str:
    example = "CUDA_VISIBLE_DEVICES=0" + (",1" if len(facts.smi_gpus) > 1 else "")
    return tr(
        "unset it (`unset CUDA_VISIBLE_DEVICES`) or set it to GPUs that exist ({lists}; e.g. "
        "{example}; `nvidia-smi -L` shows their UUIDs) before Python starts; CUDA reads it once, when it "
        "initializes, so in Jupyter restart the kernel after changing it",
        lists=_smi_lists(facts),
        example=example,
    )


def _torch_said(facts: Facts) -> list[str]:
    """What torch said about its devices: its warnings, then the CUDA init error if no warning carries it."""
    said = list(facts.torch_warnings)
    error = facts.cuda_init_error
    if error and not any(error.split(". ")[0] in text for text in said):
        said.append(error)
    return said


_TOO_OLD = re.compile(r"driver on your system is too old(?: \(found version (\d+)\))?")


def _driver_too_old(facts: Facts) -> tuple[bool, str | None]:
    """(whether the NVIDIA driver is too old for this CUDA build, the newest CUDA it supports if known).

    Known from torch's own error ("The NVIDIA driver on your system is too old (found version 12040)":
    12040 is CUDA 12.4) or from nvidia-smi's "CUDA Version" when it is older than the build's CUDA."""
    if not facts.cuda_build or facts.cuda_available:
        return False, None
    for text in _torch_said(facts):
        match = _TOO_OLD.search(text)
        if match:
            found = int(match.group(1)) if match.group(1) else None
            return True, f"{found // 1000}.{found % 1000 // 10}" if found else facts.driver_cuda
    older = _release(facts.driver_cuda) is not None and _release(facts.driver_cuda) < _release(facts.cuda_build)
    return older, facts.driver_cuda if older else None


def _older_cuda_wheel(facts: Facts, supports: str | None) -> str | None:
    """A pip command for a PyTorch wheel a driver supporting CUDA ``supports`` can run (None: none to offer).

    cu126 wheels exist for every torch release from 2.7 to 2.14 and a CUDA 12 driver runs any CUDA 12 build
    (CUDA's minor-version compatibility, with caveats); torch 2.7 is the last release with cu118 wheels."""
    release = _release(supports)
    if release is None or release >= (12, 0):
        tag, pins = "cu126", "torch torchvision"
    elif release >= (11, 0):
        tag, pins = "cu118", '"torch==2.7.*" "torchvision==0.22.*"'
    else:
        return None
    if tag == _local_tag(facts.torch_version):
        return None
    return tr(
        "`pip uninstall -y torch torchvision`, then `pip install {pins} --index-url {index}`",
        pins=pins,
        index=f"{WHEEL_INDEX}{tag}",
    )


# Integrated (Jetson, Thor) GPUs: kernels built for a discrete GPU of the same major version do not run there,
# and theirs run nowhere else; 10.1 was renamed 11.0 (torch.cuda's DEVICE_REQUIREMENT table).
_INTEGRATED = {53, 62, 72, 87, 101, 110}


def _arch_code(text: str) -> tuple[str, int, str] | None:
    """("sm" or "compute", capability as an int, suffix) from "sm_90a", "compute_120" (None: unreadable)."""
    match = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", text.strip())
    return (match.group(1), int(match.group(2)), match.group(3)) if match else None


def _kernels_run(code: int, device: int, cuda_build: str | None) -> bool:
    """Whether kernels compiled for capability ``code`` run on a GPU of capability ``device`` (both like 86),
    by torch.cuda's rules: the same major version and at least the code's minor version; integrated GPUs
    run only their own code, except that from CUDA 13.2 the 7.2 and 8.7 ones also run 7.0, 8.0 and 8.6 code."""
    if {code, device} <= {101, 110}:
        return True
    unified = (_release(cuda_build) or (0, 0)) >= (13, 2) and device in (72, 87) and code not in _INTEGRATED
    if (code in _INTEGRATED or device in _INTEGRATED) and not unified:
        return code == device
    return code // 10 == device // 10 and code % 10 <= device % 10


def arch_support(capability: str, arch_list: list[str], cuda_build: str | None) -> str | None:
    """How a CUDA build runs on a GPU of ``capability`` ("6.1"): "kernels" (compiled for it), "ptx" (only
    through the driver compiling the build's compute_XX PTX at run time), "none", or None (cannot tell).

    torch's own check (``torch.cuda._check_capability``) counts sm_XX and compute_XX alike, by major version;
    the driver can also compile plain compute_XX PTX for any newer GPU, which this reports as "ptx"."""
    device = _release(capability)
    codes = [code for code in map(_arch_code, arch_list) if code is not None]
    if device is None or not codes:
        return None
    cc = device[0] * 10 + device[1]
    if any(_kernels_run(code, cc, cuda_build) for kind, code, _ in codes if kind == "sm"):
        return "kernels"
    ptx = [(code, suffix) for kind, code, suffix in codes if kind == "compute"]
    if any(_kernels_run(code, cc, cuda_build) if suffix else code <= cc for code, suffix in ptx):
        return "ptx"
    return "none"


def _arch_fix(facts: Facts, gpu: Gpu) -> str:
    """How to get kernels for ``gpu``: a wheel for an older CUDA (old GPUs) or a newer one (new GPUs)."""
    device = _release(gpu.capability) or (0, 0)
    oldest = min(code for _, code, _ in filter(None, map(_arch_code, facts.cuda_arch_list)))
    meanwhile = tr("meanwhile the course runs on the CPU with {setting}", setting=f"{DEVICE_ENV}=cpu")
    if device[0] * 10 + device[1] < oldest:
        if device >= (5, 0) and _local_tag(facts.torch_version) != "cu126":
            return tr(
                "install PyTorch's CUDA 12.6 build, whose x86-64 wheels still carry kernels for compute "
                "capability 5.0 to 7.0 (sm_50 sm_60 sm_70): `pip uninstall -y torch torchvision`, then "
                "`pip install torch torchvision --index-url {index}`; {meanwhile}",
                index=f"{WHEEL_INDEX}cu126",
                meanwhile=meanwhile,
            )
        return tr(
            "no PyTorch the course supports has kernels for this GPU: {meanwhile}, or {colab}",
            meanwhile=meanwhile,
            colab=tr(COLAB_GPU),
        )
    newer = _release(facts.cuda_build) is not None and _release(facts.cuda_build) < (13, 0)
    command = (
        tr(
            "`pip uninstall -y torch torchvision`, then `pip install torch torchvision --index-url {index}` "
            "(needs a driver that supports CUDA 13.0)",
            index=f"{WHEEL_INDEX}cu130",
        )
        if newer
        else f"`pip install --upgrade torch torchvision{_index_hint(facts.torch_version)}`"
    )
    return tr(
        "install a PyTorch whose kernels include compute capability {capability} (newer GPUs need newer "
        "CUDA builds and releases; the selector at {selector} lists them): {command}; {meanwhile}",
        capability=gpu.capability,
        selector=SELECTOR,
        command=command,
        meanwhile=meanwhile,
    )


def _check_python(facts: Facts) -> Check:
    version = ".".join(map(str, facts.python_version))
    if tuple(facts.python_version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check(
            "FAIL",
            "Python",
            tr("{version} is too old: the course needs Python {need} or newer", version=version, need=need),
            tr(
                "create an environment with a newer Python: `conda env create -f environment.yml`, or "
                "`python3.12 -m venv .venv`, activate it, then `{install}` from the repository root",
                install=INSTALL,
            ),
        )
    return Check("OK", "Python", version)


def _check_torch(facts: Facts) -> Check:
    if facts.torch_version is None:
        error = facts.torch_error or "ModuleNotFoundError: No module named 'torch'"
        if error.startswith("ModuleNotFoundError"):
            return Check(
                "FAIL",
                "torch",
                tr("PyTorch is not installed in this Python ({error})", error=error),
                tr(
                    "from the repository root: `{install}` (installs PyTorch and the course); "
                    "or run the command the selector at {selector} gives for your system",
                    install=INSTALL,
                    selector=SELECTOR,
                ),
            )
        return Check(
            "FAIL",
            "torch",
            tr("PyTorch is installed but does not import: {error}", error=error),
            tr(
                "reinstall it: `pip uninstall -y torch torchvision`, then `{install}` from the repository root "
                "(or the command from {selector})",
                install=INSTALL,
                selector=SELECTOR,
            ),
        )
    release = _release(facts.torch_version)
    if release is not None and release < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return Check(
            "FAIL",
            "torch",
            tr(
                "{version} ({build}) is too old: the course needs torch {need} or newer",
                version=facts.torch_version,
                build=_build(facts),
                need=need,
            ),
            tr(
                "upgrade both together: {command}",
                command=f'`pip install --upgrade "torch>={need}" torchvision{_index_hint(facts.torch_version)}`',
            ),
        )
    return Check("OK", "torch", tr("{version} ({build})", version=facts.torch_version, build=_build(facts)))


def _check_torchvision(facts: Facts) -> Check:
    torch_version = facts.torch_version or ""
    want = matching_torchvision(torch_version)
    torch_minor = ".".join(map(str, _release(torch_version) or ()))
    pin = f'"torch=={torch_minor}.*" "torchvision=={want[0]}.{want[1]}.*"' if want else "torch torchvision"
    reinstall = tr("reinstall both together: {command}", command=f"`pip install {pin}{_index_hint(torch_version)}`")
    if facts.torchvision_version is None:
        error = facts.torchvision_error or "ModuleNotFoundError: No module named 'torchvision'"
        if error.startswith("ModuleNotFoundError"):
            return Check("FAIL", "torchvision", tr("is not installed ({error})", error=error), reinstall)
        return Check("FAIL", "torchvision", tr("does not import ({error})", error=error), reinstall)
    have = _release(facts.torchvision_version)
    if want is None or have is None:
        return Check(
            "WARN",
            "torchvision",
            tr(
                "{version}: cannot tell whether it pairs with torch {torch}",
                version=facts.torchvision_version,
                torch=torch_version,
            ),
            tr("check the table at https://github.com/pytorch/vision#installation"),
        )
    if have != want:
        return Check(
            "FAIL",
            "torchvision",
            tr(
                "{version} does not match torch {torch} (torch {minor} pairs with torchvision {want})",
                version=facts.torchvision_version,
                torch=torch_version,
                minor=torch_minor,
                want=f"{want[0]}.{want[1]}",
            ),
            reinstall,
        )
    tv_tag, torch_tag = _local_tag(facts.torchvision_version), _local_tag(torch_version)
    if tv_tag and torch_tag and tv_tag != torch_tag:
        return Check(
            "FAIL",
            "torchvision",
            tr(
                "{version} is built for {tag} but torch {torch} for {torch_tag}",
                version=facts.torchvision_version,
                tag=tv_tag,
                torch=torch_version,
                torch_tag=torch_tag,
            ),
            reinstall,
        )
    return Check(
        "OK",
        "torchvision",
        tr("{version} (matches torch {minor})", version=facts.torchvision_version, minor=torch_minor),
    )


def _check_driver(facts: Facts) -> Check | None:
    if facts.nvidia_smi == "missing" and facts.hip_build and not facts.cuda_build:
        return None  # a ROCm build: AMD GPUs need no NVIDIA driver
    if facts.nvidia_smi == "missing" and facts.cuda_available:
        return Check(
            "OK",
            "NVIDIA driver",
            tr(
                "works (PyTorch uses the GPU); nvidia-smi is not installed here (some containers), so its version "
                "and the newest CUDA it supports go unreported: nothing to fix"
            ),
        )
    if facts.nvidia_smi == "missing" and (facts.cuda_init_error or _driver_too_old(facts)[0]):
        found = tr("nvidia-smi not found (some containers), but PyTorch found a driver: see the CUDA line")
        return Check("OK", "NVIDIA driver", found)
    if facts.nvidia_smi == "missing":
        return Check(
            "OK", "NVIDIA driver", tr("none (nvidia-smi not found): normal on a machine without an NVIDIA GPU")
        )
    if facts.nvidia_smi == "failed":
        return Check(
            "WARN",
            "NVIDIA driver",
            tr("nvidia-smi is installed but fails: {error}", error=facts.nvidia_smi_error),
            tr(
                "the NVIDIA driver is not working: reboot, or reinstall the driver; "
                "in a container, start it with GPU access (`docker run --gpus all ...`)"
            ),
        )
    gpus = ", ".join(facts.smi_gpus) or tr("no GPU")
    if facts.driver_cuda:
        detail = tr(
            "{driver}, supports CUDA up to {cuda}; nvidia-smi lists {gpus}",
            driver=facts.driver_version,
            cuda=facts.driver_cuda,
            gpus=gpus,
        )
    else:
        detail = tr("{driver}; nvidia-smi lists {gpus}", driver=facts.driver_version, gpus=gpus)
    return Check("OK", "NVIDIA driver", detail)


def _cvd_hides_all(facts: Facts) -> bool:
    """CUDA_VISIBLE_DEVICES selects none of the GPUs nvidia-smi lists, and PyTorch sees none."""
    reading = _cvd_reading(facts)
    if facts.cuda_visible_devices is None or facts.nvidia_smi != "ok" or not facts.smi_gpus or facts.gpus:
        return False
    return bool(facts.cuda_build or facts.hip_build) and (reading is None or not reading[0])


def _cuda_wheel_fix(facts: Facts) -> str:
    """Reinstall PyTorch from the CUDA wheel index (for a machine with an NVIDIA GPU and a wheel without CUDA)."""
    return tr(
        "reinstall PyTorch from pytorch.org's CUDA wheel index: `pip uninstall -y torch torchvision`, then "
        "`pip install torch torchvision --index-url {index}`; pick the CUDA version the driver "
        "supports{supports} (cu126 = CUDA 12.6; the selector at {selector} lists them)",
        index=f"{WHEEL_INDEX}cu126",
        supports=_driver_supports(facts),
        selector=SELECTOR,
    )


def _driver_supports(facts: Facts) -> str:
    """ " (nvidia-smi: this driver supports CUDA up to 12.4)", or "" when nvidia-smi did not say."""
    if not facts.driver_cuda:
        return ""
    return tr(" (nvidia-smi: this driver supports CUDA up to {cuda})", cuda=facts.driver_cuda)


def _check_rocm(facts: Facts) -> Check:
    build = _build(facts)
    if facts.cuda_available and facts.gpus:
        return Check(
            "OK",
            "ROCm",
            tr(
                '{build}: AMD GPUs appear as "cuda" devices in PyTorch (torch.cuda, device="cuda"); {gpus} available',
                build=build,
                gpus=_gpus(len(facts.gpus)),
            ),
        )
    if facts.nvidia_smi == "ok" and facts.smi_gpus:
        return Check(
            "WARN",
            "ROCm",
            tr(
                "{build}, a PyTorch for AMD GPUs, but nvidia-smi lists an NVIDIA GPU: the course runs on the CPU",
                build=build,
            ),
            _cuda_wheel_fix(facts),
        )
    return Check(
        "OK",
        "ROCm",
        tr(
            '{build}, but PyTorch sees no AMD GPU (they appear as "cuda" devices): the course runs on the CPU',
            build=build,
        ),
        tr(
            "if this machine has an AMD GPU, check that ROCm lists it (`rocm-smi` or `amd-smi`) and that your user "
            "is in the video and render groups; in a container, pass the GPU in "
            "(`docker run --device=/dev/kfd --device=/dev/dri ...`)"
        ),
    )


def _check_cuda(facts: Facts) -> Check:
    if facts.hip_build and not facts.cuda_build:
        return _check_rocm(facts)
    build = _build(facts)
    smi_has_gpu = facts.nvidia_smi == "ok" and bool(facts.smi_gpus)
    if not facts.cuda_build:
        if smi_has_gpu:
            return Check(
                "WARN",
                "CUDA",
                tr("you have an NVIDIA GPU but a CPU-only PyTorch: the course runs on the CPU"),
                _cuda_wheel_fix(facts),
            )
        if facts.mps_available:
            return Check("OK", "CUDA", tr("{build}: runs on the CPU or Apple MPS", build=build))
        return Check("OK", "CUDA", tr("{build}: runs on the CPU", build=build))
    if facts.cuda_available and facts.gpus:
        return Check("OK", "CUDA", tr("{build}, CUDA available: {gpus}", build=build, gpus=_gpus(len(facts.gpus))))
    if _cvd_hides_all(facts):
        reading = _cvd_reading(facts)
        why = tr(": {problem}", problem=reading[1]) if reading and reading[1] else ""
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, but CUDA_VISIBLE_DEVICES={value!r} hides every GPU{why} ({lists}); a CUDA call raises "
                '"No CUDA GPUs are available" and the course runs on the CPU',
                build=build,
                value=facts.cuda_visible_devices,
                why=why,
                lists=_smi_lists(facts),
            ),
            _cvd_fix(facts),
        )
    said = _torch_said(facts)
    said_text = tr(" PyTorch said: {said}", said=" ".join(said)) if said else ""
    too_old, driver_supports = _driver_too_old(facts)
    if too_old:
        driver = (
            tr("NVIDIA driver {version}", version=facts.driver_version) if facts.driver_version else tr("NVIDIA driver")
        )
        if driver_supports:
            upto = tr("it supports CUDA up to {cuda}", cuda=driver_supports)
        else:
            upto = tr("it is older than it needs")
        wheel = _older_cuda_wheel(facts, driver_supports)
        fix = tr("update the NVIDIA driver to one that supports CUDA {cuda}", cuda=facts.cuda_build)
        if driver_supports:
            fix += tr(" (this one supports CUDA up to {cuda})", cuda=driver_supports)
        if wheel:
            fix += tr("; or install a PyTorch built for an older CUDA: {wheel}", wheel=wheel)
        fix += tr(" (the selector at {selector} lists the CUDA versions of each release)", selector=SELECTOR)
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, but the {driver} is too old for it: {upto}. PyTorch cannot use the GPU: the course "
                "runs on the CPU.{said}",
                build=build,
                driver=driver,
                upto=upto,
                said=said_text,
            ),
            fix,
        )
    if smi_has_gpu or facts.cuda_init_error:
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, and the driver sees a GPU, but CUDA cannot start: the course runs on the CPU.{said}",
                build=build,
                said=said_text,
            ),
            tr(
                "this is reported after a driver update without a reboot, after a laptop wakes from sleep, and in a "
                "container not given the GPU: reboot (in a container, start it with `docker run --gpus all ...`); "
                "if it persists, reinstall the NVIDIA driver{supports}",
                supports=_driver_supports(facts),
            ),
        )
    if facts.mps_available:
        return Check(
            "OK",
            "CUDA",
            tr("{build}, but no NVIDIA GPU is usable: the course runs on the Apple GPU (MPS)", build=build),
        )
    seen = {
        "missing": tr_lazy("no NVIDIA driver is visible to this process (no nvidia-smi, and CUDA does not start)"),
        "failed": tr_lazy("the NVIDIA driver does not work (see the NVIDIA driver line)"),
        "ok": tr_lazy("the NVIDIA driver lists no GPU"),
    }[facts.nvidia_smi]
    return Check(
        "OK",
        "CUDA",
        tr("{build}, but {seen}: the course runs on the CPU", build=build, seen=tr(seen)),
        tr(
            "to use a GPU {colab}; on a machine with an NVIDIA GPU, install its driver (nvidia-smi comes with "
            "it); in a container, the host needs the NVIDIA Container Toolkit and the container GPU access "
            "(`docker run --gpus all ...`)",
            colab=tr(COLAB_GPU),
        ),
    )


def _check_gpus(facts: Facts) -> list[Check]:
    if not facts.gpus:
        return [Check("OK", "GPUs", tr("none visible to PyTorch"))]
    checks = []
    for gpu in facts.gpus:
        kind = gpu.arch or tr("compute capability {capability}", capability=gpu.capability)
        detail = f"{gpu.name}, {gpu.memory_gib:.1f} GiB, {kind}"
        support = None if facts.hip_build else arch_support(gpu.capability, facts.cuda_arch_list, facts.cuda_build)
        built = " ".join(facts.cuda_arch_list)
        if support == "none":
            detail += tr(
                ': this PyTorch has no kernels for it (built for {built}); CUDA work there fails with "no kernel '
                'image is available for execution on the device"',
                built=built,
            )
            checks.append(Check("FAIL", f"GPU {gpu.index}", detail, _arch_fix(facts, gpu)))
        elif support == "ptx":
            detail += tr(
                ": this PyTorch has no kernels compiled for it (built for {built}); the driver compiles the build's "
                "PTX (compute_XX) for it at run time: a slow start, and PyTorch warns",
                built=built,
            )
            checks.append(Check("WARN", f"GPU {gpu.index}", detail, _arch_fix(facts, gpu)))
        else:
            checks.append(Check("OK", f"GPU {gpu.index}", detail))
    return checks


def _check_cvd(facts: Facts) -> Check:
    value = facts.cuda_visible_devices
    if value is None:
        return Check("OK", "CUDA_VISIBLE_DEVICES", tr("not set (PyTorch may use every GPU)"))
    if facts.smi_gpus:
        seen = tr(
            "PyTorch sees {gpus}; nvidia-smi, which ignores this variable, lists {count}",
            gpus=_gpus(len(facts.gpus)),
            count=len(facts.smi_gpus),
        )
    else:
        seen = tr("PyTorch sees {gpus}", gpus=_gpus(len(facts.gpus)))
    if _cvd_hides_all(facts):
        return Check("WARN", "CUDA_VISIBLE_DEVICES", tr("{value!r} ({seen})", value=value, seen=seen))
    reading = _cvd_reading(facts)
    if reading and reading[0] and reading[1]:  # a problem past the first GPUs: CUDA uses those before it
        used = ", ".join(map(str, reading[0]))
        return Check(
            "WARN",
            "CUDA_VISIBLE_DEVICES",
            tr(
                "{value!r} ({seen}): {problem}, so CUDA stops there and uses only GPU {used}",
                value=value,
                seen=seen,
                problem=reading[1],
                used=used,
            ),
            _cvd_fix(facts),
        )
    return Check("OK", "CUDA_VISIBLE_DEVICES", tr("{value!r} ({seen})", value=value, seen=seen))


def _check_mps(facts: Facts) -> Check:
    if facts.mps_available:
        return Check("OK", "Apple MPS", tr("available (Apple GPU through Metal)"))
    return Check("OK", "Apple MPS", tr("not available (Apple silicon Macs only)"))


def _check_mps_fallback(facts: Facts) -> Check | None:
    """PYTORCH_ENABLE_MPS_FALLBACK, on a Mac or wherever it is set. torch reads it once, when its library loads
    (a static ``getenv`` in ATen's MPSFallback.mm, parsed with ``std::stoi``), and exposes no way to read back
    what it saw: the doctor reports the variable and when it must be set."""
    value = facts.mps_fallback_env
    if value is None and not facts.mps_available:
        return None
    topic = "PYTORCH_ENABLE_MPS_FALLBACK"
    when = tr(
        "torch reads it once, when it is imported: export it before Python or Jupyter starts "
        "(`export PYTORCH_ENABLE_MPS_FALLBACK=1`), or set os.environ in a notebook's first cell, before "
        "`import torch`; set later it does nothing: restart the kernel and run from the top"
    )
    if value is None:
        return Check(
            "OK",
            topic,
            tr("not set: an operation that MPS does not implement raises NotImplementedError"),
            tr("PYTORCH_ENABLE_MPS_FALLBACK=1 runs such operations on the CPU instead (slower); {when}", when=when),
        )
    number = _leading_int(value)
    if number is None:
        return Check(
            "WARN",
            topic,
            tr("{value!r} is not a number: torch reads it as one (std::stoi), so use 1 or 0", value=value),
            when,
        )
    if number:
        state = tr("on: operations MPS does not implement run on the CPU")
    else:
        state = tr("off: such operations raise")
    if not facts.mps_available:
        state += tr("; it matters only on Apple MPS, not here")
    return Check("OK", topic, tr("{value!r} ({state})", value=value, state=state), when)


def _check_accelerator(facts: Facts) -> Check:
    if not facts.accelerator_api:
        return Check("OK", "torch.accelerator", tr("not in this PyTorch (added in torch 2.6; the course needs 2.7)"))
    current = facts.accelerator or tr("None (no accelerator in this build)")
    available = "" if facts.accelerator_available is None else f", is_available() = {facts.accelerator_available}"
    if facts.accelerator and facts.accelerator_available is False:
        available += tr(" (it names the build's accelerator even when no device is present)")
    return Check("OK", "torch.accelerator", f"current_accelerator() = {current}{available}")


def _check_workers(facts: Facts) -> Check | None:
    """How DataLoader workers start (num_workers > 0 uses multiprocessing's start method)."""
    method = facts.start_method
    if method is None:
        return None
    how = tr("set by this program") if facts.start_method_explicit else tr("this Python's default")
    if method == "fork":
        return Check(
            "OK",
            "DataLoader workers",
            tr(
                "start method fork ({how}): workers are copies of this process, so a Dataset class defined in a "
                "notebook works with num_workers > 0",
                how=how,
            ),
        )
    return Check(
        "OK",
        "DataLoader workers",
        tr(
            "start method {method} ({how}): workers start from a fresh Python that imports the Dataset's class, "
            "so a Dataset class defined in a notebook fails with num_workers > 0",
            method=method,
            how=how,
        ),
        tr(
            "define Dataset classes in a .py module and import them, or use num_workers=0 in notebooks "
            "(notebook 06 shows the failure and the fix)"
        ),
    )


# Fragments of torch's own warnings about GPUs its build has no kernels for (torch.cuda._check_capability and
# _check_cubins, torch 2.7 to 2.14): a GPU line that already says so replaces them.
_ARCH_WARNINGS = (
    "is not compatible with the current PyTorch",
    "which is of compute capability",
    "which is of cuda capability",
)


def _check_warnings(facts: Facts, shown: list[Check]) -> list[Check]:
    quoted = [c for c in shown if c.topic == "CUDA" and all(text in c.detail for text in facts.torch_warnings)]
    if not facts.torch_warnings or quoted:  # the CUDA line already says what PyTorch said
        return []
    arch_said = any(check.topic.startswith("GPU ") and check.status != "OK" for check in shown)
    return [
        Check("WARN", "PyTorch warning", text)
        for text in facts.torch_warnings
        if not (arch_said and any(fragment in text for fragment in _ARCH_WARNINGS))
    ]


# helpers.lesson.devices words a DeviceError with this template (its catalog translates it): the doctor shows the
# problem and gives its own fix, so it cuts the message where the template's fix starts (" To fix: " in English).
DEVICE_ERROR_TEMPLATE = "{source}: {problem} To fix: {fix}; `python -m helpers doctor` explains what it finds."


def _device_error_fix_separator() -> str:
    shaped = tr(DEVICE_ERROR_TEMPLATE, source="\x00", problem="\x01", fix="\x02")
    between = shaped.partition("\x01")[2].partition("\x02")[0]
    return between or " To fix: "


def _check_course_device(facts: Facts) -> Check:
    if facts.torch_version is None:
        return Check("FAIL", "course device", tr("none: the course needs PyTorch (see the torch line above)"))
    if facts.course_device_error is not None:
        detail = facts.course_device_error.split(_device_error_fix_separator())[0]
        choices = ", ".join(["auto", *facts.available_devices])
        return Check(
            "FAIL",
            "course device",
            detail,
            tr("unset {name} (`unset {name}`) or set it to one of: {choices}", name=DEVICE_ENV, choices=choices),
        )
    if facts.course_device_env:
        why = tr("forced by {setting}", setting=f"{DEVICE_ENV}={facts.course_device_env!r}")
    else:
        why = tr("best device present")
    device = facts.course_device_detail or facts.course_device
    return Check("OK", "course device", tr("the course will use {device} ({why})", device=device, why=why))


def diagnose(facts: Facts) -> list[Check]:
    """Turn facts into report lines, the device the course will use last. Pure: no torch, no I/O."""
    checks = [_check_python(facts), _check_torch(facts)]
    if facts.torch_version is not None:
        checks.append(_check_torchvision(facts))
    checks.append(_check_driver(facts))
    if facts.torch_version is not None:
        checks += [_check_cuda(facts), *_check_gpus(facts), _check_cvd(facts), _check_mps(facts)]
        checks += [_check_mps_fallback(facts), _check_accelerator(facts), _check_workers(facts)]
        checks += _check_warnings(facts, [check for check in checks if check is not None])
    checks.append(_check_course_device(facts))
    return [check for check in checks if check is not None]


# How the report names its statuses and the topics that are words rather than names (Python, CUDA...).
STATUS_LABELS = {"OK": tr_lazy("[OK]"), "WARN": tr_lazy("[WARN]"), "FAIL": tr_lazy("[FAIL]")}
TOPICS = (
    tr_lazy("NVIDIA driver"),
    tr_lazy("GPUs"),
    tr_lazy("DataLoader workers"),
    tr_lazy("PyTorch warning"),
    tr_lazy("course device"),
)


def _topic(topic: str) -> str:
    return tr(topic) if topic in TOPICS else topic


def render(checks: list[Check]) -> str:
    """``[OK]   topic: detail`` lines; a fix (or tip) indented under its line."""
    lines = []
    for check in checks:
        label = tr(STATUS_LABELS[check.status])
        pad = " " * max(1, 7 - columns(label))
        lines.append(
            tr("{status}{pad}{topic}: {detail}", status=label, pad=pad, topic=_topic(check.topic), detail=check.detail)
        )
        if check.fix:
            if check.status == "OK":
                lines.append(f"{'':7}" + tr("tip: {fix}", fix=check.fix))
            else:
                lines.append(f"{'':7}" + tr("fix: {fix}", fix=check.fix))
    return "\n".join(lines)


def report(facts: Facts, checks: list[Check]) -> str:
    """A block to paste into a problem report: versions, build, GPUs, driver, the course's device, each check's
    verdict; never the user's name, home folder or the machine's name (``_private_words`` are replaced)."""
    import platform

    torch_line = facts.torch_version or tr("not importable ({error})", error=facts.torch_error)
    build = f"CUDA {facts.cuda_build}" if facts.cuda_build else f"ROCm {facts.hip_build}" if facts.hip_build else "CPU"
    gpus = "; ".join(
        tr(
            "cuda:{index} {name}, {memory:.1f} GiB, capability {capability}",
            index=g.index,
            name=g.name,
            memory=g.memory_gib,
            capability=g.capability,
        )
        for g in facts.gpus
    )
    unset = tr("unset")
    lines = [
        tr(
            "system: {system} {release} {machine}, Python {python}",
            system=platform.system(),
            release=platform.release(),
            machine=platform.machine(),
            python=".".join(map(str, facts.python_version)),
        ),
        tr(
            "torch: {torch} ({build} build), torchvision: {torchvision}",
            torch=torch_line,
            build=build,
            torchvision=facts.torchvision_version or facts.torchvision_error,
        ),
        tr("CUDA usable: {usable}; GPUs: {gpus}", usable=facts.cuda_available, gpus=gpus or tr("none")),
        tr(
            "nvidia-smi: {state}; driver: {driver} (CUDA {cuda})",
            state=facts.nvidia_smi,
            driver=facts.driver_version or "-",
            cuda=facts.driver_cuda or "-",
        ),
        tr(
            "CUDA_VISIBLE_DEVICES: {value}",
            value=unset if facts.cuda_visible_devices is None else repr(facts.cuda_visible_devices),
        ),
        tr(
            "MPS available: {mps}; accelerator: {accelerator}; workers start with: {method}",
            mps=facts.mps_available,
            accelerator=facts.accelerator,
            method=facts.start_method,
        ),
        tr(
            "COURSE_DEVICE: {env}; course device: {device}",
            env=facts.course_device_env or unset,
            device=facts.course_device or facts.course_device_error,
        ),
        *(
            tr("{status} {topic}: {detail}", status=tr(STATUS_LABELS[c.status]), topic=_topic(c.topic), detail=c.detail)
            for c in checks
            if c.status != "OK"
        ),
    ]
    text = "\n".join(lines)
    for word, stand_in in _private_words():
        text = text.replace(word, stand_in)
    return f"```text\n{text}\n```"


def _private_words() -> list[tuple[str, str]]:
    """(word, stand-in) for the home folder, the user's name and the machine's name, longest first (a home
    path before the user name inside it)."""
    import getpass
    import socket

    words = {os.path.expanduser("~"): "~"}
    for get in (getpass.getuser, socket.gethostname):
        try:
            words.setdefault(get(), "<private>")
        except Exception:  # no user name (a container without one): nothing to hide
            pass
    return sorted(((w, s) for w, s in words.items() if len(w) > 1), key=lambda pair: len(pair[0]), reverse=True)


def can_run(checks: list[Check]) -> bool:
    """True when no check failed (warnings and the CPU fallback are fine)."""
    return all(check.status != "FAIL" for check in checks)


def main(argv: list[str] | None = None) -> int:
    """Print the report; return 0 when the course can run here, 1 when it cannot.

    With ``--explain MESSAGE`` (the text, a file holding it, or ``-`` for standard input) it explains a
    pasted error message instead: 0 when it is a known device error, 1 when not.
    """
    parser = argparse.ArgumentParser(prog="python -m helpers doctor", description=tr(DESCRIPTION))
    parser.add_argument(
        "--explain",
        metavar="MESSAGE",
        help=tr('explain a pasted error message: the text, a file holding it, or "-" to read standard input'),
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help=tr("print a block to paste into a problem report (versions, build, GPUs, driver; nothing private)"),
    )
    args = parser.parse_args(argv)
    if args.report:
        facts = gather_facts()
        checks = diagnose(facts)
        print(report(facts, checks))
        return 0 if can_run(checks) else 1
    if args.explain is not None:
        from helpers.clinic.known_errors import explain_text_cli

        return explain_text_cli(_read_message(args.explain))
    checks = diagnose(gather_facts())
    print(render(checks))
    return 0 if can_run(checks) else 1


def _read_message(source: str) -> str:
    """``--explain``'s argument: ``-`` reads standard input, an existing file is read, anything else is the text."""
    if source == "-":
        return sys.stdin.read()
    if len(source) < 4096 and "\n" not in source and os.path.isfile(source):
        with open(source, encoding="utf-8", errors="replace") as f:
            return f.read()
    return source


def run_child(env: dict[str, str] | None = None) -> int:
    """Run the doctor in a fresh Python process (this kernel's CUDA state untouched), print its report.

    ``env`` adds or overrides environment variables for that process, e.g. ``{"CUDA_VISIBLE_DEVICES": ""}``.
    Returns its exit code.
    """
    child_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "helpers", "doctor"], capture_output=True, text=True, env=child_env, check=False
    )
    print(proc.stdout + proc.stderr, end="")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
