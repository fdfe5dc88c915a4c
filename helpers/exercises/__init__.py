"""Automatic feedback for the exercises: one module per notebook, sharing :class:`Feedback`.

A check runs the learner's function on the course device and answers with what is wrong and a
hint. It prints its verdict and returns a :class:`Feedback` that is truthy only on success, so a
solutions notebook can ``assert check(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Feedback:
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"{'[PASS]' if self.passed else '[TRY AGAIN]'} {self.message}"


def passed(message: str) -> Feedback:
    feedback = Feedback(True, message)
    print(feedback)
    return feedback


def failed(message: str, hint: str = "") -> Feedback:
    feedback = Feedback(False, f"{message}\n  Hint: {hint}" if hint else message)
    print(feedback)
    return feedback


def call_learner(fn, *args, when: str = "", hint: str = ""):
    """Run the learner's function; return (result, None) or (None, failed feedback).

    Test the feedback with ``is not None``: a failed Feedback is falsy.

    ``when`` says on what machine or input it ran ("On a machine with no GPU"); ``hint`` is
    added if it raises.
    """
    try:
        return fn(*args), None
    except NotImplementedError as err:
        if not str(err):  # the starter's bare `raise NotImplementedError`
            return None, failed("Not written yet: replace the `raise NotImplementedError` line with your code.")
        error = err  # raised by torch itself, e.g. "Cannot copy out of meta tensor; no data!"
    except Exception as err:  # the learner's bug is the feedback
        error = err
    where = f"{when}, your" if when else "Your"
    extra = ""
    if "copy out of meta" in str(error):
        extra = " A meta tensor has no data to copy: your code moved a tensor off the device it was given."
    return None, failed(f"{where} code raised {type(error).__name__}: {error}{extra}", hint)


OTHER_DEVICE = torch.device("meta")
"""A device that is never the CPU. Checks also run the learner's code towards it, because on a
CPU-only machine ``t.to("cpu")`` returns ``t`` itself and would hide a missing assignment that a
GPU would expose."""
