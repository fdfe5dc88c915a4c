"""The table of known device errors against the messages of the installed torch.

A torch release that rewords a message must fail here, not silently stop matching. So: (a) every error
a CPU-only machine can raise is raised for real and must be recognised; (b) the GPU-only ones are the
texts recorded on a real GPU (tests/fixtures/gpu_error_messages.json), and the fragments their patterns
rely on must still exist in the installed torch (its Python files or its shared libraries); (c) unknown
errors match nothing; (d) every lesson names a notebook that exists and teaches the error; (e) messages
people pasted into public threads (tests/fixtures/real_error_messages.json, torch 0.4 to 2.x) get the right
explanation, and the errors next to them that are not device errors get none.
"""

from __future__ import annotations

import html
import inspect
import io
import json
import mmap
import multiprocessing.spawn
import re
import subprocess
import sys
import textwrap
import tomllib
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.clinic import known_errors
from helpers.clinic.known_errors import (
    KNOWN_ERRORS,
    KnownError,
    exception_text,
    explain_exception,
    explain_text_cli,
    match,
    render,
)
from helpers.lab import simulate
from helpers.lab.child import run_python
from helpers.lesson.checkpoints import tag_as_saved_on
from tools import course

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "gpu_error_messages.json").read_text())
CORPUS = json.loads((Path(__file__).parent / "fixtures" / "real_error_messages.json").read_text(encoding="utf-8"))
ENTRIES = {entry.key: entry for entry in KNOWN_ERRORS}
CUDA_START = {"not-compiled-with-cuda", "no-nvidia-driver", "driver-too-old", "cuda-cannot-start", "no-cuda-gpus"}


def key_of(exc: BaseException) -> str | None:
    entry = explain_exception(exc)
    return entry.key if entry else None


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as err:  # noqa: BLE001 - the error is the result
        return err
    raise AssertionError(f"{fn} raised nothing")


def test_table_is_well_formed():
    assert len(ENTRIES) == len(KNOWN_ERRORS), "keys must be unique"
    for entry in KNOWN_ERRORS:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", entry.key)
        assert entry.title and entry.meaning and entry.fix and entry.lesson and entry.patterns
        for pattern in entry.patterns:
            re.compile(pattern)
    with pytest.raises(AttributeError):
        KNOWN_ERRORS[0].key = "x"  # frozen


# --- (a) raised for real on this machine ----------------------------------------------------------------


def _meta_add():
    return torch.ones(3) + torch.ones(3, device="meta")


def _lstm_on_meta():
    return nn.LSTM(3, 4).to("meta")(torch.ones(2, 1, 3))


def _fake_cuda_add():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # a tensor that claims to be on a GPU, with no GPU and no memory behind it
        return torch.ones(2, device="cuda") + torch.ones(2)


def _conv(batch: int, bias: bool):
    return lambda: nn.Conv2d(3, 4, 3, bias=bias).double()(torch.ones(batch, 3, 8, 8))


def _conv_without_onednn():
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # as a build without oneDNN (tests/test_variants.py)
    try:
        return nn.Conv2d(3, 4, 3, bias=False).double()(torch.ones(2, 3, 8, 8))
    finally:
        torch.backends.mkldnn.enabled = enabled


