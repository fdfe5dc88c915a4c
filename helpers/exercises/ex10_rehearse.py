"""Checks for notebook 10's exercises (rehearse and port a training script), each judged by rehearsing the
learner's script (``helpers.rehearse.several``: one child process, three pretend machines), never by reading it:

- ``device_line`` runs the learner's device line in a small script on a pretend GPU, a pretend Mac and a laptop and
  asks where a tensor moved to ``device`` lands on each (a CUDA GPU, the Mac's GPU, the CPU);
- ``ported_method2`` rehearses the learner's port of the articles' method 2 script on the three machines: it must
  run on each, train there (the model's weights and the last batch on that machine's device, read at the end of
  the run) and print the numbers the original prints on the CPU;
- ``loads_anywhere`` makes a checkpoint the way a GPU machine does (a script rehearsed on the pretend GPU saves it)
  and rehearses the learner's loading script on a laptop, a Mac and a GPU.
"""

from __future__ import annotations

import atexit
import copy
import functools
import re
import shutil
import tempfile
from pathlib import Path

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import Feedback, exercise_check, failed, passed
from helpers.rehearse.several import rehearse_on

MACHINES = ("gpu", "mac", "laptop")
EXPECTED = {"gpu": "cuda", "mac": "mps", "laptop": "cpu"}
MACHINE_WORDS = {
    "gpu": tr_lazy("a GPU machine"),
    "mac": tr_lazy("a Mac"),
    "laptop": tr_lazy("a laptop without a GPU"),
}
DEVICE_WORDS = {
    "cuda": tr_lazy("the CUDA GPU"),
    "mps": tr_lazy("the Mac's GPU (mps)"),
    "cpu": tr_lazy("the CPU"),
}
PROBE = "__rehearsed_devices__"
STEPS, LOOPS = 2, 2

STARTER_METHOD2 = '''"""The articles' method 2 (.cuda() behind torch.cuda.is_available()), as a whole script."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.lesson.models import Tudui

torch.manual_seed(0)
train_data = TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,)))
train_dataloader = DataLoader(train_data, batch_size=16)

# 创建模型
tudui = Tudui()
if torch.cuda.is_available():
    tudui = tudui.cuda()

# 损失函数
loss_fn = nn.CrossEntropyLoss()
if torch.cuda.is_available():
    loss_fn = loss_fn.cuda()
optimizer = torch.optim.SGD(tudui.parameters(), lr=0.01)

# 训练步骤开始
tudui.train()
for imgs, targets in train_dataloader:
    if torch.cuda.is_available():
        imgs = imgs.cuda()
        targets = targets.cuda()
    outputs = tudui(imgs)
    loss = loss_fn(outputs, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print("loss", round(loss.item(), 4), "predicted", outputs.argmax(1)[:4].numpy())
'''

SAVE_ON_GPU = """import sys

import torch

from helpers.lesson.models import Tudui

torch.manual_seed(0)
tudui = Tudui().cuda()
torch.save({"model": tudui.state_dict(), "epoch": 3}, sys.argv[1])
"""


def _probe(*names: str) -> str:
    """Lines added after the learner's script: where its named tensors or modules ended up."""
    lines = ["", "def __where__(obj):", "    obj = next(obj.parameters()) if hasattr(obj, 'parameters') else obj"]
    lines += ["    return obj.device.type", ""]
    found = ", ".join(f"{name!r}: __where__({name}) if {name!r} in globals() else None" for name in names)
    return "\n".join([*lines, f"print({PROBE!r}, {{{found}}})", ""])


_DONE: dict = {}  # (source, args, probe, machines): reports; a second call (hint=2) does not rehearse again


def _rehearse(source: str, *args: str, probe: tuple[str, ...] = (), machines=MACHINES, cwd=None) -> dict:
    key = (source, args, probe, machines)
    if key not in _DONE:
        _DONE[key] = _rehearse_now(source, *args, probe=probe, machines=machines, cwd=cwd)
    return copy.deepcopy(_DONE[key])


def _rehearse_now(source: str, *args: str, probe: tuple[str, ...], machines, cwd) -> dict:
    with tempfile.TemporaryDirectory(prefix="rehearse-check-") as folder:
        script = Path(folder) / "your_script.py"
        script.write_text(source + (_probe(*probe) if probe else ""))
        reports = rehearse_on(script, *args, machines=machines, steps=STEPS, loops=LOOPS, cwd=cwd or folder)
    for report in reports.values():
        report["where"] = _where(report.get("output", ""))
        report["output"] = "\n".join(
            line for line in report.get("output", "").splitlines() if not line.startswith(PROBE)
        )
    return reports


