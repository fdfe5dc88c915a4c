"""``python -m helpers.rehearse``: the pretend machines find what the real ones raise, at the learner's line, with
the CPU's own numbers; ``--static`` reads each kind; ``--fix`` gives a script that rehearses clean everywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from helpers.rehearse.port import port_source
from helpers.rehearse.script_run import rehearse
from helpers.rehearse.static_check import read
from tools import course

SCRIPTS = course.ROOT / "tests" / "fixtures" / "rehearse"
METHOD2 = SCRIPTS / "method2_labels_on_cpu.py"


def kinds_at(result: dict) -> set[tuple[str, int]]:
    return {(f["kind"], f["line"]) for f in result["findings"]}


def plain_cpu_output(script, *args) -> str:
    """What the script prints run plainly on the CPU (a GPU machine's GPUs hidden from it)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=True,
                          env=env).stdout  # fmt: skip


def test_method_2_on_a_pretend_gpu_finds_the_labels_and_numpy_at_their_lines_with_the_cpus_numbers():
    result = rehearse(METHOD2, machine="gpu", steps=10, loops=10)
    assert result["exit_code"] == 1 and not result["runs"]
    assert kinds_at(result) == {("mixed-devices", 20), ("numpy-of-device-tensor", 25)}
    mixed = next(f for f in result["findings"] if f["kind"] == "mixed-devices")
    assert "cuda:0 and cpu" in mixed["message"] and "notebook 03, section 8" in mixed["lesson"]
    # the run went on: every step printed, and the numbers are those of the plain CPU run
    assert result["output"].strip() == plain_cpu_output(METHOD2).strip()


def test_the_step_limit_stops_the_run_and_says_so():
    result = rehearse(METHOD2, machine="gpu", steps=2, loops=1)
    assert result["output"].count("loss ") == 2
    assert "step limit" in result["stopped"]


def test_method_2_runs_on_a_mac_and_a_laptop_but_never_uses_the_macs_gpu():
    for machine in ("mac", "laptop"):
        assert rehearse(METHOD2, machine=machine)["exit_code"] == 0
    assert ("cuda-only-fallback", 11) in {(f.kind, f.line) for f in read(METHOD2).findings}


def test_a_gpu_index_past_the_machines_gpus_and_a_cuda_call_on_a_laptop(tmp_path):
    script = tmp_path / "index.py"
    script.write_text("import torch\nx = torch.ones(2).to('cuda:3')\nprint(x.sum().item())\n")
    assert ("device-index", 2) in kinds_at(rehearse(script, machine="gpus:2"))
    assert rehearse(script, machine="gpus:4")["exit_code"] == 0
    laptop = rehearse(script, machine="laptop")
    assert ("no-gpu", 2) in kinds_at(laptop) and "NVIDIA driver" in laptop["findings"][0]["message"]
    assert laptop["output"].strip() == "2.0"  # the run went on, on the CPU


def test_float64_is_refused_on_a_mac_only():
    assert ("mps-float64", 7) in kinds_at(rehearse(SCRIPTS / "mac_float64.py", machine="mac"))
    assert rehearse(SCRIPTS / "mac_float64.py", machine="gpu")["exit_code"] == 0


def test_a_checkpoint_saved_on_a_gpu_needs_map_location_on_a_laptop(tmp_path):
    saved = tmp_path / "model.pth"
    assert rehearse(SCRIPTS / "save_on_gpu.py", str(saved), machine="gpu")["exit_code"] == 0
    laptop = rehearse(SCRIPTS / "load_anywhere.py", str(saved), machine="laptop")
    assert ("load-missing-device", 12) in kinds_at(laptop)
    assert "map_location" in laptop["findings"][0]["message"]
    assert rehearse(SCRIPTS / "load_anywhere.py", str(saved), "map", machine="laptop")["exit_code"] == 0
    assert rehearse(SCRIPTS / "load_anywhere.py", str(saved), machine="gpu")["exit_code"] == 0


def test_a_scripts_own_bug_is_reported_as_such_not_as_a_failure_of_the_rehearsal(tmp_path):
    script = tmp_path / "bug.py"
    script.write_text("import torch\nx = torch.ones(2, 3)\ny = x @ x\n")
    result = rehearse(script)
    assert [(f["kind"], f["line"]) for f in result["findings"]] == [("script-bug", 3)]
    assert not result["tool_error"] and result["exit_code"] == 1


