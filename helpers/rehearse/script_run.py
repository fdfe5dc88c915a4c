"""One rehearsal: a learner's script run, unchanged, on the pretend machine (``pretend_gpu``), stopped after a few
batches of each loop, its torchvision datasets served offline when a download fails; what it met, as a Report.

An error the pretend machine cannot explain is never blamed on the script unchecked: the same script runs plainly
on the CPU (a child, CUDA hidden, the same limits, its moves to a device kept on the CPU); the same error at the
same line is the script's bug, anything else "could not tell" (exit 3, ``gap``) with what was not modelled. A run
the clock stops is "could not tell" too; a script that catches the rehearsal's stop (``except BaseException``)
ends its process at the next loop.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.util
import io
import json
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from unittest import mock

import torch
from torch.multiprocessing.spawn import ProcessException
from torch.overrides import TorchFunctionMode

from helpers.course.i18n import tr
from helpers.lab import simulate
from helpers.rehearse.findings import Finding, Report
from helpers.rehearse.pretend_gpu import FORKED_CUDA, Ledger, Machine, pretend

_OURS = (
    str(Path(__file__).resolve().parent.parent),
    str(Path(torch.__file__).resolve().parent),
    str(Path(os.__file__).resolve().parent),
    "<frozen",
)
SYNTHETIC_SIZES = {True: 4096, False: 1024}  # train, test: two batches of 2,000 and more


class RehearsalStop(BaseException):
    """The rehearsal ends the script here (its step or time limit): a BaseException, so ``except Exception``
    in the script cannot swallow it."""


def learner_line(script: str | None = None) -> tuple[str, int]:
    """The innermost frame of the learner's own code (not torch's, not the course's, not the standard library)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_OURS) and "site-packages" not in name and "dist-packages" not in name:
            return name, frame.f_lineno
        frame = frame.f_back
    return script or "?", 0


def _main_guards(script: str) -> list[range]:
    """The lines of the script's module-level ``if __name__ == "__main__":`` blocks."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    return [
        range(node.lineno, node.end_lineno + 1)
        for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)
    ]


def _unguarded_at_import(script: str) -> bool:
    """Whether the script's module-level line running now would run again in a spawned worker (which imports the
    script as ``__mp_main__``): a line outside every ``if __name__ == "__main__":`` block."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == script and frame.f_code.co_name == "<module>":
            return not any(frame.f_lineno in lines for lines in _main_guards(script))
        frame = frame.f_back
    return False


def _limited_loader(
    report: Report, ledger: Ledger, machine: Machine, script: str, steps: int, loops: int, swallowed=None
):
    """DataLoader.__iter__ yielding at most ``steps`` batches; the loop after ``loops`` loops ends the run."""
    real_iter = torch.utils.data.DataLoader.__iter__
    done = {"loops": 0}

    def limited(self):
        if done["loops"] > loops and swallowed is not None:  # the script caught the stop and went on
            swallowed()
        if done["loops"] >= loops:
            done["loops"] += 1
            raise RehearsalStop(
                tr(
                    "stopped after {loops} loop(s) of at most {steps} batch(es): the step limit (--steps, --loops)",
                    loops=loops,
                    steps=steps,
                )
            )
        if machine.mps and self.num_workers > 0 and _unguarded_at_import(script):
            file, line = learner_line(script)
            report.add(
                Finding(
                    file,
                    line,
                    "spawn-workers",
                    "An attempt has been made to start a new process before the current process has "
                    "finished its bootstrapping phase.",
                )
            )
        done["loops"] += 1
        ledger.loader_used = True
        try:
            for i, batch in enumerate(real_iter(self)):
                if i >= steps:
                    break
                ledger.step += 1
                ledger.in_batch = True
                yield batch
        finally:
            ledger.in_batch = False

    return mock.patch.object(torch.utils.data.DataLoader, "__iter__", limited)


