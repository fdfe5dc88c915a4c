"""The website's cheat sheet (site/cheatsheet.md) runs as it is: its Python blocks in order, as one script, on the
CPU; its DDP script under torchrun with 2 CPU processes (gloo). Needs no site extra: it reads the page's source."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tools import course

PAGE = (course.ROOT / "site" / "cheatsheet.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```$", PAGE, re.MULTILINE | re.DOTALL)
SCRIPTS = dict(re.findall(r"^```\{code-block\} python\n:caption: (\S+)\n\n(.*?)^```$", PAGE, re.MULTILINE | re.DOTALL))
CPU_ONLY = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COURSE_DEVICE": "cpu"}


def test_the_page_has_the_idioms():
    assert len(BLOCKS) >= 5 and "train_ddp.py" in SCRIPTS
    code = "\n".join(BLOCKS)
    for idiom in ("torch.cuda.is_available()", "map_location=device", "weights_only=True", "total += loss.detach()",
                  "torch.autocast(", "GradScaler("):  # fmt: skip
        assert idiom in code, idiom
    assert "torchrun --standalone --nproc_per_node=2 train_ddp.py" in PAGE


def test_the_python_blocks_run_in_order_on_the_cpu(tmp_path):
    script = tmp_path / "cheatsheet.py"
    script.write_text("\n".join(BLOCKS), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=CPU_ONLY, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == "cpu"
    assert re.search(r"^mean loss \d+\.\d{3}$", result.stdout, re.MULTILINE), result.stdout
    assert (tmp_path / "checkpoint.pt").exists()


def test_the_ddp_script_trains_under_torchrun_on_two_cpu_processes(tmp_path):
    (tmp_path / "train_ddp.py").write_text(SCRIPTS["train_ddp.py"], encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train_ddp.py"]
    try:
        result = subprocess.run(command, cwd=tmp_path, env=CPU_ONLY, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the DDP script did not end within 5 minutes")
    assert result.returncode == 0, result.stderr[-3000:]
    import torch

    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert set(state) == {"weight", "bias"}, "rank 0 saves model.module's state: no 'module.' prefix"
