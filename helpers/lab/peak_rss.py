"""Peak resident memory (RSS) of a fresh Python process running some code: what loading a checkpoint costs.

A notebook's kernel already holds whatever it made before, and its peak never goes down; a child process
starts clean, so its peak is the code's own (plus the interpreter and ``import torch``).
"""

from __future__ import annotations

import json

from helpers.lab.child import run_python

_REPORT = r"""
import json as _json, sys as _sys
def _peak_rss():
    if _sys.platform == "win32":
        import ctypes
        from ctypes import wintypes
        class _Counters(ctypes.Structure):
            _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD)] + [
                (name, ctypes.c_size_t) for name in ("PeakWorkingSetSize", "WorkingSetSize", "QuotaPeakPagedPoolUsage",
                "QuotaPagedPoolUsage", "QuotaPeakNonPagedPoolUsage", "QuotaNonPagedPoolUsage", "PagefileUsage",
                "PeakPagefileUsage")]
        counters = _Counters()
        counters.cb = ctypes.sizeof(counters)
        process = ctypes.windll.kernel32.GetCurrentProcess()
        ctypes.windll.psapi.GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb)
        return counters.PeakWorkingSetSize
    if _sys.platform.startswith("linux"):
        # VmHWM: this process's own peak. ru_maxrss would not do: Linux carries it over from the parent across exec.
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if _sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
"""


def peak_rss(code: str, setup: str = "", timeout: float = 300, then: str | None = None) -> dict[str, int]:
    """Run ``setup`` then ``code`` (then ``then``) in a fresh Python; return peak RSS in bytes after each.

    ``{"after setup": ..., "after code": ...}`` (and ``"after then"`` when ``then`` is given, e.g. a forward
    pass that reads weights only mapped so far): the peak never decreases, so the first is the baseline
    (interpreter, imports, whatever ``setup`` made) and each difference is what the code up to there added at
    most.
    """
    steps = [("after code", code)] + ([("after then", then)] if then is not None else [])
    program = "\n".join(
        [
            _REPORT,
            setup,
            "_peaks = {'after setup': _peak_rss()}",
            *(f"{step}\n_peaks[{label!r}] = _peak_rss()" for label, step in steps),
            "print('PEAK_RSS ' + _json.dumps(_peaks))",
        ]
    )
    out = run_python(program, timeout=timeout)
    line = next(line for line in out.splitlines() if line.startswith("PEAK_RSS "))
    return json.loads(line.removeprefix("PEAK_RSS "))
