"""tools/gpu_check.py on any machine: the no-GPU path for real, the phases on a simulated GPU machine.

On the simulated machine every subprocess is stubbed: each phase gets the output its real command
prints (the doctor's from its own renderer, the benchmark's and the training's from quick CPU runs).
"""

import datetime
import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from helpers.clinic import doctor
from helpers.course import gpu_figures
from helpers.lesson import data as D
from tools import course
from tools import gpu_check as G

H200 = G.Machine(("NVIDIA H200",), "580.65.06", "2.14.1+cu130", "13.0")
GPU_FACTS = doctor.Facts(
    torch_version="2.14.1+cu130",
    torchvision_version="0.29.1+cu130",
    cuda_build="13.0",
    cuda_available=True,
    gpus=[doctor.Gpu(0, "NVIDIA H200", 139.8, "9.0")],
    nvidia_smi="ok",
    driver_version="580.65.06",
    smi_gpus=["NVIDIA H200"],
    course_device="cuda:0",
    course_device_detail="cuda:0 (NVIDIA H200, 139.8 GiB, compute capability 9.0)",
    available_devices=["cuda:0", "cpu"],
)
SUITE_OK = "........ [100%]\n641 passed, 1 skipped in 98.12s (0:01:38)\n"
BENCH_OK = """\
variant                       images/s
course loop                      41234
bare loop                        41500
tensor on device                 41012
DataLoader + ToTensor             3120

(a) course loop / bare loop:             0.994  (OK)
(b) tensor on device / DataLoader:       13.14x
"""
TRAIN_OK = """\
data: synthetic CIFAR-shaped data (fallback, not CIFAR-10): 3x32x32 images, 10 classes, generated from a fixed seed
device: cuda:0
epoch 3: train loss 1.020, test loss 0.990, test accuracy 71.3% on synthetic CIFAR-shaped data (fallback, not CIFAR-10)
done in 21.4 s: epoch 3: train loss 1.020, test loss 0.990, test accuracy 71.3% on synthetic CIFAR-shaped data \
(fallback, not CIFAR-10)
These are results on synthetic data, not CIFAR-10 results.
"""
LADDER_OK = """\
rung                images/s  x article  accuracy  note
article loop            3100      1.00x     31.0%
compile                44020     14.20x     30.2%
best rung: compile, 14.20x the article's loop
"""
DDP_OK = """\
Tudui, batch 256 per GPU, 200 steps per run, 2 round(s); load average at the end 1.20
2 GPUs, one process each (DDP, NCCL):    181230 images/s
1 GPU, one process:                       95800 images/s
2 GPUs / 1 GPU: 1.89x (median of the ratios within each round; goal >= 1.80x: OK)
"""
H200_X2 = replace(H200, gpus=("NVIDIA H200",) * 2)
FIGURE_VALUES = {"matmul_cuda_events": {"ms_per_matmul": 0.021}, "host_to_device_copies": {"bytes": [4096]},
                 "forward_memory": {"forward_allocated_mib": 3.3}, "caching_allocator": {"bytes": [1, 2]},
                 "expandable_segments": {"peak_reserved_bytes": {"expandable_segments:False": 7}}}  # fmt: skip
FIGURES_OK = "".join(
    G.FIGURE_LINE
    + json.dumps({"key": f.key, "what": f.what, "values": FIGURE_VALUES[f.key], "printed": f"{f.key} line"})
    + "\n"
    for f in G.FIGURES
)


def doctor_output(facts: doctor.Facts) -> str:
    return doctor.render(doctor.diagnose(facts)) + "\n"


