"""Environment variables that steer the course, in one place."""

import os

DEVICE_ENV = "COURSE_DEVICE"
"""Forces the device the course uses: ``auto`` (default), ``cpu``, ``cuda``, ``cuda:1``, ``mps``."""

QUICK_ENV = "COURSE_QUICK"
"""``1`` shrinks data and epochs so every notebook runs in seconds (tests and CI set it)."""

FULL_ENV = "COURSE_FULL"
"""``1`` runs the full article everywhere (notebook 05: 10 epochs on the whole training set, even on a CPU)."""

LANG_ENV = "COURSE_LANG"
"""The language the course speaks at run time: ``en`` or ``zh-CN`` (unset: the system's locale)."""

DATA_ENV = "COURSE_DATA"
"""A CIFAR-10 pack (``python -m helpers data pack``) or a folder with ``cifar-10-batches-py``: used, not downloaded."""

VERDICTS_ENV = "COURSE_VERDICTS"
"""A file path: when set, each check's verdict is also appended to it as a JSON line (``python -m helpers grade``)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def quick_mode() -> bool:
    """True when ``COURSE_QUICK`` asks for quick mode."""
    return _flag(QUICK_ENV, "1 (quick mode) or 0 (full runs)")


def full_mode() -> bool:
    """True when ``COURSE_FULL`` asks for the full article on any device (quick mode still wins)."""
    return _flag(FULL_ENV, "1 (the full article on any device) or 0 (work scaled to the device)")


def _flag(name: str, meaning: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not understood: use {meaning}.")
