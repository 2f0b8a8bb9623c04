"""Host-wide, short-lived claims on GPUs, so kernels started at once do not all pick one "idle" GPU.

Thirty kernels started at 9:00 with ``JUPYTER_GPU_DEFAULT_SELECT=auto:1`` all see the same idle
GPUs until one of them allocates memory; without coordination they all choose the same one. When
``auto`` chooses a GPU, the kernel leaves a **claim**: a small JSON file in a directory every user
can write (``/tmp`` by default), and ``auto`` counts the other claims on a GPU as load. A claim is
ignored once its process is gone, once the process shows up in NVML on that GPU (NVML counts it
from then on), or after ``ttl_s`` (10 minutes by default).

Safety between users (every claim file is untrusted input):

- The directory must not be a symbolic link, must belong to root or to this user, and if others
  may write in it, it must have the sticky bit (``/tmp`` does): nobody can then delete or replace
  another user's file. Otherwise claims are not used, with a one-line note.
- A claim is created atomically and never overwrites anything: written to a private temporary
  file created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, then hard-linked to its final name (which
  fails if the name exists). Readers therefore never see half a claim.
- Nobody can forge another user's claim: the ``uid`` in a claim must equal the file's owner
  (``st_uid``), and its PID must be a running process of that user. Files are opened with
  ``O_NOFOLLOW``, must be regular files of at most 4 KiB, and are parsed like a network request
  (:mod:`jupyter_gpu.core.wire`: schema, types, finite numbers, bounded nesting, a GPU UUID's
  form); a malformed or hostile file is ignored with one log line (logger
  ``jupyter_gpu.sources.claims``; its name bidi-safe; the first ten files, then one line for the
  rest) and costs only itself.
- Choosing and claiming happen under an advisory lock (``flock`` on ``jupyter-gpu-claims.lock`` in
  the directory), waited for at most ``lock_timeout_s``: a user holding the lock forever delays
  others by that much, then they choose without it.
- Claims are never required: a directory that cannot be used or written means ``auto`` works as
  without claims, and the caller gets a one-line note saying why. :meth:`ClaimBoard.load` never
  raises: should reading the claims fail for any other reason, ``auto`` chooses without them and
  the log says so once.

This module is part of the pure core: it imports no IPython and no framework.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.text import display_text
from ..core.wire import Fields, WireError, loads

__all__ = ["DEFAULT_DIRECTORY", "DEFAULT_TTL_S", "Claim", "ClaimBoard"]

log = logging.getLogger(__name__)

DEFAULT_DIRECTORY = "/tmp"
DEFAULT_TTL_S = 600.0
PREFIX = "jupyter-gpu-claim-"
LOCK_NAME = "jupyter-gpu-claims.lock"
MAX_FILE_BYTES = 4096
MAX_FILES = 4096
MAX_LOGGED = 10  # refused files logged per board, one line each (then one line for the rest)
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/\-]{1,120}$")
_VERSION = 1


@dataclass(frozen=True)
class Claim:
    """A validated claim: ``uid``'s process ``pid`` chose the GPU ``gpu_uuid`` at ``time`` (epoch s)."""

    uid: int
    pid: int
    gpu_uuid: str
    time: float
    host: str
    path: Path


def parse_claim(data: Any, owner_uid: int, path: Path) -> Claim | str:
    """A :class:`Claim` from a file's JSON, or why it is refused (in a few words)."""
    try:
        fields = Fields(data)
        version = fields.raw("version", None)
        if isinstance(version, bool) or version != _VERSION:
            return "unknown version"
        uid = fields.integer("uid", 0, 2**31 - 1)
        pid = fields.integer("pid", 1, 2**31 - 1)
        if uid != owner_uid:
            return f"claims uid {uid} but the file belongs to uid {owner_uid} (forged)"
        uuid = fields.text("gpu_uuid", 130)
        if not _UUID.match(uuid):
            return "gpu_uuid is not a GPU UUID"
        when = fields.number("time")
        host = fields.text("host", 255)
    except WireError as error:
        return str(error)
    return Claim(uid=uid, pid=pid, gpu_uuid=uuid, time=when, host=host, path=path)