class FakeRun:
    """Stands in for G.run_command: records each call, answers with the output the phase's command prints."""

    def __init__(self, **overrides):
        self.calls = []
        self.outputs = {"doctor": (0, doctor_output(GPU_FACTS)), "suite": (0, SUITE_OK),
                        "benchmark": (0, BENCH_OK), "training": (0, TRAIN_OK), "ladder": (0, LADDER_OK),
                        "ddp": (0, DDP_OK), "figures": (0, FIGURES_OK), **overrides}  # fmt: skip

    def __call__(self, command, env, cwd, timeout_s):
        text = " ".join(command[1:])
        name = next(n for n, key in [("figures", "--measure-figures"), ("doctor", "helpers doctor"),
                                     ("suite", "pytest"), ("benchmark", "bench_training"),
                                     ("training", "train-tudui"), ("ladder", "bench_ladder"),
                                     ("ddp", "bench_ddp"), ("extra", "extra")] if key in text)  # fmt: skip
        self.calls.append({"name": name, "command": command, "env": env, "cwd": cwd, "timeout_s": timeout_s})
        return self.outputs[name]


@pytest.fixture
def gpu_machine(monkeypatch, tmp_path):
    """A machine with one H200, phases stubbed, logs in tmp_path; yields the FakeRun."""
    fake = FakeRun()
    monkeypatch.setattr(G, "detect", lambda: (H200, ""))
    monkeypatch.setattr(G, "run_command", fake)
    monkeypatch.setattr(G, "missing_dev_packages", lambda root=None: [])
    monkeypatch.setattr(G, "LOG_DIR", tmp_path / "logs")
    return fake


def last_row_tail(fake: FakeRun) -> list[str]:
    """The DDP column as parse_ddp reads the DDP phase's output."""
    return [G.parse_ddp(fake.outputs["ddp"][1])["DDP 2 GPUs / 1 GPU"]]


def last_row(out: str) -> list[str]:
    row = [line for line in out.splitlines() if line.startswith("| ")][-1]
    return [cell.strip() for cell in row.strip("|").split("|")]


# --- no GPU ------------------------------------------------------------------------------------------


