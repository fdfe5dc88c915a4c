"""The device errors a learner meets, in one table: what each means, how to fix it, which notebook teaches it.

The table drives the error clinic: ``%load_ext helpers.clinic`` in a notebook (a note under the traceback)
and ``python -m helpers doctor --explain "PASTED MESSAGE"`` in a terminal. Each entry's ``patterns`` are
regular expressions searched in ``"ExceptionTypeName: message"`` (or a whole pasted traceback, or a part of one),
once ``_clean`` has undone what pasting does to a message (line wraps, quotes, colour codes, a launcher's line
prefixes, a traceback's own lines). Most are ``words("core phrase")``: the stable core of a wording, in any case,
with room for the words a release or a device inserts; an entry lists a core phrase of each line a learner may
paste alone (the last line of a message, or the one after a cut). They follow the wordings of torch 0.4 to the
newest, of CUDA, MPS and the CPU kernels (with oneDNN or without). Entries are tried in table order, so the
more specific ones come first; an entry may add a ``verify`` check its patterns cannot express (the keys of a
state_dict must really differ by a prefix, even in a key list pasted alone). ``tests/test_known_errors.py``
checks every pattern against the messages the installed torch raises (or, for GPU-only ones, against text that
still exists in it), and against a corpus of messages people pasted into public threads
(``tests/fixtures/real_error_messages.json``).

No torch import here: the explainer works even where torch is broken.
"""

from __future__ import annotations

import html
import re
import textwrap
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from helpers.course.i18n import columns, tr, tr_lazy

DOCTOR = "python -m helpers doctor"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes in pasted tracebacks (and in some torch messages)


def words(phrase: str, gap: int = 2) -> str:
    """A regex for the stable core of a message, tolerant to how it varies and how people paste it.

    The phrase's words must come in order, in any case, separated by anything that is not a word (spaces, line
    wraps, quotes, punctuation, brackets), with up to ``gap`` other words between any two of them: a release
    that inserts a word, a device, a tensor type, an operator's name. `` ... `` in the phrase allows up to eight
    there (a GPU's name, a list of pids). A number in the phrase stands for any number.
    """
    between = rf"\W+(?:\w+\W+){{0,{gap}}}"

    def part(chunk: str) -> str:
        return between.join(r"\d+" if w.isdigit() else re.escape(w) for w in re.findall(r"\w+", chunk))

    return r"(?i:\b" + r"\W+(?:\w+\W+){0,8}".join(part(chunk) for chunk in phrase.split(" ... ")) + r"\b)"


@dataclass(frozen=True)
class KnownError:
    key: str  # short slug
    title: str  # the error as a learner would name it
    patterns: tuple[str, ...]  # regexes searched in the cleaned "ExceptionTypeName: message" (see _clean)
    meaning: str
    fix: str
    lesson: str  # where the course teaches it, e.g. "notebook 04 (models vs tensors)"
    shown: bool = True  # False: no lesson shows this message; ``lesson`` is the background, this note the help
    verify: Callable[[str], bool] | None = field(default=None, repr=False)  # a check beyond the patterns

    def matches(self, text: str) -> bool:
        return self.where(text) is not None

    def where(self, text: str) -> int | None:
        """Where in ``text`` the first of this entry's patterns starts; None if none occurs (or verify refuses)."""
        found = [m.start() for m in (re.search(pattern, text) for pattern in self.patterns) if m]
        if not found or (self.verify is not None and not self.verify(text)):
            return None
        return min(found)


KEY = r"""["']([\w.]+)["']"""  # a state_dict key as torch lists it ("conv1.weight"), or in a Python list
KEY_LIST = rf"((?:\s*{KEY},?)+)"
HEADINGS = {  # torch's own error, what load_state_dict(strict=False) returns, torch 0.3's KeyError
    "missing": (r"Missing key\(s\) in state_dict:", r"missing_keys=\[", r"missing keys in state_dict: \"\{"),
    "unexpected": (r"Unexpected key\(s\) in state_dict:", r"unexpected_keys=\[", r"\bunexpected key"),
}


def _state_dict_keys(text: str, kind: str) -> set[str] | None:
    """The keys listed after ``Missing key(s) in state_dict:`` (or ``Unexpected``, or ``missing_keys=[``);
    None when the text has no such heading."""
    lists = [re.search(heading + KEY_LIST, text) for heading in HEADINGS[kind]]
    found = [set(re.findall(KEY, m.group(1))) for m in lists if m]
    return set().union(*found) if found else None


def _differ_by_prefix(prefix: str) -> Callable[[str], bool]:
    """True when adding or removing ``prefix`` turns a missing key into an unexpected one, or back.

    Keys that differ in anything else (a renamed layer, another architecture, a checkpoint nested under
    ``"state_dict"``) are not the prefix's doing, even when both sides start with ``module.``. A pasted part of
    the message counts too: a key list alone (both spellings of a key listed), or the last part alone (only
    unexpected keys, all with the prefix, the lines above cut off; not the extra ``num_batches_tracked`` of a
    newer torch, nor a wrapper's own keys).
    """

    def stripped(keys: set[str]) -> set[str]:
        return {key.removeprefix(prefix) for key in keys if key.startswith(prefix)}

    def verify(text: str) -> bool:
        missing, unexpected = _state_dict_keys(text, "missing"), _state_dict_keys(text, "unexpected")
        if missing is None and unexpected is None:  # the key list alone
            keys = set(re.findall(KEY, text))
            return bool(stripped(keys) & keys)
        if stripped(unexpected or set()) & (missing or set()) or stripped(missing or set()) & (unexpected or set()):
            return True
        first_lines_cut = missing is None and not re.search(r"Error\(s\) in loading state_dict", text)
        return bool(
            first_lines_cut
            and unexpected
            and len(stripped(unexpected)) == len(unexpected)
            and not all(key.endswith("num_batches_tracked") for key in unexpected)
        )

    return verify


PIDS = r"\W+(?:\w+\W+){0,2}(?:\(pids?(?:\(s\))? [^)]*\)\W+)?(?:\w+\W+){0,2}"  # a DataLoader's worker pids, any number
TYPE = r"(?:Variable\[)?torch\."  # a legacy tensor type: torch.cuda.FloatTensor, Variable[torch.FloatTensor]
FLOATS = r"(?:Float|Double|Half|BFloat16)"  # the floating dtypes: a Long/Int mix-up is a different error