def _process_uid(pid: int) -> int | None:
    """The owner of a running process, None when it is gone (or invisible)."""
    try:
        import psutil

        return int(psutil.Process(pid).uids().real)
    except Exception:
        return None


class ClaimBoard:
    """The claims in one directory. ``problem`` is None when claims can be used there."""

    def __init__(
        self,
        directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
        ttl_s: float = DEFAULT_TTL_S,
        lock_timeout_s: float = 5.0,
    ) -> None:
        self.directory = Path(directory)
        self.ttl_s = ttl_s
        self.lock_timeout_s = lock_timeout_s
        self.uid = os.getuid()
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.problem = self._check_directory()
        self._warned: set[tuple[str, int]] = set()
        self.mine: list[Path] = []

    def _check_directory(self) -> str | None:
        try:
            info = os.lstat(self.directory)
        except OSError as error:
            return f"the claims directory {self.directory} cannot be used ({error.strerror})"
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            return f"the claims directory {self.directory} is not a directory (or is a symbolic link)"
        if info.st_uid not in (0, self.uid):
            return f"the claims directory {self.directory} belongs to another user (uid {info.st_uid})"
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and not info.st_mode & stat.S_ISVTX:
            return (
                f"the claims directory {self.directory} is writable by others without the sticky bit, so "
                "claims there could be deleted by anyone"
            )
        if not os.access(self.directory, os.W_OK | os.X_OK):
            return f"the claims directory {self.directory} is not writable"
        return None

    # -- reading

    def _refuse(self, path: Path, stamp: int, why: str) -> None:
        """One log line per refused file, for the first :data:`MAX_LOGGED`: in a kernel the line shows
        in the notebook, and anyone can leave thousands of files in ``/tmp``."""
        if (path.name, stamp) in self._warned:
            return
        self._warned.add((path.name, stamp))
        if len(self._warned) <= MAX_LOGGED:
            log.warning("jupyter_gpu: ignoring GPU claim %s: %s", display_text(str(path), 200), why)
        elif len(self._warned) == MAX_LOGGED + 1:
            log.warning(
                "jupyter_gpu: ignoring more malformed GPU claims in %s; they are no longer logged",
                display_text(str(self.directory), 200),
            )

    def _read(self, path: Path) -> Claim | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ELOOP:
                self._refuse(path, 0, "a symbolic link")
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self._refuse(path, info.st_mtime_ns, "not a regular file")
                return None
            if info.st_size > MAX_FILE_BYTES:
                self._refuse(path, info.st_mtime_ns, f"larger than {MAX_FILE_BYTES} bytes")
                return None
            raw = os.read(fd, MAX_FILE_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            data = loads(raw, max_bytes=MAX_FILE_BYTES, max_depth=4)
        except WireError as error:
            self._refuse(path, info.st_mtime_ns, str(error))
            return None
        claim = parse_claim(data, info.st_uid, path)
        if isinstance(claim, str):
            self._refuse(path, info.st_mtime_ns, claim)
            return None
        return claim

    def claims(self) -> list[Claim]:
        """Every well-formed claim file in the directory (validity not yet judged)."""
        if self.problem is not None:
            return []
        found = []
        try:
            entries = [
                entry
                for entry in os.scandir(self.directory)
                if entry.name.startswith(PREFIX) and entry.name.endswith(".json")
            ]
        except OSError:
            return []
        for entry in entries[:MAX_FILES]:
            claim = self._read(Path(entry.path))
            if claim is not None:
                found.append(claim)
        return found

    def active(
        self, nvml_pids: dict[str, set[int]], now: float | None = None, exclude_pid: int | None = None
    ) -> list[Claim]:
        """Claims that still count: on this host, younger than ``ttl_s`` (and not from the future),
        their process alive and run by the claim's user, and not yet shown by NVML on that GPU
        (``nvml_pids``: GPU UUID → PIDs NVML shows there). This user's stale claims are deleted."""
        now = time.time() if now is None else now
        result = []
        for claim in self.claims():
            if claim.host != self.host:
                continue  # a directory shared between hosts: PIDs mean nothing here
            stale = (
                not (-60 <= now - claim.time <= self.ttl_s)
                or _process_uid(claim.pid) != claim.uid
                or claim.pid in nvml_pids.get(claim.gpu_uuid, set())
            )
            if stale:
                if claim.uid == self.uid:
                    with contextlib.suppress(OSError):
                        claim.path.unlink()
                continue
            if claim.pid == (self.pid if exclude_pid is None else exclude_pid):
                continue
            result.append(claim)
        return result

    def load(self, gpus: Sequence[Any], now: float | None = None) -> dict[int | str, int]:
        """NVML index → number of other processes' active claims on that GPU (``gpus``: GpuInfo),
        and MIG UUID → claims on that MIG slice (``auto`` among slices claims the slice).

        Never raises: claims only refine ``auto``, so a failure here (a bug, or a file no rule
        foresaw) means no claims this time, said once in the log."""
        try:
            return self._load(gpus, now)
        except Exception as error:  # every known hostile file is refused in _read already
            if ("load", 0) not in self._warned:
                self._warned.add(("load", 0))
                log.warning("jupyter_gpu: GPU claims not used: %s", display_text(str(error), 200))
            return {}

    def _load(self, gpus: Sequence[Any], now: float | None) -> dict[int | str, int]:
        nvml_pids = {gpu.uuid: {p.pid for p in gpu.processes} for gpu in gpus}
        slices = [s for gpu in gpus for s in getattr(gpu, "slices", ())]
        nvml_pids.update({s.uuid: {p.pid for p in s.processes} for s in slices})
        by_uuid: dict[str, int] = {}
        for claim in self.active(nvml_pids, now):
            by_uuid[claim.gpu_uuid] = by_uuid.get(claim.gpu_uuid, 0) + 1
        load: dict[int | str, int] = {gpu.index: by_uuid[gpu.uuid] for gpu in gpus if gpu.uuid in by_uuid}
        load.update({s.uuid: by_uuid[s.uuid] for s in slices if s.uuid in by_uuid})
        return load

    # -- writing

    def claim(self, gpu_uuids: Iterable[str]) -> list[Path]:
        """Leave a claim for each GPU (this process's earlier claims are replaced). Raises OSError."""
        self.release()
        made = []
        try:
            for uuid in gpu_uuids:
                made.append(self._write(uuid))
        finally:
            self.mine = made
        return made

    def _write(self, uuid: str) -> Path:
        token = secrets.token_hex(8)
        name = f"{PREFIX}{self.uid}-{self.pid}-{token}.json"
        final = self.directory / name
        tmp = self.directory / f".{name}.tmp"
        payload = json.dumps(
            {
                "version": _VERSION,
                "uid": self.uid,
                "pid": self.pid,
                "gpu_uuid": uuid,
                "time": time.time(),
                "host": self.host,
            }
        ).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)  # atomic, and never replaces an existing name
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return final

    def release(self) -> None:
        """Remove this process's claims (a new selection, or the process ends)."""
        for path in self.mine:
            with contextlib.suppress(OSError):
                path.unlink()
        self.mine = []

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        """Hold the directory's advisory lock while choosing and claiming; yields whether it was
        obtained within ``lock_timeout_s`` (without it, the choice is made anyway)."""
        import fcntl

        fd = None
        try:
            path = self.directory / LOCK_NAME
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError from None
                    time.sleep(0.01)
        except (OSError, TimeoutError):
            if fd is not None:
                os.close(fd)
            yield False
            return
        try:
            yield True
        finally:
            os.close(fd)  # closing releases the lock
