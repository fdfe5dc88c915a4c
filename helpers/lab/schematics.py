"""Diagrams of what cannot be measured in a cell (supporting code, not the lesson): where tensors live, the paths a
copy takes, the loader's processes, the gradients of several processes meeting.

Each function draws one diagram with matplotlib (so it shows the same in JupyterLab, Colab, the site and the
slides) and returns the figure; its words speak the course's language where a font can draw it (``label``).
"""

from __future__ import annotations

from helpers.course.i18n import tr_lazy
from helpers.lab.plots import figure_context, label

HOST, DEVICE, BUS, NOTE = "#dbe9f6", "#dff2df", "#f3e3c3", "#555555"


def _canvas(width: float, height: float):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width * 10)
    ax.set_ylim(0, height * 10)
    ax.axis("off")
    return fig, ax


def _box(ax, x, y, w, h, text, colour, size=9, weight="normal"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.3,rounding_size=0.8", facecolor=colour,
                                edgecolor="#333333", linewidth=1))  # fmt: skip
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight, wrap=True)


def _arrow(ax, start, end, text="", colour="#333333", style="-|>", offset=(0, 1.2)):
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": style, "color": colour, "linewidth": 1.6})
    if text:
        middle = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*middle, text, ha="center", va="bottom", fontsize=8, color=colour)


def host_and_device(code: str = "y = x.cuda()"):
    """A CPU with its memory and a GPU with its own, joined by PCIe; ``code`` copies x across, and x stays.
    ``y = x.cpu()`` (or any code ending in ``.cpu()``) draws the copy back from the GPU."""
    back = code.endswith(".cpu()")
    with figure_context():
        fig, ax = _canvas(8, 3.2)
        _box(ax, 2, 4, 28, 24, "", HOST)
        ax.text(16, 25, label(tr_lazy("CPU and its memory (RAM)")), ha="center", fontsize=9, weight="bold")
        _box(ax, 50, 4, 28, 24, "", DEVICE)
        ax.text(64, 25, label(tr_lazy("GPU and its memory")), ha="center", fontsize=9, weight="bold")
        _box(ax, 8, 9, 16, 7, "y" if back else "x", "white", size=11)
        _box(ax, 56, 9, 16, 7, "x" if back else "y", "white", size=11)
        _box(ax, 34, 11, 12, 3, label(tr_lazy("PCIe bus")), BUS, size=8)
        ends = ((55.5, 12.5), (24.5, 12.5)) if back else ((24.5, 12.5), (55.5, 12.5))
        _arrow(ax, *ends, code, offset=(0, 3))
        stays = label(tr_lazy("x stays here"))
        new = label(tr_lazy("a new tensor: y.device is {device}"), device="cpu" if back else "cuda:0")
        ax.text(16, 5.5, new if back else stays, ha="center", fontsize=8, color=NOTE)
        ax.text(64, 5.5, stays if back else new, ha="center", fontsize=8, color=NOTE)
        fig.tight_layout()
    return fig


def create_vs_move():
    """Create on the CPU and move (an allocation on each side and a copy over PCIe) against create on the device
    (one allocation, no copy)."""
    with figure_context():
        fig, ax = _canvas(9, 3.6)
        ax.text(2, 33, 'torch.randn(1000, 1000).to("cuda")', fontsize=8.5, weight="bold", family="monospace")
        _box(ax, 2, 20, 18, 8, label(tr_lazy("made in RAM\n(then thrown away)")), HOST, size=8)
        _box(ax, 60, 20, 18, 8, label(tr_lazy("copy on the GPU")), DEVICE, size=8)
        _arrow(ax, (20.5, 24), (59.5, 24), label(tr_lazy("4 MB over PCIe")), offset=(0, 1.2))
        ax.text(2, 13, 'torch.randn(1000, 1000, device="cuda")', fontsize=8.5, weight="bold", family="monospace")
        _box(ax, 60, 1, 18, 8, label(tr_lazy("made on the GPU")), DEVICE, size=8)
        ax.text(40, 5, label(tr_lazy("no copy: the GPU fills it itself")), ha="center", fontsize=8, color=NOTE)
        fig.tight_layout()
    return fig