def _checkpoint_from_a_gpu():
    buffer = io.BytesIO()
    index = torch.cuda.device_count() + 1 if torch.cuda.is_available() else 0  # a GPU this machine lacks
    with tag_as_saved_on(f"cuda:{index}"):
        torch.save({"w": torch.ones(2)}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _cpu_only_deserialize_message() -> str:
    """What loading a GPU checkpoint says on a machine without CUDA (a GPU machine says another thing)."""
    with mock.patch("torch.cuda.is_available", return_value=False):
        return str(raised(_checkpoint_from_a_gpu))


class _Pickled:  # not a tensor, not a plain container: weights_only refuses it
    pass


def _pickled_object():
    buffer = io.BytesIO()
    torch.save(_Pickled(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _into_plain(state: dict):
    return lambda: nn.Sequential(nn.Linear(2, 2)).load_state_dict(state)


def _another_architecture_under_data_parallel():
    """Both sides start with "module.", but the layers differ: no prefix makes these keys match."""
    saved = nn.DataParallel(nn.Sequential(nn.Identity(), nn.Linear(2, 2))).state_dict()  # module.1.*
    return nn.DataParallel(nn.Sequential(nn.Linear(2, 2))).load_state_dict(saved)  # module.0.*


def _stepped_adam(foreach: bool, dtype: torch.dtype = torch.float32):
    """A model on the CPU and its Adam, stepped once (its state made)."""
    model = nn.Linear(3, 2).to(dtype)
    optimizer = torch.optim.Adam(model.parameters(), foreach=foreach)
    model(torch.ones(4, 3, dtype=dtype)).sum().backward()
    optimizer.step()
    return model, optimizer


def _adam_state_elsewhere(foreach: bool):
    """The state moved to another device by hand (to meta: a device that is not the CPU), the model left behind."""

    def step():
        model, optimizer = _stepped_adam(foreach)
        for state in optimizer.state.values():
            for name, value in state.items():
                if name != "step":
                    state[name] = value.to("meta")
        model(torch.ones(4, 3)).sum().backward()
        optimizer.step()

    return step


def _adam_state_in_half():
    """A model trained in float16, converted with .float() after its optimizer stepped (the foreach route)."""
    model, optimizer = _stepped_adam(foreach=True, dtype=torch.float16)
    model.float()
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()


def _local_collate_under_spawn():
    """A collate_fn defined inside a function, for workers started by spawn: pickling it fails before any starts."""

    def collate(batch):  # a local function: no name another process can import
        return batch

    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, num_workers=1, collate_fn=collate,
                        multiprocessing_context="spawn")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.9+ warns first ("Got pickle error when attempting to start ...")
        return next(iter(loader))


def _collective_before_init_process_group():
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("no torch.distributed here, or a process group is already running")
    return dist.all_reduce(torch.ones(1))


RAISED_HERE = {
    "numpy() of a tensor that requires grad": (
        lambda: torch.ones(2, requires_grad=True).numpy(),
        "numpy-requires-grad",
    ),
    "a local collate_fn under spawn": (_local_collate_under_spawn, "worker-pickle-local"),
    "a collective before init_process_group": (_collective_before_init_process_group, "process-group-not-initialized"),
    "optimizer state on another device (foreach)": (_adam_state_elsewhere(foreach=True), "optimizer-foreach-device"),
    "optimizer state on another device (one tensor at a time)": (_adam_state_elsewhere(foreach=False), "same-device"),
    "optimizer state in another dtype (foreach)": (_adam_state_in_half, "optimizer-foreach-device"),
    "meta vs cpu (element-wise)": (_meta_add, "same-device"),
    "meta vs cpu (LSTM)": (_lstm_on_meta, "same-device"),
    "FakeTensorMode cuda vs cpu": (_fake_cuda_add, "same-device"),
    "meta tensor to numpy": (lambda: torch.ones(2, device="meta").numpy(), "numpy-cuda"),
    "conv: float input, double bias": (_conv(2, bias=True), "input-weight-type"),
    "conv: float input, double weight (oneDNN where built)": (_conv(2, bias=False), None),
    "conv: one image, double weight": (_conv(1, bias=False), "dtype-mismatch"),
    "conv without oneDNN": (_conv_without_onednn, "dtype-mismatch"),
    "linear: float input, double weight": (lambda: nn.Linear(3, 2).double()(torch.ones(2, 3)), "dtype-mismatch"),
    "a label past the last class": (
        lambda: nn.functional.cross_entropy(torch.zeros(2, 10), torch.tensor([1, 10])),
        "label-out-of-range",
    ),
    "torch.device('gpu')": (lambda: torch.device("gpu"), "invalid-device-string"),
    "torch.device('CUDA:0')": (lambda: torch.device("CUDA:0"), "invalid-device-string"),
    "device='cuda0'": (lambda: torch.zeros(1, device="cuda0"), "invalid-device-string"),
    "device='cuda: 0'": (lambda: torch.device("cuda: 0"), "invalid-device-string"),
    "checkpoint saved on a GPU": (_checkpoint_from_a_gpu, "cuda-deserialize"),
    "weights_only refuses an object": (_pickled_object, "weights-only"),
    "module. prefix": (
        _into_plain({"module.0.weight": torch.ones(2, 2), "module.0.bias": torch.ones(2)}),
        "state-dict-module-prefix",
    ),
    "CPU out of memory": (lambda: torch.empty(2**50), "cpu-oom"),  # 4 PiB: more than any machine has
}
NOT_DEVICE_ERRORS = {  # raised here for real, next to device errors, and not theirs to explain
    "int32 labels in cross_entropy (the fix is .long())": lambda: nn.functional.cross_entropy(
        torch.zeros(2, 3), torch.tensor([0, 2], dtype=torch.int32)
    ),
    "float labels in nll_loss": lambda: nn.functional.nll_loss(torch.zeros(2, 3), torch.tensor([0.0, 2.0])),
    "another architecture under DataParallel (module. on both sides)": _another_architecture_under_data_parallel,
    "a shape mismatch": lambda: nn.Linear(3, 2)(torch.ones(2, 4)),
    "a size mismatch in a state_dict": lambda: nn.Linear(3, 2).load_state_dict(nn.Linear(4, 2).state_dict()),
}
ONEDNN_OR_NOT = {"input-weight-type", "dtype-mismatch"}  # the two wordings of one mistake (notebook 04)


@pytest.mark.parametrize("name", RAISED_HERE, ids=list(RAISED_HERE))
def test_errors_raised_here_are_recognised(name):
    fn, expected = RAISED_HERE[name]
    err = raised(fn)
    if expected is None:
        assert key_of(err) in ONEDNN_OR_NOT, f"{type(err).__name__}: {err}"
    else:
        assert key_of(err) == expected, f"{type(err).__name__}: {err}"


@pytest.mark.parametrize("name", NOT_DEVICE_ERRORS, ids=list(NOT_DEVICE_ERRORS))
def test_errors_that_are_not_device_errors_are_not_claimed(name):
    err = raised(NOT_DEVICE_ERRORS[name])
    assert key_of(err) is None, f"{type(err).__name__}: {err}"


def test_wrapper_prefixes_as_torch_writes_them():
    plain = nn.Sequential(nn.Linear(2, 2))
    wrapped = nn.DataParallel(plain)  # without a GPU a pass-through; its keys still start with "module."
    assert key_of(raised(lambda: nn.Sequential(nn.Linear(2, 2)).load_state_dict(wrapped.state_dict()))) == (
        "state-dict-module-prefix"
    )
    assert key_of(raised(lambda: wrapped.load_state_dict(plain.state_dict()))) == "state-dict-module-prefix"
    try:
        compiled = torch.compile(plain)  # wraps now, compiles at the first call (never made here)
    except Exception as err:  # torch.compile unsupported on this platform
        pytest.skip(f"torch.compile: {err}")
    err = raised(lambda: nn.Sequential(nn.Linear(2, 2)).load_state_dict(compiled.state_dict()))
    assert "_orig_mod." in str(err) and key_of(err) == "state-dict-compile-prefix"


def test_cuda_that_cannot_start_is_recognised():
    if torch.cuda.is_available():
        pytest.skip("CUDA works here")
    err = raised(lambda: torch.zeros(1, device="cuda"))
    assert key_of(err) in CUDA_START, f"{type(err).__name__}: {err}"
    if "Found no NVIDIA driver" in str(err):
        assert key_of(err) == "no-nvidia-driver"


def test_not_compiled_with_cuda_as_torch_raises_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.delattr(torch._C, "_cuda_getDeviceCount", raising=False)  # what a CPU-only build lacks
    err = raised(torch.cuda._lazy_init)
    assert isinstance(err, AssertionError) and key_of(err) == "not-compiled-with-cuda"


def test_forked_child_as_torch_raises_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # a forked child of a CUDA parent
    err = raised(torch.cuda._lazy_init)
    assert key_of(err) == "fork-reinit"


def test_gpu_the_wheel_was_not_built_for_warns_recognisably(monkeypatch):
    """torch's own start-up checks, on a simulated GPU of compute capability 6.1 and a wheel built for 9.0."""
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "12.6")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Simulated GPU")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda._check_capability()
        torch.cuda._check_cubins()
    assert caught, "no warning for an unsupported GPU"
    for warning in caught:
        assert match(f"{warning.category.__name__}: {warning.message}") is ENTRIES["no-kernel-image"], warning.message


def test_ddp_unused_parameter_as_torch_raises_it():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("no torch.distributed here, or a process group is already running")
    from torch.nn.parallel import DistributedDataParallel

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head_a, self.head_b = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

        def forward(self, x):
            return self.head_a(self.body(x))  # head_b unused

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(TwoHeads())

        def two_steps():
            for _ in range(2):
                ddp(torch.ones(2, 4)).sum().backward()

        assert key_of(raised(two_steps)) == "ddp-unused-parameters"
    finally:
        dist.destroy_process_group()


def test_mps_float64_where_there_is_mps():
    if not torch.backends.mps.is_available():
        pytest.skip("no MPS here: the message is checked in test_mps_float64_wordings")
    err = raised(lambda: torch.zeros(1, dtype=torch.float64, device="mps"))
    assert key_of(err) == "mps-float64"


CHILD = r"""
import json
import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset
from helpers.lab.child import capture_child_stderr
from helpers.clinic.known_errors import explain_exception, match


class Squares(Dataset):  # defined in __main__, as in a notebook
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor(i * i)


def hello(rank):  # likewise
    print("hello", rank)


found = {}
with capture_child_stderr() as children:
    starts = {
        "dataloader": lambda: list(DataLoader(Squares(), batch_size=2, num_workers=1, multiprocessing_context="spawn")),
        "spawn": lambda: mp.spawn(hello, nprocs=1),
    }
    for name, start in starts.items():
        try:
            start()
            found[name] = None
        except Exception as err:
            entry = explain_exception(err)
            found[name] = [type(err).__name__, str(err), entry and entry.key]
entry = match(children.text)
found["children"] = [children.text[-500:], entry and entry.key]
print(json.dumps(found))
"""


def test_children_that_cannot_import_a_notebook_definition():
    """A DataLoader under spawn and mp.spawn, in a fresh `python -c` whose __main__ a child cannot import."""
    found = json.loads(run_python(CHILD, timeout=240).strip().splitlines()[-1])
    assert found["dataloader"][2] == "dataloader-worker-died", found["dataloader"]  # the parent only sees it die
    assert found["spawn"][2] == "mp-spawn-notebook", found["spawn"]
    text, key = found["children"]
    assert "Can't get attribute" in text and key == "dataloader-worker-notebook", text


# --- (b) messages only a GPU raises ------------------------------------------------------------------------

FIXTURE_KEYS = {  # every recorded message, and the entry it must get
    "same_device_add": "same-device",
    "same_device_matmul": "same-device",
    "linear_cpu_input": "same-device",
    "loss_cpu_labels": "same-device",
    "loss_cpu_weight": "same-device",
    "numpy_cuda": "numpy-cuda",
    "conv_cpu_input": "same-device",
    "conv_cuda_input_cpu_weight": "input-weight-type",
    "conv_half_input": "input-weight-type",
    "invalid_ordinal": "invalid-device-ordinal",
    "invalid_ordinal_to": "invalid-device-ordinal",
    "set_device_bad": "invalid-device-ordinal",
    "bad_string": "invalid-device-string",
    "bad_string2": "invalid-device-string",
    "adam_late_move": "same-device",
    "adam_late_move_noforeach": "same-device",
    "sgd_momentum_late_move": "same-device",
    "layer_in_forward": "same-device",
    "oom": "cuda-oom",
    "device_assert": "device-side-assert",
    "device_assert_blocking": "device-side-assert",
    "fork_reinit": "fork-reinit",
    "cvd_missing": "no-cuda-gpus",
    "cvd_empty": "no-cuda-gpus",
    "ddp_unused": "ddp-unused-parameters",
    "mps_float64_on_cuda": None,  # float64 works on CUDA: nothing to explain
}


def recorded(name: str) -> str:
    """A recorded message as a learner sees it: "TypeName: message", or what the probe printed."""
    entry = FIXTURE["messages"][name]
    if "message" in entry:
        return f"{entry['raised'].rsplit('.', 1)[-1]}: {entry['message']}"
    return entry["stdout"]


def test_every_recorded_message_has_an_expectation():
    assert set(FIXTURE_KEYS) == set(FIXTURE["messages"])


@pytest.mark.parametrize("name", FIXTURE_KEYS)
def test_messages_recorded_on_a_gpu_are_recognised(name):
    entry = match(recorded(name))
    assert (entry.key if entry else None) == FIXTURE_KEYS[name], recorded(name)


def test_the_kernel_assertion_line_alone_is_recognised():
    assert match(FIXTURE["messages"]["device_assert"]["stderr"]) is ENTRIES["device-side-assert"]


DRIVER_INSUFFICIENT = (  # what torch 2.7 raises on a driver older than its CUDA, once CUDA has started
    "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version\n"
    "CUDA kernel errors might be asynchronously reported at some other API call"
)
MPS_FLOAT64 = (  # torch's MPS message (macOS builds only), as learners report it
    "TypeError: Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
CUBLAS_WARNING = (
    "UserWarning: Attempting to run cuBLAS, but there was no current CUDA context! Attempting to set the "
    "primary context... (Triggered internally at /pytorch/aten/src/ATen/cuda/CublasHandlePool.cpp:180.)"
)

FOREACH_AS_PASTED = (  # as learners paste it (pytorch/pytorch#127197); later releases reword its end
    "RuntimeError: Tensors of the same index must be on the same device and the same dtype except `step` tensors "
    "that can be CPU and float32 notwithstanding"
)

# (entry, a real message, the fragments of it the entry's patterns rely on, which builds hold them).
# Rewording the fragments must stop the match, and each fragment must still be in the installed torch.
RELIED_ON = [
    ("same-device", recorded("same_device_matmul"), ["Expected all tensors to be on the same device"], "any"),
    ("optimizer-foreach-device", FOREACH_AS_PASTED, ["Tensors of the same index must be on the same device"], "any"),
    (
        "numpy-cuda",
        recorded("numpy_cuda"),
        ["device type tensor to numpy", "copy the tensor to host memory first"],
        "any",
    ),
    ("input-weight-type", recorded("conv_cuda_input_cpu_weight"), ["and weight type"], "any"),
    ("input-weight-type", recorded("conv_half_input"), ["bias type"], "any"),
    ("invalid-device-string", recorded("bad_string"), ["device type at start of device string"], "any"),
    ("invalid-device-string", recorded("bad_string2"), ["Invalid device string"], "any"),
    (
        "fork-reinit",
        recorded("fork_reinit"),
        ["Cannot re-initialize CUDA in forked subprocess", "you must use the 'spawn' start method"],
        "any",
    ),
    (
        "ddp-unused-parameters",
        recorded("ddp_unused"),
        [
            "Expected to have finished reduction in the prior iteration",
            "parameters that were not used in producing loss",
            "did not receive grad for rank",
        ],
        "any",
    ),
    (
        "not-compiled-with-cuda",
        f"AssertionError: {simulate.NOT_COMPILED}",
        ["Torch not compiled with CUDA enabled"],
        "any",
    ),
    (
        "mp-spawn-notebook",
        "ProcessExitedException: process 1 terminated with exit code 1",
        ["terminated with exit code"],
        "any",
    ),
    (
        "dataloader-worker-died",
        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly",
        ["DataLoader worker (pid(s) ", "exited unexpectedly"],
        "any",
    ),
    (
        "shm-bus-error",
        "RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
        ["is killed by signal", "workers are out of shared memory"],
        "any",
    ),
    (
        "nccl-not-built",
        "RuntimeError: Distributed package doesn't have NCCL built in",
        ["Distributed package doesn't have NCCL"],
        "any",
    ),
    (
        "port-in-use",
        # torch's part of the message (the rest, "address already in use", is the operating system's)
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE",
        ["failed to listen on any local network address"],
        "any",
    ),
    (
        "nccl-no-gpu",
        "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
        ["ProcessGroupNCCL is only supported with GPUs"],
        "cuda",
    ),
    (
        "nccl-watchdog-timeout",
        "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        ["Watchdog caught collective operation timeout", "milliseconds before timing out"],
        "cuda",
    ),
    (
        "mps-oom",
        "RuntimeError: MPS backend out of memory (MPS allocated: 2.44 GB, other allocations: 4.34 GB, max allowed: "
        "6.77 GB). Tried to allocate 10.58 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable "
        "upper limit for memory allocations (may cause system failure).",
        ["MPS backend out of memory", "to disable upper limit for memory allocations"],
        "mps",
    ),
    (
        "mps-not-implemented",
        "NotImplementedError: The operator 'aten::_slow_conv2d_forward' is not currently implemented for the MPS "
        "device. As a temporary fix, you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use "
        "the CPU as a fallback for this op. WARNING: this will be slower than running natively on MPS.",
        ["is not currently implemented for the MPS device", "to use the CPU as a fallback"],
        "mps",
    ),
    (
        "mps-placeholder",
        "RuntimeError: Placeholder storage has not been allocated on MPS device!",
        ["Placeholder storage has not been allocated on MPS device"],
        "mps",
    ),
    ("invalid-device-ordinal", recorded("invalid_ordinal"), ["invalid device ordinal"], "cuda"),
    ("device-side-assert", recorded("device_assert"), ["device-side assert triggered", "cudaErrorAssert"], "cuda"),
    (
        "no-kernel-image",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        ["no kernel image is available for execution on the device"],
        "cuda",
    ),
    (
        "cuda-oom",
        recorded("oom"),
        [
            "OutOfMemoryError",
            "CUDA out of memory",
            "has a total capacity of",
            "reserved by PyTorch but unallocated",
            "to avoid fragmentation",
        ],
        "cuda",
    ),
    ("no-cuda-gpus", recorded("cvd_missing"), ["No CUDA GPUs are available"], "cuda"),
    (
        "no-nvidia-driver",
        f"RuntimeError: {simulate.NO_DRIVER}",
        ["Found no NVIDIA driver on your system", "Please check that you have an NVIDIA GPU"],
        "cuda",
    ),
    ("driver-too-old", f"RuntimeError: {simulate.DRIVER_TOO_OLD}", ["NVIDIA driver on your system is too old"], "cuda"),
    ("driver-too-old", DRIVER_INSUFFICIENT, ["CUDA driver version is insufficient for CUDA runtime version"], "cuda"),
    ("cuda-cannot-start", f"RuntimeError: {simulate.UNKNOWN_ERROR}", ["CUDA unknown error"], "cuda"),
    ("cuda-cannot-start", f"RuntimeError: {simulate.INIT_FAILED}", ["CUDA driver initialization failed"], "cuda"),
    (
        "cublas-context-warning",
        CUBLAS_WARNING,
        ["Attempting to run cuBLAS, but there was no current CUDA context"],
        "cuda",
    ),
    (
        "cudnn-not-initialized",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
        ["CUDNN_STATUS_NOT_INITIALIZED"],
        "cuda",
    ),
    (
        "cublas-execution-failed",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, "
        "k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
        ["CUBLAS_STATUS_EXECUTION_FAILED"],
        "cuda",
    ),
    (
        "nccl-system-error",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
        ":1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
        ["unhandled system error"],
        "cuda",
    ),
    (
        "mps-float64",
        MPS_FLOAT64,
        ["Cannot convert a MPS Tensor to float64", "MPS framework doesn't support float64"],
        "mps",
    ),
]


class InstalledTorch:
    """Search the installed torch's Python files and shared libraries (and the CUDA runtime next to them)."""

    def __init__(self) -> None:
        root = Path(torch.__file__).parent
        self.python = b"\0".join(p.read_bytes() for p in root.rglob("*.py"))
        libs = [*root.glob("lib/*.so*"), *root.glob("lib/*.dylib"), *root.glob("lib/*.dll")]
        libs += list(root.parent.glob("nvidia/**/libcudart.so*"))  # CUDA's own error strings
        libs += list(root.parent.glob("nvidia/**/libcudnn_graph.so*"))  # cuDNN's status names
        libs += list(root.parent.glob("nvidia/**/libnccl.so*"))  # NCCL's error strings
        self.libs = sorted(libs, key=lambda p: p.stat().st_size)  # small first: most hits are there
        self.found: dict[str, str | None] = {}

    def where(self, fragment: str) -> str | None:
        if fragment not in self.found:
            self.found[fragment] = self._search(fragment.encode())
        return self.found[fragment]

    def _search(self, needle: bytes) -> str | None:
        if needle in self.python:
            return "torch's Python files"
        for path in self.libs:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data.find(needle) != -1:
                    return path.name
        return None


@pytest.fixture(scope="session")
def installed_torch() -> InstalledTorch:
    return InstalledTorch()


def _built_for(needs: str) -> bool:
    return {"any": True, "cuda": torch.version.cuda is not None, "mps": torch.backends.mps.is_built()}[needs]


@pytest.mark.parametrize("case", RELIED_ON, ids=[f"{k}:{f[0][:30]}" for k, _, f, _ in RELIED_ON])
def test_patterns_rely_on_text_that_torch_still_has(case, installed_torch):
    key, message, fragments, needs = case
    assert match(message) is ENTRIES[key], message
    reworded = message
    for fragment in fragments:
        assert fragment in message
        reworded = reworded.replace(fragment, "<reworded>")
    assert match(reworded) is not ENTRIES[key], f"{key} still matches without {fragments}"
    if not _built_for(needs):
        pytest.skip(f"this torch is not a {needs} build: the text is not in it")
    for fragment in fragments:
        assert installed_torch.where(fragment), f"{fragment!r} is no longer in torch {torch.__version__}"


def test_mps_float64_wordings():
    for text in (MPS_FLOAT64, "TypeError: Trying to convert Double to the MPS backend but it has no mapping for it."):
        assert match(text) is ENTRIES["mps-float64"]


WHOLE_MODEL = r"""
import io
import torch
from helpers.clinic.known_errors import exception_text


class Tudui(torch.nn.Module):  # the saving script's own class: pickled as __main__.Tudui
    pass


buffer = io.BytesIO()
torch.save(Tudui(), buffer)
buffer.seek(0)
del Tudui  # a script that loads the file without defining the class
try:
    torch.load(buffer, weights_only=False)
except Exception as err:
    print(exception_text(err).replace(chr(10), " "))
"""


def test_a_whole_model_loaded_where_its_class_is_not():
    text = run_python(WHOLE_MODEL, timeout=240).strip().splitlines()[-1]
    assert "Can't get attribute 'Tudui'" in text and match(text) is ENTRIES["pickled-model-main"], text


def test_spawn_without_the_main_guard_as_python_words_it():
    """Python's own text (multiprocessing.spawn), which the DataLoader's workers meet under spawn."""
    source = inspect.getsource(multiprocessing.spawn._check_not_importing_main)
    message = re.search(r"'{3}(.*?)'{3}", source, re.S).group(1)
    assert match(f"RuntimeError: {message}") is ENTRIES["windows-spawn-main"], message
    assert "__main__" in render(ENTRIES["windows-spawn-main"])


def test_every_entry_is_checked_against_real_text():
    raised_keys = {key for _, key in RAISED_HERE.values()} | {
        "state-dict-module-prefix",
        "state-dict-compile-prefix",  # test_wrapper_prefixes_as_torch_writes_them
        "dataloader-worker-notebook",  # test_children_that_cannot_import_a_notebook_definition
        "windows-spawn-main",  # test_spawn_without_the_main_guard_as_python_words_it
        "pickled-model-main",  # test_a_whole_model_loaded_where_its_class_is_not
    }
    checked = raised_keys | {key for key, *_ in RELIED_ON} | set(filter(None, FIXTURE_KEYS.values()))
    assert checked >= set(ENTRIES), f"no real message checks {set(ENTRIES) - checked}"


# --- order, chains, notes ------------------------------------------------------------------------------


def test_the_more_specific_entry_wins():
    spawn = "ProcessExitedException: process 0 terminated with exit code 1\nCan't get attribute 'hello' on <module '__main__' (built-in)>"  # noqa: E501
    assert match(spawn).key == "mp-spawn-notebook"
    in_worker = "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n" + recorded("fork_reinit")
    assert match(in_worker).key == "fork-reinit"
    both = "UserWarning: Attempting to run cuBLAS, but there was no current CUDA context!\n" + recorded("oom")
    assert match(both).key == "cuda-oom"  # the harmless warning never hides the real error


def test_the_error_named_first_wins_over_a_hint_after_it():
    """A program's hint under the real error names another one: the error the paste names first is explained."""
    cpu = exception_text(raised(lambda: torch.empty(2**50)))
    hint = "If you encounter CUDA out of memory, try to set --tile with a smaller number."
    assert match(cpu) is ENTRIES["cpu-oom"] and match(hint) is ENTRIES["cuda-oom"]
    assert match(f"{cpu}\n{hint}") is ENTRIES["cpu-oom"]
    assert match(f"{recorded('oom')}\n{cpu}") is ENTRIES["cuda-oom"]


def test_the_optimizers_foreach_wording_is_not_the_same_device_entrys():
    """Both routes' refusals, as this torch words them: the foreach one never gets the same-device note."""
    foreach = exception_text(raised(_adam_state_elsewhere(foreach=True)))
    one_at_a_time = exception_text(raised(_adam_state_elsewhere(foreach=False)))
    for text in (foreach, FOREACH_AS_PASTED):
        assert match(text) is ENTRIES["optimizer-foreach-device"], text  # its wording also holds the same-device core
    assert match(one_at_a_time) is ENTRIES["same-device"], one_at_a_time
    assert not ENTRIES["optimizer-foreach-device"].matches(one_at_a_time)
    order = [entry.key for entry in KNOWN_ERRORS]
    assert order.index("optimizer-foreach-device") < order.index("same-device")
    note = render(ENTRIES["optimizer-foreach-device"])
    assert "load_state_dict" in note and "notebook 09" in note


def test_colour_codes_do_not_hide_a_message():
    assert match("\x1b[0;31mRuntimeError\x1b[0m: \x1b[1mInvalid device string: 'gpu0'\x1b[0m").key == (
        "invalid-device-string"
    )


def test_the_exception_chain_and_notes_are_read():
    inner = raised(_meta_add)
    try:
        raise ValueError("training step 3 failed") from inner
    except ValueError as outer:
        assert key_of(outer) == "same-device"
    try:
        try:
            _meta_add()
        except RuntimeError:
            raise KeyError("during handling")  # noqa: B904 - the implicit __context__ is the point
    except KeyError as outer:
        assert key_of(outer) == "same-device"
    noted = RuntimeError("worker failed")
    noted.add_note(recorded("numpy_cuda"))
    assert key_of(noted) == "numpy-cuda"
    cycle = ValueError("a")
    cycle.__context__ = ValueError("b")
    cycle.__context__.__context__ = cycle
    assert key_of(cycle) is None


# --- (c) unknown errors ------------------------------------------------------------------------------------


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str")


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("x"),
        KeyError("cuda"),
        RuntimeError("something went wrong on cuda:0"),
        IndexError("list index out of range"),
        TypeError("unsupported operand type(s) for +: 'Tensor' and 'str'"),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError('Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "weight".'),
        _Unprintable(),
        KeyboardInterrupt(),
    ],
    ids=repr,
)
def test_unknown_errors_match_nothing(exc):
    assert explain_exception(exc) is None


