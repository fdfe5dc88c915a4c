"""Score ``python -m helpers.rehearse`` on scripts nobody here wrote: the corpus in a manifest, marked by hand.

    python tools/score_rehearsal.py                               # the corpus, downloaded into a cache
    python tools/score_rehearsal.py --scripts DIR --batch blind   # scripts already here (DIR/<name>.py)
    python tools/score_rehearsal.py --json                        # the same figures as JSON
    python tools/score_rehearsal.py --adversarial                 # the adversarial set, as a GPU, a Mac, a laptop
    python tools/score_rehearsal.py --adversarial --real          # the same scripts run for real on this machine

The manifest (``tests/rehearse_corpus/manifest.toml``) names each script by repository, commit and path, with
its sha256 and the device problems marked by hand before the tool ran on it. The scripts are not in this
repository: ``--scripts DIR`` reads ``DIR/<name>.py``, otherwise each is downloaded from
``raw.githubusercontent.com`` into ``--cache`` (a file whose sha256 differs is refused, not scored).

What it reports, through the package's own API (``static_check.read``, ``script_run.rehearse``,
``port.port_source``):

- the static reading against the marks: a finding matches a mark on the same line and kind; precision and
  recall per kind and overall;
- the rehearsal (``--as gpu``) of each runnable script: ``ok`` when it reaches its step limit or its end
  (``expect = "runs"``) or reports the script's own bug (``expect = "script-bug"``), with no tool error;
- the ``--fix`` port of every script: re-read statically (what is left), and for a runnable script rehearsed as
  a GPU, a Mac and a laptop; clean when no device problem and no tool error is left (the script's own bug
  stays where the manifest expects one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.rehearse.port import port_source  # noqa: E402
from helpers.rehearse.script_run import rehearse  # noqa: E402
from helpers.rehearse.static_check import read  # noqa: E402

MANIFEST = ROOT / "tests" / "rehearse_corpus" / "manifest.toml"
ADVERSARIAL = ROOT / "tests" / "fixtures" / "rehearse" / "adversarial"
RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
MACHINES = ("gpu", "mac", "laptop")
LEFT_TO_LEARNER = {"workers-no-main-guard"}  # where a definition needs the moved names, the port lists it


def load_manifest(path: str | Path = MANIFEST) -> list[dict]:
    with open(path, "rb") as f:
        return tomllib.load(f).get("script", [])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get_script(entry: dict, scripts: Path | None, cache: Path) -> tuple[Path | None, str]:
    """The script's file and '' , or None and why not."""
    if scripts is not None:
        path = scripts / f"{entry['name']}.py"
        if not path.is_file():
            return None, f"not in {scripts}"
    else:
        path = cache / f"{entry['name']}.py"
        if not path.is_file():
            url = RAW.format(repo=entry["repo"], commit=entry["commit"], path=entry["path"])
            try:
                with urllib.request.urlopen(url.replace(" ", "%20"), timeout=30) as response:
                    data = response.read()
            except OSError as err:
                return None, f"download failed: {err}"
            cache.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    if sha256(path.read_bytes()) != entry["sha256"]:
        return None, "sha256 differs from the manifest"
    return path, ""


def static_score(path: Path, marks: list) -> dict:
    found = {(f.line, f.kind) for f in read(path).findings}
    marked = {(int(line), kind) for line, kind in marks}
    return {
        "found": sorted(found),
        "true": sorted(found & marked),
        "false_alarms": sorted(found - marked),
        "missed": sorted(marked - found),
    }


def _run(path: Path, args: list[str], machine: str, steps: int, timeout: float, folders=()) -> dict:
    """One rehearsal in a fresh working folder, deep enough that '../../data' stays inside it; removed after.
    ``folders``: the empty folders the script's repository holds beside it (``results/``)."""
    top = Path(tempfile.mkdtemp(prefix="rehearse_corpus_"))
    cwd = top / "a" / "b" / "run"
    cwd.mkdir(parents=True)
    for folder in folders:
        (cwd / folder).mkdir(parents=True, exist_ok=True)
    try:
        return rehearse(path, *args, machine=machine, steps=steps, loops=4, timeout=timeout, cwd=cwd)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def outcome(result: dict) -> str:
    """'tool-error', 'script-bug', 'problems' (device problems) or 'runs'."""
    if result.get("tool_error") or result.get("exit_code") not in (0, 1):
        return "tool-error"
    kinds = {f["kind"] for f in result.get("findings", []) if f.get("blocks")}
    if "script-bug" in kinds:
        return "script-bug"
    return "problems" if kinds else "runs"


