"""helpers.doctor on simulated machines (Facts built by hand), then for real on this machine."""

import builtins
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import replace

import pytest

from helpers import doctor
from helpers.doctor import Check, Facts, Gpu, diagnose, main, matching_torchvision, render
from tools import course

H200 = Gpu(0, "NVIDIA H200", 139.8, "9.0")

LAPTOP = Facts(
    python_version=(3, 12, 3),
    torch_version="2.14.1+cpu",
    torchvision_version="0.29.1+cpu",
    accelerator_api=True,
    accelerator_available=False,
    course_device="cpu",
    course_device_detail="cpu",
    available_devices=["cpu"],
)

GPU_BOX = replace(
    LAPTOP,
    torch_version="2.14.1+cu130",
    torchvision_version="0.29.1+cu130",
    cuda_build="13.0",
    cuda_available=True,
    gpus=[H200],
    nvidia_smi="ok",
    driver_version="580.65.06",
    driver_cuda="13.0",
    smi_gpus=["NVIDIA H200"],
    accelerator="cuda",
    accelerator_available=True,
    course_device="cuda:0",
    course_device_detail="cuda:0 (NVIDIA H200, 139.8 GiB, compute capability 9.0)",
    available_devices=["cuda:0", "cpu"],
)

# A CUDA build on a machine whose NVIDIA GPU PyTorch does not see.
GPU_UNSEEN = replace(GPU_BOX, cuda_available=False, gpus=[], accelerator_available=False, course_device="cpu")
GPU_UNSEEN = replace(GPU_UNSEEN, course_device_detail="cpu", available_devices=["cpu"])


def by_topic(checks: list[Check]) -> dict[str, Check]:
    return {check.topic: check for check in checks}


def statuses(checks: list[Check]) -> set[str]:
    return {check.status for check in checks}


def exit_code(monkeypatch, facts: Facts) -> int:
    monkeypatch.setattr(doctor, "gather_facts", lambda: facts)
    return main([])


def test_healthy_cpu_laptop(monkeypatch, capsys):
    checks = diagnose(LAPTOP)
    assert statuses(checks) == {"OK"}
    topics = by_topic(checks)
    assert topics["torch"].detail == "2.14.1+cpu (CPU-only build)"
    assert topics["torchvision"].detail == "0.29.1+cpu (matches torch 2.14)"
    assert topics["GPUs"].detail == "none visible to PyTorch"
    assert checks[-1] == Check("OK", "course device", "the course will use cpu (best device present)")
    assert exit_code(monkeypatch, LAPTOP) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "[OK]   Python: 3.12.3"
    assert out.splitlines()[-1] == "[OK]   course device: the course will use cpu (best device present)"


def test_healthy_single_gpu_machine(monkeypatch, capsys):
    checks = diagnose(GPU_BOX)
    assert statuses(checks) == {"OK"}
    topics = by_topic(checks)
    assert topics["torch"].detail == "2.14.1+cu130 (CUDA 13.0 build)"
    assert topics["CUDA"].detail == "CUDA 13.0 build, CUDA available: 1 GPU"
    assert topics["GPU 0"].detail == "NVIDIA H200, 139.8 GiB, compute capability 9.0"
    assert topics["NVIDIA driver"].detail == "580.65.06, supports CUDA up to 13.0; nvidia-smi lists NVIDIA H200"
    assert topics["torch.accelerator"].detail == "current_accelerator() = cuda, is_available() = True"
    assert "cuda:0 (NVIDIA H200" in checks[-1].detail
    assert exit_code(monkeypatch, GPU_BOX) == 0
    assert "[OK]   torch: 2.14.1+cu130 (CUDA 13.0 build)" in capsys.readouterr().out


def test_cpu_wheel_on_machine_with_nvidia_gpu_warns_with_the_cuda_index(monkeypatch):
    facts = replace(GPU_UNSEEN, torch_version="2.14.1+cpu", torchvision_version="0.29.1+cpu", cuda_build=None)
    facts = replace(facts, accelerator=None, driver_cuda="12.8")
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN"
    assert "NVIDIA GPU but a CPU-only PyTorch" in cuda.detail
    assert "pip uninstall -y torch torchvision" in cuda.fix
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cu126" in cuda.fix
    assert "supports CUDA up to 12.8" in cuda.fix
    assert exit_code(monkeypatch, facts) == 0, "the course still runs, on the CPU"


