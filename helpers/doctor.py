"""Device doctor: ``python -m helpers.doctor`` says whether the course can run here, and on what.

It prints one ``[OK]`` / ``[WARN]`` / ``[FAIL]`` line per fact (Python, torch and torchvision and whether
they match, the CUDA build, the NVIDIA driver, the GPUs, ``CUDA_VISIBLE_DEVICES``, Apple MPS,
``torch.accelerator``) and ends with the device the course will use. Each problem comes with a
concrete fix. The exit code is 0 when the course can run (the CPU counts), 1 when it cannot.

The doctor works without torch, and with a broken one: torch, torchvision and ``helpers.devices`` are
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

from helpers.config import DEVICE_ENV

Status = Literal["OK", "WARN", "FAIL"]

MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 7)  # keep in step with pyproject.toml (tests/test_doctor.py checks it)
SMI_TIMEOUT_S = 10
SELECTOR = "https://pytorch.org/get-started/locally/"
WHEEL_INDEX = "https://download.pytorch.org/whl/"
INSTALL = 'pip install -e ".[dev]"'
COLAB_GPU = "in Colab: Runtime > Change runtime type > GPU, then run the notebook again"


@dataclass(frozen=True)
class Gpu:
    """One CUDA GPU as PyTorch sees it."""

    index: int
    name: str
    memory_gib: float
    capability: str  # "9.0"


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
    torch_warnings: list[str] = field(default_factory=list)  # warnings torch gave while we looked
    nvidia_smi: Literal["ok", "missing", "failed"] = "missing"
    nvidia_smi_error: str | None = None
    driver_version: str | None = None
    driver_cuda: str | None = None  # "CUDA Version" in nvidia-smi's header: the newest CUDA the driver runs
    smi_gpus: list[str] = field(default_factory=list)  # GPU names nvidia-smi lists (it ignores CUDA_VISIBLE_DEVICES)
    cuda_visible_devices: str | None = None  # None: not set
    mps_available: bool = False
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
        return "failed", f"nvidia-smi did not answer within {SMI_TIMEOUT_S} s"
    except OSError as err:
        return "failed", _error(err)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        return "failed", lines[0].strip() if lines else f"nvidia-smi exited with code {proc.returncode}"
    return "ok", proc.stdout


def parse_smi_query(text: str) -> tuple[str | None, list[str]]:
    """Driver version and GPU names from ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``."""
    driver, names = None, []
    for line in text.strip().splitlines():
        name, _, version = line.rpartition(",")
        if name.strip():
            names.append(name.strip())
            driver = version.strip() or driver
    return driver, names


def parse_smi_header(text: str) -> str | None:
    """The "CUDA Version" in plain ``nvidia-smi`` output: the newest CUDA this driver supports."""
    match = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return match.group(1) if match else None


def _gather_nvidia(facts: Facts) -> None:
    state, out = _run_nvidia_smi("--query-gpu=name,driver_version", "--format=csv,noheader")
    facts.nvidia_smi = state
    if state != "ok":
        facts.nvidia_smi_error = out
        return
    facts.driver_version, facts.smi_gpus = parse_smi_query(out)
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
            failed.append(f"asking PyTorch about devices failed: {_error(err)}")
    facts.torch_warnings = list(dict.fromkeys(str(w.message).strip() for w in caught)) + failed


def _query_devices(torch, facts: Facts) -> None:
    """CUDA GPUs, MPS and torch.accelerator, as ``torch`` sees them."""
    facts.cuda_available = torch.cuda.is_available()
    for i in range(torch.cuda.device_count() if facts.cuda_available else 0):
        props = torch.cuda.get_device_properties(i)
        memory = round(props.total_memory / 2**30, 1)
        facts.gpus.append(Gpu(i, props.name, memory, f"{props.major}.{props.minor}"))
    mps = getattr(torch.backends, "mps", None)
    facts.mps_available = bool(mps is not None and mps.is_available())
    accelerator = getattr(torch, "accelerator", None)
    facts.accelerator_api = accelerator is not None
    if accelerator is not None:
        current = accelerator.current_accelerator()
        facts.accelerator = current.type if current is not None else None
        if hasattr(accelerator, "is_available"):
            facts.accelerator_available = accelerator.is_available()


def _gather_course_device(facts: Facts) -> None:
    from helpers import devices

    facts.available_devices = devices.available_devices()
    try:
        device = devices.pick_device()
    except devices.DeviceError as err:
        facts.course_device_error = str(err)
        return
    facts.course_device = str(device)
    facts.course_device_detail = devices.describe(device)


def gather_facts() -> Facts:
    """Look at this machine: Python, torch, torchvision, nvidia-smi, the environment, the course device."""
    facts = Facts(
        python_version=tuple(sys.version_info[:3]),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        course_device_env=os.environ.get(DEVICE_ENV),
    )
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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _build(facts: Facts) -> str:
    if facts.cuda_build:
        return f"CUDA {facts.cuda_build} build"
    if facts.hip_build:
        return f"ROCm {facts.hip_build} build"
    return "CPU-only build"


def _check_python(facts: Facts) -> Check:
    version = ".".join(map(str, facts.python_version))
    if tuple(facts.python_version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check(
            "FAIL",
            "Python",
            f"{version} is too old: the course needs Python {need} or newer",
            f"create an environment with a newer Python: `conda env create -f environment.yml`, or "
            f"`python3.12 -m venv .venv`, activate it, then `{INSTALL}` from the repository root",
        )
    return Check("OK", "Python", version)


def _check_torch(facts: Facts) -> Check:
    if facts.torch_version is None:
        error = facts.torch_error or "ModuleNotFoundError: No module named 'torch'"
        if error.startswith("ModuleNotFoundError"):
            return Check(
                "FAIL",
                "torch",
                f"PyTorch is not installed in this Python ({error})",
                f"from the repository root: `{INSTALL}` (installs PyTorch and the course); "
                f"or run the command the selector at {SELECTOR} gives for your system",
            )
        return Check(
            "FAIL",
            "torch",
            f"PyTorch is installed but does not import: {error}",
            f"reinstall it: `pip uninstall -y torch torchvision`, then `{INSTALL}` from the repository root "
            f"(or the command from {SELECTOR})",
        )
    release = _release(facts.torch_version)
    if release is not None and release < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return Check(
            "FAIL",
            "torch",
            f"{facts.torch_version} ({_build(facts)}) is too old: the course needs torch {need} or newer",
            f'upgrade both together: `pip install --upgrade "torch>={need}" torchvision'
            f"{_index_hint(facts.torch_version)}`",
        )
    return Check("OK", "torch", f"{facts.torch_version} ({_build(facts)})")


def _check_torchvision(facts: Facts) -> Check:
    torch_version = facts.torch_version or ""
    want = matching_torchvision(torch_version)
    torch_minor = ".".join(map(str, _release(torch_version) or ()))
    pin = f'"torch=={torch_minor}.*" "torchvision=={want[0]}.{want[1]}.*"' if want else "torch torchvision"
    reinstall = f"reinstall both together: `pip install {pin}{_index_hint(torch_version)}`"
    if facts.torchvision_version is None:
        error = facts.torchvision_error or "ModuleNotFoundError: No module named 'torchvision'"
        problem = "is not installed" if error.startswith("ModuleNotFoundError") else "does not import"
        return Check("FAIL", "torchvision", f"{problem} ({error})", reinstall)
    have = _release(facts.torchvision_version)
    if want is None or have is None:
        return Check(
            "WARN",
            "torchvision",
            f"{facts.torchvision_version}: cannot tell whether it pairs with torch {torch_version}",
            "check the table at https://github.com/pytorch/vision#installation",
        )
    if have != want:
        return Check(
            "FAIL",
            "torchvision",
            f"{facts.torchvision_version} does not match torch {torch_version} "
            f"(torch {torch_minor} pairs with torchvision {want[0]}.{want[1]})",
            reinstall,
        )
    tv_tag, torch_tag = _local_tag(facts.torchvision_version), _local_tag(torch_version)
    if tv_tag and torch_tag and tv_tag != torch_tag:
        return Check(
            "FAIL",
            "torchvision",
            f"{facts.torchvision_version} is built for {tv_tag} but torch {torch_version} for {torch_tag}",
            reinstall,
        )
    return Check("OK", "torchvision", f"{facts.torchvision_version} (matches torch {torch_minor})")


def _check_driver(facts: Facts) -> Check:
    if facts.nvidia_smi == "missing" and facts.cuda_available:
        return Check(
            "OK", "NVIDIA driver", "works (PyTorch uses the GPU); nvidia-smi is not installed here (some containers)"
        )
    if facts.nvidia_smi == "missing":
        return Check("OK", "NVIDIA driver", "none (nvidia-smi not found): normal on a machine without an NVIDIA GPU")
    if facts.nvidia_smi == "failed":
        return Check(
            "WARN",
            "NVIDIA driver",
            f"nvidia-smi is installed but fails: {facts.nvidia_smi_error}",
            "the NVIDIA driver is not working: reboot, or reinstall the driver; "
            "in a container, start it with GPU access (`docker run --gpus all ...`)",
        )
    cuda = f", supports CUDA up to {facts.driver_cuda}" if facts.driver_cuda else ""
    gpus = ", ".join(facts.smi_gpus) or "no GPU"
    return Check("OK", "NVIDIA driver", f"{facts.driver_version}{cuda}; nvidia-smi lists {gpus}")


def _cvd_hides_all(facts: Facts) -> bool:
    """CUDA_VISIBLE_DEVICES is set and PyTorch sees no GPU although nvidia-smi lists some."""
    return (
        facts.cuda_visible_devices is not None
        and bool(facts.smi_gpus)
        and facts.nvidia_smi == "ok"
        and not facts.gpus
        and bool(facts.cuda_build or facts.hip_build)
    )


def _check_cuda(facts: Facts) -> Check:
    build = _build(facts)
    smi_has_gpu = facts.nvidia_smi == "ok" and bool(facts.smi_gpus)
    supports = f" (nvidia-smi: this driver supports CUDA up to {facts.driver_cuda})" if facts.driver_cuda else ""
    if not (facts.cuda_build or facts.hip_build):
        if smi_has_gpu:
            example = f"{WHEEL_INDEX}cu126"
            return Check(
                "WARN",
                "CUDA",
                "you have an NVIDIA GPU but a CPU-only PyTorch: the course runs on the CPU",
                f"reinstall PyTorch from pytorch.org's CUDA wheel index: `pip uninstall -y torch torchvision`, then "
                f"`pip install torch torchvision --index-url {example}`; pick the CUDA version the driver "
                f"supports{supports} (cu126 = CUDA 12.6; the selector at {SELECTOR} lists them)",
            )
        return Check("OK", "CUDA", f"{build}: runs on the CPU" + (" or Apple MPS" if facts.mps_available else ""))
    if facts.cuda_available and facts.gpus:
        return Check("OK", "CUDA", f"{build}, CUDA available: {_plural(len(facts.gpus), 'GPU')}")
    if _cvd_hides_all(facts):
        return Check(
            "WARN",
            "CUDA",
            f"{build}, but CUDA_VISIBLE_DEVICES={facts.cuda_visible_devices!r} hides every GPU "
            f"(nvidia-smi lists {_plural(len(facts.smi_gpus), 'GPU')}): the course runs on the CPU",
            "unset it (`unset CUDA_VISIBLE_DEVICES`) or set it to the GPU indices you want (e.g. "
            "CUDA_VISIBLE_DEVICES=0) before Python starts; CUDA reads it once, when it initializes, "
            "so in Jupyter restart the kernel after changing it",
        )
    if smi_has_gpu:
        said = f" PyTorch said: {' '.join(facts.torch_warnings)}" if facts.torch_warnings else ""
        return Check(
            "WARN",
            "CUDA",
            f"{build}, and nvidia-smi lists a GPU, but PyTorch cannot use it: the course runs on the CPU.{said}",
            f"the driver is probably too old for a {build}{supports}: update the NVIDIA driver, or install a "
            f"PyTorch built for an older CUDA: `pip uninstall -y torch torchvision`, then "
            f"`pip install torch torchvision --index-url {WHEEL_INDEX}cu126` (cu126 = CUDA 12.6; "
            f"the selector at {SELECTOR} lists them)",
        )
    return Check(
        "OK",
        "CUDA",
        f"{build}, but no NVIDIA GPU or driver here: the course runs on the "
        + ("Apple GPU (MPS)" if facts.mps_available else "CPU"),
        None if facts.mps_available else f"to use a GPU {COLAB_GPU}",
    )


def _check_gpus(facts: Facts) -> list[Check]:
    if not facts.gpus:
        return [Check("OK", "GPUs", "none visible to PyTorch")]
    return [
        Check("OK", f"GPU {g.index}", f"{g.name}, {g.memory_gib:.1f} GiB, compute capability {g.capability}")
        for g in facts.gpus
    ]


def _check_cvd(facts: Facts) -> Check:
    value = facts.cuda_visible_devices
    if value is None:
        return Check("OK", "CUDA_VISIBLE_DEVICES", "not set (PyTorch may use every GPU)")
    seen = f"PyTorch sees {_plural(len(facts.gpus), 'GPU')}"
    if facts.smi_gpus:
        seen += f"; nvidia-smi, which ignores this variable, lists {len(facts.smi_gpus)}"
    status: Status = "WARN" if _cvd_hides_all(facts) else "OK"
    return Check(status, "CUDA_VISIBLE_DEVICES", f"{value!r} ({seen})")


def _check_mps(facts: Facts) -> Check:
    if facts.mps_available:
        return Check("OK", "Apple MPS", "available (Apple GPU through Metal)")
    return Check("OK", "Apple MPS", "not available (Apple silicon Macs only)")


def _check_accelerator(facts: Facts) -> Check:
    if not facts.accelerator_api:
        return Check("OK", "torch.accelerator", "not in this PyTorch (added in torch 2.6; the course needs 2.7)")
    current = facts.accelerator or "None (no accelerator in this build)"
    available = "" if facts.accelerator_available is None else f", is_available() = {facts.accelerator_available}"
    if facts.accelerator and facts.accelerator_available is False:
        available += " (it names the build's accelerator even when no device is present)"
    return Check("OK", "torch.accelerator", f"current_accelerator() = {current}{available}")


def _check_warnings(facts: Facts, cuda: Check) -> list[Check]:
    if not facts.torch_warnings or "PyTorch said:" in cuda.detail:
        return []
    return [Check("WARN", "PyTorch warning", text) for text in facts.torch_warnings]


def _check_course_device(facts: Facts) -> Check:
    if facts.torch_version is None:
        return Check("FAIL", "course device", "none: the course needs PyTorch (see the torch line above)")
    if facts.course_device_error is not None:
        detail = facts.course_device_error.split(" To fix: ")[0]
        choices = ", ".join(["auto", *facts.available_devices])
        return Check(
            "FAIL",
            "course device",
            detail,
            f"unset {DEVICE_ENV} (`unset {DEVICE_ENV}`) or set it to one of: {choices}",
        )
    why = f"forced by {DEVICE_ENV}={facts.course_device_env!r}" if facts.course_device_env else "best device present"
    device = facts.course_device_detail or facts.course_device
    return Check("OK", "course device", f"the course will use {device} ({why})")


def diagnose(facts: Facts) -> list[Check]:
    """Turn facts into report lines, the device the course will use last. Pure: no torch, no I/O."""
    checks = [_check_python(facts), _check_torch(facts)]
    if facts.torch_version is not None:
        checks.append(_check_torchvision(facts))
    checks.append(_check_driver(facts))
    if facts.torch_version is not None:
        cuda = _check_cuda(facts)
        checks += [cuda, *_check_gpus(facts), _check_cvd(facts), _check_mps(facts), _check_accelerator(facts)]
        checks += _check_warnings(facts, cuda)
    checks.append(_check_course_device(facts))
    return checks


def render(checks: list[Check]) -> str:
    """``[OK]   topic: detail`` lines; a fix (or tip) indented under its line."""
    lines = []
    for check in checks:
        lines.append(f"{'[' + check.status + ']':<7}{check.topic}: {check.detail}")
        if check.fix:
            lines.append(f"{'':7}{'tip' if check.status == 'OK' else 'fix'}: {check.fix}")
    return "\n".join(lines)


def can_run(checks: list[Check]) -> bool:
    """True when no check failed (warnings and the CPU fallback are fine)."""
    return all(check.status != "FAIL" for check in checks)


def main(argv: list[str] | None = None) -> int:
    """Print the report; return 0 when the course can run here, 1 when it cannot.

    With ``--explain MESSAGE`` (the text, a file holding it, or ``-`` for standard input) it explains a
    pasted error message instead: 0 when it is a known device error, 1 when not.
    """
    parser = argparse.ArgumentParser(prog="python -m helpers.doctor", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--explain",
        metavar="MESSAGE",
        help='explain a pasted error message: the text, a file holding it, or "-" to read standard input',
    )
    args = parser.parse_args(argv)
    if args.explain is not None:
        from helpers.known_errors import explain_text_cli

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
        [sys.executable, "-m", "helpers.doctor"], capture_output=True, text=True, env=child_env, check=False
    )
    print(proc.stdout + proc.stderr, end="")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
