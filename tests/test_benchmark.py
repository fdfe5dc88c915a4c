"""The training benchmark runs and prints both ratios."""

import importlib.util
from pathlib import Path

from helpers import data as D

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_training.py"


def test_benchmark_prints_both_ratios(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("bench_training", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--device", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "synthetic CIFAR-shaped data" in out
    assert "(a) course loop / bare loop:" in out and "(b) tensor on device / DataLoader:" in out
