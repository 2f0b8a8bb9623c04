"""Kernels telling the server about themselves: the attribution fallback for containers.

Inside a container NVML reports *host* PIDs, which exist nowhere in the container's PID namespace,
so the server extension cannot map GPU processes to kernels by PID. A kernel still knows who it is:
its PID, its notebook (``JPY_SESSION_NAME``), and how much GPU memory its framework's allocator holds.

The mechanism, which needs no user code:

1. When the ``jupyter_gpu`` IPython extension is loaded in a kernel (admins autoload it with
   ``c.InteractiveShellApp.extensions = ["jupyter_gpu"]``), this module writes a small JSON *kernel
   report* next to the kernel's connection file (which lies in the server's runtime directory):
   ``jupyter-gpu-kernel-<kernel_id>.json``. It writes it once at load and again after any cell
   whose result changed it (cheap: frameworks are looked up in ``sys.modules``, never imported). The
   file is removed when the kernel ends by any path but SIGKILL (:mod:`.exit_hooks`).
2. The server extension reads these files on its sampling thread (only files whose modification time
   changed) and shows the memory each kernel reports; see ``docs/server.md``.

Report format (version 1)::

    {"version": 1, "kernel_id": str, "pid": int, "start_time": int | float | null,
     "nspid": [int, ...] | null,
     "pid_namespace": str | null, "hostname": str, "session": str | null,
     "nvml_pids": [int, ...],               # NVML-visible PIDs of this kernel, when known (else [])
     "gpu_memory": {key: bytes},            # key: a GPU UUID ("GPU-...", PyTorch), "cuda:<id>" (JAX)
                                            # or TensorFlow's logical device ("/device:GPU:0")
     "frameworks": {"torch": {key: bytes}, "tensorflow": {...}, "jax": {...}},
     "timestamp": float}

Framework figures are what the allocator holds (PyTorch ``memory_reserved``, TensorFlow
``get_memory_info()["current"]``, JAX ``bytes_in_use``); they exclude the CUDA context (a few hundred
MiB per process and GPU), so they are lower than what NVML shows. ``nvml_pids`` is for setups where
something knows the host PID (it can be passed to :func:`write_report`); the kernel cannot find it
out by itself.

The server treats every report as untrusted input (any code in the kernel can write the file):
:class:`ReportReader` checks the schema, types, sizes and finite numbers and drops a bad report with
one log line; the server then uses a report only while ``pid`` and ``start_time`` (see
:func:`jupyter_gpu.sources.processes.process_start`) name the running process of that kernel, so a report
left behind by a killed kernel never describes its successor. The server deletes a kernel's report
when the kernel is shut down, restarted, or the server stops.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.files import replace_file
from ..core.i18n import N_
from ..sources import kernel_reports
from ..sources.kernel_reports import (
    REPORT_PREFIX,
    REPORT_VERSION,
    KernelReport,
    ReportError,
    ReportReader,
    kernel_identity,
    parse_report,
    read_reports,
)

__all__ = [
    "REPORT_PREFIX",
    "KernelReport",
    "ReportError",
    "ReportReader",
    "build_report",
    "framework_memory",
    "kernel_identity",
    "parse_report",
    "read_reports",
    "register",
    "remove_report",
    "unregister",
    "write_report",
]

_state: dict[str, Any] = {"path": None, "last": None, "callback": None, "nvml_pids": (), "gpu_memory": None}
_lock = threading.Lock()


# -- in the kernel


@functools.cache
def _nspid() -> tuple[list[int] | None, str | None]:
    """This process's PID in each nested PID namespace, and its PID namespace's identity.

    Fixed for the life of the process, so read once (the report is rebuilt after every cell)."""
    nspid = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                nspid = [int(value) for value in line.split()[1:]]
    except (OSError, ValueError):
        pass
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = None
    return nspid, namespace


@functools.cache
def _own_start() -> int | float | None:
    from ..sources.processes import process_start

    return process_start(os.getpid())


def framework_memory() -> dict[str, dict[str, int]]:
    """GPU memory held by each framework that has initialized its GPUs, per device.

    What the framework's allocator holds where it tells (PyTorch's reserved memory), else what is in
    use. The counters come from :mod:`jupyter_gpu.frameworks`, which never imports a framework and
    never initialises a GPU: a framework that has not touched the GPU yet reports nothing.
    """
    if not any(name in sys.modules for name in ("torch", "tensorflow", "jax")):
        return {}  # nothing to ask, and no need to load the adapters (this runs after every cell)
    from ..frameworks import framework_memory as counters

    return {
        framework: {device: memory.in_use if memory.held is None else memory.held for device, memory in devices.items()}
        for framework, devices in counters().items()
    }


def build_report(
    kernel_id: str, nvml_pids: Iterable[int] = (), gpu_memory: dict[str, int] | None = None
) -> dict[str, Any]:
    """The report of this process (see the module docstring); ``gpu_memory`` adds to the frameworks'."""
    frameworks = framework_memory()
    total: dict[str, int] = {}
    for per_gpu in frameworks.values():
        for key, used in per_gpu.items():
            total[key] = total.get(key, 0) + used
    for key, used in (gpu_memory or {}).items():
        total[key] = total.get(key, 0) + int(used)
    nspid, namespace = _nspid()
    return {
        "version": REPORT_VERSION,
        "kernel_id": kernel_id,
        "pid": os.getpid(),
        "start_time": _own_start(),
        "nspid": nspid,
        "pid_namespace": namespace,
        "hostname": socket.gethostname(),
        "session": os.environ.get("JPY_SESSION_NAME"),
        "nvml_pids": sorted(int(pid) for pid in nvml_pids),
        "gpu_memory": total,
        "frameworks": frameworks,
        "timestamp": time.time(),
    }


