"""The GPU check in one command: ``python tools/gpu_check.py``.

On a machine with a CUDA GPU it runs, one phase after another, each in its own process with a timeout:

1. the doctor (``python -m helpers doctor``), which must say the course will use the GPU;
2. the whole suite with ``COURSE_DEVICE=cuda`` against the same stored outputs (``pytest``);
3. the training benchmark on ``cuda`` (``benchmarks/bench_training.py``);
4. notebook 05's training (``python -m helpers train-tudui``) for a few full-mode epochs on the
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

``python tools/gpu_check.py --record`` measures the figures the notebooks show where there is no GPU
(``helpers/course/gpu_figures.py``): it runs notebooks 06 and 07 on the GPU in quick mode and reads what their
GPU-only cells printed (``FIGURES``), runs the speed ladder and, with 2 GPUs, DDP, and writes each figure
as a record with the GPU, driver, torch, CUDA version, date and command into ``helpers/course/gpu_figures.json``
(a new record replaces the one with the same key and GPU). Without a GPU it writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
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

from helpers.course import gpu_figures

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
    cuda: str | None = None  # torch.version.cuda

    def gpu_text(self, count: int | None = None) -> str:
        """The GPUs (the first ``count`` of them) as '2x NVIDIA H200' or 'NVIDIA A100, NVIDIA T4'."""
        gpus = self.gpus[:count]
        names = sorted(set(gpus))
        return ", ".join(f"{gpus.count(n)}x {n}" if gpus.count(n) > 1 else n for n in names)


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
    needs: tuple[str, ...] = ()  # or needs these packages only
    min_gpus: int = 1
    record: Callable[[str], list[dict]] | None = None  # output -> figures for --record (key, what, values, printed)


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
    """What ``python -m helpers train-tudui`` reports: device, seconds, epochs, accuracy, data (strings)."""
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


# --- what --record keeps of each phase's output ---------------------------------------------------------


def ladder_record(output: str) -> list[dict]:
    """The ladder's table and best rung as bench_ladder.py printed them."""
    best = re.search(r"^best rung: (.+), ([\d.]+)x the article's loop$", output, re.MULTILINE)
    if not best:
        raise PhaseError("the speed ladder printed no best rung")
    kept, in_table = [], False
    for line in output.splitlines():
        in_table = line.startswith("rung ") or (in_table and bool(line.strip()))
        if in_table or re.match(r"(device: |accuracy: |compile: |best rung: |  \()", line):
            kept.append(line.rstrip())
    what = "notebook 06, section 5: the speed ladder on the GPU, each rung against the article's loop"
    values = {"best_rung": best.group(1), "best_ratio": float(best.group(2))}
    return [{"key": "speed_ladder", "what": what, "values": values, "printed": "\n".join(kept)}]


def ddp_record(output: str) -> list[dict]:
    """DDP on 2 GPUs against 1 as bench_ddp.py printed it."""
    scaling = re.search(r"^2 GPUs / 1 GPU: ([\d.]+)x", output, re.MULTILINE)
    rates = re.findall(r"^(?:2 GPUs, one process each|1 GPU, one process).*?:\s+(\d+) images/s$", output, re.MULTILINE)
    if not scaling or len(rates) != 2:
        raise PhaseError("the DDP benchmark printed no scaling")
    kept = [line.rstrip() for line in output.splitlines()
            if re.match(r"(Tudui, batch |2 GPUs, one process|1 GPU, one process|2 GPUs / 1 GPU: )", line)]  # fmt: skip
    what = "notebook 08: DDP on 2 GPUs (one process each, NCCL) against 1 GPU, Tudui, batch 256 per GPU"
    values = {"ratio": float(scaling.group(1)), "images_per_s_2_gpus": int(rates[0]),
              "images_per_s_1_gpu": int(rates[1])}  # fmt: skip
    return [{"key": "ddp_2_gpus", "what": what, "values": values, "printed": "\n".join(kept), "gpus": 2}]


@dataclass(frozen=True)
class Figure:
    """A figure a notebook's GPU-only cell prints, recorded by running that notebook on the GPU."""

    key: str  # what the notebook's else-branch passes to show_recorded()
    what: str
    notebook: str  # under notebooks/
    cell_id: str  # the cell whose GPU branch prints the figure
    lines: str  # regex: the lines of that cell's output that are the figure
    values: str  # an expression evaluated in the notebook's kernel after the run: the numbers


