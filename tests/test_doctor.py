"""helpers.clinic.doctor on simulated machines (Facts built by hand), then for real on this machine."""

import builtins
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import replace

import pytest

from helpers.clinic import doctor, doctor_cuda, doctor_facts, doctor_wheels
from helpers.clinic.doctor import Check, Facts, Gpu, diagnose, main, matching_torchvision, render
from helpers.lab import simulate
from helpers.lab.simulate import DRIVER_TOO_OLD, simulated_machine
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
    start_method="fork",
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
    smi_uuids=["GPU-5c1e2f3a-0000-1111-2222-333344445555"],
    cuda_arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
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
    assert matching_torchvision(torch_version) == doctor_wheels._release(torchvision)


def test_torch_torchvision_mismatch_fails_with_a_pinned_reinstall(monkeypatch):
    facts = replace(GPU_BOX, torchvision_version="0.21.0+cu130")
    check = by_topic(diagnose(facts))["torchvision"]
    assert check.status == "FAIL"
    assert "torch 2.14 pairs with torchvision 0.29" in check.detail
    assert check.fix.endswith(
        '`pip install --force-reinstall --no-deps "torchvision==0.29.*" --index-url https://download.pytorch.org/whl/cu130`'
    )
    assert exit_code(monkeypatch, facts) == 1


def test_torchvision_for_another_cuda_variant_fails():
    check = by_topic(diagnose(replace(GPU_BOX, torchvision_version="0.29.1+cpu")))["torchvision"]
    assert check.status == "FAIL"
    assert "built for cpu but torch 2.14.1+cu130 for cu130" in check.detail


def pip_install(command: str, installed: dict[str, str]) -> dict[str, str]:
    """What `pip install` leaves installed, as pip decides it (a model: nothing is installed for real).

    A requirement an installed version satisfies is left alone ("Requirement already satisfied"; a local label
    such as +cpu does not count for a `==X.Y.*` pin) unless --force-reinstall; what is installed comes from the
    --index-url's variant (download.pytorch.org/whl/cpu: +cpu) or PyPI (no label). Without --no-deps, pip also
    brings torchvision's torch along, from the same index.
    """
    from packaging.requirements import Requirement
    from packaging.version import Version

    words = __import__("shlex").split(command.strip("`"))
    assert words[:2] == ["pip", "install"], command
    options = {w for w in words[2:] if w.startswith("--")}
    index = words[words.index("--index-url") + 1] if "--index-url" in words else None
    variant = index.rstrip("/").rsplit("/", 1)[1] if index else None
    wanted = [Requirement(w) for w in words[2:] if not w.startswith("--") and w != index]
    if "--no-deps" not in options and any(r.name == "torchvision" for r in wanted):
        wanted.append(Requirement(f"torch=={installed['torch'].split('+')[0]}"))
    after = dict(installed)
    for req in wanted:
        have = installed.get(req.name)
        if have and Version(have).public in req.specifier and "--force-reinstall" not in options:
            continue  # Requirement already satisfied
        pinned = next(iter(req.specifier)).version  # "0.29.*": the index's newest such release, say 0.29.1
        release = pinned.replace("*", "1") if req.name == "torchvision" else installed["torch"].split("+")[0]
        assert req.specifier.contains(release), (req, release)
        after[req.name] = f"{release}+{variant}" if variant else release
    return after


