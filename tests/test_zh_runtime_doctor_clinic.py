"""The zh-CN edition of the doctor, the error clinic and the known-error notes: Chinese explanations, PyTorch's
own error text quoted untranslated (a learner searches for it), and the English unchanged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.clinic import doctor, known_errors
from helpers.clinic.doctor import diagnose, render
from helpers.clinic.known_errors import KNOWN_ERRORS
from helpers.course.i18n import columns, tr
from helpers.lab import simulate
from tests.test_doctor import GPU_BOX, GPU_UNSEEN, LAPTOP, by_topic
from tools import course

CJK = re.compile(r"[\u4e00-\u9fff]")
SAME_DEVICE = (
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
    "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)"
)
STATUS = {"OK": "[正常]", "WARN": "[警告]", "FAIL": "[失败]"}


@pytest.fixture
def zh(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")


def run_doctor(*args: str, lang: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_LANG": lang}
    return subprocess.run(
        [sys.executable, "-m", "helpers", "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=course.ROOT,
        input=stdin,
        timeout=300,
        check=False,
    )


# --- the doctor -------------------------------------------------------------------------------------------------------


def test_doctor_on_this_machine_speaks_chinese():
    chinese, english = run_doctor(lang="zh-CN"), run_doctor(lang="en")
    assert chinese.returncode == english.returncode == 0, chinese.stderr
    lines = chinese.stdout.splitlines()
    assert len(lines) == len(english.stdout.splitlines()), "the same report, line for line"
    assert (
        lines[0].startswith("[正常] Python：")
        and lines[-1].startswith("[正常] 课程设备：")
        and lines[-1].endswith("）")
    )
    assert all(CJK.search(line) for line in lines), chinese.stdout
    assert "[OK]" in english.stdout and not CJK.search(english.stdout)


def test_doctor_report_block_in_chinese():
    block = run_doctor("--report", lang="zh-CN").stdout
    assert block.startswith("```text\n系统：") and "torch：" in block and "课程设备：" in block
    assert "COURSE_DEVICE：" in block and "CUDA_VISIBLE_DEVICES：" in block  # names stay as they are


def test_doctor_help_in_chinese():
    helped = run_doctor("--help", lang="zh-CN").stdout
    assert "--explain MESSAGE" in helped and "解释一条粘贴进来的错误信息" in helped


CPU_WHEEL_ON_GPU = replace(GPU_UNSEEN, torch_version="2.14.1+cpu", torchvision_version="0.29.1+cpu", cuda_build=None)
DRIVER_SAID = "CUDA initialization: The NVIDIA driver on your system is too old (found version 12040)."
MACHINES = {  # what goes wrong, the line it shows on, what that line says in Chinese, what stays as it was
    "cpu-wheel": (
        replace(CPU_WHEEL_ON_GPU, driver_cuda="12.8"),
        "CUDA",
        "WARN",
        "只支持 CPU 的 PyTorch 构建",
        "whl/cu126",
    ),
    "cvd-hides": (
        replace(GPU_UNSEEN, cuda_visible_devices=""),
        "CUDA",
        "WARN",
        "隐藏了所有 GPU",
        "No CUDA GPUs are available",
    ),
    "driver-old": (
        replace(GPU_UNSEEN, driver_cuda="12.4", torch_warnings=[DRIVER_SAID]),
        "CUDA",
        "WARN",
        "太旧",
        DRIVER_SAID,
    ),
    "cannot-start": (
        replace(GPU_UNSEEN, cuda_init_error=simulate.UNKNOWN_ERROR),
        "CUDA",
        "WARN",
        "无法启动",
        simulate.UNKNOWN_ERROR,
    ),
    "torchvision": (
        replace(LAPTOP, torchvision_version="0.28.0+cpu"),
        "torchvision",
        "FAIL",
        "不匹配",
        '"torchvision==0.29.*"',
    ),
    "no-torch": (
        replace(LAPTOP, torch_version=None, torch_error="ModuleNotFoundError: No module named 'torch'"),
        "torch",
        "FAIL",
        "没有安装",
        "No module named 'torch'",
    ),
    "old-gpu": (
        replace(GPU_BOX, gpus=[doctor.Gpu(0, "Tesla K80", 11.2, "3.7")]),
        "GPU 0",
        "FAIL",
        "没有它的核函数",
        "no kernel image is available for execution on the device",
    ),
    "spawn": (replace(LAPTOP, start_method="spawn"), "DataLoader workers", "OK", "启动方式 spawn", "num_workers=0"),
    "mps-fallback": (
        replace(LAPTOP, mps_fallback_env="yes"),
        "PYTORCH_ENABLE_MPS_FALLBACK",
        "WARN",
        "不是数字",
        "std::stoi",
    ),
}


@pytest.mark.parametrize("name", MACHINES)
def test_doctor_problems_and_fixes_in_chinese(zh, name):
    facts, topic, status, said, kept = MACHINES[name]
    checks = diagnose(facts)
    check = by_topic(checks)[topic]
    assert check.status == status
    text = f"{check.detail} {check.fix or ''}"
    assert said in text and kept in text, text
    lines = render(checks).splitlines()
    assert all(CJK.search(line) for line in lines), "every line of the report is Chinese"
    assert sum(line.startswith(STATUS[status]) for line in lines) >= 1
    fixes = [line for line in lines if line.startswith(" " * 7)]
    assert all(line.strip().startswith(("建议：", "修复：")) for line in fixes) and fixes


def test_doctor_english_is_untouched_by_the_catalog():
    facts = replace(GPU_UNSEEN, driver_cuda="12.4", torch_warnings=[DRIVER_SAID])
    cuda = by_topic(diagnose(facts))["CUDA"]
    assert cuda.detail.startswith(
        "CUDA 13.0 build, but the NVIDIA driver 580.65.06 is too old for it: it supports CUDA"
    )
    assert not CJK.search(render(diagnose(facts)))


def test_doctor_quotes_torchs_warning_once_in_chinese_too(zh):
    checks = diagnose(replace(GPU_UNSEEN, driver_cuda="12.4", torch_warnings=[DRIVER_SAID]))
    assert "PyTorch warning" not in by_topic(checks), "the CUDA line already quotes it"
    assert f"PyTorch 的原话：{DRIVER_SAID}" in by_topic(checks)["CUDA"].detail


def test_doctor_course_device_line_keeps_the_pickers_problem_and_gives_one_fix(zh):
    """The device picker's message (its own catalog) ends with a fix; the doctor shows the problem and its own fix."""
    problem = tr("cuda was asked for, but PyTorch sees no CUDA GPU")
    message = tr(doctor.DEVICE_ERROR_TEMPLATE, source="COURSE_DEVICE='cuda'", problem=problem, fix="x")
    assert CJK.search(message), "the device picker's template is translated"
    facts = replace(LAPTOP, course_device_env="cuda", course_device_error=message)
    check = by_topic(diagnose(facts))["course device"]
    assert check.status == "FAIL" and check.detail == message[: message.index(problem) + len(problem)]
    assert check.fix.startswith("取消设置 COURSE_DEVICE（`unset COURSE_DEVICE`）") and check.fix.endswith("中的一个。")


