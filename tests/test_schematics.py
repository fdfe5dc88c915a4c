"""helpers.lab.schematics: the lessons' diagrams draw, say what they show, and speak Chinese where a font can."""

from __future__ import annotations

import re

import matplotlib
import pytest

from helpers.lab import plots, schematics
from tools import course

matplotlib.use("Agg")
CJK = re.compile(r"[\u4e00-\u9fff]")
WORDS = {  # a few words each diagram must show, in English
    "host_and_device": ["CPU and its memory (RAM)", "GPU and its memory", "PCIe bus", "y = x.cuda()", "x stays here"],
    "create_vs_move": ["made in RAM\n(then thrown away)", "4 MB over PCIe", "made on the GPU"],
    "module_vs_tensor": [
        "model.to(device)",
        "x.to(device)",
        "in place: it returns the same object\n(model.to(device) is model)",
    ],
    "left_behind": ["targets", "left behind", "RuntimeError: Expected all tensors to be on the same device"],
    "async_queue": ["queue conv", "loss.item(): the CPU waits", "the value"],
    "copy_paths": [
        "pinned staging buffer\n(the driver's)",
        "the copy engine, over PCIe",
        "pinned memory\n(t.pin_memory())",
    ],
    "loader_pipeline": [
        "worker 0:\na whole batch",
        "worker 1:\na whole batch",
        "queue\n(shared memory)",
        "pin thread\n(main process)",
        "the loop:\n.to(device,\nnon_blocking=True)",
    ],
    "torchrun_processes": ["process: RANK=0, LOCAL_RANK=0,\nWORLD_SIZE=2", "cuda:1"],
    "ddp_all_reduce": ["rank 0: its part of the batch", "rank 1: its part of the batch", "all-reduce: (g0 + g1) / 2"],
    "fsdp_shards": ["rank 1 keeps shard 1 of the parameters", "a layer's parameters, whole, for a moment"],
    "buffers_move": ["register_buffer: running_mean", "stays on the CPU: the next forward mixes devices"],
    "fork_vs_spawn": [
        "fork: a copy of the process,\nits CUDA state included",
        "spawn: a fresh Python\nthat imports the main module",
    ],
    "rehearsal": ["the CPU, pretending to be a GPU", "findings: line, problem, fix"],
    "meta_device": ['torch.empty(4096, 4096, device="meta")', "shape and dtype only: 0 bytes allocated"],
}
CATALOG = course.ROOT / "helpers" / "locale" / "zh_CN" / "LC_MESSAGES" / "lab.schematics.po"


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text()]


def test_every_diagram_is_tested_and_shows_its_words():
    assert set(WORDS) == set(schematics.DIAGRAMS)
    for name, words in WORDS.items():
        shown = texts(schematics.DIAGRAMS[name]())
        assert set(words) <= set(shown), (name, set(words) - set(shown))
        assert not any(CJK.search(t) for t in shown)


def test_the_loader_draws_one_box_per_worker():
    assert sum(bool(re.match(r"worker \d", t)) for t in texts(schematics.loader_pipeline(workers=3))) == 3


def english_messages() -> list[re.Pattern]:
    """The catalog's English messages as patterns (a ``{field}`` matches what fills it)."""
    from babel.messages.pofile import read_po

    with open(CATALOG, "rb") as f:
        ids = [m.id for m in read_po(f) if m.id]
    return [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(i)), re.S) for i in ids]


@pytest.mark.parametrize("name", sorted(schematics.DIAGRAMS))
def test_a_diagram_speaks_chinese_where_a_font_can_draw_it(monkeypatch, name):
    """Every text of a diagram that is one of its catalog's messages is drawn in Chinese; code stays as it is."""
    english = texts(schematics.DIAGRAMS[name]())
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    monkeypatch.setattr(plots, "chinese_font", lambda: "WenQuanYi Zen Hei")
    chinese = texts(schematics.DIAGRAMS[name]())
    assert len(chinese) == len(english)
    messages = english_messages()
    translated = [(e, c) for e, c in zip(english, chinese, strict=True) if any(m.fullmatch(e) for m in messages)]
    assert translated, name
    assert all(CJK.search(c) for _, c in translated), [e for e, c in translated if not CJK.search(c)]
