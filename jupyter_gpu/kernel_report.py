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
:func:`jupyter_gpu.processes.process_start`) name the running process of that kernel, so a report
left behind by a killed kernel never describes its successor. The server deletes a kernel's report
when the kernel is shut down, restarted, or the server stops.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["REPORT_PREFIX", "KernelReport", "ReportError", "framework_memory", "parse_report", "read_reports",
           "register", "unregister", "write_report"]

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


@functools.cache
def _own_start() -> int | float | None:
    from .processes import process_start

    return process_start(os.getpid())


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


MAX_REPORT_BYTES = 64 * 1024
MAX_ENTRIES = 256
MAX_TEXT = 4096
MAX_BYTES_VALUE = 2**53  # 8 PiB: more than any GPU, still exact in a float


class ReportError(ValueError):
    """A kernel report that cannot be used; the message says which field and why, in one line."""


@dataclass(frozen=True)
class KernelReport:
    """A validated kernel report (see the module docstring for the file format)."""

    kernel_id: str
    pid: int
    start_time: int | float | None
    session: str | None
    nvml_pids: tuple[int, ...]
    gpu_memory: tuple[tuple[str, int], ...]  # (device key, bytes)
    timestamp: float

    @property
    def key(self) -> tuple[int, int | float | None]:
        """(pid, start time) of the process that wrote the report."""
        return self.pid, self.start_time


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def parse_report(data: Any, kernel_id: str | None = None) -> KernelReport:
    """Check a decoded report; raise :class:`ReportError` naming the first bad field.

    ``kernel_id``: the id the file name says; the report must name the same kernel.
    """
    if not isinstance(data, dict):
        raise ReportError("a report must be a JSON object")
    if data.get("version") != REPORT_VERSION:
        raise ReportError(f"version must be {REPORT_VERSION}")
    kid = data.get("kernel_id")
    if not isinstance(kid, str) or not kid or len(kid) > 256:
        raise ReportError("kernel_id must be a non-empty string")
    if kernel_id is not None and kid != kernel_id:
        raise ReportError("kernel_id does not match the file name")
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**32:
        raise ReportError("pid must be a positive whole number")
    start = data.get("start_time")
    if start is not None and not _finite(start):
        raise ReportError("start_time must be a finite number or null")
    session = data.get("session")
    if session is not None and (not isinstance(session, str) or len(session) > MAX_TEXT):
        raise ReportError(f"session must be a string of at most {MAX_TEXT} characters, or null")
    pids = data.get("nvml_pids", [])
    if (not isinstance(pids, list) or len(pids) > MAX_ENTRIES
            or not all(isinstance(p, int) and not isinstance(p, bool) and 0 < p < 2**32 for p in pids)):
        raise ReportError(f"nvml_pids must be a list of at most {MAX_ENTRIES} positive whole numbers")
    memory = data.get("gpu_memory", {})
    if not isinstance(memory, dict) or len(memory) > MAX_ENTRIES:
        raise ReportError(f"gpu_memory must be an object of at most {MAX_ENTRIES} entries")
    for key, value in memory.items():
        if len(key) > 256:
            raise ReportError("gpu_memory keys must be at most 256 characters")
        if not _finite(value) or not 0 <= value <= MAX_BYTES_VALUE:
            raise ReportError(f"gpu_memory[{key[:40]!r}] must be a finite number of bytes >= 0")
    timestamp = data.get("timestamp")
    if not _finite(timestamp) or timestamp < 0:
        raise ReportError("timestamp must be a finite number >= 0")
    return KernelReport(kernel_id=kid, pid=pid, start_time=start, session=session,
                        nvml_pids=tuple(pids), gpu_memory=tuple((k, int(v)) for k, v in memory.items()),
                        timestamp=float(timestamp))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


class ReportReader:
    """Reads and validates the kernel reports in a folder, re-parsing only files whose stamp changed.

    A bad report (not JSON, too large, a wrong type, NaN or Infinity, a file named after another
    kernel) is dropped with one warning in the log, once per version of the file.
    """

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int, int], KernelReport | None]] = {}

    def read(self, folder: str | os.PathLike[str], owner: int | None = None) -> dict[str, KernelReport]:
        """kernel_id → report, for every valid report in ``folder``.

        ``owner``: a user id; only regular files (not symbolic links) of that owner are read. A
        reader in a folder others can write to (the system's temporary folder, where kernels
        started by a bare ``jupyter_client.KernelManager`` put their connection files) passes its
        own, so another user's file cannot pose as one of its kernels.
        """
        reports: dict[str, KernelReport] = {}
        seen: set[Path] = set()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return reports
        for entry in entries:
            if not (entry.name.startswith(REPORT_PREFIX) and entry.name.endswith(".json")):
                continue
            if owner is not None:
                try:
                    if not entry.is_file(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != owner:
                        continue
                except OSError:
                    continue
            path = Path(entry.path)
            seen.add(path)
            report = self.read_one(path)
            if report is not None:
                reports[report.kernel_id] = report
        for path in [path for path in self._cache if path not in seen]:
            del self._cache[path]
        return reports

    def read_one(self, path: Path) -> KernelReport | None:
        """The valid report in ``path``, or None (missing, unchanged-and-bad, or bad: logged once)."""
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        report: KernelReport | None = None
        try:
            if stat.st_size > MAX_REPORT_BYTES:
                raise ReportError(f"larger than {MAX_REPORT_BYTES // 1024} KiB")
            with open(path, "rb") as file:
                raw = file.read(MAX_REPORT_BYTES + 1)
            data = json.loads(raw, parse_constant=_refuse_constant)
            report = parse_report(data, path.name[len(REPORT_PREFIX):-len(".json")])
        except FileNotFoundError:
            return None
        except RecursionError:
            log.warning("jupyter_gpu: ignoring kernel report %s: nested too deeply", path.name)
        except (OSError, ValueError) as error:  # ReportError and JSON errors are ValueErrors
            log.warning("jupyter_gpu: ignoring kernel report %s: %s", path.name, str(error)[:200])
        self._cache[path] = (stamp, report)
        return report


def read_reports(folder: str | os.PathLike[str], owner: int | None = None) -> dict[str, KernelReport]:
    """kernel_id → report for every kernel report in ``folder`` (uncached; see :class:`ReportReader`).

    Every report is read, however many there are: a folder where killed kernels left thousands of
    reports still yields the live kernel's (see :func:`jupyter_gpu.peers.find_peers`)."""
    return ReportReader().read(folder, owner)