# --- --explain and the notes ------------------------------------------------------------------------------------------


def test_explain_a_pasted_message_in_chinese():
    explained = run_doctor("--explain", SAME_DEVICE, lang="zh-CN")
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0] == "[设备报错诊所] Expected all tensors to be on the same device"  # PyTorch's words, as written
    assert lines[1].startswith("含义：一次运算用到的张量不在同一个设备上")
    assert (
        any(line.startswith("修复方法：") for line in lines) and "x, y = x.to(device), y.to(device)" in explained.stdout
    )
    assert lines[-1] == "相关课程：第 03 课（torch.device 对象）第 8 节；第 09 课（设备报错诊所）第 2 节"
    english = run_doctor("--explain", "-", lang="en", stdin=SAME_DEVICE).stdout
    assert english.startswith("[device error clinic] Expected all tensors") and not CJK.search(english)


def test_explain_an_unknown_message_in_chinese():
    unknown = run_doctor("--explain", "ValueError: something else", lang="zh-CN")
    assert unknown.returncode == 1
    assert (
        unknown.stdout.strip()
        == "这条报错不在设备报错诊所的已知列表里。可以运行 `python -m helpers doctor` 检查这台机器。"
    )


@pytest.mark.parametrize("entry", KNOWN_ERRORS, ids=[e.key for e in KNOWN_ERRORS])
def test_every_known_error_note_in_chinese(zh, entry):
    note = known_errors.render(entry)
    lines = note.splitlines()
    title = tr(entry.title)
    assert lines[0] == f"[设备报错诊所] {title}"
    assert title.startswith(entry.title.split(" (")[0]), "the error's own words stay untranslated"
    for text in (entry.meaning, entry.fix, entry.lesson):
        chinese = tr(text)
        assert chinese != text and CJK.search(chinese), text
        assert "".join(chinese.split()) in "".join(note.split()), "nothing cut off by the wrapping"
    assert not any(word in note for word in ("What this means", "How to fix", "Learn more", "notebook 0"))
    assert all(columns(line) <= 100 or " " not in line.strip() for line in lines[1:]), "wrapped at 100 columns"
    if not entry.shown:
        assert "没有哪一课演示这条错误信息本身" in "".join(note.split("相关课程：")[-1].split())