def module_vs_tensor():
    """``model.to(device)`` moves the module's parameters in place and returns the same module; ``x.to(device)``
    returns a new tensor and leaves x where it was."""
    with figure_context():
        fig, ax = _canvas(9, 3.6)
        ax.text(22, 33, "model.to(device)", ha="center", fontsize=9, weight="bold")
        _box(ax, 2, 16, 16, 12, label(tr_lazy("model\nweight, bias:\nCPU")), HOST, size=8)
        _box(ax, 26, 16, 16, 12, label(tr_lazy("the same model\nweight, bias:\nGPU")), DEVICE, size=8)
        _arrow(ax, (18.5, 22), (25.5, 22))
        ax.text(22, 9, label(tr_lazy("in place: it returns the same object\n(model.to(device) is model)")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        ax.text(68, 33, "x.to(device)", ha="center", fontsize=9, weight="bold")
        _box(ax, 50, 16, 14, 12, label(tr_lazy("x\nCPU")), HOST, size=8)
        _box(ax, 74, 16, 14, 12, label(tr_lazy("y, a new tensor\nGPU")), DEVICE, size=8)
        _arrow(ax, (64.5, 22), (73.5, 22))
        ax.text(69, 9, label(tr_lazy("a copy: x stays on the CPU;\nkeep the result (x = x.to(device))")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        ax.plot([46, 46], [3, 34], color="#bbbbbb", linewidth=1)
        fig.tight_layout()
    return fig


def left_behind():
    """A training step's tensors, by device: the model and the images moved, the labels left on the CPU, and the
    loss that needs them all on one device."""
    with figure_context():
        fig, ax = _canvas(9, 3.8)
        _box(ax, 1, 3, 30, 30, "", HOST)
        ax.text(16, 30, "CPU", ha="center", fontsize=9, weight="bold")
        _box(ax, 45, 3, 43, 30, "", DEVICE)
        ax.text(66, 30, "GPU (cuda:0)", ha="center", fontsize=9, weight="bold")
        _box(ax, 50, 21, 14, 5, "model", "white", size=9)
        _box(ax, 50, 12, 14, 5, "imgs", "white", size=9)
        _box(ax, 6, 12, 18, 5, "targets", "#f6d5d5", size=9)
        _box(ax, 70, 12, 15, 5, "loss_fn(...)", "white", size=9)
        _arrow(ax, (64.5, 23.5), (72, 17.5))
        _arrow(ax, (64.5, 14.5), (69.5, 14.5))
        _arrow(ax, (24.5, 14.5), (69.5, 13.5), label(tr_lazy("left behind")), colour="tab:red", offset=(0, -5))
        ax.text(44.5, 0.5, label(tr_lazy("RuntimeError: Expected all tensors to be on the same device")),
                ha="center", fontsize=8, color="tab:red")  # fmt: skip
        ax.text(16, 7, "targets = targets.to(device)", ha="center", fontsize=8, color=NOTE)
        fig.tight_layout()
    return fig


def async_queue(error: bool = False):
    """The CPU queues kernels and runs ahead; the GPU runs them later, in order; ``.item()`` waits for all of them.
    ``error=True``: a kernel fails on the GPU, and the CPU hears of it only at that wait, lines later."""
    with figure_context():
        fig, ax = _canvas(9, 3.2)
        ax.text(1, 24, "CPU", fontsize=9, weight="bold", va="center")
        ax.text(1, 10, "GPU", fontsize=9, weight="bold", va="center")
        names = ["conv", "linear", "loss", "backward"]
        for i, name in enumerate(names):
            _box(ax, 9 + i * 9, 21, 7, 6, label(tr_lazy("queue {name}"), name=name), HOST, size=7)
            failed = error and name == "loss"
            _box(ax, 25 + i * 13, 7, 11, 6, name, "#f6d5d5" if failed else DEVICE, size=8)
            _arrow(ax, (12.5 + i * 9, 20.5), (30.5 + i * 13, 13.5), colour="#999999")
        _box(ax, 46, 21, 30, 6, label(tr_lazy("loss.item(): the CPU waits")), "#f3d9b1", size=8)
        if error:
            _arrow(ax, (57, 13.5), (70, 20.5), colour="tab:red")
            ax.text(56, 2, label(tr_lazy("the kernel fails here...")), ha="center", fontsize=8, color="tab:red")
            ax.text(61, 30, label(tr_lazy("...and the error is raised here, at a later line")), ha="center",
                    fontsize=8, color="tab:red")  # fmt: skip
        else:
            _arrow(ax, (80, 13.5), (76.5, 20.5), label(tr_lazy("the value")), offset=(-8, -2))
            ax.text(45, 2, label(tr_lazy("the GPU runs the queued work in order, after the CPU has moved on")),
                    ha="center", fontsize=8, color=NOTE)  # fmt: skip
        ax.annotate("", xy=(89, 17), xytext=(5, 17), arrowprops={"arrowstyle": "-|>", "color": "#bbbbbb"})
        ax.text(89, 18, label(tr_lazy("time")), ha="right", fontsize=7, color=NOTE)
        fig.tight_layout()
    return fig


def torchrun_processes(workers: int = 2):
    """torchrun starts one process per device, each with its own RANK, LOCAL_RANK and WORLD_SIZE; they meet at
    MASTER_ADDR:MASTER_PORT and join one process group."""
    with figure_context():
        fig, ax = _canvas(9, 3.6)
        _box(ax, 2, 14, 20, 8, f"torchrun\n--nproc-per-node={workers}", "white", size=8)
        for r in range(workers):
            y = 24 - r * 16 / max(1, workers - 1) if workers > 1 else 16
            _box(ax, 32, y, 26, 8, label(tr_lazy("process: RANK={r}, LOCAL_RANK={r},\nWORLD_SIZE={n}"), r=r, n=workers),
                 HOST, size=7)  # fmt: skip
            _box(ax, 68, y, 10, 8, f"cuda:{r}", DEVICE, size=8)
            _arrow(ax, (22.5, 18), (31.5, y + 4))
            _arrow(ax, (58.5, y + 4), (67.5, y + 4))
        ax.text(45, 2, label(tr_lazy("each process calls init_process_group(): they meet at MASTER_ADDR:MASTER_PORT")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        gloo = label(tr_lazy("(on the CPU, with gloo: the processes share its cores)"))
        ax.text(73, 33, gloo, ha="center", fontsize=7, color=NOTE)
        fig.tight_layout()
    return fig


def copy_paths():
    """Host to device: from pageable memory through a pinned staging buffer, from pinned memory directly."""
    with figure_context():
        fig, ax = _canvas(8.5, 3.6)
        _box(ax, 2, 21, 20, 9, label(tr_lazy("pageable memory\n(a plain CPU tensor)")), HOST, size=8)
        _box(ax, 31, 21, 20, 9, label(tr_lazy("pinned staging buffer\n(the driver's)")), HOST, size=8)
        _box(ax, 2, 4, 20, 9, label(tr_lazy("pinned memory\n(t.pin_memory())")), HOST, size=8)
        _box(ax, 64, 11, 19, 12, label(tr_lazy("GPU memory")), DEVICE, size=9, weight="bold")
        _arrow(ax, (22.5, 25.5), (30.5, 25.5), label(tr_lazy("CPU copies")), offset=(0, 1.5))
        _arrow(ax, (51.5, 25.5), (63.5, 20), label(tr_lazy("the copy engine, over PCIe")), offset=(0, 2.5))
        direct = label(tr_lazy("the copy engine, over PCIe: no extra copy"))
        _arrow(ax, (22.5, 8.5), (63.5, 14), direct, offset=(-2, -4.5))
        ax.text(42.5, 33, label(tr_lazy("pageable: two copies, the CPU busy with the first")), ha="center",
                fontsize=8, color=NOTE)  # fmt: skip
        ax.text(42.5, 0.5, label(tr_lazy("pinned: one copy, which non_blocking=True lets run while the CPU goes on")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        fig.tight_layout()
    return fig


def loader_pipeline(workers: int = 2):
    """DataLoader(num_workers=N, pin_memory=True): workers make whole batches, a queue hands them over, a pin
    thread pins them, the loop copies them to the GPU."""
    with figure_context():
        fig, ax = _canvas(9, 3.8)
        _box(ax, 1, 14, 13, 10, label(tr_lazy("Dataset\n(files on disk)")), "white", size=8)
        height = min(8.0, 26 / workers - 2)
        for i in range(workers):
            y = 33 - (i + 1) * 28 / (workers + 1) - height / 2 + 2
            _box(ax, 20, y, 16, height, label(tr_lazy("worker {i}:\na whole batch"), i=i), HOST, size=8)
            _arrow(ax, (14.5, 19), (19.5, y + height / 2))
            _arrow(ax, (36.5, y + height / 2), (42.5, 19))
        _box(ax, 43, 15, 12, 8, label(tr_lazy("queue\n(shared memory)")), BUS, size=8)
        _box(ax, 59, 15, 12, 8, label(tr_lazy("pin thread\n(main process)")), HOST, size=8)
        _box(ax, 80, 15, 8, 8, "GPU", DEVICE, size=9, weight="bold")
        _arrow(ax, (55.5, 19), (58.5, 19))
        copy = label(tr_lazy("the loop:\n.to(device,\nnon_blocking=True)"))
        _arrow(ax, (71.5, 19), (79.5, 19), copy, offset=(0, -12))
        ax.text(45, 2, label(tr_lazy("worker processes make the next batches while the GPU trains on this one")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        fig.tight_layout()
    return fig


def ddp_all_reduce(ranks: int = 2):
    """DDP: each process has the same model and its own part of the batch; all-reduce averages the gradients, so
    every process takes the same step."""
    with figure_context():
        fig, ax = _canvas(9, 4)
        width = 86 / ranks
        centres = [5 + r * width + (width - 8) / 2 for r in range(ranks)]
        middle = sum(centres) / ranks
        for r, centre in enumerate(centres):
            x = centre - (width - 8) / 2
            _box(ax, x, 28, width - 8, 6, label(tr_lazy("rank {r}: its part of the batch"), r=r), HOST, size=8)
            _box(ax, x, 17, width - 8, 6, label(tr_lazy("the same model: gradient g{r}"), r=r), DEVICE, size=8)
            _box(ax, x, 2, width - 8, 6, label(tr_lazy("the mean gradient: the same step")), DEVICE, size=8)
            _arrow(ax, (centre, 27.5), (centre, 23.5))
            _arrow(ax, (centre, 16.5), (middle, 13.6))
            _arrow(ax, (middle, 10.4), (centre, 8.5))
        _box(ax, middle - 12, 10.5, 24, 3, "all-reduce: (g0 + g1) / 2" if ranks == 2 else "all-reduce", BUS, size=8)
        fig.tight_layout()
    return fig


def buffers_move():
    """``model.to(device)`` moves what the module registered (parameters and buffers); a plain tensor attribute
    stays where it was."""
    with figure_context():
        fig, ax = _canvas(9, 3.4)
        ax.text(45, 31, "model.to(device)", ha="center", fontsize=9, weight="bold")
        rows = [("nn.Parameter: weight, bias", True), ("register_buffer: running_mean", True),
                (label(tr_lazy("self.scale = torch.ones(3): a plain attribute")), False)]  # fmt: skip
        for i, (text, moves) in enumerate(rows):
            y = 21 - i * 8.5
            _box(ax, 2, y, 34, 6, text, HOST, size=8)
            if moves:
                _box(ax, 56, y, 30, 6, label(tr_lazy("on the GPU")), DEVICE, size=8)
                _arrow(ax, (36.5, y + 3), (55.5, y + 3), label(tr_lazy("moves")), offset=(0, 0.8))
            else:
                ax.text(46, y + 3, label(tr_lazy("stays on the CPU: the next forward mixes devices")), fontsize=8,
                        color="tab:red", va="center")  # fmt: skip
        fig.tight_layout()
    return fig


def fork_vs_spawn():
    """A worker started by fork copies the parent, CUDA state included (which CUDA refuses); one started by spawn is
    a fresh Python that imports the main module (so its functions must live in a module, behind a main guard)."""
    with figure_context():
        fig, ax = _canvas(9, 3.6)
        _box(ax, 2, 12, 22, 12, label(tr_lazy("the training process\n(CUDA already started)")), HOST, size=8)
        _box(ax, 40, 22, 24, 9, label(tr_lazy("fork: a copy of the process,\nits CUDA state included")), "#f6d5d5",
             size=8)  # fmt: skip
        _box(ax, 40, 4, 24, 9, label(tr_lazy("spawn: a fresh Python\nthat imports the main module")), DEVICE,
             size=8)  # fmt: skip
        _arrow(ax, (24.5, 20), (39.5, 26.5))
        _arrow(ax, (24.5, 16), (39.5, 8.5))
        ax.text(66, 26.5, label(tr_lazy("CUDA in it: 'Cannot re-initialize CUDA\nin forked subprocess'")), fontsize=8,
                color="tab:red", va="center")  # fmt: skip
        ax.text(66, 8.5, label(tr_lazy("needs what it runs in a module,\nand if __name__ == '__main__'")), fontsize=8,
                color=NOTE, va="center")  # fmt: skip
        fig.tight_layout()
    return fig


def rehearsal():
    """The rehearsal: the learner's script runs on the CPU, under a mode that tags tensors with the device they
    would be on and refuses what that device would refuse; the numbers are the CPU's."""
    with figure_context():
        fig, ax = _canvas(9, 3.6)
        _box(ax, 2, 12, 18, 12, label(tr_lazy("your script\n(.to(device),\n.cuda(), ...)")), "white", size=8)
        _box(ax, 28, 8, 30, 20, "", HOST)
        ax.text(43, 25, label(tr_lazy("the CPU, pretending to be a GPU")), ha="center", fontsize=8, weight="bold")
        ax.text(43, 17.5, label(tr_lazy("each tensor tagged with the device\nit would be on; a GPU's refusals\n"
                                        "raised at your line")), ha="center", va="center", fontsize=8)  # fmt: skip
        _box(ax, 66, 20, 22, 8, label(tr_lazy("findings: line, problem, fix")), DEVICE, size=8)
        _box(ax, 66, 7, 22, 8, label(tr_lazy("syncs and copies per step;\nthe CPU's numbers")), DEVICE, size=8)
        _arrow(ax, (20.5, 18), (27.5, 18))
        _arrow(ax, (58.5, 21), (65.5, 24))
        _arrow(ax, (58.5, 14), (65.5, 11))
        ax.text(45, 1.5, label(tr_lazy("no GPU is used: it tells what a GPU would refuse, not how fast it would be")),
                ha="center", fontsize=8, color=NOTE)  # fmt: skip
        fig.tight_layout()
    return fig


def meta_device():
    """A tensor on ``meta`` has a shape and a dtype, so its size can be counted, but no data: nothing is allocated."""
    with figure_context():
        fig, ax = _canvas(9, 3.2)
        _box(ax, 2, 16, 40, 10, 'torch.empty(4096, 4096, device="cpu")', HOST, size=8)
        _box(ax, 50, 16, 38, 10, 'torch.empty(4096, 4096, device="meta")', "white", size=8)
        ax.text(22, 10, label(tr_lazy("shape, dtype and 64 MiB of memory")), ha="center", fontsize=8)
        ax.text(69, 10, label(tr_lazy("shape and dtype only: 0 bytes allocated")), ha="center", fontsize=8)
        ax.text(45, 2, label(tr_lazy("numel() x element_size() counts the 64 MiB on either")), ha="center",
                fontsize=8, color=NOTE)  # fmt: skip
        fig.tight_layout()
    return fig


def fsdp_shards(ranks: int = 2):
    """FSDP: each process keeps 1/N of the parameters; a layer's are gathered whole for its forward and backward,
    and its gradients are reduce-scattered back into shards."""
    with figure_context():
        fig, ax = _canvas(9, 3.8)
        width = 86 / ranks
        for r in range(ranks):
            x = 5 + r * width
            _box(ax, x, 27, width - 8, 5, label(tr_lazy("rank {r} keeps shard {r} of the parameters"), r=r), DEVICE,
                 size=8)  # fmt: skip
            _box(ax, x, 15, width - 8, 5, label(tr_lazy("a layer's parameters, whole, for a moment")), BUS, size=8)
            _box(ax, x, 3, width - 8, 5, label(tr_lazy("rank {r} keeps shard {r} of the gradients"), r=r), DEVICE,
                 size=8)  # fmt: skip
            centre = x + (width - 8) / 2
            _arrow(ax, (centre, 26.5), (centre, 20.5))
            _arrow(ax, (centre, 14.5), (centre, 8.5))
        ax.text(45, 23, label(tr_lazy("all-gather: every rank sends its shard to every other")), ha="center",
                fontsize=8, color=NOTE, backgroundcolor="white")  # fmt: skip
        ax.text(45, 11, label(tr_lazy("reduce-scatter: the gradients averaged, each rank keeps its shard")),
                ha="center", fontsize=8, color=NOTE, backgroundcolor="white")  # fmt: skip
        fig.tight_layout()
    return fig


DIAGRAMS = {
    "host_and_device": host_and_device,
    "create_vs_move": create_vs_move,
    "module_vs_tensor": module_vs_tensor,
    "left_behind": left_behind,
    "async_queue": async_queue,
    "copy_paths": copy_paths,
    "loader_pipeline": loader_pipeline,
    "torchrun_processes": torchrun_processes,
    "ddp_all_reduce": ddp_all_reduce,
    "fsdp_shards": fsdp_shards,
    "buffers_move": buffers_move,
    "fork_vs_spawn": fork_vs_spawn,
    "rehearsal": rehearsal,
    "meta_device": meta_device,
}


def show(name: str, **options) -> None:
    """Draw the diagram ``name`` (a key of DIAGRAMS, with its ``options``) in the notebook."""
    import matplotlib.pyplot as plt

    DIAGRAMS[name](**options)
    plt.show()
