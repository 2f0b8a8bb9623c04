"""What the plan means, against what a framework really listed and took (pure).

:func:`expectation` turns a :class:`~jupyter_gpu.plan.GpuPlan` into what each framework should
show: the NVML GPU behind each of its devices, in order (the selection; without one, what CUDA
shows a process started with these variables, in nvidia-smi's order where CUDA's own cannot be
known), the caps and growth. :func:`check_framework` compares one child's answer with it:

- which NVML GPU each device is: by UUID or PCI bus id where the framework says (PyTorch's device
  properties), otherwise by name and memory (TensorFlow and JAX name the model only: two GPUs of one
  model cannot be told apart that way, which the verdict says);
- the order, the caps (TensorFlow's logical devices, PyTorch's memory fraction, JAX's share) and
  growth;
- for a GPU build that lists no GPU, the classic causes, each with its fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.i18n import N_, _
from ..core.snapshot import GpuInfo
from ..core.units import format_bytes
from ..core.visibility import CudaEnv, cuda_devices, same_model
from ..frameworks.base import fractions_differ
from ..plan import GpuPlan
from .children import ProbeDevice, ProbeResult
from .report import CANNOT_VERIFY, DIFFERS, FOLLOWS, DeviceMatch, Finding, shown

#: A cap taken within this much of the plan's is the plan's (TensorFlow rounds to MiB, JAX to pages).
CAP_TOLERANCE_BYTES = 64 * 1024**2

#: What gives each framework a GPU build (pip names; PyTorch's CUDA wheels come from its own index).
GPU_INSTALL = {
    "tensorflow": "tensorflow[and-cuda]",
    "torch": N_("torch from PyTorch's CUDA wheel index (the cu12x line of its install selector)"),
    "jax": "jax[cuda12]",
}


@dataclass(frozen=True)
class PlanExpectation:
    """What the plan gives each framework: ``indices[k]`` is the NVML GPU of its device k."""

    indices: tuple[int, ...] | None
    reason: str = ""
    nvidia_smi_order_assumed: bool = False
    caps: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    fractions: Mapping[int, float] = field(default_factory=dict)
    jax_fraction: float | None = None
    growth: bool = False


def expectation(plan: GpuPlan, gpus: Sequence[GpuInfo], start: Mapping[str, str]) -> PlanExpectation:
    """What ``plan`` means on these GPUs for a process started with the variables ``start``."""
    from ..frameworks import JAX

    caps = {index: plan.logical_limits_bytes(index) for index in plan.limits_bytes}
    fractions = {
        index: fraction for index in plan.limits_bytes if (fraction := plan.memory_fraction(index)) is not None
    }
    share = JAX.environment(plan, {}).get("XLA_CLIENT_MEM_FRACTION")
    common = {
        "caps": caps,
        "fractions": fractions,
        "jax_fraction": float(share) if share else None,
        "growth": plan.growth,
    }
    if plan.selected_indices is not None:
        return PlanExpectation(plan.selected_indices, **common)  # type: ignore[arg-type]
    env = CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))
    seen = cuda_devices(env, gpus)
    if seen.known:
        return PlanExpectation(seen.indices, **common)  # type: ignore[arg-type]
    as_smi = cuda_devices(CudaEnv(env.visible_devices, "PCI_BUS_ID"), gpus)
    return PlanExpectation(
        as_smi.indices,
        reason=Finding(seen.reason, seen.shown_reason),
        nvidia_smi_order_assumed=as_smi.known,
        **common,  # type: ignore[arg-type]
    )


def _normal_uuid(uuid: str) -> str:
    """NVML's ``GPU-…``/``MIG-…`` and PyTorch's bare form alike."""
    return uuid.strip().lower().removeprefix("gpu-").removeprefix("mig-")


def _normal_pci(bus_id: str) -> tuple[int, ...] | None:
    """``00000000:3B:00.0`` and ``0000:3b:00.0`` alike: (domain, bus, device, function)."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))
    except ValueError:
        return None