@pytest.mark.parametrize("value", ["", "-1"])
def test_cuda_visible_devices_hiding_every_gpu(monkeypatch, value):
    facts = replace(GPU_UNSEEN, cuda_visible_devices=value)
    topics = by_topic(diagnose(facts))
    cuda = topics["CUDA"]
    assert cuda.status == "WARN"
    assert f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU" in cuda.detail
    assert "unset CUDA_VISIBLE_DEVICES" in cuda.fix
    assert "CUDA_VISIBLE_DEVICES=0" in cuda.fix
    assert "restart the kernel" in cuda.fix
    assert topics["CUDA_VISIBLE_DEVICES"].status == "WARN"
    assert "nvidia-smi, which ignores this variable, lists 1" in topics["CUDA_VISIBLE_DEVICES"].detail
    assert exit_code(monkeypatch, facts) == 0


def test_cuda_visible_devices_selecting_some_gpus_is_fine():
    facts = replace(GPU_BOX, cuda_visible_devices="1", smi_gpus=["NVIDIA H200", "NVIDIA H200"])
    checks = diagnose(facts)
    assert statuses(checks) == {"OK"}
    assert by_topic(checks)["CUDA_VISIBLE_DEVICES"].detail == (
        "'1' (PyTorch sees 1 GPU; nvidia-smi, which ignores this variable, lists 2)"
    )


@pytest.mark.parametrize(
    ("torch_version", "torchvision"),
    [("2.6.0", "0.21.0"), ("2.14.1+cu130", "0.29.1+cu130"), ("1.13.1", "0.14.1")],
)
def test_matching_torchvision(torch_version, torchvision):
    assert matching_torchvision(torch_version) == doctor._release(torchvision)


def test_torch_torchvision_mismatch_fails_with_a_pinned_reinstall(monkeypatch):
    facts = replace(GPU_BOX, torchvision_version="0.21.0+cu130")
    check = by_topic(diagnose(facts))["torchvision"]
    assert check.status == "FAIL"
    assert "torch 2.14 pairs with torchvision 0.29" in check.detail
    assert check.fix == (
        'reinstall both together: `pip install "torch==2.14.*" "torchvision==0.29.*" '
        "--index-url https://download.pytorch.org/whl/cu130`"
    )
    assert exit_code(monkeypatch, facts) == 1


def test_torchvision_for_another_cuda_variant_fails():
    check = by_topic(diagnose(replace(GPU_BOX, torchvision_version="0.29.1+cpu")))["torchvision"]
    assert check.status == "FAIL"
    assert "built for cpu but torch 2.14.1+cu130 for cu130" in check.detail


def test_missing_torchvision_fails_with_the_matching_version():
    facts = replace(LAPTOP, torchvision_version=None, torchvision_error="ModuleNotFoundError: No module named 'x'")
    check = by_topic(diagnose(facts))["torchvision"]
    assert (check.status, check.detail.split(" (")[0]) == ("FAIL", "is not installed")
    assert '"torchvision==0.29.*"' in check.fix


def test_no_torch_fails_with_the_install_command(monkeypatch):
    facts = Facts(torch_error="ModuleNotFoundError: No module named 'torch'")
    checks = diagnose(facts)
    torch_check = by_topic(checks)["torch"]
    assert torch_check.status == "FAIL"
    assert "not installed" in torch_check.detail
    assert 'pip install -e ".[dev]"' in torch_check.fix
    assert "https://pytorch.org/get-started/locally/" in torch_check.fix
    assert checks[-1].status == "FAIL" and checks[-1].topic == "course device"
    assert "torchvision" not in by_topic(checks), "the torch fix installs both"
    assert exit_code(monkeypatch, facts) == 1


def test_broken_torch_says_it_does_not_import():
    check = by_topic(diagnose(Facts(torch_error="OSError: libcudnn.so.9: cannot open shared object file")))["torch"]
    assert check.status == "FAIL"
    assert "installed but does not import: OSError: libcudnn.so.9" in check.detail
    assert "pip uninstall -y torch torchvision" in check.fix


