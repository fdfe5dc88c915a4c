"""The doctor's wheel and architecture arithmetic: which torchvision pairs with a torch, which wheel index a
build came from, the pip lines that repair a pairing or switch builds, whether a driver is too old for a CUDA build
(and which older wheel it runs), and whether a build has kernels for a GPU's compute capability.

Pure functions of version strings and :class:`~helpers.clinic.doctor_facts.Facts`.
"""

from __future__ import annotations

import re

from helpers.clinic.doctor_facts import Facts, Gpu, _torch_said
from helpers.course.config import DEVICE_ENV
from helpers.course.i18n import tr, tr_lazy

SELECTOR = "https://pytorch.org/get-started/locally/"
WHEEL_INDEX = "https://download.pytorch.org/whl/"
INSTALL = 'pip install -e ".[lab]"'  # the learner's install (README's quick start)
COLAB_GPU = tr_lazy("in Colab: Runtime > Change runtime type > GPU, then run the notebook again")
# What a CUDA build installs beyond the CPU build on Linux, in GB: torch 2.14.1+cu130 with its NVIDIA libraries and
# Triton takes 5.1 GB, the CPU wheel of torch 2.14.1 1.1 GB (`du -sb` of site-packages; the wheel's file sizes).
CUDA_BUILD_EXTRA_GB = 4


def _release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of "2.14.1+cu130", or None."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _local_tag(version: str | None) -> str | None:
    """The wheel variant in "2.14.1+cu130": "cu130" ("cpu", "rocm6.4", ...), or None."""
    return version.partition("+")[2] or None if version else None


def matching_torchvision(torch_version: str) -> tuple[int, int] | None:
    """The torchvision release that pairs with a torch release: 2.6 -> 0.21, 2.14 -> 0.29 (None: unknown)."""
    release = _release(torch_version)
    if release is None:
        return None
    major, minor = release
    if major == 2:
        return (0, minor + 15)
    if major == 1:
        return (0, minor + 1)
    return None


def _index_hint(torch_version: str | None) -> str:
    """The wheel index the installed torch came from, as a pip option ('' for a plain PyPI wheel)."""
    tag = _local_tag(torch_version)
    return f" --index-url {WHEEL_INDEX}{tag}" if tag else ""


def torchvision_fix(torch_version: str, installed: bool) -> str:
    """The pip line that puts the torchvision paired with this torch, from torch's own wheel index, in place.

    A torchvision of the right version but another build (a CUDA one beside a CPU torch: "operator
    torchvision::nms does not exist") already satisfies a plain `pip install "torchvision==0.28.*"`, so pip
    would change nothing: an installed one is replaced with --force-reinstall, and --no-deps leaves torch (which
    is fine) and the rest alone.
    """
    want = matching_torchvision(torch_version)
    if want is None:
        pin = "torch torchvision"  # an unknown torch release: let pip pair them
        return tr("reinstall both together: {command}", command=f"`pip install {pin}{_index_hint(torch_version)}`")
    pin = f'"torchvision=={want[0]}.{want[1]}.*"{_index_hint(torch_version)}'
    if not installed:
        return tr("install the torchvision that pairs with this torch: {command}", command=f"`pip install {pin}`")
    return tr(
        "replace it with the torchvision built for this torch (pip keeps one of the same version whatever its "
        "build, hence --force-reinstall): {command}",
        command=f"`pip install --force-reinstall --no-deps {pin}`",
    )


def cpu_build_switch(torch_version: str | None) -> str:
    """The commands that replace a CUDA build of torch (and the NVIDIA libraries and Triton it brought) by the
    CPU build of the same release."""
    want = matching_torchvision(torch_version or "")
    release = _release(torch_version)
    pins = f'"torch=={release[0]}.{release[1]}.*" "torchvision=={want[0]}.{want[1]}.*"' if want else "torch torchvision"
    return tr(
        "`{uninstall}`, then `{install}`",
        uninstall="pip uninstall -y torch torchvision triton $(pip freeze | grep -o '^nvidia-[^=]*')",
        install=f"pip install {pins} --index-url {WHEEL_INDEX}cpu",
    )


_TOO_OLD = re.compile(r"driver on your system is too old(?: \(found version (\d+)\))?")


def _driver_too_old(facts: Facts) -> tuple[bool, str | None]:
    """(whether the NVIDIA driver is too old for this CUDA build, the newest CUDA it supports if known).

    Known from torch's own error ("The NVIDIA driver on your system is too old (found version 12040)":
    12040 is CUDA 12.4) or from nvidia-smi's "CUDA Version" when it is older than the build's CUDA."""
    if not facts.cuda_build or facts.cuda_available:
        return False, None
    for text in _torch_said(facts):
        match = _TOO_OLD.search(text)
        if match:
            found = int(match.group(1)) if match.group(1) else None
            return True, f"{found // 1000}.{found % 1000 // 10}" if found else facts.driver_cuda
    older = _release(facts.driver_cuda) is not None and _release(facts.driver_cuda) < _release(facts.cuda_build)
    return older, facts.driver_cuda if older else None


def _older_cuda_wheel(facts: Facts, supports: str | None) -> str | None:
    """A pip command for a PyTorch wheel a driver supporting CUDA ``supports`` can run (None: none to offer).

    cu126 wheels exist for every torch release from 2.7 to 2.14 and a CUDA 12 driver runs any CUDA 12 build
    (CUDA's minor-version compatibility, with caveats); torch 2.7 is the last release with cu118 wheels."""
    release = _release(supports)
    if release is None or release >= (12, 0):
        tag, pins = "cu126", "torch torchvision"
    elif release >= (11, 0):
        tag, pins = "cu118", '"torch==2.7.*" "torchvision==0.22.*"'
    else:
        return None
    if tag == _local_tag(facts.torch_version):
        return None
    return tr(
        "`pip uninstall -y torch torchvision`, then `pip install {pins} --index-url {index}`",
        pins=pins,
        index=f"{WHEEL_INDEX}{tag}",
    )


