"""The ladder's rungs, the alternated timing and the sync recorder, without timing anything."""

import warnings

import pytest
import torch

from helpers.lab.alternate import alternated
from helpers.lab.sync_recorder import record_syncs
from helpers.lesson.data import synthetic
from helpers.lesson.speed import (
    LadderResult,
    RungRun,
    amp_dtype,
    grad_scaler_works,
    ladder,
    needs_grad_scaler,
    speed_verdict,
    why_not,
)


def test_alternated_orders_and_ratios():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    result = alternated(runs, 10, "cpu", repeats=2)
    assert calls == list("abc") + list("abc") + list("cba")  # warm-up, then forward, then reversed
    assert result.ratios["a"] == 1.0 and set(result.rates) == set("abc")
    assert set(result.warmup_seconds) == set("abc")


def test_ladder_is_cumulative():
    rungs = ladder()
    assert [r.name for r in rungs][0] == "article loop" and rungs[-1].compile
    assert rungs[-1].amp and rungs[-1].channels_last and rungs[-1].loader == "device" and not rungs[-1].item_every_step
    assert amp_dtype("cpu") == torch.bfloat16 and not needs_grad_scaler("cpu")
    assert grad_scaler_works("cpu") and grad_scaler_works("cuda")
    assert grad_scaler_works("mps") == (torch.torch_version.TorchVersion(torch.__version__) >= (2, 8))


def test_amp_dtype_is_bfloat16_only_where_the_gpu_runs_it_natively():
    from helpers.lab.simulate import simulated_machine

    # a T4 (7.5) or V100 (7.0): torch.cuda.is_bf16_supported() says True there by default (emulated bfloat16)
    for capability, dtype in (((7, 5), torch.float16), ((7, 0), torch.float16), ((8, 0), torch.bfloat16),
                              ((9, 0), torch.bfloat16)):  # fmt: skip
        with simulated_machine(cuda=1, capability=capability):
            assert amp_dtype("cuda") == dtype, capability
            assert needs_grad_scaler("cuda") == (dtype == torch.float16)
    with simulated_machine(cuda=1, capability=(7, 5), rocm="6.4"):  # AMD GPUs run bfloat16
        assert amp_dtype("cuda") == torch.bfloat16
    assert amp_dtype("mps") == torch.float16 and needs_grad_scaler("mps")


def test_the_article_rung_copies_as_the_article_does():
    rungs = {r.name: r for r in ladder()}
    assert not rungs["article loop"].pinned_copies and rungs["article loop"].item_every_step  # imgs.to(device)
    assert rungs["no hidden syncs"].pinned_copies and not rungs["no hidden syncs"].item_every_step


def _small_data(monkeypatch):
    from helpers.lesson import data as D
    from helpers.lesson.data import as_tensors

    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (256, 64))
    data = synthetic(True)
    return data, as_tensors(data.train)


def test_the_article_rung_waits_for_each_copy_and_the_next_rung_too_from_pageable_memory(monkeypatch):
    from helpers.lab.sync_recorder import BLOCKING_COPY

    data, tensors = _small_data(monkeypatch)
    copies = {}
    for rung in ladder()[:2]:  # on meta, standing in for a GPU that is not CUDA: the batches really cross
        run = RungRun(rung, data, torch.device("meta"), steps=2, train_tensors=tensors)
        run.optimizer = torch.optim.SGD(run.model.parameters(), lr=0.01)
        with record_syncs() as log:
            try:
                run.train()
            except RuntimeError as err:  # meta has no values: reading the loss ends the run
                assert "meta" in str(err)
        copies[rung.name] = log.counts()[BLOCKING_COPY]
    # every copy blocking: the article's loop reaches its first loss.item() (meta has no values: the run ends) after
    # one step's imgs and targets, the next rung reads its loss after both steps
    assert copies == {"article loop": 2, "no hidden syncs": 4}