@pytest.mark.parametrize(
    "torch_version, installed, torchvision_version, torchvision_error",
    [
        # a CPU torch beside a CUDA torchvision of the same version from PyPI, as in
        # https://github.com/pytorch/vision/issues/9077 (torch 2.7.0+cpu, torchvision 0.22.0)
        ("2.7.0+cpu", "0.22.0", None, "RuntimeError: operator torchvision::nms does not exist"),
        ("2.14.1+cpu", "0.29.1", None, "RuntimeError: operator torchvision::nms does not exist"),
        ("2.14.1+cpu", "0.29.1+cu130", "0.29.1+cu130", None),  # same version, another build
        ("2.14.1+cu130", "0.29.1+cpu", "0.29.1+cpu", None),
        ("2.14.1+cu130", "0.21.0+cu130", "0.21.0+cu130", None),  # another version
        ("2.14.1+cpu", None, None, "ModuleNotFoundError: No module named 'torchvision'"),
    ],
)
def test_the_torchvision_fix_installs_the_build_that_pairs_with_torch(
    torch_version, installed, torchvision_version, torchvision_error
):
    facts = replace(LAPTOP, torch_version=torch_version, torchvision_version=torchvision_version)
    facts = replace(facts, torchvision_error=torchvision_error)
    check = by_topic(diagnose(facts))["torchvision"]
    assert check.status == "FAIL"
    command = re.search(r"`(pip install [^`]+)`", check.fix).group(1)
    before = {"torch": torch_version, **({"torchvision": installed} if installed else {})}
    after = pip_install(command, before)
    assert after["torch"] == torch_version, "the fix leaves a working torch alone"
    want = ".".join(map(str, matching_torchvision(torch_version)))
    assert after["torchvision"] == f"{want}.1+{torch_version.split('+')[1]}", command
    repaired = replace(facts, torchvision_version=after["torchvision"], torchvision_error=None)
    assert by_topic(diagnose(repaired))["torchvision"].status == "OK"


def test_the_pip_model_says_already_satisfied_to_a_plain_pin():
    """The advice the doctor used to give changed nothing: the model must see that, or it proves nothing."""
    before = {"torch": "2.14.1+cpu", "torchvision": "0.29.1"}
    old_advice = 'pip install "torch==2.14.*" "torchvision==0.29.*" --index-url https://download.pytorch.org/whl/cpu'
    assert pip_install(old_advice, before) == before


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
    assert 'pip install -e ".[lab]"' in torch_check.fix
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


def test_cuda_build_without_driver_runs_on_cpu_and_says_what_the_cpu_build_saves():
    facts = replace(GPU_UNSEEN, nvidia_smi="missing", driver_version=None, driver_cuda=None, smi_gpus=[])
    facts = replace(facts, accelerator_available=False)
    checks = diagnose(facts)
    assert statuses(checks) == {"OK", "WARN"} and doctor.can_run(checks)
    cuda = by_topic(checks)["CUDA"]
    assert cuda.status == "WARN"
    assert "no NVIDIA driver is visible to this process" in cuda.detail, "it cannot know that there is no GPU"
    assert "the course runs on the CPU. On a machine without an NVIDIA GPU" in cuda.detail
    assert "about 4 GB installed for nothing" in cuda.detail
    assert cuda.fix.startswith(
        "switch to the CPU build: `pip uninstall -y torch torchvision triton $(pip freeze | grep -o '^nvidia-[^=]*')`"
        ', then `pip install "torch==2.14.*" "torchvision==0.29.*" --index-url https://download.pytorch.org/whl/cpu`'
    )
    assert "Runtime > Change runtime type > GPU" in cuda.fix
    assert "NVIDIA Container Toolkit" in cuda.fix and "docker run --gpus all" in cuda.fix
    assert "even when no device is present" in by_topic(checks)["torch.accelerator"].detail


def test_cuda_build_on_a_simulated_machine_without_nvidia_gpu_says_the_cpu_build_is_smaller(monkeypatch):
    def no_smi(*args):
        return "missing", "nvidia-smi not found"

    facts = gathered(monkeypatch, no_smi, cuda=0, cuda_init_error=simulate.NO_DRIVER)
    assert facts.cuda_build and not facts.cuda_available and facts.nvidia_smi == "missing"
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN" and "CPU build runs the course the same" in cuda.detail
    assert "--index-url https://download.pytorch.org/whl/cpu" in cuda.fix
    cpu_only = gathered(monkeypatch, no_smi, cuda=0, cuda_build=False)
    assert by_topic(diagnose(cpu_only))["CUDA"].status == "OK", "a CPU build has nothing to save"
    with_gpu = gathered(monkeypatch, smi("GPU-aa11, 550.54.15, NVIDIA A100"), cuda=1)
    assert by_topic(diagnose(with_gpu))["CUDA"].status == "OK"


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
    query = "GPU-aa11, 580.65.06, NVIDIA H200\nGPU-bb22, 580.65.06, NVIDIA A100-SXM4-80GB\n"
    assert doctor_facts.parse_smi_query(query) == (
        "580.65.06",
        ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"],
        ["GPU-aa11", "GPU-bb22"],
    )
    assert doctor_facts.parse_smi_query("GPU-cc33, 550.54.15, Quadro, with a comma\n")[1] == ["Quadro, with a comma"]
    header = "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0     |"
    assert doctor_facts.parse_smi_header(header) == "13.0"
    assert doctor_facts.parse_smi_header("") is None


