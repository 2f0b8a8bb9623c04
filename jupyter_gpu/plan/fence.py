"""The admin fence: the GPUs (or the MIG slice) a kernel was *started* with, which it may never
widen (see :mod:`jupyter_gpu.plan`), and :func:`kernel_start_fence`, this kernel's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.environ import environment_at_process_start
from ..core.i18n import _
from ..core.snapshot import GpuInfo


@dataclass(frozen=True)
class Fence:
    """The GPUs an admin assigned to this kernel at start (raw entries of the environment)."""

    variables: Mapping[str, str]
    device_order: str | None = None  # the CUDA_DEVICE_ORDER the kernel started with

    @property
    def active(self) -> bool:
        return bool(self.variables)

    def unknown(self, gpus: Sequence[GpuInfo]) -> str | None:
        """Why the GPUs of the fence cannot be told (None when they can): an index in
        ``CUDA_VISIBLE_DEVICES`` counts CUDA's fastest-first order unless ``CUDA_DEVICE_ORDER`` is
        ``PCI_BUS_ID``, which NVML cannot reproduce between GPU models."""
        from ..core.visibility import CudaEnv, cuda_devices

        value = self.variables.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return None
        devices = cuda_devices(CudaEnv(value, self.device_order), gpus)
        if devices.known:
            return None
        return (
            f"the kernel was started with CUDA_VISIBLE_DEVICES={value!r}, and which GPUs that is cannot be "
            f"told: {devices.reason}; start the kernel with CUDA_DEVICE_ORDER=PCI_BUS_ID or GPU UUIDs"
        )

    def describe(self) -> str:
        parts = []
        for name, value in self.variables.items():
            if name == "NVIDIA_VISIBLE_DEVICES" and not value.strip().upper().startswith(("GPU-", "MIG-")):
                parts.append(
                    _(
                        "{variable} (applied by the container runtime: NVML here sees only those GPUs, numbered from 0)"
                    ).format(variable=f"{name}={value!r}")
                )
            else:
                parts.append(f"{name}={value!r}")
        return _(" and ").join(parts)

    def allowed_slice(self, gpus: Sequence[GpuInfo]) -> str | None:
        """The MIG UUID of the slice the fence assigns (CUDA shows one MIG device at most), or None."""
        value = self.variables.get("CUDA_VISIBLE_DEVICES")
        if value is None or self.unknown(gpus):
            return None
        from ..core.visibility import CudaEnv, cuda_devices

        devices = cuda_devices(CudaEnv(value, self.device_order), gpus)
        return devices.slices[0] if devices.slices else None

    def allowed(self, gpus: Sequence[GpuInfo]) -> tuple[int, ...]:
        """NVML indices inside the fence, in the admin's order (all GPUs when there is no fence)."""
        allowed: list[int] | None = None
        if self.unknown(gpus):
            return ()
        for name, value in self.variables.items():
            indices = _resolve_fence_entries(name, value, gpus, self.device_order)
            allowed = indices if allowed is None else [i for i in allowed if i in indices]
        return tuple(gpu.index for gpu in gpus) if allowed is None else tuple(allowed)


def _resolve_fence_entries(name: str, value: str, gpus: Sequence[GpuInfo], order: str | None = None) -> list[int]:
    value = value.strip()
    if name == "CUDA_VISIBLE_DEVICES":
        from ..core.visibility import CudaEnv, cuda_devices

        return list(cuda_devices(CudaEnv(value, order), gpus).indices or ())
    if name == "NVIDIA_VISIBLE_DEVICES":
        # The container runtime applied it already: NVML in the container sees only those GPUs,
        # numbered from 0, and an index in it is in the *host's* numbering. Only UUIDs still name
        # GPUs here; anything else means "the GPUs NVML sees".
        if value.lower() in {"", "none", "void"}:
            return []
        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        uuids = [entry for entry in entries if entry.upper().startswith(("GPU-", "MIG-"))]
        if not uuids or len(uuids) != len(entries):
            return [gpu.index for gpu in gpus]
        return [gpu.index for gpu in gpus if any(gpu.uuid and gpu.uuid.lower().startswith(u.lower()) for u in uuids)]
    raise ValueError(f"not a fence variable: {name}")


_started_with = environment_at_process_start()
_KERNEL_START_FENCE = Fence(
    {name: _started_with[name] for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES") if name in _started_with},
    _started_with.get("CUDA_DEVICE_ORDER"),
)


def kernel_start_fence() -> Fence:
    """The fence the kernel was started with (see :func:`environment_at_process_start`): code in the
    kernel that sets ``CUDA_VISIBLE_DEVICES`` itself does not widen it."""
    return _KERNEL_START_FENCE