@contextlib.contextmanager
def _offline_datasets(notes: list[str]):
    """torchvision's datasets, served by a synthetic stand-in of the same shape when the real one cannot load.

    Applied when the script imports torchvision (at once, if it is imported already): importing it costs a second
    or more, which a script that never uses it should not pay. It loads with torch's real CUDA version, as it
    checks that its own build matches."""
    with contextlib.ExitStack() as stack:
        if "torchvision.datasets" in sys.modules:
            stack.enter_context(_stand_ins(sys.modules["torchvision.datasets"], notes))
            yield
            return
        real_cuda = torch.version.cuda

        def load(real_exec, module):
            with mock.patch.object(torch.version, "cuda", real_cuda):
                real_exec(module)
            if "torchvision.datasets" in sys.modules:
                stack.enter_context(_stand_ins(sys.modules["torchvision.datasets"], notes))

        hook = _OnImport("torchvision", load)
        sys.meta_path.insert(0, hook)
        try:
            yield
        finally:
            sys.meta_path.remove(hook)


class _OnImport(importlib.abc.MetaPathFinder):
    """Loads the module ``name`` through ``load(real_exec_module, module)`` when it is first imported."""

    def __init__(self, name: str, load) -> None:
        self.name, self.load = name, load

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the real spec, from the other finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            real_exec, load = spec.loader.exec_module, self.load
            spec.loader.exec_module = lambda module: load(real_exec, module)
        return spec


def _stand_ins(datasets, notes: list[str]) -> contextlib.ExitStack:
    shapes = {
        "MNIST": ((1, 28, 28), 10),
        "FashionMNIST": ((1, 28, 28), 10),
        "KMNIST": ((1, 28, 28), 10),
        "EMNIST": ((1, 28, 28), 26),
        "QMNIST": ((1, 28, 28), 10),
        "CIFAR10": ((3, 32, 32), 10),
        "CIFAR100": ((3, 32, 32), 100),
        "SVHN": ((3, 32, 32), 10),
        "STL10": ((3, 96, 96), 10),
    }
    patches = []
    for name, (shape, classes) in shapes.items():
        real = getattr(datasets, name, None)
        if real is not None:
            patches.append(mock.patch.object(datasets, name, _stand_in(real, name, shape, classes, notes)))
    stack = contextlib.ExitStack()
    for patch in patches:
        stack.enter_context(patch)
    return stack