def test_bad_course_device_fails_with_the_pickers_message(monkeypatch, capsys):
    message = "COURSE_DEVICE='cuda: 0': 'cuda: 0' is not a device name PyTorch accepts. Write 'cuda:0' instead."
    facts = replace(LAPTOP, course_device=None, course_device_detail=None, course_device_error=message)
    facts = replace(facts, course_device_env="cuda: 0")
    check = diagnose(facts)[-1]
    assert (check.status, check.topic, check.detail) == ("FAIL", "course device", message)
    assert check.fix == "unset COURSE_DEVICE (`unset COURSE_DEVICE`) or set it to one of: auto, cpu"
    assert exit_code(monkeypatch, facts) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [f"[FAIL] course device: {message}", f"{'':7}fix: {check.fix}"]


def test_forced_course_device_is_named():
    facts = replace(GPU_BOX, course_device_env="cpu", course_device="cpu", course_device_detail="cpu")
    assert diagnose(facts)[-1].detail == "the course will use cpu (forced by COURSE_DEVICE='cpu')"


def test_mps_only_mac(monkeypatch):
    facts = replace(LAPTOP, torch_version="2.14.1", torchvision_version="0.29.1", mps_available=True)
    facts = replace(facts, accelerator="mps", accelerator_available=True, course_device="mps:0")
    facts = replace(facts, course_device_detail="mps:0 (Apple GPU through Metal)", available_devices=["mps:0", "cpu"])
    checks = diagnose(facts)
    assert statuses(checks) == {"OK"}
    topics = by_topic(checks)
    assert topics["Apple MPS"].detail == "available (Apple GPU through Metal)"
    assert topics["CUDA"].detail == "CPU-only build: runs on the CPU or Apple MPS"
    assert topics["torch.accelerator"].detail == "current_accelerator() = mps, is_available() = True"
    assert checks[-1].detail == "the course will use mps:0 (Apple GPU through Metal) (best device present)"
    assert exit_code(monkeypatch, facts) == 0


def test_cuda_build_without_driver_runs_on_cpu_with_a_colab_tip():
    facts = replace(GPU_UNSEEN, nvidia_smi="missing", driver_version=None, driver_cuda=None, smi_gpus=[])
    facts = replace(facts, accelerator_available=False)
    checks = diagnose(facts)
    assert statuses(checks) == {"OK"}
    cuda = by_topic(checks)["CUDA"]
    assert "no NVIDIA GPU or driver here: the course runs on the CPU" in cuda.detail
    assert "Runtime > Change runtime type > GPU" in cuda.fix
    assert "tip: to use a GPU in Colab" in render(checks)
    assert "even when no device is present" in by_topic(checks)["torch.accelerator"].detail


def test_driver_too_old_for_the_cuda_build_warns():
    old = "CUDA initialization: The NVIDIA driver on your system is too old (found version 12040)."
    facts = replace(GPU_UNSEEN, driver_cuda="12.4", torch_warnings=[old])
    checks = diagnose(facts)
    cuda = by_topic(checks)["CUDA"]
    assert cuda.status == "WARN"
    assert old in cuda.detail
    assert "update the NVIDIA driver" in cuda.fix and "supports CUDA up to 12.4" in cuda.fix
    assert "PyTorch warning" not in by_topic(checks), "the warning is reported once, in the CUDA line"


def test_failing_nvidia_smi_warns():
    facts = replace(LAPTOP, nvidia_smi="failed", nvidia_smi_error="NVIDIA-SMI has failed because it couldn't ...")
    check = by_topic(diagnose(facts))["NVIDIA driver"]
    assert check.status == "WARN" and "reinstall the driver" in check.fix


def test_old_python_and_old_torch_fail():
    topics = by_topic(diagnose(replace(LAPTOP, python_version=(3, 10, 12), torch_version="2.5.1+cpu")))
    assert topics["Python"].status == "FAIL" and "environment.yml" in topics["Python"].fix
    assert topics["torch"].status == "FAIL"
    assert '"torch>=2.7"' in topics["torch"].fix and "whl/cpu" in topics["torch"].fix


def test_render_indents_fixes_under_their_line():
    text = render([Check("OK", "torch", "2.14.1 (CUDA 13.0 build)"), Check("WARN", "CUDA", "bad", "do this")])
    assert text == "[OK]   torch: 2.14.1 (CUDA 13.0 build)\n[WARN] CUDA: bad\n       fix: do this"