def _why(result: dict) -> str:
    if result.get("tool_error"):
        return str(result["tool_error"]).strip().splitlines()[-1][:160]
    bad = [f for f in result.get("findings", []) if f.get("blocks")]
    return "; ".join(f"{f['kind']}:{f['line']} {f['message'][:80]}" for f in bad[:3])


def score_one(entry: dict, path: Path, steps: int, timeout: float, run: bool, fix: bool, original: bool = True) -> dict:
    row = {"name": entry["name"], "batch": entry.get("batch", ""), "runnable": entry["runnable"]}
    row["static"] = static_score(path, entry["marks"])
    args = [str(a) for a in entry.get("args", [])]
    expect = entry.get("expect", "runs")
    folders = entry.get("folders", [])
    if run and original and entry["runnable"]:
        result = _run(path, args, "gpu", steps, timeout, folders)
        got = outcome(result)
        row["run"] = {"outcome": got, "expect": expect, "ok": got == expect, "why": _why(result)}
    if fix:
        code = path.read_text(encoding="utf-8")
        try:
            ported, left = port_source(code, str(path))
        except Exception as err:  # noqa: BLE001 - a port that fails is a figure
            row["fix"] = {"clean": False, "why": f"port failed: {type(err).__name__}: {err}"}
            return row
        folder = Path(tempfile.mkdtemp(prefix="rehearse_port_"))
        try:
            target = folder / path.name
            target.write_text(ported, encoding="utf-8")
            still = [
                (f.line, f.kind)
                for f in read(target).findings
                if f.kind not in LEFT_TO_LEARNER and f.kind != "script-bug"
            ]
            fixed = {"changed": ported != code, "static_left": still, "left_to_learner": left, "machines": {}}
            if entry["runnable"] and run:
                for machine in MACHINES:
                    result = _run(target, args, machine, steps, timeout, folders)
                    got = outcome(result)
                    fixed["machines"][machine] = {"outcome": got, "why": _why(result)}
            wanted = {"runs", expect}
            fixed["clean"] = not still and all(v["outcome"] in wanted for v in fixed["machines"].values())
            row["fix"] = fixed
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return row


def totals(rows: list[dict]) -> dict:
    per_kind: dict[str, Counter] = {}
    for row in rows:
        for part, counter_key in (("true", "tp"), ("false_alarms", "fp"), ("missed", "fn")):
            for _line, kind in row["static"][part]:
                per_kind.setdefault(kind, Counter())[counter_key] += 1
    overall = sum(per_kind.values(), Counter())

    def pr(c: Counter) -> dict:
        tp, fp, fn = c["tp"], c["fp"], c["fn"]
        return {
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": tp / (tp + fp) if tp + fp else 1.0,
            "recall": tp / (tp + fn) if tp + fn else 1.0,
        }

    runs = [r["run"] for r in rows if "run" in r]
    fixes = [r["fix"] for r in rows if "fix" in r]
    return {
        "scripts": len(rows),
        "static": {"overall": pr(overall), "per_kind": {k: pr(c) for k, c in sorted(per_kind.items())}},
        "runnable": len(runs),
        "run_ok": sum(r["ok"] for r in runs),
        "run_ok_share": sum(r["ok"] for r in runs) / len(runs) if runs else 1.0,
        "tool_errors": sum(r["outcome"] == "tool-error" for r in runs),
        "fixes": len(fixes),
        "fix_clean": sum(f["clean"] for f in fixes),
        "fix_clean_share": sum(f["clean"] for f in fixes) / len(fixes) if fixes else 1.0,
    }