def _stand_in(real, name, shape, classes, notes):
    def make(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except Exception as err:  # offline, no files, a failed download
            train = kwargs.get("train", kwargs.get("split", "train") in ("train", True))
            size = SYNTHETIC_SIZES[bool(train)]
            notes.append(
                tr(
                    "{name} could not be loaded ({why}): the rehearsal serves {size} synthetic images of the "
                    "same shape instead",
                    name=name,
                    why=type(err).__name__,
                    size=size,
                )
            )
            if name == "CIFAR10":
                from helpers.lesson.data import SyntheticCIFAR

                return SyntheticCIFAR(size, seed=0 if train else 1, transform=kwargs.get("transform"))
            if len(shape) == 3 and shape[0] == 1:
                return _SyntheticGrey(size, shape[1:], classes, 0 if train else 1, kwargs)
            from torchvision.datasets import FakeData

            return FakeData(
                size=size,
                image_size=shape,
                num_classes=classes,
                transform=kwargs.get("transform"),
                target_transform=kwargs.get("target_transform"),
                random_offset=0 if train else size,
            )

    return make


class _SyntheticGrey(torch.utils.data.Dataset):
    """MNIST-shaped stand-in with what scripts read off the real one: ``data`` (uint8, N x H x W), ``targets``,
    the old ``train_data``/``test_data``/``train_labels``/``test_labels``, ``classes``; PIL images to the transform."""

    def __init__(self, size: int, hw: tuple[int, int], classes: int, seed: int, kwargs: dict):
        gen = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (size, *hw), generator=gen, dtype=torch.uint8)
        self.targets = torch.randint(0, classes, (size,), generator=gen)
        self.classes = [str(i) for i in range(classes)]
        self.transform, self.target_transform = kwargs.get("transform"), kwargs.get("target_transform")
        self.train = bool(kwargs.get("train", True))

    train_data = test_data = property(lambda self: self.data)
    train_labels = test_labels = property(lambda self: self.targets)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        from PIL import Image

        img, target = Image.fromarray(self.data[index].numpy(), mode="L"), int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def _cost_lines(ledger: Ledger, limit: int = 8) -> list[str]:
    by_step = defaultdict(list)
    for event in ledger.events:
        by_step[event.step, event.outside and event.step > 0].append(event)
    lines = []
    for step, after in sorted(by_step)[:limit]:
        events = by_step[step, after]
        syncs = Counter((e.what, e.where) for e in events if e.what != "copy")
        copies = [e for e in events if e.what == "copy"]
        pinned = sum(e.nbytes for e in copies if e.pinned)
        pageable = sum(e.nbytes for e in copies if not e.pinned)
        waited = sum(e.nbytes for e in copies if e.pinned and e.blocking)  # pinned, without non_blocking=True
        sites = tr("; ").join(
            f"{tr(what)} {Path(f).name}:{line}" + (f" x{n}" if n > 1 else "") for (what, (f, line)), n in syncs.items()
        )
        fields = {
            "label": _step_label(ledger, step, after),
            "syncs": sum(syncs.values()),
            "sites": tr(" ({sites})", sites=sites) if sites else "",
            "copies": len(copies),
            "pageable": _bytes(pageable),
            "pinned": _bytes(pinned),
            "waited": _bytes(waited),
        }
        if any(e.pinned and e.blocking for e in copies):
            line = tr(
                "{label}: {syncs} sync(s){sites}, {copies} copy(ies) to the device, {pageable} pageable, {pinned} "
                "pinned ({waited} of it blocking: copied without non_blocking=True)",
                **fields,
            )
        else:
            line = tr(
                "{label}: {syncs} sync(s){sites}, {copies} copy(ies) to the device, {pageable} "
                "pageable, {pinned} pinned",
                **fields,
            )
        lines.append("  " + line)
    if len(by_step) > limit:
        lines.append("  " + tr("... and {n} more step(s) like these", n=len(by_step) - limit))
    return lines


def _step_label(ledger: Ledger, step: int, after: bool) -> str:
    if not ledger.loader_used:
        return tr("the whole run (no DataLoader: steps are counted by its batches)")
    if step == 0:
        return tr("before the first batch")
    return tr("after step {n}, outside the loop", n=step) if after else tr("step {n}", n=step)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


_DRIVER_TEXTS = (simulate.NO_DRIVER, simulate.NOT_COMPILED, "CUDA driver", "no GPUs found")


def _where(err: BaseException, script: str) -> tuple[str, int]:
    """The learner's own frame in ``err``'s traceback (the script's file and line for a syntax error)."""
    if isinstance(err, SyntaxError) and err.filename:
        return err.filename, err.lineno or 0
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not f.filename.startswith(_OURS) and "-packages" not in f.filename]
    where = mine[-1] if mine else (frames[-1] if frames else None)
    return (where.filename, where.lineno or 0) if where else (script, 0)


