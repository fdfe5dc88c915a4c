"""The ladder benchmark runs in quick mode, prints its table and saves it as CSV."""

import csv

from helpers.lesson import data as D
from tools import course, gpu_check


def test_bench_ladder_quick(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (256, 64))
    monkeypatch.chdir(tmp_path)
    bench = course.load_benchmark("bench_ladder")
    assert bench.main(["--quick", "--device", "cpu", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "synthetic CIFAR-shaped data" in out
    for name in ("article loop", "no hidden syncs", "data on device", "larger batch", "channels_last",
                 "mixed precision"):  # fmt: skip
        assert name in out
    assert "skipped: --quick" in out
    rows = list(csv.DictReader(open(tmp_path / "runs" / "bench_ladder_cpu.csv")))
    assert [r["rung"] for r in rows][0] == "article loop" and len(rows) == 7
    assert float(rows[0]["ratio"]) == 1.0
    assert rows[-1]["note"].startswith("skipped")
    # one round of quick mode cannot tell any rung from the article's loop: the table and the CSV say so
    assert [r["verdict"] for r in rows] == ["baseline"] + ["not distinguishable"] * 5 + ["skipped"]
    assert all(r["note"].startswith("not distinguishable here") for r in rows[1:-1])
    best = max(rows, key=lambda r: float(r["ratio"]) if r["ratio"] else 0.0)
    reported = gpu_check.parse_ladder(out)["best ladder rung / article loop"]  # what the GPU check reads
    assert reported.endswith(f"({best['rung']})")
