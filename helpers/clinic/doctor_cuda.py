"""The doctor's rules for NVIDIA and AMD GPUs: the NVIDIA driver, the CUDA or ROCm build, each GPU (has the build
kernels for it?) and ``CUDA_VISIBLE_DEVICES``. Pure functions of :class:`~helpers.clinic.doctor_facts.Facts`.
"""

from __future__ import annotations

import re

from helpers.clinic.doctor_facts import Check, Facts, _torch_said
from helpers.clinic.doctor_wheels import (
    COLAB_GPU,
    CUDA_BUILD_EXTRA_GB,
    SELECTOR,
    _arch_fix,
    _cuda_wheel_fix,
    _driver_supports,
    _driver_too_old,
    _older_cuda_wheel,
    arch_support,
    cpu_build_switch,
)
from helpers.course.i18n import tr, tr_lazy


def _gpus(n: int) -> str:
    """ "1 GPU", "2 GPUs"."""
    return tr("1 GPU") if n == 1 else tr("{n} GPUs", n=n)


def _build(facts: Facts) -> str:
    if facts.cuda_build:
        return tr("CUDA {version} build", version=facts.cuda_build)
    if facts.hip_build:
        return tr("ROCm {version} build", version=facts.hip_build)
    return tr("CPU-only build")


def _leading_int(text: str) -> int | None:
    """The whole number ``text`` starts with, as C's ``strtoul``/``std::stoi`` read it: "1gpu" -> 1, "gpu" -> None."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else None


def _indices(count: int) -> str:
    """nvidia-smi's GPU indices: "index 0", "indices 0-3"."""
    return tr("index 0") if count == 1 else tr("indices 0-{last}", last=count - 1)


def _smi_lists(facts: Facts) -> str:
    return tr(
        "nvidia-smi lists {gpus}: {indices}", gpus=_gpus(len(facts.smi_gpus)), indices=_indices(len(facts.smi_gpus))
    )


def cvd_selects(value: str, count: int, uuids: list[str]) -> tuple[list[int], str | None] | None:
    """The nvidia-smi indices CUDA uses under ``CUDA_VISIBLE_DEVICES=value`` on a machine with ``count`` GPUs,
    and what stopped the list early (None for a deliberate stop such as "" or "-1").

    CUDA's rules, as ``torch.cuda._parse_visible_devices`` mirrors them: the entries in order (numbers read
    like ``strtoul``, or ``GPU-`` UUIDs and their unique prefixes), up to the first one that names no GPU;
    a GPU named twice hides them all. None when this cannot be told here (MIG devices, UUIDs unknown)."""
    by_uuid = value.startswith("GPU-")
    if value.startswith("MIG-") or (by_uuid and not uuids):
        return None
    chosen: list[int] = []
    for entry in (part.strip() for part in value.split(",")):
        if by_uuid:
            hits = [i for i, uuid in enumerate(uuids) if entry.startswith("GPU-") and uuid.startswith(entry)]
            index = hits[0] if len(hits) == 1 else None
            problem = (
                tr("no GPU has the UUID {entry!r}", entry=entry)
                if not hits
                else tr("{entry!r} matches {count} GPUs' UUIDs", entry=entry, count=len(hits))
            )
        else:
            number = _leading_int(entry)
            index = number if number is not None and 0 <= number < count else None
            if number is None:
                problem = tr("{entry!r} is not a GPU index", entry=entry) if entry else None
            else:
                problem = tr("there is no GPU {number}", number=number) if number >= 0 else None
        if index is None:
            return chosen, problem
        if index in chosen:
            return [], tr("GPU {index} is named twice", index=index)
        chosen.append(index)
    return chosen, None


def _cvd_reading(facts: Facts) -> tuple[list[int], str | None] | None:
    """cvd_selects() for this machine, or None where it cannot be told (variable unset, no nvidia-smi list)."""
    if facts.cuda_visible_devices is None or facts.nvidia_smi != "ok" or not facts.smi_gpus:
        return None
    return cvd_selects(facts.cuda_visible_devices, len(facts.smi_gpus), facts.smi_uuids)


