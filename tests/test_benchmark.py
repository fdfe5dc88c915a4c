"""The training benchmark runs and prints both ratios."""

from helpers.lesson import data as D
from tools import course


def test_benchmark_prints_both_ratios(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (128, 64))
    monkeypatch.chdir(tmp_path)
    bench = course.load_benchmark("bench_training")
    assert bench.main(["--quick", "--device", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "synthetic CIFAR-shaped data" in out
    assert "(a) course loop / bare loop:" in out and "(b) tensor on device / DataLoader:" in out


def test_rehearsal_benchmark_prints_its_ratio_and_the_same_losses(capsys):
    bench = course.load_benchmark("bench_rehearse")
    assert bench.main(["--batches", "9", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "rehearsed / plain time:" in out and "budget 1.5x" in out
    assert "the script's printed losses: the same in both runs" in out


def test_rehearsal_benchmark_runs_the_per_operator_mlp_too(capsys):
    bench = course.load_benchmark("bench_rehearse")
    assert bench.main(["--model", "mlp", "--batches", "9", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mlp: 9 batches") and "the script's printed losses: the same in both runs" in out


def test_mode_cost_benchmark_times_the_four_variants(capsys):
    bench = course.load_benchmark("bench_mode_cost")
    assert bench.main(["--steps", "3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for variant in ("plain", "function mode", "dispatch mode", "both"):
        assert f"  {variant} " in out