# Integrated (Jetson, Thor) GPUs: kernels built for a discrete GPU of the same major version do not run there,
# and theirs run nowhere else; 10.1 was renamed 11.0 (torch.cuda's DEVICE_REQUIREMENT table).
_INTEGRATED = {53, 62, 72, 87, 101, 110}


def _arch_code(text: str) -> tuple[str, int, str] | None:
    """("sm" or "compute", capability as an int, suffix) from "sm_90a", "compute_120" (None: unreadable)."""
    match = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", text.strip())
    return (match.group(1), int(match.group(2)), match.group(3)) if match else None


def _kernels_run(code: int, device: int, cuda_build: str | None) -> bool:
    """Whether kernels compiled for capability ``code`` run on a GPU of capability ``device`` (both like 86),
    by torch.cuda's rules: the same major version and at least the code's minor version; integrated GPUs
    run only their own code, except that from CUDA 13.2 the 7.2 and 8.7 ones also run 7.0, 8.0 and 8.6 code."""
    if {code, device} <= {101, 110}:
        return True
    unified = (_release(cuda_build) or (0, 0)) >= (13, 2) and device in (72, 87) and code not in _INTEGRATED
    if (code in _INTEGRATED or device in _INTEGRATED) and not unified:
        return code == device
    return code // 10 == device // 10 and code % 10 <= device % 10


def arch_support(capability: str, arch_list: list[str], cuda_build: str | None) -> str | None:
    """How a CUDA build runs on a GPU of ``capability`` ("6.1"): "kernels" (compiled for it), "ptx" (only
    through the driver compiling the build's compute_XX PTX at run time), "none", or None (cannot tell).

    torch's own check (``torch.cuda._check_capability``) counts sm_XX and compute_XX alike, by major version;
    the driver can also compile plain compute_XX PTX for any newer GPU, which this reports as "ptx"."""
    device = _release(capability)
    codes = [code for code in map(_arch_code, arch_list) if code is not None]
    if device is None or not codes:
        return None
    cc = device[0] * 10 + device[1]
    if any(_kernels_run(code, cc, cuda_build) for kind, code, _ in codes if kind == "sm"):
        return "kernels"
    ptx = [(code, suffix) for kind, code, suffix in codes if kind == "compute"]
    if any(_kernels_run(code, cc, cuda_build) if suffix else code <= cc for code, suffix in ptx):
        return "ptx"
    return "none"


def _arch_fix(facts: Facts, gpu: Gpu) -> str:
    """How to get kernels for ``gpu``: a wheel for an older CUDA (old GPUs) or a newer one (new GPUs)."""
    device = _release(gpu.capability) or (0, 0)
    oldest = min(code for _, code, _ in filter(None, map(_arch_code, facts.cuda_arch_list)))
    meanwhile = tr("meanwhile the course runs on the CPU with {setting}", setting=f"{DEVICE_ENV}=cpu")
    if device[0] * 10 + device[1] < oldest:
        if device >= (5, 0) and _local_tag(facts.torch_version) != "cu126":
            return tr(
                "install PyTorch's CUDA 12.6 build, whose x86-64 wheels still carry kernels for compute "
                "capability 5.0 to 7.0 (sm_50 sm_60 sm_70): `pip uninstall -y torch torchvision`, then "
                "`pip install torch torchvision --index-url {index}`; {meanwhile}",
                index=f"{WHEEL_INDEX}cu126",
                meanwhile=meanwhile,
            )
        return tr(
            "no PyTorch the course supports has kernels for this GPU: {meanwhile}, or {colab}",
            meanwhile=meanwhile,
            colab=tr(COLAB_GPU),
        )
    newer = _release(facts.cuda_build) is not None and _release(facts.cuda_build) < (13, 0)
    command = (
        tr(
            "`pip uninstall -y torch torchvision`, then `pip install torch torchvision --index-url {index}` "
            "(needs a driver that supports CUDA 13.0)",
            index=f"{WHEEL_INDEX}cu130",
        )
        if newer
        else f"`pip install --upgrade torch torchvision{_index_hint(facts.torch_version)}`"
    )
    return tr(
        "install a PyTorch whose kernels include compute capability {capability} (newer GPUs need newer "
        "CUDA builds and releases; the selector at {selector} lists them): {command}; {meanwhile}",
        capability=gpu.capability,
        selector=SELECTOR,
        command=command,
        meanwhile=meanwhile,
    )


def _cuda_wheel_fix(facts: Facts) -> str:
    """Reinstall PyTorch from the CUDA wheel index (for a machine with an NVIDIA GPU and a wheel without CUDA)."""
    return tr(
        "reinstall PyTorch from pytorch.org's CUDA wheel index: `pip uninstall -y torch torchvision`, then "
        "`pip install torch torchvision --index-url {index}`; pick the CUDA version the driver "
        "supports{supports} (cu126 = CUDA 12.6; the selector at {selector} lists them)",
        index=f"{WHEEL_INDEX}cu126",
        supports=_driver_supports(facts),
        selector=SELECTOR,
    )


def _driver_supports(facts: Facts) -> str:
    """ " (nvidia-smi: this driver supports CUDA up to 12.4)", or "" when nvidia-smi did not say."""
    if not facts.driver_cuda:
        return ""
    return tr(" (nvidia-smi: this driver supports CUDA up to {cuda})", cuda=facts.driver_cuda)
