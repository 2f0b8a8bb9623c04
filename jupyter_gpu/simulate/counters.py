"""Counting NVML calls across processes (opt-in: ``JUPYTER_GPU_SIMULATE_CALLS_DIR``).

Counting calls: every simulated library counts its calls per symbol (:attr:`SimulatedNvmlLibrary.calls`,
this process only). With ``JUPYTER_GPU_SIMULATE_CALLS_DIR`` set to a directory, each process also
keeps its total in its own file there (``<pid>-<start>.nvml-calls``, 8 bytes, mmap'd, current at
every call), and :func:`calls_in` sums every process's: a JupyterHub's service, user servers and
kernels, even those of other users (make the directory mode 1777). Unset, nothing is counted in
files and the calls cost what they cost without it.

A JupyterHub runs its service, user servers and kernels as separate processes, several of them
as other system users; ``SimulatedNvmlLibrary.calls`` sees one process only. With the variable
set, every process whose simulated library is created keeps one file in that directory,
``<pid>-<start>.nvml-calls``: 8 bytes, an unsigned count in native byte order, mmap'd shared and
incremented on every call, so it is current while the process runs and stays after it exits.
PID + start time (clock ticks since boot) name a process uniquely even after its PID is reused.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import sys
import threading
from collections.abc import Callable
from stat import S_ISREG

CALLS_DIR_VAR = "JUPYTER_GPU_SIMULATE_CALLS_DIR"
"""A directory where every process's simulated library counts its NVML calls (see :func:`calls_in`)."""

CALLS_SUFFIX = ".nvml-calls"
_CALLS_NAME = re.compile(r"([0-9]{1,10})-([0-9]{1,20})" + re.escape(CALLS_SUFFIX))
_COUNTER_BYTES = 8


class _ProcessCallCounter:
    """This process's count in its mmap'd file; ``add`` is a lock and an 8-byte store."""

    def __init__(self, mapping: mmap.mmap | None, path: str) -> None:
        self.path = path
        self._mapping = mapping  # kept alive as long as the cell that points into it
        self._cell = ctypes.c_uint64.from_buffer(mapping) if mapping is not None else None
        self._lock = threading.Lock()

    def add(self) -> None:
        cell = self._cell
        if cell is not None:
            with self._lock:  # threads of one process (the sampler, HTTP handlers) share the cell
                cell.value += 1


_process_counters: dict[str, _ProcessCallCounter] = {}
_process_counters_lock = threading.Lock()


def _forget_process_counters() -> None:
    """In a forked child: its calls go to a file of its own, not its parent's (PID + start differ)."""
    global _process_counters_lock
    _process_counters.clear()
    _process_counters_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_process_counters)


def _process_start() -> int:
    """This process's start time as :func:`jupyter_gpu.sources.processes.process_start` reads it (clock
    ticks since boot on Linux; elsewhere psutil's creation time, here in microseconds): with the
    PID, a name no later process can take."""
    from ..sources.processes import process_start

    start = process_start(os.getpid())
    return round(start * 1_000_000) if isinstance(start, float) else start or 0


def call_ticker(directory: str) -> Callable[[], None]:
    """The function a counted callback runs first: add one to this process's file in ``directory``."""

    def tick() -> None:
        counter = _process_counters.get(directory)
        if counter is None:
            counter = _open_process_counter(directory)
        counter.add()

    return tick


def _open_process_counter(directory: str) -> _ProcessCallCounter:
    """Create (or, after an ``exec``, reopen) this process's counter file; on failure say so once
    on stderr and count nothing (NVML itself keeps working)."""
    with _process_counters_lock:
        counter = _process_counters.get(directory)
        if counter is not None:
            return counter
        name = f"{os.getpid()}-{_process_start()}{CALLS_SUFFIX}"
        path = os.path.join(directory, name)
        try:
            mapping = _map_counter_file(directory, name)
        except OSError as error:
            print(
                f"jupyter_gpu: NVML calls not counted in {CALLS_DIR_VAR}={directory!r}: "
                f"{name}: {error.strerror or error}",
                file=sys.stderr,
                flush=True,
            )
            mapping = None
        counter = _ProcessCallCounter(mapping, path)
        _process_counters[directory] = counter
        return counter


def _map_counter_file(directory: str, name: str) -> mmap.mmap:
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=directory_fd)
            try:
                os.fchmod(fd, 0o644)  # readable by the one who sums, whatever this process's umask
                os.ftruncate(fd, _COUNTER_BYTES)
            except OSError:
                os.close(fd)
                raise
        except FileExistsError:
            # Our own file from before an exec (same PID and start time), or a trap another user
            # set in a shared directory: only a regular 8-byte file of our own is used.
            fd = os.open(name, flags, dir_fd=directory_fd)  # O_NOFOLLOW: a symlink fails (ELOOP)
            info = os.fstat(fd)
            if not S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size != _COUNTER_BYTES:
                os.close(fd)
                raise OSError(f"exists and is not this process's own {_COUNTER_BYTES}-byte file") from None
    finally:
        os.close(directory_fd)
    try:
        return mmap.mmap(fd, _COUNTER_BYTES)  # MAP_SHARED: the count is in the file at once
    finally:
        os.close(fd)


def calls_by_process(directory: str | os.PathLike[str]) -> dict[tuple[int, int], int]:
    """NVML calls counted in ``directory`` (see :data:`CALLS_DIR_VAR`), per (PID, start time).

    The files are other processes' (other users'), so they are read as untrusted input: only names
    ``<pid>-<start>.nvml-calls``, only regular files of exactly 8 bytes, opened without following
    symlinks and without blocking (a FIFO cannot hang the reader), each inode once (a hard link
    does not count twice); anything else is skipped. Processes that exited keep their count.
    Raises OSError when the directory itself cannot be read.
    """
    counts: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in os.listdir(directory_fd):
            match = _CALLS_NAME.fullmatch(name)
            if match is None:
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
            except OSError:  # a symlink (ELOOP), gone since the listing, not readable
                continue
            try:
                info = os.fstat(fd)
                if not S_ISREG(info.st_mode) or info.st_size != _COUNTER_BYTES or (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                data = os.pread(fd, _COUNTER_BYTES, 0)
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(data) == _COUNTER_BYTES:
                counts[(int(match[1]), int(match[2]))] = int.from_bytes(data, sys.byteorder)
    finally:
        os.close(directory_fd)
    return counts


def calls_in(directory: str | os.PathLike[str]) -> int:
    """The NVML calls every process counted in ``directory`` so far, summed (see
    :func:`calls_by_process`). Take it before and after a window; the difference is the window's
    calls, including processes that started or exited in between."""
    return sum(calls_by_process(directory).values())
