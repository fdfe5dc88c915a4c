"""Catch what child processes (e.g. DataLoader workers) write to stderr, so a notebook can show it.

Worker processes write their tracebacks straight to file descriptor 2, which Jupyter may or may not
show, under the kernel's own file names. ``capture_child_stderr()`` points descriptor 2 at a temporary
file for the duration of a block; children started inside it inherit that file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Captured:
    text: str = ""

    def last_line(self) -> str:
        lines = [line for line in self.text.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


@contextlib.contextmanager
def capture_child_stderr() -> Iterator[Captured]:
    """``with capture_child_stderr() as err: ...``; then ``err.text`` holds what children wrote to stderr."""
    captured = Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.text = tmp.read().decode(errors="replace")