def _cvd_fix(facts: Facts) -> str:
    example = "CUDA_VISIBLE_DEVICES=0" + (",1" if len(facts.smi_gpus) > 1 else "")
    return tr(
        "unset it (`unset CUDA_VISIBLE_DEVICES`) or set it to GPUs that exist ({lists}; e.g. "
        "{example}; `nvidia-smi -L` shows their UUIDs) before Python starts; CUDA reads it once, when it "
        "initializes, so in Jupyter restart the kernel after changing it",
        lists=_smi_lists(facts),
        example=example,
    )


def _check_driver(facts: Facts) -> Check | None:
    if facts.nvidia_smi == "missing" and facts.hip_build and not facts.cuda_build:
        return None  # a ROCm build: AMD GPUs need no NVIDIA driver
    if facts.nvidia_smi == "missing" and facts.cuda_available:
        return Check(
            "OK",
            "NVIDIA driver",
            tr(
                "works (PyTorch uses the GPU); nvidia-smi is not installed here (some containers), so its version "
                "and the newest CUDA it supports go unreported: nothing to fix"
            ),
        )
    if facts.nvidia_smi == "missing" and (facts.cuda_init_error or _driver_too_old(facts)[0]):
        found = tr("nvidia-smi not found (some containers), but PyTorch found a driver: see the CUDA line")
        return Check("OK", "NVIDIA driver", found)
    if facts.nvidia_smi == "missing":
        return Check(
            "OK", "NVIDIA driver", tr("none (nvidia-smi not found): normal on a machine without an NVIDIA GPU")
        )
    if facts.nvidia_smi == "failed":
        return Check(
            "WARN",
            "NVIDIA driver",
            tr("nvidia-smi is installed but fails: {error}", error=facts.nvidia_smi_error),
            tr(
                "the NVIDIA driver is not working: reboot, or reinstall the driver; "
                "in a container, start it with GPU access (`docker run --gpus all ...`)"
            ),
        )
    gpus = ", ".join(facts.smi_gpus) or tr("no GPU")
    if facts.driver_cuda:
        detail = tr(
            "{driver}, supports CUDA up to {cuda}; nvidia-smi lists {gpus}",
            driver=facts.driver_version,
            cuda=facts.driver_cuda,
            gpus=gpus,
        )
    else:
        detail = tr("{driver}; nvidia-smi lists {gpus}", driver=facts.driver_version, gpus=gpus)
    return Check("OK", "NVIDIA driver", detail)


def _cvd_hides_all(facts: Facts) -> bool:
    """CUDA_VISIBLE_DEVICES selects none of the GPUs nvidia-smi lists, and PyTorch sees none."""
    reading = _cvd_reading(facts)
    if facts.cuda_visible_devices is None or facts.nvidia_smi != "ok" or not facts.smi_gpus or facts.gpus:
        return False
    return bool(facts.cuda_build or facts.hip_build) and (reading is None or not reading[0])


def _check_rocm(facts: Facts) -> Check:
    build = _build(facts)
    if facts.cuda_available and facts.gpus:
        return Check(
            "OK",
            "ROCm",
            tr(
                '{build}: AMD GPUs appear as "cuda" devices in PyTorch (torch.cuda, device="cuda"); {gpus} available',
                build=build,
                gpus=_gpus(len(facts.gpus)),
            ),
        )
    if facts.nvidia_smi == "ok" and facts.smi_gpus:
        return Check(
            "WARN",
            "ROCm",
            tr(
                "{build}, a PyTorch for AMD GPUs, but nvidia-smi lists an NVIDIA GPU: the course runs on the CPU",
                build=build,
            ),
            _cuda_wheel_fix(facts),
        )
    return Check(
        "OK",
        "ROCm",
        tr(
            '{build}, but PyTorch sees no AMD GPU (they appear as "cuda" devices): the course runs on the CPU',
            build=build,
        ),
        tr(
            "if this machine has an AMD GPU, check that ROCm lists it (`rocm-smi` or `amd-smi`) and that your user "
            "is in the video and render groups; in a container, pass the GPU in "
            "(`docker run --device=/dev/kfd --device=/dev/dri ...`)"
        ),
    )


