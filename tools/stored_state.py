"""What a stored notebook keeps of the run that made it: the cells' outputs, and nothing of the widgets' or the
editor's state, so refreshing a notebook rewrites only the outputs that changed.

A progress bar is a widget: its output points at a model in ``metadata.widgets``, tens of kilobytes that get new
ids on every run, and what a reader sees of it before running the notebook is a frozen bar. Both go; the lines a
cell prints stay. ``lines_to_next_cell`` is what jupytext leaves in a cell that an editor round-tripped.
"""

from __future__ import annotations

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EDITOR_LEFTOVERS = ("lines_to_next_cell",)


def is_widget(output: dict) -> bool:
    return WIDGET_VIEW in output.get("data", {})


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` without widget outputs, widget state and editor leftovers (in place; returned for chaining)."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for key in EDITOR_LEFTOVERS:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = [out for out in cell.get("outputs", []) if not is_widget(out)]
    return nb


def leftovers(nb: nbformat.NotebookNode) -> list[str]:
    """What :func:`strip` would remove, one line each (empty for a clean notebook): for tests and reviews."""
    found = ["metadata.widgets"] if "widgets" in nb.metadata else []
    for i, cell in enumerate(nb.cells):
        found += [f"cell {i}: metadata.{key}" for key in EDITOR_LEFTOVERS if key in cell.metadata]
        found += [f"cell {i}: a widget output" for out in cell.get("outputs", []) if is_widget(out)]
    return found
