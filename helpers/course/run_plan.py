"""How much notebook 05 trains on this machine: the original's full run on a GPU, less on a CPU.

The original course (xiaotudui/pytorch-tutorial, ``train_gpu_*.py``) trains 10 epochs on all 50,000
CIFAR-10 training images. On a GPU that takes minutes; on a 2-core laptop CPU one such epoch alone
takes minutes, so "Run All" would take most of an hour. :func:`run_plan` therefore picks by device:

- a GPU (``cuda``, ``mps``, any accelerator): the original's 10 epochs on the whole data;
- the CPU: :data:`CPU_EPOCHS` epochs on the first :data:`CPU_TRAIN_IMAGES` training and
  :data:`CPU_TEST_IMAGES` test images, so "Run All" stays within about 15 minutes on a 2-core laptop;
- ``COURSE_FULL=1``: the original's full run on any device (on a 2-core CPU with CIFAR-10, about
  15 minutes on an idle machine to 45 on a busy one, estimated from the epochs timed there);
- ``COURSE_QUICK=1`` (the tests): a few epochs on the small synthetic data; it wins over ``COURSE_FULL``.

Supporting code, not the lesson: the notebook shows the plan it got and uses ``plan.epochs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.course.config import FULL_ENV, QUICK_ENV, full_mode, quick_mode
from helpers.course.i18n import tr

EPOCHS_ORIGINAL = 10
"""The original course's ``epoch = 10``."""
EPOCHS_QUICK = 3
CPU_EPOCHS = 5
CPU_TRAIN_IMAGES = 10_000
CPU_TEST_IMAGES = 2_000


@dataclass(frozen=True)
class RunPlan:
    """How much to train: epochs, and how many images to use (None: all of them)."""

    epochs: int
    train_images: int | None
    test_images: int | None
    why: str

    def __str__(self) -> str:
        if self.train_images is None and self.test_images is None:
            data = tr("all the data")
        else:
            data = tr(
                "at most {train:,} training and {test:,} test images", train=self.train_images, test=self.test_images
            )
        return tr("{epochs} epochs on {data}: {why}", epochs=self.epochs, data=data, why=self.why)


def run_plan(device: torch.device | str | None = None) -> RunPlan:
    """The plan for ``device`` (default: the course's device, ``pick_device()``)."""
    if quick_mode():
        return RunPlan(EPOCHS_QUICK, None, None, tr("quick mode ({env}=1), the small synthetic data", env=QUICK_ENV))
    if full_mode():
        return RunPlan(EPOCHS_ORIGINAL, None, None, tr("{env}=1, the original's full run", env=FULL_ENV))
    if device is None:
        from helpers.lesson.devices import pick_device

        device = pick_device()
    device = torch.device(device)
    if device.type != "cpu":
        return RunPlan(EPOCHS_ORIGINAL, None, None, tr("the original's full run, on {device}", device=device))
    return RunPlan(
        CPU_EPOCHS,
        CPU_TRAIN_IMAGES,
        CPU_TEST_IMAGES,
        tr(
            "scaled down for the CPU (the original: {epochs} epochs on all 50,000 images; {env}=1 runs that)",
            epochs=EPOCHS_ORIGINAL,
            env=FULL_ENV,
        ),
    )
