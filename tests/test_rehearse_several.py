"""``helpers.rehearse.several``: one child rehearses a script on several machines, each report its own; and two
gaps it met in the lesson's scripts, closed (Adam's step on the pretend GPU, ``map_location="cuda"`` on a laptop)."""

from __future__ import annotations

from helpers.rehearse.several import rehearse_on
from tools import course

METHOD2 = course.ROOT / "tests" / "fixtures" / "rehearse" / "method2_labels_on_cpu.py"


def kinds(report: dict) -> set[tuple[str, int]]:
    return {(f["kind"], f["line"]) for f in report["findings"]}


def test_one_child_three_machines_each_its_own_report():
    reports = rehearse_on(METHOD2, steps=1, loops=1)
    assert list(reports) == ["gpu", "mac", "laptop"]
    assert kinds(reports["gpu"]) == {("mixed-devices", 20), ("numpy-of-device-tensor", 25)}
    assert reports["mac"]["exit_code"] == reports["laptop"]["exit_code"] == 0
    assert reports["gpu"]["output"] == reports["laptop"]["output"] != ""  # the CPU's numbers on every machine


def test_adam_steps_on_a_pretend_gpu(tmp_path):
    script = tmp_path / "adam.py"
    script.write_text(
        "import torch\nfrom torch import nn\nmodel = nn.Linear(3, 1).cuda()\n"
        "optimizer = torch.optim.Adam(model.parameters())\n"
        "model(torch.ones(2, 3).cuda()).sum().backward()\noptimizer.step()\nprint('stepped')\n"
    )
    report = rehearse_on(script, machines=("gpu",))["gpu"]
    assert report["exit_code"] == 0 and not report["tool_error"] and report["output"].strip() == "stepped"


def test_map_location_cuda_on_a_laptop_fails_as_there(tmp_path):
    saved = tmp_path / "w.pt"
    save = tmp_path / "save.py"
    save.write_text(f"import torch\ntorch.save({{'w': torch.ones(2).cuda()}}, {str(saved)!r})\n")
    assert rehearse_on(save, machines=("gpu",))["gpu"]["exit_code"] == 0
    load = tmp_path / "load.py"
    load.write_text(
        f"import torch\nstate = torch.load({str(saved)!r}, map_location='cuda')\nprint(state['w'].sum().item())\n"
    )
    reports = rehearse_on(load, machines=("laptop", "gpu"))
    assert kinds(reports["laptop"]) == {("load-missing-device", 2)}
    assert reports["gpu"]["exit_code"] == 0 and reports["gpu"]["output"].strip() == "2.0"
