"""Gathering the report's facts now (:func:`gather_facts`): NVML, the kernel's plan and fence, the
framework's counters, the user's other kernels; a MIG slice standing in for its GPU."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .facts import Facts
from .recognize import OutOfMemory


def slice_views(gpus: Sequence[Any], slice_uuid: str | None) -> tuple[Any, ...]:
    """MIG (docs/mig.md): the kernel's slice stands in for its GPU, since the memory that ran out is
    the slice's (its total, use, free and processes, its MIG UUID and name); other GPUs in MIG mode
    are left out, as they cannot be selected whole. GPUs not in MIG mode are kept as they are."""
    views = []
    for gpu in gpus:
        if not getattr(gpu, "mig_mode", False):
            views.append(gpu)
            continue
        slice_ = next((s for s in gpu.slices if s.uuid == slice_uuid), None)
        if slice_ is not None:
            views.append(
                replace(
                    gpu,
                    uuid=slice_.uuid,
                    name=slice_.name,
                    memory_total=slice_.memory_total,
                    memory_used=slice_.memory_used,
                    memory_free=slice_.memory_free,
                    memory_reserved=None,
                    processes=slice_.processes,
                    mig_mode=False,
                    slices=(),
                )
            )
    return tuple(views)


def gather_facts(oom: OutOfMemory, *, server_timeout_s: float = 1.0) -> Facts:
    """NVML, the kernel's plan, the framework's counters and the user's other kernels, now."""
    from ... import frameworks
    from ...plan import current_plan, kernel_start_fence
    from ...sources.nvml import snapshot
    from ...sources.peers import find_peers
    from ...sources.processes import current_user

    snap = snapshot()
    gpus = snap.gpus if snap.nvml_available else ()
    if gpus:
        frameworks.remember_gpus(gpus)
    plan = current_plan()
    adapter = next((f for f in frameworks.FRAMEWORKS if f.module_name == oom.module), None)
    device_gpus = None
    seen = frameworks.actual_devices(adapter, gpus) if adapter is not None and gpus else None
    if seen is not None:
        device_gpus = seen.indices
    if device_gpus is None and adapter is not None and gpus:
        device_gpus = planned_gpus(adapter, plan, gpus)
    if gpus and any(gpu.mig_mode for gpu in gpus):  # the slice this kernel uses stands in for its GPU
        slice_uuid = (
            (seen.slices[0] if seen is not None and seen.slices else None)
            or plan.selected_slice
            or kernel_start_fence().allowed_slice(gpus)
        )
        gpus = slice_views(gpus, slice_uuid)
    logical = max((len(sizes) for sizes in plan.limits_bytes.values()), default=1)
    counters: dict[int, tuple[int, int | None]] = {}
    for key, memory in frameworks.framework_memory().get(oom.module, {}).items():
        index = _counter_gpu(key, gpus, device_gpus, logical)
        if index is not None:
            in_use, held = counters.get(index, (0, None))
            counters[index] = (in_use + memory.in_use, held if memory.held is None else (held or 0) + memory.held)
    peers = find_peers(timeout_s=server_timeout_s) if gpus else None
    return Facts(
        gpus=gpus,
        own_pid=os.getpid(),
        own_user=current_user(),
        device_gpus=device_gpus,
        logical_per_gpu=logical,
        allowed=kernel_start_fence().allowed(gpus) if gpus else None,
        limits={index: plan.memory_limit_bytes(index) or 0 for index in plan.limits_bytes},
        limit_from_ceiling=plan.limit_from_ceiling,
        admin_ceiling=plan.request.max_limit,
        growth=plan.growth,
        counters=counters,
        peers={} if peers is None else peers.by_pid,
        peers_source="" if peers is None else peers.source,
        own_notebook=os.path.basename(os.environ.get("JPY_SESSION_NAME", "")) or None,
        request=_pending_request() or plan.request,
        snapshot=snap if snap.nvml_available else None,
        fence=kernel_start_fence(),
        runs=_runs(gpus),
    )


def _runs(gpus: Sequence[Any]) -> dict[int, str]:
    """This user's ``jupyter-gpu run`` processes on ``gpus`` (pid → description), from the runs'
    own claims; empty when claims are off or cannot be read (never raises)."""
    try:
        from ...sources.claims import viewer
        from ...sources.processes import current_user

        return dict(viewer(gpus, current_user()).runs)
    except Exception:
        return {}


def planned_gpus(adapter: Any, plan: Any, gpus: Sequence[Any]) -> tuple[int, ...] | None:
    """The framework's devices mapped through the plan (NVML index per device position), when what
    the framework uses cannot be read: the plan's GPUs in the order it gives them, as long as the
    framework follows the plan; else the one GPU the kernel may use. None when neither tells."""
    from ... import frameworks

    try:
        devices, problem = frameworks.planned_devices(adapter, plan, gpus)
    except Exception:  # a report must never fail on a question it can do without
        devices, problem = None, "unknown"
    if problem is None and devices is not None and devices.indices:
        return tuple(devices.indices)
    if len(plan.gpus) == 1:
        return (plan.gpus[0].index,)
    return None


def _pending_request() -> Any:
    """The plan a restart would apply, when a change was refused as too late (the magics' session):
    the suggestions add up on it, as the session does."""
    import sys

    magics = sys.modules.get("jupyter_gpu.kernel.magics")
    for family in getattr(magics, "_registered", {}).values():  # the shell's magics (one per kernel)
        pending = getattr(getattr(family[0], "session", None), "pending_request", None)
        if pending is not None:
            return pending
    return None


def _counter_gpu(key: str, gpus: Sequence[Any], device_gpus: tuple[int, ...] | None, logical: int) -> int | None:
    """The NVML index of a framework counter's device key (``GPU-<uuid>``, ``cuda:N``, ``/device:GPU:N``)."""
    if key.startswith(("GPU-", "MIG-")):  # a MIG slice's view carries its MIG UUID
        return next((gpu.index for gpu in gpus if gpu.uuid.lower() == key.lower()), None)
    match = re.search(r"(?:cuda:|GPU:)(\d+)$", key)
    if match is None or not device_gpus:
        return None
    position = int(match[1]) // (logical if "GPU:" in key else 1)
    return device_gpus[position] if position < len(device_gpus) else None
