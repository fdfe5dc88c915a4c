"""The known device errors of a GPU itself (part 1 of the table): CUDA in child processes, kernels that fail or
are missing, cuDNN and cuBLAS, out of memory (CUDA, MPS, the CPU), Apple's MPS backend.

Entries are tried in table order (``helpers.clinic.known_errors.KNOWN_ERRORS``: this part, then
``errors_processes``, then ``errors_tensors``), so the more specific ones come first.
"""

from __future__ import annotations

from helpers.clinic.error_entry import KnownError, words
from helpers.course.i18n import tr_lazy

GPU_ERRORS: tuple[KnownError, ...] = (
    KnownError(
        key="fork-reinit",
        title=tr_lazy("Cannot re-initialize CUDA in forked subprocess"),
        patterns=(
            words("Cannot re-initialize CUDA in forked subprocess"),
            words("To use CUDA with multiprocessing, you must use the 'spawn' start method"),  # its last line
            words("re-initialize CUDA in forked subprocess"),  # a paste cut before its first words
            words("you must use the 'spawn' start method"),  # ... or after them
        ),
        meaning=tr_lazy(
            "A process made by fork (DataLoader workers and multiprocessing on Linux) used CUDA after its "
            "parent had started it; a forked child cannot use its parent's CUDA context."
        ),
        fix=tr_lazy(
            "Keep CUDA out of child processes: return CPU tensors from the Dataset's __getitem__, let "
            "pin_memory=True pin them, and move whole batches in the training loop with "
            ".to(device, non_blocking=True). Children that must use the GPU need the 'spawn' start method: "
            'multiprocessing_context="spawn" for a DataLoader; in a script that starts processes itself '
            "(multiprocessing.Process or Pool), call torch.multiprocessing.set_start_method('spawn') once, under "
            'if __name__ == "__main__": and before any CUDA call or process start, or start them with '
            "torch.multiprocessing.spawn. Everything a spawned child gets must then be picklable (functions "
            "defined at a module's top level)."
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
        key="cudnn-not-initialized",
        title=tr_lazy("cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"),
        patterns=(words("CUDNN_STATUS_NOT_INITIALIZED"),),
        meaning=tr_lazy(
            "cuDNN, NVIDIA's library of GPU kernels that PyTorch calls for convolutions, recurrent layers and batch "
            "norm, could not start. Most often the GPU's memory was already full when cuDNN set itself up (it then "
            "reports this status, not 'out of memory'); otherwise the cuDNN or CUDA libraries the process loaded do "
            "not match the ones this PyTorch was built with (another CUDA on LD_LIBRARY_PATH, conda and pip installs "
            "mixed), or the GPU is newer than the build."
        ),
        fix=tr_lazy(
            "Free GPU memory first: a smaller batch, no other program on the GPU (nvidia-smi lists them), then rerun "
            "the script or restart the notebook's kernel (a failed start leaves the process's GPU state behind). If "
            "it persists, check the build: torch.backends.cudnn.version() must print a number, and python -m helpers "
            "doctor compares the GPU with the wheel; remove other CUDA or cuDNN directories from LD_LIBRARY_PATH, or "
            "reinstall PyTorch in a fresh environment with the command from pytorch.org. "
            "torch.backends.cudnn.enabled = False confirms the diagnosis (the layers then run without cuDNN, "
            "slower)."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 12"),
        shown=False,
    ),
    KnownError(
        key="cublas-execution-failed",
        title=tr_lazy("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm / cublasGemmEx"),
        patterns=(
            words("CUBLAS_STATUS_EXECUTION_FAILED"),
            words("cublas runtime error : the GPU program failed to execute"),  # torch 0.4 to 1.0 (THCBlas.cu)
        ),
        meaning=tr_lazy(
            "cuBLAS, NVIDIA's matrix-multiplication library (every Linear layer and matmul on a GPU), started a "
            "kernel that failed to run. The classic cause is a GPU newer than the CUDA this PyTorch was built with "
            "(an RTX 30 or 40 series with a CUDA 10 wheel, an H100 or RTX 50 with an old CUDA 11 one): the library "
            "has no working code for it. Otherwise an earlier asynchronous error surfacing here (an index out of "
            "range, an out-of-memory), or half precision on a GPU without it."
        ),
        fix=tr_lazy(
            "Compare the GPU with the build: torch.cuda.get_device_capability() against torch.cuda.get_arch_list(), "
            "and torch.version.cuda; install a wheel for a newer CUDA from pytorch.org/get-started/locally (python "
            "-m helpers doctor shows both). If the build fits, rerun the script with the environment variable "
            "CUDA_LAUNCH_BLOCKING=1 (in a notebook, set it before importing torch and restart the kernel), or run "
            "the same batch on the CPU, to find the operation that really failed."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 12"),
        shown=False,
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
)