def _where(output: str) -> dict:
    for line in output.splitlines():
        if line.startswith(PROBE):
            try:
                import ast

                return ast.literal_eval(line[len(PROBE) :].strip())
            except (ValueError, SyntaxError):
                return {}
    return {}


def _not_a_script(source) -> Feedback | None:
    if not isinstance(source, str):
        return failed(
            tr("Give the script as a string (its text), not a {type_name}.", type_name=type(source).__name__),
            tr("Keep the cell's triple quotes around your script and edit the lines between them."),
        )
    if "# your code here" in source or not source.strip():
        return failed(tr("Not written yet: write your code in place of the `# your code here` line."))
    try:
        compile(source, "your_script.py", "exec")
    except SyntaxError as err:
        return failed(
            tr("Python cannot read your script: {error} (line {line}).", error=err.msg, line=err.lineno),
            tr("Fix the syntax first; the rehearsal runs the script as Python would."),
        )
    return None


FINDING_HINTS = {
    "mixed-devices": tr_lazy(
        "Every input of an operation must be where the model is: the images, the labels, the loss. Move each "
        "batch inside the loop."
    ),
    "numpy-of-device-tensor": tr_lazy("NumPy reads CPU memory only: bring the tensor back to the CPU first."),
    "no-gpu": tr_lazy(
        "Choose the device once, with a fallback for a machine without a GPU, and move everything to it."
    ),
    "load-missing-device": tr_lazy(
        "The file remembers the device each tensor was saved from; torch.load can put them elsewhere as it reads."
    ),
    "mps-float64": tr_lazy("A Mac's GPU has no float64: keep the tensors float32."),
    "device-index": tr_lazy("Do not write a GPU's number in the script: use the one device you chose."),
}


def _problems(report: dict, machine: str) -> Feedback | None:
    """The rehearsal's first problem on ``machine``, as feedback (the tool's own failure says so)."""
    if report.get("tool_error"):
        return failed(
            tr("The rehearsal could not tell whether your script runs: {why}", why=report["tool_error"][-300:]),
            tr("Run the same rehearsal in a cell (python -m helpers.rehearse) to see the whole report."),
        )
    blocking = [f for f in report.get("findings", []) if f.get("blocks", True)]
    if not blocking:
        return None
    first = blocking[0]
    where = tr(MACHINE_WORDS[machine])
    if first["kind"] == "script-bug":
        return failed(
            tr(
                "Your script fails on {machine}, line {line}, as it would on any machine: {message}",
                machine=where,
                line=first["line"],
                message=first["message"].splitlines()[-1][:300],
            ),
            tr("Run it as a plain script on the CPU first; the error is the script's own, not a device's."),
        )
    return failed(
        tr(
            "Rehearsed on {machine}, line {line} fails: {message}",
            machine=where,
            line=first["line"],
            message=first["message"].splitlines()[0][:300],
        ),
        tr(FINDING_HINTS.get(first["kind"], "Read the rehearsal's report of this line in a cell.")),
    )


# ---------------------------------------------------------------- Exercise 1: the device line


DEVICE_SCRIPT = "import torch\n{line}\nx = torch.ones(3).to(device)\nprint(x.sum().item())\n"


@exercise_check
def device_line(line) -> Feedback:
    """``DEVICE_LINE`` is one line of Python that sets ``device``: a CUDA GPU where there is one, else a Mac's
    GPU (MPS), else the CPU. The check rehearses it on a pretend GPU, a pretend Mac and a laptop."""
    bad = _not_a_script(line)
    if bad is not None:
        return bad
    reports = _rehearse(DEVICE_SCRIPT.format(line=line), probe=("x",))
    for machine in MACHINES:
        report = reports[machine]
        if "name 'device' is not defined" in str(report.get("findings")):
            return failed(
                tr("Your line does not set a variable named device."),
                tr("Write it as an assignment: device = ..."),
            )
        problem = _problems(report, machine)
        if problem is not None:
            return problem
        landed = report["where"].get("x")
        if landed != EXPECTED[machine]:
            return failed(
                tr(
                    "On {machine} a tensor moved to your device lands on {got}, not on {want}.",
                    machine=tr(MACHINE_WORDS[machine]),
                    got=tr(DEVICE_WORDS.get(landed, str(landed))),
                    want=tr(DEVICE_WORDS[EXPECTED[machine]]),
                ),
                tr(
                    "Ask in order: torch.cuda.is_available(), then torch.backends.mps.is_available(), and fall "
                    "back to the CPU."
                ),
                see="3. Port it: `--fix`, and the device line",
            )
    return passed(tr("Your device line picks the CUDA GPU, the Mac's GPU and the CPU, each on its machine."))


# ---------------------------------------------------------------- Exercise 2: port method 2 by hand


