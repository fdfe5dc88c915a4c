"""The GPU check in one command: ``python tools/gpu_check.py``.

On a machine with a CUDA GPU it runs, one phase after another, each in its own process with a timeout:

1. the doctor (``python -m helpers.doctor``), which must say the course will use the GPU;
2. the whole suite with ``COURSE_DEVICE=cuda`` against the same stored outputs (``pytest``);
3. the training benchmark on ``cuda`` (``benchmarks/bench_training.py``);
4. notebook 05's training (``python -m helpers.train_tudui``) for a few full-mode epochs on the
   synthetic fallback data;
5. notebook 06's speed ladder on ``cuda`` (``benchmarks/bench_ladder.py``), whose best rung is reported;
6. on machines with 2 GPUs or more: DDP on 2 GPUs against 1 (``benchmarks/bench_ddp.py --device cuda``,
   notebook 08), whose scaling (images/s on 2 GPUs over 1 GPU; the goal is at least 1.8x) is reported.

It then prints one results row for BENCHMARKS.md's GPU check table and exits 1 if any phase failed
(0 when all passed). Without a CUDA GPU it says so and exits 0 with nothing run. All phases together
stay under ``DEADLINE_S`` (each phase's timeout is cut to what is left). The full output of each phase
goes to ``runs/gpu_check/<phase>.log``.

The benchmarks and the training run offline on purpose (proxy variables point at a closed local port):
CIFAR-10 is then not downloaded and both train on the synthetic fallback, the same data on every
machine. A new check is one more ``Phase`` in ``PHASES``; ``min_gpus`` skips it on machines with fewer
GPUs (as the DDP phase on a machine with one GPU).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
_now = time.monotonic  # the clock the deadline is counted on
LOG_DIR = Path("runs") / "gpu_check"
DEADLINE_S = 755  # all phases together: the check must finish in under 13 minutes
INSTALL = 'pip install -e ".[dev]"'
TRAIN_EPOCHS = 3
TRAIN_ARGS = (
    f"--device cuda --epochs {TRAIN_EPOCHS} --no-resume --no-progress --checkpoint tudui.pt --log-dir tb".split()
)
# Images per timed epoch of the training benchmark. On an H200 an epoch of the default 512 images (8 steps) took
# 17 ms and the course loop measured 0.937 of the bare loop: its per-epoch costs (a progress bar, one .item())
# are a large share of so short an epoch. A CIFAR-10 epoch has 782 steps.
BENCH_IMAGES = 4096
DDP_ARGS = "--device cuda --gpus 2 --rounds 2 --timeout 40".split()  # 2 GPUs against 1, batch 256 per GPU
CLOSED_PORT = "http://127.0.0.1:9"
OFFLINE = {"http_proxy": CLOSED_PORT, "https_proxy": CLOSED_PORT, "HTTP_PROXY": CLOSED_PORT, "HTTPS_PROXY": CLOSED_PORT,
           "no_proxy": "", "NO_PROXY": ""}  # fmt: skip

# BENCHMARKS.md's GPU check table: one column per field of the results row, in this order.
COLUMNS = (
    "date",
    "GPU",
    "driver",
    "torch",
    "tests passed / failed",
    "img/s (course loop)",
    "course / bare loop",
    "best ladder rung / article loop",
    "DDP 2 GPUs / 1 GPU",
)


class PhaseError(Exception):
    """A phase's output does not show what it must show."""


@dataclass(frozen=True)
class Machine:
    """What the results row says about the machine."""

    gpus: tuple[str, ...]  # GPU names as torch sees them
    driver: str | None  # NVIDIA driver version from nvidia-smi
    torch: str  # torch.__version__

    def gpu_text(self) -> str:
        names = sorted(set(self.gpus))
        return ", ".join(f"{self.gpus.count(n)}x {n}" if self.gpus.count(n) > 1 else n for n in names)


@dataclass
class Context:
    """Where a phase runs: the repository, a scratch folder for what it writes, the Python to use."""

    root: Path
    scratch: Path
    python: str = sys.executable