def test_unknown_texts_match_nothing():
    assert match("") is None
    assert match(recorded("mps_float64_on_cuda")) is None
    assert match("RuntimeError: shape '[2, 3]' is invalid for input of size 5") is None


# --- the note -----------------------------------------------------------------------------------------


def test_render_is_a_short_plain_note():
    for entry in KNOWN_ERRORS:
        note = render(entry)
        assert note.startswith("[device error clinic] ")
        for part in ("What this means: ", "How to fix it: ", "Learn more: "):
            assert part in note
        assert entry.fix.split()[-1] in note and entry.lesson.split()[-1] in note  # nothing cut off
        assert all(len(line) <= 100 or " " not in line.strip() for line in note.splitlines()[1:])
        assert note.isascii() and "\x1b" not in note


def test_explain_text_cli(capsys):
    assert explain_text_cli(recorded("numpy_cuda")) == 0
    out = capsys.readouterr().out
    assert "t.detach().cpu().numpy()" in out and "notebook 02" in out
    assert explain_text_cli("ValueError: x") == 1
    assert capsys.readouterr().out.strip() == (
        f"Not a known device error; `{known_errors.DOCTOR}` checks this machine."
    )


# --- (d) the lessons ----------------------------------------------------------------------------------------

CLINIC = "09"  # the error clinic notebook
COVERAGE = {  # entry -> (notebook, text the notebook holds); the section is the lesson's own "section N"
    "device-side-assert": ("09", "device-side assert triggered"),
    "label-out-of-range": ("09", "out of bounds"),
    "no-kernel-image": ("09", "no kernel image is available"),
    "fork-reinit": ("06", "Cannot re-initialize CUDA in forked subprocess"),
    "invalid-device-ordinal": ("00", "renumbered from 0"),
    "cuda-oom": ("07", "CUDA out of memory"),
    "mps-oom": ("07", "MPS backend out of memory"),
    "cpu-oom": ("07", "DefaultCPUAllocator: can't allocate memory"),
    "mps-float64": ("00", "MPS has no float64"),
    "mp-spawn-notebook": ("08", "terminated with exit code"),
    "dataloader-worker-notebook": ("06", "Can't get attribute"),
    "dataloader-worker-died": ("06", "exited unexpectedly"),
    "ddp-unused-parameters": ("08", "Expected to have finished reduction in the prior iteration"),
    "nccl-watchdog-timeout": ("08", "Watchdog caught collective operation timeout"),
    "cuda-deserialize": ("05", "Attempting to deserialize object on a CUDA device"),
    "weights-only": ("05", "Weights only load failed"),
    "state-dict-module-prefix": ("08", "consume_prefix_in_state_dict_if_present"),
    "state-dict-compile-prefix": ("06", "_orig_mod."),
    "not-compiled-with-cuda": ("00", "Torch not compiled with CUDA enabled"),
    "no-nvidia-driver": ("00", "Found no NVIDIA driver"),
    "driver-too-old": ("00", "driver on your system is too old"),
    "cuda-cannot-start": ("00", "CUDA unknown error"),
    "no-cuda-gpus": ("00", "No CUDA GPUs are available"),
    "invalid-device-string": ("03", "device type at start of device string"),
    "numpy-cuda": ("02", "device type tensor to numpy"),
    "input-weight-type": ("04", "and weight type"),
    "dtype-mismatch": ("04", "expected scalar type Float but found Double"),
    "same-device": ("03", "Expected all tensors to be on the same device"),
    "optimizer-foreach-device": ("09", "Tensors of the same index must be on the same device"),
    "mps-placeholder": ("09", "Placeholder storage has not been allocated on MPS device"),
    "cublas-context-warning": ("04", "Attempting to run cuBLAS"),
    "numpy-requires-grad": ("02", "Can't call numpy() on Tensor that requires grad"),
    "process-group-not-initialized": ("08", "Default process group has not been initialized"),
    "nccl-system-error": ("08", "unhandled system error"),
    "worker-pickle-local": ("09", "Can't pickle local object"),
}


