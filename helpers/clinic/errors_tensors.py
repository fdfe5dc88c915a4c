"""The known device errors of a machine and its tensors (part 3 of the table): CUDA that cannot start, device
strings, tensors on different devices or in different dtypes, NumPy conversions, the harmless cuBLAS warning.
"""

from __future__ import annotations

from helpers.clinic.error_entry import FLOATS, TYPE, KnownError, words
from helpers.course.i18n import tr_lazy

TENSOR_ERRORS: tuple[KnownError, ...] = (
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
        key="numpy-requires-grad",
        title=tr_lazy("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."),
        patterns=(words("Can't call numpy() on ... that requires grad"),),  # Tensor; torch 0.4: Variable
        meaning=tr_lazy(
            "The tensor takes part in autograd (requires_grad=True: weights, and anything computed from them, such "
            "as a model's output or a loss), and a NumPy array lives outside autograd, so PyTorch refuses the "
            "conversion, on any device. It is not a device error, but it meets the same line of code: plotting, "
            "logging or metrics on a model's output."
        ),
        fix=tr_lazy(
            "Detach first: t.detach().cpu().numpy() works for any tensor on any device (.detach() takes it out of "
            "the autograd graph, .cpu() copies it to the memory NumPy reads); t.numpy(force=True) does the same in one "
            "call; for one number, t.item(). Code that only evaluates can run under torch.no_grad(), where outputs do "
            "not require grad."
        ),
        lesson=tr_lazy("notebook 02 (GPU to CPU), section 4"),
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
        lesson=tr_lazy("notebook 03 (device objects), section 8; notebook 09 (the error clinic), section 2"),
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