def test_min_torch_matches_pyproject():
    pyproject = tomllib.loads((course.ROOT / "pyproject.toml").read_text())
    (torch_dep,) = [d for d in pyproject["project"]["dependencies"] if re.match(r"torch\b(?!vision)", d)]
    minimum = re.search(r">=([\d.]+)", torch_dep).group(1)
    assert tuple(map(int, minimum.split("."))) == doctor.MIN_TORCH


# --- the driver against the build, the GPUs against the build's kernels ------------------------------


def test_driver_older_than_the_build_by_nvidia_smi_names_both_versions_and_the_wheel():
    facts = replace(GPU_UNSEEN, driver_version="550.54.15", driver_cuda="12.4")
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN"
    assert "CUDA 13.0 build, but the NVIDIA driver 550.54.15 is too old for it: it supports CUDA up to 12.4" in (
        cuda.detail
    )
    assert "update the NVIDIA driver to one that supports CUDA 13.0" in cuda.fix
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cu126" in cuda.fix


def test_driver_too_old_said_by_torch_without_nvidia_smi_offers_the_last_cuda_11_wheel():
    facts = replace(GPU_UNSEEN, nvidia_smi="missing", driver_version=None, driver_cuda=None, smi_gpus=[])
    facts = replace(facts, cuda_init_error=simulate.DRIVER_TOO_OLD)  # "found version 11040": CUDA 11.4
    topics = by_topic(diagnose(facts))
    cuda = topics["CUDA"]
    assert cuda.status == "WARN" and "it supports CUDA up to 11.4" in cuda.detail
    assert simulate.DRIVER_TOO_OLD in cuda.detail, "what PyTorch said, once"
    assert "PyTorch found a driver" in topics["NVIDIA driver"].detail, "not 'normal without an NVIDIA GPU'"
    assert '"torch==2.7.*" "torchvision==0.22.*" --index-url https://download.pytorch.org/whl/cu118' in cuda.fix
    assert "PyTorch warning" not in topics


def test_driver_too_old_for_the_installed_cu126_wheel_only_says_update_the_driver():
    facts = replace(GPU_UNSEEN, torch_version="2.14.1+cu126", torchvision_version="0.29.1+cu126", cuda_build="12.6")
    facts = replace(facts, driver_cuda="12.2", torch_warnings=["CUDA initialization: The NVIDIA driver on your "
                                                               "system is too old (found version 12020)."])  # fmt: skip
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN" and "supports CUDA up to 12.2" in cuda.detail
    assert "update the NVIDIA driver" in cuda.fix and "--index-url" not in cuda.fix


def test_cuda_that_cannot_start_with_a_recent_driver_is_not_blamed_on_its_age():
    facts = replace(GPU_UNSEEN, cuda_init_error=simulate.UNKNOWN_ERROR)  # driver supports CUDA 13.0, the build's
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN" and "CUDA cannot start" in cuda.detail and "too old" not in cuda.detail
    assert "reboot" in cuda.fix and simulate.UNKNOWN_ERROR in cuda.detail


def smi(*lines: str):
    """A stand-in for doctor_facts._run_nvidia_smi: the header, and one query line per GPU."""
    header = "| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4 |"
    return lambda *args: ("ok", "\n".join(lines) if args == doctor_facts.SMI_QUERY else header)


def gathered(monkeypatch, smi_answer, **machine) -> Facts:
    """gather_facts() on a simulated machine (torchvision left out: importing it takes seconds)."""
    monkeypatch.setattr(doctor_facts, "_run_nvidia_smi", smi_answer)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with simulated_machine(**machine):
        return doctor.gather_facts()


