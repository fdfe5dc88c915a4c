"""The adversarial set (tests/fixtures/rehearse/adversarial, marked by hand in its manifest): idioms from PyTorch's
docs and issue threads, each rehearsed as the machine it is marked for. One child process rehearses them all
(``run_script`` in a loop), so the whole set costs one start of torch; a script that ends its process
(``except BaseException``) has a child of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from helpers.rehearse.__main__ import main
from helpers.rehearse.script_run import rehearse
from helpers.rehearse.static_check import read
from tools import course

HERE = course.ROOT / "tests" / "fixtures" / "rehearse"
ADVERSARIAL = HERE / "adversarial"
CHILD = """
import contextlib, io, json, sys
from helpers.rehearse.pretend_gpu import Machine
from helpers.rehearse.script_run import run_script
rows = []
for spec in sys.argv[1:]:
    path, machine = spec.rsplit("@", 1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = run_script(path, [], Machine.parse(machine), 2, 2, 60)
    rows.append({**json.loads(report.as_json()), "output": out.getvalue(), "cost": report.cost})
print("=== rows ===")
print(json.dumps(rows))
"""
# (script, machine): the exit code a real machine gives (0 runs, 1 fails), and the finding kind where it fails
CASES = {
    ("amp_gradscaler", "gpu"): (0, None),
    ("amp_cuda_everywhere", "gpu"): (0, None),
    ("compile_model", "gpu"): (0, None),
    ("set_default_device_linear", "gpu"): (0, None),
    ("set_default_device_linear", "mac"): (0, None),
    ("with_device_ok", "gpu"): (0, None),
    ("with_device_cpu_input", "gpu"): (1, "weights-input-devices"),
    ("cpu_generator_cuda_randn", "gpu"): (1, "generator-device"),
    ("cpu_generator_cuda_randn", "laptop"): (0, None),
    ("custom_backward_cpu_grad", "gpu"): (1, "mixed-devices"),
    ("stack_cuda_cpu_scalars", "gpu"): (1, "mixed-devices"),
    ("unguarded_synchronize", "gpu"): (0, None),
    ("unguarded_synchronize", "laptop"): (1, "no-gpu"),
    ("unguarded_synchronize", "mac"): (1, "no-gpu"),
    ("float64_factory", "mac"): (1, "mps-float64"),
    ("float64_double", "mac"): (1, "mps-float64"),
    ("pin_memory_unguarded", "laptop"): (1, "no-gpu"),
    ("isinstance_cuda_type", "gpu"): (0, None),
    ("events_guarded", "gpu"): (0, None),
    ("stream_guarded", "gpu"): (0, None),
    ("default_device_shuffle", "gpu"): (1, "generator-device"),
    ("default_tensor_type_guarded", "gpu"): (0, None),
    ("mps_memory_guarded", "mac"): (0, None),
    ("to_device_keyword", "gpu"): (0, None),
    ("memory_stats_guarded", "gpu"): (0, None),
    ("nonblocking_d2h", "gpu"): (0, None),
    ("format_tensor", "gpu"): (0, None),
    ("syntax_error", "gpu"): (1, "script-bug"),
    ("shape_bug", "gpu"): (1, "script-bug"),
    ("fork_worker_cuda", "gpu"): (1, "cuda-in-forked-worker"),
    ("fork_worker_cuda", "laptop"): (0, None),
    ("cuda_unguarded_device_count", "laptop"): (1, "no-gpu"),
    ("spawn_device_count", "mac"): (0, None),  # no process started: a note, exit 0 as on a Mac
    ("spawn_device_count", "laptop"): (0, None),
    ("spawn_cpu_fallback", "laptop"): (0, None),
    ("spawn_cpu_fallback", "gpu"): (0, None),  # its one process is real, outside the pretend GPU: a note says so
    # batch 3, written and marked by hand before the rehearsal ran on them
    ("autocast_dtype_float16", "gpu"): (0, None),  # float16 under autocast, as on a GPU
    ("index_cpu_indices", "gpu"): (0, None),
    ("index_select_cpu_index", "gpu"): (1, "mixed-devices"),
    ("cross_entropy_weight_cpu", "gpu"): (1, "mixed-devices"),
    ("cross_entropy_weight_cpu", "laptop"): (0, None),
    ("deterministic_cublas", "gpu"): (1, "cublas-deterministic"),
    ("deterministic_cublas", "mac"): (0, None),
    ("thread_moves_batch", "gpu"): (0, None),  # the thread runs on the pretend GPU too
    ("plain_attribute_not_moved", "gpu"): (1, "mixed-devices"),
    ("mps_synchronize_unguarded", "gpu"): (1, "no-gpu"),
    ("mps_synchronize_unguarded", "mac"): (0, None),
    ("mps_synchronize_unguarded", "laptop"): (1, "no-gpu"),
    ("set_device_local_rank", "mac"): (1, "no-gpu"),
    ("load_map_location_cuda", "laptop"): (1, "load-missing-device"),
    ("optimizer_state_before_to", "gpu"): (1, "mixed-devices"),
    ("generator_on_device", "gpu"): (0, None),
    ("from_numpy_float64", "mac"): (1, "mps-float64"),
    ("func_transforms_device", "gpu"): (0, None),
    ("func_transforms_device", "mac"): (0, None),
    ("nccl_world_one", "gpu"): (0, None),  # last: it starts a process group
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("adversarial")
    (folder / "syntax_error.py").write_text((ADVERSARIAL / "syntax_error.txt").read_text())  # kept as .txt: lint
    specs = [
        f"{folder / name if name == 'syntax_error' else ADVERSARIAL / name}.py@{machine}" for name, machine in CASES
    ]
    specs += [
        f"{HERE / 'gpu_only_failure.py'}@gpu",
        f"{ADVERSARIAL / 'spawn_device_count.py'}@gpu",
        f"{ADVERSARIAL / 'compile_reduce_overhead_outputs.py'}@gpu",
    ]
    done = subprocess.run([sys.executable, "-c", CHILD, *specs], capture_output=True, text=True, timeout=900)
    rows = json.loads(done.stdout.split("=== rows ===", 1)[1])
    return dict(zip([*CASES, *UNSCORED], rows, strict=True))


UNSCORED = [  # "could not tell", each for its reason
    ("gpu_only_failure", "gpu"),
    ("spawn_device_count", "gpu"),
    ("compile_reduce_overhead_outputs", "gpu"),
]


def test_the_manifest_marks_every_case_as_the_tests_expect():
    with open(ADVERSARIAL / "manifest.toml", "rb") as f:
        marks = {c["name"]: c for c in tomllib.load(f)["case"]}
    assert {p.stem for p in ADVERSARIAL.glob("*.py")} | {"syntax_error"} == set(marks)
    for (name, machine), (code, _) in CASES.items():
        assert marks[name][machine] == ("runs" if code == 0 else "fails"), (name, machine)


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"{c[0]}@{c[1]}")
def test_each_idiom_gets_the_real_machines_verdict(reports, case):
    report = reports[case]
    code, kind = CASES[case]
    assert report["exit_code"] == code, (report["tool_error"], report["findings"])
    if kind is not None:
        assert kind in {f["kind"] for f in report["findings"]}


def test_what_the_run_did_not_model_it_says(reports):
    assert "torch.compile: rehearsed eagerly" in reports[("compile_model", "gpu")]["stopped"]
    graphs = reports[("compile_reduce_overhead_outputs", "gpu")]
    assert graphs["exit_code"] == 3 and graphs["gap"] and "CUDA graphs" in graphs["tool_error"]
    assert "under autocast" not in reports[("autocast_dtype_float16", "gpu")]["tool_error"]
    assert "NCCL: rehearsed with gloo" in reports[("nccl_world_one", "gpu")]["stopped"]
    assert "on the GPU" in reports[("isinstance_cuda_type", "gpu")]["output"]


def test_a_spawn_of_no_process_says_so_and_a_spawned_process_is_not_rehearsed(reports):
    """mp.spawn(nprocs=torch.cuda.device_count()): on a Mac and a laptop no process starts and the script exits 0,
    having trained nothing (torch.multiprocessing.spawn with nprocs=0 returns at once)."""
    for machine in ("mac", "laptop"):
        report = reports[("spawn_device_count", machine)]
        (finding,) = report["findings"]
        assert (finding["kind"], finding["line"], finding["blocks"]) == ("spawn-per-gpu", 28, False)
        assert "started no process (nprocs=0)" in report["stopped"] and report["exit_code"] == 0
    # as a GPU it starts one real process, outside the pretend GPU, where NCCL finds no GPU: could not tell, and why
    gpu = reports[("spawn_device_count", "gpu")]
    assert gpu["exit_code"] == 3 and gpu["gap"] and not gpu["findings"]
    assert "started with torch.multiprocessing failed" in gpu["tool_error"] and "NCCL" in gpu["tool_error"]
    fallback = reports[("spawn_cpu_fallback", "gpu")]
    assert "started 1 real process(es)" in fallback["stopped"] and not fallback["findings"]


def test_a_syntax_error_is_at_the_scripts_own_line(reports):
    (finding,) = reports[("syntax_error", "gpu")]["findings"]
    assert finding["file"].endswith("syntax_error.py") and finding["line"] == 3
    assert finding["message"].startswith("SyntaxError")


def test_a_failure_a_plain_cpu_run_does_not_share_is_could_not_tell(reports):
    report = reports[("gpu_only_failure", "gpu")]
    assert report["exit_code"] == 3 and report["gap"] and not report["findings"]
    assert "a plain CPU run does not fail" in report["tool_error"]
    # the shape bug fails the same way on the CPU: the script's own
    assert reports[("shape_bug", "gpu")]["findings"][0]["line"] == 5


def test_the_bill_peaks_per_device_and_no_sync_for_a_non_blocking_copy_to_the_host(reports):
    assert reports[("memory_stats_guarded", "gpu")]["output"].split()[:2] == ["4", "8"]  # MB now, MB at the peak
    assert not any(".cpu()" in line for line in reports[("nonblocking_d2h", "gpu")]["cost"])
    assert any("format()" in line for line in reports[("format_tensor", "gpu")]["cost"])


def test_a_script_that_catches_the_stop_still_stops_at_the_step_limit():
    result = rehearse(ADVERSARIAL / "catches_baseexception.py", steps=2, loops=2, timeout=60)
    assert result["exit_code"] == 0 and "except BaseException" in result["stopped"]


@pytest.mark.parametrize("option", [["--steps", "0"], ["--loops", "0"], ["--timeout", "0"]])
def test_a_limit_that_runs_nothing_is_refused(option, capsys):
    assert main([*option, str(ADVERSARIAL / "shape_bug.py")]) == 2
    assert option[0] in capsys.readouterr().err


def test_static_follows_imports_under_other_names_and_unguarded_cuda_calls():
    kinds = {(f.kind, f.line) for f in read(ADVERSARIAL / "torch_as_t_load.py").findings}
    assert ("load-no-map-location", 9) in kinds
    assert ("cuda-api-unguarded", 6) in {
        (f.kind, f.line) for f in read(ADVERSARIAL / "unguarded_synchronize.py").findings
    }
    for guarded in ("events_guarded", "stream_guarded", "memory_stats_guarded"):
        assert not read(ADVERSARIAL / f"{guarded}.py").problems, guarded
    # NCCL for any device, .to(rank) (an int is cuda:rank) and one process per CUDA GPU
    assert [(f.kind, f.line) for f in read(ADVERSARIAL / "spawn_device_count.py").findings] == [
        ("nccl-backend", 13),
        ("cuda-call", 15),
        ("cuda-call", 18),
        ("spawn-per-gpu", 28),
    ]
    assert not read(ADVERSARIAL / "spawn_cpu_fallback.py").problems  # NCCL or gloo and the device, chosen