@pytest.mark.parametrize("machine", ["a Mac", "a CUDA machine"])
def test_the_no_hidden_syncs_rung_pins_its_batches_on_cuda_and_copies_them_without_waiting(machine, monkeypatch):
    from helpers.lab.simulate import simulated_machine
    from helpers.lesson.devices import pick_device
    from tests.test_training import MACHINES, GpuCopiesOnTheCpu

    data, tensors = _small_data(monkeypatch)
    copies = {}
    with simulated_machine(**MACHINES[machine]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the DataLoader's own: pin_memory is not supported on MPS
        device = pick_device()
        for rung in ladder()[:2]:
            with GpuCopiesOnTheCpu() as mode:
                run = RungRun(rung, data, device, steps=2, train_tensors=tensors)
                run.optimizer = torch.optim.SGD(run.model.parameters(), lr=0.01)  # Adam's step asks CUDA itself
                run.train()
            copies[rung.name] = [(c["pinned"], c["non_blocking"]) for c in mode.copies if c["to"] == device.type]
    batches = 2 * 2  # imgs and targets of 2 steps (the model's own parameters move first)
    assert copies["article loop"][-batches:] == [(False, False)] * batches  # the article's blocking imgs.to(device)
    pinned = device.type == "cuda"  # MPS: no pinned batches, and blocking copies (section 2 of notebook 06)
    assert copies["no hidden syncs"][-batches:] == [(pinned, pinned)] * batches


def test_speed_verdict_from_made_up_rounds():
    assert speed_verdict([1.3, 1.1, 1.2]) == "faster"
    assert speed_verdict([0.7, 0.9, 0.8]) == "slower"
    assert speed_verdict([0.9, 1.4, 1.2]) == "not distinguishable"  # the median says faster, one round says slower
    assert speed_verdict([1.0, 1.2, 1.3]) == "not distinguishable"  # a round that ties
    assert speed_verdict([2.0]) == "not distinguishable"  # one round (quick mode) cannot tell
    assert speed_verdict([2.0, 2.1]) == "not distinguishable"
    assert speed_verdict([2.0, 2.1], min_rounds=2) == "faster"


def _result(ratios, rounds=None, accuracy=(0.5, 0.5, 0.5), repeats=5):
    rungs = ladder()[: len(ratios)]
    names = [r.name for r in rungs]
    return LadderResult(rungs, dict.fromkeys(names, 100.0), dict(zip(names, ratios, strict=True)),
                        dict(zip(names, accuracy, strict=True)), 2 * (1 + repeats), {}, {}, torch.device("cpu"),
                        repeats, dict(zip(names, rounds, strict=True)) if rounds else {})  # fmt: skip


def test_notes_say_why_only_when_the_run_can_tell():
    def notes(repeats, accuracy=(0.5, 0.5, 0.5)):
        return [r["note"] for r in _result((1.0, 0.8, 1.2), accuracy=accuracy, repeats=repeats).rows()]

    quick = "not distinguishable here: 1 round(s) of 2 steps are too few to tell"
    assert notes(1) == ["", quick, quick]
    assert notes(5)[1] == f"did not pay here: {why_not('no hidden syncs', 'cpu')}"
    assert "wait for nothing" in notes(5)[1]
    drop = notes(5, accuracy=(0.9, 0.9, 0.7))[2]  # faster than the rung above, but it learns less
    assert drop == "lower accuracy after the same steps (70.0%, the rung above 90.0%)"
    assert notes(1, accuracy=(0.9, 0.9, 0.7))[2] == quick  # quick runs: accuracy after 4 steps says nothing
    assert "bfloat16" in why_not("mixed precision", "cpu") and why_not("mixed precision", "cuda")


def test_a_rung_whose_rounds_straddle_1_is_not_distinguishable():
    rounds = ([1.0] * 5, [0.9, 1.1, 1.3, 1.2, 1.25], [1.5, 1.6, 1.4, 1.7, 1.5])
    rows = _result((1.0, 1.2, 1.5), rounds).rows()
    assert [r["verdict"] for r in rows] == ["baseline", "not distinguishable", "faster"]
    assert rows[1]["note"] == "not distinguishable here: the rounds gave 0.90x to 1.30x, on both sides of 1"
    assert rows[2]["note"] == ""
    rounds = ([1.0] * 5, [0.7, 0.8, 0.75, 0.9, 0.8], [0.6, 1.05, 0.7, 0.8, 0.7])
    rows = _result((1.0, 0.8, 0.7), rounds).rows()
    assert [r["verdict"] for r in rows] == ["baseline", "slower", "not distinguishable"]
    assert rows[2]["note"].startswith("not distinguishable here: the rounds gave 0.60x to 1.05x")
    assert "did not pay here" in rows[2]["note"]  # and it was slower than the rung above


def test_ladder_plot_colours_by_the_article_loop_and_hatches_accuracy_drops():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.lab.speed_plots import SPEED_COLOURS, SPEED_LABELS, ladder_bars, plot_ladder

    rounds = ([1.0] * 5, [0.7, 0.8, 0.75, 0.9, 0.8], [0.9, 1.1, 1.3, 1.2, 1.25], [1.5, 1.6, 1.4, 1.7, 1.5])
    result = _result((1.0, 0.8, 1.2, 1.5), rounds, accuracy=(0.9, 0.9, 0.9, 0.7))
    bars = ladder_bars(result)
    assert [(b["verdict"], b["less_accurate"]) for b in bars] == [
        ("baseline", False), ("slower", False), ("not distinguishable", False), ("faster", True)
    ]  # fmt: skip
    fig = plot_ladder(result)
    patches = fig.axes[0].patches[:4][::-1]  # drawn bottom-up
    assert [matplotlib.colors.to_hex(p.get_facecolor()) for p in patches] == [
        matplotlib.colors.to_hex(SPEED_COLOURS[b["verdict"]]) for b in bars
    ]
    assert matplotlib.colors.to_hex(patches[2].get_facecolor()) == matplotlib.colors.to_hex("tab:gray")
    assert [p.get_hatch() for p in patches] == [None, None, None, "//"]  # the accuracy drop is hatched, not grey
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [SPEED_LABELS[v] for v in ("baseline", "faster", "slower", "not distinguishable")] + [
        "lower accuracy than the rung above"
    ]
    assert "grey" in labels[3] and "both sides of 1.0x" in labels[3]  # the legend says why a bar is grey
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1.20x (?), acc 90%" in texts


def test_quick_ladder_draws_every_rung_grey():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.lab.speed_plots import ladder_bars

    bars = ladder_bars(_result((1.0, 0.5, 3.0), repeats=1))
    assert [b["verdict"] for b in bars] == ["baseline", "not distinguishable", "not distinguishable"]


def test_rungs_train_and_sync_as_described(monkeypatch):
    from helpers.lesson import data as D

    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (256, 64))  # 4 batches of 64 are enough here
    data = synthetic(True)
    from helpers.lesson.data import as_tensors

    tensors = as_tensors(data.train)
    syncs = {}
    for rung in ladder()[:3]:
        run = RungRun(rung, data, torch.device("cpu"), steps=3, train_tensors=tensors)
        # Adam reads its step counters (CPU tensors, free on a GPU machine too) with .item(): the recorder would
        # count them; the loop's own syncs are what this test is about
        run.optimizer = torch.optim.SGD(run.model.parameters(), lr=0.01)
        with record_syncs() as log:
            run.train()
        syncs[rung.name] = len(log)
        assert len(run.losses) in (1, 3)
    # .item() every step, or once per run; a DataLoader's sampler also reads two CPU tensors per epoch
    # (its random seed and order), which stay on the CPU and cost nothing on a GPU machine
    assert syncs["article loop"] - syncs["no hidden syncs"] == 2
    assert syncs["data on device"] == 1