def test_driver_too_old_gathered_on_a_simulated_machine(monkeypatch):
    facts = gathered(monkeypatch, smi("GPU-aa11, 550.54.15, NVIDIA A100"), cuda=1, cuda_init_error=DRIVER_TOO_OLD)
    assert facts.cuda_init_error == DRIVER_TOO_OLD and not facts.cuda_available
    assert (facts.driver_cuda, facts.smi_uuids) == ("12.4", ["GPU-aa11"])
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN" and "the NVIDIA driver 550.54.15 is too old" in cuda.detail


@pytest.mark.parametrize(
    "capability, arch_list, cuda, verdict",
    [
        ("6.1", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "13.0", "none"),  # a GTX 1080, cu130
        ("6.1", ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "12.6", "kernels"),  # sm_60 runs
        ("8.9", ["sm_80", "sm_86"], "12.6", "kernels"),  # same major, newer minor
        ("12.0", ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "12.6", "none"),  # an RTX 5090
        ("12.0", ["sm_80", "sm_90", "compute_90"], "12.6", "ptx"),  # plain PTX: the driver compiles it
        ("10.0", ["sm_80", "compute_90a"], "12.6", "none"),  # arch-specific PTX runs on 9.0 only
        ("9.0", ["sm_80", "compute_90a"], "12.6", "ptx"),
        ("8.7", ["sm_80", "sm_86"], "12.6", "none"),  # a Jetson Orin
        ("8.7", ["sm_80", "sm_86"], "13.2", "kernels"),  # CUDA 13.2 runs them there
        ("10.1", ["sm_110"], "13.0", "kernels"),  # 10.1 was renamed 11.0
        ("10.3", ["sm_100"], "13.0", "kernels"),
        ("9.0", [], "13.0", None),  # torch 2.7 lists nothing without a usable GPU
    ],
)
def test_arch_support(capability, arch_list, cuda, verdict):
    assert doctor_wheels.arch_support(capability, arch_list, cuda) == verdict


def test_arch_rule_mirrors_torchs_own_table(monkeypatch):
    """Every sm_XX code torch knows, against every compute capability: the same verdict as torch.cuda's."""
    import torch

    compatible = getattr(torch.cuda, "_code_compatible_with_device", None)
    if compatible is None or not hasattr(torch.cuda, "DEVICE_REQUIREMENT"):
        pytest.skip("this torch has no compatibility table (torch 2.7 checks only the oldest architecture)")
    devices = [10 * major + minor for major in range(3, 13) for minor in range(10)]
    for cuda in ("12.6", "13.2"):
        monkeypatch.setattr(torch.version, "cuda", cuda)
        for code in torch.cuda.DEVICE_REQUIREMENT:
            for device in devices:
                if {code, device} == {101, 110} and code != device:
                    continue  # Thor's 10.1, renamed 11.0 by CUDA 13: one GPU in torch 2.14's table, two in 2.11's
                assert doctor_wheels._kernels_run(code, device, cuda) == compatible(device, code), (cuda, code, device)


GTX_1080 = Gpu(0, "NVIDIA GeForce GTX 1080", 8.0, "6.1")


def test_gpu_too_old_for_the_wheel_fails_with_the_cu126_wheel(monkeypatch):
    torch_said = (
        "Found GPU0 NVIDIA GeForce GTX 1080 which is of compute capability (CC) 6.1.\nThe following list shows ..."
    )
    facts = replace(GPU_BOX, gpus=[GTX_1080], torch_warnings=[torch_said])
    checks = diagnose(facts)
    gpu = by_topic(checks)["GPU 0"]
    assert gpu.status == "FAIL"
    assert "compute capability 6.1: this PyTorch has no kernels for it (built for sm_75 sm_80" in gpu.detail
    assert "no kernel image is available for execution on the device" in gpu.detail
    assert "--index-url https://download.pytorch.org/whl/cu126" in gpu.fix and "COURSE_DEVICE=cpu" in gpu.fix
    assert "PyTorch warning" not in by_topic(checks), "torch's own warning says the same"
    assert exit_code(monkeypatch, facts) == 1


