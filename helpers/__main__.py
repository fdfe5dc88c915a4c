"""``python -m helpers COMMAND [ARGS]``: the course's commands by name; ``python -m helpers`` lists them.

A command runs its module as ``python -m MODULE ARGS`` would (``python -m helpers doctor --explain "..."`` is
``python -m helpers.clinic.doctor --explain "..."``), so ``torchrun --nproc_per_node=2 -m helpers ddp-train``
starts the training script on every rank. Nothing here imports torch.
"""

from __future__ import annotations

import runpy
import sys

from helpers.course.i18n import columns, tr, tr_lazy

COMMANDS = {  # name: (module, what it does)
    "doctor": ("helpers.clinic.doctor", tr_lazy("whether the course can run here, and on what; --explain MESSAGE")),
    "data": (
        "helpers.lesson.data",
        tr_lazy("download CIFAR-10 once, or pack it into one file for a room without internet"),
    ),
    "train-tudui": ("helpers.distributed.train_tudui", tr_lazy("train Tudui on CIFAR-10 (also under torchrun)")),
    "ddp-train": ("helpers.distributed.ddp_train", tr_lazy("the DDP training script that torchrun starts")),
    "fsdp-train": ("helpers.distributed.fsdp_train", tr_lazy("the FSDP training script that torchrun starts")),
    "collective-timeout": (
        "helpers.distributed.collective_timeout",
        tr_lazy("a collective only some ranks call, failing after its timeout (under torchrun)"),
    ),
    "grade": (
        "helpers.course.grade",
        tr_lazy("grade a class's notebooks: points per student in one CSV (Canvas, Moodle), feedback pages"),
    ),
    "rehearse": (
        "helpers.rehearse",
        tr_lazy("rehearse your own script as if on a GPU, several GPUs, a Mac or a laptop; --static, --fix"),
    ),
}


def usage() -> str:
    width = max(columns(name) for name in COMMANDS)
    lines = [tr("usage: python -m helpers COMMAND [ARGS]   (python -m helpers COMMAND --help for its options)"), ""]
    lines += [f"  {name:<{width}}  {tr(what)}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, *rest = args
    if name not in COMMANDS:
        print(tr("python -m helpers: no command {name!r}.", name=name) + "\n\n" + usage(), file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    sys.argv = [module, *rest]  # runpy puts the module's file in sys.argv[0]; the rest are its arguments
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
