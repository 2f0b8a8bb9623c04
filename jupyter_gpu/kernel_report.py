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
   file is removed when the kernel exits.
2. The server extension reads these files on its sampling thread (only files whose modification time
   changed) and shows the memory each kernel reports; see ``docs/server.md``.

Report format (version 1)::

    {"version": 1, "kernel_id": str, "pid": int, "nspid": [int, ...] | null,
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

__all__ = ["REPORT_PREFIX", "framework_memory", "read_reports", "register", "unregister", "write_report"]

REPORT_PREFIX = "jupyter-gpu-kernel-"
REPORT_VERSION = 1

_state: dict[str, Any] = {"path": None, "last": None, "callback": None, "nvml_pids": (), "gpu_memory": None}
_lock = threading.Lock()


# -- in the kernel


def kernel_identity() -> tuple[str | None, Path | None]:
    """This kernel's id and the folder of its connection file, or (None, None) outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        connection_file = Path(get_connection_file())
    except Exception:
        return None, None
    stem = connection_file.stem
    kernel_id = stem[len("kernel-"):] if stem.startswith("kernel-") else stem
    return kernel_id, connection_file.parent


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


def framework_memory() -> dict[str, dict[str, int]]:
    """GPU memory held by each framework that has initialized its GPUs, per device.

    What the framework's allocator holds where it tells (PyTorch's reserved memory), else what is in
    use. The counters come from :mod:`jupyter_gpu.frameworks`, which never imports a framework and
    never initialises a GPU: a framework that has not touched the GPU yet reports nothing.
    """
    if not any(name in sys.modules for name in ("torch", "tensorflow", "jax")):
        return {}  # nothing to ask, and no need to load the adapters (this runs after every cell)
    from .frameworks import framework_memory as counters

    return {
        framework: {device: memory.in_use if memory.held is None else memory.held
                    for device, memory in devices.items()}
        for framework, devices in counters().items()
    }


def build_report(kernel_id: str, nvml_pids: Iterable[int] = (),
                 gpu_memory: dict[str, int] | None = None) -> dict[str, Any]:
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
        "nspid": nspid,
        "pid_namespace": namespace,
        "hostname": socket.gethostname(),
        "session": os.environ.get("JPY_SESSION_NAME"),
        "nvml_pids": sorted(int(pid) for pid in nvml_pids),
        "gpu_memory": total,
        "frameworks": frameworks,
        "timestamp": time.time(),
    }


def write_report(nvml_pids: Iterable[int] | None = None, gpu_memory: dict[str, int] | None = None,
                 force: bool = False) -> Path | None:
    """Write (or refresh) this kernel's report; returns its path, or None outside a Jupyter kernel.

    ``nvml_pids`` and ``gpu_memory`` (bytes per GPU UUID, for a framework jupyter_gpu does not know)
    are remembered: the refresh after each cell keeps them until they are given again. Skips the
    write when nothing but the timestamp changed, unless ``force``.
    """
    kernel_id, folder = kernel_identity()
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
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(report))
            os.replace(tmp, path)
        except OSError:
            return None
        _state["path"], _state["last"] = path, comparable
    return path


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
    """Write the report now and after every cell; remove it at exit. Part of ``%load_ext jupyter_gpu``."""
    import atexit

    if _state["callback"] is not None:
        return

    def after_cell(*_args: Any) -> None:
        try:
            write_report()
        except Exception:  # a report must never break the user's cell
            pass

    _state["callback"] = after_cell
    ipython.events.register("post_run_cell", after_cell)
    atexit.register(remove_report)
    after_cell()


def unregister(ipython: Any) -> None:
    callback = _state["callback"]
    if callback is not None:
        try:
            ipython.events.unregister("post_run_cell", callback)
        except ValueError:
            pass
        _state["callback"] = None
    remove_report()


# -- in the server


class ReportReader:
    """Reads the kernel reports in a folder, re-parsing only files whose stamp changed."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}

    def read(self, folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
        """kernel_id → report, for every readable report in ``folder``."""
        reports: dict[str, dict[str, Any]] = {}
        seen: set[Path] = set()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return reports
        for entry in entries:
            if not (entry.name.startswith(REPORT_PREFIX) and entry.name.endswith(".json")):
                continue
            path = Path(entry.path)
            seen.add(path)
            try:
                stat = entry.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            cached = self._cache.get(path)
            if cached is None or cached[0] != stamp:
                try:
                    data = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if not isinstance(data, dict) or not isinstance(data.get("kernel_id"), str):
                    continue
                cached = (stamp, data)
                self._cache[path] = cached
            reports[cached[1]["kernel_id"]] = cached[1]
        for path in [path for path in self._cache if path not in seen]:
            del self._cache[path]
        return reports


def read_reports(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """kernel_id → report for every kernel report in ``folder`` (uncached; see :class:`ReportReader`)."""
    return ReportReader().read(folder)
