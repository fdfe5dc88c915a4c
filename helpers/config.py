"""Environment variables that steer the course, in one place."""

import os

DEVICE_ENV = "COURSE_DEVICE"
"""Forces the device the course uses: ``auto`` (default), ``cpu``, ``cuda``, ``cuda:1``, ``mps``."""

QUICK_ENV = "COURSE_QUICK"
"""``1`` shrinks data and epochs so every notebook runs in seconds (tests and CI set it)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def quick_mode() -> bool:
    """True when ``COURSE_QUICK`` asks for quick mode."""
    value = os.environ.get(QUICK_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{QUICK_ENV}={value!r} is not understood: use 1 (quick mode) or 0 (full runs).")
