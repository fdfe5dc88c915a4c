"""The course speaks Chinese at run time (COURSE_LANG=zh-CN): the exercise framework, the checks of notebooks
00-03, the device picker's errors and the Colab hint.

Real wrong answers of the banks (tests/test_exercises_00.py to _03.py) are driven through the checks: the
feedback is Chinese, with the fixed run-time phrases ([通过], [再试一次], 提示：, 回看：, 卡住了？, 进一步提示：),
names the section by its Chinese heading, and quotes the error text of PyTorch (and Python) as it is.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest
import test_colab
import test_exercises_00 as bank00
import test_exercises_01 as bank01
import test_exercises_02 as bank02
import test_exercises_03 as bank03
import test_hints
import torch

from helpers import colab
from helpers.course import i18n
from helpers.exercises import (
    HEADINGS,
    NOT_WRITTEN,
    call_learner,
    exercise_check,
    failed,
    heading,
    passed,
    shown,
    statement,
)
from helpers.exercises import ex00_prerequisites as check00
from helpers.exercises import ex01_cuda as check01
from helpers.exercises import ex02_cpu as check02
from helpers.exercises import ex03_devices as check03
from helpers.lab.simulate import DRIVER_TOO_OLD, simulated_machine
from helpers.lesson import devices

in_colab, cuda_must_not_start = test_colab.in_colab, test_colab.cuda_must_not_start  # the fixtures, shared
CJK = re.compile(r"[\u4e00-\u9fff]")
CHECKS = [check00, check01, check02, check03]


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")


def chinese_heading(see: str) -> str:
    """The Chinese heading of a section as the learner reads it (from the notebooks' catalogs)."""
    return i18n.read_po(HEADINGS)[see].replace("`", "")


def try_again(feedback, *fragments: str) -> str:
    """A failed verdict in Chinese that contains every fragment; its message."""
    assert not feedback, feedback
    text = str(feedback)
    assert text.startswith("[再试一次] "), text
    assert CJK.search(feedback.message.splitlines()[0]), text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    return feedback.message


# --- the framework ------------------------------------------------------------------------------------------------


@exercise_check
def _demo(answer):
    return failed("在 meta 上出错了。", "想想在哪里。", more="更深的想法。", see=check01.SECTION_NO_GPU)


def _an_answer():
    pass


def test_verdict_lines_use_the_fixed_chinese_phrases(capsys):
    first = _demo(_an_answer)
    assert first.message.splitlines() == [
        "在 meta 上出错了。",
        "  提示：想想在哪里。",
        f"  回看：本课的“{chinese_heading(check01.SECTION_NO_GPU)}”一节。",
        "  卡住了？运行 check._demo(_an_answer, hint=2) 可以看到更深入的提示。",
    ]
    assert capsys.readouterr().out == f"[再试一次] {first.message}\n"
    second = _demo(_an_answer, hint=2)
    assert second.message.splitlines()[-1] == "  进一步提示：更深的想法。" and "卡住了" not in second.message
    assert str(passed("全对。")) == "[通过] 全对。"
    alone = failed("不对。", "一个提示。")
    assert "卡住了" not in alone.message
    assert "再调用一次这个检查并传入 hint=2" in failed("不对。", "提示", more="更多").message  # outside a check


def test_a_heading_is_found_with_or_without_its_backticks():
    want = chinese_heading("6. No usable GPU: what `.cuda()` answers")
    assert CJK.search(want) and "`" not in want
    assert heading("6. No usable GPU: what `.cuda()` answers") == want
    assert heading("6. No usable GPU: what .cuda() answers") == want  # as the learner reads it in English


def test_every_section_a_check_names_has_a_chinese_heading():
    for module in CHECKS:
        for name, see in vars(module).items():
            if name.startswith("SECTION"):
                assert CJK.search(heading(see)) and "`" not in heading(see), (module.__name__, name, see)


def test_not_written_and_no_deeper_hint():
    assert try_again(failed(NOT_WRITTEN)) == "还没有写：把 `raise NotImplementedError` 这一行换成你的代码。"
    _, problem = call_learner(bank01.unwritten, torch.zeros(1), "cpu")
    assert problem.message == "还没有写：把 `raise NotImplementedError` 这一行换成你的代码。"
    assert try_again(check00.visible_devices_quiz({"a": True}, hint=2)).startswith("请给出一个以 ['a', 'b', 'c', 'd']")
    level_two = check00.gpu_inventory(bank00.inventory_gigabytes, hint=2)
    try_again(level_two, "（这道练习没有更深入的提示：上面的提示就是全部。）")


def test_call_learner_quotes_the_error_of_pytorch_as_it_is():
    def adds_wrong_shapes():
        return torch.zeros(2) + torch.zeros(3)

    _, problem = call_learner(adds_wrong_shapes, when="在 CPU 上")
    message = try_again(problem, "在 CPU 上，你的代码抛出了 RuntimeError: The size of tensor a (2) must match")
    assert message.count("\n") == 0
    _, problem = call_learner(lambda: torch.zeros(1, device="meta").to("cpu"))
    try_again(
        problem,
        "你的代码抛出了 NotImplementedError: Cannot copy out of meta tensor; no data!",
        "meta 张量没有数据可复制：你的代码把张量从传给它的设备上移走了。",
    )


def test_meta_reads_as_standing_in_for_a_gpu():
    assert shown("meta") == "meta（代替 GPU）"
    assert shown("cpu") == "cpu"


def test_an_answer_that_breaks_the_check_gets_the_exercise_in_chinese():
    def inspects_pairs(fn):
        index, name, memory = fn()[0]
        return passed("可以")

    inspects_pairs.__doc__ = check01.move_to.__wrapped__.__doc__
    breaking = exercise_check(inspects_pairs)
    exercise = "练习要求：`fn(t, device)` 返回移到 `device` 上的 `t`；`t` 本身留在原处。"
    try_again(
        breaking(lambda: [(0, "Sim 0")]),
        "无法检查你的答案：ValueError: not enough values to unpack",  # Python's own words
        "检查一下你的代码返回值的类型和形状。" + exercise,
    )
    try_again(breaking(3), "请传入你的函数（或类）本身，而不是一个 int。" + exercise)


def test_every_check_states_its_exercise_in_chinese():
    """Each check's docstring has its Chinese in the module's STATEMENTS (tr_lazy): they stay in step."""
    for module in CHECKS:
        checks = [v for v in vars(module).values() if getattr(v, "is_exercise_check", False)]
        assert checks and len(checks) == len(module.STATEMENTS), module.__name__
        for check in checks:
            english = statement(check.__wrapped__)
            assert english in module.STATEMENTS, (module.__name__, english)
            assert CJK.search(i18n.tr(english)), english


def test_chinese_typography_drops_the_space_after_full_width_punctuation():
    feedback = check01.float_tensor_on(lambda values, device: torch.Tensor(values, device=device))
    try_again(feedback, "values=[1, 2, 3]、目标设备为 meta（代替 GPU）时，你的代码抛出了 RuntimeError: ")


# --- the checks of notebooks 00-03 ---------------------------------------------------------------------------------


def test_00_inventory_in_chinese():
    try_again(
        check00.gpu_inventory(bank00.inventory_unguarded),
        "（NVML 数出 2 块 GPU，CUDA 却无法启动）上，你的代码抛出了 RuntimeError: The NVIDIA driver on your system is "
        "too old",  # the error as PyTorch words it
        "提示：torch.cuda.device_count() 通过 NVML 计数，CUDA 用不了的 GPU（驱动太旧、环境损坏）也会算进去",
    )
    try_again(
        check00.gpu_inventory(lambda: [(0, torch.cuda.get_device_name(0), 1.0)]),
        "在一台没有 GPU 的机器上，你的代码抛出了",
        "提示：没有 GPU 时，先返回 []，不要去查名字：get_device_name(0) 会报错。",
    )
    try_again(check00.gpu_inventory(bank00.inventory_pairs), "有一项是 2 项的 tuple：(0, 'Sim 0')。", "三元组")
    try_again(check00.gpu_inventory(bank00.inventory_gigabytes), "GiB 显存；你的这一项写的是", "这是 GB（10**9 字节）")
    try_again(check00.gpu_inventory(bank00.inventory_hard_coded_24), "在一台有一块 GPU 的机器上，0 号 GPU 有 15.8 GiB")
    assert (
        check00.gpu_inventory(bank00.inventory_props_loop).message
        == "在没有 GPU、有一块 GPU 和有两块 GPU 的机器上都正确。"
    )


def test_00_choose_device_in_chinese():
    try_again(
        check00.choose_device(bank00.choice_counts_gpus),
        "在一台 NVIDIA 驱动对这个 PyTorch 来说太旧的机器（NVML 数出 2 块 GPU，CUDA 却无法启动）上，"
        "你选了 cuda，应该是 cpu。",
    )
    try_again(
        check00.choose_device(bank00.choice_mps_built_only),
        "的 Mac 电脑上，你选了 mps",
        "torch.backends.mps.is_available()",
    )
    try_again(check00.choose_device(lambda: "cuda"), "你返回的是字符串 'cuda'。", "用 torch.device(...) 把它包起来。")
    assert str(check00.choose_device(bank00.choice_chain)).startswith("[通过] 在全部 7 台模拟的机器上")


def test_00_quiz_and_its_scenarios_in_chinese():
    assert all(CJK.search(text) for text in check00.CVD_SCENARIOS.values())
    assert "os.environ['CUDA_VISIBLE_DEVICES'] = '1'" in check00.CVD_SCENARIOS["a"]
    assert "import torch" in repr(check00.CVD_SCENARIOS)
    message = try_again(
        check00.visible_devices_quiz({"a": True, "b": False, "c": True, "d": True}), "还不完全对：b, c。"
    )
    assert (
        "(b) import torch 不会初始化 CUDA" in message and "(c) is_available() 已经在这个进程里初始化了 CUDA" in message
    )
    try_again(
        check00.visible_devices_quiz({"a": True, "b": "yes", "c": False, "d": True}), "请用 True 或 False 回答 b。"
    )
    assert str(check00.visible_devices_quiz({"a": True, "b": True, "c": False, "d": True})).startswith(
        "[通过] 四题全对"
    )


def test_01_move_to_in_chinese():
    try_again(
        check01.move_to(bank01.move_forgets_assignment),
        "要求的是 meta（代替 GPU），你却返回了原张量，它仍在 cpu 上。",
        f"回看：本课的“{chinese_heading(check01.SECTION_THROWN_AWAY)}”一节。",
    )
    try_again(
        check01.move_to(bank01.move_assigns_data),
        "你的代码给 t.data 赋了值，被 PyTorch 拒绝：Attempted to call `variable.set_data(tensor)`",
    )
    try_again(check01.move_to(bank01.move_returns_nothing), "你的函数返回了 None。")
    try_again(
        check01.move_to(bank01.move_changes_dtype, hint=2),
        "移动后的张量和原张量不一样：torch.float64，形状 (3,)。",
        "（这道练习没有更深入的提示：上面的提示就是全部。）",
    )
    try_again(check01.move_to(bank01.move_forgets_assignment, hint=2), "进一步提示：对照第 2 节的 y = x.cuda()")
    assert str(check01.move_to(bank01.move_right)).startswith("[通过] 你的函数返回了位于指定设备")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_01_move_with_cuda_keeps_the_driver_error_in_english():
    message = try_again(
        check01.move_to(bank01.move_with_cuda), "把张量移到 cpu 时，你的代码抛出了 ", "点名要了 GPU（.cuda()）"
    )
    assert re.search(r"抛出了 \w+Error: [A-Za-z]", message)  # PyTorch's words, untranslated


def test_01_float_tensor_on_in_chinese():
    try_again(
        check01.float_tensor_on(lambda values, device: torch.tensor(values, device=device)),
        "你的张量的数据类型是 torch.int64，不是 torch.float32。",
        "torch.tensor 会从 Python 整数推断出 int64",
    )
    try_again(
        check01.float_tensor_on(lambda values, device: torch.Tensor(values, device=device)),
        "RuntimeError: legacy constructor expects device type: cpu",
        "torch.Tensor（大写 T）只能创建 CPU 张量",
    )
    assert str(check01.float_tensor_on(bank01.float_right)).startswith("[通过] float32，位于指定的设备上")


def test_02_to_numpy_in_chinese():
    try_again(
        check02.to_numpy(lambda t: t.detach()),
        "输入是 cpu 上一个需要梯度（requires grad）的张量时，你返回的是张量，不是 NumPy 数组。",
    )
    try_again(check02.to_numpy(lambda t: t.numpy()), "RuntimeError: Can't call numpy() on Tensor that requires grad")
    try_again(
        check02.to_numpy(lambda t: t.detach().numpy()),
        "在 GPU 上 .numpy() 会报错 TypeError: can't convert cuda:0 device type tensor to numpy.",
    )


def test_02_sum_losses_in_chinese():
    try_again(
        check02.sum_losses(bank02.sum_item_every_step), "总和对了，但你的代码把数值复制到主机 20 次（20 x .item()）。"
    )
    try_again(check02.sum_losses(bank02.sum_keeps_graph), "但你的总和被自动求导跟踪着")
    per_element = check02.sum_losses(lambda losses: torch.tensor(losses).sum().item(), hint=2)
    message = try_again(
        per_element,
        "torch.tensor(losses) 会把这 20 个损失张量逐个读成 Python 数字",
        f"（见“{chinese_heading(check02.SECTION_SUM_DETACH)}”一节）",
    )
    quoted = re.search(r"PyTorch 还发出了警告：“(.+)”", message)  # torch 2.8+ warns, once per process
    assert quoted is None or quoted.group(1).startswith("Converting a tensor with requires_grad=True to a scalar")

    def reads_each_loss(losses):  # with the warning newer torch gives the first time, whatever this torch does
        warnings.warn(
            "Converting a tensor with requires_grad=True to a scalar may lead to unexpected behavior.", stacklevel=2
        )
        return torch.tensor(losses).sum().item()

    try_again(
        check02.sum_losses(reads_each_loss),
        "PyTorch 还发出了警告：“Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
        "behavior.”",  # PyTorch's own words, as they are
    )
    assert str(check02.sum_losses(bank02.sum_on_device)) == "[通过] 总和正确：在设备上相加，只取回了一次。"


def test_02_cpu_copy_in_chinese():
    try_again(
        check02.cpu_copy(lambda t: t.cpu()),
        "输入的张量已经在 CPU 上时，你的函数返回了张量本身（或它的一个视图）",
        f"回看：本课的“{chinese_heading(check02.SECTION_ITSELF)}”一节。",
    )
    more = try_again(check02.cpu_copy(lambda t: t.cpu(), hint=2), "进一步提示：")
    assert "第 01 课的第 4 节（已经在那儿了？那就不复制）" in more


def test_03_choose_device_in_chinese():
    try_again(
        check03.choose_device(bank03.choose_like_the_article),
        "应该得到 cuda:0，你返回的是 cuda。你的函数忽略了用户写的文本",
    )
    try_again(check03.choose_device(bank03.choose_falls_back_silently), "返回了 cpu：用户要的是一块并不存在的 GPU。")
    try_again(
        check03.choose_device(bank03.choose_checks_availability_itself),
        "在一台没有 GPU 的机器上，text='cuda:0' 抛出了 RuntimeError: CUDA is not available",
        "让 pick_device() 抛出它的 DeviceError",
    )
    try_again(
        check03.choose_device(bank03.choose_lowercase_only),
        "你的代码抛出了 DeviceError: 请求的设备：'cuda: 1' 不是 PyTorch 接受的设备名。请改写成 'cuda:1'。",
    )
    try_again(check03.choose_device(bank03.choose_returns_string), "你返回了 str 'cuda:0'，而不是 torch.device。")


def test_03_weighted_score_in_chinese():
    try_again(
        check03.weighted_score(bank03.score_weights_on_cpu),
        "x 在 meta（代替 GPU）上时，你的代码抛出了 RuntimeError: ",  # PyTorch's words follow, as they are
        f"回看：本课的“{chinese_heading(check03.SECTION_MIXED)}”一节。",
    )
    try_again(check03.weighted_score(bank03.score_casts_x), "x 为 float64、在 cpu 上时，你的结果是 torch.float32")
    try_again(check03.weighted_score(bank03.score_wrong_axis), "你的结果形状是 ()，而不是 (2,)。")
    assert str(check03.weighted_score(bank03.score_right)).startswith("[通过] 权重创建在 x 所在的设备上")


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize(
    "exercise, args", [c for c in test_hints._cases() if c.values[0].notebook in {"00", "01", "02", "03"}]
)
def test_chinese_feedback_never_prints_the_solution(exercise, args, level, capsys, monkeypatch):
    """tests/test_hints.py's rule, in Chinese: the starter and every wrong answer of the banks, at both levels."""
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    feedback = test_hints._feedback(exercise, args, level, capsys)
    text = str(feedback)
    assert text.startswith("[再试一次] ") and CJK.search(feedback.message.splitlines()[0]), text
    shown_keys = [key for key in exercise.keys if test_hints._plain(key) in test_hints._plain(text)]
    assert not shown_keys, f"the feedback prints the solution's {shown_keys}:\n{feedback}"
    for section in re.findall(r"回看：本课的“(.+)”一节。", text):
        assert CJK.search(section) and "`" not in section, section


# --- the device picker and the Colab hint -------------------------------------------------------------------------


def device_error(request=None, env: str = "", **machine) -> str:
    with simulated_machine(**machine), pytest.raises(devices.DeviceError) as err:
        if env:
            os.environ["COURSE_DEVICE"] = env  # the simulated machine starts without it
        devices.pick_device(request)
    assert CJK.search(str(err.value)), str(err.value)
    return str(err.value)


def test_device_errors_in_chinese(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    tail = "解决办法是从可用的设备中选一个；`python -m helpers doctor` 会说明它检查到的情况。"
    assert device_error("cuda:3", cuda=2) == (
        "请求的设备：cuda:3 不可用，因为这台机器只有 2 块 CUDA GPU，编号从 0 开始。"
        "这台机器上可用的设备有 cuda:0, cuda:1, cpu。" + tail
    )
    assert "这台机器只有 1 块 CUDA GPU" in device_error("cuda:1", cuda=1)
    assert "PyTorch 看不到任何 CUDA GPU" in device_error("cuda", cuda=0)
    assert "只支持 CPU 的构建" in device_error("cuda", cuda=0, cuda_build=False)
    assert "看不到任何 CUDA GPU" in device_error("cuda", cuda=2, cuda_init_error=DRIVER_TOO_OLD)
    assert "没有可用的 Apple MPS" in device_error("mps", cuda=0)
    assert device_error("GPU 0", cuda=1) == (
        "请求的设备：'GPU 0' 不是 PyTorch 接受的设备名。请改写成 'cuda:0'（PyTorch 把 NVIDIA GPU 叫作 'cuda'）。"
    )
    assert device_error("cuda0", cuda=1).endswith("请改写成 'cuda:0'。")
    assert "设备名全部小写，不含空格" in device_error("foo", cuda=1)
    assert "而不是 int" in device_error(3, cuda=1)
    monkeypatch.setenv("COURSE_DEVICE", "")  # restored after the test
    from_env = device_error(env="cuda:1", cuda=1)
    assert from_env.startswith("COURSE_DEVICE='cuda:1'：cuda:1 不可用")
    assert "取消设置 COURSE_DEVICE，或把它设为 'auto' 或 'cpu'" in from_env
    assert device_error(env="gpu", cuda=1).startswith("COURSE_DEVICE='gpu'：'gpu' 不是 PyTorch 接受的设备名。")


def test_describe_in_chinese():
    with simulated_machine(cuda=1, gpu_name="Fake GPU"):
        assert devices.describe(torch.device("cuda", 0)) == "cuda:0（Fake GPU 0，16.0 GiB，计算能力 8.9）"
    assert devices.describe(torch.device("mps", 0)) == "mps:0（通过 Metal 使用的 Apple GPU）"
    assert devices.describe(torch.device("cpu")) == "cpu"


@pytest.mark.usefixtures("in_colab", "cuda_must_not_start")
def test_colab_without_gpu_says_how_to_attach_one_in_chinese(tmp_path, monkeypatch, capsys):
    test_colab.fake_smi(tmp_path, monkeypatch, None)
    colab.setup(lang="zh-CN")
    out = capsys.readouterr().out
    assert out.startswith("这个 Colab 运行时没有连接 GPU") and len(out.splitlines()) == 3
    assert "Runtime > Change runtime type" in out and "Runtime > Run all" in out  # Colab's menus, as they read


@pytest.mark.usefixtures("in_colab", "cuda_must_not_start")
def test_colab_names_the_gpu_in_chinese(tmp_path, monkeypatch, capsys):
    test_colab.fake_smi(tmp_path, monkeypatch, 'echo "Tesla T4"')
    colab.setup(lang="zh-CN")
    assert capsys.readouterr().out == "Colab GPU 运行时：Tesla T4\n"