def test_static_reads_every_kind_at_its_line():
    found = {(f.kind, f.line) for f in read(SCRIPTS / "machine_bound.py").findings}
    assert found == {
        ("cuda-call", 7),
        ("device-literal", 8),
        ("cuda-tensor-type", 9),
        ("cuda-tensor-type", 10),
        ("default-tensor-type", 10),
        ("load-no-map-location", 11),
        ("dataparallel-prefix", 13),
        ("workers-no-main-guard", 14),
    }


def test_a_device_agnostic_script_reads_clean():
    ported, _ = port_source(METHOD2.read_text(), "method2.py")
    kinds = {f.kind for f in read_text(ported).findings}
    assert not kinds & {"cuda-call", "numpy-of-device-tensor", "cuda-only-fallback"}, kinds


def read_text(code: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "script.py"
        path.write_text(code)
        return read(path)


def test_fix_ports_method_2_keeping_comments_and_rehearses_it_clean_everywhere(tmp_path):
    script = tmp_path / "method2.py"
    shutil.copy(METHOD2, script)
    done = subprocess.run(
        [sys.executable, "-m", "helpers.rehearse", "--fix", "--write", str(tmp_path / "out.py"), str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for machine in ("gpu", "mac", "laptop"):
        assert f"rehearsed as {machine}: runs" in done.stdout
    ported = (tmp_path / "out.py").read_text()
    assert '"""The articles\' method 2' in ported and "labels = labels.to(device)" in ported
    assert ".cuda()" not in ported and "outputs.argmax(1).detach().cpu().numpy()" in ported
    assert sorted(p.name for p in tmp_path.iterdir()) == ["method2.py", "out.py"]  # nothing left behind
    assert plain_cpu_output(tmp_path / "out.py") == plain_cpu_output(script)


def test_the_report_speaks_chinese(monkeypatch):
    env = {**os.environ, "COURSE_LANG": "zh-CN"}
    done = subprocess.run(
        [sys.executable, "-m", "helpers.rehearse", "--steps", "1", "--loops", "1", str(METHOD2)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "能否在一台有 CUDA GPU 的机器上运行：不能，有 2 个问题" in done.stdout
    assert "修复：" in done.stdout and "Expected all tensors to be on the same device" in done.stdout


def test_a_wrong_machine_or_a_missing_script_is_a_clear_usage_error(tmp_path):
    for args in (["--as", "tpu", str(METHOD2)], [str(tmp_path / "missing.py")]):
        done = subprocess.run([sys.executable, "-m", "helpers.rehearse", *args], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.strip()


@pytest.mark.parametrize("machine", ["gpu", "mac"])
def test_json_is_one_object_with_file_line_kind_message_fix(machine):
    result = rehearse(METHOD2, machine=machine, steps=1, loops=1)
    for finding in result["findings"]:
        assert {"file", "line", "kind", "message", "fix"} <= set(finding)


def test_static_sees_a_guard_in_a_name_or_a_chosen_device_and_workers_behind_a_late_main_guard():
    """Shapes met in public scripts: ``use_gpu = torch.cuda.is_available()`` then ``if use_gpu:``; ``.cuda()``
    behind ``device.type == 'cuda'``; ``nn.DataParallel(model).cuda()``; a main guard at the end of the file;
    a loader built at import time but iterated only under the guard."""
    found = {(f.kind, f.line) for f in read(SCRIPTS / "guarded_three_ways.py").findings}
    assert found == {("cuda-only-fallback", 7), ("dataparallel-prefix", 21)}


def test_adam_steps_on_a_pretend_gpu_without_asking_the_real_driver():
    result = rehearse(SCRIPTS / "adam_on_the_device.py")
    assert result["runs"] and not result["tool_error"], result
    assert result["output"] == plain_cpu_output(SCRIPTS / "adam_on_the_device.py")


def test_the_offline_mnist_has_the_tensors_scripts_read_off_the_real_one(tmp_path):
    result = rehearse(SCRIPTS / "old_mnist_attributes.py", str(tmp_path / "nowhere"))
    assert result["runs"] and not result["tool_error"], result
    assert result["output"].splitlines()[:3] == ["(28, 28) torch.uint8 True", "(5, 28, 28) 10", "Image int"]


def test_an_old_scripts_variable_and_lstm_stay_on_the_pretend_gpu():
    result = rehearse(SCRIPTS / "legacy_variable_lstm.py")
    assert result["runs"] and not result["tool_error"], result
    assert result["output"] == plain_cpu_output(SCRIPTS / "legacy_variable_lstm.py")


def test_static_sees_a_flag_set_through_a_conditional_expression_as_a_guard():
    found = {(f.kind, f.line) for f in read(SCRIPTS / "flag_from_a_conditional.py").findings}
    assert found == {("cuda-only-fallback", 6), ("cuda-tensor-type", 8)}


def test_workers_on_a_mac_are_a_problem_only_where_a_spawned_worker_would_start_them_again():
    assert rehearse(SCRIPTS / "workers_in_main.py", machine="mac", steps=1, loops=2)["exit_code"] == 0
    unguarded = rehearse(SCRIPTS / "workers_in_main.py", "unguarded", machine="mac", steps=1, loops=2)
    assert ("spawn-workers", 11) in kinds_at(unguarded)


def test_fix_ports_a_legacy_type_picked_once_and_the_moves_behind_its_flag(tmp_path):
    """PyTorch-GAN's shape: ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` used as a
    constructor, and ``if cuda:`` around the moves; the port reads clean and rehearses clean on all three."""
    script = SCRIPTS / "flag_from_a_conditional.py"
    ported, _ = port_source(script.read_text(), script.name)
    assert "torch.cuda.FloatTensor" not in ported and "if on_gpu:" not in ported
    assert "Tensor(3, 2).to(device).fill_(1.0)" in ported and "\nlayer.to(device)\n" in ported
    assert not read_text(ported).findings
    (tmp_path / "ported.py").write_text(ported)
    for machine in ("gpu", "mac", "laptop"):
        result = rehearse(tmp_path / "ported.py", machine=machine)
        assert result["runs"] and not result["findings"], (machine, result)
        assert result["output"] == plain_cpu_output(script)


def test_numpy_with_force_copies_to_the_host_itself_and_is_not_a_problem(tmp_path):
    script = tmp_path / "force.py"
    script.write_text(
        "import torch\n"
        "x = torch.arange(3.0).cuda() if torch.cuda.is_available() else torch.arange(3.0)\n"
        "print(x.numpy(force=True).tolist())\n"
    )
    assert {f.kind for f in read(script).findings} == {"cuda-only-fallback"}
    result = rehearse(script)
    assert result["runs"] and not result["findings"], result
    assert result["output"] == plain_cpu_output(script) == "[0.0, 1.0, 2.0]\n"


def test_an_option_of_the_rehearsal_after_the_script_goes_to_the_script_and_a_note_says_so(capsys):
    from helpers.rehearse.__main__ import main

    assert main(["--static", str(METHOD2), "--as=mac", "--epochs", "2"]) == 1
    err = capsys.readouterr().err
    assert "--as comes after the script, so it goes to the script" in err and "--epochs" not in err


def test_fix_takes_the_state_dict_of_a_wrapper_made_in_one_branch_only(tmp_path):
    """The port reaches the model inside nn.DataParallel where the wrapper was made (several GPUs) and the model
    itself where it was not (one GPU, a laptop): the same keys, no 'module.' prefix, on each."""
    script = SCRIPTS / "dataparallel_in_one_branch.py"
    ported, _ = port_source(script.read_text(), script.name)
    assert 'getattr(model, "module", model).state_dict()' in ported
    (tmp_path / "ported.py").write_text(ported)
    for machine in ("gpus:2", "gpu", "laptop"):
        result = rehearse(tmp_path / "ported.py", str(tmp_path / "w.pt"), machine=machine)
        assert result["runs"] and not result["findings"], (machine, result)
        assert result["output"].splitlines()[-1] == "['bias', 'weight']", (machine, result["output"])


def test_fix_puts_a_scripts_top_level_work_under_a_main_guard_for_spawned_workers(tmp_path):
    """Workers started at the top level: the port keeps the imports, functions and classes where a spawned
    worker imports them and moves the rest, in order, under ``if __name__ == "__main__":``; on a Mac it runs."""
    script = SCRIPTS / "workers_at_top_level.py"
    assert ("spawn-workers", 23) in kinds_at(rehearse(script, machine="mac", steps=1, loops=1))
    ported, left = port_source(script.read_text(), script.name)
    assert not left and 'if __name__ == "__main__":\n' in ported and "\nclass Net(nn.Module):" in ported
    assert "    loader = DataLoader(data, batch_size=8, num_workers=1)\n" in ported
    assert not read_text(ported).findings
    (tmp_path / "ported.py").write_text(ported)
    for machine in ("mac", "gpu", "laptop"):
        result = rehearse(tmp_path / "ported.py", machine=machine, steps=4, loops=1)
        assert result["runs"] and not result["findings"], (machine, result)
        assert result["output"] == plain_cpu_output(tmp_path / "ported.py"), machine  # the CPU's own losses


def test_fix_leaves_the_guard_to_the_learner_where_a_definition_needs_the_scripts_names():
    code = (SCRIPTS / "workers_at_top_level.py").read_text()
    code = code.replace("class Net(nn.Module):", "class Net(nn.Module):\n    seed = SEED")
    ported, left = port_source(code, "script.py")
    assert "if __name__" not in ported and any("[workers-no-main-guard]" in line for line in left)


SPAWN_HEAD = "import torch\nimport torch.multiprocessing as mp\nfrom torch.multiprocessing import start_processes\n\n\n"
SPAWNS_PER_GPU = {  # one process per CUDA GPU: none where there is no CUDA GPU (the spawn's line)
    "mp.spawn(print, nprocs=torch.cuda.device_count())\n": 6,
    "torch.multiprocessing.spawn(print, (), torch.cuda.device_count())\n": 6,
    "n = torch.cuda.device_count()\nstart_processes(print, nprocs=n)\n": 7,
    "def main():\n    n_gpus = torch.cuda.device_count()\n    world_size = n_gpus\n"
    "    mp.spawn(print, nprocs=world_size)\n": 9,
    # a test of another function's parameter of the same name is not a test of the count
    "n = torch.cuda.device_count()\n\n\ndef main(n):\n    if n > 1:\n        pass\n\n\nmp.spawn(main, nprocs=n)\n": 14,
}
SPAWNS_THAT_START_ONE = [  # at least one process, a count the script tests, or CUDA asked first
    "mp.spawn(print, nprocs=max(1, torch.cuda.device_count()))\n",
    "n = torch.cuda.device_count() or 1\nmp.spawn(print, nprocs=n)\n",
    "n = torch.cuda.device_count()\nn = max(n, 1)\nmp.spawn(print, nprocs=n)\n",
    "n = torch.cuda.device_count()\nassert n >= 1, 'needs a GPU'\nmp.spawn(print, nprocs=n)\n",
    "if torch.cuda.is_available():\n    mp.spawn(print, nprocs=torch.cuda.device_count())\n",
    "mp.spawn(print, nprocs=2)\n",
]


def test_static_reads_a_spawn_of_one_process_per_gpu_and_not_one_that_starts_at_least_one():
    for body, line in SPAWNS_PER_GPU.items():
        found = [(f.kind, f.line) for f in read_text(SPAWN_HEAD + body).findings]
        assert found == [("spawn-per-gpu", line)], body
    for body in SPAWNS_THAT_START_ONE:
        assert not read_text(SPAWN_HEAD + body).findings, body
    (finding,) = read_text(SPAWN_HEAD + next(iter(SPAWNS_PER_GPU))).findings
    assert not finding.as_json()["blocks"]  # the script exits 0 everywhere: a note, not a failure
    assert "max(1, torch.cuda.device_count())" in finding.fix and "gloo" in finding.fix


BILL = """import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.ones(32, 256), torch.zeros(32, dtype=torch.long))
for i, (x, y) in enumerate(DataLoader(data, batch_size=16, pin_memory=True)):
    x = x.to(device, non_blocking=i > 0)  # pinned by the loader: blocking in the first step only
    y = y.to(device, non_blocking=True)
    extra = torch.ones(1000).to(device, non_blocking=True)  # pageable: non_blocking has no effect
"""


def test_the_bill_calls_a_copy_from_pinned_memory_without_non_blocking_pinned_and_blocking(tmp_path):
    script = tmp_path / "bill.py"
    script.write_text(BILL)
    done = subprocess.run(
        [sys.executable, "-m", "helpers.rehearse", "--as", "gpu", str(script)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {line.split(":")[0].strip(): line.strip() for line in done.stdout.splitlines() if "copy(ies)" in line}
    assert steps["step 1"] == (
        "step 1: 0 sync(s), 3 copy(ies) to the device, 4.0 KB pageable, 16.5 KB pinned "
        "(16.4 KB of it blocking: copied without non_blocking=True)"
    )
    assert steps["step 2"] == "step 2: 0 sync(s), 3 copy(ies) to the device, 4.0 KB pageable, 16.5 KB pinned"
