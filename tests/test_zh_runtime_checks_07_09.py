"""The checks of notebooks 07-09 speak Chinese (COURSE_LANG=zh-CN): every verdict and hint, with PyTorch's own
error text and the code they quote left exactly as they are, and still without a line of the worked solution.

The wrong answers are the banks' (tests/test_exercises_07.py, 08, 09, read through tests/test_hints.py); a few
more raise a real PyTorch error, to show that its text reaches the learner untranslated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import test_exercises_07 as bank07
import test_exercises_08 as bank08
import test_exercises_09 as bank09
import test_hints
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.course.i18n import tr
from helpers.exercises import clinic_checkpoints, clinic_training, ex07_memory, ex08_distributed, ex09_clinic, statement
from tools.translate import message_prose

MODULES = (ex07_memory, ex08_distributed, ex09_clinic)
CJK = re.compile(r"[\u4e00-\u9fff]")
SHAPES = "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"  # PyTorch's own words, on every torch


BESIDE = (clinic_training, clinic_checkpoints)  # lesson 09's exercises' diagnoses, beside its checks
ENGLISH = set().union(*(message_prose(Path(m.__file__)) for m in (*MODULES, *BESIDE)))  # English left: untranslated


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")


def _shape_error(*args):
    return torch.ones(2, 3) @ torch.ones(2, 3)  # a real PyTorch error, raised by the learner's code


def tries_again(feedback, capsys, *kept: str) -> str:
    """The verdict is a Chinese [再试一次] that keeps ``kept`` (PyTorch's words, code) as they are."""
    printed = capsys.readouterr().out
    message = feedback.message
    assert not feedback, message
    assert str(feedback).startswith("[再试一次] ") and str(feedback) in printed, printed
    assert CJK.search(message.splitlines()[0]), message  # the verdict itself, not only the framework's labels
    left = [english for english in ENGLISH if english in message]
    assert not left, f"English left in the Chinese feedback: {left}\n{message}"
    for text in kept:
        assert text in message, (text, message)
    return message


def passes(feedback, capsys) -> str:
    printed = capsys.readouterr().out
    assert feedback, feedback.message
    assert str(feedback).startswith("[通过] ") and str(feedback) in printed, printed
    assert CJK.search(feedback.message), feedback.message
    assert not [english for english in ENGLISH if english in feedback.message], feedback.message
    return feedback.message


# ---------------------------------------------------------------- every wrong answer of the banks, in Chinese

CASES = [case for case in test_hints._cases() if case.values[0].notebook in ("07", "08", "09")]


@pytest.mark.parametrize("exercise, args", CASES)
def test_wrong_answers_get_chinese_feedback_without_the_solution(exercise, args, capsys, monkeypatch):
    """The second level (message, hint and the deeper hint) in Chinese, and no key line of the worked solution."""
    test_hints._as_in_the_bank(exercise, monkeypatch)
    feedback = test_hints._feedback(exercise, args, 2, capsys)
    assert not feedback
    text = test_hints._plain(str(feedback))
    assert not [key for key in exercise.keys if test_hints._plain(key) in text], feedback.message
    assert CJK.search(feedback.message.splitlines()[0]), feedback.message
    assert not [english for english in ENGLISH if english in feedback.message], feedback.message


def test_every_check_of_07_to_09_is_covered():
    covered = {(case.values[0].notebook, case.values[0].check) for case in CASES}
    for notebook, module in zip(("07", "08", "09"), MODULES, strict=True):
        checks = {name for name, fn in vars(module).items() if getattr(fn, "is_exercise_check", False)}
        assert checks and {(notebook, name) for name in checks} <= covered


def test_every_check_states_its_exercise_in_chinese():
    """The could-not-be-checked hint quotes the exercise (the check's docstring): each is in the catalog."""
    for module in MODULES:
        checks = [v for v in vars(module).values() if getattr(v, "is_exercise_check", False)]
        assert checks and len(checks) == len(module.STATEMENTS), module.__name__
        for check in checks:
            english = statement(check.__wrapped__)
            assert english in module.STATEMENTS and CJK.search(tr(english)), (module.__name__, english)


def test_an_answer_that_breaks_a_check_gets_the_exercise_in_chinese(capsys):
    def device_by_a_made_up_name(env):
        return "gpu please", "nccl"  # torch.device() refuses it inside the check

    message = tries_again(
        ex08_distributed.rank_device(device_by_a_made_up_name), capsys, "RuntimeError: ", "gpu please"
    )
    assert "为 torchrun 以环境 `env`（一个字典）启动的进程返回 (device, backend)" in message


# ---------------------------------------------------------------- notebook 07: memory


def test_07_estimate_names_what_is_missing_and_shows_the_measured_table(capsys):
    message = tries_again(ex07_memory.training_memory(bank07.est_no_activations), capsys, "MiB")
    assert "真实训练一步" in message and "\n参数 " in message and "real step" not in message  # the table too
    assert "优化器：" in message and "激活值" in message and "torch.autograd.graph.saved_tensors_hooks" in message


def test_07_batch_finder_keeps_the_allocators_own_words(capsys):
    message = tries_again(ex07_memory.batch_finder(bank07.find_cuda_only), capsys, "MPS backend out of memory ...")
    assert "一台模拟的 Mac（MPS）" in message and "torch.OutOfMemoryError 只是 CUDA 的错误" in message
    tries_again(
        ex07_memory.batch_finder(bank07.find_out_of_memory_words), capsys, "DefaultCPUAllocator: can't allocate"
    )


def test_07_batch_finder_quotes_pytorchs_shape_error_as_it_is(capsys):
    message = tries_again(
        ex07_memory.batch_finder(bank07.find_catch_runtime), capsys, "RuntimeError: mat1 and mat2 shapes"
    )
    assert "这个错误被当成了内存不足" in message


def test_07_accumulation_peak_goes_deeper_in_chinese(capsys):
    first = tries_again(ex07_memory.accumulation(bank07.acc_summed_graph), capsys, "MiB")
    second = tries_again(ex07_memory.accumulation(bank07.acc_summed_graph, hint=2), capsys, "LiveBytes")
    assert "批次没有被拆开" in first and len(second) > len(first)


def test_07_right_answers_pass_in_chinese(capsys):
    assert "10%" in passes(ex07_memory.training_memory(bank07.est_helper), capsys)
    assert "模拟的 CUDA GPU" in passes(ex07_memory.batch_finder(bank07.find_while), capsys)
    assert "内存峰值" in passes(ex07_memory.accumulation(bank07.acc_chunk), capsys)


# ---------------------------------------------------------------- notebook 08: many processes


def test_08_rank_device_names_the_machine_and_keeps_pytorchs_error(capsys):
    message = tries_again(
        ex08_distributed.rank_device(bank08.device_from_rank), capsys, "LOCAL_RANK=2", "RuntimeError: "
    )
    assert "2 x 4 GPU 集群的第二个节点" in message and "RANK 是在所有机器上给进程编号" in message

    def negative_index(env):
        return torch.device("cuda", -1), "nccl"

    message = tries_again(ex08_distributed.rank_device(negative_index), capsys, "RuntimeError: Device index must")
    assert "一台只有 CPU 的笔记本电脑" in message


def test_08_train_epochs_in_chinese(capsys):
    message = tries_again(ex08_distributed.train_epochs(bank08.epochs_saves_everywhere), capsys)
    assert "rank 1 也保存了检查点" in message
    message = tries_again(ex08_distributed.train_epochs(bank08.epochs_set_epoch_at_the_end), capsys, "set_epoch()")
    assert "第 1 轮和第 2 轮（共 3 轮）顺序相同" in message


def test_08_train_epochs_says_which_rank_raised_pytorchs_error(capsys):
    message = tries_again(ex08_distributed.train_epochs(_shape_error), capsys, SHAPES)
    assert "作为 2 个进程中的 rank 0" in message


def test_08_load_ddp_checkpoint_in_chinese(capsys):
    message = tries_again(
        ex08_distributed.load_ddp_checkpoint(bank08.load_lstrip), capsys, "str.lstrip('module.')", "'0.weight'"
    )
    assert "它并不是去掉前缀" in message
    message = tries_again(ex08_distributed.load_ddp_checkpoint(_shape_error), capsys, f"RuntimeError: {SHAPES}")
    assert message.startswith("在没有 GPU 的机器上，你的代码抛出了")


def test_08_right_answers_pass_in_chinese(capsys):
    assert "5 台模拟的机器" in passes(ex08_distributed.rank_device(bank08.device_plain), capsys)
    assert "只有 rank 0 保存了检查点" in passes(ex08_distributed.train_epochs(bank08.epochs_fixed), capsys)
    assert "普通 Tudui" in passes(ex08_distributed.load_ddp_checkpoint(bank08.load_removeprefix), capsys)


# ---------------------------------------------------------------- notebook 09: the error clinic


def test_09_fixed_training_keeps_pytorchs_words(capsys):
    message = tries_again(
        ex09_clinic.fixed_training(bank09.starter_train, bank09.FixedNet),
        capsys,
        "“Expected all tensors to be on the same device”",
    )
    assert "标签和损失函数的类别权重留在了 cpu 上" in message
    message = tries_again(
        ex09_clinic.fixed_training(bank09.logs_numpy, bank09.FixedNet),
        capsys,
        "TypeError: can't convert meta device type tensor to numpy",
        "can't convert cuda:0 device type tensor to numpy",
    )
    assert "NumPy 数组存放在 CPU 的内存里" in message


def test_09_load_anywhere_in_chinese(capsys):
    message = tries_again(ex09_clinic.load_anywhere(bank09.load_lstrip), capsys, "str.lstrip('module.')", "'0.weight'")
    assert "普通 Tudui 的键是 'model.0.weight'" in message
    message = tries_again(ex09_clinic.load_anywhere(_shape_error), capsys, f"RuntimeError: {SHAPES}")
    assert message.startswith("在没有 GPU 的笔记本电脑上，对于一个普通 Tudui 的 state_dict，你的代码在加载时抛出了")


def _as_in_a_notebook(monkeypatch) -> None:
    """The bank's notebook classes and functions live in __main__, as a notebook cell defines them."""
    for obj in bank09.NOTEBOOK:
        monkeypatch.setattr(obj, "__module__", "__main__")
        monkeypatch.setattr(sys.modules["__main__"], obj.__qualname__, obj, raising=False)


def test_09_notebook_safe_loader_in_chinese(capsys, monkeypatch):
    _as_in_a_notebook(monkeypatch)
    message = tries_again(
        ex09_clinic.notebook_safe_loader(bank09.loader_notebook_spawn),
        capsys,
        "“DataLoader worker exited unexpectedly”",
        "“Can't get attribute ... on <module '__main__'>”",
    )
    assert "用 spawn 启动的工作进程" in message

    def shuffled_lambda(images, labels):
        return DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, collate_fn=_shape_error)

    tries_again(ex09_clinic.notebook_safe_loader(shuffled_lambda), capsys, f"RuntimeError: {SHAPES}")


def test_09_right_answers_pass_in_chinese(capsys):
    assert "meta" in passes(ex09_clinic.fixed_training(bank09.train_fixed, bank09.FixedNet), capsys)
    assert "携带代码的文件被拒绝了" in passes(ex09_clinic.load_anywhere(bank09.load_strip_loop), capsys)
    assert "没有工作进程" in passes(ex09_clinic.notebook_safe_loader(bank09.loader_no_workers), capsys)
