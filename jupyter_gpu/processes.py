"""Who a GPU process belongs to: user, program name and (for this user only) command line.

NVML reports PIDs only; the rest comes from the operating system through psutil. Lookups are
cached per PID for ``CACHE_TTL_S`` (a snapshot every second must not re-read /proc for every
process) and dropped as soon as the PID leaves the GPUs, which bounds both the cache and the time a
reused PID could be mistaken for its predecessor. Other users' command lines are never read, let
alone returned.
"""

from __future__ import annotations

import getpass
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import psutil

from . import simulate

CACHE_TTL_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class ProcessIdentity:
    user: str | None
    name: str | None
    command: str | None  # only for processes of the user running jupyter_gpu


def current_user() -> str | None:
    """The name of the user this process runs as."""
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid()) if hasattr(os, "getuid") else None


class PidCache(Generic[T]):
    """``lookup(pid)`` results, each kept for ``ttl_s`` seconds; safe to use from several threads.

    Callers drop the PIDs that left the GPUs with :meth:`forget_all_but` after every snapshot, which
    keeps the cache as small as the set of GPU processes.
    """

    def __init__(self, lookup: Callable[[int], T], ttl_s: float = CACHE_TTL_S) -> None:
        self.lookup = lookup
        self.ttl_s = ttl_s
        self._cache: dict[int, tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, pid: int) -> T:
        now = time.monotonic()
        cached = self._cache.get(pid)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        value = self.lookup(pid)
        with self._lock:
            self._cache[pid] = (now, value)
        return value

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop the entries of every PID not in ``pids``."""
        with self._lock:
            for pid in [pid for pid in self._cache if pid not in pids]:
                del self._cache[pid]


class ProcessDirectory:
    """Cached PID → :class:`ProcessIdentity` lookups, safe to use from several threads."""

    def __init__(self, ttl_s: float = CACHE_TTL_S) -> None:
        self.me = current_user()
        self._identities = PidCache(self._lookup, ttl_s)

    def identify(self, pid: int) -> ProcessIdentity:
        return self._identities.get(pid)

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop cached entries of processes no longer on any GPU (keeps the cache bounded)."""
        self._identities.forget_all_but(pids)

    def _lookup(self, pid: int) -> ProcessIdentity:
        override = self._simulated_identity(pid)
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                user = process.username()
                name = process.name()
        except (psutil.Error, OSError):
            if override is not None:
                return ProcessIdentity(user=override[0], name=override[1], command=None)
            return ProcessIdentity(user=None, name=None, command=None)
        if override is not None:
            user = override[0] or user
            name = override[1] or name
        command = None
        if user is not None and user == self.me:
            try:
                command = " ".join(process.cmdline()) or None
            except (psutil.Error, OSError):
                command = None
        return ProcessIdentity(user=user, name=name, command=command)

    @staticmethod
    def _simulated_identity(pid: int) -> tuple[str | None, str | None] | None:
        library = simulate.installed()
        if library is None:
            return None
        return library.source.current().process_identity(pid)