FIGURES = [
    Figure("matmul_cuda_events", "notebook 06, section 1: a 512x512 float32 matmul timed with CUDA events (mean of 10)",
           "06_speed.ipynb", "478e2037", r"^CUDA events: ", "{'ms_per_matmul': gpu_ms}"),
    Figure("host_to_device_copies", "notebook 06, section 2: pageable, pinned and pinned-on-the-fly host-to-device "
           "copies of 4 KB to 16 MB (quick mode)", "06_speed.ipynb", "6d4b1767", r" -> GPU: ",
           "{'bytes': sizes, 'gb_per_s': rates}"),
    Figure("forward_memory", "notebook 07, section 1: what Tudui's forward pass on a batch of 64 allocated on the GPU, "
           "against the count made on the CPU", "07_memory.ipynb", "1e0b5192",
           r"^(allocated by the forward pass|peak of forward \+ backward): ",
           "{'forward_allocated_mib': gpu_activations / MiB, 'counted_on_cpu_mib': activations / MiB}"),
    Figure("caching_allocator", "notebook 07, section 3: allocated and reserved while holding 256 MiB, after del "
           "and after empty_cache()", "07_memory.ipynb", "744ff506", r"^(holding 256 MiB|after del|after empty_cache)",
           "{'bytes_allocated_reserved': {'held': held, 'after_del': after_del, 'after_empty_cache': after_empty}}"),
    Figure("expandable_segments", "notebook 07, section 3: peak reserved and peak allocated for growing allocations, "
           "with and without expandable_segments", "07_memory.ipynb", "fee5ff7d", r"^expandable_segments:",
           "{'peak_reserved_bytes': segments}"),
]  # fmt: skip
FIGURE_LINE = "figure: "  # how --measure-figures prints each figure it read: this prefix, then JSON
PROBE = """
import json as _json
def _figure_value(expression):
    try:
        return eval(expression, globals())
    except Exception:
        return None
print({prefix!r} + _json.dumps({{k: _figure_value(e) for k, e in {values!r}.items()}}, default=float))
"""


def measure_figures(figures: list[Figure], notebooks: Path, timeout_s: int = 600) -> dict[str, dict]:
    """Run the notebooks the figures come from (on this machine's device) and read each figure: {key: figure}.

    A figure whose cell printed none of its lines, or whose values could not be read, is left out.
    """
    import nbformat
    from nbclient import NotebookClient

    found = {}
    for name in dict.fromkeys(f.notebook for f in figures):
        wanted = [f for f in figures if f.notebook == name]
        nb = nbformat.read(notebooks / name, as_version=4)
        prefix = "values of this run: "
        nb.cells.append(
            nbformat.v4.new_code_cell(PROBE.format(prefix=prefix, values={f.key: f.values for f in wanted}))
        )
        client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                                record_timing=False, resources={"metadata": {"path": str(notebooks)}})  # fmt: skip
        client.execute()
        probe_out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
        values = json.loads(probe_out.split(prefix, 1)[1]) if prefix in probe_out else {}
        for figure in wanted:
            cell = next(c for c in nb.cells if c.get("id") == figure.cell_id)
            text = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
            printed = [line.rstrip() for line in text.splitlines() if re.search(figure.lines, line)]
            if printed and values.get(figure.key) is not None:
                found[figure.key] = {"key": figure.key, "what": figure.what, "values": values[figure.key],
                                     "printed": "\n".join(printed)}  # fmt: skip
    return found


def figure_records(output: str) -> list[dict]:
    """The figures ``--measure-figures`` printed, one JSON line each."""
    found = [json.loads(line[len(FIGURE_LINE) :]) for line in output.splitlines() if line.startswith(FIGURE_LINE)]
    if not found:
        raise PhaseError("no figure was read from the notebooks")
    return found


def parse_figures(output: str) -> dict[str, str]:
    found = figure_records(output)
    missing = [f.key for f in FIGURES if f.key not in {r["key"] for r in found}]
    fields = {"figures": f"{len(found)} of {len(FIGURES)}"}
    if missing:
        raise PhaseError(f"not read from the notebooks: {', '.join(missing)}", fields)
    return fields


# --- the phases --------------------------------------------------------------------------------------

PHASES: list[Phase] = [
    Phase("doctor", lambda c: [c.python, "-m", "helpers", "doctor"], 25, parse_doctor, env={"COURSE_DEVICE": "cuda"}),
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
        lambda c: [c.python, "-m", "helpers", "train-tudui", *TRAIN_ARGS],
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
        record=ladder_record,
    ),
    Phase(
        "ddp",  # 4 runs (2 rounds): each starts its processes (a few seconds), then 200 steps of a fraction of a second
        lambda c: [c.python, str(c.root / "benchmarks" / "bench_ddp.py"), *DDP_ARGS],
        45,
        parse_ddp,
        in_scratch=True,
        min_gpus=2,
        record=ddp_record,
    ),
]
# Only with --record: notebooks 06 and 07 run on the GPU (quick mode, as the suite runs them), their figures read.
FIGURES_PHASE = Phase(
    "figures",
    lambda c: [c.python, str(c.root / "tools" / "gpu_check.py"), "--measure-figures"],
    240,
    parse_figures,
    env={"COURSE_DEVICE": "cuda", "COURSE_QUICK": "1", **OFFLINE},
    needs=("nbclient", "nbformat", "ipykernel"),  # what runs a notebook
    record=figure_records,
)


# --- running -----------------------------------------------------------------------------------------


def detect() -> tuple[Machine | None, str]:
    """(the machine, "") when CUDA can use a GPU here, else (None, why not)."""
    try:
        import torch
    except Exception as err:  # not installed, or a broken install
        return None, f"PyTorch is not usable here ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        why = "a CPU-only build of PyTorch" if torch.version.cuda is None else "torch.cuda.is_available() is False"
        return None, f"no CUDA GPU here ({why}; python -m helpers doctor says more)"
    gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return Machine(gpus, nvidia_driver(), torch.__version__, torch.version.cuda), ""