def identify(
    device: ProbeDevice,
    position: int,
    expected: tuple[int, ...] | None,
    gpus: Sequence[GpuInfo],
    pci: Mapping[int, str],
) -> tuple[int | None, str | None]:
    """The NVML GPU ``device`` is, and how that was told (``"uuid"``, ``"pci bus id"``, ``"name"``)."""
    if device.uuid:
        for gpu in gpus:
            uuids = [gpu.uuid, *(slice_.uuid for slice_ in gpu.slices)]  # a MIG device is its GPU's
            if any(uuid and _normal_uuid(uuid) == _normal_uuid(device.uuid) for uuid in uuids):
                return gpu.index, "uuid"
    if device.pci_bus_id and (wanted := _normal_pci(device.pci_bus_id)) is not None:
        for index, bus_id in pci.items():
            if _normal_pci(bus_id) == wanted:
                return index, "pci bus id"
    by_index = {gpu.index: gpu for gpu in gpus}
    if expected is not None and position < len(expected) and expected[position] in by_index:
        planned = by_index[expected[position]]
        if same_model(planned.name, device.name) and _memory_fits(device, planned):
            return planned.index, "name"
    models = [gpu for gpu in gpus if same_model(gpu.name, device.name) and _memory_fits(device, gpu)]
    if len(models) == 1:
        return models[0].index, "name"
    return None, None


def _memory_fits(device: ProbeDevice, gpu: GpuInfo) -> bool:
    """A device's total memory, where the framework says it, is its GPU's or one of its MIG slices'
    (within 5 %)."""
    if device.memory_total is None or not gpu.memory_total:
        return True
    totals = [gpu.memory_total, *(slice_.memory_total for slice_ in gpu.slices)]
    return any(abs(device.memory_total - total) <= 0.05 * total for total in totals if total)


def _cap(framework: str, device: ProbeDevice, gpu: GpuInfo | None) -> int | None:
    """The memory the framework allows itself on ``device`` (None: no cap, or not known)."""
    if device.limits:
        return sum(device.limits)
    if device.fraction is not None and device.fraction < 1.0:
        total = device.memory_total or (gpu.memory_total if gpu is not None else None)
        return int(total * device.fraction) if total else None
    return None


def _cap_problem(
    framework: str, device: ProbeDevice, index: int, gpu: GpuInfo | None, expect: PlanExpectation
) -> str | None:
    planned = expect.caps.get(index)
    if framework == "torch":
        wanted = expect.fractions.get(index)
        if wanted is None:
            return None
        if device.fraction is None or fractions_differ([wanted, device.fraction]):
            took = "no memory cap" if device.fraction in (None, 1.0) else f"a memory fraction of {device.fraction:.3f}"
            return f"took {took} on GPU {index} (the plan: {wanted:.3f} of it, {format_bytes(sum(planned or ()))})"
        return None
    if framework == "jax":
        if expect.jax_fraction is None or gpu is None or not gpu.memory_total:
            return None
        wanted_bytes = int(gpu.memory_total * expect.jax_fraction)
        limit = sum(device.limits) if device.limits else None
        if limit is None or abs(limit - wanted_bytes) > CAP_TOLERANCE_BYTES:
            what = "no memory cap" if limit is None else f"a cap of {format_bytes(limit)}"
            share = f"{format_bytes(wanted_bytes)}, a share of {expect.jax_fraction:g}"
            return f"took {what} on GPU {index} (the plan: {share})"
        return None
    if not planned:
        return None
    limits = device.limits or ()
    if len(limits) != len(planned) or any(
        abs(a - b) > CAP_TOLERANCE_BYTES for a, b in zip(limits, planned, strict=True)
    ):
        what = "no memory cap" if not limits else "caps of " + " + ".join(format_bytes(b) for b in limits)
        return f"took {what} on GPU {index} (the plan: {' + '.join(format_bytes(b) for b in planned)})"
    return None


