"""Who a GPU process belongs to: user, program name and (for this user only) command line.

NVML reports PIDs only; the rest comes from the operating system through psutil. PIDs are reused:
when a process exits, the kernel hands its number to the next process, possibly another user's.
So every fact remembered about a process is keyed by its **PID and start time**
(:func:`process_start`), and a reused PID is a new process at once: :class:`PidCache` is the one
place such facts are cached (identities here, process ancestry in the server). Entries also expire
after ``CACHE_TTL_S`` and are dropped as soon as the PID leaves the GPUs, which bounds the cache.
Other users' command lines are never read, let alone returned, and their program names are
withheld too (the same rule as the server's snapshot, for every face: ``jupyter-gpu status``, the
magics, the panel): another user's process shows its PID, user and memory only. An admin widens
this to program names with ``JUPYTER_GPU_SHOW_OTHER_NAMES=1`` (``jupyter-gpu status
--show-other-names``); command lines stay private whatever the setting.
"""

from __future__ import annotations

import getpass
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import EllipsisType  # ``...``: the caller has not read the start time
from typing import Generic, TypeVar

import psutil

CACHE_TTL_S = 30.0
SHOW_OTHER_NAMES_ENV = "JUPYTER_GPU_SHOW_OTHER_NAMES"


def show_other_names() -> bool:
    """Whether other users' program names may be shown (an admin's choice; default: no)."""
    return os.environ.get(SHOW_OTHER_NAMES_ENV, "").strip().lower() in ("1", "true", "yes")


T = TypeVar("T")

ProcessKey = tuple[int, "int | float | None"]
"""(pid, start time) — one process, never confused with a later process reusing the PID."""


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    user: str | None
    name: str | None
    command: str | None  # only for processes of the user running jupyter_gpu