def test_gpu_newer_than_the_wheel_fails_with_a_newer_cuda_wheel():
    facts = replace(GPU_BOX, torch_version="2.7.1+cu126", torchvision_version="0.22.1+cu126", cuda_build="12.6")
    facts = replace(facts, gpus=[Gpu(0, "NVIDIA GeForce RTX 5090", 31.4, "12.0")])
    facts = replace(facts, cuda_arch_list=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"])
    gpu = by_topic(diagnose(facts))["GPU 0"]
    assert gpu.status == "FAIL" and "compute capability 12.0" in gpu.fix
    assert "--index-url https://download.pytorch.org/whl/cu130" in gpu.fix


def test_gpu_older_than_any_wheel_says_so():
    facts = replace(GPU_BOX, gpus=[Gpu(0, "Tesla K80", 11.2, "3.7")])
    gpu = by_topic(diagnose(facts))["GPU 0"]
    assert gpu.status == "FAIL" and "no PyTorch the course supports has kernels" in gpu.fix
    assert "--index-url" not in gpu.fix


def test_gpu_reached_only_through_ptx_warns():
    facts = replace(GPU_BOX, gpus=[Gpu(0, "NVIDIA RTX PRO 6000", 95.0, "12.0")], cuda_arch_list=["sm_90", "compute_90"])
    gpu = by_topic(diagnose(facts))["GPU 0"]
    assert gpu.status == "WARN" and "compiles the build's PTX" in gpu.detail


def test_gpu_arch_gathered_on_a_simulated_machine(monkeypatch):
    facts = gathered(monkeypatch, smi("GPU-aa11, 550.54.15, Sim 0"), cuda=1, capability=(6, 1),
                     arch_list=["sm_75", "sm_80", "sm_90"], gpu_name="Sim")  # fmt: skip
    assert facts.cuda_arch_list == ["sm_75", "sm_80", "sm_90"] and facts.gpus[0].capability == "6.1"
    assert by_topic(diagnose(facts))["GPU 0"].status == "FAIL"


def test_gpu_with_kernels_keeps_its_plain_line():
    assert by_topic(diagnose(GPU_BOX))["GPU 0"] == Check(
        "OK", "GPU 0", "NVIDIA H200, 139.8 GiB, compute capability 9.0"
    )


# --- no nvidia-smi, CUDA_VISIBLE_DEVICES naming what is not there, ROCm --------------------------------


def test_cuda_working_without_nvidia_smi_is_fine():
    facts = replace(GPU_BOX, nvidia_smi="missing", driver_version=None, driver_cuda=None, smi_gpus=[], smi_uuids=[])
    checks = diagnose(facts)
    assert statuses(checks) == {"OK"}
    driver = by_topic(checks)["NVIDIA driver"]
    assert driver.detail.startswith("works") and "nothing to fix" in driver.detail and driver.fix is None


@pytest.mark.parametrize(
    "value, count, uuids, expected",
    [
        ("5", 1, [], ([], "there is no GPU 5")),
        ("0,5", 1, [], ([0], "there is no GPU 5")),
        ("1,0", 2, [], ([1, 0], None)),
        ("", 2, [], ([], None)),
        ("-1", 2, [], ([], None)),
        ("0,-1,1", 2, [], ([0], None)),
        ("cuda:0", 1, [], ([], "'cuda:0' is not a GPU index")),
        ("1gpu", 2, [], ([1], None)),  # read like strtoul
        ("0,0", 2, [], ([], "GPU 0 is named twice")),
        ("GPU-bb", 2, ["GPU-aa11", "GPU-bb22"], ([1], None)),  # a unique prefix
        ("GPU-cc33", 2, ["GPU-aa11", "GPU-bb22"], ([], "no GPU has the UUID 'GPU-cc33'")),
        ("GPU-", 2, ["GPU-aa11", "GPU-bb22"], ([], "'GPU-' matches 2 GPUs' UUIDs")),
        ("GPU-aa11", 1, [], None),  # UUIDs unknown
        ("MIG-1234", 1, ["GPU-aa11"], None),
    ],
)
def test_cvd_selects(value, count, uuids, expected):
    assert doctor_cuda.cvd_selects(value, count, uuids) == expected


@pytest.mark.parametrize("value", ["5", "0,5", "1,0", "", "-1", "0,-1,1", "cuda:0", "1gpu", "0,0", "2,1,0", " 1"])
def test_cvd_selects_as_torch_reads_the_variable(monkeypatch, value):
    """torch.cuda's own parser, cut at the first index past the GPUs as its NVML count does."""
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    for count in (1, 2, 3):
        listed = torch.cuda._parse_visible_devices()
        cut = next((i for i, index in enumerate(listed) if index >= count), len(listed))
        assert doctor_cuda.cvd_selects(value, count, [])[0] == listed[:cut], count


def test_cvd_naming_a_gpu_that_does_not_exist_says_which_exist(monkeypatch):
    facts = replace(GPU_UNSEEN, cuda_visible_devices="5")  # recorded: "No CUDA GPUs are available", count 0
    topics = by_topic(diagnose(facts))
    cuda = topics["CUDA"]
    assert cuda.status == "WARN"
    assert "CUDA_VISIBLE_DEVICES='5' hides every GPU: there is no GPU 5 (nvidia-smi lists 1 GPU: index 0)" in (
        cuda.detail
    )
    assert '"No CUDA GPUs are available"' in cuda.detail and "too old" not in cuda.detail
    assert "CUDA_VISIBLE_DEVICES=0" in cuda.fix and "nvidia-smi -L" in cuda.fix and "restart the kernel" in cuda.fix
    assert topics["CUDA_VISIBLE_DEVICES"].status == "WARN"
    assert exit_code(monkeypatch, facts) == 0


def test_cvd_the_recorded_machine_agrees():
    recorded = json.loads((course.ROOT / "tests" / "fixtures" / "gpu_error_messages.json").read_text())
    assert recorded["messages"]["cvd_missing"]["stdout"].startswith("available False count 0")
    assert simulate.NO_GPUS in recorded["messages"]["cvd_missing"]["stdout"]


def test_cvd_partly_past_the_gpus_warns_on_its_own_line():
    facts = replace(GPU_BOX, cuda_visible_devices="0,5")
    topics = by_topic(diagnose(facts))
    assert topics["CUDA"].status == "OK"
    cvd = topics["CUDA_VISIBLE_DEVICES"]
    assert cvd.status == "WARN" and "there is no GPU 5, so CUDA stops there and uses only GPU 0" in cvd.detail
    assert "nvidia-smi lists 1 GPU: index 0" in cvd.fix


def test_cvd_uuid_of_no_gpu_hides_them_all():
    facts = replace(GPU_UNSEEN, cuda_visible_devices="GPU-0000dead")
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.status == "WARN" and "no GPU has the UUID 'GPU-0000dead'" in cuda.detail


def test_cvd_naming_a_real_gpu_is_not_blamed_when_the_driver_is_too_old():
    facts = replace(GPU_UNSEEN, cuda_visible_devices="0", driver_cuda="12.4")
    topics = by_topic(diagnose(facts))
    assert "too old" in topics["CUDA"].detail and "hides" not in topics["CUDA"].detail
    assert topics["CUDA_VISIBLE_DEVICES"].status == "OK"


ROCM_BOX = replace(
    LAPTOP,
    torch_version="2.14.1+rocm6.4",
    torchvision_version="0.29.1+rocm6.4",
    hip_build="6.4",
    cuda_available=True,
    gpus=[Gpu(0, "AMD Instinct MI300X", 191.5, "9.4", "gfx942:sramecc+:xnack-")],
    accelerator="cuda",
    accelerator_available=True,
    course_device="cuda:0",
    course_device_detail="cuda:0 (AMD Instinct MI300X, 191.5 GiB, compute capability 9.4)",
    available_devices=["cuda:0", "cpu"],
)


def test_rocm_build_with_an_amd_gpu():
    checks = diagnose(ROCM_BOX)
    assert statuses(checks) == {"OK"}
    topics = by_topic(checks)
    assert topics["ROCm"].detail == (
        'ROCm 6.4 build: AMD GPUs appear as "cuda" devices in PyTorch (torch.cuda, device="cuda"); 1 GPU available'
    )
    assert topics["GPU 0"].detail == "AMD Instinct MI300X, 191.5 GiB, gfx942:sramecc+:xnack-"
    assert "CUDA" not in topics and "NVIDIA driver" not in topics


def test_rocm_build_without_a_gpu_gives_no_nvidia_advice():
    facts = replace(ROCM_BOX, cuda_available=False, gpus=[], course_device="cpu", course_device_detail="cpu")
    checks = diagnose(facts)
    rocm = by_topic(checks)["ROCm"]
    assert rocm.status == "OK" and "PyTorch sees no AMD GPU" in rocm.detail and "rocm-smi" in rocm.fix
    assert not any("nvidia" in f"{check.detail} {check.fix}".lower() for check in checks)


def test_rocm_build_on_a_machine_with_an_nvidia_gpu_warns():
    facts = replace(ROCM_BOX, cuda_available=False, gpus=[], nvidia_smi="ok", smi_gpus=["NVIDIA H200"])
    rocm = by_topic(diagnose(facts))["ROCm"]
    assert rocm.status == "WARN" and "--index-url https://download.pytorch.org/whl/cu126" in rocm.fix


def test_rocm_gathered_on_a_simulated_machine(monkeypatch):
    missing = lambda *args: ("missing", "nvidia-smi not found")  # noqa: E731
    facts = gathered(monkeypatch, missing, cuda=1, rocm="6.4", gpu_name="AMD Instinct MI300X")
    assert (facts.hip_build, facts.cuda_build, facts.cuda_arch_list) == ("6.4", None, [])
    assert facts.gpus[0].arch == "gfx942:sramecc+:xnack-"
    assert by_topic(diagnose(facts))["ROCm"].status == "OK"


# --- DataLoader workers, PYTORCH_ENABLE_MPS_FALLBACK, the order of the report -----------------------


@pytest.mark.parametrize(
    "platform, python, method",
    [("linux", (3, 13), "fork"), ("linux", (3, 14), "forkserver"), ("linux", (3, 15), "forkserver"),
     ("darwin", (3, 12), "spawn"), ("darwin", (3, 14), "spawn"), ("win32", (3, 11), "spawn")],
)  # fmt: skip
def test_default_start_method(platform, python, method):
    assert doctor_facts.default_start_method(platform, python) == method


def test_default_start_method_is_what_a_fresh_python_uses():
    code = "import multiprocessing as mp; print(mp.get_start_method())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == doctor_facts.default_start_method(sys.platform, sys.version_info[:2])


def test_gathering_the_start_method_does_not_set_it():
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    facts = Facts()
    doctor_facts._gather_start_method(facts)
    assert multiprocessing.get_start_method(allow_none=True) == before
    assert facts.start_method in ("fork", "spawn", "forkserver")


def test_fork_workers_are_fine_in_notebooks():
    workers = by_topic(diagnose(LAPTOP))["DataLoader workers"]
    assert workers.status == "OK" and "start method fork (this Python's default)" in workers.detail
    assert workers.fix is None


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_spawned_workers_get_the_notebook_tip(method):
    workers = by_topic(diagnose(replace(LAPTOP, start_method=method)))["DataLoader workers"]
    assert workers.status == "OK" and f"start method {method}" in workers.detail
    assert "fails with num_workers > 0" in workers.detail
    assert ".py module" in workers.fix and "num_workers=0" in workers.fix and "notebook 06" in workers.fix


MAC = replace(LAPTOP, torch_version="2.14.1", torchvision_version="0.29.1", mps_available=True, start_method="spawn")


def test_mps_fallback_unset_on_a_mac_says_when_to_set_it():
    check = by_topic(diagnose(MAC))["PYTORCH_ENABLE_MPS_FALLBACK"]
    assert check.status == "OK" and "raises NotImplementedError" in check.detail
    assert "before `import torch`" in check.fix and "restart the kernel" in check.fix


@pytest.mark.parametrize(
    "value, status, fragment",
    [("1", "OK", "on: operations MPS does not implement run on the CPU"), ("0", "OK", "off"),
     ("true", "WARN", "is not a number")],
)  # fmt: skip
def test_mps_fallback_value_is_read_as_torch_reads_it(value, status, fragment):
    check = by_topic(diagnose(replace(MAC, mps_fallback_env=value)))["PYTORCH_ENABLE_MPS_FALLBACK"]
    assert check.status == status and fragment in check.detail and "restart the kernel" in check.fix


def test_mps_fallback_line_only_where_it_matters(monkeypatch):
    assert "PYTORCH_ENABLE_MPS_FALLBACK" not in by_topic(diagnose(LAPTOP))
    check = by_topic(diagnose(replace(LAPTOP, mps_fallback_env="1")))["PYTORCH_ENABLE_MPS_FALLBACK"]
    assert "matters only on Apple MPS" in check.detail
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.setattr(doctor_facts, "_gather_nvidia", lambda facts: None)
    monkeypatch.setattr(doctor_facts, "_gather_torch", lambda facts: None)
    assert doctor.gather_facts().mps_fallback_env == "1"


def test_report_order():
    topics = [check.topic for check in diagnose(replace(MAC, mps_fallback_env="1", torch_warnings=["w"]))]
    assert topics == ["Python", "torch", "torchvision", "NVIDIA driver", "CUDA", "GPUs", "CUDA_VISIBLE_DEVICES",
                      "Apple MPS", "PYTORCH_ENABLE_MPS_FALLBACK", "torch.accelerator", "DataLoader workers",
                      "PyTorch warning", "course device"]  # fmt: skip


# --- for real ----------------------------------------------------------------------------------------


def run_doctor(**env: str) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k != "COURSE_DEVICE"} | env
    return subprocess.run(
        [sys.executable, "-m", "helpers", "doctor"],
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
                doctor_facts.SMI_QUERY: "GPU-aa11, 580.82, NVIDIA H100"}  # fmt: skip