def _classify(report: Report, err: BaseException, script: str, machine: Machine, cpu_check=None) -> None:
    """A script's exception: what the machine refuses, the script's own bug (a plain CPU run fails the same way),
    or what the rehearsal could not tell (a gap of its own, named)."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = str(Path(__file__).resolve().parent)
    torch_raised = frames and "func(*args" in (frames[-1].line or "")  # the op itself refused: the script's error
    text = str(err)
    file, line = _where(err, script)
    if isinstance(err, SyntaxError) and err.filename == script:  # the script's own, on any machine
        report.add(Finding(file, line, "script-bug", f"SyntaxError: {err.msg}"))
        return
    if FORKED_CUDA in text:  # a DataLoader worker forked after the script used the GPU
        found = [int(n) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text) if f == script]
        report.add(Finding(file, found[-1] if found else line, "cuda-in-forked-worker", FORKED_CUDA))
        return
    if frames and frames[-1].filename.startswith(ours) and not torch_raised:
        report.tool_error = f"{type(err).__name__}: {err}"
        return
    if isinstance(err, ProcessException):  # a process torch.multiprocessing started: a real one, not rehearsed
        lines = [t for t in text.strip().splitlines() if t.strip() and t.strip() != ")"]
        report.gap = True
        report.tool_error = tr(
            "could not tell: a process the script started with torch.multiprocessing failed, and such processes "
            "run outside the rehearsal, as on this machine: {error}",
            error=(lines[-1] if lines else type(err).__name__)[:300],
        )
        return
    if any(m in text for m in _DRIVER_TEXTS):
        if not machine.cuda:  # torch.cuda (or NCCL) reached on a machine without a CUDA GPU: it fails there too
            message = simulate.NOT_COMPILED if machine.mps and simulate.NO_DRIVER in text else text
            report.add(Finding(file, line, "no-gpu", message, "run", type(err).__name__))
            return
        report.gap = True
        report.tool_error = tr(
            "could not tell: the script calls a part of torch.cuda the rehearsal does not pretend: {error}",
            error=f"{type(err).__name__}: {text}",
        )
        return
    message = f"{type(err).__name__}: {text}".strip()
    if report.problems:  # the machine already refused the script earlier: this error may follow from that
        return
    if isinstance(err, SyntaxError) or cpu_check is None:
        report.add(Finding(file, line, "script-bug", message))
        return
    plain = cpu_check()  # the same script, plainly on the CPU: does it fail the same way?
    if plain is not None and plain.get("error") == type(err).__name__ and plain.get("line") == line:
        report.add(Finding(file, line, "script-bug", message))
        return
    if plain is None:
        cpu = tr("the plain CPU run could not be made")
    elif plain.get("error"):
        cpu = tr("a plain CPU run fails elsewhere ({error} at line {line})", error=plain["error"], line=plain["line"])
    else:
        cpu = tr("a plain CPU run does not fail")
    report.gap = True
    report.tool_error = tr(
        "could not tell: {error} at {file}:{line}, but {cpu}; what the rehearsal does not model here: {what}",
        error=message[:300],
        file=Path(file).name,
        line=line,
        cpu=cpu,
        what=_unmodelled(err),
    )


def _unmodelled(err: BaseException) -> str:
    """The innermost library call in the traceback (what the pretend machine did not model)."""
    frames = traceback.extract_tb(err.__traceback__)
    library = [f for f in frames if "-packages" in f.filename or f.filename.startswith(_OURS[1])]
    if not library:
        return type(err).__name__
    first = library[0]
    return f"{Path(first.filename).name}:{first.name} ({(first.line or '').strip()[:80]})"


def _end_process_group() -> None:
    """A process group the script left open would refuse the next rehearsal's (several machines, one process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


_CPU_RUNS: dict[tuple, dict | None] = {}
PLAIN_MARK = "=== rehearse.plain result ==="


def plain_cpu_run(script: str, args: list[str], steps: int, loops: int, timeout: float) -> dict | None:
    """The script run plainly on the CPU (CUDA hidden, the same step limit and offline datasets), in a child:
    {"error": type name or "", "line": the learner's line}; None when the child gives no answer. Cached."""
    key = (script, tuple(args), steps, loops)
    if key not in _CPU_RUNS:
        command = [sys.executable, "-m", "helpers.rehearse.script_run", str(steps), str(loops), str(timeout), script]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        try:
            done = subprocess.run(
                [*command, *args], capture_output=True, text=True, timeout=timeout + 60, env=env, cwd=os.getcwd()
            )
            _CPU_RUNS[key] = json.loads(done.stdout.split(PLAIN_MARK, 1)[1])
        except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError, OSError):
            _CPU_RUNS[key] = None
    return _CPU_RUNS[key]