def test_recorder_counts_what_a_gpu_waits_for():
    x = torch.randn(8)
    with record_syncs() as log:
        x.sum().item()
        if x.sum() > 0:
            pass
        x.nonzero()
        x[x > 0]
        x.cpu()
        x.tolist()
        x.numpy()
        print(x)
        f"{x.sum():.2f}"
    assert len(log) == 9, str(log)
    with record_syncs() as log:
        y = (x * 2).to(torch.float64).sum()
        torch.where(x > 0, x, 0.0)
        x.repeat_interleave(2, output_size=16)
        x.to("cpu", non_blocking=True)  # already there: on a GPU this would be .to("cuda"), no fetch
    assert len(log) == 0, str(log)
    assert y.item() is not None  # recorder removed: methods work as before
    assert torch.Tensor.cpu.__name__ == "cpu"


def test_recorder_counts_blocking_copies_to_a_device():
    # meta stands in for a GPU: a device that is never the CPU
    data = torch.zeros(10, 3, device="meta")
    host = torch.arange(10)
    cases = {
        "a blocking .to(device)": (lambda: host.to("meta"), 1),
        "copy_ into a device tensor": (lambda: data.copy_(torch.zeros(10, 3)), 1),
        "torch.tensor(..., device=...)": (lambda: torch.tensor([1.0, 2.0], device="meta"), 1),
        "torch.as_tensor(..., device=...)": (lambda: torch.as_tensor([1.0, 2.0], device="meta"), 1),
        "CPU indices into device data": (lambda: data[torch.randperm(10)[:4]], 1),
        "assignment at CPU indices": (lambda: data.__setitem__(torch.tensor([1, 2]), 0.0), 1),
        "non_blocking=True from pageable memory": (lambda: host.to("meta", non_blocking=True), 1),
        "copy_ non_blocking from pageable memory": (lambda: data.copy_(torch.zeros(10, 3), non_blocking=True), 1),
        "indices on the device": (lambda: data[torch.randperm(10, device="meta")[:4]], 0),
        "slices": (lambda: data[2:5], 0),
        "a CPU tensor to the CPU": (lambda: host.to("cpu"), 0),
        "a dtype change": (lambda: host.to(torch.float32), 0),
    }
    for name, (code, expected) in cases.items():
        with record_syncs() as log:
            code()
        assert len(log) == expected and not log.mixed, (name, str(log))
    with record_syncs() as log:  # not a synchronisation: a CUDA GPU refuses it ("Expected all tensors ...")
        data.index_select(0, torch.arange(3))
    assert len(log) == 0 and log.mixed == ["index_select() with CPU indices into device data"]
    assert torch.tensor.__name__ == "tensor" and torch.Tensor.to.__name__ == "to"  # restored


