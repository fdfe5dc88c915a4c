"""Figures measured on a real GPU, for a notebook that runs without one.

A GPU-only cell's ``else:`` branch calls ``show_recorded(KEY)``: it prints the figure as a GPU printed it,
labelled with the GPU, driver, torch, CUDA and date it was recorded on, or says that no GPU has recorded
it yet. The figures live in ``gpu_figures.json`` beside this module (shipped with the package, so a Colab
install has them); ``python tools/gpu_check.py --record`` on a GPU machine measures them and writes that
file. Nothing here measures or invents a figure.

Each record: ``key`` (what was measured, stable), ``what`` (in words), ``values`` (the numbers),
``printed`` (the lines the notebook's GPU branch printed), ``gpu``, ``driver``, ``torch``, ``cuda``,
``date``, ``command`` (what measured it), an optional ``note``, and an optional ``zh-CN`` object with the
Chinese of ``printed`` and ``note``, shown when the course speaks Chinese (a translator writes it; a figure
recorded again shows its English until it is translated again).
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.course.i18n import CHINESE, language, tr, tr_lazy

FIGURES_FILE = Path(__file__).with_name("gpu_figures.json")
FIELDS = ("key", "what", "values", "printed", "gpu", "driver", "torch", "cuda", "date", "command")
RECORD_COMMAND = "python tools/gpu_check.py --record"
NOT_RECORDED = tr_lazy("No GPU has recorded this figure for the course yet.")


def load(path: Path | str | None = None) -> list[dict]:
    """Every record in the data file (an empty list when there is no file)."""
    path = Path(path or FIGURES_FILE)
    if not path.exists():
        return []
    return list(json.loads(path.read_text(encoding="utf-8"))["records"])


def recorded(key: str, path: Path | str | None = None) -> dict | None:
    """The newest record of ``key`` (on any GPU), or None when no GPU has recorded it."""
    matching = [r for r in load(path) if r["key"] == key]
    return max(matching, key=lambda r: r["date"]) if matching else None


def label(record: dict) -> str:
    """'Recorded on NVIDIA H200, driver ..., torch ... (CUDA ...), 2026-11-30, by `command`'."""
    return tr(
        "Recorded on {gpu}, driver {driver}, torch {torch} (CUDA {cuda}), {date}, by `{command}`",
        **{field: record[field] for field in ("gpu", "driver", "torch", "cuda", "date", "command")},
    )


def show_recorded(key: str, path: Path | str | None = None) -> dict | None:
    """Print what a GPU printed for ``key``, labelled as recorded, or that none has; returns the record."""
    record = recorded(key, path)
    if record is None:
        print(tr(NOT_RECORDED))
        return None
    chinese = record.get(CHINESE, {}) if language() == CHINESE else {}
    print(tr("{label}:", label=label(record)))
    for line in chinese.get("printed", record["printed"]).splitlines():
        print("    " + line)
    if record.get("note"):
        print(tr("Note: {note}", note=chinese.get("note", record["note"])))
    return record