def _sections(path: Path) -> dict[str, str]:
    """Each "## N." section of a notebook: its cells' sources and text outputs."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    sections, current = {}, None
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        heading = re.search(r"^## (\d+)\.", source, re.M) if cell["cell_type"] == "markdown" else None
        if heading:
            current = heading.group(1)
        outputs = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
        sections[current] = sections.get(current, "") + source + "\n" + outputs + "\n"
    return sections


def _notebook(number: str) -> Path | None:
    return next((p for p in course.lessons() if p.name.startswith(f"{number}_")), None)


def test_every_lesson_names_a_notebook_that_exists():
    for entry in KNOWN_ERRORS:
        numbers = re.findall(r"notebook (\d\d)", entry.lesson)
        assert numbers, entry.key
        for number in numbers:
            if number == CLINIC and _notebook(number) is None:
                assert f"notebook {CLINIC} (the error clinic)" in entry.lesson  # not written yet
                continue
            assert _notebook(number) is not None, f"{entry.key}: notebook {number} does not exist"


@pytest.mark.parametrize("key", COVERAGE)
def test_the_lesson_named_teaches_the_error(key):
    number, text = COVERAGE[key]
    lesson = next(part for part in ENTRIES[key].lesson.split(";") if f"notebook {number}" in part)
    sections = _sections(_notebook(number))
    named = re.search(r"sections? (\d+)", lesson)
    where = sections.get(named.group(1), "") if named else "".join(sections.values())
    assert text in where, f"notebook {number} ({lesson.strip()}) does not show {text!r}"
    if named:
        assert named.group(1) in sections, f"notebook {number} has no section {named.group(1)}"


def test_errors_no_earlier_notebook_teaches_are_the_clinics():
    for key in set(ENTRIES) - set(COVERAGE):
        entry = ENTRIES[key]
        assert not entry.shown or entry.lesson.startswith(f"notebook {CLINIC} (the error clinic)"), key


@pytest.mark.parametrize("key", [e.key for e in KNOWN_ERRORS if not e.shown])
def test_an_error_no_lesson_shows_says_so_and_names_its_topics_lesson(key):
    """Explained here, not shown in a lesson: the learner still gets the fix, and no false pointer."""
    entry = ENTRIES[key]
    assert key not in COVERAGE, f"{key} is shown in a lesson: drop shown=False"
    note = render(entry)
    assert "no lesson shows" in " ".join(note.split())
    number, section = re.search(r"notebook (\d\d) .*section (\d+)", entry.lesson).groups()
    assert section in _sections(_notebook(number)), f"notebook {number} has no section {section}"


# --- (e) messages people pasted --------------------------------------------------------------------------


def _verdict(message: str) -> KnownError | None:
    """What both the clinic (an exception, read as the clinic reads it) and --explain (the text) say."""
    by_text = match(message)
    by_exception = explain_exception(RuntimeError(message))
    assert by_text is by_exception, message  # one matching function for both
    return by_text


def test_the_corpus_is_what_it_claims():
    in_scope, out_of_scope = CORPUS["in_scope"], CORPUS["out_of_scope"]
    assert len(in_scope) >= 60 and len(out_of_scope) >= 15
    for case in in_scope + out_of_scope:
        assert case["message"].strip() and re.match(r"https?://\S+$", case["source"]), case
        assert not re.search(r"/(?:home|Users)/\w+/", case["message"]), case["message"]  # anonymised
    assert {case["key"] for case in in_scope} <= set(ENTRIES)
    assert all(case["fix_word"] for case in in_scope)
    assert any(case.get("language") == "zh" for case in in_scope)
    versions = {case["torch"].split(".")[0] for case in in_scope if "torch" in case}
    assert {"0", "1", "2"} <= versions, versions  # torch 0.4 to current


def test_pasted_messages_get_the_right_explanation():
    cases = CORPUS["in_scope"]
    misses = []
    for case in cases:
        entry = _verdict(case["message"])
        if entry is None or entry.key != case["key"] or case["fix_word"] not in render(entry):
            misses.append(f"{case['key']} got {entry and entry.key}: {case['message'][:150]!r} ({case['source']})")
    print("\n".join(["misses:", *misses]) if misses else "no misses")
    assert len(misses) <= 0.05 * len(cases), "\n".join(misses)


def test_pasted_messages_that_are_not_device_errors_are_not_claimed():
    claimed = [
        f"{entry.key}: {case['message'][:150]!r} ({case['source']})"
        for case in CORPUS["out_of_scope"]
        if (entry := _verdict(case["message"])) is not None
    ]
    print("\n".join(["claimed:", *claimed]) if claimed else "none claimed")
    assert not claimed, "\n".join(claimed)


# --- (f) pasted as people paste them --------------------------------------------------------------------------------


def _pasted(text: str) -> dict[str, str]:
    """What pasting does to a message, one way at a time."""
    lines = textwrap.wrap(text, 60, break_long_words=False, break_on_hyphens=False)
    return {
        "wrapped at 60 columns": "\n".join(lines),
        "typographic quotes (a blog)": text.replace("'", "\u2019").replace('"', "\u201d"),
        "HTML entities (a web page's source)": html.escape(text),
        "torchrun's rank prefix on each line": "\n".join(f"[rank1]: {line}" for line in lines),
        "pytest's E on each line": "\n".join(f"E       {line}" for line in lines),
        "colour codes": f"\x1b[0;31m{text}\x1b[0m",
        "full-width colons (a Chinese editor)": text.replace(": ", "\uff1a"),
        "Windows line ends and no-break spaces": text.replace("\n", "\r\n").replace(" ", "\u00a0", 3),
    }


PASTED_IN_SCOPE = [(case["message"], case["key"]) for case in CORPUS["in_scope"]] + [
    (recorded(name), key) for name, key in FIXTURE_KEYS.items() if key
]


@pytest.mark.parametrize("way", list(_pasted("x")))
def test_a_message_reads_the_same_however_it_was_pasted(way):
    wrong = []
    for message, key in PASTED_IN_SCOPE:
        if (entry := match(message)) is not None and entry.key == key:  # the corpus test counts the misses
            got = match(_pasted(message)[way])
            if got is not entry:
                wrong.append(f"{key} got {got and got.key}: {message[:100]!r}")
    claimed = [c["message"][:100] for c in CORPUS["out_of_scope"] if match(_pasted(c["message"])[way]) is not None]
    assert not wrong and not claimed, (wrong, claimed)


def _from(text: str, marker: str) -> str:
    """The part of a message a learner pasted, from ``marker`` on: the lines above it were cut off."""
    assert marker in text, (marker, text)
    return text[text.index(marker) :]


def test_a_message_pasted_without_its_first_lines():
    spawn_text = re.search(r"'{3}(.*?)'{3}", inspect.getsource(multiprocessing.spawn._check_not_importing_main), re.S)
    tails = {  # real messages, their first line(s) cut off
        "windows-spawn-main": _from(spawn_text.group(1), "This probably means"),
        "cuda-oom": _from(recorded("oom"), "GPU 0 has a total capacity"),
        "ddp-unused-parameters": _from(recorded("ddp_unused"), "Parameter indices which did not receive grad"),
        "cuda-deserialize": _from(_cpu_only_deserialize_message(), "If you are running on a CPU-only machine"),
        "fork-reinit": _from(recorded("fork_reinit"), "To use CUDA with multiprocessing"),
        "numpy-cuda": _from(recorded("numpy_cuda"), "Use Tensor.cpu()"),
        "no-nvidia-driver": _from(simulate.NO_DRIVER, "Please check that you have an NVIDIA GPU"),
    }
    for key, tail in tails.items():
        assert match(tail) is ENTRIES[key], tail


def test_a_state_dict_error_pasted_in_part():
    """The key lists of a real error, without the lines above them, or alone; the same cuts of an error that is
    not the prefix's doing claim nothing."""
    state = {"module.0.weight": torch.ones(2, 2), "module.0.bias": torch.ones(2)}
    message = f"RuntimeError: {raised(_into_plain(state))}"
    lines = message.splitlines()  # Error(s) in loading state_dict for ...: / Missing key(s) / Unexpected key(s)
    assert lines[0].startswith("RuntimeError: Error(s) in loading state_dict") and len(lines) == 3, lines
    keys_alone = ", ".join(re.findall(r'"[^"]+"', message))
    for part in ("\n".join(lines[1:]), lines[-1].strip(), keys_alone):
        assert match(part) is ENTRIES["state-dict-module-prefix"], part
    result = nn.Sequential(nn.Linear(2, 2)).load_state_dict(state, strict=False)  # printed, then pasted
    assert match(repr(result)) is ENTRIES["state-dict-module-prefix"], repr(result)

    other = f"RuntimeError: {raised(_another_architecture_under_data_parallel)}"
    other_lines = other.splitlines()
    for part in (other, "\n".join(other_lines[1:]), ", ".join(re.findall(r'"[^"]+"', other))):
        assert match(part) is None, part
    # torch listed no missing keys: the checkpoint holds more than the model, not the prefix's doing
    assert match(f"{other_lines[0]}\n{other_lines[-1]}") is None
    extra = 'Unexpected key(s) in state_dict: "module.bn1.num_batches_tracked", "module.bn2.num_batches_tracked".'
    assert match(extra) is None  # a newer torch's buffers, not a prefix


