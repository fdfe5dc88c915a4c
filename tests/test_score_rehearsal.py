"""tools/score_rehearsal.py: its figures on a tiny manifest over the course's own fixtures (marked by hand), and
the committed corpus manifest is well-formed."""

from __future__ import annotations

import hashlib
import os
import re

from helpers.rehearse.findings import KINDS
from tools import course, score_rehearsal

FIXTURES = course.ROOT / "tests" / "fixtures" / "rehearse"

# the fixtures' device problems, marked by hand (line, kind); mac_float64's only problem shows at run time
MARKS = {
    "machine_bound": [
        [7, "cuda-call"],
        [8, "device-literal"],
        [9, "cuda-tensor-type"],
        [10, "cuda-tensor-type"],
        [10, "default-tensor-type"],
        [11, "load-no-map-location"],
        [13, "dataparallel-prefix"],
        [14, "workers-no-main-guard"],
    ],
    "method2_labels_on_cpu": [[11, "cuda-only-fallback"], [25, "numpy-of-device-tensor"]],
    "load_anywhere": [[12, "load-no-map-location"], [10, "load-no-map-location"]],  # 10 has map_location
    "mac_float64": [],
    "save_on_gpu": [],
}


def tiny_manifest(tmp_path, runnable=()):
    lines = []
    for name, marks in MARKS.items():
        sha = hashlib.sha256((FIXTURES / f"{name}.py").read_bytes()).hexdigest()
        lines += [
            "[[script]]",
            f'name = "{name}"',
            'batch = "development"',
            'repo = "course/fixtures"',
            f'commit = "{"0" * 40}"',
            f'path = "tests/fixtures/rehearse/{name}.py"',
            'license = "the course\'s own"',
            f'sha256 = "{sha}"',
            f"runnable = {'true' if name in runnable else 'false'}",
            'why = "a fixture"',
            "args = []",
            'expect = "runs"',
            "marks = [" + ", ".join(f'[{line}, "{kind}"]' for line, kind in marks) + "]",
            "",
        ]
    path = tmp_path / "manifest.toml"
    path.write_text("\n".join(lines))
    return path


def test_static_precision_and_recall_against_hand_marks(tmp_path, capsys):
    manifest = tiny_manifest(tmp_path)
    rows = []
    for entry in score_rehearsal.load_manifest(manifest):
        path, why = score_rehearsal.get_script(entry, FIXTURES, tmp_path / "cache")
        assert path is not None, why
        rows.append(score_rehearsal.score_one(entry, path, steps=2, timeout=60, run=False, fix=False))
    summary = score_rehearsal.totals(rows)
    overall = summary["static"]["overall"]
    # 12 marks; the one wrong mark (line 10 of load_anywhere loads with map_location) is a miss, no false alarm
    assert (overall["tp"], overall["fp"], overall["fn"]) == (11, 0, 1)
    assert overall["precision"] == 1.0 and round(overall["recall"], 3) == round(11 / 12, 3)
    assert summary["static"]["per_kind"]["load-no-map-location"]["fn"] == 1
    text = score_rehearsal.table(rows, summary)
    assert "missed 10 load-no-map-location" in text and "precision 100.0% (11/11)" in text


def test_a_changed_file_is_refused_not_scored(tmp_path):
    entry = score_rehearsal.load_manifest(tiny_manifest(tmp_path))[0]
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / f"{entry['name']}.py").write_text("print('not the file the manifest names')\n")
    path, why = score_rehearsal.get_script(entry, folder, tmp_path / "cache")
    assert path is None and "sha256" in why


def test_the_rehearsal_and_the_fix_of_one_fixture(tmp_path, capsys):
    manifest = tiny_manifest(tmp_path, runnable={"mac_float64"})
    environment = dict(os.environ)
    code = score_rehearsal.main(
        ["--manifest", str(manifest), "--scripts", str(FIXTURES), "--only", "mac_float64", "--json", "--jobs", "1"]
    )
    import json

    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert dict(os.environ) == environment  # its children's settings stayed theirs
    row = out["scripts"][0]
    assert row["run"] == {"outcome": "runs", "expect": "runs", "ok": True, "why": ""}
    # nothing to port (it chooses its device once), and the Mac still refuses its float64: not clean
    assert row["fix"]["changed"] is False
    assert row["fix"]["machines"]["mac"]["outcome"] == "problems"
    assert "mps-float64" in row["fix"]["machines"]["mac"]["why"]
    assert (out["summary"]["run_ok"], out["summary"]["fix_clean"]) == (1, 0)