@functools.cache
def _reference_output() -> str:
    """What the articles' method 2 prints on a laptop (the CPU): the numbers a port must keep."""
    return _rehearse(STARTER_METHOD2, machines=("laptop",))["laptop"]["output"]


def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+\.\d+|\d+", text)


@exercise_check
def ported_method2(source) -> Feedback:
    """``PORTED`` is the articles' method 2 script ported by hand (method 1: one ``device``, then ``.to(device)``)
    so that it trains on a CUDA GPU, on a Mac's GPU and on a laptop's CPU, and prints the numbers it printed.
    Keep the names ``tudui``, ``imgs`` and ``targets``."""
    bad = _not_a_script(source)
    if bad is not None:
        return bad
    reports = _rehearse(source, probe=("tudui", "imgs", "targets"))
    reference = _reference_output()
    for machine in MACHINES:
        report = reports[machine]
        problem = _problems(report, machine)
        if problem is not None:
            return problem
        where = report["where"]
        missing = [name for name in ("tudui", "imgs", "targets") if where.get(name) is None]
        if missing:
            return failed(
                tr("Your script has no {names} at its end: the check looks for them.", names=", ".join(missing)),
                tr("Keep the script's names (tudui, imgs, targets); change only where things go."),
            )
        for name in ("tudui", "imgs", "targets"):
            if where[name] != EXPECTED[machine]:
                return failed(
                    tr(
                        "On {machine}, {name} ends up on {got}, not on {want}.",
                        machine=tr(MACHINE_WORDS[machine]),
                        name=name,
                        got=tr(DEVICE_WORDS.get(where[name], str(where[name]))),
                        want=tr(DEVICE_WORDS[EXPECTED[machine]]),
                    ),
                    tr(
                        "Method 2 knows two machines: a CUDA GPU and the CPU. Method 1 chooses the device once, "
                        "with the Mac's GPU among the choices, and moves the model and every batch there."
                    ),
                    see="2. The articles' method 2, rehearsed as a GPU",
                )
        if _numbers(report["output"]) != _numbers(reference):
            return failed(
                tr(
                    "On {machine} your script prints other numbers than the original's.",
                    machine=tr(MACHINE_WORDS[machine]),
                ),
                tr(
                    "A port changes where the work runs, not the work: keep the data, the seed, the model and the "
                    "prints."
                ),
            )
    return passed(
        tr("Your port trains on the GPU, the Mac's GPU and the CPU, each on its machine, with the original's numbers.")
    )


# ---------------------------------------------------------------- Exercise 3: load a GPU's checkpoint anywhere


@functools.cache
def _gpu_checkpoint() -> Path | None:
    """The file a GPU machine saves (SAVE_ON_GPU rehearsed on the pretend GPU), made once, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="rehearse-checkpoint-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    saved = folder / "tudui_gpu.pth"
    made = _rehearse_now(SAVE_ON_GPU, str(saved), probe=(), machines=("gpu",), cwd=folder)["gpu"]
    if made.get("tool_error") or not saved.exists():
        _gpu_checkpoint.cache_clear()
        return None
    return saved


@exercise_check
def loads_anywhere(source) -> Feedback:
    """``LOADER`` is a script that loads the checkpoint a GPU machine saved (its path is ``sys.argv[1]``: a dict
    with the Tudui's state_dict under ``"model"``) into ``tudui`` on the machine's own device. The check saves such a
    file on a pretend GPU, then rehearses your script on a laptop, a Mac and a GPU."""
    bad = _not_a_script(source)
    if bad is not None:
        return bad
    saved = _gpu_checkpoint()
    if saved is None:
        return failed(tr("The check could not make the GPU's checkpoint; run the cell again."))
    reports = _rehearse(source, str(saved), probe=("tudui",), machines=("laptop", "mac", "gpu"), cwd=saved.parent)
    for machine in ("laptop", "mac", "gpu"):
        report = reports[machine]
        problem = _problems(report, machine)
        if problem is not None:
            return problem
        got = report["where"].get("tudui")
        if got is None:
            return failed(
                tr("Your script has no tudui at its end: the check looks for it."),
                tr("Load the weights into a model named tudui."),
            )
        if got != EXPECTED[machine]:
            return failed(
                tr(
                    "On {machine} the loaded tudui is on {got}, not on {want}.",
                    machine=tr(MACHINE_WORDS[machine]),
                    got=tr(DEVICE_WORDS.get(got, str(got))),
                    want=tr(DEVICE_WORDS[EXPECTED[machine]]),
                ),
                tr(
                    "Load onto the device this machine has, the one your device line chooses, and move the model there."
                ),
                see="5. A checkpoint from the GPU, on a laptop",
            )
    return passed(tr("Your script loads the GPU's checkpoint on a laptop, a Mac and a GPU, onto each one's device."))
