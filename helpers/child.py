"""Run Python code in a fresh process, for behaviour a process fixes when it starts (a notebook's kernel
cannot show it on itself)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")


class ChildError(RuntimeError):
    """The child Python exited with an error; the message ends with its stderr."""


def run_python(code: str, env: Mapping[str, str] | None = None, unset: Iterable[str] = (), timeout: float = 300) -> str:
    """Run ``code`` in a fresh ``python -c``; return its stdout.

    The child inherits this process's environment, without the variables named in ``unset``, plus ``env``.
    """
    child_env = {k: v for k, v in os.environ.items() if k not in set(unset)}
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
