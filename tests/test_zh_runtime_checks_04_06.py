"""The checks of notebooks 04-06 and the sync recorder speak Chinese (COURSE_LANG=zh-CN): every verdict and hint,
with PyTorch's own error text and the code they quote left exactly as they are, and still without a line of the
worked solution.

The wrong answers are the banks' (tests/test_exercises_04.py, 05, 06, read through tests/test_hints.py); a few
more raise a real PyTorch error, to show that its text reaches the learner untranslated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_exercises_04 as bank04
import test_exercises_05 as bank05
import test_exercises_06 as bank06
import test_hints
import torch

from helpers.course.i18n import tr
from helpers.exercises import ex04_modules, ex05_training, ex06_speed, heading, speed_amp, statement
from helpers.lab import sync_recorder
from helpers.lab.sync_recorder import CPU_INDICES, record_syncs
from helpers.lesson.devices import pick_device
from tools.translate import message_prose

MODULES = (ex04_modules, ex05_training, ex06_speed)
BESIDE = {ex06_speed: (speed_amp,)}  # the modules beside a lesson's checks that hold its exercises' diagnoses
CJK = re.compile(r"[\u4e00-\u9fff]")
SHAPES = "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"  # PyTorch's own words, on every torch


ENGLISH = set().union(
    *(message_prose(Path(m.__file__)) for m in (*MODULES, *BESIDE[ex06_speed], sync_recorder))
)  # English left means untranslated


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")


def _shape_error():
    return torch.ones(2, 3) @ torch.ones(2, 3)  # a real PyTorch error, raised by the learner's code


def _no_english_left(message: str) -> None:
    left = [english for english in ENGLISH if english in message]
    assert not left, f"English left in the Chinese feedback: {left}\n{message}"


def tries_again(feedback, capsys, *kept: str) -> str:
    """The verdict is a Chinese [再试一次] that keeps ``kept`` (PyTorch's words, code, Chinese facts) as they are."""
    printed = capsys.readouterr().out
    message = feedback.message
    assert not feedback, message
    assert str(feedback).startswith("[再试一次] ") and str(feedback) in printed, printed
    assert CJK.search(message.splitlines()[0]), message  # the verdict itself, not only the framework's labels
    _no_english_left(message)
    for text in kept:
        assert text in message, (text, message)
    return message


def passes(feedback, capsys, *kept: str) -> str:
    printed = capsys.readouterr().out
    assert feedback, feedback.message
    assert str(feedback).startswith("[通过] ") and str(feedback) in printed, printed
    assert CJK.search(feedback.message), feedback.message
    _no_english_left(feedback.message)
    for text in kept:
        assert text in feedback.message, (text, feedback.message)
    return feedback.message


# ---------------------------------------------------------------- every wrong answer of the banks, in Chinese

CASES = [case for case in test_hints._cases() if case.values[0].notebook in ("04", "05", "06")]


@pytest.mark.parametrize("exercise, args", CASES)
def test_wrong_answers_get_chinese_feedback_without_the_solution(exercise, args, capsys, monkeypatch):
    """The deeper level (hint=2) shows everything a check says: verdict, hint, section and the deeper hint."""
    test_hints._as_in_the_bank(exercise, monkeypatch)
    feedback = test_hints._feedback(exercise, args, 2, capsys)
    assert not feedback and str(feedback).startswith("[再试一次] "), feedback.message
    assert CJK.search(feedback.message.splitlines()[0]), feedback.message
    _no_english_left(feedback.message)
    assert "Hint:" not in feedback.message and "Where to look:" not in feedback.message
    text = test_hints._plain(str(feedback))
    assert not [key for key in exercise.keys if test_hints._plain(key) in text], feedback.message


def test_every_check_of_04_to_06_is_covered():
    covered = {case.values[0].check for case in CASES}
    for module in MODULES:
        for name, value in vars(module).items():
            if getattr(value, "is_exercise_check", False):
                assert name in covered, f"{module.__name__}.{name} has no wrong answer driven in Chinese"


def test_every_check_states_its_exercise_and_names_its_sections_in_chinese():
    for module in MODULES:
        checks = [v for v in vars(module).values() if getattr(v, "is_exercise_check", False)]
        assert checks and len(checks) == len(module.STATEMENTS), module.__name__
        for check in checks:
            english = statement(check.__wrapped__)
            assert english in module.STATEMENTS and CJK.search(tr(english)), (module.__name__, english)
        named = [vars(part).items() for part in (module, *BESIDE.get(module, ()))]
        sections = [see for items in named for name, see in items if name.startswith("SECTION") or name == "AMP_SEE"]
        assert sections, module.__name__
        for see in sections:
            assert CJK.search(heading(see)) and "`" not in heading(see), (module.__name__, see)


def test_an_answer_that_breaks_a_check_gets_the_exercise_in_chinese(capsys):
    class LenAsText(bank06.LoaderRandperm):
        def __len__(self):
            return "4"  # len() itself raises, inside the check

    tries_again(
        ex06_speed.device_loader(LenAsText),
        capsys,
        "无法检查你的答案：TypeError: ",
        "练习要求：`cls(images, labels, batch_size)`：遍历它会得到打乱顺序的 `(images, labels)` 批次",
    )


# ---------------------------------------------------------------- 04: buffers and predict


def test_04_standardize_in_chinese(capsys):
    tries_again(
        ex04_modules.standardize(bank04.StandardizePlainAttributes),
        capsys,
        "self.mean, self.std 都是普通的张量属性：.to(device) 不知道普通属性的存在",
        "回看：本课的“3. ",
    )
    tries_again(
        ex04_modules.standardize(bank04.StandardizeOneBuffer),
        capsys,
        "self.std 是一个普通的张量属性，不是缓冲区",
    )
    tries_again(
        ex04_modules.standardize(bank04.StandardizeFrozenParameters),
        capsys,
        "mean, std 都是 requires_grad=False 的 nn.Parameter 对象：现在不会被训练",
    )
    tries_again(
        ex04_modules.standardize(bank04.StandardizeStdNotSaved),
        capsys,
        "缓冲区 std 不在 state_dict() 里（persistent=False）",
        "提示：去掉 persistent=False",
    )
    tries_again(
        ex04_modules.standardize(bank04.StandardizeWrongFormula),
        capsys,
        "Standardize 对 [[3, 6, 11], [1, 2, 3]] 给出的是 [[4.0, 16.0, 64.0], [0.0, 0.0, 0.0]]，"
        "应该是 [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]。",
    )
    deeper = tries_again(ex04_modules.standardize(bank04.StandardizeParameters, hint=2), capsys)
    assert "进一步提示：nn.Module 有一个方法，可以把一个张量以某个名字注册为缓冲区" in deeper


def test_04_standardize_quotes_pytorchs_error_as_it_is(capsys):
    class Raises(bank04.StandardizeRight):
        def forward(self, x):
            return _shape_error()

    device = pick_device()
    tries_again(
        ex04_modules.standardize(Raises),
        capsys,
        f"执行 module.to({device}) 之后，用 {device} 上的输入调用它时，你的代码抛出了 RuntimeError: {SHAPES}",
    )


def test_04_predict_in_chinese(capsys):
    device = pick_device()
    tries_again(
        ex04_modules.predict(bank04.predict_input_only),
        capsys,
        "上：模型没有被移动。把模型和输入都移到 `device` 上",
    )
    tries_again(ex04_modules.predict(bank04.predict_model_only), capsys, "上，输入却不在：把输入也移过去")
    tries_again(
        ex04_modules.predict(bank04.predict_in_training_mode),
        capsys,
        f"在 {device} 上预测时：模型是在训练模式下运行的，所以 Dropout",
    )
    tries_again(
        ex04_modules.predict(bank04.predict_detach),
        capsys,
        "（之后调用 .detach() 会丢掉计算图，但计算图已经建好了）",
    )
    tries_again(ex04_modules.predict(bank04.predict_fetches_to_cpu), capsys, "你的输出却在 cpu 上。")


def test_04_right_answers_pass_in_chinese(capsys):
    passes(ex04_modules.standardize(bank04.StandardizeRight), capsys, "常量都是缓冲区")
    passes(ex04_modules.predict(bank04.predict_right), capsys, "这样的预测在哪里都能运行")


# ---------------------------------------------------------------- 05: method 1, weighted loss, ReLU


def test_05_method1_loop_in_chinese(capsys):
    tries_again(
        ex05_training.method1_loop(bank05.loop_method2),
        capsys,
        "上训练，你的模型参数却在",
        "方法二的循环自己决定设备（torch.cuda.is_available() 和 .cuda()），不理会 `device`。",
    )
    tries_again(ex05_training.method1_loop(bank05.loop_labels_not_moved), capsys, "但每个批次的标签还留在")
    tries_again(ex05_training.method1_loop(bank05.loop_inputs_not_moved), capsys, "但每个批次的输入还留在")
    tries_again(ex05_training.method1_loop(bank05.loop_inputs_not_kept), capsys, "但每个批次的输入和标签还留在")
    tries_again(
        ex05_training.method1_loop(bank05.loop_no_step), capsys, "参数没有变化：循环算出了损失，却从没更新过模型。"
    )


def test_05_method1_loop_quotes_pytorchs_error_as_it_is(capsys):
    def loop_raises(model, loss_fn, optimizer, train_dataloader, device):
        model.to(device)
        return _shape_error()

    device = pick_device()
    tries_again(
        ex05_training.method1_loop(loop_raises), capsys, f"在 {device} 上训练时，你的代码抛出了 RuntimeError: {SHAPES}"
    )


def test_05_weighted_loss_in_chinese(capsys):
    tries_again(
        ex05_training.weighted_loss(bank05.loss_not_moved),
        capsys,
        "类别权重却在 cpu 上",
        "“Expected all tensors to be on the same device”",  # PyTorch's words, quoted as they are
    )
    tries_again(
        ex05_training.weighted_loss(bank05.loss_float64),
        capsys,
        "类别权重是 torch.float64",
        "'expected scalar type Float but found Double'",
    )
    tries_again(ex05_training.weighted_loss(bank05.loss_proportional), capsys, "稀有的类别（truck，500 张图像）")
    tries_again(ex05_training.weighted_loss(bank05.loss_unweighted), capsys, "你的损失函数没有类别权重")


def test_05_tudui_relu_in_chinese(capsys):
    tries_again(
        ex05_training.tudui_relu(bank05.ReluOnlyInConvs),
        capsys,
        "两个 Linear 层之间没有任何非线性的东西",
    )
    tries_again(ex05_training.tudui_relu(bank05.SigmoidInstead), capsys, "你的模型用的是 sigmoid，不是 ReLU")
    tries_again(ex05_training.tudui_relu(bank05.ReluAtTheEnd), capsys, "你的模型以 ReLU 结尾")
    tries_again(ex05_training.tudui_relu(bank05.WiderHead), capsys, "Tudui 有 145,578 个：ReLU 不增加参数")
    tries_again(
        ex05_training.tudui_relu(bank05.LayerInForward),
        capsys,
        "  所有参数都在这个设备上，所以问题出在 forward() 里创建的某个层或张量",
    )

    tries_again(
        ex05_training.tudui_relu(bank05.OneReluOnly),
        capsys,
        "第 1 个卷积层、第 2 个卷积层、第 3 个卷积层之后没有 ReLU：练习要求每个卷积层之后都有一个。",
    )


def test_05_tudui_relu_quotes_pytorchs_error_as_it_is(capsys):
    class Raises(bank05.TuduiReLU):
        def forward(self, x):
            return _shape_error()

    device = pick_device()
    tries_again(
        ex05_training.tudui_relu(Raises),
        capsys,
        f"执行 model.to({device}) 之后，用 {device} 上的输入调用它，抛出了 RuntimeError: {SHAPES}",
    )


def test_05_right_answers_pass_in_chinese(capsys):
    passes(ex05_training.method1_loop(bank05.loop_method1), capsys, "方法一：由一个 `device` 决定所有东西在哪里运行")
    passes(ex05_training.weighted_loss(bank05.loss_right), capsys, "类别权重是损失函数的一个缓冲区")
    passes(ex05_training.tudui_relu(bank05.TuduiReLU), capsys, "参数还是那 145,578 个")


# ---------------------------------------------------------------- 06: syncs, a loader on the device, mixed precision


def test_06_quiet_loop_in_chinese(capsys):
    device = pick_device()
    tries_again(
        ex06_speed.quiet_loop(bank06.starter_loop),
        capsys,
        "你的循环做的主机同步随步数增长：5 步里 11 次，30 步里 63 次（.item() / float() / int() / bool() / "
        "对张量做 `if` 判断：多出的 25 步里多了 52 次）",
        f"这是在 {device} 上用 5 个和 30 个批次观察到的",
        "第 1 节的“隐式同步”",
    )
    tries_again(ex06_speed.quiet_loop(bank06.loop_if_each_step), capsys, "对张量做 `if` 判断：每步 1 次")
    tries_again(
        ex06_speed.quiet_loop(bank06.loop_zero_grad_between),
        capsys,
        "你的循环什么也没训练：梯度在优化器更新之前就被清空了",
    )
    tries_again(ex06_speed.quiet_loop(bank06.loop_no_divergence_check), capsys, "你的函数没有抛出 RuntimeError")


def test_06_quiet_loop_quotes_pytorchs_error_as_it_is(capsys):
    def loop_raises(model, batches, loss_fn, optimizer):
        return _shape_error()

    device = pick_device()
    tries_again(
        ex06_speed.quiet_loop(loop_raises),
        capsys,
        f"在 {device} 上用 5 个批次时，你的代码抛出了 RuntimeError: {SHAPES}",
    )


def test_06_device_loader_in_chinese(capsys):
    device = pick_device()
    tries_again(
        ex06_speed.device_loader(bank06.LoaderToCpu),
        capsys,
        f"读取一轮数据时（在 {device} 上，50 个样本，批大小 16），你的加载器一轮做了 8 次主机同步（.cpu()：8 次）",
    )
    tries_again(
        ex06_speed.device_loader(bank06.LoaderCpuIndices),
        capsys,
        "用 CPU 上的索引去索引设备上的张量，索引要先阻塞复制过去：",
        "在数据所在的设备上生成随机顺序（随机函数可以指定 device）。第 3 节的“把数据放在设备上”",
    )
    message = tries_again(
        ex06_speed.device_loader(bank06.LoaderIndexSelectCpu),
        capsys,
        "“Expected all tensors to be on the same device”",  # PyTorch's words, quoted as they are
    )
    if device.type == "cpu":  # seen on meta; a GPU raises PyTorch's error itself
        assert "你的加载器用 CPU 上的索引对设备数据调用 index_select()" in message, message
    tries_again(
        ex06_speed.device_loader(bank06.LoaderDropLast), capsys, "50 个里少了 2 个（最后那个较小的批次被丢掉了）"
    )
    tries_again(
        ex06_speed.device_loader(bank06.LoaderLenPlusOne), capsys, "48 个样本、批大小 16 时，你的加载器的 len() 是 4"
    )


def test_06_amp_step_in_chinese(capsys, monkeypatch):
    tries_again(ex06_speed.amp_step(bank06.amp_no_scaler), capsys, "GradScaler 从来没有用到")
    tries_again(ex06_speed.amp_step(bank06.amp_returns_scaled), capsys, "返回损失本身，而不是 scaler.scale(loss)")
    tries_again(
        ex06_speed.amp_step(bank06.amp_unscale_then_plain_step),
        capsys,
        "在一个梯度含有 inf 的步骤里",
        "回看：本课的“混合精度：torch.autocast”一节。",
    )
    deeper = tries_again(ex06_speed.amp_step(bank06.amp_plain_step, hint=2), capsys)
    assert "进一步提示：GradScaler 包住了训练步骤中的三个时刻" in deeper
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA autocast stays on, as on a CUDA machine
    tries_again(
        ex06_speed.amp_step(bank06.amp_cuda_hardcoded),
        capsys,
        "autocast 开启的设备类型为：'cuda'，而不是 'cpu'：它的 device_type 必须是张量所在设备的类型，这里是 'cpu'。",
    )


def test_06_right_answers_pass_in_chinese(capsys):
    passes(ex06_speed.quiet_loop(bank06.quiet_detach), capsys, "次主机同步，和 5 步时一样：每一步都没有同步")
    passes(ex06_speed.device_loader(bank06.LoaderRandperm), capsys, "数据放在代替 GPU 的 meta 上时也一样")
    passes(ex06_speed.amp_step(bank06.amp_standard), capsys, "带 inf 梯度的那一步被跳过了")


# ---------------------------------------------------------------- the sync recorder


def test_the_recorder_shows_its_log_in_chinese_and_keeps_english_names_to_compare():
    data = torch.arange(10.0, device="meta")
    with record_syncs() as log:
        torch.ones(3).sum().item()
        data[torch.arange(3)]
        data.index_select(0, torch.arange(3))
    assert log.events == [".item() / float() / int() / bool() / `if` on a tensor", CPU_INDICES]  # what checks compare
    assert str(log) == (
        ".item() / float() / int() / bool() / 对张量做 `if` 判断：1 次；"
        "用 CPU 上的索引去索引设备上的张量，索引要先阻塞复制过去：1 次"
    )
    assert log.mixed == ["用 CPU 上的索引对设备数据调用 index_select()"]
    with record_syncs() as quiet:
        torch.ones(3).sum()
    assert str(quiet) == "没有主机同步"


# ---------------------------------------------------------------- the speed ladder's table and the dataset's name


def test_the_ladder_table_lines_up_in_chinese():
    """Every row's numbers end in the same terminal column, whatever the width of a Chinese rung name."""
    from helpers.course.i18n import columns
    from helpers.lesson.speed import LadderResult, ladder

    rungs = ladder()
    names = [r.name for r in rungs if r.name != "compile"]
    ratios = dict(zip(names, (1.0, 1.1, 1.2, 1.3, 1.4, 1.5), strict=True))
    rounds = {n: [r] for n, r in ratios.items()}
    result = LadderResult(rungs, dict.fromkeys(names, 700.0), ratios, dict.fromkeys(names, 0.2), 4, 0.1,
                          {"compile": "quick"}, torch.device("cpu"), 1, rounds)  # fmt: skip
    lines = result.table().splitlines()
    assert "通道在后（channels_last）" in result.table() and "相对文章循环的倍数" in lines[0]
    ends = {columns(line[: line.index("%") + 1]) for line in lines[1:] if "%" in line}
    assert len(ends) == 1, lines  # the accuracy column ends in one column on every timed row


def test_the_synthetic_data_is_named_in_chinese_and_recorded_in_english():
    from helpers.lesson.data import SYNTHETIC_NAME, synthetic

    data = synthetic(quick=True)
    assert data.name == tr(SYNTHETIC_NAME) != SYNTHETIC_NAME and CJK.search(data.name)
    assert data.english_name == SYNTHETIC_NAME and not data.is_cifar10  # what a checkpoint keeps, in any language
