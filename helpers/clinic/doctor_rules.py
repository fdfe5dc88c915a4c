"""The doctor's rules: ``diagnose(facts)`` turns :class:`~helpers.clinic.doctor_facts.Facts` into the report's
lines, the device the course will use last. Pure: no torch, no I/O. Python, torch, torchvision, Apple MPS,
``torch.accelerator``, DataLoader workers and torch's own warnings are judged here; the NVIDIA driver, the CUDA or
ROCm build, the GPUs and ``CUDA_VISIBLE_DEVICES`` in :mod:`helpers.clinic.doctor_cuda`.
"""

from __future__ import annotations

from helpers.clinic.doctor_cuda import (
    _build,
    _check_cuda,
    _check_cvd,
    _check_driver,
    _check_gpus,
    _leading_int,
)
from helpers.clinic.doctor_facts import Check, Facts
from helpers.clinic.doctor_wheels import (
    INSTALL,
    SELECTOR,
    _index_hint,
    _local_tag,
    _release,
    matching_torchvision,
    torchvision_fix,
)
from helpers.course.config import DEVICE_ENV
from helpers.course.i18n import tr

MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 7)  # keep in step with pyproject.toml (tests/test_doctor.py checks it)


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
    reinstall = torchvision_fix(torch_version, installed=True)
    if facts.torchvision_version is None:
        error = facts.torchvision_error or "ModuleNotFoundError: No module named 'torchvision'"
        if error.startswith("ModuleNotFoundError"):
            fix = torchvision_fix(torch_version, installed=False)
            return Check("FAIL", "torchvision", tr("is not installed ({error})", error=error), fix)
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