def write_report(
    nvml_pids: Iterable[int] | None = None, gpu_memory: dict[str, int] | None = None, force: bool = False
) -> Path | None:
    """Write (or refresh) this kernel's report; returns its path, or None outside a Jupyter kernel.

    Written privately (mode 0600, :func:`jupyter_gpu.core.files.replace_file`). Before the first
    write into a folder, the reports that this user's killed kernels left there are deleted
    (:func:`jupyter_gpu.sources.kernel_reports.remove_dead_reports`): nobody else cleans ``/tmp``.

    ``nvml_pids`` and ``gpu_memory`` (bytes per GPU UUID, for a framework jupyter_gpu does not know)
    are remembered: the refresh after each cell keeps them until they are given again. Skips the
    write when nothing but the timestamp changed, unless ``force``.
    """
    kernel_id, folder = kernel_reports.kernel_identity()  # looked up here: tests and benchmarks stand in for it
    if kernel_id is None or folder is None:
        return None
    if nvml_pids is not None:
        _state["nvml_pids"] = tuple(nvml_pids)
    if gpu_memory is not None:
        _state["gpu_memory"] = dict(gpu_memory)
    report = build_report(kernel_id, _state["nvml_pids"], _state["gpu_memory"])
    comparable = {key: value for key, value in report.items() if key != "timestamp"}
    path = folder / f"{REPORT_PREFIX}{kernel_id}.json"
    with _lock:
        if not force and _state["last"] == comparable and _state["path"] == path:
            return path
        if _state["path"] != path:  # the first report into this folder: clear what killed kernels left
            kernel_reports.remove_dead_reports(folder)
        if not _replace_privately(path, json.dumps(report).encode()):
            return None
        _state["path"], _state["last"] = path, comparable
    return path


def _replace_privately(path: Path, data: bytes) -> bool:
    """Put ``data`` at ``path`` atomically, as a file only this user can read; False if it failed.

    The folder may be one other users can write (a kernel started with its connection file in
    ``/tmp``, as nbclient and papermill do): :func:`jupyter_gpu.core.files.replace_file` never
    writes through a planted link and leaves nothing behind on failure.
    """
    try:
        replace_file(path, data)
    except OSError:
        return False
    return True


def remove_report() -> None:
    """Delete this kernel's report file (at exit or when the extension is unloaded)."""
    path = _state.get("path")
    if path is not None:
        try:
            Path(path).unlink()
        except OSError:
            pass
        _state["path"] = _state["last"] = None


def register(ipython: Any) -> None:
    """Write the report now and after every cell; remove it when the kernel ends (exit, SIGTERM, SIGHUP,
    its parent's death: :mod:`.exit_hooks`). Part of ``%load_ext jupyter_gpu``."""
    from .exit_hooks import at_kernel_exit

    if _state["callback"] is not None:
        return

    def after_cell(*_args: Any) -> None:
        try:
            write_report()
        except Exception:  # a report that cannot be written is skipped quietly (it is written again next cell)
            pass

    from .hooks import guarded, on_cell_event

    _state["callback"] = after_cell
    on_cell_event(ipython, "post_run_cell", after_cell, N_("the kernel report"))  # guarded: nothing escapes
    at_kernel_exit(remove_report)
    guarded(after_cell, N_("the kernel report"))()


def unregister(ipython: Any) -> None:
    callback = _state["callback"]
    if callback is not None:
        from .hooks import off_cell_event

        off_cell_event(ipython, "post_run_cell", callback)
        _state["callback"] = None
    remove_report()