class _OnTheCpu(TorchFunctionMode):
    """The plain run's only change to the script: every move to a device stays on the CPU (``.cuda()``,
    ``.to('cuda')``, ``device='cuda'``), so the run reaches the script's own errors past its device lines."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            return args[0]
        if name == "to" and args:
            args = (args[0], *(CPU if _a_device(a) else a for a in args[1:]))
        if _a_device(kwargs.get("device")):
            kwargs["device"] = CPU
        return func(*args, **kwargs)


CPU = torch.device("cpu")


def _a_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type != "cpu"
    if isinstance(value, str):
        return value.split(":")[0] in ("cuda", "mps", "xpu")
    return isinstance(value, int) and not isinstance(value, bool)


def _plain_main(argv: list[str]) -> int:
    """``python -m helpers.rehearse.script_run STEPS LOOPS TIMEOUT SCRIPT [ARGS...]``: the plain CPU run."""
    steps, loops, timeout, script, *args = argv
    script = str(Path(script).resolve())
    machine = Machine("laptop")
    report = Report("laptop")
    ledger = Ledger(machine, lambda *a: None, lambda: (script, 0))
    result = {"error": "", "line": 0}
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    notes: list[str] = []

    def swallowed():
        print(PLAIN_MARK)
        print(json.dumps(result))
        sys.stdout.flush()
        os._exit(0)

    limits = int(steps), int(loops)
    try:
        with _offline_datasets(notes), _limited_loader(report, ledger, machine, script, *limits, swallowed):
            moves = mock.patch.object(torch.nn.Module, "cuda", lambda self, device=None: self)
            with contextlib.redirect_stdout(io.StringIO()), moves, _OnTheCpu():
                runpy.run_path(script, run_name="__main__")
    except RehearsalStop:
        pass
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            result = {"error": "SystemExit", "line": _where(exit_, script)[1]}
    except BaseException as err:  # noqa: BLE001 - the script's own error is the answer
        result = {"error": type(err).__name__, "line": _where(err, script)[1]}
    print(PLAIN_MARK)
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # the script's threads and workers end with the process


def run_script(
    script: str,
    args: list[str],
    machine: Machine,
    steps: int = 3,
    loops: int = 4,
    timeout: float = 600,
    emit=None,
    cpu_check: bool = True,
) -> Report:
    """Rehearse ``script`` with ``args`` on ``machine``; the Report says what it met. A script that catches the
    rehearsal's stop and goes on ends the process: ``emit(report)`` prints the report first."""
    script = str(Path(script).resolve())
    report = Report(machine.name)
    notes: list[str] = []
    try:
        compile(Path(script).read_bytes(), script, "exec")
    except SyntaxError as err:  # at the script's own file and line, before anything runs
        _classify(report, err, script, machine)
        return report

    def found(kind: str, message: str, detail: str) -> None:
        file, line = learner_line(script)
        report.add(Finding(file, line, kind, message, "run", detail))

    ledger = Ledger(machine, found, lambda: learner_line(script))
    old_argv, old_path, old_timeout = sys.argv, list(sys.path), socket.getdefaulttimeout()
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    socket.setdefaulttimeout(10)  # an offline download fails fast

    alarms = {"n": 0}

    def finish() -> Report:
        report.steps = ledger.step
        report.cost = _cost_lines(ledger)
        if alarms["n"] and not report.tool_error:  # stopped by the clock: what came after was not rehearsed
            report.gap = True
            report.tool_error = tr(
                "could not tell: the time limit (--timeout {seconds:.0f} s) stopped the run after {steps} step(s), "
                "before its step limit; what comes later was not rehearsed",
                seconds=timeout,
                steps=ledger.step,
            )
        if ledger.gaps and not report.problems:  # met what it cannot model (said after a time limit, too)
            why = "; ".join(dict.fromkeys(ledger.gaps))
            report.gap = True
            said = report.tool_error
            report.tool_error = f"{said}; {why}" if said else tr("could not tell: {why}", why=why)
        all_notes = notes + ledger.notes
        if all_notes:
            report.stopped = "\n".join([*dict.fromkeys(all_notes), report.stopped]).strip()
        return report

    def swallowed():
        """The script caught the rehearsal's stop (except BaseException) and went on: the process ends here."""
        if old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not alarms["n"]:
            report.stopped = tr(
                "stopped after {loops} loop(s) of at most {steps} batch(es): the step limit (--steps, --loops)",
                loops=loops,
                steps=steps,
            )
        notes.append(tr("the script caught the rehearsal's stop (except BaseException) and went on: ended here"))
        finish()
        if emit is not None:
            emit(report)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(report.exit_code())

    def out_of_time(signum, frame):
        alarms["n"] += 1
        if alarms["n"] > 1:  # the script caught the first stop
            swallowed()
        raise RehearsalStop(tr("stopped after {seconds:.0f} s: the time limit (--timeout)", seconds=timeout))

    def checked():
        if old_alarm is not None:  # the clock is the script's, not the check's
            signal.setitimer(signal.ITIMER_REAL, 0)
        return plain_cpu_run(script, args, steps, loops, timeout) if cpu_check else None

    old_alarm = signal.signal(signal.SIGALRM, out_of_time) if hasattr(signal, "SIGALRM") else None
    if old_alarm is not None:
        signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)
    limited = _limited_loader(report, ledger, machine, script, steps, loops, swallowed)
    deterministic = torch.are_deterministic_algorithms_enabled()  # a script's global setting, not the next one's
    try:
        with _offline_datasets(notes), limited, pretend(ledger):
            runpy.run_path(script, run_name="__main__")
    except RehearsalStop as stop:
        report.stopped = str(stop)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            _classify(report, exit_, script, machine, checked)
    except BaseException as err:  # noqa: BLE001 - a script's own error is a finding
        if isinstance(err, KeyboardInterrupt):
            raise
        _classify(report, err, script, machine, checked)
    finally:
        if old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_alarm)
        sys.argv, sys.path[:] = old_argv, old_path
        socket.setdefaulttimeout(old_timeout)
        torch.use_deterministic_algorithms(deterministic)
        _end_process_group()
    return finish()


