"""What each notebook's setup cell calls: Colab guidance, nothing visible elsewhere."""

import sys

COLAB_GPU_HINT = (
    "No GPU is attached to this Colab runtime, so the notebook runs on the CPU (every cell still works).\n"
    "To use a GPU: Runtime > Change runtime type > Hardware accelerator: a GPU such as T4 > Save,\n"
    "then run the notebook again from the top (Runtime > Run all)."
)


def in_colab() -> bool:
    return "google.colab" in sys.modules


def setup() -> None:
    """In Colab, say which GPU is attached or how to attach one; locally, do nothing visible."""
    if not in_colab():
        return
    import torch

    if torch.cuda.is_available():
        print(f"Colab GPU runtime: {torch.cuda.get_device_name(0)}")
    else:
        print(COLAB_GPU_HINT)
