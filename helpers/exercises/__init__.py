"""Automatic feedback for the exercises: one module per notebook, sharing :class:`Feedback`.

A check runs the learner's function on the course device and answers with what is wrong and a
hint. It prints its verdict and returns a :class:`Feedback` that is truthy only on success, so a
solutions notebook can ``assert check(...)``.

Hints come in two levels. The first says what is wrong, on which machine or input, and where to look
in the notebook; the learner asks for the second by calling the check again with ``hint=2``
(``check.move_to(move_to, hint=2)``), which goes further: the idea, the call to read up on, a smaller
example to compare with. Neither level prints the answer. A check gives the second level with
``failed(message, hint, more=..., see=...)``; without ``more`` its feedback reads as before.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from helpers.course.config import VERDICTS_ENV
from helpers.course.i18n import CATALOGS, CHINESE, language, read_po, tr, tr_lazy


@dataclass(frozen=True)
class Feedback:
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        if self.passed:
            return tr("[PASS] {message}", message=self.message)
        return tr("[TRY AGAIN] {message}", message=self.message)


def passed(message: str) -> Feedback:
    feedback = Feedback(True, _tidy(message))
    print(feedback)
    return feedback


_FULL_WIDTH_PUNCTUATION = re.compile(r"(?<=[，。：；？！、（）“”])[ ]+(?=\S)")


def _tidy(text: str) -> str:
    """In Chinese, no space after full-width punctuation: a field ending a clause ("meta（代替 GPU） 时") loses it."""
    return _FULL_WIDTH_PUNCTUATION.sub("", text) if language() == CHINESE else text


_LEVEL: contextvars.ContextVar[int] = contextvars.ContextVar("hint_level", default=1)
"""The hint level the learner asked for (``hint=2`` in the check's call); set by :func:`exercise_check`."""
_ASK: contextvars.ContextVar[str] = contextvars.ContextVar("ask_for_more", default="")
"""How to call the running check again for the second level, e.g. ``check.move_to(move_to, hint=2)``."""


def failed(message: str, hint: str = "", *, more: str = "", see: str = "") -> Feedback:
    """A ``[TRY AGAIN]`` verdict: ``message`` (what is wrong, observed where), then ``hint``.

    ``see`` names the notebook's section to re-read: its heading as written in the English notebook (shown
    without backticks, in the course's language: :func:`heading`). ``more`` is the second-level hint, shown
    when the learner calls the check with ``hint=2``; at the first level one short line says how to ask for it.
    ``message``, ``hint`` and ``more`` come translated (``tr``); :data:`NOT_WRITTEN` is translated here.
    """
    lines = [tr(NOT_WRITTEN) if message == NOT_WRITTEN else message]
    if hint:
        lines.append("  " + tr("Hint: {hint}", hint=hint))
    if see:
        lines.append("  " + tr('Where to look: "{see}", in this notebook.', see=heading(see)))
    if more and _LEVEL.get() >= 2:
        lines.append("  " + tr("More: {more}", more=more))
    elif more and _ASK.get():
        lines.append("  " + tr("Stuck? {ask} gives a deeper hint.", ask=_ASK.get()))
    elif more:
        lines.append("  " + tr("Stuck? Calling the check again with hint=2 gives a deeper hint."))
    elif _LEVEL.get() >= 2 and hint:
        lines.append("  " + tr("(No deeper hint for this one: the hint above is all there is.)"))
    feedback = Feedback(False, _tidy("\n".join(lines)))
    print(feedback)
    return feedback


def exercise_check(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Decorator for a check: whatever goes wrong inside it becomes ``[TRY AGAIN]`` feedback, never an error.

    The check runs under :class:`MetaFetchesLikeAGpu`, so the learner's code meets on ``meta`` what it would
    meet on a GPU: ``.item()``, ``print(loss)`` and ``.cpu()`` work, mixing devices fails.

    A check inspects what the learner's code gives back; an answer of an unexpected shape (a 2-tuple
    where 3 are asked, a number instead of a function, a function that returns garbage) can break the
    inspection itself. That is the learner's answer being wrong, so it is reported as such: what was
    checked, what went wrong, and the first line of the error.
    """

    @functools.wraps(check)
    def run(*args, hint: int = 1, **kwargs) -> Feedback:
        level = _LEVEL.set(2 if isinstance(hint, (int, float)) and hint >= 2 else 1)
        ask = _ASK.set(_how_to_ask(check, args))
        try:
            with MetaFetchesLikeAGpu():
                result = check(*args, **kwargs)
        except Exception as err:  # any error here is feedback for the learner
            return failed(
                tr(
                    "Your answer could not be checked: {error_type}: {error}",
                    error_type=type(err).__name__,
                    error=_first_line(err),
                ),
                _shape_hint(check, args),
            )
        finally:
            _LEVEL.reset(level)
            _ASK.reset(ask)
        if isinstance(result, Feedback):
            return result
        return failed(tr("The check {name} gave no verdict.", name=check.__name__))  # a bug in the check itself

    run.is_exercise_check = True  # type: ignore[attr-defined]  # lets tests find every check
    return _recording_verdicts(check, run)


def _how_to_ask(check, args) -> str:
    """The call that asks this check for the second level: ``check.move_to(move_to, hint=2)``."""
    name = getattr(args[0], "__name__", "") if args else ""
    answer = name if name.isidentifier() else "..."
    return f"check.{check.__name__}({answer}, hint=2)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else tr("(no message)")


def statement(check) -> str:
    """The exercise as its check's docstring states it (first paragraph, one line, single backticks).

    Shown in the course's language: a module marks its checks' statements with ``tr_lazy`` for the catalog.
    """
    return " ".join((check.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "`")


def _shape_hint(check, args) -> str:
    """What the exercise expects (the check's docstring), plus a word on an answer that is not callable."""
    exercise = tr(statement(check))
    if args and not callable(args[0]) and not isinstance(args[0], dict):
        return tr(
            "Pass your function (or class) itself, not a {type_name}. The exercise: {exercise}",
            type_name=type(args[0]).__name__,
            exercise=exercise,
        )
    return tr("Check the type and shape of what your code returns. The exercise: {exercise}", exercise=exercise)


NOT_WRITTEN = tr_lazy("Not written yet: replace the `raise NotImplementedError` line with your code.")
"""The verdict on an exercise's untouched starter (its bare ``raise NotImplementedError``); ``failed`` translates it."""

HEADINGS = CATALOGS / "notebook_headings.po"
"""The notebooks' headings, English to Chinese (generated from the notebooks' catalogs)."""


@functools.cache
def _headings_without_backticks() -> dict[str, str]:
    return (
        {english.replace("`", ""): chinese for english, chinese in read_po(HEADINGS).items()}
        if HEADINGS.exists()
        else {}
    )


def heading(see: str) -> str:
    """A notebook heading as the learner reads it rendered (no backticks), in the course's language.

    ``see`` is the heading as written in the English notebook; in Chinese it is looked up in the headings
    catalog (a heading given without its backticks is found too).
    """
    text = tr(see)
    if text == see and language() == CHINESE:
        text = _headings_without_backticks().get(see.replace("`", ""), see)
    return text.replace("`", "")


def module_devices(module: torch.nn.Module) -> set[torch.device]:
    """The devices of a module's parameters and buffers."""
    return {t.device for t in list(module.parameters()) + list(module.buffers())}


def device_names(devices) -> str:
    return ", ".join(sorted(map(str, devices)))


def call_learner(fn, *args, when: str = "", hint: str = "", more: str = "", see: str = ""):
    """Run the learner's function; return (result, None) or (None, failed feedback).

    Test the feedback with ``is not None``: a failed Feedback is falsy.

    ``when`` says on what machine or input it ran ("On a machine with no GPU"); ``hint`` (and
    ``more``, ``see``: see :func:`failed`) are added if it raises.
    """
    try:
        return fn(*args), None
    except NotImplementedError as err:
        if not str(err):  # the starter's bare `raise NotImplementedError`
            return None, failed(NOT_WRITTEN)
        error = err  # raised by torch itself, e.g. "Cannot copy out of meta tensor; no data!"
    except Exception as err:  # the learner's bug is the feedback
        error = err
    if when:
        message = tr(
            "{when}, your code raised {error_type}: {error}", when=when, error_type=type(error).__name__, error=error
        )
    else:
        message = tr("Your code raised {error_type}: {error}", error_type=type(error).__name__, error=error)
    if "copy out of meta" in str(error):
        message += " " + tr("A meta tensor has no data to copy: your code moved a tensor off the device it was given.")
    return None, failed(message, hint, more=more, see=see)


OTHER_DEVICE = torch.device("meta")
"""A device that is never the CPU. Checks also run the learner's code towards it, because on a
CPU-only machine ``t.to("cpu")`` returns ``t`` itself and would hide a missing assignment that a
GPU would expose."""


def shown(device) -> str:
    """A device as feedback names it: ``meta`` says what it stands for (``meta (standing in for a GPU)``)."""
    device = torch.device(device)
    return tr("{device} (standing in for a GPU)", device=device) if device.type == "meta" else str(device)


_SCALAR_FETCHES = {"item", "__float__", "__int__", "__index__", "__bool__"}


def _zeros_on_cpu(t: torch.Tensor) -> torch.Tensor:
    host = torch.zeros(t.shape, dtype=t.dtype)
    return host.requires_grad_() if t.requires_grad and t.is_floating_point() else host


def _names_cpu(args: tuple, kwargs: dict) -> bool:
    targets = [*args[1:], kwargs.get("device")]
    return any(str(a) == "cpu" or getattr(a, "type", None) == "cpu" for a in targets)


class MetaFetchesLikeAGpu(TorchFunctionMode):
    """Within the block, copying a ``meta`` tensor's values to the host works, as it does from a GPU.

    ``OTHER_DEVICE`` (meta) stands in for a GPU: it is never the CPU, and mixing it with CPU tensors fails
    as a GPU does. But a meta tensor has no data, so ``loss.item()``, ``float(loss)``, ``f"{loss:.3f}"``,
    ``.tolist()`` and ``.cpu()`` raise there, while on a GPU they work (they wait for the GPU and copy).
    Here they return zeros of the right type and shape instead, so code that is right on a GPU is not
    refused on meta; its numbers are judged on the course device, where the values are real. ``.numpy()``
    without ``.cpu()`` still raises, as it does on a GPU. Tensors on other devices are untouched.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if this is not None and this.is_meta:
            if name in _SCALAR_FETCHES:
                if this.numel() != 1:
                    raise RuntimeError(f"a Tensor with {this.numel()} elements cannot be converted to Scalar")
                return func(_zeros_on_cpu(this).detach().reshape(()), *args[1:], **kwargs)
            if name == "__format__" and this.dim() == 0:
                return format(torch.zeros((), dtype=this.dtype).item(), *args[1:])
            if name == "tolist" or name == "cpu" or (name == "to" and _names_cpu(args, kwargs)):
                return func(_zeros_on_cpu(this), *args[1:], **kwargs)
            if name == "numpy" and kwargs.get("force"):
                return func(_zeros_on_cpu(this).detach(), *args[1:], **kwargs)
        if name == "copy_" and this is not None and not this.is_meta and len(args) > 1:
            source = args[1]
            if isinstance(source, torch.Tensor) and source.is_meta:
                return func(this, _zeros_on_cpu(source).detach(), *args[2:], **kwargs)
        return func(*args, **kwargs)


def _recording_verdicts(check: Callable[..., Feedback], run: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """``run``, which also appends its verdict to the file ``COURSE_VERDICTS`` names, if set.

    One line per call: ``{"check": "helpers.exercises.ex01_cuda.move_to", "passed": true, "message": "..."}``.
    Without the variable nothing is written; a file that cannot be written never costs the learner the verdict.
    """

    @functools.wraps(run)
    def recorded(*args, **kwargs) -> Feedback:
        feedback = run(*args, **kwargs)
        import json
        import os

        path = os.environ.get(VERDICTS_ENV)
        if path:
            name = f"{check.__module__}.{check.__name__}"
            line = {"check": name, "passed": bool(feedback), "message": str(feedback.message)}
            try:
                with open(path, "a", encoding="utf-8") as file:
                    file.write(json.dumps(line) + "\n")
            except OSError:
                pass
        return feedback

    return recorded
