"""Kernel reports, read: the files kernels write about themselves, parsed as untrusted input.

The format, and why kernels write them, is described in :mod:`jupyter_gpu.kernel.report` (the
writer, part of the kernel face). This module is the server's side (and that of anything else that
reads them, such as :mod:`jupyter_gpu.sources.peers`): :class:`ReportReader` reads each file with
:mod:`jupyter_gpu.core.wire` (schema, types, sizes, nesting, finite numbers) and drops a bad report
with one log line; :func:`kernel_identity` tells a
kernel its own id and the folder its report goes to.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.wire import Fields, WireError, integer, loads, number
from .processes import process_owner, process_start

log = logging.getLogger(__name__)

__all__ = [
    "REPORT_PREFIX",
    "REPORT_VERSION",
    "KernelReport",
    "ReportError",
    "ReportReader",
    "kernel_identity",
    "parse_report",
    "read_reports",
    "remove_dead_reports",
]

REPORT_PREFIX = "jupyter-gpu-kernel-"
REPORT_VERSION = 1


def kernel_identity() -> tuple[str | None, Path | None]:
    """This kernel's id and the folder of its connection file, or (None, None) outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        connection_file = Path(get_connection_file())
    except Exception:
        return None, None
    stem = connection_file.stem
    kernel_id = stem[len("kernel-") :] if stem.startswith("kernel-") else stem
    return kernel_id, connection_file.parent


# -- in the server


MAX_REPORT_BYTES = 64 * 1024
MAX_ENTRIES = 256
MAX_TEXT = 4096
MAX_BYTES_VALUE = 2**53  # 8 PiB: more than any GPU, still exact in a float
MAX_DEPTH = 16  # nesting of a report's JSON (the format needs 3)


class ReportError(WireError):
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
    pid_namespace: str | None = None  # the writer's /proc/self/ns/pid link ("pid:[4026531836]"), if known

    @property
    def key(self) -> tuple[int, int | float | None]:
        """(pid, start time) of the process that wrote the report."""
        return self.pid, self.start_time


def parse_report(data: Any, kernel_id: str | None = None) -> KernelReport:
    """Check a decoded report; raise :class:`ReportError` naming the first bad field.

    ``kernel_id``: the id the file name says; the report must name the same kernel.
    """
    if not isinstance(data, dict):
        raise ReportError("a report must be a JSON object")
    version = data.get("version")
    if isinstance(version, bool) or version != REPORT_VERSION:
        raise ReportError(f"version must be {REPORT_VERSION}")
    try:
        fields = Fields(data)
        kid = fields.text("kernel_id", 256)
        if kernel_id is not None and kid != kernel_id:
            raise ReportError("kernel_id does not match the file name")
        pid = fields.integer("pid", 1, 2**32 - 1)
        start = fields.raw("start_time", None)
        if start is not None:
            number(start, "start_time")  # kept as written: the key compares it with the process's
        session = fields.optional_text("session", MAX_TEXT, 0)
        pids = tuple(
            integer(p, f"nvml_pids[{i}]", 1, 2**32 - 1)
            for i, p in enumerate(fields.items("nvml_pids", MAX_ENTRIES, default=[]))
        )
        memory = tuple(
            (key, int(number(value, f"gpu_memory[{key[:40]!r}]", 0, MAX_BYTES_VALUE)))
            for key, value in fields.mapping("gpu_memory", MAX_ENTRIES, 256, default={}).items()
        )
        timestamp = fields.number("timestamp", 0)
        namespace = fields.optional_text("pid_namespace", 256, 0)
    except ReportError:
        raise
    except WireError as error:
        raise ReportError(str(error)) from None
    return KernelReport(
        kernel_id=kid,
        pid=pid,
        start_time=start,
        session=session,
        nvml_pids=pids,
        gpu_memory=memory,
        timestamp=timestamp,
        pid_namespace=namespace,
    )