def rehearse(
    script: str | Path,
    *args: str,
    machine: str = "gpu",
    steps: int = 3,
    loops: int = 4,
    timeout: float = 600,
    static: bool = False,
    cwd: str | Path | None = None,
) -> dict:
    """Rehearse ``script`` in a child process; its JSON report, plus the script's own ``output`` and ``exit_code``."""
    command = [
        sys.executable,
        "-m",
        "helpers.rehearse",
        "--json",
        "--as",
        machine,
        "--steps",
        str(steps),
        "--loops",
        str(loops),
        "--timeout",
        str(timeout),
        *(["--static"] if static else []),
        str(script),
        *args,
    ]
    limit = 2 * timeout + 60  # the rehearsal, then perhaps a plain CPU run of the same script, then the report
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=limit)
    except subprocess.TimeoutExpired:
        why = tr("could not tell: the rehearsal did not end within {seconds:.0f} s", seconds=limit)
        return {"runs": False, "findings": [], "gap": True, "tool_error": why, "output": "", "exit_code": 3}
    start = done.stdout.rfind("\n{\n")
    start = 0 if done.stdout.startswith("{") else start + 1
    try:
        result = json.loads(done.stdout[start:])
    except json.JSONDecodeError:
        result = {"runs": False, "findings": [], "tool_error": done.stderr[-2000:] or done.stdout[-2000:]}
    result.update(output=done.stdout[:start], stderr=done.stderr, exit_code=done.returncode)
    return result


if __name__ == "__main__":
    sys.exit(_plain_main(sys.argv[1:]))
