"""This server's kernels as its kernel manager and session manager describe them (the event loop
reads them; :class:`jupyter_gpu.server.service.GpuService` keeps the table and decides when)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from ..sources.processes import process_start
from .attribution import KernelInfo
from .cell_activity import CellClock, CellWatch

log = logging.getLogger(__name__)


def kernel_pid(kernel: Any) -> int | None:
    """The PID of the kernel's process while it runs (None once it exited or when unknown)."""
    provisioner = getattr(kernel, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is not None and hasattr(process, "poll"):
        try:
            if process.poll() is not None:
                return None  # it died (killed, crashed): its PID may already be another process's
        except Exception:
            pass
    pid = getattr(provisioner, "pid", None)
    if pid is None:
        pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


async def session_notebooks(session_manager: Any) -> dict[str, str]:
    """kernel id -> the path of its session's notebook (empty when there is no session manager or
    listing the sessions fails: logged)."""
    notebooks: dict[str, str] = {}
    if session_manager is not None:
        try:
            for session in await session_manager.list_sessions():
                kernel = session.get("kernel") or {}
                if kernel.get("id") and session.get("path"):
                    notebooks[kernel["id"]] = session["path"]
        except Exception:
            log.exception("jupyter_gpu: listing sessions failed")
    return notebooks


def read_kernels(
    kernel_manager: Any,
    kernel_ids: Collection[str],
    notebooks: Mapping[str, str],
    old: Mapping[str, KernelInfo],
    cells: CellWatch | None = None,
) -> dict[str, KernelInfo]:
    """A :class:`KernelInfo` for each of ``kernel_ids`` the kernel manager still has (``old``: the
    previous table, whose start times are kept while a kernel keeps its PID).

    The idle figures (``last_activity``, ``execution_state``) are the kernel's cell clock from
    ``cells`` (:mod:`.cell_activity`: only cells count, never widget traffic); without one, or for
    a kernel whose IOPub cannot be watched, the kernel manager's own figures."""
    table: dict[str, KernelInfo] = {}
    for kernel_id in kernel_ids:
        try:
            kernel = kernel_manager.get_kernel(kernel_id)
        except KeyError:
            continue
        pid = kernel_pid(kernel)
        before = old.get(kernel_id)
        # The start time is read when a PID is first seen (right after the start event), so
        # a PID reused later by another process never takes the kernel's identity.
        start = (
            before.start if before is not None and before.pid == pid else (None if pid is None else process_start(pid))
        )
        state, last = idle_figures(kernel, None if cells is None else cells.follow(kernel_id, kernel, pid))
        table[kernel_id] = KernelInfo(
            kernel_id=kernel_id,
            name=getattr(kernel, "kernel_name", None),
            pid=pid,
            notebook=notebooks.get(kernel_id),
            execution_state=state,
            last_activity=last,
            start=start,
            connections=kernel_connections(kernel_manager, kernel_id),
        )
    return table


def kernel_connections(kernel_manager: Any, kernel_id: str) -> int | None:
    """How many websockets (browser tabs, consoles) are connected to the kernel now, as the kernel
    manager's public kernel model counts them (jupyter_server 2: ``kernel_model(id)["connections"]``,
    kept by its ``notify_connect``/``notify_disconnect``); None when it does not say."""
    try:
        count = kernel_manager.kernel_model(kernel_id).get("connections")
    except Exception:  # not a MappingKernelManager, or the kernel just went away
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def idle_figures(kernel: Any, clock: CellClock | None) -> tuple[str | None, float | None]:
    """(execution state, epoch seconds of the last activity) of ``kernel``: by its cell clock when
    it has one, else as the kernel manager records them."""
    manager_state = getattr(kernel, "execution_state", None)
    if clock is not None:
        return clock.execution_state(manager_state), clock.last_cell
    last = getattr(kernel, "last_activity", None)
    return manager_state, last.timestamp() if last is not None else None