def test_chinese_wrapping_never_splits_code_or_starts_a_line_with_punctuation():
    text = "修复方法：" + "把这一步用到的所有东西都移到同一个设备上，" * 6 + "x, y = x.to(device), y.to(device)；" * 3
    lines = known_errors.fill(text).splitlines()
    assert len(lines) > 1 and all(columns(line) <= 100 for line in lines)
    assert not any(line.strip()[0] in known_errors.CLOSING for line in lines[1:])
    assert all(line.startswith("  ") for line in lines[1:])
    assert "".join("".join(lines).split()) == "".join(text.split())
    assert "\n".join(lines).count("x.to(device)") == text.count("x.to(device)"), "code is never cut"


def test_chinese_wrapping_breaks_between_phrases_never_inside_a_word(zh):
    """A Chinese line ends at punctuation or where Chinese meets code or English: 报错, 环境变量, 不管 stay whole."""
    text = (
        "修复方法：把同一个批次放到 CPU 上跑一遍（对模型和张量都调用 .cpu()），CPU 会在出错的那一行给出看得懂的报错，"
        "例如 IndexError: Target 10 is out of bounds；也可以设置环境变量 CUDA_LAUNCH_BLOCKING=1 再启动进程，"
        "这样堆栈回溯会指向真正出错的操作；不管机器上装了什么显卡，它都用不了 NVIDIA GPU，所以课程在 CPU 上。"
    )
    for width in range(40, 101, 3):
        lines = known_errors.fill(text, width=width).splitlines()
        assert len(lines) > 2 and all(columns(line) <= width for line in lines), width
        assert "".join("".join(lines).split()) == "".join(text.split()), "nothing lost or added"
        for before, after in zip(lines, lines[1:], strict=False):
            end, start = before[-1], after.strip()[0]
            assert not (CJK.search(end) and CJK.search(start)) or end in known_errors.CLOSING, (width, before, after)
        assert all(len(CJK.findall(line.strip().rstrip(known_errors.CLOSING))) != 1 for line in lines), width
    note = "\n".join(known_errors.render(entry) for entry in KNOWN_ERRORS)
    for word in ("报错", "环境变量", "不管", "重新安装", "无条件"):
        joined = "".join(note.split())
        assert joined.count(word) == note.count(word), f"{word} cut across two lines"


