"""Peak resident memory (RSS) of a fresh Python process running some code: what loading a checkpoint costs.

A notebook's kernel already holds whatever it made before, and its peak never goes down; a child process
starts clean, so its peak is the code's own (plus the interpreter and ``import torch``).
"""

from __future__ import annotations

import json

from helpers.child import run_python

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


def peak_rss(code: str, setup: str = "", timeout: float = 300) -> dict[str, int]:
    """Run ``setup`` then ``code`` in a fresh Python; return peak RSS in bytes after each.

    ``{"after setup": ..., "after code": ...}``: the peak never decreases, so the first is the baseline
    (interpreter, imports, whatever ``setup`` made) and the difference is what ``code`` added at most.
    """
    program = "\n".join(
        [
            _REPORT,
            setup,
            "_after_setup = _peak_rss()",
            code,
            "print('PEAK_RSS ' + _json.dumps({'after setup': _after_setup, 'after code': _peak_rss()}))",
        ]
    )
    out = run_python(program, timeout=timeout)
    line = next(line for line in out.splitlines() if line.startswith("PEAK_RSS "))
    return json.loads(line.removeprefix("PEAK_RSS "))