def _check_cuda(facts: Facts) -> Check:
    if facts.hip_build and not facts.cuda_build:
        return _check_rocm(facts)
    build = _build(facts)
    smi_has_gpu = facts.nvidia_smi == "ok" and bool(facts.smi_gpus)
    if not facts.cuda_build:
        if smi_has_gpu:
            return Check(
                "WARN",
                "CUDA",
                tr("you have an NVIDIA GPU but a CPU-only PyTorch: the course runs on the CPU"),
                _cuda_wheel_fix(facts),
            )
        if facts.mps_available:
            return Check("OK", "CUDA", tr("{build}: runs on the CPU or Apple MPS", build=build))
        return Check("OK", "CUDA", tr("{build}: runs on the CPU", build=build))
    if facts.cuda_available and facts.gpus:
        return Check("OK", "CUDA", tr("{build}, CUDA available: {gpus}", build=build, gpus=_gpus(len(facts.gpus))))
    if _cvd_hides_all(facts):
        reading = _cvd_reading(facts)
        why = tr(": {problem}", problem=reading[1]) if reading and reading[1] else ""
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, but CUDA_VISIBLE_DEVICES={value!r} hides every GPU{why} ({lists}); a CUDA call raises "
                '"No CUDA GPUs are available" and the course runs on the CPU',
                build=build,
                value=facts.cuda_visible_devices,
                why=why,
                lists=_smi_lists(facts),
            ),
            _cvd_fix(facts),
        )
    said = _torch_said(facts)
    said_text = tr(" PyTorch said: {said}", said=" ".join(said)) if said else ""
    too_old, driver_supports = _driver_too_old(facts)
    if too_old:
        driver = (
            tr("NVIDIA driver {version}", version=facts.driver_version) if facts.driver_version else tr("NVIDIA driver")
        )
        if driver_supports:
            upto = tr("it supports CUDA up to {cuda}", cuda=driver_supports)
        else:
            upto = tr("it is older than it needs")
        wheel = _older_cuda_wheel(facts, driver_supports)
        fix = tr("update the NVIDIA driver to one that supports CUDA {cuda}", cuda=facts.cuda_build)
        if driver_supports:
            fix += tr(" (this one supports CUDA up to {cuda})", cuda=driver_supports)
        if wheel:
            fix += tr("; or install a PyTorch built for an older CUDA: {wheel}", wheel=wheel)
        fix += tr(" (the selector at {selector} lists the CUDA versions of each release)", selector=SELECTOR)
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, but the {driver} is too old for it: {upto}. PyTorch cannot use the GPU: the course "
                "runs on the CPU.{said}",
                build=build,
                driver=driver,
                upto=upto,
                said=said_text,
            ),
            fix,
        )
    if smi_has_gpu or facts.cuda_init_error:
        return Check(
            "WARN",
            "CUDA",
            tr(
                "{build}, and the driver sees a GPU, but CUDA cannot start: the course runs on the CPU.{said}",
                build=build,
                said=said_text,
            ),
            tr(
                "this is reported after a driver update without a reboot, after a laptop wakes from sleep, and in a "
                "container not given the GPU: reboot (in a container, start it with `docker run --gpus all ...`); "
                "if it persists, reinstall the NVIDIA driver{supports}",
                supports=_driver_supports(facts),
            ),
        )
    if facts.mps_available:
        return Check(
            "OK",
            "CUDA",
            tr("{build}, but no NVIDIA GPU is usable: the course runs on the Apple GPU (MPS)", build=build),
        )
    seen = {
        "missing": tr_lazy("no NVIDIA driver is visible to this process (no nvidia-smi, and CUDA does not start)"),
        "failed": tr_lazy("the NVIDIA driver does not work (see the NVIDIA driver line)"),
        "ok": tr_lazy("the NVIDIA driver lists no GPU"),
    }[facts.nvidia_smi]
    use_a_gpu = tr(
        "to use a GPU {colab}; on a machine with an NVIDIA GPU, install its driver (nvidia-smi comes with "
        "it); in a container, the host needs the NVIDIA Container Toolkit and the container GPU access "
        "(`docker run --gpus all ...`)",
        colab=tr(COLAB_GPU),
    )
    detail = tr("{build}, but {seen}: the course runs on the CPU", build=build, seen=tr(seen))
    if facts.nvidia_smi != "missing":
        return Check("OK", "CUDA", detail, use_a_gpu)
    return Check(
        "WARN",
        "CUDA",
        tr(
            "{detail}. On a machine without an NVIDIA GPU the CUDA build's libraries are about {size} GB "
            "installed for nothing: the CPU build runs the course the same",
            detail=detail,
            size=CUDA_BUILD_EXTRA_GB,
        ),
        tr("switch to the CPU build: {switch}. Or, {gpu}", switch=cpu_build_switch(facts.torch_version), gpu=use_a_gpu),
    )


