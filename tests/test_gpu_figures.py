"""The figures recorded on a GPU (helpers/course/gpu_figures.json) and the notebooks that show them without one."""

import datetime
import json
import re
import tomllib

import pytest

from helpers.course import gpu_figures
from tools import course
from tools import gpu_check as G

SHOW = re.compile(r'show_recorded\("(\w+)"\)')
RECORDABLE = {f.key for f in G.FIGURES} | {"speed_ladder", "ddp_2_gpus"}  # the notebooks' figures, the benchmarks'
RECORD = {"key": "matmul_cuda_events", "what": "a matmul", "values": {"ms_per_matmul": 0.021},
          "printed": "CUDA events: 0.021 ms per matmul", "gpu": "NVIDIA H200", "driver": "580.65.06",
          "torch": "2.14.1+cu130", "cuda": "13.0", "date": "2026-12-01",
          "command": "python tools/gpu_check.py --record"}  # fmt: skip


def notebook_calls() -> dict[str, list[str]]:
    """{lesson notebook: the keys its cells pass to show_recorded}."""
    calls = {}
    for path in course.lessons():
        cells = json.loads(path.read_text())["cells"]
        keys = [k for c in cells if c["cell_type"] == "code" for k in SHOW.findall("".join(c["source"]))]
        if keys:
            calls[path.name] = keys
    return calls


def test_every_record_has_every_field_and_a_notebook_that_reads_it():
    records = gpu_figures.load()
    shown = {key for keys in notebook_calls().values() for key in keys}
    for record in records:
        assert set(gpu_figures.FIELDS) <= set(record), record.get("key")
        assert isinstance(record["values"], dict) and record["values"], record["key"]
        assert record["printed"].strip() and record["gpu"] and record["command"].startswith("python ")
        datetime.date.fromisoformat(record["date"])
        assert record["key"] in shown, f"no notebook shows the record {record['key']}"
    assert len({(r["key"], r["gpu"]) for r in records}) == len(records), "one record per key and GPU"


def test_the_ladder_record_of_the_earlier_ladder_says_so():
    """The GPU check's row of 2026-11-30 measured the ladder before its rungs changed: its record says so."""
    ladder = gpu_figures.recorded("speed_ladder")
    if ladder and ladder["date"] == "2026-11-30":
        assert ladder["values"] == {"best_rung": "larger batch", "best_ratio": 13.29}
        assert "earlier version of the ladder" in ladder["note"]


def test_every_key_a_notebook_shows_is_one_the_gpu_check_records():
    calls = notebook_calls()
    assert set(calls) == {"06_speed.ipynb", "07_memory.ipynb", "08_many_devices.ipynb"}
    for notebook, keys in calls.items():
        assert set(keys) <= RECORDABLE, (notebook, set(keys) - RECORDABLE)
    assert RECORDABLE == {k for keys in calls.values() for k in keys}, "every recorded figure is shown somewhere"


@pytest.mark.parametrize("key", sorted(RECORDABLE))
def test_no_record_is_said_in_plain_words(key, tmp_path, capsys):
    empty = tmp_path / "figures.json"
    empty.write_text(json.dumps({"records": []}))
    assert gpu_figures.show_recorded(key, empty) is None
    assert capsys.readouterr().out == gpu_figures.NOT_RECORDED + "\n"
    assert gpu_figures.show_recorded(key, tmp_path / "missing.json") is None


def test_a_record_is_printed_labelled_as_recorded(tmp_path, capsys):
    path = tmp_path / "figures.json"
    older = {**RECORD, "gpu": "Tesla T4", "date": "2026-11-02", "printed": "CUDA events: 0.300 ms per matmul"}
    path.write_text(json.dumps({"records": [older, {**RECORD, "note": "one round"}]}))
    assert gpu_figures.show_recorded("matmul_cuda_events", path)["gpu"] == "NVIDIA H200", "the newest record"
    assert capsys.readouterr().out == (
        "Recorded on NVIDIA H200, driver 580.65.06, torch 2.14.1+cu130 (CUDA 13.0), 2026-12-01, "
        "by `python tools/gpu_check.py --record`:\n"
        "    CUDA events: 0.021 ms per matmul\n"
        "Note: one round\n"
    )


def test_the_stored_outputs_show_what_the_data_file_holds():
    """Refreshed after every change of the data file: each call's stored output is the record or 'not yet'."""
    for path in course.lessons():
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell.get("source", ""))
            if cell["cell_type"] != "code" or not SHOW.search(source):
                continue
            out = "".join("".join(o.get("text", "")) for o in cell["outputs"] if o.get("name") == "stdout")
            for key in SHOW.findall(source):
                record = gpu_figures.recorded(key)
                expected = gpu_figures.label(record) if record else gpu_figures.NOT_RECORDED  # English: COURSE_LANG=en
                assert expected in out, f"{path.name}: {key}: refresh with python tools/refresh_notebooks.py"


def test_the_data_file_ships_with_the_package():
    with open(course.ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert "course/" + gpu_figures.FIGURES_FILE.name in package_data["helpers"]
    assert gpu_figures.FIGURES_FILE.parent == course.ROOT / "helpers" / "course"


def test_recorded_figures_speak_chinese_where_translated(monkeypatch, capsys):
    """A record's zh-CN object gives the Chinese of its printed lines and note; the label is the catalog's."""
    for record in gpu_figures.load():
        chinese = record.get("zh-CN")
        if chinese is None:
            continue
        assert set(chinese) <= {"printed", "note"} and chinese.get("printed")
        assert chinese["printed"].count("\n") == record["printed"].count("\n"), record["key"]
        monkeypatch.setenv("COURSE_LANG", "zh-CN")
        gpu_figures.show_recorded(record["key"])
        shown = capsys.readouterr().out
        assert chinese["printed"].splitlines()[0] in shown and record["printed"].splitlines()[0] not in shown
        assert shown.startswith("记录于") and "Note:" not in shown
        monkeypatch.setenv("COURSE_LANG", "en")
        gpu_figures.show_recorded(record["key"])
        assert record["printed"].splitlines()[0] in capsys.readouterr().out
