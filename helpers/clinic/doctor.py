"""Device doctor: ``python -m helpers doctor`` says whether the course can run here, and on what.

It prints one ``[OK]`` / ``[WARN]`` / ``[FAIL]`` line per fact (Python, torch and torchvision and whether
they match, the NVIDIA driver, the CUDA or ROCm build, the GPUs and whether the build has kernels for
them, ``CUDA_VISIBLE_DEVICES``, Apple MPS and its CPU fallback, ``torch.accelerator``, how ``DataLoader``
workers start) and ends with the device the course will use. Each problem comes with a
concrete fix. The exit code is 0 when the course can run (the CPU counts), 1 when it cannot.

The doctor works without torch, and with a broken one: torch, torchvision and ``helpers.lesson.devices`` are
imported inside functions only. Three steps, each testable alone: ``gather_facts()`` looks at this
machine, ``diagnose(facts)`` turns facts into checks (pure), ``render(checks)`` formats them. They live in
one module per concern: :mod:`~helpers.clinic.doctor_facts` (the facts, gathering them, nvidia-smi),
:mod:`~helpers.clinic.doctor_wheels` (wheel and architecture arithmetic, the pip lines of the fixes),
:mod:`~helpers.clinic.doctor_cuda` (the rules for the driver, the GPU builds, the GPUs and
``CUDA_VISIBLE_DEVICES``), :mod:`~helpers.clinic.doctor_rules` (the other rules and ``diagnose``), and this one
(the report, ``--report``, the command line); every name stays importable from here.

In a notebook, ``run_child()`` runs the doctor in a fresh Python process: the report then shows what a
fresh start sees (``CUDA_VISIBLE_DEVICES`` is read only once, when CUDA initializes) and the kernel's
own CUDA state is left alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from helpers.clinic.doctor_facts import Check, Facts, Gpu, Status, gather_facts
from helpers.clinic.doctor_rules import DEVICE_ERROR_TEMPLATE, MIN_PYTHON, MIN_TORCH, diagnose
from helpers.clinic.doctor_wheels import matching_torchvision
from helpers.course.i18n import columns, tr, tr_lazy

__all__ = [  # what `from helpers.clinic.doctor import ...` gives, wherever it is defined
    "DEVICE_ERROR_TEMPLATE",
    "MIN_PYTHON",
    "MIN_TORCH",
    "Check",
    "Facts",
    "Gpu",
    "Status",
    "can_run",
    "diagnose",
    "gather_facts",
    "main",
    "matching_torchvision",
    "render",
    "report",
    "run_child",
]

DESCRIPTION = tr_lazy("Device doctor: `python -m helpers doctor` says whether the course can run here, and on what.")


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
            state={"ok": tr("runs"), "missing": tr("not found"), "failed": tr("failed to run")}[facts.nvidia_smi],
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
    from helpers.lab.child import plain_env

    child_env = {**plain_env(os.environ), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "helpers", "doctor"], capture_output=True, text=True, env=child_env, check=False
    )
    print(proc.stdout + proc.stderr, end="")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