def current_user() -> str | None:
    """The name of the user this process runs as: its real user id's account name, as psutil names
    the owner of any process (never ``$USER``/``$LOGNAME``, which code can set to anything)."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no pwd module (Windows), or a uid without an account
        pass
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid()) if hasattr(os, "getuid") else None


def _start_ticks(stat: bytes) -> int:
    """Field 22 of a ``/proc/<pid>/stat`` line (start time in clock ticks since boot); the command
    name before it may hold spaces and parentheses, so fields are counted after its last ``)``."""
    return int(stat[stat.rindex(b")") + 2 :].split(None, 20)[19])


def process_start(pid: int) -> int | float | None:
    """When process ``pid`` started, or None when no such process exists (or it cannot be read).

    On Linux the start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``: one small
    read, the same value for as long as the process lives, and the same in the process itself and
    in any reader in its PID namespace); elsewhere psutil's ``create_time()``. Compare values only
    with values from this function.
    """
    if _PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                data = file.read()
            return _start_ticks(data)
        except (OSError, ValueError, IndexError):
            return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError, ValueError):
        return None


def process_owner(pid: int, start: int | float | None = None) -> int | None:
    """The effective user id of process ``pid`` (the owner of the files it creates), or None.

    None when there is no such process here, it cannot be read (``/proc`` mounted ``hidepid``), or
    ``start`` is given and the process that has the PID now started at another time (the PID was
    reused). On Linux both are read through one handle on ``/proc/<pid>`` (the ``Uid:`` line of
    ``status``, whose second field is the effective uid, and ``stat``; see proc(5)), so they are
    facts about the same process even if it exits and its PID is reused meanwhile. Elsewhere psutil.
    """
    if _PROC:
        try:
            folder = os.open(f"/proc/{int(pid)}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (OSError, ValueError):
            return None
        try:
            with open(os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=folder), "rb") as file:
                status = file.read()
            uid = next(int(line.split()[2]) for line in status.splitlines() if line.startswith(b"Uid:"))
            if start is not None:
                with open(os.open("stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=folder), "rb") as file:
                    data = file.read()
                if _start_ticks(data) != start:
                    return None
            return uid
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        finally:
            os.close(folder)
    try:
        process = psutil.Process(pid)
        if start is not None and process.create_time() != start:
            return None
        return int(process.uids().effective)
    except (psutil.Error, OSError, ValueError, AttributeError):
        return None


_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")

#: ``(user, program name)`` of a PID the OS does not know, or None. Set by :mod:`jupyter_gpu.simulate`
#: while simulated GPUs are installed (their processes exist only in the scenario); None otherwise.
#: The simulation registers itself here so that this module, which it reads process start times
#: from, need not import it.
simulated_identity: Callable[[int], tuple[str | None, str | None] | None] | None = None


class ProcListing:
    """The PIDs listed in ``/proc``, listed at most once, when first needed: one listing serves
    every GPU of a snapshot (:func:`process_starts`' ``listing``), not one per GPU."""

    def __init__(self) -> None:
        self._pids: set[int] | None = None
        self._listed = False

    def pids(self) -> set[int] | None:
        """The PIDs of this namespace, or None where ``/proc`` cannot be listed."""
        if not self._listed:
            try:
                self._pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
            except OSError:
                self._pids = None
            self._listed = True
        return self._pids


def process_starts(pids: Iterable[int], listing: ProcListing | None = None) -> dict[int, int | float | None]:
    """:func:`process_start` of many PIDs at once.

    With many PIDs (thousands of GPU processes, or host PIDs that do not exist in this namespace)
    one listing of ``/proc`` answers "no such process" for the missing ones without a failed open
    each; pass ``listing`` to share one listing between calls of one sample.
    """
    pids = list(pids)
    if _PROC and len(pids) > 64:
        existing = (listing or ProcListing()).pids()
        if existing is not None:
            starts: dict[int, int | float | None] = dict.fromkeys(pids)  # in C: most are not here
            for pid in existing.intersection(starts):
                starts[pid] = process_start(pid)
            return starts
    return {pid: process_start(pid) for pid in pids}


def process_key(pid: int) -> ProcessKey:
    """``(pid, process_start(pid))``: the identity of the process that has this PID now."""
    return pid, process_start(pid)


class PidCache(Generic[T]):
    """``lookup(pid)`` results keyed by (PID, start time); safe to use from several threads.

    Each :meth:`get` reads the PID's start time (one small ``/proc`` read) and reuses a cached value
    only if the process that has the PID now is the one it was computed for: a PID reused by
    another process is looked up afresh at once. Entries expire after ``ttl_s`` seconds. Callers
    drop the PIDs that left the GPUs with :meth:`forget_all_but` after every snapshot, which keeps
    the cache as small as the set of GPU processes.
    """

    def __init__(
        self, lookup: Callable[[int], T], ttl_s: float = CACHE_TTL_S, missing: Callable[[int], T] | None = None
    ) -> None:
        self.lookup = lookup
        self.missing = missing  # for PIDs with no process here (start None), instead of lookup
        self.ttl_s = ttl_s
        self._cache: dict[int, tuple[int | float | None, float, T]] = {}
        self._lock = threading.Lock()
        self.generation = 0  # counts every entry written or dropped

    def get(self, pid: int, start: int | float | EllipsisType | None = ...) -> T:
        """The value for the process that has ``pid`` now (``start``: its :func:`process_start`,
        when the caller read it already)."""
        if start is ...:
            start = process_start(pid)
        return self._get(pid, start, time.monotonic())[0]

    def _get(self, pid: int, start: int | float | None, now: float) -> tuple[T, float | None]:
        """The value and when it was cached (None: not cached, the process changed meanwhile)."""
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == start and now - cached[1] < self.ttl_s:
            return cached[2], cached[1]
        if start is None and self.missing is not None:
            value = self.missing(pid)  # a process appearing later has a start time: a new key
        else:
            value = self.lookup(pid)
            if process_start(pid) != start:  # the process changed while we looked: do not cache a mix
                return value, None
        with self._lock:
            self._cache[pid] = (start, now, value)
            self.generation += 1
        return value, now

    def get_all(self, starts: dict[int, int | float | None]) -> tuple[list[T], float]:
        """:meth:`get` of every PID of ``starts`` (PID -> its :func:`process_start`), in its order,
        and until when (``time.monotonic()``) they all stay good while :attr:`generation` does not
        change and the start times are the same: the same rule, in one loop."""
        now = time.monotonic()
        cache, ttl_s = self._cache, self.ttl_s
        oldest = now
        values: list[T] = []
        append = values.append
        for pid, start in starts.items():
            cached = cache.get(pid)
            if cached is not None and cached[0] == start and now - cached[1] < ttl_s:
                append(cached[2])
                if cached[1] < oldest:
                    oldest = cached[1]
            else:
                value, at = self._get(pid, start, now)
                append(value)
                if at is None:
                    oldest = float("-inf")  # not cached: look it up again next time
        return values, oldest + ttl_s

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop the entries of every PID not in ``pids``."""
        with self._lock:
            for pid in self._cache.keys() - pids:
                del self._cache[pid]
                self.generation += 1

    def __len__(self) -> int:
        return len(self._cache)


class ProcessDirectory:
    """Cached PID → :class:`ProcessIdentity` lookups, safe to use from several threads."""

    def __init__(self, ttl_s: float = CACHE_TTL_S, show_other_names: bool | None = None) -> None:
        self.me = current_user()
        self.show_other_names = show_other_names  # None: $JUPYTER_GPU_SHOW_OTHER_NAMES decides
        self._identities = PidCache(self._lookup, ttl_s, missing=self._not_here)

    def identify(self, pid: int, start: int | float | EllipsisType | None = ...) -> ProcessIdentity:
        """Who process ``pid`` is (``start``: its :func:`process_start`, when the caller has it)."""
        return self._identities.get(pid, start)

    def identify_all(self, starts: dict[int, int | float | None]) -> tuple[list[ProcessIdentity], float]:
        """:meth:`identify` of every PID of ``starts`` (PID -> its :func:`process_start`), in order,
        and until when they stay good unless :attr:`generation` changes (:meth:`PidCache.get_all`)."""
        return self._identities.get_all(starts)

    @property
    def generation(self) -> int:
        """Changes whenever a cached identity is written or dropped."""
        return self._identities.generation

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop cached entries of processes no longer on any GPU (keeps the cache bounded)."""
        self._identities.forget_all_but(pids)

    def _not_here(self, pid: int) -> ProcessIdentity:
        """A PID with no process in this namespace (a host PID in a container, a simulated one)."""
        override = self._simulated_identity(pid)
        if override is not None:
            return ProcessIdentity(user=override[0], name=self._shown_name(override[0], override[1]), command=None)
        return ProcessIdentity(user=None, name=None, command=None)

    def _shown_name(self, user: str | None, name: str | None) -> str | None:
        """The program name, unless the process is another user's (or nobody knows whose)."""
        if user is not None and user == self.me:
            return name
        widened = show_other_names() if self.show_other_names is None else self.show_other_names
        return name if widened else None

    def _lookup(self, pid: int) -> ProcessIdentity:
        override = self._simulated_identity(pid)
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                user = process.username()
                name = process.name()
        except (psutil.Error, OSError):
            if override is not None:
                return ProcessIdentity(user=override[0], name=self._shown_name(override[0], override[1]), command=None)
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
        return ProcessIdentity(user=user, name=self._shown_name(user, name), command=command)

    @staticmethod
    def _simulated_identity(pid: int) -> tuple[str | None, str | None] | None:
        lookup = simulated_identity
        return None if lookup is None else lookup(pid)
