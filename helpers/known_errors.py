"""The device errors a learner meets, in one table: what each means, how to fix it, which notebook teaches it.

The table drives the error clinic: ``%load_ext helpers.clinic`` in a notebook (a note under the traceback)
and ``python -m helpers.doctor --explain "PASTED MESSAGE"`` in a terminal. Each entry's ``patterns`` are
regular expressions searched in ``"ExceptionTypeName: message"``; they follow the wordings of torch 2.7 to
the newest, of CUDA, MPS and the CPU kernels (with oneDNN or without). Entries are tried in table order,
so the more specific ones come first. ``tests/test_known_errors.py`` checks every pattern against the
messages the installed torch raises (or, for GPU-only ones, against text that still exists in it).

No torch import here: the explainer works even where torch is broken.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

DOCTOR = "python -m helpers.doctor"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes in pasted tracebacks (and in some torch messages)


@dataclass(frozen=True)
class KnownError:
    key: str  # short slug
    title: str  # the error as a learner would name it
    patterns: tuple[str, ...]  # regexes searched in "ExceptionTypeName: message"
    meaning: str
    fix: str
    lesson: str  # where the course teaches it, e.g. "notebook 04 (models vs tensors)"

    def matches(self, text: str) -> bool:
        return any(re.search(pattern, text) for pattern in self.patterns)


KNOWN_ERRORS: tuple[KnownError, ...] = (
    KnownError(
        key="fork-reinit",
        title="Cannot re-initialize CUDA in forked subprocess",
        patterns=(r"Cannot re-initialize CUDA in forked subprocess",),
        meaning="A process made by fork (DataLoader workers and multiprocessing on Linux) used CUDA after its "
        "parent had started it; a forked child cannot use its parent's CUDA context.",
        fix="Keep CUDA out of child processes: return CPU tensors from the Dataset's __getitem__, let "
        "pin_memory=True pin them, and move whole batches in the training loop with "
        ".to(device, non_blocking=True). Children that must use the GPU need the 'spawn' start method "
        '(multiprocessing_context="spawn" for a DataLoader).',
        lesson="notebook 06 (speed), section 3, Going deeper: CUDA inside a worker",
    ),
    KnownError(
        key="device-side-assert",
        title="CUDA error: device-side assert triggered",
        patterns=(
            r"device-side assert triggered",
            r"block: \[\d+,\s*\d+,\s*\d+\],? thread: \[\d+,\s*\d+,\s*\d+\],? Assertion",  # the kernel's own line
        ),
        meaning="A check inside a GPU kernel failed, most often an index out of range: a class label outside "
        "0..classes-1 in a loss, or a token id past an Embedding's size. GPU work runs asynchronously, so the "
        "error can surface at a later, unrelated line.",
        fix="Run the same batch on the CPU (model and tensors .cpu()): it raises a readable error at the right "
        "line, e.g. IndexError: Target 10 is out of bounds; check labels.min() and labels.max(). Or start the "
        "process with the environment variable CUDA_LAUNCH_BLOCKING=1 so the traceback points at the failing "
        "operation. The CUDA context stays broken (every later CUDA call fails): restart the kernel or "
        "process after the fix.",
        lesson="notebook 09 (the error clinic), section 8",
    ),
    KnownError(
        key="label-out-of-range",
        title="IndexError: Target N is out of bounds (a device-side assert on a GPU)",
        patterns=(r"Target -?\d+ is out of bounds",),
        meaning="A class label is outside 0..classes-1 (labels 1..10 for 10 classes, or -1 for 'unknown'). This is "
        "the CPU's readable form of the bug; on a CUDA GPU the same code fails with 'device-side assert triggered'.",
        fix="Check the labels before training: labels.min() >= 0 and labels.max() < the number of classes "
        "(subtract 1 from 1-based labels; give ignored samples ignore_index=-100 in the loss).",
        lesson="notebook 09 (the error clinic), section 8",
    ),
    KnownError(
        key="invalid-device-ordinal",
        title="CUDA error: invalid device ordinal",
        patterns=(r"invalid device ordinal",),
        meaning="The code asked for a GPU index this process does not have: cuda:1 on a one-GPU machine, or "
        "CUDA_VISIBLE_DEVICES leaves fewer GPUs than the code assumes (the visible ones are renumbered from 0).",
        fix="Use an index below torch.cuda.device_count(): choose the device once (plain 'cuda', or the course's "
        "pick_device()) instead of hard-coding cuda:N; under torchrun use cuda:LOCAL_RANK. "
        f"{DOCTOR} lists the GPUs this machine shows.",
        lesson="notebook 09 (the error clinic), section 6; "
        "notebook 00 (prerequisites) counts GPUs and shows CUDA_VISIBLE_DEVICES",
    ),
    KnownError(
        key="no-kernel-image",
        title="no kernel image is available for execution on the device (GPU sm_XX not supported by this PyTorch)",
        patterns=(
            r"no kernel image is available for execution on the device",
            r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
            r"Found GPU\d+ .* which is of (?:cuda|compute) capability",
            r"PyTorch no longer supports this GPU because it is too old",
        ),
        meaning="This PyTorch build has no compiled code for this GPU's architecture (its compute capability): "
        "the GPU is too new or too old for the installed wheel.",
        fix="Compare torch.cuda.get_device_capability() with torch.cuda.get_arch_list() (the architectures the "
        "wheel was built for), then install a build that lists it: a wheel for a newer CUDA for a new GPU "
        "(pytorch.org/get-started/locally), an older PyTorch release for an old one.",
        lesson="notebook 09 (the error clinic), section 12",
    ),
    KnownError(
        key="cuda-oom",
        title="CUDA out of memory (torch.OutOfMemoryError)",
        patterns=(
            r"\bOutOfMemoryError\b",
            r"\b(?:CUDA|XPU) out of memory",
            r"CUDA error: out of memory",
            r"MPS backend out of memory",
        ),
        meaning="The GPU has no room for the tensor being allocated: the model, the batch's activations, the "
        "gradients and the optimizer state do not fit together, or tensors you keep (or another program) "
        "still hold memory.",
        fix="Halve the batch size; keep the result with gradient accumulation, mixed precision (torch.autocast) "
        "or activation checkpointing; keep no references to old batches or losses (loss.item() for logging), "
        "evaluate under torch.no_grad(). nvidia-smi shows other processes on the GPU.",
        lesson="notebook 07 (memory)",
    ),
    KnownError(
        key="mps-float64",
        title="Cannot convert a MPS Tensor to float64 dtype",
        patterns=(
            r"Cannot convert a MPS Tensor to float64",
            r"MPS framework doesn't support float64",
            r"Trying to convert Double to the MPS backend",
        ),
        meaning="Apple's MPS backend has no float64 (double) tensors, and a float64 tensor was sent to 'mps' "
        "(often one made from a NumPy array, which is float64 by default).",
        fix="Convert to float32 first: x.to('mps', torch.float32) or x.float().to('mps'); "
        "torch.from_numpy(a).float(); create tensors with dtype=torch.float32.",
        lesson="notebook 00 (prerequisites), section 5 (Apple silicon: MPS)",
    ),
    KnownError(
        key="mp-spawn-notebook",
        title="mp.spawn: process N terminated with exit code 1 (a function defined in a notebook)",
        patterns=(r"process \d+ terminated with exit code \d+",),
        meaning="A process started by torch.multiprocessing.spawn died before it could report an error, most "
        "often because it could not load the function: spawn starts a fresh Python that must import it, and a "
        "function defined in a notebook lives in __main__ (the child says: Can't get attribute '...' on "
        "<module '__main__'>).",
        fix="Put the function in a .py module and import it (mp.spawn(module.train, nprocs=N)), or write a "
        "script and start it with torchrun (also from a cell: !torchrun --nproc_per_node=N script.py).",
        lesson="notebook 08 (many devices), section 4",
    ),
    KnownError(
        key="dataloader-worker-notebook",
        title="DataLoader worker (pid(s) ...) exited unexpectedly",
        patterns=(
            r"DataLoader worker \(pid\(s\) [^)]*\) exited unexpectedly",
            r"Can't get attribute '[^']+' on <module '__main__'",
        ),
        meaning="A worker process died at start. Under 'spawn' (macOS, Windows; Linux from Python 3.14 uses "
        "'forkserver') each worker is a fresh Python that must import the Dataset class, and a class defined in "
        "a notebook lives in __main__, which it cannot import (the worker's own error, in the terminal that "
        "started Jupyter: Can't get attribute '...' on <module '__main__'>).",
        fix="Put the Dataset class (and a collate_fn, if any) in a .py file next to the notebook and import it; "
        "or keep the data as tensors in a TensorDataset; or use num_workers=0.",
        lesson="notebook 06 (speed), section 3, The notebook pitfall: workers under spawn",
    ),
    KnownError(
        key="ddp-unused-parameters",
        title="Expected to have finished reduction in the prior iteration",
        patterns=(r"Expected to have finished reduction in the prior iteration",),
        meaning="DistributedDataParallel waits in backward() for a gradient of every parameter; some parameters "
        "did not take part in computing the loss (an unused layer or head), so the previous step never finished.",
        fix="Remove the unused parameters or freeze them (requires_grad_(False)) before wrapping, or make every "
        "output of forward() feed the loss; else DistributedDataParallel(model, find_unused_parameters=True), "
        "which costs a walk over the graph every step. TORCH_DISTRIBUTED_DEBUG=INFO names the parameters.",
        lesson="notebook 08 (many devices), section 4",
    ),
    KnownError(
        key="cuda-deserialize",
        title="Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False",
        patterns=(r"Attempting to deserialize object on (?:a )?\w+ device",),
        meaning="The checkpoint holds tensors saved from a GPU, and torch.load puts each one back on the device "
        "it was saved from, which this machine lacks (no GPU, or fewer GPUs than the one that saved it).",
        fix="Load with map_location: torch.load(path, map_location='cpu') (or map_location=device), then move "
        "the model with model.to(device).",
        lesson="notebook 05 (training Tudui), section 9 (checkpoints)",
    ),
    KnownError(
        key="weights-only",
        title="UnpicklingError: Weights only load failed",
        patterns=(r"Weights only load failed",),
        meaning="torch.load defaults to weights_only=True since PyTorch 2.6: it reads tensors and plain "
        "containers only, and refuses anything else in the file, such as a whole pickled model "
        "(torch.save(model)) or an object of your own class.",
        fix="Save and load state_dicts: torch.save(model.state_dict(), path), then "
        "model.load_state_dict(torch.load(path, map_location='cpu')). For an old file you trust, "
        "weights_only=False (it can run any code the file holds), or allow its classes with "
        "torch.serialization.add_safe_globals([...]).",
        lesson="notebook 05 (training Tudui), section 9 (checkpoints)",
    ),
    KnownError(
        key="state-dict-module-prefix",
        title='load_state_dict: Unexpected key(s) / Missing key(s) starting with "module."',
        patterns=(r'(?:Unexpected|Missing) key\(s\) in state_dict: [^\n]*"module\.',),
        meaning="The keys differ by a 'module.' prefix: the checkpoint was saved from a DataParallel or "
        "DistributedDataParallel wrapper, which keeps the model as .module (or a plain checkpoint was loaded "
        "into a wrapper).",
        fix="Strip the prefix before loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
        "(state, 'module.'), then model.load_state_dict(state). Better, save the model inside the wrapper: "
        "torch.save(wrapped.module.state_dict(), path); load a plain checkpoint into wrapped.module.",
        lesson="notebook 08 (many devices), section 1",
    ),
    KnownError(
        key="state-dict-compile-prefix",
        title='load_state_dict: Unexpected key(s) / Missing key(s) starting with "_orig_mod."',
        patterns=(r'(?:Unexpected|Missing) key\(s\) in state_dict: [^\n]*"_orig_mod\.',),
        meaning="The keys differ by an '_orig_mod.' prefix: the checkpoint was saved from a torch.compile'd "
        "model, which keeps the original as ._orig_mod (or a plain checkpoint was loaded into a compiled one).",
        fix="Save the original model: torch.save(model.state_dict(), path) with the model you passed to "
        "torch.compile (compiled._orig_mod). For an existing file: torch.nn.modules.utils."
        "consume_prefix_in_state_dict_if_present(state, '_orig_mod.'), then load.",
        lesson="notebook 06 (speed), section 4 (torch.compile)",
    ),
    KnownError(
        key="not-compiled-with-cuda",
        title="AssertionError: Torch not compiled with CUDA enabled",
        patterns=(r"Torch not compiled with CUDA enabled",),
        meaning="The installed PyTorch is a build without CUDA (torch.version.cuda is None), e.g. a CPU-only "
        "wheel: it cannot use an NVIDIA GPU, whatever the machine has.",
        fix="On a machine with an NVIDIA GPU, reinstall PyTorch with the command for a CUDA build from "
        "pytorch.org/get-started/locally; on a Mac use 'mps'; elsewhere use 'cpu'. Choose the device "
        f"(torch.cuda.is_available()) instead of calling .cuda() unconditionally. {DOCTOR} shows the build.",
        lesson="notebook 00 (prerequisites), section 2; notebook 01 (CPU to GPU), section 6",
    ),
    KnownError(
        key="no-nvidia-driver",
        title="Found no NVIDIA driver on your system",
        patterns=(r"Found no NVIDIA driver on your system",),
        meaning="This PyTorch is a CUDA build, but the machine has no NVIDIA driver: no NVIDIA GPU (a laptop, "
        "a Mac, a CI runner), a driver not installed, or a container started without the GPU.",
        fix="On a GPU machine, install the NVIDIA driver (nvidia-smi must work) or give the container the GPU "
        "(docker run --gpus all); in Colab: Runtime > Change runtime type > GPU. Otherwise run on the CPU: "
        f"choose the device with torch.cuda.is_available() instead of calling .cuda(). {DOCTOR} checks this.",
        lesson="notebook 00 (prerequisites), section 2; notebook 01 (CPU to GPU), section 6",
    ),
    KnownError(
        key="driver-too-old",
        title="The NVIDIA driver on your system is too old",
        patterns=(
            r"NVIDIA driver on your system is too old",
            r"CUDA driver version is insufficient for CUDA runtime version",
        ),
        meaning="The NVIDIA driver is older than the CUDA version this PyTorch wheel was built for "
        "(torch.version.cuda), so CUDA cannot start.",
        fix="Update the NVIDIA driver, or install a PyTorch wheel built for an older CUDA (nvidia-smi shows the "
        "newest CUDA version the driver supports; pick the wheel on pytorch.org/get-started/locally). "
        f"{DOCTOR} compares them.",
        lesson="notebook 00 (prerequisites), sections 2 and 7",
    ),
    KnownError(
        key="cuda-cannot-start",
        title="CUDA unknown error / CUDA driver initialization failed",
        patterns=(r"CUDA unknown error", r"CUDA driver initialization failed"),
        meaning="CUDA and the driver are installed but CUDA could not start: seen after a driver update without "
        "a reboot, after a laptop wakes from sleep, in a container not given the GPU, or when "
        "CUDA_VISIBLE_DEVICES changed after the program started.",
        fix="Restart the kernel (or process); if that does not help, reboot. Check that nvidia-smi works, and set "
        f"CUDA_VISIBLE_DEVICES before Python starts. {DOCTOR} checks this machine.",
        lesson="notebook 00 (prerequisites), section 2",
    ),
    KnownError(
        key="no-cuda-gpus",
        title="No CUDA GPUs are available",
        patterns=(r"No CUDA GPUs are available",),
        meaning="PyTorch has CUDA and a driver but sees no GPU: usually CUDA_VISIBLE_DEVICES hides them all "
        "(set to an empty value, or to indices that do not exist).",
        fix="Check CUDA_VISIBLE_DEVICES and nvidia-smi; unset the variable or name GPUs that exist, before Python "
        "starts (CUDA reads it once: restart the kernel after changing it). "
        f"{DOCTOR} checks this machine.",
        lesson="notebook 00 (prerequisites), sections 2 and 4",
    ),
    KnownError(
        key="invalid-device-string",
        title="Invalid device string / Expected one of cpu, cuda, ... device type at start of device string",
        patterns=(r"device type at start of device string", r"Invalid device string"),
        meaning="torch.device could not read the text: device strings are strict, 'type' or 'type:index', lower "
        "case, no spaces. 'gpu', 'CUDA:0', 'cuda0' and 'cuda: 0' are refused.",
        fix="Write 'cuda' or 'cuda:0' (never 'gpu'), 'mps' or 'cpu', or give the parts: torch.device('cuda', 0).",
        lesson="notebook 03 (device objects), section 2",
    ),
    KnownError(
        key="numpy-cuda",
        title="can't convert cuda:0 device type tensor to numpy",
        patterns=(r"can't convert \S+ device type tensor to numpy",),
        meaning="A NumPy array lives in CPU memory, so .numpy() works on CPU tensors only, and this tensor is on "
        "a GPU (or another device).",
        fix="Copy it to the CPU first: t.detach().cpu().numpy() (detach when it requires grad); for one number, "
        "t.item().",
        lesson="notebook 02 (GPU to CPU), section 3",
    ),
    KnownError(
        key="input-weight-type",
        title="Input type (...) and weight type (...) should be the same",
        patterns=(r"Input type \([^)]*\) and (?:weight|bias) type \([^)]*\) should be the same",),
        meaning="A layer got an input on another device, or of another dtype, than its weights: "
        "torch.cuda.FloatTensor against torch.FloatTensor means one is on the GPU and the other on the CPU; "
        "float against double (or c10::Half against float) is a dtype mix-up.",
        fix="Move the input to the model's device and keep the result: x = x.to(device) (a tensor's .to() "
        "returns a new tensor; a model's .to() works in place). For dtypes, give the input the weights' dtype "
        "(x.float()), or run the model under torch.autocast for half precision.",
        lesson="notebook 04 (models vs tensors), section 6",
    ),
    KnownError(
        key="dtype-mismatch",
        title="expected scalar type Float but found Double / mat1 and mat2 must have the same dtype",
        patterns=(
            r"expected scalar type \w+ but found \w+",
            r"mat1 and mat2 must have the same dtype",
            r"expected m1 and m2 to have the same dtype",
        ),
        meaning="Two tensors in one operation have different dtypes, e.g. a float32 input and float64 weights "
        "(NumPy arrays are float64 by default). Some CPU kernels report a layer's input/weight dtype mix-up "
        "this way.",
        fix="Give both the same dtype, usually float32: x.float(), torch.from_numpy(a).float(), or model.to(x.dtype).",
        lesson="notebook 04 (models vs tensors), section 6, Going deeper: the same check for dtypes",
    ),
    KnownError(
        key="same-device",
        title="Expected all tensors to be on the same device",
        patterns=(
            r"Expected all tensors to be on the same device",
            r"is not on the expected device",  # the meta device's wording
            r"found two different devices",  # FakeTensor (torch.compile tracing), torch 2.7
            r"are not at the same device",  # recurrent layers (LSTM, GRU)
            r"Expected object of device type \w+ but got device type \w+",  # old releases
        ),
        meaning="One operation got tensors on different devices: the model on the GPU but the input, the labels "
        "or a loss weight still on the CPU; a tensor made without device= inside a function; a layer created in "
        "forward(); an optimizer whose state was made before the model moved. The message names the devices "
        "(on CUDA also the argument: mat1, mat2, target, weight).",
        fix="Move everything the step uses to one device and keep the result: x, y = x.to(device), y.to(device); "
        "model.to(device) before the optimizer's first step and before loading its state; make constants with "
        "device=x.device (or as registered buffers); create layers in __init__, not in forward().",
        lesson="notebook 03 (device objects), section 8; notebook 04 (models vs tensors) for models",
    ),
    KnownError(
        key="cublas-context-warning",
        title="UserWarning: Attempting to run cuBLAS, but there was no current CUDA context!",
        patterns=(r"Attempting to run cuBLAS, but there was no current CUDA context",),
        meaning="Harmless: a one-time warning at a process's first backward() on some CUDA machines. The "
        "backward pass runs on a thread of PyTorch's own, which sets up the GPU for itself there.",
        fix="Nothing to fix. To hide it: warnings.filterwarnings('ignore', message='Attempting to run cuBLAS').",
        lesson="notebook 04 (models vs tensors), section 2",
    ),
)


def _clean(text: str) -> str:
    return ANSI.sub("", text)


def match(text: str) -> KnownError | None:
    """The first entry (in table order: the most specific first) whose patterns occur in ``text``."""
    text = _clean(text)
    return next((entry for entry in KNOWN_ERRORS if entry.matches(text)), None)


def exception_text(exc: BaseException) -> str:
    """``"ExceptionTypeName: message"``, followed by the exception's notes (``add_note``), one per line."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not break the explainer
        message = ""
    notes = [str(note) for note in getattr(exc, "__notes__", None) or ()]
    return "\n".join([f"{type(exc).__name__}: {message}", *notes])


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (``__cause__``) or during (``__context__``), and so on."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__


def explain_exception(exc: BaseException) -> KnownError | None:
    """The entry for ``exc``, or for the first exception in its chain that one matches; None if none does."""
    return next(filter(None, (match(exception_text(e)) for e in exception_chain(exc))), None)


def render(entry: KnownError) -> str:
    """A short plain-text note: what the error means, how to fix it, where the course teaches it."""

    def para(label: str, text: str) -> str:
        return textwrap.fill(
            f"{label} {text}", width=100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )

    return "\n".join(
        [
            f"[device error clinic] {entry.title}",
            para("What this means:", entry.meaning),
            para("How to fix it:", entry.fix),
            para("Learn more:", entry.lesson),
        ]
    )


def explain_text_cli(text: str) -> int:
    """Print the explanation of a pasted message; return 0 when it is a known device error, 1 when not."""
    entry = match(text)
    if entry is None:
        print(f"Not a known device error; `{DOCTOR}` checks this machine.")
        return 1
    print(render(entry))
    return 0