def test_the_committed_corpus_manifest_is_well_formed():
    entries = score_rehearsal.load_manifest()
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)) and len(entries) >= 38
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e["sha256"]), e["name"]
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]), e["name"]
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", e["repo"]), e["name"]
        assert e["batch"] in ("development", "blind", "blind3") and e["license"] and e["path"].endswith(".py")
        assert isinstance(e["runnable"], bool) and e["why"]
        assert all(isinstance(a, str) for a in e["args"])
        if e["runnable"]:
            assert e["expect"] in ("runs", "script-bug"), e["name"]
        for line, kind in e["marks"]:
            assert isinstance(line, int) and line > 0, e["name"]
            assert kind in KINDS and kind != "script-bug", (e["name"], kind)
    assert sum(e["batch"] == "development" for e in entries) >= 30


def test_an_adversarial_verdict_tells_a_gap_from_a_crash():
    assert score_rehearsal.verdict({"exit_code": 0, "findings": []}) == "runs"
    assert score_rehearsal.verdict({"exit_code": 1, "findings": [{"kind": "no-gpu"}]}) == "fails"
    assert (
        score_rehearsal.verdict({"exit_code": 3, "tool_error": "could not tell: ...", "gap": True}) == "could not tell"
    )
    assert score_rehearsal.verdict({"exit_code": 3, "tool_error": "KeyError: 'x'"}) == "crash"
    assert score_rehearsal.verdict({"exit_code": None, "tool_error": "the rehearsal never stopped"}) == "crash"


def test_the_adversarial_manifest_names_a_script_and_a_mark_per_machine():
    import tomllib

    with open(score_rehearsal.ADVERSARIAL / "manifest.toml", "rb") as f:
        cases = tomllib.load(f)["case"]
    assert len(cases) >= 20
    for case in cases:
        assert (score_rehearsal.ADVERSARIAL / case.get("file", f"{case['name']}.py")).is_file() and case["source"]
        assert all(case[m] in ("runs", "fails", "?") for m in score_rehearsal.MACHINES)
        for mark in case.get("static", []):
            assert mark.split(":")[0] in KINDS and mark.split(":")[1].isdigit()


def test_the_adversarial_set_runs_for_real_against_this_machines_marks(tmp_path):
    """--real runs each script plainly and compares with the manifest's column for this machine."""
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "ok.py").write_text("print('fine')\n")
    (folder / "bad.py").write_text("import torch\ntorch.ones(2, 3) @ torch.ones(2, 3)\n")
    (folder / "loops.py").write_text("while True:\n    pass\n")
    column = score_rehearsal.this_machine()
    cases = {"ok": "runs", "bad": "runs", "loops": "runs"}  # bad's mark is wrong on purpose
    (folder / "manifest.toml").write_text(
        "".join(f'[[case]]\nname = "{n}"\ngpu = "{m}"\nmac = "{m}"\nlaptop = "{m}"\n\n' for n, m in cases.items())
    )
    scored = score_rehearsal.run_adversarial_for_real(folder, timeout=5, jobs=2)
    assert scored["machine"] == column and (scored["right"], scored["scored"]) == (2, 3)
    rows = {r["name"]: r for r in scored["cases"]}
    assert rows["bad"]["got"] == "fails" and rows["bad"]["error"].startswith("RuntimeError: mat1 and mat2 shapes")
    assert rows["loops"]["got"] == "runs" and "still running after 5 s" in rows["loops"]["error"]
    table = score_rehearsal.real_table(scored)
    assert "bad                            NO fails (runs)" in table and table.endswith("marks confirmed: 2/3")


def test_the_last_error_line_of_a_traceback():
    output = 'step 0\nTraceback (most recent call last):\n  File "x.py", line 2\n    y = f()\nRuntimeError: boom\n'
    assert score_rehearsal.last_error_line(output) == "RuntimeError: boom"
    assert score_rehearsal.last_error_line("loss: 0.5\nall done\n") == ""
    assert score_rehearsal.last_error_line("torch.cuda.OutOfMemoryError: CUDA out of memory.").startswith("torch.cuda")
