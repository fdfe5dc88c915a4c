"""Start ``torchrun`` from a notebook cell or a test: with a timeout, on a free loopback port, output made comparable.

Supporting code for notebook 08, not the lesson: the lesson is the command line it runs, which
:attr:`Run.command` shows as you would type it (``torchrun --standalone --nproc_per_node=2 -m ...``).

- Every run has a timeout. When it expires, the whole process group (torchrun and the processes it
  started) is killed, so a job that hangs fails fast instead of blocking the notebook or the tests.
- One machine: ``--standalone``, whose rendezvous listens on a port the operating system picks, on
  ``localhost``. Several "nodes" on one machine: a ``c10d`` rendezvous on ``127.0.0.1`` and a free port.
- ``OMP_NUM_THREADS`` is set to 1 unless you set it (torchrun would set it too, with a banner on stderr).
- A job that failed only because a process aborted while shutting down, after its work ("terminate
  called without an active exception": seen now and then with gloo on recent torch releases), is run
  once more, and :attr:`Run.retried` says so.
- A port already in use (a fixed ``master_port``, as a typed command may choose): torchrun's rendezvous
  fails at once, before any process starts, and :meth:`Run.check`'s error ends with what to do
  (:func:`port_in_use_advice`). ``--standalone`` never meets it: the operating system picks the port.
- Output: lines a script prints on every rank start with ``[rank N]``; :meth:`Run.text` gives the
  other lines (a script prints those on rank 0 only) in order, then the ranked lines sorted, so the
  text is the same whatever order the processes wrote in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from helpers.course.i18n import tr

RANKED = "[rank "
SHUTDOWN_ABORT = "terminate called without an active exception"


def _rank_of(line: str) -> int:
    """N of a line that starts with ``[rank N]`` (ranks sort as numbers: 2 before 10)."""
    found = re.match(r"\[rank (\d+)\]", line)
    return int(found.group(1)) if found else -1


# How torch words a port that another socket holds (torch 2.7 to 2.14: "port: 29500, ..., name: EADDRINUSE, ...").
PORT_IN_USE = re.compile(r"port:? (\d+)\b[^\n]*(?:EADDRINUSE|address already in use)", re.IGNORECASE)


class LaunchError(RuntimeError):
    """A torchrun job failed or timed out; the message ends with the end of its output (and what to do, if known)."""


def port_in_use_advice(output: str) -> str:
    """What to do when ``output`` (an error message, torchrun's stderr) says a port is already in use; else ""."""
    found = PORT_IN_USE.search(output)
    if not found:
        return ""
    return tr(
        "port {port} is already in use (another job or program listens on it). Use torchrun "
        "--standalone on one machine (it picks a free port), or choose another port: --master-port, the port in "
        "--rdzv-endpoint, or MASTER_PORT.",
        port=found.group(1),
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Run:
    """A finished torchrun job."""

    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    retried: bool = False

    def text(self) -> str:
        """stdout: unranked lines in order, then ``[rank N]`` lines by rank (each rank's in the order printed)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        plain = [line for line in lines if not line.startswith(RANKED)]
        return "\n".join(plain + sorted((line for line in lines if line.startswith(RANKED)), key=_rank_of))

    def check(self) -> Run:
        """The run itself, or :class:`LaunchError` if it failed or timed out."""
        if self.timed_out or self.returncode != 0:
            if self.timed_out:
                what = tr("`{command}` timed out:", command=self.command)
            else:
                what = tr("`{command}` exited with code {code}:", command=self.command, code=self.returncode)
            advice = port_in_use_advice(self.stderr)
            raise LaunchError(
                f"{what}\n{self.stdout[-1500:]}\n{self.stderr[-3000:]}" + (f"\n{advice}" if advice else "")
            )
        return self


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=(os.name == "posix"),  # its own process group, so a timeout can end all of it
    )


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (Linux); [] where there is no /proc.

    torchrun starts each worker in a session of its own, so killing torchrun's process group alone
    would leave the workers running (holding the pipes this module reads).
    """
    children: dict[int, list[int]] = {}
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return []
    for entry in proc_dir.iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop(proc: subprocess.Popen) -> None:
    """End the process and every process it started: SIGTERM to torchrun (it stops its workers), then SIGKILL."""
    if proc.poll() is not None:
        return
    if os.name != "posix":
        proc.kill()
        return
    below = _descendants(proc.pid)  # before anything dies: orphans cannot be traced back
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _finish(procs: list[tuple[str, subprocess.Popen]], timeout: float, start: float) -> list[Run]:
    runs = []
    timed_out = False
    for command, proc in procs:
        left = max(0.1, timeout - (time.perf_counter() - start))
        try:
            out, err = proc.communicate(timeout=None if timed_out else left)
        except subprocess.TimeoutExpired:
            timed_out = True
            for _, p in procs:  # one node stuck: end the whole job
                _stop(p)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # something outside our reach still holds the pipes
                out, err = "", tr("(the output could not be read: a process of the job outlived it)")
        runs.append(Run(command, proc.returncode, out, err, time.perf_counter() - start, timed_out))
    for _, p in procs:  # no stray rank survives its job
        _stop(p)
    return runs


def _target(target: str, args: Sequence[str]) -> list[str]:
    """``-m module`` for a dotted module name, else a script path."""
    head = [target] if target.endswith(".py") else ["-m", target]
    return [*head, *map(str, args)]


def torchrun(
    target: str,
    *args: str,
    nproc: int = 2,
    timeout: float = 180,
    env: Mapping[str, str] | None = None,
    master_port: int | None = None,
) -> Run:
    """``torchrun --standalone --nproc_per_node=nproc -m target args...``, killed after ``timeout`` seconds.

    With ``master_port``, ``--master-port=PORT`` instead of ``--standalone``: the rendezvous on that fixed
    port of 127.0.0.1, as a command typed with a port of one's choosing.
    """
    where = ["--standalone"] if master_port is None else [f"--master-port={master_port}"]
    options = [*where, f"--nproc_per_node={nproc}"]
    shown = " ".join(["torchrun", *options, *_target(target, args)])
    argv = [sys.executable, "-m", "torch.distributed.run", *options, *_target(target, args)]
    start = time.perf_counter()
    run = _finish([(shown, _start(argv, _env(env)))], timeout, start)[0]
    if _aborted_at_shutdown([run]):  # once more; the second run is the one returned
        start = time.perf_counter()
        run = _finish([(shown, _start(argv, _env(env)))], timeout, start)[0]
        run.retried = True
    return run


def torchrun_nodes(target: str, *args: str, nnodes: int = 2, nproc_per_node: int = 1, timeout: float = 180,
                   env: Mapping[str, str] | None = None) -> list[Run]:  # fmt: skip
    """``nnodes`` torchrun invocations on this machine that form one job, as ``nnodes`` machines would.

    Each is what you would type on one node of a cluster; here the rendezvous endpoint is 127.0.0.1
    and a free port. Returns one :class:`Run` per invocation; the rendezvous decides which node holds
    rank 0 (:func:`joined_text` reads them as one).
    """
    runs = _nodes_once(target, args, nnodes, nproc_per_node, timeout, env)
    if _aborted_at_shutdown(runs):  # once more; the second job's runs are returned
        runs = _nodes_once(target, args, nnodes, nproc_per_node, timeout, env)
        for run in runs:
            run.retried = True
    return runs


def _aborted_at_shutdown(runs: Sequence[Run]) -> bool:
    return any(r.returncode != 0 and not r.timed_out and SHUTDOWN_ABORT in r.stderr for r in runs)


def _nodes_once(target, args, nnodes, nproc_per_node, timeout, env) -> list[Run]:
    port = free_port()
    procs = []
    start = time.perf_counter()
    for _ in range(nnodes):
        options = [
            f"--nnodes={nnodes}",
            f"--nproc_per_node={nproc_per_node}",
            "--rdzv-id=course",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
        ]
        shown = " ".join(["torchrun", *options, *_target(target, args)])
        argv = [sys.executable, "-m", "torch.distributed.run", *options, *_target(target, args)]
        procs.append((shown, _start(argv, _env(env))))
    return _finish(procs, timeout, start)


def joined_text(runs: Sequence[Run]) -> str:
    """:meth:`Run.text` of several nodes' runs read as one job."""
    return Run("", 0, "\n".join(r.stdout for r in runs), "", 0.0).text()


@contextlib.contextmanager
def quiet_spawn_logs() -> Iterator[None]:
    """Within the block, ``torch.multiprocessing.spawn`` does not log "Terminating process ... via signal
    SIGTERM" (a line with a time stamp and a process id) when it ends the other children of a failed start."""
    logger = logging.getLogger("torch.multiprocessing.spawn")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