def nvidia_driver() -> str | None:
    """The NVIDIA driver version nvidia-smi reports, None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split()[0] if out.split() else None


def not_installed(names) -> list[str]:
    missing = []
    for name in names:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


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
        missing += not_installed([name])
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
    dev_missing = missing_dev_packages(context.root) if any(p.needs_dev for p in phases) else []
    start = _now()
    for i, phase in enumerate(phases, 1):
        print(f"[{i}/{len(phases)}] {phase.name}", flush=True)
        left = deadline_s - (_now() - start)
        if len(machine.gpus) < phase.min_gpus:
            result = Result(phase.name, "skipped", message=f"needs {phase.min_gpus} GPUs, this machine has "
                            f"{len(machine.gpus)}")  # fmt: skip
        elif missing := dev_missing if phase.needs_dev else not_installed(phase.needs):
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


def display_command(phase: Phase) -> str:
    """The phase's command as a reader would type it in the repository."""
    return " ".join(phase.command(Context(Path("."), Path("."), "python")))


def stamp(figure: dict, machine: Machine, command: str, date: datetime.date | None = None) -> dict:
    """A figure a phase measured, as a record of the data file: where, with what and when it was measured."""
    figure = dict(figure)
    gpus = figure.pop("gpus", 1)
    return {**figure, "gpu": machine.gpu_text(gpus), "driver": machine.driver or "unknown", "torch": machine.torch,
            "cuda": machine.cuda or "unknown", "date": (date or datetime.date.today()).isoformat(),
            "command": command}  # fmt: skip


def merge_records(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with ``new`` added; a new record replaces the old one with the same key and GPU."""
    replaced = {(r["key"], r["gpu"]) for r in new}
    kept = [r for r in old if (r["key"], r["gpu"]) not in replaced]
    return sorted(kept + new, key=lambda r: (r["key"], r["gpu"]))


def write_records(path: Path, records: list[dict]) -> None:
    """Merge ``records`` into the data file at ``path`` (created if missing)."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"what": "Figures measured on a GPU."}
    data["records"] = merge_records(data.get("records", []), records)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def records_of(machine: Machine, phases: list[Phase], results: list[Result], log_dir: Path) -> list[dict]:
    """The records the phases that ran measured (a phase that failed may still have measured its figure)."""
    records = []
    for phase, result in zip(phases, results, strict=True):
        if phase.record is None or result.status not in ("passed", "failed"):
            continue
        try:
            figures = phase.record((log_dir / f"{phase.name}.log").read_text(encoding="utf-8"))
        except PhaseError as err:
            print(f"    {phase.name}: nothing to record ({err.args[0]})")
            continue
        command = gpu_figures.RECORD_COMMAND if phase is FIGURES_PHASE else display_command(phase)
        records += [stamp(figure, machine, command) for figure in figures]
    return records


def main_measure_figures() -> int:
    """``--measure-figures`` (the figures phase, in its own process): print each figure read, one JSON line each."""
    found = measure_figures(FIGURES, ROOT / "notebooks")
    for figure in found.values():
        print(FIGURE_LINE + json.dumps(figure))
    return 0 if len(found) == len(FIGURES) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gpu_check.py", description=__doc__.split("\n\n")[0])
    names = [p.name for p in [*PHASES, FIGURES_PHASE]]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these phases")
    parser.add_argument("--record", nargs="?", const=gpu_figures.FIGURES_FILE, type=Path, metavar="FILE",
                        help="measure the figures the notebooks show without a GPU (the figures, ladder and ddp "
                        "phases) and write them to FILE (default: helpers/course/gpu_figures.json)")  # fmt: skip
    parser.add_argument("--measure-figures", action="store_true", help=argparse.SUPPRESS)  # the figures phase
    args = parser.parse_args(argv)
    if args.measure_figures:
        return main_measure_figures()
    if args.only and FIGURES_PHASE.name in args.only and not args.record:
        parser.error(f"the {FIGURES_PHASE.name} phase only records: add --record")

    machine, why_not = detect()
    if machine is None:
        nothing = "Nothing was run" + (" and nothing recorded" if args.record else "")
        print(f"GPU check: {why_not}. {nothing}; run this on a machine with an NVIDIA GPU.")
        return 0
    candidates = [FIGURES_PHASE, *(p for p in PHASES if p.record)] if args.record else PHASES
    phases = [p for p in candidates if not args.only or p.name in args.only]
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
    if args.record:
        records = records_of(machine, phases, results, log_dir)
        if records:
            write_records(args.record, records)
        print(f"\nRecorded {len(records)} figure(s) in {args.record}: {', '.join(r['key'] for r in records) or '-'}")
    if failed:
        print(f"\nFAILED: {', '.join(f'{r.phase} ({r.status})' for r in failed)}")
        return 1
    print("\nAll phases passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
