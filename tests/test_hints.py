"""Hints teach without giving the answer away.

For every exercise: the key lines of its worked solution (``notebooks/solutions/NN_*_solutions.ipynb``),
and the feedback, at both hint levels, of the notebook's unsolved starter and of every wrong answer in
the exercise's bank (``tests/test_exercises_NN.py``, read from its parametrized ``rejects`` tests, so the
bank is reused, not copied). None of the feedback may contain a key line: a learner who pastes a hint must
still have to think. Keys are compared without whitespace and with one kind of quote, so ``t.to( device )``
and ``t.to(device)`` are the same line.

To cover another exercise, add an :class:`Exercise` to ``EXERCISES``: the notebook's number, the check's
name, the bank's test functions and the solution's key lines.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from helpers.exercises import Feedback, exercise_check, failed

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Exercise:
    notebook: str  # "01"
    check: str  # the check's name in helpers.exercises.exNN_*
    banks: tuple[str, ...]  # the bank's test functions whose parameters are wrong answers
    keys: tuple[str, ...]  # lines (or calls) of the worked solution that no feedback may print
    teaches: bool = True  # feedback names the notebook's section and offers a second level
    extra_names: dict = field(default_factory=dict, hash=False)  # what the starter cell needs besides torch, nn


EXERCISES = [
    Exercise("01", "move_to", ("test_move_to_rejects", "test_move_to_rejects_more"), ("t.to(device)",)),
    Exercise(
        "01",
        "float_tensor_on",
        ("test_float_tensor_on_rejects", "test_float_tensor_on_rejects_more"),
        (
            "torch.tensor(values, dtype=torch.float32, device=device)",
            "torch.tensor(values, device=device, dtype=torch.float32)",
            "device=device, dtype=torch.float32",
            "dtype=torch.float32, device=device",
        ),
    ),
    Exercise(
        "02",
        "to_numpy",
        ("test_to_numpy_rejects", "test_to_numpy_rejects_more"),
        (".detach().cpu().numpy()", ".cpu().detach().numpy()", ".numpy(force=True)"),
    ),
    Exercise(
        "02",
        "sum_losses",
        ("test_sum_losses_rejects", "test_sum_losses_rejects_more"),
        (
            "total += loss.detach()",
            "total = total + loss.detach()",
            "torch.stack(losses).detach().sum().item()",
            "sum(loss.detach() for loss in losses).item()",
            "total.item()",
        ),
    ),
    Exercise(
        "02",
        "cpu_copy",
        ("test_cpu_copy_rejects", "test_cpu_copy_rejects_more"),
        ("copy=True", ".cpu().clone()", ".clone().cpu()"),
    ),
    Exercise(
        "03",
        "choose_device",
        ("test_choose_device_rejects", "test_choose_device_rejects_more"),
        (
            "''.join(text.split())",
            "text.replace(' ', '')",
            "pick_device(text)",
            "pick_device('auto')",
            "'cuda' + text[",
        ),
    ),
    Exercise(
        "03",
        "weighted_score",
        ("test_weighted_score_rejects", "test_weighted_score_rejects_more"),
        ("x.new_tensor([0.2, 0.3, 0.5])", "device=x.device, dtype=x.dtype", "dtype=x.dtype, device=x.device"),
    ),
    Exercise(
        "04",
        "standardize",
        ("test_standardize_rejects", "test_standardize_rejects_more"),
        (
            "self.register_buffer('mean', mean)",
            "self.register_buffer('std', std)",
            "(x - self.mean) / self.std",
        ),
    ),
    Exercise(
        "04",
        "predict",
        ("test_predict_rejects", "test_predict_rejects_more"),
        (
            "x = x.to(device)",
            "model.to(device)",
            "model.eval()",
            "with torch.no_grad(): return model(x)",
            "return model(x)",
        ),
    ),
    Exercise(
        "05",
        "method1_loop",
        ("test_method1_rejects", "test_method1_rejects_more"),
        (
            "imgs = imgs.to(device)",
            "targets = targets.to(device)",
            "tudui = tudui.to(device)",
            "model = model.to(device)",
            "loss_fn = loss_fn.to(device)",
        ),
    ),
    Exercise(
        "05",
        "weighted_loss",
        ("test_weighted_loss_rejects", "test_weighted_loss_rejects_more"),
        (
            "counts.sum() / (len(counts) * counts)",
            "1 / counts",
            "nn.CrossEntropyLoss(weight=weight).to(device)",
            "torch.tensor(class_counts, dtype=torch.float32)",
        ),
    ),
    Exercise(
        "05",
        "tudui_relu",
        ("test_relu_rejects", "test_relu_rejects_more"),
        (
            "nn.Conv2d(3, 32, 5, 1, 2), nn.ReLU()",
            "nn.Linear(64 * 4 * 4, 64), nn.ReLU()",
            "nn.Linear(1024, 64), nn.ReLU()",
        ),
    ),
]


# Notebooks 00 and 06-10: their checks' wording is their own (no second level required), but they print no
# solution either.
EXERCISES += [
    Exercise(
        "00",
        "gpu_inventory",
        ("test_inventory_rejects",),
        ("torch.cuda.get_device_properties(i)", "props.total_memory / 2**30"),
        teaches=False,
    ),
    Exercise(
        "00",
        "choose_device",
        ("test_choose_device_rejects",),
        ("if torch.backends.mps.is_available():", 'return torch.device("mps")'),
        teaches=False,
    ),
    Exercise(
        "00",
        "visible_devices_quiz",
        ("test_quiz_rejects",),
        ('{"a": True, "b": True, "c": False, "d": True}',),
        teaches=False,
    ),
    Exercise(
        "06",
        "quiet_loop",
        ("test_quiet_loop_explains",),
        (
            "total = total + loss.detach()",
            "worst = torch.maximum(worst, loss.detach())",
            "return total.item() / len(batches)",
        ),
        teaches=False,
    ),
    Exercise(
        "06",
        "device_loader",
        ("test_device_loader_explains",),
        (
            "torch.randperm(len(self.labels), device=self.labels.device)",
            "(len(self.labels) + self.batch_size - 1) // self.batch_size",
        ),
        teaches=False,
    ),
    Exercise(
        "06",
        "amp_step",
        ("test_amp_step_explains",),
        (
            "scaler.scale(loss).backward()",
            "scaler.step(optimizer)",
            "with torch.autocast(device_type=device.type, dtype=dtype):",
        ),
        teaches=False,
    ),
    Exercise(
        "07",
        "training_memory",
        ("test_training_memory_explains",),
        (
            "torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)",
            "trainable * (1 + STATE_COPIES[optimizer_name])",
        ),
        teaches=False,
    ),
    Exercise(
        "07",
        "batch_finder",
        ("test_batch_finder_explains",),
        ("except torch.OutOfMemoryError:", "size //= 2"),
        teaches=False,
    ),
    Exercise(
        "07",
        "accumulation",
        ("test_accumulation_explains",),
        ("(loss_fn(model(x), y) / micro_batches).backward()", "imgs.chunk(micro_batches)"),
        teaches=False,
    ),
    Exercise(
        "08",
        "rank_device",
        ("test_rank_device_rejects",),
        ('int(env["LOCAL_RANK"])', 'torch.device("cuda", local_rank)', 'return torch.device("cpu"), "gloo"'),
        teaches=False,
    ),
    Exercise("08", "train_epochs", ("test_train_epochs_rejects",), ("sampler.set_epoch(epoch)",), teaches=False),
    Exercise(
        "08",
        "load_ddp_checkpoint",
        ("test_load_ddp_checkpoint_rejects",),
        ('consume_prefix_in_state_dict_if_present(state, "module.")',),
        teaches=False,
    ),
    Exercise(
        "09",
        "fixed_training",
        ("test_fixed_training_rejects",),
        (
            "self.classifier = nn.Linear(16, 10)",
            "model = make_model().to(device)",
            "nn.CrossEntropyLoss(weight=class_weights).to(device)",
            "losses.append(loss.item())",
        ),
        teaches=False,
    ),
    Exercise(
        "09",
        "load_anywhere",
        ("test_load_anywhere_rejects",),
        ('key.startswith(("module.", "_orig_mod."))', "{plain_key(k): v for k, v in state.items()}"),
        teaches=False,
    ),
    Exercise(
        "09",
        "notebook_safe_loader",
        ("test_notebook_safe_loader_rejects",),
        ("DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True, num_workers=2)",),
        teaches=False,
    ),
    Exercise(
        "10",
        "device_line",
        ("test_device_line_rejects",),
        ('else "mps" if torch.backends.mps.is_available() else "cpu"',),
        teaches=False,
    ),
    Exercise(
        "10",
        "ported_method2",
        ("test_ported_method2_rejects",),
        ("imgs = imgs.to(device)", "outputs.argmax(1)[:4].cpu().numpy()"),
        teaches=False,
    ),
    Exercise(
        "10",
        "loads_anywhere",
        ("test_loads_anywhere_rejects",),
        ("torch.load(sys.argv[1], map_location=device)",),
        teaches=False,
    ),
]


def _plain(text: str) -> str:
    """Without whitespace, one kind of quote, no Markdown backticks, in lower case."""
    return re.sub(r"\s+", "", text).replace('"', "'").replace("`", "").lower()


def _module(exercise: Exercise):
    prefix = f"ex{exercise.notebook}_"
    name = next(p.stem for p in (ROOT / "helpers" / "exercises").glob(f"{prefix}*.py"))
    return importlib.import_module(f"helpers.exercises.{name}")


def _check(exercise: Exercise):
    return getattr(_module(exercise), exercise.check)


def _wrong_answers(exercise: Exercise) -> list[tuple[str, tuple]]:
    """(id, the check's arguments) for each wrong answer of the bank's parametrized tests."""
    bank = importlib.import_module(f"test_exercises_{exercise.notebook}")
    answers = []
    for test_name in exercise.banks:
        test = getattr(bank, test_name)
        for mark in (m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"):
            names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else mark.args[0]
            keep = [i for i, n in enumerate(names) if not n.startswith("fragment")]
            for values in mark.args[1]:
                values = values.values if hasattr(values, "values") else values  # pytest.param
                values = values if len(names) > 1 else (values,)
                args = tuple(values[i] for i in keep)
                label = getattr(args[0], "__name__", repr(args[0]))[:40]
                answers.append((f"{test_name}[{label}]", args))
    assert answers, f"{exercise.check}: no wrong answers found in {exercise.banks}"
    return answers


def _starter(exercise: Exercise) -> tuple:
    """The notebook's unsolved starter, as the check's arguments: the cell the learner edits ('# Exercise N
    (edit this cell)', or '# your code here' inside), right before the check's cell."""
    path = next((ROOT / "notebooks").glob(f"{exercise.notebook}_*.ipynb"))
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    call = re.compile(rf"check\.{exercise.check}\(([^)]*)\)")
    for before, cell in zip(cells, cells[1:], strict=False):
        found = call.search("".join(cell["source"]))
        starter = "".join(before["source"])
        if found and (starter.lstrip().startswith("# Exercise") or "# your " in starter):
            namespace = {"torch": torch, "nn": nn, "np": np, **exercise.extra_names}
            exec(starter, namespace)  # the starter only defines its function or class (or the answers)
            return tuple(eval(arg, namespace) for arg in found.group(1).split(",") if arg.strip())
    raise AssertionError(f"notebook {exercise.notebook}: no starter cell before check.{exercise.check}(...)")


def _headings(notebook: str) -> list[str]:
    """The notebook's headings as a learner sees them (no '#', no backticks)."""
    path = next((ROOT / "notebooks").glob(f"{notebook}_*.ipynb"))
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
    lines = [line for c in cells for line in "".join(c["source"]).splitlines() if line.startswith("#")]
    return [line.lstrip("#").strip().replace("`", "") for line in lines]


def _cases():
    for exercise in EXERCISES:
        yield pytest.param(exercise, "starter", id=f"{exercise.notebook}-{exercise.check}-starter")
        for label, args in _wrong_answers(exercise):
            yield pytest.param(exercise, args, id=f"{exercise.notebook}-{exercise.check}-{label}")


def _as_in_the_bank(exercise: Exercise, monkeypatch) -> None:
    """What the bank's module sets up for its own tests: its ``NOTEBOOK`` objects live in ``__main__``, as if a
    notebook cell had defined them (see ``tests/test_exercises_09.py``)."""
    bank = importlib.import_module(f"test_exercises_{exercise.notebook}")
    for obj in getattr(bank, "NOTEBOOK", []):
        monkeypatch.setattr(obj, "__module__", "__main__")
        monkeypatch.setattr(sys.modules["__main__"], obj.__qualname__, obj, raising=False)


def _feedback(exercise: Exercise, args, level: int, capsys) -> Feedback:
    if args == "starter":
        args = _starter(exercise)
    feedback = _check(exercise)(*args, hint=level)
    printed = capsys.readouterr().out
    assert str(feedback) in printed  # what the learner sees is what the check returned
    return feedback


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("exercise, args", list(_cases()))
def test_feedback_never_prints_the_solution(exercise, args, level, capsys, monkeypatch):
    _as_in_the_bank(exercise, monkeypatch)
    feedback = _feedback(exercise, args, level, capsys)
    assert not feedback, "a wrong answer (or the starter) passed"
    text = _plain(str(feedback))
    shown = [key for key in exercise.keys if _plain(key) in text]
    assert not shown, f"the feedback prints the solution's {shown}:\n{feedback}"


@pytest.mark.parametrize("exercise, args", [c for c in _cases() if c.values[0].teaches and c.values[1] != "starter"])
def test_wrong_answers_get_a_section_and_a_second_level(exercise, args, capsys, monkeypatch):
    _as_in_the_bank(exercise, monkeypatch)
    first = _feedback(exercise, args, 1, capsys)
    assert "Where to look:" in first.message or "Not written yet" in first.message, first.message
    for section in re.findall(r'Where to look: "(.+)", in this notebook\.', first.message):
        assert section in _headings(exercise.notebook), f"no heading {section!r} in notebook {exercise.notebook}"
    second = _feedback(exercise, args, 2, capsys)
    if "Stuck?" in first.message:
        assert first.message.splitlines()[-1].startswith("  Stuck? check.")
        assert "More:" in second.message and "Stuck?" not in second.message
        assert len(second.message) > len(first.message)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: f"{e.notebook}-{e.check}")
def test_stored_feedback_under_the_check_prints_no_solution(exercise):
    """What a learner sees under the check cell before trying (the notebook's stored output)."""
    path = next((ROOT / "notebooks").glob(f"{exercise.notebook}_*.ipynb"))
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    stored = [
        "".join(output.get("text", ""))
        for c in cells
        if f"check.{exercise.check}(" in "".join(c["source"])
        for output in c.get("outputs", [])
    ]
    assert stored and all(text.startswith("[TRY AGAIN]") for text in stored), stored
    shown = [key for key in exercise.keys if _plain(key) in _plain("".join(stored))]
    assert not shown, f"the stored feedback prints the solution's {shown}"


def test_every_key_is_in_its_solutions_notebook():
    """The keys are lines of the worked solutions (so they stay true when a solution changes)."""
    for exercise in EXERCISES:
        path = next((ROOT / "notebooks" / "solutions").glob(f"{exercise.notebook}_*_solutions.ipynb"))
        cells = json.loads(path.read_text())["cells"]
        code = _plain("".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"))
        found = [key for key in exercise.keys if _plain(key) in code]
        assert found, f"{exercise.check}: none of its keys is in {path.name}"


def test_every_exercise_is_covered():
    covered = {(e.notebook, e.check) for e in EXERCISES}
    for notebook in ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10"):
        module = _module(Exercise(notebook, "", (), ()))
        checks = {name for name, fn in vars(module).items() if getattr(fn, "is_exercise_check", False)}
        assert checks and {(notebook, name) for name in checks} <= covered, (notebook, checks)


# The mechanism itself (helpers.exercises.failed and exercise_check).


@exercise_check
def _demo(answer):
    return failed("On meta, wrong.", "Think about where.", more="The deeper idea.", see="2. A section")


@exercise_check
def _plain_demo(answer):
    return failed("Wrong.", "A hint.")


def _an_answer():
    pass


def test_first_level_ends_with_how_to_ask_for_more(capsys):
    feedback = _demo(_an_answer)
    assert not feedback
    assert feedback.message.splitlines() == [
        "On meta, wrong.",
        "  Hint: Think about where.",
        '  Where to look: "2. A section", in this notebook.',
        "  Stuck? check._demo(_an_answer, hint=2) gives a deeper hint.",
    ]
    assert capsys.readouterr().out == f"{feedback}\n"


def test_second_level_adds_the_deeper_hint(capsys):
    feedback = _demo(_an_answer, hint=2)
    assert feedback.message.splitlines()[-1] == "  More: The deeper idea."
    assert "Stuck?" not in feedback.message
    assert "check._demo(..., hint=2)" in _demo(lambda: None).message  # no name to show


def test_a_check_without_a_second_level_reads_as_before(capsys):
    assert _plain_demo(_an_answer).message == "Wrong.\n  Hint: A hint."
    assert "No deeper hint" in _plain_demo(_an_answer, hint=2).message
    assert failed("Alone.", "Its hint.").message == "Alone.\n  Hint: Its hint."