def _with_words_inserted(fragment: str) -> str:
    parts = fragment.split(" ")
    middle = len(parts) // 2
    return " ".join([*parts[:middle], "input", "two", *parts[middle:]])


@pytest.mark.parametrize("case", RELIED_ON, ids=[f"{k}:{f[0][:30]}" for k, _, f, _ in RELIED_ON])
def test_a_known_message_with_words_inserted(case):
    """A release, a device or a tensor type adds a word or two in the middle of a wording the table knows: two
    words inserted in each fragment the match relies on (a one-word fragment reworded) keep the match."""
    key, message, fragments, _ = case
    if not any(" " in fragment.strip() for fragment in fragments):
        pytest.skip("no fragment of several words")
    for fragment in fragments:
        message = message.replace(fragment, _with_words_inserted(fragment) if " " in fragment.strip() else "<reworded>")
    assert match(message) is ENTRIES[key], message


OLDER_WORDINGS = [  # (entry, the message as an older torch raised it, the releases)
    (
        "dataloader-worker-died",
        "RuntimeError: DataLoader worker (pid 17406) exited unexpectedly with exit code 1. Details are lost due to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
        "torch 1.0 to 1.4",
    ),
    (
        "same-device",
        "RuntimeError: Expected tensor to have CPU Backend, but got tensor with CUDA Backend (while checking "
        "arguments for cudnn_ctc_loss)",
        "torch 1.0 to 1.4",
    ),
    (
        "same-device",
        "RuntimeError: Expect tensor to have CPU backend, but got tensor with CUDA Backend (while checking arguments "
        "for addmm)",
        "torch 1.x, a CPU-only kernel",
    ),
    ("same-device", "RuntimeError: expected device cuda:0 but got device cpu", "torch 1.5 to 1.7"),
    (
        "same-device",
        "RuntimeError: arguments are located on different GPUs at "
        "/pytorch/aten/src/THC/generic/THCTensorMathPointwise.cu:233",
        "torch 0.3, 0.4",
    ),
    (
        "cpu-oom",
        "RuntimeError: $ Torch: not enough memory: you tried to allocate 21GB. Buy new RAM! at "
        "/pytorch/aten/src/TH/THGeneral.cpp:201",
        "torch 0.4, 1.0",
    ),
    (
        "cuda-cannot-start",
        "RuntimeError: cuda runtime error (30) : unknown error at /pytorch/aten/src/THC/THCGeneral.cpp:51",
        "torch 0.4 to 1.x",
    ),
    (
        "cuda-oom",
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=265 error=2 : out of memory",
        "torch 0.4 to 1.x",
    ),
    (
        "label-out-of-range",
        "RuntimeError: Assertion `cur_target >= 0 && cur_target < n_classes' failed.  at "
        "/pytorch/aten/src/THNN/generic/ClassNLLCriterion.c:93",
        "torch 0.4 to 1.x, on the CPU",
    ),
    ("dtype-mismatch", "RuntimeError: Found dtype Double but expected Float", "a loss's backward, torch 1.x to 2.x"),
    (
        "cpu-oom",
        "RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0",
        "torch 1.0, 1.1",
    ),
    ("state-dict-module-prefix", "KeyError: 'unexpected key \"module.conv1.weight\" in state_dict'", "torch 0.2, 0.3"),
]
OLDER_NOT_DEVICE_ERRORS = [  # the same older shapes, about dtypes or one device: not these entries' business
    "RuntimeError: expected device cuda:0 and dtype Float but got device cuda:0 and dtype Long",
    "RuntimeError: Found dtype Long but expected Float",
    "RuntimeError: cuda runtime error (77) : an illegal memory access was encountered at "
    "/pytorch/aten/src/THC/THCCachingHostAllocator.cpp:265",
]


