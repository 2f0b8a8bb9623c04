"""This server's report to the hub service (pure: no tornado, no jupyter_server, no I/O).

On a JupyterHub host the server pushes its kernel table to the jupyter-gpu service every interval
(``POST <service>/api/report``, with its own hub token: :func:`jupyter_gpu.sources.remote.push_report`,
wired by :mod:`.hub_pusher`). The format is the service's (:mod:`jupyter_gpu.hub.reports`): each
kernel with its notebook, state, idle clock and the PIDs of its process and descendants. The
service believes the PIDs only where its own NVML sample shows them owned by this user's account,
and computes idle and culling from the memory it checked; nothing here can claim GPU memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .attribution import KernelInfo

MAX_PIDS_PER_KERNEL = 1000  # the service's bound (hub.reports.MAX_PIDS_PER_KERNEL)


def report_body(
    kernels: Mapping[str, KernelInfo],
    pids: Mapping[str, list[int]],
    now: float,
    server: str,
    idle_threshold_s: float,
    cull_idle_after_s: float,
) -> dict[str, Any]:
    """The report of ``kernels`` (``pids``: each kernel's process and its descendants) at ``now``."""
    return {
        "server": server,
        "idle_threshold_s": idle_threshold_s,
        "cull_idle_after_s": cull_idle_after_s if cull_idle_after_s > 0 else None,
        "kernels": [
            {
                "kernel_id": kernel_id,
                "notebook": info.notebook,
                "execution_state": info.execution_state,
                "idle_s": info.idle_s(now),
                "cull_idle_s": info.cull_idle_s(info.idle_s(now)),
                "pids": pids.get(kernel_id, [])[:MAX_PIDS_PER_KERNEL],
            }
            for kernel_id, info in sorted(kernels.items())
        ],
    }


def shutdown_line(kernel_id: str, notebook: str | None, by: str, user: str) -> str:
    """The log line of a shutdown an admin asked for through the service."""
    where = f" ({notebook})" if notebook else ""
    return (
        f"jupyter_gpu: kernel {kernel_id}{where} of {user} shut down at the request of hub admin "
        f"{by[:256]!r} (through the jupyter-gpu service's console)"
    )