def test_without_a_gpu_nothing_runs_and_it_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(G, "detect", lambda: (None, "no CUDA GPU here (a CPU-only build of PyTorch)"))
    monkeypatch.setattr(G, "run_command", lambda *a: pytest.fail("ran a phase without a GPU"))
    assert G.main([]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU here" in out and "Nothing was run" in out


def test_detect_names_the_gpus_and_the_driver(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"][i])
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    smi = subprocess.CompletedProcess([], 0, stdout="580.65.06\n580.65.06\n")
    monkeypatch.setattr(G.subprocess, "run", lambda *a, **k: smi)
    machine, why = G.detect()
    gpus = ("NVIDIA H200", "NVIDIA A100-SXM4-80GB")
    assert why == "" and machine == G.Machine(gpus, "580.65.06", "2.14.1+cu130", "13.0")
    assert machine.gpu_text() == "NVIDIA A100-SXM4-80GB, NVIDIA H200"

    def no_smi(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(G.subprocess, "run", no_smi)  # containers with CUDA but no nvidia-smi
    assert G.detect()[0].driver is None


@pytest.mark.parametrize("build, why", [(None, "a CPU-only build"), ("13.0", "torch.cuda.is_available() is False")])
def test_detect_without_a_usable_gpu(monkeypatch, build, why):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", build)
    machine, text = G.detect()
    assert machine is None and why in text and "python -m helpers doctor" in text


def test_the_command_itself_without_a_visible_gpu():
    """``python tools/gpu_check.py`` for real, CUDA hidden: exit 0, nothing run (safe on a GPU machine too)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "tools/gpu_check.py"], cwd=course.ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Nothing was run" in result.stdout and "[1/" not in result.stdout


# --- the phases on a simulated GPU machine -------------------------------------------------------------


def test_all_phases_pass_and_print_the_row(gpu_machine, capsys):
    assert G.main([]) == 0
    out = capsys.readouterr().out
    assert [c["name"] for c in gpu_machine.calls] == ["doctor", "suite", "benchmark", "training", "ladder"]
    assert "All phases passed." in out and "FAILED" not in out
    assert "| " + " | ".join(G.COLUMNS) + " |" in out
    today = datetime.date.today().isoformat()
    assert last_row(out) == [
        today,
        "NVIDIA H200",
        "580.65.06",
        "2.14.1+cu130",
        "641 / 0",
        "41234",
        "0.994",
        "14.20x (compile)",
        "not run",
    ]
    assert "3 epochs in 21 s, test accuracy 71.3%" in out
    assert "needs 2 GPUs, this machine has 1" in out, "one GPU: the DDP phase is skipped"


def test_two_gpus_run_the_ddp_phase_and_report_the_scaling(gpu_machine, monkeypatch, capsys):
    monkeypatch.setattr(G, "detect", lambda: (H200_X2, ""))
    assert G.main([]) == 0
    call = gpu_machine.calls[-1]
    assert call["name"] == "ddp" and call["command"][-len(G.DDP_ARGS) :] == G.DDP_ARGS
    assert call["cwd"] != G.ROOT
    assert last_row(capsys.readouterr().out)[1:2] + last_row_tail(gpu_machine) == ["2x NVIDIA H200", "1.89x"]
    gpu_machine.outputs["ddp"] = (0, DDP_OK.replace("1.89x", "1.52x").replace(": OK)", ": BELOW 1.80x)"))
    assert G.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED: ddp (failed)" in out and "scales too little: 1.52x" in out and last_row(out)[-1] == "1.52x"


def test_phases_run_on_cuda_in_the_right_mode_and_place(gpu_machine):
    G.main([])
    calls = {c["name"]: c for c in gpu_machine.calls}
    assert calls["suite"]["env"]["COURSE_DEVICE"] == "cuda" and calls["suite"]["env"]["COURSE_QUICK"] == "1"
    assert calls["suite"]["cwd"] == G.ROOT, "the suite checks the repository's stored outputs"
    for name in ("benchmark", "training", "ladder"):
        call = calls[name]
        assert call["command"][call["command"].index("--device") + 1] == "cuda"
        assert call["env"]["COURSE_QUICK"] == "0", "full mode"
        assert call["env"]["https_proxy"] == G.CLOSED_PORT, "offline: the synthetic fallback, no download"
        assert call["cwd"] != G.ROOT, "what it writes goes to a scratch folder"
    assert calls["training"]["command"][calls["training"]["command"].index("--epochs") + 1] == str(G.TRAIN_EPOCHS)
    assert sum(c["timeout_s"] for c in gpu_machine.calls) <= G.DEADLINE_S


def test_each_phase_log_is_kept(gpu_machine):
    G.main([])
    assert (G.LOG_DIR / "suite.log").read_text() == SUITE_OK


def test_failing_tests_fail_the_check_and_show_in_the_row(gpu_machine, capsys):
    gpu_machine.outputs["suite"] = (1, "F.....\nFAILED tests/test_x.py::t - boom\n2 failed, 639 passed in 99.0s\n")
    assert G.main([]) == 1
    out = capsys.readouterr().out
    assert last_row(out)[4] == "639 / 2"
    assert "FAILED: suite (failed)" in out
    assert "boom" in out, "the failing phase's output tail is shown"
    assert [c["name"] for c in gpu_machine.calls][-1] == "ladder", "the other phases still run"


@pytest.mark.parametrize(
    "phase, outcome",
    [
        ("doctor", (0, doctor_output(replace(GPU_FACTS, course_device="cpu", course_device_detail="cpu")))),
        ("doctor", (1, doctor_output(GPU_FACTS))),
        ("suite", (3, "ERROR: usage: pytest [options]\n")),
        ("suite", (None, "....")),  # timed out
        ("benchmark", (1, BENCH_OK.replace("0.994  (OK)", "0.900  (BELOW 0.95)"))),
        ("benchmark", (1, "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")),
        ("training", (0, TRAIN_OK.replace("device: cuda:0", "device: cpu"))),
        ("training", (130, TRAIN_OK.split("done in")[0])),
    ],
)
def test_any_failure_exits_1(gpu_machine, capsys, phase, outcome):
    gpu_machine.outputs[phase] = outcome
    assert G.main([]) == 1
    out = capsys.readouterr().out
    assert f"FAILED: {phase} (" in out


def test_timeout_is_reported(gpu_machine, capsys):
    gpu_machine.outputs["suite"] = (None, "....")
    G.main([])
    assert "TIMED OUT" in capsys.readouterr().out


def test_missing_dev_extra_is_named_with_the_install_command(gpu_machine, monkeypatch, capsys):
    monkeypatch.setattr(G, "missing_dev_packages", lambda root=None: ["ipykernel", "nbval"])
    assert G.main([]) == 1
    out = capsys.readouterr().out
    assert "needs ipykernel, nbval, not installed here" in out and 'pip install -e ".[dev]"' in out
    assert [c["name"] for c in gpu_machine.calls] == ["doctor", "benchmark", "training", "ladder"]
    assert last_row(out)[4] == "not run" and last_row(out)[5] == "41234"


def test_missing_dev_packages_reads_the_dev_extra(monkeypatch):
    from importlib import metadata

    def version(name):
        if name in ("nbval", "ipykernel"):  # the GPU machine's Python: pytest, but no Jupyter (ipykernel: via lab)
            raise metadata.PackageNotFoundError(name)
        return "1.0"  # every other package is there, whatever this machine has

    monkeypatch.setattr(metadata, "version", version)
    assert G.missing_dev_packages() == ["ipykernel", "nbval"]
    assert G.not_installed(["nbclient", "ipykernel"]) == ["ipykernel"]  # what the figures phase checks


def test_the_deadline_cuts_timeouts_and_stops_starting_phases(gpu_machine, monkeypatch, capsys):
    clock = {"t": 0.0}
    monkeypatch.setattr(G, "_now", lambda: clock["t"])

    def slow(command, env, cwd, timeout_s):
        clock["t"] += timeout_s if "pytest" in command else 10
        return gpu_machine(command, env, cwd, timeout_s)

    monkeypatch.setattr(G, "run_command", slow)
    monkeypatch.setattr(G, "DEADLINE_S", 200)
    assert G.main([]) == 1
    timeouts = {c["name"]: c["timeout_s"] for c in gpu_machine.calls}
    assert timeouts["suite"] == 190, "the suite gets what is left of the deadline"
    assert "benchmark" not in timeouts and "the check's 200 s are spent" in capsys.readouterr().out


def test_phase_list_is_extensible_and_min_gpus_skips(gpu_machine, monkeypatch, capsys):
    extra = G.Phase("extra", lambda c: [c.python, "extra"], 10, lambda out: {}, min_gpus=2)
    monkeypatch.setattr(G, "PHASES", [*G.PHASES, extra])
    gpu_machine.outputs["extra"] = (0, "")
    assert G.main([]) == 0, "a phase for more GPUs than the machine has is skipped, not failed"
    assert "SKIPPED" in capsys.readouterr().out and "extra" not in [c["name"] for c in gpu_machine.calls]
    monkeypatch.setattr(G, "detect", lambda: (H200_X2, ""))
    assert G.main([]) == 0
    assert gpu_machine.calls[-1]["name"] == "extra"


def test_only_runs_the_named_phases(gpu_machine, capsys):
    assert G.main(["--only", "benchmark"]) == 0
    assert [c["name"] for c in gpu_machine.calls] == ["benchmark"]
    assert last_row(capsys.readouterr().out)[4:] == ["not run", "41234", "0.994", "not run", "not run"]


def test_total_timeouts_fit_in_8_minutes():
    assert sum(p.timeout_s for p in G.PHASES) <= G.DEADLINE_S < 13 * 60


def test_run_command_for_real(tmp_path):
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr); sys.exit(3)"
    assert G.run_command([sys.executable, "-c", code], dict(os.environ), tmp_path, 60) == (3, "out\nerr\n")
    slow = "import time; print('started', flush=True); time.sleep(60)"
    start = G._now()
    assert G.run_command([sys.executable, "-c", slow], dict(os.environ), tmp_path, 3) == (None, "started\n")
    assert G._now() - start < 30


# --- formatting and parsing ----------------------------------------------------------------------------


def test_row_formatting():
    bench = {"img/s (course loop)": "900", "course / bare loop": "0.900"}
    results = [G.Result("suite", "passed", 1.0, {"tests passed / failed": "641 / 0"}),
               G.Result("benchmark", "failed", 1.0, bench)]  # fmt: skip
    machine = G.Machine(("NVIDIA A100|80GB", "NVIDIA A100|80GB", "NVIDIA T4"), None, "2.7.1+cu126")
    row = G.results_row(machine, results, datetime.date(2026, 12, 1))
    machine_cells = "| 2026-12-01 | 2x NVIDIA A100/80GB, NVIDIA T4 | unknown | 2.7.1+cu126 |"
    assert row == machine_cells + " 641 / 0 | 900 | 0.900 | not run | not run |"


@pytest.mark.parametrize(
    "tail, counts",
    [
        ("641 passed in 98.12s (0:01:38)", {"passed": 641}),
        ("===== 2 failed, 639 passed, 1 skipped, 3 warnings in 99.00s =====", {"failed": 2, "passed": 639,
                                                                               "skipped": 1, "warning": 3}),
        ("1 error in 0.52s", {"error": 1}),
        ("3 passed, 2 errors, 1 xfailed in 1.0s", {"passed": 3, "error": 2, "xfailed": 1}),
    ],
)  # fmt: skip
def test_pytest_counts(tail, counts):
    assert G.pytest_counts("collected 641 items\n....\n" + tail + "\n") == counts


def test_pytest_without_summary_or_with_errors_fails():
    with pytest.raises(G.PhaseError, match="no pytest summary"):
        G.parse_pytest("ImportError while loading conftest\n")
    with pytest.raises(G.PhaseError, match="1 tests failed"):
        G.parse_pytest("5 passed, 1 error in 3.0s\n")
    with pytest.raises(G.PhaseError, match="no test passed"):
        G.parse_pytest("no tests ran in 0.01s\n641 deselected in 1.0s\n")


def test_doctor_output_on_a_gpu_and_a_cpu_machine():
    assert G.parse_doctor(doctor_output(GPU_FACTS)) == {}
    laptop = replace(GPU_FACTS, cuda_available=False, gpus=[], course_device="cpu", course_device_detail="cpu")
    with pytest.raises(G.PhaseError, match="CUDA GPU"):
        G.parse_doctor(doctor_output(laptop))


def test_real_benchmark_output_parses(monkeypatch, tmp_path, capsys):
    """The benchmark's own output (a quick CPU run) carries what the row needs."""
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    bench = course.load_benchmark("bench_training")
    ratios = iter([0.987, 1.21])  # (a), then (b): no timing, the real printing

    def measured(runs, n_images, device, repeats):
        return {name: 1000.0 + i for i, name in enumerate(runs)}, next(ratios)

    monkeypatch.setattr(bench, "interleaved", measured)
    bench.main(["--quick", "--device", "cpu"])
    out = capsys.readouterr().out
    assert G.parse_benchmark(out) == {"img/s (course loop)": "1000", "course / bare loop": "0.987"}
    with pytest.raises(G.PhaseError, match="too slow: 0.930"):
        G.parse_benchmark(out.replace("0.987  (OK)", "0.930  (BELOW 0.95)"))


def test_real_training_output_parses(monkeypatch, tmp_path, capsys):
    """train_tudui's own output (one quick CPU epoch) is read as the GPU check reads it."""
    from helpers.distributed import train_tudui

    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    assert train_tudui.main(["--quick", "--device", "cpu", "--epochs", "1", *G.TRAIN_ARGS[4:]]) == 0
    out = capsys.readouterr().out
    summary = G.training_summary(out)
    assert summary["device"] == "cpu" and summary["epochs"] == "1" and "synthetic" in summary["data"]
    with pytest.raises(G.PhaseError, match="ran on cpu, not on cuda"):
        G.parse_training(out)
    assert G.parse_training(TRAIN_OK) == {"training": "3 epochs in 21 s, test accuracy 71.3%"}


def test_benchmarks_gpu_check_table_has_the_rows_columns():
    benchmarks = (course.ROOT / "BENCHMARKS.md").read_text()
    assert "python tools/gpu_check.py" in benchmarks
    assert "| " + " | ".join(G.COLUMNS) + " |" in benchmarks


def test_real_ddp_benchmark_output_parses(monkeypatch, capsys):
    """bench_ddp.py --device cuda's own printing (the runs stubbed: no GPU here) is read as the GPU check reads it."""
    from helpers.lab.simulate import simulated_machine

    bench = course.load_benchmark("bench_ddp")
    runs = []

    def measured(ddp, steps, batch, device, nproc, threads, timeout):
        runs.append((ddp, steps, batch, device, nproc if ddp else 1))
        return 1900.0 if ddp else 1000.0

    monkeypatch.setattr(bench, "measure", measured)
    with simulated_machine(cuda=2):
        assert bench.main(G.DDP_ARGS) == 0
    ddp, one = (True, 200, 256, "cuda", 2), (False, 200, 256, "cuda", 1)  # 2 GPUs x 256 against 1 GPU x 256
    assert runs == [ddp, one, one, ddp], "2 rounds, the order alternating; 2 GPUs x 256 against 1 GPU x 256"
    out = capsys.readouterr().out
    assert G.parse_ddp(out) == {"DDP 2 GPUs / 1 GPU": "1.90x"}
    with pytest.raises(G.PhaseError, match="scales too little: 1.70x"):
        monkeypatch.setattr(bench, "measure", lambda ddp, *a: 1700.0 if ddp else 1000.0)
        with simulated_machine(cuda=2):
            bench.main(G.DDP_ARGS)
        G.parse_ddp(capsys.readouterr().out)


def test_the_ddp_benchmark_without_enough_gpus_says_so(capsys):
    from helpers.lab.simulate import simulated_machine

    bench = course.load_benchmark("bench_ddp")
    with simulated_machine(cuda=1), pytest.raises(SystemExit) as exit_info:
        bench.main(G.DDP_ARGS)
    assert exit_info.value.code == 2
    assert "needs 2 CUDA GPUs; this machine has 1" in capsys.readouterr().err


# --- --record: the figures the notebooks show without a GPU ---------------------------------------------


def read_records(path):
    return json.loads(path.read_text())["records"]


def test_record_without_a_gpu_writes_nothing_and_exits_0(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(G, "detect", lambda: (None, "no CUDA GPU here (a CPU-only build of PyTorch)"))
    monkeypatch.setattr(G, "run_command", lambda *a: pytest.fail("ran a phase without a GPU"))
    target = tmp_path / "figures.json"
    assert G.main(["--record", str(target)]) == 0
    assert not target.exists()
    assert "Nothing was run and nothing recorded" in capsys.readouterr().out


def test_record_runs_the_figure_phases_and_writes_every_field(gpu_machine, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(G, "detect", lambda: (H200_X2, ""))
    target = tmp_path / "figures.json"
    assert G.main(["--record", str(target)]) == 0
    assert [c["name"] for c in gpu_machine.calls] == ["figures", "ladder", "ddp"], "only the phases that record"
    figures_call = gpu_machine.calls[0]
    assert figures_call["env"]["COURSE_DEVICE"] == "cuda" and figures_call["env"]["COURSE_QUICK"] == "1"
    records = {r["key"]: r for r in read_records(target)}
    assert sorted(records) == sorted([f.key for f in G.FIGURES] + ["speed_ladder", "ddp_2_gpus"])
    today = datetime.date.today().isoformat()
    for record in records.values():
        assert set(gpu_figures.FIELDS) <= set(record), record
        assert (record["driver"], record["torch"], record["cuda"], record["date"]) == (
            "580.65.06", "2.14.1+cu130", "13.0", today)  # fmt: skip
    assert records["matmul_cuda_events"] == {**records["matmul_cuda_events"], "gpu": "NVIDIA H200",
                                             "values": {"ms_per_matmul": 0.021}, "printed": "matmul_cuda_events line",
                                             "command": "python tools/gpu_check.py --record"}  # fmt: skip
    assert records["ddp_2_gpus"]["gpu"] == "2x NVIDIA H200", "measured on 2 GPUs"
    assert records["ddp_2_gpus"]["values"] == {
        "ratio": 1.89,
        "images_per_s_2_gpus": 181230,
        "images_per_s_1_gpu": 95800,
    }
    assert records["ddp_2_gpus"]["command"] == "python benchmarks/bench_ddp.py " + " ".join(G.DDP_ARGS)
    assert records["speed_ladder"]["command"] == "python benchmarks/bench_ladder.py --device cuda --repeats 3"
    assert records["speed_ladder"]["values"] == {"best_rung": "compile", "best_ratio": 14.2}
    assert "Recorded 7 figure(s)" in capsys.readouterr().out


def test_record_on_one_gpu_skips_ddp_and_keeps_what_it_cannot_measure(gpu_machine, tmp_path):
    target = tmp_path / "figures.json"
    old_ddp = {"key": "ddp_2_gpus", "gpu": "2x NVIDIA H200", "date": "2026-11-01"}
    target.write_text(json.dumps({"what": "kept", "records": [old_ddp]}))
    assert G.main(["--record", str(target)]) == 0
    assert [c["name"] for c in gpu_machine.calls] == ["figures", "ladder"]
    data = json.loads(target.read_text())
    assert data["what"] == "kept" and old_ddp in data["records"], "a figure not measured now keeps its record"


def test_a_new_record_replaces_the_old_one_for_the_same_key_and_gpu(gpu_machine, tmp_path):
    target = tmp_path / "figures.json"
    old = [
        {"key": "speed_ladder", "gpu": "NVIDIA H200", "date": "2026-11-30", "values": {"best_ratio": 13.29}},
        {"key": "speed_ladder", "gpu": "Tesla T4", "date": "2026-11-30", "values": {"best_ratio": 5.0}},
        {"key": "matmul_cuda_events", "gpu": "Tesla T4", "date": "2026-11-30", "values": {"ms_per_matmul": 0.2}},
    ]
    target.write_text(json.dumps({"what": "figures", "records": old}))
    assert G.main(["--record", str(target), "--only", "ladder"]) == 0
    records = read_records(target)
    ladders = {r["gpu"]: r for r in records if r["key"] == "speed_ladder"}
    assert ladders["NVIDIA H200"]["values"]["best_ratio"] == 14.2, "the same key and GPU: replaced"
    assert ladders["Tesla T4"] == old[1] and old[2] in records, "another GPU's record, another key: kept"
    assert len(records) == 3
    merged = G.merge_records(old, [{"key": "speed_ladder", "gpu": "NVIDIA H200", "date": "2026-12-01"}])
    assert [(r["key"], r["gpu"], r["date"]) for r in merged] == [
        ("matmul_cuda_events", "Tesla T4", "2026-11-30"),
        ("speed_ladder", "NVIDIA H200", "2026-12-01"),
        ("speed_ladder", "Tesla T4", "2026-11-30"),
    ]


def test_a_failed_figure_phase_records_what_it_read_and_fails_the_check(gpu_machine, tmp_path, capsys):
    first = FIGURES_OK.splitlines()[0] + "\n"
    gpu_machine.outputs["figures"] = (1, first)
    target = tmp_path / "figures.json"
    assert G.main(["--record", str(target), "--only", "figures"]) == 1
    assert [r["key"] for r in read_records(target)] == [G.FIGURES[0].key]
    assert "not read from the notebooks: " + G.FIGURES[1].key in capsys.readouterr().out
    gpu_machine.outputs["figures"] = (1, "Traceback (most recent call last):\nImportError: nbclient\n")
    other = tmp_path / "other.json"
    assert G.main(["--record", str(other), "--only", "figures"]) == 1
    assert not other.exists(), "nothing measured: nothing written"


def test_the_figures_phase_only_runs_to_record(gpu_machine, capsys):
    with pytest.raises(SystemExit) as exit_info:
        G.main(["--only", "figures"])
    assert exit_info.value.code == 2 and "add --record" in capsys.readouterr().err
    assert gpu_machine.calls == []


def test_the_record_phases_fit_the_deadline():
    phases = [G.FIGURES_PHASE, *(p for p in G.PHASES if p.record)]
    assert [p.name for p in phases] == ["figures", "ladder", "ddp"]
    assert sum(p.timeout_s for p in phases) <= G.DEADLINE_S


LADDER_OUTPUT = """\
data: synthetic CIFAR-shaped data (fallback, not CIFAR-10)
device: cuda:0, torch 2.14.1+cu130, 16 CPU threads, 20 steps per run, 3 rounds after one warm-up run
/site-packages/torch/_inductor/utils.py:1: UserWarning: TensorFloat32 tensor cores available but not enabled

rung                images/s  x article  accuracy  note
article loop            3100      1.00x     31.0%
larger batch           41000     13.20x     30.2%
compile                    -          -         -  skipped: --no-compile

accuracy: test set, after 160 steps of each rung (same initial weights)
best rung: larger batch, 13.20x the article's loop
saved runs/bench_ladder_cuda.csv
"""


def test_the_ladder_record_keeps_the_table_and_the_best_rung():
    (record,) = G.ladder_record(LADDER_OUTPUT)
    assert record["key"] == "speed_ladder" and record["values"] == {"best_rung": "larger batch", "best_ratio": 13.2}
    lines = record["printed"].splitlines()
    assert lines[0].startswith("device: cuda:0") and lines[1].startswith("rung ") and len(lines) == 7
    assert lines[-1] == "best rung: larger batch, 13.20x the article's loop"
    assert not any(w in record["printed"] for w in ("UserWarning", "saved", "data:"))
    with pytest.raises(G.PhaseError, match="no best rung"):
        G.ladder_record(LADDER_OUTPUT.split("best rung")[0])


def test_the_ddp_record_keeps_the_measurement():
    (record,) = G.ddp_record(DDP_OK)
    assert record["printed"] == "\n".join(DDP_OK.splitlines()) and record["gpus"] == 2
    with pytest.raises(G.PhaseError, match="no scaling"):
        G.ddp_record("Tudui, batch 256 per GPU\n")


def test_measure_figures_reads_a_notebooks_printed_lines_and_values(tmp_path):
    """The figures phase's reading, for real on this CPU: a notebook run in a kernel, one cell's lines, its values."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import sys", id="setup"),
                             new_code_cell("ms = 0.25\nprint('before')\nprint(f'CUDA events: {ms} ms')\nprint('after')",
                                           id="timed"),
                             new_code_cell("print('no figure here')", id="silent")])  # fmt: skip
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "nb.ipynb")
    figures = [
        G.Figure("timed", "a time", "nb.ipynb", "timed", r"^CUDA events: ", "{'ms': ms, 'doubled': 2 * ms}"),
        G.Figure("silent", "nothing printed", "nb.ipynb", "silent", r"^CUDA events: ", "{'ms': ms}"),
        G.Figure("undefined", "no value", "nb.ipynb", "timed", r"^CUDA events: ", "{'x': not_defined}"),
    ]
    found = G.measure_figures(figures, tmp_path, timeout_s=120)
    assert found == {"timed": {"key": "timed", "what": "a time", "values": {"ms": 0.25, "doubled": 0.5},
                               "printed": "CUDA events: 0.25 ms"}}  # fmt: skip
    output = "".join(G.FIGURE_LINE + json.dumps(f) + "\n" for f in found.values())
    assert G.figure_records(output) == list(found.values())


def test_each_figure_comes_from_a_cell_that_shows_it_without_a_gpu():
    """Each figure's cell exists, defines the names its values read, and its else-branch shows the record."""
    for figure in G.FIGURES:
        nb = json.loads((course.NOTEBOOKS / figure.notebook).read_text())
        cells = {c.get("id"): "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"}
        assert figure.cell_id in cells, f"{figure.key}: no cell {figure.cell_id} in {figure.notebook}"
        source = cells[figure.cell_id]
        assert f'show_recorded("{figure.key}")' in source.split("else:", 1)[-1], figure.key
        code = "\n".join(cells.values())
        names = compile(figure.values, "<values>", "eval").co_names
        for name in names:
            assert re.search(rf"^\s*(\w+, )*{name}\b[^=\n]*=[^=]", code, re.MULTILINE), (figure.key, name)