@pytest.mark.parametrize("case", OLDER_WORDINGS, ids=[f"{k}:{r}" for k, _, r in OLDER_WORDINGS])
def test_older_wordings_of_errors_the_table_knows(case):
    key, message, _ = case
    assert match(message) is ENTRIES[key], message


@pytest.mark.parametrize("message", OLDER_NOT_DEVICE_ERRORS)
def test_older_wordings_that_are_not_device_errors(message):
    assert match(message) is None


NOTEBOOK_WORDS = re.compile(r"\bnotebook|\bJupyter\b|\bkernel\b(?! image)|\ba cell\b")
SCRIPT_WORDS = re.compile(r"\bscript\b|\bprocess\b|\bPython\b")


def test_notes_say_what_to_do_from_a_script_and_from_a_notebook():
    """A pasted message may come from either: a note that speaks of a notebook also says what a script does."""
    for entry in KNOWN_ERRORS:
        text = f"{entry.meaning} {entry.fix}".replace("GPU kernel", "").replace("CPU kernels", "")
        if NOTEBOOK_WORDS.search(text):
            assert SCRIPT_WORDS.search(text), f"{entry.key} speaks of a notebook only"


SCRIPT = r"""
import torch
from torch.utils.data import DataLoader, Dataset
from helpers.lab.child import capture_child_stderr
from helpers.clinic.known_errors import match, render

if __name__ == "__main__":

    class Squares(Dataset):  # under the main guard: a worker that imports this script never defines it
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.tensor(i * i)

    with capture_child_stderr() as children:
        try:
            list(DataLoader(Squares(), batch_size=2, num_workers=1, multiprocessing_context="spawn"))
        except Exception:
            pass
    entry = match(children.text)
    print(children.text[-300:].replace(chr(10), " "))
    print(entry and entry.key)
    print(entry and render(entry).replace(chr(10), " "))
"""


