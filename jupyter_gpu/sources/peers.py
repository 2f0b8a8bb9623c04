"""The user's other kernels, as a kernel can learn them: notebook name and idle time per PID.

Two sources, best first:

1. **The server extension**, when the Jupyter server that started this kernel runs it. The kernel
   finds its server through jupyter_server's runtime files: the kernel's connection file lies in the
   server's runtime directory, next to ``jpserver-<pid>.json`` (written by the server, readable by
   its user only), which holds the server's URL and token. The server is the one whose PID is an
   ancestor of this kernel. The kernel then asks ``GET {base_url}jupyter-gpu/snapshot`` with that
   token (Jupyter's own authentication; found and asked by :mod:`.servers`' rule: the token only
   to this user's own listener), which maps each GPU process to its kernel, notebook and idle time.
2. **The kernels' own reports** (:mod:`jupyter_gpu.kernel.report`): every kernel with the
   extension loaded writes ``jupyter-gpu-kernel-<id>.json`` into the same directory, with its PID
   and notebook (``JPY_SESSION_NAME``). Idle time is not in them.

Every file and answer read here is untrusted input: runtime files must belong to this user (their
``st_uid``) and stay small; both are read with :mod:`jupyter_gpu.core.wire` (strict JSON, every
field type-checked); a malformed file or answer is skipped, and a malformed field of one kernel
is left out (None). Nothing here raises: without a server or reports the result is simply empty.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.wire import Fields, maybe, text
from .servers import ask, running_servers

__all__ = ["KernelPeer", "Peers", "find_peers", "parse_server_snapshot"]

_MAX_ANSWER = 8 * 1024 * 1024


@dataclass(frozen=True)
class KernelPeer:
    """A kernel of this user's Jupyter server (or one that reported itself)."""

    pid: int | None
    kernel_id: str | None = None
    notebook: str | None = None
    idle_s: float | None = None
    idle: bool | None = None


@dataclass(frozen=True)
class Peers:
    """Kernels by the PIDs NVML may show (a kernel's child processes too, from the server)."""

    by_pid: dict[int, KernelPeer] = field(default_factory=dict)
    source: str = "none"  # "server extension", "kernel reports" or "none"
    own_kernel_id: str | None = None


_PID = (1, 2**31 - 1)


def _list(fields: Fields | None, name: str, limit: int) -> list[Any]:
    """The first ``limit`` entries of a list field; [] when it is missing or not a list."""
    return (maybe(fields.items, name, 2**62, []) or [])[:limit] if fields is not None else []


def _notebook_name(session: Any) -> str | None:
    """A kernel's ``JPY_SESSION_NAME`` (the notebook's full path) as a name a person recognises."""
    name = maybe(text, session, "session", 4096)
    return os.path.basename(name) or name if name else None


def parse_server_snapshot(data: Any) -> dict[int, KernelPeer]:
    """PID → kernel from the server's ``jupyter-gpu/snapshot`` answer (see docs/server.md).

    Lenient: a kernel or process entry without a usable id is skipped, a bad optional field of
    one (notebook, idle time) is None; never raises."""
    peers: dict[int, KernelPeer] = {}
    top = maybe(Fields, data)
    by_id: dict[str, KernelPeer] = {}
    for kernel in _list(top, "kernels", 10_000):
        fields = maybe(Fields, kernel)
        kernel_id = maybe(fields.text, "kernel_id", 256) if fields is not None else None
        if fields is None or kernel_id is None:
            continue
        peer = KernelPeer(
            pid=maybe(fields.integer, "pid", *_PID),
            kernel_id=kernel_id,
            notebook=maybe(fields.text, "notebook", 4096),
            idle_s=maybe(fields.number, "idle_s", 0),
            idle=maybe(fields.boolean, "idle"),
        )
        by_id[kernel_id] = peer
        if peer.pid is not None:
            peers[peer.pid] = peer
    for gpu in _list(top, "gpus", 1024):
        for process in _list(maybe(Fields, gpu), "processes", 2**62):
            fields = maybe(Fields, process)
            if fields is None or fields.raw("own", None) is not True:
                continue
            pid, kernel_id = maybe(fields.integer, "pid", *_PID), maybe(fields.text, "kernel_id", 256)
            if pid is None or kernel_id is None:
                continue
            known = by_id.get(kernel_id)
            peers[pid] = KernelPeer(
                pid=pid,
                kernel_id=kernel_id,
                notebook=maybe(fields.text, "notebook", 4096) or (known.notebook if known else None),
                idle_s=maybe(fields.number, "idle_s", 0),
                idle=maybe(fields.boolean, "idle"),
            )
    return peers


def _from_reports(runtime_dir: Path) -> dict[int, KernelPeer]:
    """This user's kernels from their own reports (validated like the server reads them).

    A report counts only when it is a file of this user and the process that wrote it still runs:
    its PID and start time name a process here now. A report without a start time never counts:
    its key would equal that of any PID with no process here (an exited kernel's, or a host PID
    NVML shows inside a container), so a stale file could name another user's process as one of
    this user's kernels. Every report in the folder is read (no cap): the folder can hold
    thousands left by killed kernels (``/tmp`` for kernels started by a bare KernelManager), and
    the live kernel's report must not be the one dropped.
    """
    from .kernel_reports import read_reports
    from .processes import process_key

    peers: dict[int, KernelPeer] = {}
    owner = os.getuid() if hasattr(os, "getuid") else None
    for report in read_reports(runtime_dir, owner=owner).values():
        if report.start_time is None or process_key(report.pid) != report.key:
            continue  # its kernel is gone, the PID now belongs to another process, or it cannot tell
        peer = KernelPeer(pid=report.pid, kernel_id=report.kernel_id, notebook=_notebook_name(report.session))
        for pid in (report.pid, *report.nvml_pids):
            peers[pid] = peer
    return peers


def find_peers(timeout_s: float = 1.0) -> Peers:
    """This user's kernels by PID: from the server extension when reachable, else the kernel
    reports. Never raises; empty outside a Jupyter kernel."""
    try:
        from .kernel_reports import kernel_identity

        own_id, runtime_dir = kernel_identity()
        if runtime_dir is None:
            return Peers()
        for server in running_servers(runtime_dir, ancestors_only=True)[:1]:  # the one that started this kernel
            try:
                answer = ask(server, "jupyter-gpu/snapshot", timeout_s, _MAX_ANSWER)
                peers = {pid: peer for pid, peer in parse_server_snapshot(answer).items() if peer.kernel_id != own_id}
                peers.pop(os.getpid(), None)
                return Peers(peers, "server extension", own_id)
            except Exception:
                pass  # extension not loaded (404), slow, or unreachable: fall back to the reports
        peers = {pid: peer for pid, peer in _from_reports(runtime_dir).items() if peer.kernel_id != own_id}
        peers.pop(os.getpid(), None)
        return Peers(peers, "kernel reports", own_id)
    except Exception:
        return Peers()
