"""Checks for notebook 02's exercises (GPU to CPU with ``.cpu()``).

On a CPU-only machine ``.numpy()`` works without ``.cpu()`` and ``.item()`` costs nothing, so a
check cannot rely on errors a GPU would raise. It also records which tensor methods the learner's
code calls (a ``TorchFunctionMode``) and follows the tensors it was given through them, to say what
would fail or wait on a GPU: a ``.numpy()`` on a tensor a GPU would hold, a copy to the host per loss.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import call_learner, exercise_check, failed, heading, passed
from helpers.lesson.devices import pick_device

FETCHES = {"item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__repr__", "__format__", "__str__"}
"""Tensor methods that copy values to the host (and so wait for the GPU)."""
SUMS = {"__add__", "__radd__", "__iadd__", "add", "add_", "sum", "nansum"}
"""Functions that add tensors up."""


class _Calls(TorchFunctionMode):
    """Records the tensor functions called inside the block, and which of them copy values to the host.

    It follows the tensors the check hands over (``sources``, on the device) through every function the
    learner's code calls: a result computed from a tensor on the device is on the device, unless the call
    copies to the host (``.cpu()``, ``.to("cpu")``, ``torch.tensor(list)``...). So it knows, on a CPU-only
    machine too, which calls would copy from a GPU (and wait for it), and which ``.numpy()`` would raise there.
    """

    def __init__(self, sources: list[torch.Tensor]) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple, dict]] = []
        self.fetches: list[str] = []  # copies from the device to the host, by name
        self.numpy_on_device = False  # .numpy() on a tensor a GPU would hold: TypeError there
        self.tracked_sums: list[str] = []  # additions whose result autograd tracks (it requires grad)
        self.per_element = 0  # tensors that torch.tensor / torch.as_tensor turned into numbers one by one
        self.from_list = ""  # which of the two did
        self.warnings: list[warnings.WarningMessage] = []
        self._device_types = {t.device for t in sources}
        self._on_device: dict[int, torch.Tensor] = {}  # id -> tensor (kept alive so ids stay unique)
        for t in sources:
            self._on_device[id(t)] = t
        # Results of a copy to the host. On a CPU-only machine t.cpu() is t itself, which from then on
        # stands for the copy a GPU would have made.
        self._host: dict[int, torch.Tensor] = {}

    def _is_on_device(self, value) -> bool:
        return (
            isinstance(value, torch.Tensor)
            and self._on_device.get(id(value)) is value
            and self._host.get(id(value)) is not value
        )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        self.calls.append((name, args, kwargs))
        this_on_device = bool(args) and self._is_on_device(args[0])
        if this_on_device and name in FETCHES:
            self.fetches.append(name)
        if this_on_device and name in {"numpy", "__array__"} and not kwargs.get("force"):
            self.numpy_on_device = True
        result = func(*args, **kwargs)
        if name in SUMS and isinstance(result, torch.Tensor) and result.requires_grad:
            self.tracked_sums.append(name)
        from_list = name in {"tensor", "as_tensor"} and bool(args) and isinstance(args[0], (list, tuple))
        if from_list:
            self.per_element += _count_tensors(args[0])  # each one is read into a Python number
            self.from_list = name
        if self._result_on_device(name, args, kwargs, from_list):
            for t in _tensors(result):
                self._on_device[id(t)] = t
        elif this_on_device and _asks_for_host(name, args, kwargs):
            for t in _tensors(result):
                self._host[id(t)] = t
        return result

    def _result_on_device(self, name: str, args: tuple, kwargs: dict, from_list: bool) -> bool:
        if _asks_for_host(name, args, kwargs) or name in FETCHES:
            return False
        device = kwargs.get("device")
        if device is not None:  # a factory told where: on the device if it names the sources' device
            return device != "cpu" and _as_device(device) in self._device_types
        if from_list:  # torch.tensor(list) reads the values to the host and builds a CPU tensor
            return False
        return any(self._is_on_device(a) for a in _tensors((args, kwargs)))


def _as_device(device) -> torch.device | None:
    try:
        return torch.device(device)
    except (TypeError, RuntimeError):
        return None


def _tensors(data) -> list[torch.Tensor]:
    """The tensors in a (nested) list, tuple or dict."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (list, tuple)):
        return [t for item in data for t in _tensors(item)]
    if isinstance(data, dict):
        return [t for item in data.values() for t in _tensors(item)]
    return []