def test_a_worker_error_from_a_script_gets_a_note_for_scripts(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=True)
    text, key, note = done.stdout.strip().splitlines()[-3:]
    assert "Can't get attribute 'Squares'" in text and key == "dataloader-worker-notebook", text
    assert "From a script" in note and "__main__" in note, note


# --- (g) the universe: PyTorch's own device messages, family by family ----------------------------------------------

TORCH_MESSAGES = tomllib.loads((Path(__file__).parent / "fixtures" / "torch_device_messages.toml").read_text("utf-8"))


def _as_raised(message: dict) -> str:
    """The message as a learner sees it: "TypeName: text" (a warning or a line of stderr as it is printed)."""
    if message["raised"] == "stderr":
        return message["text"]
    return f"{message['raised'].rsplit('.', 1)[-1]}: {message['text']}"


def catalogue_coverage() -> dict[str, tuple[int, int, list[str]]]:
    """family -> (messages, recognised as that family, what the others got); out-of-scope: recognised = claimed."""
    coverage: dict[str, tuple[int, int, list[str]]] = {}
    for message in TORCH_MESSAGES["message"]:
        family = message["family"]
        entry = match(_as_raised(message))
        got = entry.key if entry else None
        right = got == family if family in ENTRIES else got is not None
        total, hits, others = coverage.get(family, (0, 0, []))
        wrong = [] if (right if family in ENTRIES else not right) else [f"{got}: {message['text'][:90]!r}"]
        coverage[family] = (total + 1, hits + right, others + wrong)
    return coverage