def table(rows: list[dict], summary: dict) -> str:
    lines = [f"{'script':18} {'batch':11} {'static tp/fp/fn':15} {'run (expected)':28} fix gpu/mac/laptop"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']:18} {r['batch']:11} not scored: {r['error']}")
            continue
        s = r["static"]
        st = f"{len(s['true'])}/{len(s['false_alarms'])}/{len(s['missed'])}"
        run = "static only"
        if "run" in r:
            run = f"{'ok' if r['run']['ok'] else 'NO'} {r['run']['outcome']} ({r['run']['expect']})"
        fix = ""
        if "fix" in r:
            f = r["fix"]
            fix = (
                ("clean" if f["clean"] else "NOT clean")
                + " "
                + "/".join(v["outcome"] for v in f.get("machines", {}).values())
            )
            if f.get("static_left"):
                fix += f" left {f['static_left']}"
            if f.get("why"):
                fix += f" {f['why']}"
        lines.append(f"{r['name']:18} {r['batch']:11} {st:15} {run:28} {fix}")
        for line, kind in s["false_alarms"]:
            lines.append(f"{'':30} false alarm {line} {kind}")
        for line, kind in s["missed"]:
            lines.append(f"{'':30} missed {line} {kind}")
        if "run" in r and not r["run"]["ok"]:
            lines.append(f"{'':30} run: {r['run']['why']}")
        for machine, v in r.get("fix", {}).get("machines", {}).items():
            if v["outcome"] not in ("runs", r.get("run", {}).get("expect", "runs")):
                lines.append(f"{'':30} fix as {machine}: {v['why']}")
    o = summary["static"]["overall"]
    lines += [
        "",
        "static, per kind:",
        *(
            f"  {k:24} tp {c['tp']:3} fp {c['fp']:3} fn {c['fn']:3}  precision {c['precision']:.0%}  "
            f"recall {c['recall']:.0%}"
            for k, c in summary["static"]["per_kind"].items()
        ),
        f"static overall: precision {o['precision']:.1%} ({o['tp']}/{o['tp'] + o['fp']}), "
        f"recall {o['recall']:.1%} ({o['tp']}/{o['tp'] + o['fn']}) over {summary['scripts']} scripts",
        f"rehearsal as gpu: {summary['run_ok']}/{summary['runnable']} runnable scripts to their step limit or "
        f"their reported bug ({summary['run_ok_share']:.1%}), {summary['tool_errors']} tool error(s)",
        f"--fix: {summary['fix_clean']}/{summary['fixes']} ports clean ({summary['fix_clean_share']:.1%})",
    ]
    return "\n".join(lines)


def verdict(result: dict) -> str:
    """'runs', 'fails', 'could not tell' (a gap the rehearsal names) or 'crash' (the rehearsal itself failed)."""
    if result.get("exit_code") == 3 or result.get("tool_error"):
        return "could not tell" if result.get("gap") else "crash"
    return {0: "runs", 1: "fails"}.get(result.get("exit_code"), "crash")


def score_adversarial(folder: Path, steps: int, timeout: float, jobs: int, only=None) -> dict:
    """Each script of ``folder/manifest.toml`` rehearsed as a GPU, a Mac and a laptop (one child per script),
    against its hand marks; with its static reading where the manifest marks one."""
    from helpers.rehearse.several import rehearse_on

    with open(folder / "manifest.toml", "rb") as f:
        cases = [c for c in tomllib.load(f)["case"] if not only or c["name"] in only]

    def one(case: dict) -> dict:
        top = Path(tempfile.mkdtemp(prefix="rehearse_adv_"))
        script = top / f"{case['name']}.py"  # a case kept as .txt (a syntax error the linter refuses) runs as .py
        shutil.copyfile(folder / case.get("file", script.name), script)
        try:
            reports = rehearse_on(script, steps=steps, loops=2, timeout=timeout, cwd=top)
        except subprocess.TimeoutExpired:  # the child never stopped: the rehearsal's own failure
            reports = {
                m: {"exit_code": None, "tool_error": "the rehearsal never stopped", "findings": []} for m in MACHINES
            }
        finally:
            shutil.rmtree(top, ignore_errors=True)
        row = {"name": case["name"], "machines": {}}
        for machine in MACHINES:
            got = verdict(reports[machine])
            row["machines"][machine] = {"expect": case[machine], "got": got, "why": _why(reports[machine])}
        if "static" in case:
            found = {f"{f.kind}:{f.line}" for f in read(folder / case.get("file", f"{case['name']}.py")).findings}
            row["static_missed"] = sorted(set(case["static"]) - found)
        return row

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        rows = list(pool.map(one, cases))
    summary = {}
    for machine in MACHINES:
        cells = [r["machines"][machine] for r in rows if r["machines"][machine]["expect"] != "?"]
        summary[machine] = {
            "scored": len(cells),
            "right": sum(c["got"] == c["expect"] for c in cells),
            "wrong": sum(c["got"] in ("runs", "fails") and c["got"] != c["expect"] for c in cells),
            "could_not_tell": sum(c["got"] == "could not tell" for c in cells),
            "crash": sum(c["got"] == "crash" for c in cells),
        }
    summary["static_missed"] = sum(len(r.get("static_missed", [])) for r in rows)
    return {"summary": summary, "cases": rows}


def this_machine() -> str:
    """Which column of the adversarial manifest this machine is: 'gpu', 'mac' or 'laptop'."""
    import torch

    if torch.cuda.is_available():
        return "gpu"
    return "mac" if torch.backends.mps.is_available() else "laptop"


def last_error_line(output: str) -> str:
    """The exception line a traceback ends with ('' when the output holds none)."""
    lines = [line for line in output.strip().splitlines() if line and not line.startswith((" ", "\t"))]
    errors = [
        line for line in lines if ": " in line and line.split(":", 1)[0].split(".")[-1].endswith(("Error", "Exception"))
    ]
    return errors[-1][:300] if errors else ""


def run_adversarial_for_real(folder: Path, timeout: float, jobs: int, only=None) -> dict:
    """Each script of ``folder/manifest.toml`` run plainly here (no rehearsal), against its hand mark for this
    machine: what the real machine does, to check the marks the rehearsal is scored against."""
    machine = this_machine()
    with open(folder / "manifest.toml", "rb") as f:
        cases = [c for c in tomllib.load(f)["case"] if not only or c["name"] in only]

    def one(case: dict) -> dict:
        top = Path(tempfile.mkdtemp(prefix="real_adv_"))
        script = top / f"{case['name']}.py"
        shutil.copyfile(folder / case.get("file", script.name), script)
        try:
            done = subprocess.run([sys.executable, script.name], cwd=top, capture_output=True, text=True,
                                  timeout=timeout, errors="replace")  # fmt: skip
            got, output = ("runs" if done.returncode == 0 else "fails"), done.stdout + done.stderr
        except subprocess.TimeoutExpired:  # no device error by then: a loop that runs until stopped runs
            got, output = "runs", f"(still running after {timeout:.0f} s, stopped)"
        finally:
            shutil.rmtree(top, ignore_errors=True)
        error = last_error_line(output) or (output if output.startswith("(still") else "")
        return {"name": case["name"], "expect": case[machine], "got": got, "error": error}

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        rows = list(pool.map(one, cases))
    scored = [r for r in rows if r["expect"] != "?"]
    return {"machine": machine, "right": sum(r["got"] == r["expect"] for r in scored), "scored": len(scored),
            "cases": rows}  # fmt: skip


def real_table(scored: dict) -> str:
    lines = [f"the adversarial set run for real on this machine (its column: {scored['machine']})"]
    for r in scored["cases"]:
        mark = "ok" if r["got"] == r["expect"] or r["expect"] == "?" else "NO"
        lines.append(f"{r['name']:30} {mark} {r['got']} ({r['expect']})" + (f"  {r['error']}" if r["error"] else ""))
    lines.append(f"marks confirmed: {scored['right']}/{scored['scored']}")
    return "\n".join(lines)


def adversarial_table(scored: dict) -> str:
    lines = [f"{'script':30} {'gpu':22} {'mac':22} {'laptop':22}"]
    for r in scored["cases"]:
        cells = []
        for machine in MACHINES:
            c = r["machines"][machine]
            mark = "ok" if c["got"] == c["expect"] or c["expect"] == "?" else "NO"
            cells.append(f"{mark} {c['got']} ({c['expect']})")
        lines.append(f"{r['name']:30} " + " ".join(f"{c:22}" for c in cells))
        for machine in MACHINES:
            c = r["machines"][machine]
            if c["got"] != c["expect"] and c["expect"] != "?" and c["why"]:
                lines.append(f"{'':32}{machine}: {c['why']}")
        if r.get("static_missed"):
            lines.append(f"{'':32}static missed: {r['static_missed']}")
    lines.append("")
    for machine in MACHINES:
        s = scored["summary"][machine]
        lines.append(
            f"as {machine:6}: {s['right']}/{s['scored']} right, {s['wrong']} wrong, "
            f"{s['could_not_tell']} could not tell, {s['crash']} crash(es)"
        )
    lines.append(f"static marks missed: {scored['summary']['static_missed']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adversarial", nargs="?", const=str(ADVERSARIAL), help="score the adversarial set (a folder)")
    p.add_argument(
        "--real",
        action="store_true",
        help="with --adversarial: run the scripts plainly on this machine "
        "and compare with the manifest's marks for it (a GPU, a Mac or a laptop)",
    )
    p.add_argument("--manifest", default=str(MANIFEST))
    p.add_argument("--scripts", help="a folder holding <name>.py for each script (otherwise: download)")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "course-rehearse-corpus"))
    p.add_argument("--batch", help="score one batch only (development, blind or blind3)")
    p.add_argument("--only", nargs="*", help="score these names only")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--jobs", type=int, default=2, help="scripts scored at once (default 2)")
    p.add_argument("--no-run", action="store_true", help="the static reading only")
    p.add_argument("--no-fix", action="store_true", help="no --fix ports")
    p.add_argument("--fix-only", action="store_true", help="rehearse the ports only, not the scripts as they are")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rows", help="also append each script's row to this file (JSON lines) as soon as it is scored")
    opts = p.parse_args(argv)
    if opts.adversarial:
        env = {"PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        with mock.patch.dict(os.environ, {**env, "MPLBACKEND": "Agg"}):
            if opts.real:
                scored = run_adversarial_for_real(Path(opts.adversarial), opts.timeout, opts.jobs, opts.only)
                print(json.dumps(scored, indent=1, ensure_ascii=False) if opts.json else real_table(scored))
                return 0 if scored["right"] == scored["scored"] else 1
            scored = score_adversarial(Path(opts.adversarial), opts.steps, opts.timeout, opts.jobs, opts.only)
        print(json.dumps(scored, indent=1, ensure_ascii=False) if opts.json else adversarial_table(scored))
        return 0
    entries = [
        e
        for e in load_manifest(opts.manifest)
        if (not opts.batch or e.get("batch") == opts.batch) and (not opts.only or e["name"] in opts.only)
    ]
    scripts = Path(opts.scripts).resolve() if opts.scripts else None

    def one(entry: dict) -> dict:
        path, why = get_script(entry, scripts, Path(opts.cache))
        if path is None:
            return {"name": entry["name"], "batch": entry.get("batch", ""), "error": why}
        row = score_one(entry, path, opts.steps, opts.timeout, not opts.no_run, not opts.no_fix, not opts.fix_only)
        if opts.rows:
            with open(opts.rows, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        return row

    # the rehearsals' children find the course and draw no window; this process's environment is put back after
    child_env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "MPLBACKEND": os.environ.get("MPLBACKEND", "Agg"),
    }
    with mock.patch.dict(os.environ, child_env), ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        rows = list(pool.map(one, entries))
    scored = [r for r in rows if "error" not in r]
    summary = totals(scored)
    summary["not_scored"] = [r["name"] for r in rows if "error" in r]
    if opts.json:
        print(json.dumps({"summary": summary, "scripts": rows}, indent=1, ensure_ascii=False))
    else:
        print(table(rows, summary))
    return 0 if not summary["not_scored"] else 1


if __name__ == "__main__":
    sys.exit(main())