def check_devices(
    framework: str,
    probe: ProbeResult,
    expect: PlanExpectation,
    gpus: Sequence[GpuInfo],
    pci: Mapping[int, str],
    child_order: str | None,
) -> tuple[str, tuple[str, ...], tuple[DeviceMatch, ...]]:
    """``(verdict, reasons, devices)`` for a framework that listed GPUs: the reasons are the
    differences, one line each (or the one line that says how it follows, or why it cannot be told).

    ``child_order`` is the ``CUDA_DEVICE_ORDER`` the child's CUDA read (after the plan wrote its
    variables), to name the cause when the order differs."""
    by_index = {gpu.index: gpu for gpu in gpus}
    expected = expect.indices
    matches = []
    differences: list[str] = []
    for position, device in enumerate(probe.devices):
        index, how = identify(device, position, expected, gpus, pci)
        gpu = by_index.get(index) if index is not None else None
        matches.append(DeviceMatch(position, device.name, index, how, _cap(framework, device, gpu)))
    if expected is None:
        told = Finding.said(
            N_("which GPUs the plan means cannot be told: {reason}"),
            shown_fields={"reason": shown(expect.reason)},
            reason=expect.reason,
        )
        return CANNOT_VERIFY, (told,), tuple(matches)
    if len(probe.devices) != len(expected):
        listed = ", ".join(device.name for device in probe.devices) or "none"
        planned = ", ".join(f"GPU {index}" for index in expected) or "none (CPU only)"
        differences.append(
            Finding.said(
                N_("it lists {count} GPU(s) ({listed}); the plan gives {planned}"),
                count=len(probe.devices),
                listed=listed,
                planned=planned,
            )
        )
    misplaced = False
    for match, wanted in zip(matches, expected, strict=False):
        if match.gpu == wanted:
            continue
        misplaced = True
        planned_name = by_index[wanted].name if wanted in by_index else "?"
        if match.gpu is not None:
            template = N_(
                "its device {position} is GPU {gpu} ({name}); the plan's device {position} is GPU {wanted} ({planned})"
            )
        else:
            template = N_(
                "its device {position} is a GPU NVML does not show ({name}); the plan's device {position} is "
                "GPU {wanted} ({planned})"
            )
        differences.append(
            Finding.said(
                template, position=match.position, gpu=match.gpu, name=match.name, wanted=wanted, planned=planned_name
            )
        )
    if misplaced and (child_order or "").strip() != "PCI_BUS_ID":
        differences.append(
            Finding.said(
                N_(
                    "cause: CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA numbers the GPUs fastest first, not as "
                    "nvidia-smi does. Fix: export CUDA_DEVICE_ORDER=PCI_BUS_ID, or %gpu_select the GPUs (it sets it)"
                )
            )
        )
    for match, device in zip(matches, probe.devices, strict=True):
        if match.gpu is not None and match.gpu in (expected or ()):
            problem = _cap_problem(framework, device, match.gpu, by_index.get(match.gpu), expect)
            if problem:
                differences.append(problem)
    if expect.growth and probe.growth is False:
        differences.append(Finding.said(N_("memory growth is off (the plan asks for growth)")))
    if differences:
        return DIFFERS, tuple(differences), tuple(matches)
    return FOLLOWS, (_follows_reason(matches, expect),), tuple(matches)


#: The one line of a framework that follows the plan with no GPU.
NO_GPU_AS_PLANNED = N_("no GPU, as the plan says (CPU only)")


