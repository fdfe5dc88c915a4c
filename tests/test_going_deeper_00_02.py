"""Notebooks 00-02: the essentials path never depends on a going-deeper section (same rule as 03/04)."""

import nbformat
import pytest
from test_going_deeper_03_04 import HEADING, TIME_LINE, leaks, path_of

NOTEBOOKS = {
    "00_prerequisites": ["how the child processes count"],
    "01_cpu_to_gpu_cuda": ["a copy within GPU memory"],
    "02_gpu_to_cpu": ["timing the two patterns"],
}


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_essentials_never_read_a_name_defined_only_in_going_deeper(stem):
    leaked = leaks(nbformat.read(path_of(stem), as_version=4))
    assert not leaked, f"essential cells read {sorted(leaked)}, defined only in a going-deeper section"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_going_deeper_sections_are_marked(stem):
    nb = nbformat.read(path_of(stem), as_version=4)
    titles = [t for c in nb.cells if c.cell_type == "markdown" for _, t in HEADING.findall(c.source)]
    deeper = [t for t in titles if t.startswith("Going deeper:")]
    for fragment in NOTEBOOKS[stem]:
        assert any(fragment in t for t in deeper), f"no 'Going deeper:' section about {fragment!r}"
    assert TIME_LINE.search(nb.cells[0].source), "the title cell needs its **Time:** line"
    exercises = titles.index("Exercises")
    assert all(not t.startswith("Going deeper:") for t in titles[exercises:]), "exercises are essential"