@pytest.mark.parametrize("smi_sees_gpu", [False, True], ids=["no nvidia-smi", "nvidia-smi lists a GPU"])
def test_gather_facts_with_torch_failing_on_device_queries(monkeypatch, smi_sees_gpu):
    import torch

    def no_cuda():
        raise RuntimeError("CUDA driver initialization failed")

    def smi(*args):
        return ("ok", SMI_WITH_GPU[args]) if smi_sees_gpu else ("missing", "nvidia-smi not found")

    monkeypatch.setattr(doctor_facts, "_run_nvidia_smi", smi)  # whatever this machine has
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


def test_report_block_holds_nothing_private(monkeypatch):
    """--report's block names versions and hardware, never the user, their home folder or the machine."""
    import getpass
    import socket

    monkeypatch.setenv("HOME", "/home/ada.lovelace")
    monkeypatch.setattr(getpass, "getuser", lambda: "ada.lovelace")
    monkeypatch.setattr(socket, "gethostname", lambda: "adas-laptop.example")
    facts = doctor.Facts(
        torch_version="2.14.1+cu130",
        cuda_build="13.0",
        torch_warnings=["/home/ada.lovelace/.venv/lib/torch/cuda/__init__.py:63: UserWarning: CUDA initialization"],
        course_device="cpu",
        course_device_env="cuda:3",
        course_device_error="cuda:3 is not there on adas-laptop.example (ada.lovelace)",
    )
    block = doctor.report(facts, doctor.diagnose(facts) + [doctor.Check("WARN", "x", "/home/ada.lovelace/data")])
    assert block.startswith("```text\n") and block.endswith("\n```")
    assert "torch: 2.14.1+cu130 (CUDA 13.0 build)" in block and "COURSE_DEVICE: cuda:3" in block
    assert "[WARN] x: ~/data" in block
    for private in ("ada.lovelace", "adas-laptop", "/home/"):
        assert private not in block


def test_report_of_this_machine_holds_nothing_private():
    import getpass
    import socket

    result = subprocess.run(
        [sys.executable, "-m", "helpers", "doctor", "--report"], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.startswith("```text\nsystem: ") and "course device: " in result.stdout
    for private in (os.path.expanduser("~"), getpass.getuser(), socket.gethostname()):
        if len(private) > 1:
            assert private not in result.stdout