def _check_gpus(facts: Facts) -> list[Check]:
    if not facts.gpus:
        return [Check("OK", "GPUs", tr("none visible to PyTorch"))]
    checks = []
    for gpu in facts.gpus:
        kind = gpu.arch or tr("compute capability {capability}", capability=gpu.capability)
        detail = f"{gpu.name}, {gpu.memory_gib:.1f} GiB, {kind}"
        support = None if facts.hip_build else arch_support(gpu.capability, facts.cuda_arch_list, facts.cuda_build)
        built = " ".join(facts.cuda_arch_list)
        if support == "none":
            detail += tr(
                ': this PyTorch has no kernels for it (built for {built}); CUDA work there fails with "no kernel '
                'image is available for execution on the device"',
                built=built,
            )
            checks.append(Check("FAIL", f"GPU {gpu.index}", detail, _arch_fix(facts, gpu)))
        elif support == "ptx":
            detail += tr(
                ": this PyTorch has no kernels compiled for it (built for {built}); the driver compiles the build's "
                "PTX (compute_XX) for it at run time: a slow start, and PyTorch warns",
                built=built,
            )
            checks.append(Check("WARN", f"GPU {gpu.index}", detail, _arch_fix(facts, gpu)))
        else:
            checks.append(Check("OK", f"GPU {gpu.index}", detail))
    return checks


def _check_cvd(facts: Facts) -> Check:
    value = facts.cuda_visible_devices
    if value is None:
        return Check("OK", "CUDA_VISIBLE_DEVICES", tr("not set (PyTorch may use every GPU)"))
    if facts.smi_gpus:
        seen = tr(
            "PyTorch sees {gpus}; nvidia-smi, which ignores this variable, lists {count}",
            gpus=_gpus(len(facts.gpus)),
            count=len(facts.smi_gpus),
        )
    else:
        seen = tr("PyTorch sees {gpus}", gpus=_gpus(len(facts.gpus)))
    if _cvd_hides_all(facts):
        return Check("WARN", "CUDA_VISIBLE_DEVICES", tr("{value!r} ({seen})", value=value, seen=seen))
    reading = _cvd_reading(facts)
    if reading and reading[0] and reading[1]:  # a problem past the first GPUs: CUDA uses those before it
        used = ", ".join(map(str, reading[0]))
        return Check(
            "WARN",
            "CUDA_VISIBLE_DEVICES",
            tr(
                "{value!r} ({seen}): {problem}, so CUDA stops there and uses only GPU {used}",
                value=value,
                seen=seen,
                problem=reading[1],
                used=used,
            ),
            _cvd_fix(facts),
        )
    return Check("OK", "CUDA_VISIBLE_DEVICES", tr("{value!r} ({seen})", value=value, seen=seen))