def _follows_reason(matches: Sequence[DeviceMatch], expect: PlanExpectation) -> str:
    if not matches:
        return Finding.said(NO_GPU_AS_PLANNED)
    parts: list[str] = [", ".join(f"device {m.position} = GPU {m.gpu}" for m in matches)]
    by_name = [m for m in matches if m.matched_by == "name"]
    if by_name:
        parts.append(
            Finding.said(
                N_(
                    "told by model name (and memory where given), not by UUID or PCI bus id: the framework gives "
                    "neither"
                )
            )
        )
        models = [m.name for m in by_name]
        if len(set(models)) < len(models):
            parts.append(Finding.said(N_("GPUs of one model cannot be told apart that way")))
    if expect.nvidia_smi_order_assumed:
        parts.append(Finding.said(N_("in nvidia-smi's order")))
    caps = [m for m in matches if m.memory_limit is not None]
    if caps:
        parts.append(
            Finding.said(N_("caps {caps}"), caps=", ".join(f"GPU {m.gpu} {format_bytes(m.memory_limit)}" for m in caps))
        )
    if expect.growth:
        parts.append(Finding.said(N_("growth on")))
    return Finding.joined(parts)


# -- why a GPU build lists no GPU -----------------------------------------------------------------

_MISSING_LIBRARIES = (
    "Cannot dlopen some GPU libraries",
    "Could not load dynamic library",
    "Unable to load cuDNN",
    "libcudart.so",
    "libcudnn",
    "cuda_plugin_extension",
)


def _major_minor(version: str | None) -> tuple[int, int] | None:
    try:
        parts = (version or "").strip().split(".")
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def driver_too_old(build_cuda: str | None, driver_cuda: str | None) -> str | None:
    """One line when the driver cannot run a build for CUDA ``build_cuda`` (None when it can).

    A build for a newer CUDA major than the driver supports cannot start; a newer minor runs through
    CUDA's minor version compatibility (CUDA 11 and later), which the line says as a note."""
    build, driver = _major_minor(build_cuda), _major_minor(driver_cuda)
    if build is None or driver is None:
        return None
    if build[0] > driver[0]:
        return Finding.said(
            N_(
                "the driver is too old: it supports CUDA {driver}, the build needs CUDA {build}; "
                "fix: update the NVIDIA driver, or install a build for CUDA {major}"
            ),
            driver=driver_cuda,
            build=build_cuda,
            major=driver[0],
        )
    return None


def no_gpu_causes(
    framework: str,
    probe: ProbeResult,
    nvml_available: bool,
    nvml_gpus: int,
    driver_cuda: str | None,
    child_env: Mapping[str, str],
) -> list[str]:
    """The classic causes of "no GPU" for a GPU build that listed none, each with its fix."""
    causes: list[str] = []
    if not nvml_available:
        causes.append(
            Finding.said(N_("the NVIDIA driver cannot be reached (see Machine); fix: install or load the driver"))
        )
    elif nvml_gpus == 0:
        causes.append(Finding.said(N_("NVML shows no GPU on this machine (or in this container)")))
    visible = child_env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        causes.append(
            Finding.said(
                N_("CUDA_VISIBLE_DEVICES={value} hides every GPU; fix: unset it or %gpu_select GPUs"),
                value=repr(visible),
            )
        )
    too_old = driver_too_old(probe.cuda, driver_cuda)
    if too_old:
        causes.append(too_old)
    said = f"{probe.stderr}\n{probe.error or ''}"
    if any(marker in said for marker in _MISSING_LIBRARIES):
        causes.append(
            Finding.said(
                N_("CUDA libraries are missing or do not load; fix: install {command}"),
                command=GPU_INSTALL[framework],
                shown_fields={"command": _(GPU_INSTALL[framework])},
            )
        )
    elif nvml_available and probe.error and "driver" in probe.error.lower():
        causes.append(
            Finding.said(
                N_(
                    "CUDA's driver did not start in the framework ({error}); fix: check that nvidia-smi works in "
                    "this same environment (in a container: the GPU devices and the driver's libraries mounted)"
                ),
                error=probe.error[:200],
            )
        )
    if not causes:
        last = (probe.error or "").strip() or (probe.stderr.strip().splitlines() or ["no message"])[-1]
        causes.append(
            Finding.said(
                N_("it lists no GPU although NVML shows {count}; its last message: {message}"),
                count=nvml_gpus,
                message=last[:300],
            )
        )
    return causes
