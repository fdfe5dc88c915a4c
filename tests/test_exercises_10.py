"""The checks of notebook 10 accept right answers and explain typical wrong ones, by rehearsing each answer on a
pretend GPU, a pretend Mac and a laptop (every answer starts one child process: the file is in the slow lane)."""

import pytest

from helpers.exercises import ex10_rehearse as check

CHAIN = (
    'device = torch.device("cuda" if torch.cuda.is_available() '
    'else "mps" if torch.backends.mps.is_available() else "cpu")'
)


def rejects(feedback, fragment: str) -> None:
    assert not feedback and fragment in feedback.message, feedback.message


# ---------------------------------------------------------------- (1) the device line
@pytest.mark.parametrize(
    "line",
    [
        CHAIN,
        CHAIN.replace("torch.device(", "(").replace('"cpu")', '"cpu")'),  # a string is a device too
        'device = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")',
        "device = torch.device('cuda:0' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() "
        "else 'cpu')",
        "device = torch.device('cuda') if torch.cuda.is_available() else torch.device('mps') "
        "if torch.backends.mps.is_available() else torch.device('cpu')",
        "import helpers.lesson.devices as d; device = d.pick_device('auto')",
    ],
)
def test_device_line_accepts(line):
    assert check.device_line(line)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")', "lands on the CPU, not on the Mac"),
        ('device = torch.device("cuda")', "Rehearsed on a Mac"),
        ('device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")', "not on the CUDA GPU"),
        ('dev = torch.device("cpu")', "does not set a variable named device"),
        ("device = torch.device('cuda' if torch.cuda.is_available() else 'cpu'", "Python cannot read"),
        (42, "not a int"),
    ],
)
def test_device_line_rejects(line, fragment):
    rejects(check.device_line(line), fragment)


# ---------------------------------------------------------------- (2) port method 2 by hand
STARTER = check.STARTER_METHOD2


def port(text=STARTER, device_line=CHAIN, model=".to(device)", batch=".to(device)", numpy=".cpu().numpy()"):
    text = text.replace(
        "# 创建模型\ntudui = Tudui()\nif torch.cuda.is_available():\n    tudui = tudui.cuda()",
        f"{device_line}\n\n# 创建模型\ntudui = Tudui()\ntudui = tudui{model}",
    )
    text = text.replace("if torch.cuda.is_available():\n    loss_fn = loss_fn.cuda()", "loss_fn = loss_fn.to(device)")
    text = text.replace(
        "    if torch.cuda.is_available():\n        imgs = imgs.cuda()\n        targets = targets.cuda()",
        f"    imgs = imgs{batch}\n    targets = targets{batch}",
    )
    return text.replace("[:4].numpy()", f"[:4]{numpy}")


@pytest.mark.parametrize(
    "source",
    [
        port(),
        port(numpy=".detach().cpu().numpy()"),
        port(numpy=".tolist()"),
        port(batch=".to(device, non_blocking=True)"),
        port(
            device_line=CHAIN.replace("torch.device(", "str("),
        ),
        port().replace("loss_fn = loss_fn.to(device)", "loss_fn = loss_fn  # a loss without weights holds no tensor"),
    ],
)
def test_ported_method2_accepts(source):
    assert check.ported_method2(source)


@pytest.mark.parametrize(
    "source, fragment",
    [
        (STARTER, "numpy"),  # the starter: .numpy() of a GPU tensor
        (port(device_line='device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'), "Mac"),
        (port(batch=""), "fails"),  # the batch left on the CPU: mixed devices on a GPU
        (port(numpy=".numpy()"), "numpy"),
        (port().replace("torch.manual_seed(0)", "torch.manual_seed(1)"), "other numbers"),
        (port().replace("imgs", "images"), "no imgs"),
        (port(device_line='device = torch.device("cuda")'), "Rehearsed on a Mac"),
    ],
)
def test_ported_method2_rejects(source, fragment):
    rejects(check.ported_method2(source), fragment)


# ---------------------------------------------------------------- (3) a checkpoint loader for every machine
LOADER = """
import sys

import torch

from helpers.lesson.models import Tudui

{device}
tudui = Tudui(){move}
checkpoint = torch.load(sys.argv[1]{where})
tudui.load_state_dict(checkpoint["model"])
"""


def loader(device=CHAIN, move=".to(device)", where=", map_location=device"):
    return LOADER.format(device=device, move=move, where=where)


@pytest.mark.parametrize(
    "source",
    [
        loader(),
        loader(where=", map_location='cpu'"),  # load on the CPU, then load_state_dict copies to the device
        loader(where=", map_location=device, weights_only=True"),
        loader(move="", where=", map_location=device") + "tudui = tudui.to(device)\n",
        loader(where=", map_location=lambda storage, loc: storage"),
    ],
)
def test_loads_anywhere_accepts(source):
    assert check.loads_anywhere(source)


@pytest.mark.parametrize(
    "source, fragment",
    [
        (loader(device="", move="", where=""), "laptop"),  # the starter's line: no map_location
        (loader(where=""), "deserialize"),
        (loader(where=", map_location='cuda'"), "laptop"),
        (loader(move=""), "is on the CPU"),  # loaded, but the model stays on the CPU on a GPU machine
        (loader().replace("tudui", "net"), "no tudui"),
    ],
)
def test_loads_anywhere_rejects(source, fragment):
    rejects(check.loads_anywhere(source), fragment)