KNOWN_ERRORS: tuple[KnownError, ...] = (
    KnownError(
        key="fork-reinit",
        title=tr_lazy("Cannot re-initialize CUDA in forked subprocess"),
        patterns=(
            words("Cannot re-initialize CUDA in forked subprocess"),
            words("To use CUDA with multiprocessing, you must use the 'spawn' start method"),  # its last line
        ),
        meaning=tr_lazy(
            "A process made by fork (DataLoader workers and multiprocessing on Linux) used CUDA after its "
            "parent had started it; a forked child cannot use its parent's CUDA context."
        ),
        fix=tr_lazy(
            "Keep CUDA out of child processes: return CPU tensors from the Dataset's __getitem__, let "
            "pin_memory=True pin them, and move whole batches in the training loop with "
            ".to(device, non_blocking=True). Children that must use the GPU need the 'spawn' start method "
            '(multiprocessing_context="spawn" for a DataLoader).'
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3, Going deeper: CUDA inside a worker"),
    ),
    KnownError(
        key="device-side-assert",
        title=tr_lazy("CUDA error: device-side assert triggered"),
        patterns=(
            words("device-side assert triggered"),
            r"block: \[\d+, ?\d+, ?\d+\],? thread: \[\d+, ?\d+, ?\d+\],? Assertion",  # the kernel's own line
            r"Assertion .[^`']*(?:\bt < n_classes|srcIndex < srcSelectDimSize|index out of bounds)",  # its end alone
            r"\bcudaErrorAssert\b",  # torch 2.x: "Search for `cudaErrorAssert' in ..."
        ),
        meaning=tr_lazy(
            "A check inside a GPU kernel failed, most often an index out of range: a class label outside "
            "0..classes-1 in a loss, or a token id past an Embedding's size. GPU work runs asynchronously, so the "
            "error can surface at a later, unrelated line."
        ),
        fix=tr_lazy(
            "Run the same batch on the CPU (model and tensors .cpu()): it raises a readable error at the right "
            "line, e.g. IndexError: Target 10 is out of bounds; check labels.min() and labels.max(). Or start the "
            "process with the environment variable CUDA_LAUNCH_BLOCKING=1 so the traceback points at the failing "
            "operation. The CUDA context stays broken (every later CUDA call fails): restart the kernel or "
            "process after the fix."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 8"),
    ),
    KnownError(
        key="label-out-of-range",
        title=tr_lazy("IndexError: Target N is out of bounds (a device-side assert on a GPU)"),
        patterns=(
            words("Target 1 out of bounds"),  # Target 10 is out of bounds; torch 0.4: Target 100 out of bounds at
            r"cur_target >= 0 && cur_target < n_classes",  # the CPU kernel's assertion, torch 0.4 to 1.x
        ),
        meaning=tr_lazy(
            "A class label is outside 0..classes-1 (labels 1..10 for 10 classes, or -1 for 'unknown'). This is "
            "the CPU's readable form of the bug; on a CUDA GPU the same code fails with 'device-side assert triggered'."
        ),
        fix=tr_lazy(
            "Check the labels before training: labels.min() >= 0 and labels.max() < the number of classes "
            "(subtract 1 from 1-based labels; give ignored samples ignore_index=-100 in the loss)."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 8"),
    ),
    KnownError(
        key="invalid-device-ordinal",
        title=tr_lazy("CUDA error: invalid device ordinal"),
        patterns=(words("invalid device ordinal"), r"\bcudaErrorInvalidDevice\b"),
        meaning=tr_lazy(
            "The code asked for a GPU index this process does not have: cuda:1 on a one-GPU machine, or "
            "CUDA_VISIBLE_DEVICES leaves fewer GPUs than the code assumes (the visible ones are renumbered from 0)."
        ),
        fix=tr_lazy(
            "Use an index below torch.cuda.device_count(): choose the device once (plain 'cuda', or the course's "
            "pick_device()) instead of hard-coding cuda:N; under torchrun use cuda:LOCAL_RANK. "
            "python -m helpers doctor lists the GPUs this machine shows."
        ),
        lesson=tr_lazy(
            "notebook 09 (the error clinic), section 6; "
            "notebook 00 (prerequisites) counts GPUs and shows CUDA_VISIBLE_DEVICES"
        ),
    ),
    KnownError(
        key="no-kernel-image",
        title=tr_lazy(
            "no kernel image is available for execution on the device (GPU sm_XX not supported by this PyTorch)"
        ),
        patterns=(
            words("no kernel image is available for execution on the device"),
            r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
            r"Found GPU\d+ [^.]{0,80} which is of (?:cuda|compute) capability",
            words("PyTorch no longer supports this GPU because it is too old"),
            words("The current PyTorch install supports CUDA capabilities"),  # the lines after the first
            words("If you want to use the ... GPU with PyTorch, please check the instructions at"),
            r"\bcudaErrorNoKernelImageForDevice\b",
        ),
        meaning=tr_lazy(
            "This PyTorch build has no compiled code for this GPU's architecture (its compute capability): "
            "the GPU is too new or too old for the installed wheel."
        ),
        fix=tr_lazy(
            "Compare torch.cuda.get_device_capability() with torch.cuda.get_arch_list() (the architectures the "
            "wheel was built for), then install a build that lists it: a wheel for a newer CUDA for a new GPU "
            "(pytorch.org/get-started/locally), an older PyTorch release for an old one."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 12"),
    ),
    KnownError(
        key="mps-oom",
        title=tr_lazy("MPS backend out of memory (Apple silicon)"),
        patterns=(
            words("MPS backend out of memory"),
            words("Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations"),
        ),
        meaning=tr_lazy(
            "The Mac's GPU (MPS) reached its memory limit. On Apple silicon the GPU shares the Mac's memory "
            "with everything else. In the message, 'MPS allocated' is what PyTorch's tensors hold, 'other "
            "allocations' the rest of the GPU memory in use, 'max allowed' the limit PyTorch sets for MPS."
        ),
        fix=tr_lazy(
            "Halve the batch size and keep the same effective batch with gradient accumulation; "
            "torch.autocast('mps', dtype=torch.float16) cuts memory further (the numbers change slightly); keep no "
            "references to old batches or losses (loss.item() for logging); torch.mps.empty_cache() returns cached "
            "blocks. Close other programs that use much memory. The limit is MPS's own knob, "
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO, set before Python starts: 0.0 removes it, which lets "
            "macOS swap or freeze instead of raising this error."
        ),
        lesson=tr_lazy("notebook 07 (memory), section 4"),
    ),
    KnownError(
        key="cuda-oom",
        title=tr_lazy("CUDA out of memory (torch.OutOfMemoryError)"),
        patterns=(
            r"\bOutOfMemoryError\b",
            words("CUDA out of memory", gap=3),  # also "CUDA error: out of memory", "cuda runtime error (2) : ..."
            words("HIP out of memory"),  # ROCm builds
            words("XPU out of memory"),
            r"\berror=2 ?: ?out of memory",  # torch 0.4 to 1.x: THCudaCheck FAIL file=... line=... error=2
            r"\bcudaErrorMemoryAllocation\b",
            # the lines after the first, which only this message has
            words("reserved in total by PyTorch"),
            words("is reserved by PyTorch but unallocated"),
            words("GPU 0 has a total capacity of"),
            words("Tried to allocate ... GPU 0 ... total capacity"),
            words("If reserved memory is >> allocated memory try setting max_split_size_mb"),
            words("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation"),
        ),
        meaning=tr_lazy(
            "The GPU has no room for the tensor being allocated: the model, the batch's activations, the "
            "gradients and the optimizer state do not fit together, or tensors you keep (or another program) "
            "still hold memory."
        ),
        fix=tr_lazy(
            "Halve the batch size and keep the same effective batch with gradient accumulation; activation "
            "checkpointing or mixed precision (torch.autocast, the numbers change slightly) cut memory further; "
            "keep no references to old batches or losses (loss.item() for logging), evaluate under "
            "torch.no_grad(). nvidia-smi shows other processes on the GPU."
        ),
        lesson=tr_lazy("notebook 07 (memory)"),
    ),
    KnownError(
        key="cpu-oom",
        title=tr_lazy("DefaultCPUAllocator: can't allocate memory (out of RAM)"),
        patterns=(
            words("DefaultCPUAllocator: can't allocate memory"),
            words("DefaultCPUAllocator: not enough memory"),
            words("Torch: not enough memory: you tried to allocate"),  # torch 0.4 to 1.0 ("Buy new RAM!")
            r"posix_memalign\(&data, gAlignment, nbytes\) == 0\. 12 vs 0",  # torch 1.0, 1.1: errno 12, ENOMEM
        ),
        meaning=tr_lazy(
            "The operating system refused the memory a CPU tensor needs: the process asked for more RAM than "
            "the machine (or the container's limit) has free. The message gives the size asked for, in bytes."
        ),
        fix=tr_lazy(
            "Read that size first: an absurd one (terabytes) means a wrong shape, e.g. a pairwise N x N matrix or a "
            "view on the wrong dimension; print the shapes. Otherwise make the batch smaller, keep the dataset on disk "
            "and load items in the Dataset's __getitem__, use float32 rather than float64, drop references you no "
            "longer need (del, then gc.collect()), or give the machine or container more RAM."
        ),
        lesson=tr_lazy("notebook 07 (memory), section 4"),
    ),
    KnownError(
        key="mps-float64",
        title=tr_lazy("Cannot convert a MPS Tensor to float64 dtype"),
        patterns=(
            words("Cannot convert a MPS Tensor to float64"),
            words("MPS framework doesn't support float64"),
            words("Trying to convert Double to the MPS backend"),
        ),
        meaning=tr_lazy(
            "Apple's MPS backend has no float64 (double) tensors, and a float64 tensor was sent to 'mps' "
            "(often one made from a NumPy array, which is float64 by default)."
        ),
        fix=tr_lazy(
            "Convert to float32 first: x.to('mps', torch.float32) or x.float().to('mps'); "
            "torch.from_numpy(a).float(); create tensors with dtype=torch.float32."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), section 5 (Apple silicon: MPS)"),
    ),
    KnownError(
        key="mps-not-implemented",
        title=tr_lazy("NotImplementedError: The operator '...' is not currently implemented for the MPS device"),
        patterns=(
            words("is not currently implemented for the MPS device"),
            words("is not current implemented for the MPS device"),  # torch 1.13's wording
            words("PYTORCH_ENABLE_MPS_FALLBACK=1 to use the CPU as a fallback"),  # its later lines
            words("please comment on https://github.com/pytorch/pytorch/issues/77764"),
        ),
        meaning=tr_lazy(
            "Apple's MPS backend has no kernel for this operation in the installed PyTorch; PyTorch raises "
            "rather than running it somewhere else without being asked."
        ),
        fix=tr_lazy(
            "Set the environment variable PYTORCH_ENABLE_MPS_FALLBACK=1 before Python starts (in the shell that "
            "starts Python or Jupyter): the missing operations then run on the CPU, slower, the rest on MPS. Newer "
            "PyTorch releases implement more operations; or run the model on the CPU."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 12"),
        shown=False,
    ),
    KnownError(
        key="mps-placeholder",
        title=tr_lazy("Placeholder storage has not been allocated on MPS device!"),
        patterns=(words("Placeholder storage has not been allocated on MPS device"),),
        meaning=tr_lazy(
            "MPS's own wording of a device mix-up: an operation on the Mac's GPU got a tensor that is still on "
            "the CPU (the input, the labels, a hidden state, or a tensor made without device=)."
        ),
        fix=tr_lazy(
            "Move everything the step uses to 'mps' and keep the result: x, y = x.to(device), y.to(device); "
            "model.to(device) before the optimizer's first step; make new tensors with device=x.device."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 2; notebook 03 (device objects), section 8"),
    ),
    KnownError(
        key="mp-spawn-notebook",
        title=tr_lazy("mp.spawn: process N terminated with exit code 1"),
        patterns=(words("process 0 terminated with exit code 1"),),
        meaning=tr_lazy(
            "A process started by torch.multiprocessing.spawn died before it could report an error. From a "
            "notebook, most often it could not load the function: spawn starts a fresh Python that must import it, "
            "and a function defined in a notebook lives in __main__ (the child says: Can't get attribute '...' on "
            "<module '__main__'>). From a script, the child's own error is printed above this line; a common one is "
            "the script's top-level code, which each child runs again when it imports the script."
        ),
        fix=tr_lazy(
            "From a notebook, put the function in a .py module and import it (mp.spawn(module.train, nprocs=N)), "
            "or write a script and start it with torchrun (also from a cell: !torchrun --nproc_per_node=N "
            "script.py). From a script, read the child's error above this line, and start the processes under the "
            'main guard: if __name__ == "__main__": mp.spawn(train, nprocs=N).'
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="dataloader-worker-notebook",
        title=tr_lazy(
            "DataLoader worker: Can't get attribute '...' on <module '__main__'> (a class the worker cannot import)"
        ),
        patterns=(  # the worker's own error, read in a worker's (spawn's) traceback, in either order
            r"(?s)\A(?=.*Can't get attribute '[^']+' on <module '__(?:mp_)?main__')"
            r"(?=.*(?:spawn\.py|__mp_main__|DataLoader worker|_worker_loop|multiprocessing[/\\]))",
        ),
        meaning=tr_lazy(
            "A worker process died at start. Under 'spawn' (macOS, Windows; Linux from Python 3.14 uses "
            "'forkserver') each worker is a fresh Python that must import the Dataset class. From a notebook it "
            "cannot: a class defined in a notebook lives in __main__ (the worker's own error is in the terminal that "
            "started Jupyter). From a script, the worker imports the script but does not run what sits under its "
            'if __name__ == "__main__": guard, so a class defined there (or inside a function) does not exist for it.'
        ),
        fix=tr_lazy(
            "Define the Dataset class (and a collate_fn, if any) where a worker can import it: from a notebook, in "
            "a .py file next to the notebook, imported; from a script, at the script's top level or in a module it "
            "imports, not under the main guard. Or keep the data as tensors in a TensorDataset; or use num_workers=0."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3, The notebook pitfall: workers under spawn"),
    ),
    KnownError(
        key="shm-bus-error",
        title=tr_lazy("DataLoader worker (pid N) is killed by signal: Bus error (out of shared memory)"),
        patterns=(
            words("DataLoader worker (pid 1) is killed by signal: Bus error"),
            words("bus error encountered in worker"),
            words("insufficient shared memory (shm)"),
            words("workers are out of shared memory"),
        ),
        meaning=tr_lazy(
            "Workers hand each batch to the main process through shared memory (/dev/shm), and it ran out: "
            "Docker gives a container 64 MB of it unless told otherwise, and many workers with large batches "
            "(prefetch_factor batches each) fill more."
        ),
        fix=tr_lazy(
            "Give the container more: docker run --shm-size=8g (or --ipc=host); df -h /dev/shm shows the size. Or "
            "keep less in flight: fewer workers, smaller batches, a smaller prefetch_factor; num_workers=0 avoids "
            "shared memory altogether."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3"),
        shown=False,
    ),
    KnownError(
        key="windows-spawn-main",
        title=tr_lazy(
            "An attempt has been made to start a new process before the current process has finished its "
            "bootstrapping phase"
        ),
        patterns=(  # Python's own multi-line message: any of its lines
            words("An attempt has been made to start a new process before the current process has finished"),
            words("you are not using fork to start your child processes"),
            words('The "freeze_support()" line can be omitted if the program is not going to be frozen'),
        ),
        meaning=tr_lazy(
            "Where new processes start by 'spawn' (Windows, macOS), each DataLoader worker (num_workers > 0) or "
            "child process is a fresh Python that first imports your script. A script that starts them at its top "
            "level would start them again in every child, so Python stops it."
        ),
        fix=tr_lazy(
            "Put the script's top-level code in a function and call it under the main guard: def main(): ... then "
            'if __name__ == "__main__": main(). Or use num_workers=0.'
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3"),
        shown=False,
    ),
    KnownError(
        key="dataloader-worker-died",
        title=tr_lazy("DataLoader worker (pid(s) ...) exited unexpectedly"),
        patterns=(
            words("DataLoader worker") + PIDS + words("exited unexpectedly"),  # (pid(s) N, M); torch 1.x: (pid N)
            words("DataLoader worker (pid 1) is killed by signal"),
            words("Details are lost due to multiprocessing. Rerunning with num_workers=0"),  # torch 1.x, its end
        ),
        meaning=tr_lazy(
            "A DataLoader worker process died without reporting an error; the main process only sees that it is "
            "gone. The cause is in the worker's own output (the terminal that started Python or Jupyter) or in the "
            "operating system: a Dataset class defined in a notebook that a spawned worker cannot import (Can't get "
            "attribute '...' on <module '__main__'>), no shared memory left (Bus error), no RAM left (Killed), or a "
            "crash in a library the Dataset calls."
        ),
        fix=tr_lazy(
            "Run once with num_workers=0: the Dataset's real error then appears in your own process with a "
            "readable traceback. Then: a class defined in a notebook goes into a .py file you import; a Bus error "
            "needs more shared memory (docker run --shm-size=8g) or fewer workers; Killed needs fewer workers or "
            "smaller batches."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3, The notebook pitfall: workers under spawn"),
    ),
    KnownError(
        key="ddp-unused-parameters",
        title=tr_lazy("Expected to have finished reduction in the prior iteration"),
        patterns=(
            words("Expected to have finished reduction in the prior iteration"),
            words("your module has parameters that were not used in producing loss"),  # the lines after
            words("which did not receive grad for rank"),
        ),
        meaning=tr_lazy(
            "DistributedDataParallel waits in backward() for a gradient of every parameter; some parameters "
            "did not take part in computing the loss (an unused layer or head), so the previous step never finished."
        ),
        fix=tr_lazy(
            "Remove the unused parameters or freeze them (requires_grad_(False)) before wrapping, or make every "
            "output of forward() feed the loss; else DistributedDataParallel(model, find_unused_parameters=True), "
            "which costs a walk over the graph every step. TORCH_DISTRIBUTED_DEBUG=INFO names the parameters."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="nccl-not-built",
        title=tr_lazy("Distributed package doesn't have NCCL built in"),
        patterns=(words("Distributed package doesn't have NCCL"),),
        meaning=tr_lazy(
            "The code asks for the NCCL backend (backend='nccl', or a library's default), and this PyTorch has "
            "none: builds for Windows and macOS never include NCCL, CPU-only builds neither."
        ),
        fix=tr_lazy(
            "Use the gloo backend: dist.init_process_group('gloo'), or choose it from the machine: 'nccl' if "
            "torch.cuda.is_available() and dist.is_nccl_available() else 'gloo'. On Windows, multi-GPU training at "
            "full speed needs Linux (or WSL2)."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="nccl-no-gpu",
        title=tr_lazy("ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
        patterns=(words("ProcessGroupNCCL is only supported with GPUs"),),
        meaning=tr_lazy(
            "NCCL connects GPUs, and this process sees none: a machine or a PyTorch build without CUDA, "
            "CUDA_VISIBLE_DEVICES hiding the GPUs, or a driver problem (torch.cuda.is_available() is False)."
        ),
        fix=tr_lazy(
            "Without GPUs use the gloo backend: 'nccl' if torch.cuda.is_available() else 'gloo'. If the machine "
            "has GPUs, python -m helpers doctor shows why PyTorch does not see them."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="nccl-watchdog-timeout",
        title=tr_lazy("Watchdog caught collective operation timeout: WorkNCCL(...) ran for ... milliseconds"),
        patterns=(
            words("Watchdog caught collective operation timeout"),
            words("ran for 600060 milliseconds before timing out"),
        ),
        meaning=tr_lazy(
            "A collective (an all-reduce in backward(), a broadcast, a barrier) waited longer than the process "
            "group's timeout (Timeout(ms) in the message) for the other ranks, so NCCL's watchdog took the whole "
            "process down. Some rank never got there: it crashed or hung, ran fewer steps (uneven data), or was busy "
            "elsewhere (evaluation or saving on rank 0 only)."
        ),
        fix=tr_lazy(
            "Find the rank that did not arrive: its own first error is in the log (torchrun prints each rank's). "
            "Make every rank run the same collectives in the same order: the same number of batches "
            "(DistributedSampler, drop_last=True) and no collective inside an if rank == 0 branch. For long rank-0 "
            "work between steps, raise the timeout: init_process_group(timeout=datetime.timedelta(minutes=30))."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="port-in-use",
        title=tr_lazy("The server socket has failed to listen on any local network address (address already in use)"),
        patterns=(  # torch 2.x names EADDRINUSE in this message; older releases said "Address already in use"
            words("failed to listen on any local network address"),
            # the same words from a web server or Jupyter are not torch.distributed's
            r"(?s)\A(?=.*[Aa]ddress already in use)(?=.*(?:c10d|TCPStore|torch[./]distributed|DistNetworkError|"
            r"MASTER_PORT|rendezvous|init_process_group|torchrun|server socket|RuntimeError: Address already in use))",
        ),
        meaning=tr_lazy(
            "torch.distributed's rendezvous (a TCP store on MASTER_ADDR:MASTER_PORT, 29500 by default) could not "
            "listen on its port: another job, or an earlier run still alive, holds it."
        ),
        fix=tr_lazy(
            "Choose another port: torchrun --master_port=29501 ... (or MASTER_PORT=29501 in the environment), or "
            "let torchrun --standalone pick a free one; or end the earlier run."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="cuda-deserialize",
        title=tr_lazy("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False"),
        patterns=(
            words("Attempting to deserialize object on device"),  # on a CUDA device, on CUDA device 1
            words("please use torch.load with map_location ... to map your storages"),  # its end alone
        ),
        meaning=tr_lazy(
            "The checkpoint holds tensors saved from a GPU, and torch.load puts each one back on the device "
            "it was saved from, which this machine lacks (no GPU, or fewer GPUs than the one that saved it)."
        ),
        fix=tr_lazy(
            "Load with map_location: torch.load(path, map_location='cpu') (or map_location=device), then move "
            "the model with model.to(device)."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
    ),
    KnownError(
        key="weights-only",
        title=tr_lazy("UnpicklingError: Weights only load failed"),
        patterns=(
            words("Weights only load failed"),
            words("WeightsUnpickler error"),  # the lines after the first
            words("Unsupported global: GLOBAL"),
            words("we changed the default value of the `weights_only` argument in `torch.load`"),
            words("with `weights_only` set to `False` will likely succeed"),
        ),
        meaning=tr_lazy(
            "torch.load defaults to weights_only=True since PyTorch 2.6: it reads tensors and plain "
            "containers only, and refuses anything else in the file, such as a whole pickled model "
            "(torch.save(model)) or an object of your own class."
        ),
        fix=tr_lazy(
            "Save and load state_dicts: torch.save(model.state_dict(), path), then "
            "model.load_state_dict(torch.load(path, map_location='cpu')). For an old file you trust, "
            "weights_only=False (it can run any code the file holds), or allow its classes with "
            "torch.serialization.add_safe_globals([...])."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
    ),
    KnownError(
        key="pickled-model-main",
        title=tr_lazy(
            "AttributeError: Can't get attribute 'Tudui' on <module '__main__'> (torch.load of a whole model)"
        ),
        patterns=(r"Can't get attribute '[^']+' on <module '__main__'",),
        meaning=tr_lazy(
            "The file holds a whole pickled model (torch.save(model)), and a pickle stores only the class's "
            "name and module: here __main__, the script or notebook that saved it. torch.load in another script or "
            "notebook looks for the class in its own __main__ and does not find it."
        ),
        fix=tr_lazy(
            "Save and load the state_dict instead: torch.save(model.state_dict(), path), then in any script or "
            "notebook model = Tudui() (the class imported from a .py file) and "
            "model.load_state_dict(torch.load(path)). To read an existing file you trust, make the class exist under "
            "that name first (define it in the loading script, or from model import Tudui there), then "
            "torch.load(path, weights_only=False)."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
        shown=False,
    ),
    KnownError(
        key="state-dict-module-prefix",
        title=tr_lazy('load_state_dict: Unexpected key(s) / Missing key(s) starting with "module."'),
        patterns=(r"[\"']module\.[\w.]+[\"']",),  # a key with the prefix; verify compares the keys
        verify=_differ_by_prefix("module."),
        meaning=tr_lazy(
            "The keys differ by a 'module.' prefix: the checkpoint was saved from a DataParallel or "
            "DistributedDataParallel wrapper, which keeps the model as .module (or a plain checkpoint was loaded "
            "into a wrapper)."
        ),
        fix=tr_lazy(
            "Strip the prefix before loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
            "(state, 'module.'), then model.load_state_dict(state). Better, save the model inside the wrapper: "
            "torch.save(wrapped.module.state_dict(), path); load a plain checkpoint into wrapped.module."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 1"),
    ),
    KnownError(
        key="state-dict-compile-prefix",
        title=tr_lazy('load_state_dict: Unexpected key(s) / Missing key(s) starting with "_orig_mod."'),
        patterns=(r"[\"']_orig_mod\.[\w.]+[\"']",),
        verify=_differ_by_prefix("_orig_mod."),
        meaning=tr_lazy(
            "The keys differ by an '_orig_mod.' prefix: the checkpoint was saved from a torch.compile'd "
            "model, which keeps the original as ._orig_mod (or a plain checkpoint was loaded into a compiled one)."
        ),
        fix=tr_lazy(
            "Save the original model: torch.save(model.state_dict(), path) with the model you passed to "
            "torch.compile (compiled._orig_mod). For an existing file: torch.nn.modules.utils."
            "consume_prefix_in_state_dict_if_present(state, '_orig_mod.'), then load."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 4 (torch.compile)"),
    ),
    KnownError(
        key="not-compiled-with-cuda",
        title=tr_lazy("AssertionError: Torch not compiled with CUDA enabled"),
        patterns=(words("Torch not compiled with CUDA enabled"),),
        meaning=tr_lazy(
            "The installed PyTorch is a build without CUDA (torch.version.cuda is None), e.g. a CPU-only "
            "wheel: it cannot use an NVIDIA GPU, whatever the machine has."
        ),
        fix=tr_lazy(
            "On a machine with an NVIDIA GPU, reinstall PyTorch with the command for a CUDA build from "
            "pytorch.org/get-started/locally; on a Mac use 'mps'; elsewhere use 'cpu'. Choose the device "
            "(torch.cuda.is_available()) instead of calling .cuda() unconditionally. python -m helpers doctor shows "
            "the build."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), section 2; notebook 01 (CPU to GPU), section 6"),
    ),
    KnownError(
        key="no-nvidia-driver",
        title=tr_lazy("Found no NVIDIA driver on your system"),
        patterns=(
            words("Found no NVIDIA driver on your system"),
            words("Please check that you have an NVIDIA GPU and installed a driver"),
        ),
        meaning=tr_lazy(
            "This PyTorch is a CUDA build, but the machine has no NVIDIA driver: no NVIDIA GPU (a laptop, "
            "a Mac, a CI runner), a driver not installed, or a container started without the GPU."
        ),
        fix=tr_lazy(
            "On a GPU machine, install the NVIDIA driver (nvidia-smi must work) or give the container the GPU "
            "(docker run --gpus all); in Colab: Runtime > Change runtime type > GPU. Otherwise run on the CPU: "
            "choose the device with torch.cuda.is_available() instead of calling .cuda(). python -m helpers doctor "
            "checks this."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), section 2; notebook 01 (CPU to GPU), section 6"),
    ),
    KnownError(
        key="driver-too-old",
        title=tr_lazy("The NVIDIA driver on your system is too old"),
        patterns=(
            words("NVIDIA driver on your system is too old"),
            words("CUDA driver version is insufficient for CUDA runtime version"),
            r"\bcudaErrorInsufficientDriver\b",
        ),
        meaning=tr_lazy(
            "The NVIDIA driver is older than the CUDA version this PyTorch wheel was built for "
            "(torch.version.cuda), so CUDA cannot start."
        ),
        fix=tr_lazy(
            "Update the NVIDIA driver, or install a PyTorch wheel built for an older CUDA (nvidia-smi shows the "
            "newest CUDA version the driver supports; pick the wheel on pytorch.org/get-started/locally). "
            "python -m helpers doctor compares them."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), sections 2 and 7"),
    ),
    KnownError(
        key="cuda-cannot-start",
        title=tr_lazy("CUDA unknown error / CUDA driver initialization failed"),
        patterns=(
            words("CUDA unknown error"),
            words("CUDA driver initialization failed"),
            r"(?i)(?:CUDA error|cuda runtime error \(\d+\)|error=\d+) ?: ?unknown error",  # torch 0.4 to 1.x
            words("Unexpected error from cudaGetDeviceCount"),
            r"\bcudaErrorUnknown\b",
        ),
        meaning=tr_lazy(
            "CUDA and the driver are installed but CUDA could not start: seen after a driver update without "
            "a reboot, after a laptop wakes from sleep, in a container not given the GPU, or when "
            "CUDA_VISIBLE_DEVICES changed after the program started."
        ),
        fix=tr_lazy(
            "Rerun the script, or restart the notebook's kernel; if that does not help, reboot. Check that "
            "nvidia-smi works, and set CUDA_VISIBLE_DEVICES before Python starts. python -m helpers doctor checks "
            "this machine."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), section 2"),
    ),
    KnownError(
        key="no-cuda-gpus",
        title=tr_lazy("No CUDA GPUs are available"),
        patterns=(
            words("No CUDA GPUs are available"),
            words("no CUDA-capable device is detected"),
            r"\bcudaErrorNoDevice\b",
        ),
        meaning=tr_lazy(
            "PyTorch has CUDA and a driver but sees no GPU: usually CUDA_VISIBLE_DEVICES hides them all "
            "(set to an empty value, or to indices that do not exist, such as '1' on a one-GPU machine)."
        ),
        fix=tr_lazy(
            "Check CUDA_VISIBLE_DEVICES and nvidia-smi; unset the variable or name GPUs that exist, before Python "
            "starts (CUDA reads it once: after changing it, rerun the script or restart the notebook's kernel). "
            "python -m helpers doctor checks this machine."
        ),
        lesson=tr_lazy("notebook 00 (prerequisites), sections 2 and 4"),
    ),
    KnownError(
        key="invalid-device-string",
        title=tr_lazy("Invalid device string / Expected one of cpu, cuda, ... device type at start of device string"),
        patterns=(words("device type at start of device string"), words("Invalid device string")),
        meaning=tr_lazy(
            "torch.device could not read the text: device strings are strict, 'type' or 'type:index', lower "
            "case, no spaces. 'gpu', 'CUDA:0', 'cuda0' and 'cuda: 0' are refused."
        ),
        fix=tr_lazy(
            "Write 'cuda' or 'cuda:0' (never 'gpu'), 'mps' or 'cpu', or give the parts: torch.device('cuda', 0)."
        ),
        lesson=tr_lazy("notebook 03 (device objects), section 2"),
    ),
    KnownError(
        key="numpy-cuda",
        title=tr_lazy("can't convert cuda:0 device type tensor to numpy"),
        patterns=(
            words("can't convert ... tensor to numpy"),  # cuda:0 device type, CUDA (torch 1.x), mps:0 device type
            words("cannot convert ... tensor to numpy"),
            words("Use Tensor.cpu() to copy the tensor to host memory first"),  # its end alone
        ),
        meaning=tr_lazy(
            "A NumPy array lives in CPU memory, so .numpy() works on CPU tensors only, and this tensor is on "
            "a GPU (or another device)."
        ),
        fix=tr_lazy(
            "Copy it to the CPU first: t.detach().cpu().numpy() (detach when it requires grad); for one number, "
            "t.item()."
        ),
        lesson=tr_lazy("notebook 02 (GPU to CPU), section 3"),
    ),
    KnownError(
        key="input-weight-type",
        title=tr_lazy("Input type (...) and weight type (...) should be the same"),
        patterns=(words("Input type ... and weight type"), words("Input type ... and bias type")),
        meaning=tr_lazy(
            "A layer got an input on another device, or of another dtype, than its weights: "
            "torch.cuda.FloatTensor against torch.FloatTensor means one is on the GPU and the other on the CPU; "
            "float against double (or c10::Half against float) is a dtype mix-up."
        ),
        fix=tr_lazy(
            "Move the input to the model's device and keep the result: x = x.to(device) (a tensor's .to() "
            "returns a new tensor; a model's .to() works in place). For dtypes, give the input the weights' dtype "
            "(x.float()), or run the model under torch.autocast for half precision."
        ),
        lesson=tr_lazy("notebook 04 (models vs tensors), section 6"),
    ),
    KnownError(
        key="dtype-mismatch",
        title=tr_lazy("expected scalar type Float but found Double / mat1 and mat2 must have the same dtype"),
        patterns=(  # floating dtypes only: Long against Int is a label or index dtype, fixed with .long()
            rf"expected scalar type {FLOATS} but found {FLOATS}",
            rf"Expected object of scalar type {FLOATS} but got scalar type {FLOATS}",  # torch 1.x
            rf"expected backend (\w+) and dtype {FLOATS} but got backend \1 and dtype {FLOATS}",  # torch 1.0, 1.1
            rf"Expected object of type {TYPE}(cuda\.|){FLOATS}Tensor\]? but found type {TYPE}\1{FLOATS}Tensor",  # 0.4
            r"mat1 and mat2 (?:must|to) have the same dtype",
            r"expected m1 and m2 to have the same dtype",
            rf"but type {TYPE}(cuda\.|){FLOATS}Tensor does not equal {TYPE}\1{FLOATS}Tensor",  # torch 1.x
            rf"Found dtype {FLOATS} but expected {FLOATS}",  # a loss's backward (an MSE target of float64)
            rf"expected dtype {FLOATS} but got dtype {FLOATS}",  # torch 1.3 to 1.5
        ),
        meaning=tr_lazy(
            "Two tensors in one operation have different floating-point dtypes: a float32 input and float64 "
            "weights (NumPy arrays are float64 by default), or half precision (Half = float16, BFloat16) against "
            "float32 when part of a model was converted with .half() and the rest, or the input, was not. Some CPU "
            "kernels report a layer's input/weight dtype mix-up this way."
        ),
        fix=tr_lazy(
            "Give both the same dtype, usually float32: x.float(), torch.from_numpy(a).float(), or model.to(x.dtype). "
            "For half precision, run the forward pass under torch.autocast (it picks the dtype per operation) instead "
            "of converting parts by hand, or convert the model and its inputs together."
        ),
        lesson=tr_lazy("notebook 04 (models vs tensors), section 6, Going deeper: the same check for dtypes"),
    ),
    KnownError(
        key="optimizer-foreach-device",
        title=tr_lazy("Tensors of the same index must be on the same device and the same dtype (optimizer.step)"),
        patterns=(words("Tensors of the same index must be on the same device"),),  # each torch 2.x wording
        meaning=tr_lazy(
            "The optimizer's foreach route (one call over all parameters at once: the default of Adam, AdamW and SGD "
            "when every parameter is on a CUDA GPU or an Intel XPU, or asked for with foreach=True) found a "
            "parameter whose state (Adam's averages, SGD's momentum) is on another device that is not the CPU, or in "
            "another dtype. "
            "Usually the model moved to another GPU (cuda:0 to cuda:1) after the optimizer stepped, or was converted "
            "(.float() after training in float16); with foreach=True also a state moved to the GPU while the model "
            "stayed on the CPU. A state left on the CPU gets past this check and fails later with 'Expected all "
            "tensors to be on the same device'."
        ),
        fix=tr_lazy(
            "Move the model (and set its dtype) before building the optimizer; when resuming, build the optimizer "
            "after the move and then load its state_dict: load_state_dict puts each state tensor on its parameter's "
            "device, in its dtype. For an optimizer that already stepped, load its state_dict() into a new one "
            "built after the move. foreach=False gives the one-tensor-at-a-time route, whose error names the two "
            "devices."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 2, Going deeper: the optimizer's foreach wording"),
    ),
    KnownError(
        key="same-device",
        title=tr_lazy("Expected all tensors to be on the same device"),
        patterns=(
            words("Expected all tensors to be on the same device"),
            words("is not on the expected device"),  # the meta device's wording
            words("found two different devices"),  # FakeTensor (torch.compile tracing), torch 2.7
            words("are not at the same device"),  # recurrent layers (LSTM, GRU)
            r"indices should be either on \w+ or on the same device as the indexed tensor",
            words("must be on the same device"),  # torch.cat, torch 1.x: All input tensors must be ...
            words("module must have its parameters and buffers on device"),  # DataParallel
            words("arguments are located on different GPUs"),  # torch 0.3, 0.4
            r"(?i)Expect(?:ed)? tensor to have (\w+) Backend, but got tensor with (?!\1\b)\w+ Backend",  # torch 1.x
            r"expected device ([\w:]+)(?: and dtype \w+)? but got device (?!\1\b)[\w:]+",  # torch 1.5 to 1.7
            # torch 0.4 to 1.x: the device types differ (the same backend with two dtypes is a dtype error)
            r"Expected object of device type \w+ but got device type \w+",
            r"Expected object of backend (\w+) but got backend (?!\1\b)\w+",
            r"expected backend (\w+) and dtype \w+ but got backend (?!\1\b)\w+",
            rf"Expected object of type {TYPE}cuda\.\w+\]? but found type {TYPE}(?!cuda\.)",  # torch 0.4
            rf"Expected object of type {TYPE}(?!cuda\.)\w+\]? but found type {TYPE}cuda\.",
            r"is on (?:CPU|GPU(?: \d+)?), but expected (?:it|them) to be on (?:CPU|GPU)",
            r"to have the same device as tensor for argument",
            rf"but type {TYPE}cuda\.\w+ does not equal {TYPE}(?!cuda\.)",  # torch 1.x: ... to have the same type as ...
            rf"but type {TYPE}(?!cuda\.)\w+ does not equal {TYPE}cuda\.",
        ),
        meaning=tr_lazy(
            "One operation got tensors on different devices: the model on the GPU but the input, the labels "
            "or a loss weight still on the CPU; a tensor made without device= inside a function; a layer created in "
            "forward(); an optimizer whose state was made before the model moved. The message names the devices "
            "(on CUDA often also the argument: mat1, mat2, target, weight)."
        ),
        fix=tr_lazy(
            "Move everything the step uses to one device and keep the result: x, y = x.to(device), y.to(device); "
            "model.to(device) before the optimizer's first step and before loading its state; make constants with "
            "device=x.device (or as registered buffers); create layers in __init__, not in forward()."
        ),
        lesson=tr_lazy("notebook 03 (device objects), section 8; notebook 04 (models vs tensors) for models"),
    ),
    KnownError(
        key="cublas-context-warning",
        title=tr_lazy("UserWarning: Attempting to run cuBLAS, but there was no current CUDA context!"),
        patterns=(words("Attempting to run cuBLAS, but there was no current CUDA context"),),
        meaning=tr_lazy(
            "Harmless: a one-time warning at a process's first backward() on some CUDA machines. The "
            "backward pass runs on a thread of PyTorch's own, which sets up the GPU for itself there."
        ),
        fix=tr_lazy(
            "Nothing to fix. To hide it: warnings.filterwarnings('ignore', message='Attempting to run cuBLAS')."
        ),
        lesson=tr_lazy("notebook 04 (models vs tensors), section 2"),
    ),
)


QUOTES = str.maketrans(  # what editors, blogs and forums make of a message's quotes and dashes
    {"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u2032": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
     "\u2033": '"', "\u2010": "-", "\u2011": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
     "\u200b": None, "\u200c": None, "\u200d": None, "\u2060": None, "\ufeff": None}
)  # fmt: skip
LINE_PREFIX = re.compile(  # what a launcher or a tool puts in front of each line
    r"^[ \t]*(?:\[(?:rank|default)\d+\]:[ \t]?|E(?=[ \t]{2})|>+(?=[ \t]|$))+", re.M
)  # torchrun's rank prefixes ([rank0]:, [default0]:), pytest's E, quoted mail and markdown, >>> prompts
SCAFFOLDING = re.compile(  # a traceback's lines that are no part of any message
    r"^[ \t]*(?:Traceback \(most recent call last\):?|During handling of the above exception, another exception "
    r"occurred:|The above exception was the direct cause of the following exception:|[~^ ]*\^[~^ ]*)[ \t]*$",
    re.M,
)
HOME = re.compile(r"(?:[A-Za-z]:)?/(?:home|Users)/[^/\s'\"]+", re.I)  # ~ for anyone's home directory


def _clean(text: str) -> str:
    """The text as the patterns read it: one line, whatever the paste did to it.

    Colour codes, HTML entities (&#39;), full-width characters (Chinese posts), typographic quotes and dashes,
    and invisible characters become plain text; the prefixes a launcher or tool writes before each line and a
    traceback's own lines go; Windows paths use /, a home directory reads ~, an address 0x...; every run of
    spaces and line breaks becomes one space, so a message wrapped over lines reads as it was raised.
    """
    text = ANSI.sub("", text)
    if "&" in text:
        text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text).translate(QUOTES)
    text = re.sub(r"\b(\w*(?:Error|Exception|Warning)):(?=\S)", r"\1: ", text)  # RuntimeError：x, a full-width colon
    text = SCAFFOLDING.sub("", LINE_PREFIX.sub("", text))
    text = re.sub(r"(?<=[\w.~:$)])\\(?=[\w.~$-])", "/", text)  # C:\Users\me\x.py, ..\torch\csrc
    text = HOME.sub("~", text)
    text = re.sub(r"\b0x[0-9a-fA-F]{6,}\b", "0x...", text)
    return re.sub(r"\s+", " ", text).strip()


HARMLESS = frozenset({"cublas-context-warning"})  # a warning printed on the way: never the error itself


def match(text: str) -> KnownError | None:
    """The entry for the error that ``text`` names first, or None.

    A paste can name more than one: an error and a hint printed after it (a program's "If you encounter CUDA out of
    memory ..." under a CPU allocator's error), a root error and what it led to (a worker's own error, then the main
    process's). The first one named is the root, so it wins; at the same place, table order (the most specific
    entry first); a harmless warning only when nothing else is there.
    """
    text = _clean(text)
    found = [
        (entry.key in HARMLESS, at, i) for i, entry in enumerate(KNOWN_ERRORS) if (at := entry.where(text)) is not None
    ]
    return KNOWN_ERRORS[min(found)[2]] if found else None


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


CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
CLOSING = "，。：；？！）、”’》」』"  # Chinese punctuation a line does not start with
OPENING = "（“‘《「『"  # ... nor ends with


def fill(text: str, width: int = 100, indent: str = "  ") -> str:
    """``textwrap.fill`` for the notes; Chinese text may break between any two characters (never inside a word
    of code or English, never before closing punctuation), and its characters count as two columns."""
    if not CJK.search(text):
        return textwrap.fill(
            text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
    units: list[str] = []
    for unit in re.findall(rf"\s+|{CJK.pattern}|[^\s\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]+", text):
        if units and not units[-1].isspace() and (unit[0] in CLOSING or units[-1][-1] in OPENING):
            units[-1] += unit
        else:
            units.append(unit)
    lines, line = [], ""
    for unit in units:
        if line.strip() and not unit.isspace() and columns(line + unit) > width:
            lines.append(line.rstrip())
            line = indent
        if unit.isspace() and line.isspace():
            continue  # no line starts with a space beyond its indent
        line += unit
    lines.append(line.rstrip())
    return "\n".join(lines)


def render(entry: KnownError) -> str:
    """A short plain-text note: what the error means, how to fix it, where the course teaches it.

    An entry no lesson shows (``shown=False``) names the lesson on its topic and says the note is the help.
    The note speaks the course's language; the error's own words (the title's message) stay as PyTorch wrote them.
    """
    lesson = tr(entry.lesson)
    learn = (
        tr("Learn more: {lesson}", lesson=lesson)
        if entry.shown
        else tr("Learn more: {lesson}, on the topic (no lesson shows this message itself)", lesson=lesson)
    )
    return "\n".join(
        [
            tr("[device error clinic] {title}", title=tr(entry.title)),
            fill(tr("What this means: {meaning}", meaning=tr(entry.meaning))),
            fill(tr("How to fix it: {fix}", fix=tr(entry.fix))),
            fill(learn),
        ]
    )


def explain_text_cli(text: str) -> int:
    """Print the explanation of a pasted message; return 0 when it is a known device error, 1 when not."""
    entry = match(text)
    if entry is None:
        print(tr("Not a known device error; `{doctor}` checks this machine.", doctor=DOCTOR))
        return 1
    print(render(entry))
    return 0