def test_chinese_wrapping_keeps_particles_and_code_lists_with_their_code(zh):
    """No line starts with 的 or 会 right after code or English, and a list of code names joined by 、 is not cut."""
    listed = "'gpu'、'CUDA:0'、'cuda0'、mat1、mat2、target、weight"
    text = (
        "修复方法：先对模型和张量调用 .cpu() 会在出错的那一行给出看得懂的报错，torch.cuda.is_available() 的返回值"
        f"决定用哪个设备；报错信息会写出参数名 {listed} 和设备，CUDA_LAUNCH_BLOCKING=1 会让堆栈回溯指向真正出错的运算，"
        "x.to(device) 的返回值要赋回变量，python -m helpers doctor 会帮你对比两者。"
    )
    for width in range(60, 101):  # the list alone is 52 columns
        lines = known_errors.fill(text, width=width).splitlines()
        assert len(lines) > 2 and all(columns(line) <= width for line in lines), width
        assert "".join("".join(lines).split()) == "".join(text.split()), "nothing lost or added"
        for before, after in zip(lines, lines[1:], strict=False):
            assert not (after.strip()[0] in "的会" and not CJK.search(before[-1])), (width, before, after)
            assert not before.endswith("、"), (width, before, after)
        assert any(listed in line for line in lines), (width, lines)
        assert any("python -m helpers doctor 会" in line for line in lines), "a command stays whole before 会"
    notes = [known_errors.render(entry) for entry in KNOWN_ERRORS]
    for note in notes:
        lines = note.splitlines()
        for before, after in zip(lines, lines[1:], strict=False):
            assert not (after.strip()[0] in "的会" and not CJK.search(before[-1])), (before, after)
            assert not (before.endswith("、") and not CJK.search(after.strip()[0])), (before, after)


def test_the_corpus_gets_the_right_note_in_chinese(zh):
    """Matching reads PyTorch's text only: every pasted message of the corpus gets its entry in Chinese too, and the
    note still holds the fix's word (code stays code; the English words of a fix read as the Chinese note says
    them)."""
    corpus = json.loads((course.ROOT / "tests" / "fixtures" / "real_error_messages.json").read_text(encoding="utf-8"))
    in_chinese = {"batch": "批", "From a script": "在脚本里", "reboot": "重启"}
    wrong = []
    for case in corpus["in_scope"]:
        entry = known_errors.match(case["message"])
        if entry is None or entry.key != case["key"]:
            wrong.append(f"{case['key']}: got {entry and entry.key}")
            continue
        word = in_chinese.get(case["fix_word"], case["fix_word"])
        if word not in known_errors.render(entry):
            wrong.append(f"{case['key']}: no {word!r} in the Chinese note")
    assert len(corpus["in_scope"]) >= 100 and not wrong, wrong
    assert all(known_errors.match(case["message"]) is None for case in corpus["out_of_scope"])


# --- the clinic in a notebook -----------------------------------------------------------------------------------------

DEEP = 'nn.Linear(3, 2).to("meta")(torch.ones(2, 3))  # a device mix-up raised inside torch.nn'


def test_clinic_note_and_traceback_line_in_chinese(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")  # the kernel inherits it, as the Chinese notebooks' setup sets it
    sources = ["import torch\nfrom torch import nn", "%load_ext helpers.clinic", DEEP, "%clinic full", "%clinic odd"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.cells[2].metadata["tags"] = ["raises-exception"]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(course.ROOT)}}).execute()
    outputs = nb.cells[2].outputs
    error = next(o for o in outputs if o.output_type == "error")
    note = "".join(o.text for o in outputs if o.output_type == "stream")
    assert error.ename == "RuntimeError" and "expected device" in error.evalue  # PyTorch's message, untranslated
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
    assert re.search(
        r"\[设备报错诊所\] 省略了 torch 和课程 helpers 内部的 \d+ 层调用帧：%tb 会打印完整的堆栈回溯。", traceback
    )
    assert note.startswith("[设备报错诊所] Expected all tensors to be on the same device\n含义：")
    assert "相关课程：第 03 课（torch.device 对象）第 8 节" in note
    assert nb.cells[3].outputs[0].text.strip() == "[设备报错诊所] 已知设备错误的堆栈回溯：完整显示。"
    assert nb.cells[4].outputs[0].text.strip() == "%clinic 的参数只能是 'full' 或 'short'。"