@dataclass(frozen=True)
class Phase:
    name: str
    command: Callable[[Context], list[str]]
    timeout_s: int
    parse: Callable[[str], dict[str, str]]  # output -> row fields; raises PhaseError when it shows a failure
    env: dict[str, str] = field(default_factory=dict)
    in_scratch: bool = False  # run in the scratch folder (it writes data or checkpoints), else in the repository
    needs_dev: bool = False  # needs the dev extra (pytest, nbval, ipykernel, ...)
    min_gpus: int = 1


@dataclass
class Result:
    phase: str
    status: str  # "passed", "failed", "timed out", "not run" (all failures), or "skipped" (fine: min_gpus)
    seconds: float = 0.0
    fields: dict[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "passed"


# --- parsing what each phase prints ----------------------------------------------------------------


def parse_doctor(output: str) -> dict[str, str]:
    found = re.search(r"the course will use (\S+)", output)
    if not found or not found.group(1).startswith("cuda"):
        raise PhaseError("the doctor does not say the course will use a CUDA GPU")
    return {}


PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b")


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line: {"passed": 640, "failed": 2, "error": 1, ...}."""
    for line in reversed(output.strip().splitlines()):
        if re.search(r"\bin [\d.]+s\b", line) and PYTEST_COUNT.search(line):
            counts = {}
            for number, word in PYTEST_COUNT.findall(line):
                key = {"errors": "error", "warnings": "warning"}.get(word, word)
                counts[key] = counts.get(key, 0) + int(number)
            return counts
    raise PhaseError("no pytest summary line in the output")


def parse_pytest(output: str) -> dict[str, str]:
    counts = pytest_counts(output)
    failed = counts.get("failed", 0) + counts.get("error", 0)
    fields = {"tests passed / failed": f"{counts.get('passed', 0)} / {failed}"}
    if failed:
        raise PhaseError(f"{failed} tests failed or errored", fields)
    if not counts.get("passed"):
        raise PhaseError("no test passed", fields)
    return fields


def parse_benchmark(output: str) -> dict[str, str]:
    rate = re.search(r"^course loop\s+(\d+)\s*$", output, re.MULTILINE)
    ratio = re.search(r"^\(a\) course loop / bare loop:\s+([\d.]+)\s+\((.+)\)", output, re.MULTILINE)
    if not rate or not ratio:
        raise PhaseError("the benchmark printed no course-loop rate or ratio")
    fields = {"img/s (course loop)": rate.group(1), "course / bare loop": ratio.group(1)}
    if ratio.group(2) != "OK":
        raise PhaseError(f"the course loop is too slow: {ratio.group(1)} ({ratio.group(2)})", fields)
    return fields


def training_summary(output: str) -> dict[str, str]:
    """What ``python -m helpers.train_tudui`` reports: device, seconds, epochs, accuracy, data (strings)."""
    device = re.search(r"^device: (\S+)", output, re.MULTILINE)
    done = re.search(r"^done in ([\d.]+) s: epoch (\d+): .*test accuracy ([\d.]+%) on (.+)$", output, re.MULTILINE)
    if not device or not done:
        raise PhaseError("the training did not finish")
    seconds, epochs, accuracy, data = done.groups()
    return {"device": device.group(1), "seconds": seconds, "epochs": epochs, "accuracy": accuracy, "data": data}


def parse_training(output: str) -> dict[str, str]:
    summary = training_summary(output)
    if not summary["device"].startswith("cuda"):
        raise PhaseError(f"the training ran on {summary['device']}, not on cuda")
    if int(summary["epochs"]) != TRAIN_EPOCHS:
        raise PhaseError(f"trained {summary['epochs']} epochs, not {TRAIN_EPOCHS}")
    seconds = float(summary["seconds"])
    return {"training": f"{TRAIN_EPOCHS} epochs in {seconds:.0f} s, test accuracy {summary['accuracy']}"}


def parse_ladder(output: str) -> dict[str, str]:
    best = re.search(r"^best rung: (.+), ([\d.]+)x the article's loop$", output, re.MULTILINE)
    if not best:
        raise PhaseError("the speed ladder printed no best rung")
    return {"best ladder rung / article loop": f"{best.group(2)}x ({best.group(1)})"}


def parse_ddp(output: str) -> dict[str, str]:
    found = re.search(r"^2 GPUs / 1 GPU: ([\d.]+)x \(.*: (.+)\)$", output, re.MULTILINE)
    if not found:
        raise PhaseError("the DDP benchmark printed no scaling")
    fields = {"DDP 2 GPUs / 1 GPU": f"{found.group(1)}x"}
    if found.group(2) != "OK":
        raise PhaseError(f"DDP on 2 GPUs scales too little: {found.group(1)}x ({found.group(2)})", fields)
    return fields


# --- the phases --------------------------------------------------------------------------------------

PHASES: list[Phase] = [
    Phase("doctor", lambda c: [c.python, "-m", "helpers.doctor"], 25, parse_doctor, env={"COURSE_DEVICE": "cuda"}),
    Phase(
        "suite",
        lambda c: [c.python, "-m", "pytest", "-q"],
        540,  # on an H200 the suite ran 1209 of its 1377 tests in 300 s (2026-11-30), and it has grown since
        parse_pytest,
        env={"COURSE_DEVICE": "cuda", "COURSE_QUICK": "1"},
        needs_dev=True,
    ),
    Phase(
        "benchmark",
        lambda c: [
            c.python,
            str(c.root / "benchmarks" / "bench_training.py"),
            "--device",
            "cuda",
            "--images",
            str(BENCH_IMAGES),
        ],
        45,
        parse_benchmark,
        env={"COURSE_QUICK": "0", **OFFLINE},
        in_scratch=True,
    ),
    Phase(
        "training",
        lambda c: [c.python, "-m", "helpers.train_tudui", *TRAIN_ARGS],
        45,
        parse_training,
        env={"COURSE_QUICK": "0", **OFFLINE},
        in_scratch=True,
    ),
    Phase(
        "ladder",
        lambda c: [c.python, str(c.root / "benchmarks" / "bench_ladder.py"), "--device", "cuda", "--repeats", "3"],
        55,
        parse_ladder,
        env={"COURSE_QUICK": "0", **OFFLINE},
        in_scratch=True,
    ),
    Phase(
        "ddp",  # 4 runs (2 rounds): each starts its processes (a few seconds), then 200 steps of a fraction of a second
        lambda c: [c.python, str(c.root / "benchmarks" / "bench_ddp.py"), *DDP_ARGS],
        45,
        parse_ddp,
        in_scratch=True,
        min_gpus=2,
    ),
]


# --- running -----------------------------------------------------------------------------------------


def detect() -> tuple[Machine | None, str]:
    """(the machine, "") when CUDA can use a GPU here, else (None, why not)."""
    try:
        import torch
    except Exception as err:  # not installed, or a broken install
        return None, f"PyTorch is not usable here ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        why = "a CPU-only build of PyTorch" if torch.version.cuda is None else "torch.cuda.is_available() is False"
        return None, f"no CUDA GPU here ({why}; python -m helpers.doctor says more)"
    gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return Machine(gpus, nvidia_driver(), torch.__version__), ""


def nvidia_driver() -> str | None:
    """The NVIDIA driver version nvidia-smi reports, None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split()[0] if out.split() else None


def missing_dev_packages(root: Path = ROOT) -> list[str]:
    """The dev extra's packages (pyproject.toml, with the extras it names of the course itself) not installed."""
    with open(root / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    extras, wanted = project["optional-dependencies"], list(project["optional-dependencies"]["dev"])
    missing = []
    while wanted:
        requirement = wanted.pop(0)
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        if name == project["name"]:  # "pytorch-cpu-gpu-course[lab]": that extra's packages
            wanted += [r for extra in re.findall(r"\w+", requirement.split("[", 1)[1]) for r in extras[extra]]
            continue
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return sorted(missing)


def run_command(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code, stdout and stderr together); exit code None when it ran past ``timeout_s`` (then killed)."""
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
        errors="replace", start_new_session=True,  # its own process group: a timeout ends all it started there
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (AttributeError, ProcessLookupError):
            proc.kill()
        try:  # Jupyter kernels run in sessions of their own and end when they see their parent gone
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            output = "(its output could not be read: a process it started still holds it open)\n"
        return None, output


def tail(text: str, lines: int = 25) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def run_phase(phase: Phase, context: Context, timeout_s: float, log_dir: Path) -> Result:
    env = {**os.environ, **phase.env}
    cwd = context.scratch if phase.in_scratch else context.root
    start = _now()
    code, output = run_command(phase.command(context), env, cwd, timeout_s)
    seconds = _now() - start
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{phase.name}.log").write_text(output, encoding="utf-8")
    if code is None:
        return Result(phase.name, "timed out", seconds, message=f"still running after {timeout_s:.0f} s, stopped")
    try:
        fields = phase.parse(output)
    except PhaseError as err:
        fields = err.args[1] if len(err.args) > 1 else {}
        return Result(phase.name, "failed", seconds, fields, f"{err.args[0]} (exit code {code})")
    if code != 0:
        return Result(phase.name, "failed", seconds, fields, f"exit code {code}")
    return Result(phase.name, "passed", seconds, fields)


def results_row(machine: Machine, results: list[Result], date: datetime.date | None = None) -> str:
    """One markdown table row with BENCHMARKS.md's GPU check COLUMNS."""
    fields = {"date": (date or datetime.date.today()).isoformat(), "GPU": machine.gpu_text(),
              "driver": machine.driver or "unknown", "torch": machine.torch}  # fmt: skip
    for result in results:
        fields.update(result.fields)
    return "| " + " | ".join(fields.get(column, "not run").replace("|", "/") for column in COLUMNS) + " |"


def check(machine: Machine, context: Context, phases: list[Phase], log_dir: Path, deadline_s: float) -> list[Result]:
    results = []
    missing = missing_dev_packages(context.root) if any(p.needs_dev for p in phases) else []
    start = _now()
    for i, phase in enumerate(phases, 1):
        print(f"[{i}/{len(phases)}] {phase.name}", flush=True)
        left = deadline_s - (_now() - start)
        if len(machine.gpus) < phase.min_gpus:
            result = Result(phase.name, "skipped", message=f"needs {phase.min_gpus} GPUs, this machine has "
                            f"{len(machine.gpus)}")  # fmt: skip
        elif phase.needs_dev and missing:
            result = Result(phase.name, "not run", message=f"needs {', '.join(missing)}, not installed here. "
                            f"Install them with: {INSTALL}")  # fmt: skip
        elif left < 5:
            result = Result(phase.name, "not run", message=f"the check's {deadline_s:.0f} s are spent")
        else:
            result = run_phase(phase, context, min(phase.timeout_s, left), log_dir)
            if not result.ok:
                print(tail((log_dir / f"{phase.name}.log").read_text(encoding="utf-8")))
        took = f" in {result.seconds:.0f} s" if result.seconds else ""
        details = ", ".join(f"{k}: {v}" for k, v in result.fields.items())
        print(f"    {result.status.upper()}{took}" + (f": {result.message}" if result.message else "")
              + (f" ({details})" if details else ""), flush=True)  # fmt: skip
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[p.name for p in PHASES], help="run only these phases")
    args = parser.parse_args(argv)

    machine, why_not = detect()
    if machine is None:
        print(f"GPU check: {why_not}. Nothing was run; run this on a machine with an NVIDIA GPU.")
        return 0
    phases = [p for p in PHASES if not args.only or p.name in args.only]
    print(f"GPU check on {machine.gpu_text()}, driver {machine.driver or 'unknown'}, torch {machine.torch}: "
          f"{', '.join(p.name for p in phases)} (at most {DEADLINE_S // 60} min {DEADLINE_S % 60} s)")  # fmt: skip
    log_dir = ROOT / LOG_DIR
    start = _now()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as scratch:
        results = check(machine, Context(ROOT, Path(scratch)), phases, log_dir, DEADLINE_S)
    failed = [r for r in results if r.status not in ("passed", "skipped")]
    print(f"\nDone in {_now() - start:.0f} s; full output of each phase in {LOG_DIR.as_posix()}/.")
    print("Results row for BENCHMARKS.md's GPU check table:\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print(results_row(machine, results))
    if failed:
        print(f"\nFAILED: {', '.join(f'{r.phase} ({r.status})' for r in failed)}")
        return 1
    print("\nAll phases passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
