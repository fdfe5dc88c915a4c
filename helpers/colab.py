"""What each notebook's setup cell calls: Colab guidance, nothing visible elsewhere.

It never starts CUDA in the notebook's own process: CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when it
starts, so a learner must still be able to set that variable in the cells after the setup cell. The
GPU's name therefore comes from the driver's own tool, ``nvidia-smi``, run as another process (or from
``/proc/driver/nvidia`` on Linux), never from ``torch.cuda``; this module does not even import torch.
"""

import subprocess
import sys
from pathlib import Path

from helpers.course.i18n import set_language, tr, tr_lazy

COLAB_GPU_HINT = tr_lazy(
    "No GPU is attached to this Colab runtime, so the notebook runs on the CPU (every cell still works).\n"
    "To use a GPU: Runtime > Change runtime type > Hardware accelerator: a GPU such as T4 > Save,\n"
    "then run the notebook again from the top (Runtime > Run all)."
)
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
SMI_TIMEOUT_S = 30


def in_colab() -> bool:
    return "google.colab" in sys.modules


def _names_from_smi() -> list[str]:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def _names_from_proc(root: Path) -> list[str]:
    names = []
    for info in sorted(root.glob("*/information")):
        try:
            lines = info.read_text().splitlines()
        except OSError:
            continue
        names += [line.split(":", 1)[1].strip() for line in lines if line.startswith("Model:")]
    return names


def nvidia_gpu_names() -> list[str]:
    """The NVIDIA GPUs the driver lists, without starting CUDA in this process ([] when none or no driver).

    Like nvidia-smi, this ignores ``CUDA_VISIBLE_DEVICES``: it lists what is installed, not what PyTorch may use.
    """
    return _names_from_smi() or _names_from_proc(PROC_GPUS)


def setup(lang: str | None = None) -> None:
    """In Colab, say which GPU is attached or how to attach one; locally, do nothing visible.

    ``lang`` (``"zh-CN"`` in the Chinese notebooks) is the language the course's messages speak from now on
    (``COURSE_LANG``: the checks, hints, the doctor, the clinic); by default they follow the system's locale.
    CUDA stays unstarted, so ``CUDA_VISIBLE_DEVICES`` set in a later cell still takes effect.
    """
    if lang is not None:
        set_language(lang)
    if not in_colab():
        return
    names = nvidia_gpu_names()
    if names:
        print(tr("Colab GPU runtime: {names}", names=", ".join(names)))
    else:
        print(tr(COLAB_GPU_HINT))