def test_a_non_blocking_copy_waits_only_when_its_source_is_pageable(monkeypatch):
    from helpers.lab.sync_recorder import BLOCKING_COPY, PAGEABLE_COPY

    data, host = torch.zeros(10, 3, device="meta"), torch.zeros(10, 3)
    with record_syncs() as pageable:
        host.to("meta", non_blocking=True)
        data.copy_(host, non_blocking=True)
    assert pageable.counts() == {PAGEABLE_COPY: 2}  # on CUDA, PyTorch's docs: the argument then has no effect
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)  # no GPU here to pin with: pretend
    with record_syncs() as pinned:
        host.to("meta", non_blocking=True)  # queued: the CPU goes on
        data.copy_(host, non_blocking=True)
        host.to("meta")  # still blocking
    assert pinned.counts() == {BLOCKING_COPY: 1}


def test_child_stderr_is_captured():
    import subprocess
    import sys

    from helpers.lab.child import capture_child_stderr

    with capture_child_stderr() as err:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n')"], check=True)
    assert err.last_line() == "boom"


def test_a_cpu_copy_is_not_drawn_against_pcie_lines():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.lab.speed_plots import PCIE_X16_GB_S, plot_bandwidth

    sizes, rates = [4096, 32768], {"this CPU copying host memory (not a transfer)": [0.5, 0.4]}
    cpu = plot_bandwidth(sizes, rates, "host memory", pcie_lines=False)
    assert [t.get_text() for t in cpu.axes[0].get_legend().get_texts()] == list(rates)
    gpu = plot_bandwidth(sizes, {"pinned -> GPU": [1.0, 20.0]}, "host to GPU")
    assert len(gpu.axes[0].get_legend().get_texts()) == 1 + len(PCIE_X16_GB_S)
