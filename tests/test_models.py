"""Tudui is exactly the original course's model."""

import ast
import inspect
import json
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers.lesson.models import Tudui, count_parameters


def test_parameter_count():
    assert count_parameters(Tudui()) == 145_578


def test_layers_and_shapes_as_the_original():
    model = Tudui()
    x = torch.ones(64, 3, 32, 32)  # the original's own smoke test
    shapes = []
    for layer in model.model:
        x = layer(x)
        shapes.append((type(layer).__name__, tuple(x.shape[1:])))
    assert shapes == [
        ("Conv2d", (32, 32, 32)),
        ("MaxPool2d", (32, 16, 16)),
        ("Conv2d", (32, 16, 16)),
        ("MaxPool2d", (32, 8, 8)),
        ("Conv2d", (64, 8, 8)),
        ("MaxPool2d", (64, 4, 4)),
        ("Flatten", (1024,)),
        ("Linear", (64,)),
        ("Linear", (10,)),
    ]
    assert model(torch.ones(64, 3, 32, 32)).shape == (64, 10)


def test_conv_settings_and_no_activation():
    convs = [m for m in Tudui().modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (3, 32, (5, 5), (1, 1), (2, 2)),
        (32, 32, (5, 5), (1, 1), (2, 2)),
        (32, 64, (5, 5), (1, 1), (2, 2)),
    ]
    activations = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.LeakyReLU)
    assert not any(isinstance(m, activations) for m in Tudui().modules())


def test_state_dict_keys_match_the_original():
    # the original names its nn.Sequential `model`, so its checkpoints' keys read model.N.weight
    keys = list(Tudui().state_dict())
    assert keys[:2] == ["model.0.weight", "model.0.bias"]
    assert keys[-1] == "model.8.bias"


# --- the lesson's Tudui is the package's: lesson 05 shows its code, the solutions build on its layers -------------
LESSONS = Path(__file__).resolve().parents[1] / "notebooks"


def _class_in(text: str, name: str) -> type[nn.Module]:
    """The class ``name`` that ``text`` (Python source) defines, built with ``nn`` in scope."""
    tree = ast.parse(textwrap.dedent(text))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    scope = {"nn": nn}
    exec(compile(ast.Module([node], type_ignores=[]), name, "exec"), scope)  # the course's own notebook
    return scope[name]


def _shown_code(path: Path) -> str:
    """What lesson 05's model cell prints of Tudui's code (the stored output of ``inspect.getsource``)."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            if "class Tudui(nn.Module):" in text:
                return text[text.index("class Tudui") :].rsplit("\n\n", 1)[0]
    raise AssertionError(f"{path.name}: no cell shows Tudui's code")


def _same_model(a: nn.Module, b: nn.Module) -> None:
    assert [(k, v.shape) for k, v in a.state_dict().items()] == [(k, v.shape) for k, v in b.state_dict().items()]
    assert [type(m) for m in a.modules()][1:] == [type(m) for m in b.modules()][1:]
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)


@pytest.mark.parametrize("lesson", ["05_train_tudui.ipynb", "zh-CN/05_train_tudui.ipynb"])
def test_the_tudui_lesson_05_shows_is_the_packages(lesson):
    shown = _class_in(_shown_code(LESSONS / lesson), "Tudui")
    assert _shown_code(LESSONS / lesson) == textwrap.dedent(inspect.getsource(Tudui)).rstrip("\n")
    _same_model(Tudui(), shown())


def test_the_solutions_tudui_relu_is_tudui_with_relus():
    nb = json.loads((LESSONS / "solutions" / "05_train_tudui_solutions.ipynb").read_text(encoding="utf-8"))
    source = next("".join(c["source"]) for c in nb["cells"] if "class TuduiReLU" in "".join(c["source"]))
    relu = _class_in(source, "TuduiReLU")().model
    without = nn.Sequential(*[m for m in relu if not isinstance(m, nn.ReLU)])
    _same_model(Tudui().model, without)
    assert [type(m) for m in relu].count(nn.ReLU) == 4
