"""Child processes: run Python code in a fresh process, for behaviour a process fixes when it starts (a
notebook's kernel cannot show it on itself), and catch what child processes (e.g. DataLoader workers)
write to stderr, so a notebook can show it.

Worker processes write their tracebacks straight to file descriptor 2, which Jupyter may or may not
show, under the kernel's own file names. ``capture_child_stderr()`` points descriptor 2 at a temporary
file for the duration of a block; children started inside it inherit that file.

Children write plain text: Jupyter's kernel sets ``FORCE_COLOR``, and from Python 3.13 a child would colour its
traceback (ANSI codes in a stored output); :func:`plain_env` drops it and sets ``PYTHON_COLORS=0``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")


class ChildError(RuntimeError):
    """The child Python exited with an error; the message ends with its stderr."""


PLAIN = {"PYTHON_COLORS": "0"}  # Python 3.13+: no colour in tracebacks, whatever the terminal
COLOUR_VARIABLES = ("FORCE_COLOR", "CLICOLOR_FORCE")  # set by Jupyter's kernel: children would colour their output


def plain_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child whose output is shown or stored: without forced colour, ``PYTHON_COLORS=0``."""
    return {**{k: v for k, v in env.items() if k not in COLOUR_VARIABLES}, **PLAIN}


@contextlib.contextmanager
def plain_children() -> Iterator[None]:
    """Within the block, children started from this process (``mp.spawn``, DataLoader workers) write no colour."""
    saved = {k: os.environ.get(k) for k in (*COLOUR_VARIABLES, *PLAIN)}
    for k in COLOUR_VARIABLES:
        os.environ.pop(k, None)
    os.environ.update(PLAIN)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_python(code: str, env: Mapping[str, str] | None = None, unset: Iterable[str] = (), timeout: float = 300) -> str:
    """Run ``code`` in a fresh ``python -c``; return its stdout.

    The child inherits this process's environment, without the variables named in ``unset``, plus ``env``.
    """
    child_env = plain_env({k: v for k, v in os.environ.items() if k not in set(unset)})
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise ChildError(f"the child Python exited with code {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def run_parallel(calls: Mapping[K, Callable[[], T]]) -> dict[K, T]:
    """Run each call in its own thread (each may start a child process); results in the same order."""
    with ThreadPoolExecutor() as pool:
        futures = {key: pool.submit(call) for key, call in calls.items()}
        return {key: future.result() for key, future in futures.items()}


@dataclass
class Captured:
    text: str = ""

    def last_line(self) -> str:
        lines = [line for line in self.text.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


@contextlib.contextmanager
def capture_child_stderr() -> Iterator[Captured]:
    """``with capture_child_stderr() as err: ...``; then ``err.text`` holds what children wrote to stderr (without
    colour: :func:`plain_children`)."""
    captured = Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp, plain_children():
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.text = tmp.read().decode(errors="replace")