def _count_tensors(data) -> int:
    """How many tensors a (nested) list or tuple holds."""
    return len(_tensors(data))


def _run(fn, *args, when: str = "", hint: str = "", more: str = "", see: str = ""):
    """call_learner inside a recorder that follows the tensors in ``args``: (result, problem, recorder).
    The recorder keeps the warnings raised."""
    with warnings.catch_warnings(record=True) as caught, _Calls(_tensors(args)) as calls:
        warnings.simplefilter("always")
        result, problem = call_learner(fn, *args, when=when, hint=hint, more=more, see=see)
    calls.warnings = caught
    for w in caught:  # pass the others on; sum_losses explains the per-element one itself
        if not (calls.per_element and "requires_grad=True to a scalar" in str(w.message)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, problem, calls


def _asks_for_host(name: str, args: tuple, kwargs: dict) -> bool:
    """Does this call bring a tensor to the CPU (.cpu(), .to('cpu'), .numpy(force=True))?"""
    if name == "cpu" or (name == "numpy" and kwargs.get("force")):
        return True
    if name == "to":
        targets = list(args[1:]) + [kwargs.get("device")]
        return any(str(a) == "cpu" or getattr(a, "type", None) == "cpu" for a in targets)
    return False


SECTION_NUMPY = "3. `.numpy()` needs a CPU tensor"
SECTION_DETACH = "4. Tensors that require grad: why `.detach()`"
SECTION_FETCHES = "6. `.item()`, `.tolist()`, `print`: each copies to the host"
SECTION_LOGGING = "7. Why logging every step slows GPU training"
SECTION_SUM_DETACH = "Common error: summing loss tensors without `.detach()`"
SECTION_ITSELF = "2. Already on the CPU: `.cpu()` returns the tensor itself"

NUMPY_MORE = tr_lazy(
    "Before .numpy(), two steps: one leaves autograd (section 4 names it, and why), one copies the values "
    "to the host (section 3; on a CPU tensor it returns the tensor as it is, so the same code runs on every "
    "device). The error message above says which of the two was missing."
)
TOTAL_MORE = tr_lazy(
    "A running total that stays a tensor on the losses' device: start from a zero tensor there (or from the "
    "first loss), add each loss detached from autograd, and fetch the total with one of section 6's calls, "
    "once, after the loop. Each fetch waits for all the GPU work queued before it."
)


def _grad_tensor(device: torch.device) -> torch.Tensor:
    """Weights on ``device`` that require grad, as a model's would."""
    return torch.tensor([0.5, -1.0, 2.0], device=device, requires_grad=True)


@exercise_check
def to_numpy(fn) -> object:
    """``fn(t)`` returns a NumPy array of ``t``'s values, for a ``t`` on any device that requires grad."""
    device = pick_device()
    t = _grad_tensor(device)
    hint = tr(
        "NumPy knows nothing of autograd and reads host memory only: the array must come from a tensor that "
        "autograd no longer tracks, in CPU memory."
    )
    when = tr("With a tensor on {device} that requires grad", device=device)
    result, problem, calls = _run(fn, t, when=when, hint=hint, more=tr(NUMPY_MORE), see=SECTION_DETACH)
    if problem is not None:
        return problem
    if isinstance(result, torch.Tensor):
        return failed(
            tr("{when}, you returned a tensor, not a NumPy array.", when=when),
            tr("The last step converts the tensor into a NumPy array."),
            more=tr(NUMPY_MORE),
            see=SECTION_NUMPY,
        )
    if not isinstance(result, np.ndarray):
        return failed(
            tr("{when}: return a NumPy array, not {type_name}.", when=when, type_name=type(result).__name__),
            tr("Convert the tensor itself into a NumPy array, not into a Python list or number."),
            more=tr(NUMPY_MORE),
            see=SECTION_NUMPY,
        )
    if result.dtype != np.float32 or result.tolist() != [0.5, -1.0, 2.0]:
        return failed(
            tr(
                "{when}: expected float32 [0.5, -1.0, 2.0], got {dtype} {values}.",
                when=when,
                dtype=result.dtype,
                values=result.tolist(),
            ),
            tr("Convert the values as they are: no change of dtype, no slicing."),
            see=SECTION_NUMPY,
        )
    if calls.numpy_on_device:
        return failed(
            tr(
                "This works here because the tensor is already on the CPU, but on a GPU .numpy() raises "
                "TypeError: can't convert cuda:0 device type tensor to numpy."
            ),
            tr("NumPy reads host memory only: copy the values to the host before converting."),
            more=tr(NUMPY_MORE),
            see=SECTION_NUMPY,
        )
    return passed(tr("A NumPy array with the values, from a tensor that requires grad, on any device."))


def _losses(device: torch.device, steps: int = 20) -> tuple[list[torch.Tensor], float]:
    """Per-step losses on ``device`` that require grad (as in training), and their exact sum."""
    w = torch.tensor(0.5, device=device, requires_grad=True)
    values = [float(i % 5) + 0.25 for i in range(steps)]  # exact in float32
    return [w * 2 * v for v in values], sum(values)


@exercise_check
def sum_losses(fn) -> object:
    """``fn(losses)`` returns the total of per-step loss tensors as a Python float: added up outside
    autograd, on the device, and fetched once."""
    device = pick_device()
    losses, expected = _losses(device)
    when = tr("With {count} losses on {device}", count=len(losses), device=device)
    hint = tr("Each loss is a 0-dim tensor on the device that requires grad: keep the total one too, detached.")
    result, problem, calls = _run(fn, losses, when=when, hint=hint, more=tr(TOTAL_MORE), see=SECTION_LOGGING)
    if problem is not None:
        return problem
    fetches = calls.fetches
    if isinstance(result, torch.Tensor):
        return failed(
            tr("{when}: you returned a tensor ({device}), not a Python float.", when=when, device=result.device),
            tr("Keep the running total on the device, then turn it into a Python number once, at the end."),
            more=tr(TOTAL_MORE),
            see=SECTION_FETCHES,
        )
    if not isinstance(result, float):
        return failed(
            tr("{when}: return a Python float, not {type_name}.", when=when, type_name=type(result).__name__),
            tr("One of section 6's fetches turns a one-element tensor into a Python float; int() drops the decimals."),
            see=SECTION_FETCHES,
        )
    if not math.isclose(result, expected, rel_tol=1e-6):
        return failed(
            tr("{when}: the total is {total}, expected {expected}.", when=when, total=result, expected=expected),
            tr("Add every loss once, the first and the last included."),
            see=SECTION_LOGGING,
        )
    if calls.per_element > 1:
        warned = [str(w.message).splitlines()[0] for w in calls.warnings if "requires_grad" in str(w.message)]
        message = tr(
            "{when}: right total, but torch.{function}(losses) reads the {count} loss tensors into Python numbers "
            "one by one: on a GPU that is one copy to the host, and one wait, per loss.",
            when=when,
            function=calls.from_list,
            count=calls.per_element,
        )
        if warned:
            message += " " + tr('PyTorch also warned: "{warning}"', warning=warned[0])
        return failed(
            message,
            tr(
                "Join the loss tensors into one without leaving the device (torch.tensor cannot: it reads each one), "
                "or add them up one by one; then fetch the total once."
            ),
            more=tr(
                "torch.stack makes one tensor of a list of tensors, on the device they are on, with no copy to "
                "the host; detach it (section '{section}'), add it up, and fetch the total once.",
                section=heading(SECTION_SUM_DETACH),
            ),
            see=SECTION_LOGGING,
        )
    if len(fetches) > 1:
        counts = ", ".join(f"{fetches.count(n)} x .{n}()" for n in sorted(set(fetches)))
        return failed(
            tr(
                "{when}: right total, but your code copied values to the host {count} times ({counts}). "
                "On a GPU each copy waits for all queued work to finish.",
                when=when,
                count=len(fetches),
                counts=counts,
            ),
            tr("Keep the running total a tensor on the device (each loss detached) and fetch it once, after the loop."),
            more=tr(TOTAL_MORE),
            see=SECTION_LOGGING,
        )
    if calls.tracked_sums:
        return failed(
            tr(
                "{when}: right total, fetched once, but your sum is tracked by autograd: the losses require grad and "
                "were added up without .detach(), so the sum built a graph of its own. In a training loop such a "
                "total keeps every step's graph, and the tensors it saved, in memory for as long as it lives.",
                when=when,
            ),
            tr("Detach each loss before adding (or add inside torch.no_grad()), so that the total builds no graph."),
            more=tr(
                "The section shows the total's grad_fn and what it keeps alive. .detach() gives a tensor with the "
                "same values that autograd does not track; detaching the sum afterwards is too late, as the graph "
                "of the additions was built while adding."
            ),
            see=SECTION_SUM_DETACH,
        )
    return passed(tr("Right total, summed on the device and fetched once."))


COPY_MORE = tr_lazy(
    "Notebook 01's section 4 (Already there? Then no copy) shows the argument of .to() that forces a copy "
    "even when the tensor is already there; a tensor also has a method that makes a private copy of it. "
    "One copy is enough: from a GPU, the move to the host already is one."
)


@exercise_check
def cpu_copy(fn) -> object:
    """``fn(t)`` returns a CPU tensor with ``t``'s values that never shares memory with ``t``."""
    for source in dict.fromkeys([pick_device(), torch.device("cpu")]):
        t = torch.tensor([1.0, 2.0, 3.0], device=source)
        when = tr("With a tensor on {device}", device=source)
        result, problem = call_learner(fn, t, when=when, more=tr(COPY_MORE), see=SECTION_ITSELF)
        if problem is not None:
            return problem
        if not isinstance(result, torch.Tensor):
            return failed(
                tr("{when}: return a tensor, not {type_name}.", when=when, type_name=type(result).__name__),
                tr("Return a CPU tensor of your own, not the values in another form."),
                see=SECTION_ITSELF,
            )
        if result.device.type != "cpu":
            return failed(
                tr("{when}, your copy is on {device}.", when=when, device=result.device),
                tr("The copy must live in CPU memory."),
                see=SECTION_ITSELF,
            )
        if result is t or (
            source.type == "cpu" and result.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        ):
            return failed(
                tr(
                    "With a tensor already on the CPU, your function returned the tensor itself (or a view of it): "
                    "writing to the 'copy' changes the original."
                ),
                tr(".cpu() and .to('cpu') return t itself when it is already there: ask for a copy explicitly."),
                more=tr(COPY_MORE),
                see=SECTION_ITSELF,
            )
        if result.dtype != t.dtype or not torch.equal(result, t.cpu()):
            return failed(
                tr("{when}: your copy has other values, dtype or shape.", when=when),
                tr("Only the device should change: same dtype, same values, same shape."),
                see=SECTION_ITSELF,
            )
    return passed(tr("A private CPU copy, whether the tensor starts on the course device or on the CPU."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn(t)` returns a NumPy array of `t`'s values, for a `t` on any device that requires grad."),
    tr_lazy(
        "`fn(losses)` returns the total of per-step loss tensors as a Python float: added up outside autograd, "
        "on the device, and fetched once."
    ),
    tr_lazy("`fn(t)` returns a CPU tensor with `t`'s values that never shares memory with `t`."),
)
