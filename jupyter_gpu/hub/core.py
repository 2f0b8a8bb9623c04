"""The console's data, joined and filtered without any I/O (pure: no tornado, no NVML).

Inputs: the host's device snapshot (one NVML sampler in the service), its history, and the snapshot
each running user server answered at ``GET {server_url}jupyter-gpu/snapshot``. Output: the JSON of
``GET /services/jupyter-gpu/api/console``::

    {"timestamp": float, "viewer": str, "admin": bool, "simulated": bool,
     "nvml_available": bool, "error": str|null, "warnings": [str],
     "gpus": [{"index", "uuid", "name", "memory_total", "memory_used", "utilization", "error",
               "history": {"t": [float], "utilization": [int|null], "memory": [float|null]}}],
     "users": [{"name": str, "server_url": str|null, "error": str|null,
                "gpu_memory": int, "memory_by_gpu": {"<index>": int},
                "kernels": [{"kernel_id": str|null, "notebook": str|null, "execution_state": str|null,
                             "idle_s": float|null, "idle": bool, "cull_in_s": float|null,
                             "gpu_memory": int, "memory_by_gpu": {"<index>": int}}]}]}

**Privacy rule** (the same as every other face): command lines and program names never leave the
service (they are not even copied from the user servers' answers); a viewer who is not an admin
gets other users' kernels without ``kernel_id`` and ``notebook`` (memory, state and idle time
only). The viewer's own kernels keep theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..snapshots import Snapshot

READ_SCOPE = "custom:jupyter-gpu:read"
ADMIN_SCOPE = "custom:jupyter-gpu:admin"
MAX_KERNELS_PER_USER = 1000


@dataclass(frozen=True)
class UserServer:
    """One running user server and what it answered (``snapshot`` None: ``error`` says why)."""

    user: str
    server_url: str | None
    snapshot: dict[str, Any] | None = None
    error: str | None = None


def access(model: dict[str, Any] | None) -> str | None:
    """"admin", "read" or None for a hub identity (the model HubAuth returns).

    Hub admins (``admin: true``) and holders of ``custom:jupyter-gpu:admin`` may act; holders of
    ``custom:jupyter-gpu:read`` may look (privacy-filtered); everybody else gets nothing.
    """
    if not model:
        return None
    scopes = set(model.get("scopes") or ())
    if (model.get("kind", "user") == "user" and model.get("admin") is True) or ADMIN_SCOPE in scopes:
        return "admin"
    if READ_SCOPE in scopes:
        return "read"
    return None


def devices_answer(snapshot: Snapshot) -> dict[str, Any]:
    """The device snapshot user servers take (``/api/devices``): names and command lines removed."""
    data = snapshot.to_dict()
    for gpu in data["gpus"]:
        for process in [*gpu["processes"], *(p for part in gpu.get("slices", []) for p in part["processes"])]:
            process["name"] = None
            process.pop("command", None)
    return data


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _bytes(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: Any, limit: int = 4096) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def user_kernels(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """A user server's kernels with their GPU memory per GPU index (untrusted input, checked)."""
    by_kernel: dict[str, dict[str, int]] = {}
    gpus = snapshot.get("gpus")
    for gpu in gpus if isinstance(gpus, list) else ():
        if not isinstance(gpu, dict) or not isinstance(gpu.get("processes"), list):
            continue
        index = str(_bytes(gpu.get("index")))
        for process in gpu["processes"]:
            if isinstance(process, dict) and isinstance(process.get("kernel_id"), str):
                memory = by_kernel.setdefault(process["kernel_id"], {})
                memory[index] = memory.get(index, 0) + _bytes(process.get("memory"))
    kernels = []
    listed = snapshot.get("kernels")
    for kernel in (listed if isinstance(listed, list) else ())[:MAX_KERNELS_PER_USER]:
        if not isinstance(kernel, dict) or not isinstance(kernel.get("kernel_id"), str):
            continue
        memory_by_gpu = by_kernel.get(kernel["kernel_id"], {})
        reported = kernel.get("reported_gpu_memory")
        gpu_memory = sum(memory_by_gpu.values()) or _bytes(kernel.get("gpu_memory"))
        if not gpu_memory and isinstance(reported, dict):  # containers: the kernel's own report
            gpu_memory = sum(_bytes(v) for v in reported.values())
        kernels.append({
            "kernel_id": kernel["kernel_id"][:64],
            "notebook": _text(kernel.get("notebook")),
            "execution_state": _text(kernel.get("execution_state"), 32),
            "idle_s": _finite(kernel.get("idle_s")),
            "idle": kernel.get("idle") is True,
            "cull_in_s": _finite(kernel.get("cull_in_s")),
            "gpu_memory": gpu_memory,
            "memory_by_gpu": memory_by_gpu,
        })
    kernels.sort(key=lambda k: (-k["gpu_memory"], k["notebook"] or "", k["kernel_id"]))
    return kernels


def console(devices: Snapshot | None, history: dict[str, Any], servers: list[UserServer],
            viewer: str, role: str) -> dict[str, Any]:
    """The console's JSON for ``viewer`` with ``role`` ("admin" or "read"), privacy applied."""
    admin = role == "admin"
    series = {gpu["uuid"]: gpu for gpu in history.get("gpus", [])}
    gpus = []
    for gpu in devices.gpus if devices is not None else ():
        past = series.get(gpu.uuid, {})
        gpus.append({
            "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name,
            "memory_total": gpu.memory_total, "memory_used": gpu.memory_used,
            "utilization": gpu.utilization, "error": gpu.error,
            "history": {key: past.get(key, []) for key in ("t", "utilization", "memory")},
        })
    users = []
    for server in sorted(servers, key=lambda s: s.user):
        kernels = user_kernels(server.snapshot) if server.snapshot is not None else []
        mine = server.user == viewer
        if not (admin or mine):
            for kernel in kernels:
                kernel["kernel_id"] = None
                kernel["notebook"] = None
        total: dict[str, int] = {}
        for kernel in kernels:
            for index, memory in kernel["memory_by_gpu"].items():
                total[index] = total.get(index, 0) + memory
        users.append({
            "name": server.user,
            "server_url": server.server_url if (admin or mine) else None,
            "error": server.error,
            "gpu_memory": sum(k["gpu_memory"] for k in kernels),
            "memory_by_gpu": total,
            "kernels": kernels,
        })
    return {
        "timestamp": devices.timestamp if devices is not None else None,
        "viewer": viewer,
        "admin": admin,
        "simulated": devices.simulated if devices is not None else False,
        "nvml_available": devices.nvml_available if devices is not None else False,
        "error": devices.error if devices is not None else "no GPU sample yet",
        "warnings": list(devices.warnings) if devices is not None else [],
        "gpus": gpus,
        "users": users,
    }