class ReportReader:
    """Reads and validates the kernel reports in a folder, re-parsing only files whose stamp changed.

    A bad report (not JSON, too large, a wrong type, NaN or Infinity, a file named after another
    kernel, not a regular file) is dropped with one warning in the log, once per version of the
    file. So is a **forged** one: a report counts only if its file belongs to the user the process
    it names runs as (the file's owner is the effective uid of the process with that PID and start
    time, :func:`jupyter_gpu.sources.processes.process_owner`). In a runtime directory other users
    can write (mode 1777), another user can read a victim kernel's PID and start time in ``/proc``
    and write a report claiming 40 GiB for it, to get the idle kernel culled; the file is theirs,
    not the kernel's owner's, so it is dropped. A report naming a process that no longer runs is
    dropped silently (it would match no kernel anyway).
    """

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, ...], KernelReport | None]] = {}
        self._refused: dict[Path, tuple[int, ...]] = {}  # forged reports already logged, by stamp

    def read(self, folder: str | os.PathLike[str], owner: int | None = None) -> dict[str, KernelReport]:
        """kernel_id → report, for every valid report in ``folder`` (see the class docstring).

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
            self._refused.pop(path, None)
        return reports

    def read_one(self, path: Path) -> KernelReport | None:
        """The valid report in ``path`` written by the process it names, or None (missing, bad:
        logged once, forged: logged once, or naming a process that no longer runs)."""
        parsed = self._parse(path)
        if parsed is None:
            return None
        stamp, report = parsed
        if report is None:
            return None
        writer = process_owner(report.pid, report.start_time)
        if writer is None:
            return None  # no such process now: a stale report, which matches no kernel
        if writer != stamp[0]:
            if self._refused.get(path) != stamp:
                self._refused[path] = stamp
                log.warning(
                    "jupyter_gpu: ignoring kernel report %s: the file belongs to uid %d, the process it names "
                    "(PID %d) runs as uid %d",
                    path.name,
                    stamp[0],
                    report.pid,
                    writer,
                )
            return None
        return report

    def parse_file(self, path: Path) -> KernelReport | None:
        """The report in ``path`` as written, whoever wrote it and whether its process runs or not
        (the server's clean-up of its own files); see :meth:`read_one` for reports that count."""
        parsed = self._parse(path)
        return None if parsed is None else parsed[1]

    def _parse(self, path: Path) -> tuple[tuple[int, ...], KernelReport | None] | None:
        """(stamp, report or None if bad) of the regular file at ``path``; None if there is none.

        The stamp is (owner uid, device, inode, size, modification time): a file replaced by
        another user's, or rewritten, is parsed afresh. The file is opened without following a link
        and without blocking (a FIFO cannot hang the sampler), and its owner is taken from the open
        file, so the owner checked is that of the bytes parsed."""
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        stamp = (info.st_uid, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached
        report: KernelReport | None = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as file:
                info = os.fstat(file.fileno())
                stamp = (info.st_uid, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
                if not stat.S_ISREG(info.st_mode):
                    return None
                if info.st_size > MAX_REPORT_BYTES:
                    raise ReportError(f"larger than {MAX_REPORT_BYTES // 1024} KiB")
                raw = file.read(MAX_REPORT_BYTES + 1)
            data = loads(raw, max_bytes=MAX_REPORT_BYTES, max_depth=MAX_DEPTH)
            report = parse_report(data, path.name[len(REPORT_PREFIX) : -len(".json")])
        except FileNotFoundError:
            return None
        except (OSError, WireError) as error:  # ReportError is a WireError
            log.warning("jupyter_gpu: ignoring kernel report %s: %s", path.name, str(error)[:200])
        self._cache[path] = (stamp, report)
        return stamp, report


def remove_dead_reports(folder: str | os.PathLike[str], reader: ReportReader | None = None) -> list[str]:
    """Delete the reports in ``folder`` that kernels which no longer run left behind; their kernel ids.

    Only this user's regular files, only reports whose writer (PID and start time) no longer runs
    in this PID namespace; bad files, reports without a start time and reports from another PID
    namespace are left alone. Run by the server at start (its runtime directory) and by a kernel
    when it first writes its report (its connection file's folder, ``/tmp`` for kernels of a bare
    ``KernelManager``, nbclient, papermill): a kernel killed outright (SIGKILL, the OOM killer,
    ipykernel's parent poller calling ``os._exit``) cannot remove its own report.
    """
    reader = reader or ReportReader()
    try:
        namespace: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = None
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    removed = []
    for path in Path(folder).glob(f"{REPORT_PREFIX}*.json"):
        try:
            if os.stat(path, follow_symlinks=False).st_uid != uid:
                continue
            report = reader.parse_file(path)  # the one parse, through core.wire
            if report is None or report.start_time is None or report.pid_namespace != namespace:
                continue
            if process_start(report.pid) == report.start_time:
                continue  # its kernel still runs (a server restarted next to running kernels)
            path.unlink()
            removed.append(report.kernel_id)
        except OSError:
            continue
    return removed


def read_reports(folder: str | os.PathLike[str], owner: int | None = None) -> dict[str, KernelReport]:
    """kernel_id → report for every kernel report in ``folder`` (uncached; see :class:`ReportReader`).

    Every report is read, however many there are: a folder where killed kernels left thousands of
    reports still yields the live kernel's (see :func:`jupyter_gpu.sources.peers.find_peers`)."""
    return ReportReader().read(folder, owner)