def test_the_catalogue_of_torchs_device_messages():
    """Every message of an explained family recognised as that family; none of the others claimed. With -s it prints
    the coverage, family by family (BENCHMARKS.md quotes it)."""
    out_of_scope = TORCH_MESSAGES["out_of_scope"]
    messages = TORCH_MESSAGES["message"]
    for message in messages:
        assert message["family"] in ENTRIES or message["family"] in out_of_scope, message
        assert message["source"] and re.fullmatch(r"v\d+\.\d+\.\d+", message["release"]), message
    assert set(ENTRIES) <= {m["family"] for m in messages}, set(ENTRIES) - {m["family"] for m in messages}
    assert set(out_of_scope) <= {m["family"] for m in messages}, "an out-of-scope family without a message"
    coverage = catalogue_coverage()
    lines = [f"{'family':32} {'scope':12} {'messages':>8} {'recognised':>10}"]
    for family, (total, hits, _) in sorted(coverage.items(), key=lambda kv: (kv[0] not in ENTRIES, kv[0])):
        scope = "explained" if family in ENTRIES else "out of scope"
        lines.append(f"{family:32} {scope:12} {total:8} {hits if family in ENTRIES else f'{hits} claimed':>10}")
    explained = [c for f, c in coverage.items() if f in ENTRIES]
    others = [c for f, c in coverage.items() if f not in ENTRIES]
    lines.append(
        f"explained families: {sum(c[1] for c in explained)}/{sum(c[0] for c in explained)} messages recognised, "
        f"{len(explained)} families; out of scope: {sum(c[1] for c in others)}/{sum(c[0] for c in others)} claimed, "
        f"{len(others)} families"
    )
    print("\n".join(lines))
    wrong = {family: c[2] for family, c in coverage.items() if c[2]}
    assert not wrong, wrong


# --- (h) pasted in pieces: a name glued on, a message cut in two, several errors, a script's own processes ------

GLUED = [  # (entry, a real message as it was glued to a name or to Chinese text)
    ("cuda-oom", "RuntimeErrorCUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)"),
    (
        "same-device",
        "RuntimeErrorExpected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    ),
    (
        "cuda-deserialize",
        "尝试只用CPU时报错Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False.",
    ),
    ("dataloader-worker-died", "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly请问怎么解决"),
    ("numpy-requires-grad", "5_Deep_Q_Network中RuntimeError: Can't call numpy() on Tensor that requires grad."),
    ("cudnn-not-initialized", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED[Usage]"),
]


@pytest.mark.parametrize("case", GLUED, ids=[key for key, _ in GLUED])
def test_a_message_glued_to_a_name_or_to_chinese_text(case):
    key, message = case
    assert match(message) is ENTRIES[key], message


def test_a_message_cut_to_its_second_half():
    spawn_text = re.search(r"'{3}(.*?)'{3}", inspect.getsource(multiprocessing.spawn._check_not_importing_main), re.S)
    halves = {
        "fork-reinit": [
            _from(recorded("fork_reinit"), "you must use"),
            _from(recorded("fork_reinit"), "re-initialize"),
        ],
        "windows-spawn-main": [_from(spawn_text.group(1), "and you have forgotten")],
    }
    for key, tails in halves.items():
        for tail in tails:
            assert match(tail) is ENTRIES[key], tail


def test_several_errors_in_one_paste_get_the_first_named():
    cudnn_then_assert = (
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED\nterminate called after throwing an instance of "
        "'c10::Error'\n  what():  CUDA error: device-side assert triggered"
    )
    assert match(cudnn_then_assert) is ENTRIES["cudnn-not-initialized"]
    pickle_then_eof = (
        "AttributeError: Can't pickle local object 'Worker.do.<locals>.job'\n"
        'File "spawn.py", line 116, in _main\n    self = pickle.load(from_parent)\nEOFError: Ran out of input'
    )
    assert match(pickle_then_eof) is ENTRIES["worker-pickle-local"]
    assert match(f"{recorded('oom')}\n{FOREACH_AS_PASTED}") is ENTRIES["cuda-oom"]


def test_a_fork_in_a_script_of_its_own_gets_the_multiprocessing_fix():
    """Not only the DataLoader's multiprocessing_context: a script's own Process or Pool needs set_start_method."""
    own_process = (
        "Process Process-1:\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.9/multiprocessing/process.py", line 315, in _bootstrap\n    self.run()\n'
        '  File "infer.py", line 9, in get_model\n    model = model.cuda()\n' + recorded("fork_reinit")
    )
    note = " ".join(render(match(own_process)).split())
    assert match(own_process) is ENTRIES["fork-reinit"]
    assert "set_start_method('spawn')" in note and "multiprocessing.Process or Pool" in note
    assert 'multiprocessing_context="spawn"' in note  # the DataLoader's own fix stays