# --- checkpoints, training, train_tudui, launch -----------------------------------------------------------------------

TAKEN = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
)


def test_resume_training_refusal_in_chinese(zh, tmp_path):
    import torch

    from helpers.lesson import checkpoints
    from helpers.lesson.models import Tudui

    model = Tudui()
    path = checkpoints.save_training(tmp_path / "t.pt", model, torch.optim.SGD(model.parameters(), lr=0.01), epoch=1)
    with pytest.raises(ValueError) as refused:
        checkpoints.resume_training(path, Tudui(), torch.optim.SGD(Tudui().parameters(), lr=0.01), "meta")
    assert str(refused.value).startswith("在调用 resume_training 之前先把模型移到 meta（它现在在 cpu 上）")


def test_launch_advice_and_failure_in_chinese(zh):
    from helpers.distributed.launch import LaunchError, Run, port_in_use_advice

    advice = port_in_use_advice(TAKEN)
    assert advice.startswith("端口 29500 已被占用") and "--standalone" in advice and "MASTER_PORT" in advice
    with pytest.raises(LaunchError) as failed:
        Run("torchrun --master-port=29500 -m x", 1, "", TAKEN, 1.0).check()
    message = str(failed.value)
    assert message.startswith("`torchrun --master-port=29500 -m x` 退出，退出码为 1：\n")
    assert TAKEN in message and message.endswith(advice)  # torch's own words between, untranslated
    with pytest.raises(LaunchError, match=r"^`torchrun -m x` 超时："):
        Run("torchrun -m x", -9, "", "", 1.0, timed_out=True).check()


def test_history_summary_in_chinese(zh):
    from helpers.lesson.training import History

    history = History(data_name="CIFAR-10")
    assert history.summary() == "还没有训练任何一轮（CIFAR-10）"
    history.add(3, 1.23456, 1.5, 0.4567)
    assert history.summary() == "第 3 轮：训练损失 1.235，测试损失 1.500，测试准确率 45.7%（数据：CIFAR-10）"


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """Small synthetic data, in a folder of its own (as tests/test_train_tudui.py runs it)."""
    from helpers.lesson import data

    monkeypatch.setattr(data, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_train_tudui_speaks_chinese(zh, tiny, capsys):
    from helpers.distributed.train_tudui import main

    ckpt = tiny / "tudui.pt"
    common = ["--quick", "--device", "cpu", "--no-progress", "--checkpoint", str(ckpt), "--batch-size", "32"]
    assert main([*common, "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "设备：cpu" in out and "这些是在合成数据上的结果，不是 CIFAR-10 的结果。" in out
    assert "第 1 轮：训练损失 " in out and f"（已保存到 {ckpt}）" in out
    assert main([*common, "--epochs", "1"]) == 0
    assert "无需训练：1 轮中已完成 1 轮" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main([*common, "--lr", "0.1", "--epochs", "2"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "--lr 原来是 0.01，现在是 0.1" in err and "--no-resume" in err
    assert err.startswith("python -m helpers train-tudui: error: ") and "不能被这次运行续训" in err


def test_train_tudui_help_in_chinese():
    helped = subprocess.run(
        [sys.executable, "-m", "helpers", "train-tudui", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COURSE_LANG": "zh-CN"},
        cwd=course.ROOT,
        check=True,
    ).stdout
    assert "每个批次的图像数（默认：64，与原课程相同）" in helped and "示例：" in helped
    assert "python -m helpers train-tudui --device cuda:1 --preload" in helped  # the commands stay as they are