def test_nvidia_smi_parsing():
    query = "NVIDIA H200, 580.65.06\nNVIDIA A100-SXM4-80GB, 580.65.06\n"
    assert doctor.parse_smi_query(query) == ("580.65.06", ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"])
    header = "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0     |"
    assert doctor.parse_smi_header(header) == "13.0"
    assert doctor.parse_smi_header("") is None


def test_min_torch_matches_pyproject():
    pyproject = tomllib.loads((course.ROOT / "pyproject.toml").read_text())
    (torch_dep,) = [d for d in pyproject["project"]["dependencies"] if re.match(r"torch\b(?!vision)", d)]
    minimum = re.search(r">=([\d.]+)", torch_dep).group(1)
    assert tuple(map(int, minimum.split("."))) == doctor.MIN_TORCH


# --- for real ----------------------------------------------------------------------------------------


def run_doctor(**env: str) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k != "COURSE_DEVICE"} | env
    return subprocess.run(
        [sys.executable, "-m", "helpers.doctor"],
        capture_output=True,
        text=True,
        env=child_env,
        cwd=course.ROOT,
        timeout=120,
    )


def test_doctor_runs_here():
    proc = run_doctor()
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[0].startswith("[OK]   Python: ")
    assert any(line.startswith("[OK]   torch: ") for line in lines)
    assert lines[-1].startswith("[OK]   course device: the course will use ")
    assert "[FAIL]" not in proc.stdout


def test_doctor_with_misspelt_course_device_fails_naming_the_fix(capsys):
    assert doctor.run_child({"COURSE_DEVICE": "cuda: 0"}) == 1  # how a notebook runs it
    out = capsys.readouterr().out
    assert "[FAIL] course device: COURSE_DEVICE='cuda: 0'" in out
    assert "Write 'cuda:0' instead" in out


def test_gather_facts_without_torch_reports_instead_of_crashing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ModuleNotFoundError
    facts = doctor.gather_facts()
    assert facts.torch_version is None
    assert facts.torch_error.startswith("ModuleNotFoundError")
    assert facts.python_version == tuple(sys.version_info[:3])
    assert by_topic(diagnose(facts))["torch"].status == "FAIL"
    assert main([]) == 1


def test_gather_facts_with_broken_torch(monkeypatch):
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "torch":
            raise OSError("libtorch_cuda.so: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    facts = doctor.gather_facts()
    assert facts.torch_error == "OSError: libtorch_cuda.so: cannot open shared object file"
    assert "does not import" in by_topic(diagnose(facts))["torch"].detail


SMI_WITH_GPU = {(): "| NVIDIA-SMI 580.82  Driver Version: 580.82  CUDA Version: 13.0 |",
                ("--query-gpu=name,driver_version", "--format=csv,noheader"): "NVIDIA H100, 580.82"}  # fmt: skip


@pytest.mark.parametrize("smi_sees_gpu", [False, True], ids=["no nvidia-smi", "nvidia-smi lists a GPU"])
def test_gather_facts_with_torch_failing_on_device_queries(monkeypatch, smi_sees_gpu):
    import torch

    def no_cuda():
        raise RuntimeError("CUDA driver initialization failed")

    def smi(*args):
        return ("ok", SMI_WITH_GPU[args]) if smi_sees_gpu else ("missing", "nvidia-smi not found")

    monkeypatch.setattr(doctor, "_run_nvidia_smi", smi)  # whatever this machine has
    monkeypatch.setattr(torch.cuda, "is_available", no_cuda)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # not needed here; importing it takes seconds
    facts = doctor.gather_facts()
    said = "asking PyTorch about devices failed: RuntimeError: CUDA driver initialization failed"
    assert facts.torch_warnings == [said]
    assert facts.course_device_error == "RuntimeError: CUDA driver initialization failed"
    topics = by_topic(diagnose(facts))
    if smi_sees_gpu:  # the driver has a GPU, so what PyTorch said belongs on the CUDA line
        assert topics["CUDA"].status != "OK" and said in topics["CUDA"].detail
        assert "PyTorch warning" not in topics
    else:
        assert topics["PyTorch warning"].status == "WARN"
    assert topics["course device"].status == "FAIL"
