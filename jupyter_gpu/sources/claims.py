"""Host-wide, short-lived claims on GPUs, so kernels started at once do not all pick one "idle" GPU.

Thirty kernels started at 9:00 with ``JUPYTER_GPU_DEFAULT_SELECT=auto:1`` all see the same idle
GPUs until one of them allocates memory; without coordination they all choose the same one. When
``auto`` chooses a GPU, the kernel leaves a **claim**: a small JSON file, and ``auto`` counts the
other processes' claims on a GPU as load. A claim is ignored once its process is gone, once the
process shows up in NVML on that GPU (NVML counts it from then on), or after ``ttl_s`` (10 minutes
by default).

Where claims live: the claims directory (``/tmp`` by default) holds one folder per user,
``jupyter-gpu-claims-<uid>``, made by that user, which only that user can write; a kernel's claims
are the files ``<pid>-<random>.json`` in its user's folder. Readers never list the shared
directory (anyone can fill it with files): they look up the folders of the users who run
processes on this host, by name.

Safety between users (every folder and claim file is untrusted input):

- The claims directory must not be a symbolic link, must belong to root or to this user, and if
  others may write in it, it must have the sticky bit (``/tmp`` does): nobody can then delete,
  rename or replace another user's folder. Otherwise claims are not used, with a one-line note.
- A user's folder counts only when it is a real directory (not a symbolic link, opened with
  ``O_NOFOLLOW``), owned by the uid its name gives and writable by nobody else. A neighbour who
  plants a folder, a file or a link under another user's name steers nothing; that user's kernels
  then cannot publish claims (one note: "auto chooses without them") until the admin removes it.
- A claim is written to a private temporary file (:func:`tempfile.mkstemp` in the user's folder:
  ``O_EXCL``, mode 0600, an unpredictable name), made readable, then hard-linked to its final name
  (which never replaces anything); the temporary file is removed on every path, failures included
  (one left by a writer killed mid-write is removed from the user's folder a minute later).
  Readers therefore never see half a claim. A kernel's claims are removed when it ends by any path
  but SIGKILL (:mod:`jupyter_gpu.kernel.exit_hooks`); the server removes its kernels' claims when
  they are shut down, restarted or it stops, and this user's claims of processes that no longer run
  when it starts (:meth:`ClaimBoard.remove_ended`). Claims a SIGKILL left behind count for nothing
  meanwhile: a claim counts only while its process runs (below).
- Nobody can forge another user's claim or flood the board: only the folder's owner writes in it;
  a claim counts only if its file belongs to that user, its ``uid`` says so, and its PID (also in
  its name, checked before the file is opened) is a running process of that user that started
  before the claim was written. Claims dated more than :data:`FUTURE_SKEW_S` ahead are refused.
  Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks), must be regular files of
  at most 4 KiB, and are parsed like a network request (:mod:`jupyter_gpu.core.wire`); a hostile
  file is ignored with one log line (logger ``jupyter_gpu.sources.claims``; bidi-safe; the first
  ten files, then one line for the rest) and costs only itself.
- Bounded cost and influence: at most :data:`MAX_SCAN` names are looked at per user folder and at
  most :data:`MAX_PER_PROCESS` files read per process. A process counts as what one kernel can
  hold: its newest selection (claims written within :data:`SELECTION_WINDOW_S` of its newest one),
  each GPU once, per (PID, start time). So one ``sleep`` with 300 claims on three GPUs weighs like
  one kernel that ran ``auto:3``, and a user's claims never outweigh that user's live processes.
- Choosing and claiming happen under an advisory lock (``flock`` on the claims directory itself: a
  lock file could be made first by anyone, mode 0600), waited for at most ``lock_timeout_s``: a
  user holding the lock forever delays others by that much once, then they choose without it;
  until they obtain it again, each later selection of theirs waits at most :data:`CONTENDED_WAIT_S`.
- Claims are never required: a directory or folder that cannot be used or written means ``auto``
  works as without claims, and the caller gets a one-line note saying why (:meth:`ClaimBoard.claim`
  raises only OSError, naming the problem). :meth:`ClaimBoard.load` never
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
import tempfile
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.availability import Reservation, Viewer, run_description, run_of
from ..core.text import display_text
from ..core.wire import Fields, WireError, loads
from .processes import ProcessKey, process_start

__all__ = [
    "DEFAULT_DIRECTORY",
    "DEFAULT_TTL_S",
    "KINDS",
    "Claim",
    "ClaimBoard",
    "claims_directory",
    "claims_enabled",
    "host_reservations",
    "reserved_accounts",
    "runs_by_account",
    "user_folder",
    "viewer",
]

log = logging.getLogger(__name__)

DEFAULT_DIRECTORY = "/tmp"
DEFAULT_TTL_S = 600.0
FOLDER_PREFIX = "jupyter-gpu-claims-"  # + uid: one folder per user, written only by that user
MAX_FILE_BYTES = 4096
MAX_SCAN = 1024  # names looked at per user folder (a user flooding their own folder hides only their claims)
MAX_PER_PROCESS = 64  # claim files read per process: more than one selection holds (GPUs and MIG slices)
SELECTION_WINDOW_S = 2.0  # a process's claims written this close to its newest one are one selection
START_SKEW_S = 2.0  # psutil dates a process start from the boot time, which /proc gives in whole seconds
FUTURE_SKEW_S = 5.0  # clocks agree on one host; a claim dated later than this ahead is refused
CONTENDED_WAIT_S = 0.2  # the lock's wait once it was not obtained in time (somebody may hold it forever)
MAX_LOGGED = 10  # refused files logged per board, one line each (then one line for the rest)
_NAME = re.compile(r"^([1-9][0-9]{0,9})-[0-9a-z_]{1,32}\.json$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/\-]{1,120}$")
_VERSION = 2  # 2 adds kind, label, child_pid; version 1 files (kernels before) are still read
_VERSIONS = (1, 2)
KINDS = ("kernel", "run")  # what holds a claim: a kernel's selection, or `jupyter-gpu run`'s child
MAX_LABEL_CHARS = 80  # a run's command's short name (another user's text: never shown to others)


@dataclass(frozen=True)
class Claim:
    """A validated claim: ``uid``'s process ``pid`` chose the GPU ``gpu_uuid`` at ``time`` (epoch s).

    ``kind`` says what holds it: ``"kernel"`` (a kernel's ``%gpu_select``: counts for ``ttl_s``) or
    ``"run"`` (``jupyter-gpu run``: counts while its process lives, no time limit). ``label`` is the
    holder's own short description (``train.py``), sanitized and bounded here; it is the claim
    owner's text, shown to that user only. ``child_pid`` is the process a run started (None for a
    kernel): its GPU memory is the run's.
    """

    uid: int
    pid: int
    gpu_uuid: str
    time: float
    host: str
    path: Path
    kind: str = "kernel"
    label: str = ""
    child_pid: int | None = None


def parse_claim(data: Any, owner_uid: int, path: Path) -> Claim | str:
    """A :class:`Claim` from a file's JSON, or why it is refused (in a few words)."""
    try:
        fields = Fields(data)
        version = fields.raw("version", None)
        if isinstance(version, bool) or version not in _VERSIONS:
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
        kind, label, child_pid = "kernel", "", None
        if version >= 2:
            kind = fields.text("kind", 16)
            if kind not in KINDS:
                return f"kind must be one of {', '.join(KINDS)}"
            label = display_text(fields.text("label", 4 * MAX_LABEL_CHARS, min_chars=0), MAX_LABEL_CHARS, missing="")
            child_pid = fields.optional_integer("child_pid", 1, 2**31 - 1)
    except WireError as error:
        return str(error)
    return Claim(
        uid=uid, pid=pid, gpu_uuid=uuid, time=when, host=host, path=path, kind=kind, label=label, child_pid=child_pid
    )


_Found = tuple[Claim, tuple[int, float]]  # a claim read, and its process's (real uid, start time)


def _holds(claim: Claim, pids: set[int], ancestors: Mapping[int, Collection[int]]) -> bool:
    """Whether ``claim``'s process, its run's child, or a descendant of either is among ``pids``."""
    holders = {claim.pid} if claim.child_pid is None else {claim.pid, claim.child_pid}
    return bool(holders & pids) or any(holders.intersection(ancestors.get(pid, ())) for pid in pids)


def _seen(
    board: ClaimBoard, gpus: Sequence[Any], now: float, ancestors: Mapping[int, Collection[int]]
) -> Iterator[tuple[Claim, bool]]:
    """Every claim of ``board`` that counts, and whether its process (or a run's child, or a
    descendant of either) holds memory on that GPU (``gpus``: GpuInfo, MIG slices included)."""
    nvml_pids: dict[str, set[int]] = {gpu.uuid: {p.pid for p in gpu.processes} for gpu in gpus}
    nvml_pids.update({s.uuid: {p.pid for p in s.processes} for gpu in gpus for s in getattr(gpu, "slices", ())})
    for claims in board._current(now).values():
        for claim in claims:
            yield claim, _holds(claim, nvml_pids.get(claim.gpu_uuid, set()), ancestors)


def _reservation(claim: Claim, holding: bool, uid: int) -> Reservation:
    """``claim`` as a face of user ``uid`` may show it: another user's keeps its GPU and nothing more."""
    if claim.uid != uid:
        return Reservation(gpu_uuid=claim.gpu_uuid, own=False, holding=holding)
    return Reservation(
        gpu_uuid=claim.gpu_uuid,
        own=True,
        kind=claim.kind,
        since=claim.time,
        label=claim.label,
        pid=claim.pid,
        child_pid=claim.child_pid,
        holding=holding,
    )


def _process(pid: int) -> tuple[int, float] | None:
    """``(real uid, start time in epoch seconds)`` of a running process, None when it is gone (or invisible)."""
    try:
        import psutil

        process = psutil.Process(pid)
        return int(process.uids().real), float(process.create_time())
    except Exception:
        return None


def _users_with_processes() -> set[int]:
    """The uids that own a process on this host (the owners of ``/proc/<pid>``): whose folders to look up."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {os.getuid()}
    uids = {os.getuid()}
    for name in names:
        with contextlib.suppress(OSError):
            uids.add(os.stat(f"/proc/{name}").st_uid)
    return uids


def claims_directory() -> str:
    """The claims directory kernels use unless configured otherwise: ``$JUPYTER_GPU_CLAIMS_DIR``, else ``/tmp``."""
    return os.environ.get("JUPYTER_GPU_CLAIMS_DIR", "").strip() or DEFAULT_DIRECTORY


def user_folder(directory: str | os.PathLike[str], uid: int) -> Path:
    """Where user ``uid`` keeps its claims in the claims ``directory``."""
    return Path(directory) / f"{FOLDER_PREFIX}{uid}"


def _tidy_temporary(folder: int, entry: os.DirEntry[str]) -> None:
    """Remove this user's temporary claim file ``entry`` if its writer died mid-write (a minute ago)."""
    if entry.name.startswith(".") and entry.name.endswith(".tmp"):
        with contextlib.suppress(OSError):
            if time.time() - entry.stat(follow_symlinks=False).st_mtime > 60:
                os.unlink(entry.name, dir_fd=folder)


def _private_folder(info: os.stat_result, uid: int) -> bool:
    """A directory owned by ``uid`` that nobody else can write in."""
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


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
        self.lock_missed = False  # the last wait for the lock timed out: wait CONTENDED_WAIT_S from now on
        self.uid = os.getuid()
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.folder = user_folder(self.directory, self.uid)
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
        in the notebook, and anyone can leave thousands of files."""
        if (str(path), stamp) in self._warned:
            return
        self._warned.add((str(path), stamp))
        if len(self._warned) <= MAX_LOGGED:
            log.warning("jupyter_gpu: ignoring GPU claim %s: %s", display_text(str(path), 200), why)
        elif len(self._warned) == MAX_LOGGED + 1:
            log.warning(
                "jupyter_gpu: ignoring more malformed GPU claims in %s; they are no longer logged",
                display_text(str(self.directory), 200),
            )

    def _read(self, folder: int, name: str, uid: int) -> Claim | None:
        """The claim ``name`` in the user folder open as ``folder`` (``uid``'s), or None (refused, logged)."""
        path = user_folder(self.directory, uid) / name
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
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
        return None if isinstance(claim, str) else claim

    def _user_claims(self, uid: int, alive: dict[int, tuple[int, float] | None]) -> list[_Found]:
        """The claims in ``uid``'s folder whose PID (from the name, before opening) is that user's process,
        with that process's (uid, start time)."""
        try:
            folder = os.open(user_folder(self.directory, uid), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return []  # no folder (the usual case), a link, or a file in its place
        found: list[_Found] = []
        try:
            if not _private_folder(os.fstat(folder), uid):
                return []
            per_pid: dict[int, int] = {}
            with os.scandir(folder) as entries:
                for seen, entry in enumerate(entries):
                    if seen >= MAX_SCAN:
                        break
                    match = _NAME.match(entry.name)
                    if match is None:
                        if uid == self.uid:
                            _tidy_temporary(folder, entry)
                        continue
                    pid = int(match.group(1))
                    if pid not in alive:
                        alive[pid] = _process(pid)
                    process = alive[pid]
                    if process is None or process[0] != uid:
                        if uid == self.uid:  # this user's claim of a process that is gone: tidy up
                            with contextlib.suppress(OSError):
                                os.unlink(entry.name, dir_fd=folder)
                        continue
                    if per_pid.get(pid, 0) >= MAX_PER_PROCESS:
                        continue
                    per_pid[pid] = per_pid.get(pid, 0) + 1
                    claim = self._read(folder, entry.name, uid)
                    if claim is not None and (claim.uid, claim.pid) == (uid, pid):
                        found.append((claim, process))
        except OSError:
            pass
        finally:
            os.close(folder)
        return found

    def claims(self) -> list[Claim]:
        """Every well-formed claim of a running process (validity otherwise not yet judged)."""
        return [claim for claim, _process in self._found()]

    def _found(self) -> list[_Found]:
        if self.problem is not None:
            return []
        alive: dict[int, tuple[int, float] | None] = {}
        return [found for uid in sorted(_users_with_processes()) for found in self._user_claims(uid, alive)]

    def _current(self, now: float) -> dict[tuple[int, float], list[Claim]]:
        """The claims that still count, per process (PID, start): on this host; not dated ahead and
        written after their process started; a kernel's younger than ``ttl_s`` (a run's count while
        its process lives); their process alive and run by the claim's user; from the process's
        newest selection. This user's files that no longer count are deleted."""
        by_process: dict[tuple[int, float], list[Claim]] = {}
        for claim, process in self._found():
            if claim.host != self.host:
                continue  # a directory shared between hosts: PIDs mean nothing here
            expired = claim.kind != "run" and now - claim.time > self.ttl_s
            if not process[1] - START_SKEW_S <= claim.time <= now + FUTURE_SKEW_S or expired:
                if claim.uid == self.uid:  # this user's files that no longer count are removed
                    with contextlib.suppress(OSError):
                        claim.path.unlink()
                continue
            by_process.setdefault((claim.pid, process[1]), []).append(claim)
        for key, claims in by_process.items():
            newest = max(claim.time for claim in claims)
            chosen = {
                c.gpu_uuid: c for c in sorted(claims, key=lambda c: c.time) if c.time >= newest - SELECTION_WINDOW_S
            }
            by_process[key] = list(chosen.values())
        return by_process

    def active(
        self, nvml_pids: dict[str, set[int]], now: float | None = None, exclude_pid: int | None = None
    ) -> list[Claim]:
        """Claims that still count (:meth:`_current`), one per (process, GPU), except this process's
        (or ``exclude_pid``'s), and not yet shown by NVML on that GPU: neither the claimant nor a
        run's child is among ``nvml_pids`` (GPU UUID → PIDs NVML shows there)."""
        now = time.time() if now is None else now
        skip = self.pid if exclude_pid is None else exclude_pid
        return [
            claim
            for (pid, _start), claims in self._current(now).items()
            if pid != skip
            for claim in claims
            if not _holds(claim, nvml_pids.get(claim.gpu_uuid, set()), {})
        ]

    def reservations(
        self,
        gpus: Sequence[Any],
        now: float | None = None,
        ancestors: Mapping[int, Collection[int]] | None = None,
    ) -> list[Reservation]:
        """Every claim that counts as the faces show it (:class:`~jupyter_gpu.core.availability.Reservation`):
        this process's too; ``holding`` when the claimant, a run's child, or a process descending from
        either (``ancestors``: NVML PID → its ancestors' PIDs, where known) holds memory on that GPU
        (``gpus``: GpuInfo, MIG slices included). Another user's claim keeps only the GPU and
        ``own`` False: its label, PIDs and time are never handed on. Never raises."""
        try:
            now = time.time() if now is None else now
            return [
                _reservation(claim, holding, self.uid) for claim, holding in _seen(self, gpus, now, ancestors or {})
            ]
        except Exception as error:
            self.failed(error)
            return []

    def load(self, gpus: Sequence[Any], now: float | None = None) -> dict[int | str, int]:
        """NVML index → number of other processes' active claims on that GPU (``gpus``: GpuInfo),
        and MIG UUID → claims on that MIG slice (``auto`` among slices claims the slice).

        Never raises: claims only refine ``auto``, so a failure here (a bug, or a file no rule
        foresaw) means no claims this time, said once in the log."""
        try:
            return self._load(gpus, now)
        except Exception as error:  # every known hostile file is refused in _read already
            self.failed(error)
            return {}

    def failed(self, error: BaseException) -> None:
        """Say once (in the log) that claims are not used because of ``error``."""
        if ("load", 0) not in self._warned:
            self._warned.add(("load", 0))
            log.warning("jupyter_gpu: GPU claims not used: %s", display_text(str(error), 200))

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

    def claim(
        self, gpu_uuids: Iterable[str], *, kind: str = "kernel", label: str = "", child_pid: int | None = None
    ) -> list[Path]:
        """Leave a claim for each GPU (this process's earlier claims are replaced). Raises OSError,
        with a message naming the problem, when this user's folder cannot be made or used.

        ``kind``: ``"kernel"`` (counts for ``ttl_s``) or ``"run"`` (``jupyter-gpu run``: counts while
        this process lives); ``label``: what holds it in a few words (``train.py``; shown to this user
        only, cut to :data:`MAX_LABEL_CHARS`); ``child_pid``: the process a run started, whose GPU
        memory is the run's. ValueError for an unknown ``kind``."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.release()
        made: list[Path] = []
        uuids = list(gpu_uuids)
        if not uuids:
            return made
        holder = {"kind": kind, "label": display_text(label, MAX_LABEL_CHARS, missing=""), "child_pid": child_pid}
        folder = self._own_folder()
        try:
            for uuid in uuids:
                made.append(self._write(folder, uuid, holder))
        finally:
            os.close(folder)
            self.mine = made
        return made

    def _own_folder(self) -> int:
        """This user's folder, made when missing (0755: others read claims, only this user writes), open."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.folder, 0o755)  # never follows a link planted at its name
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                why = f"{self.folder} is a symbolic link or a file; an admin can remove it"
                raise OSError(error.errno, why) from None
            raise
        info = os.fstat(fd)
        if info.st_uid == self.uid and stat.S_IMODE(info.st_mode) != 0o755:
            os.fchmod(fd, 0o755)  # umask; or made by an older version
            info = os.fstat(fd)
        if not _private_folder(info, self.uid):
            os.close(fd)
            raise OSError(
                errno.EPERM,
                f"{self.folder} is not this user's private folder (uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):o}); an admin can remove it",
            )
        return fd

    def _write(self, folder: int, uuid: str, holder: dict[str, Any]) -> Path:
        """One claim file, created privately and linked into place; nothing is left behind on failure."""
        payload = json.dumps(
            {
                "version": _VERSION,
                "uid": self.uid,
                "pid": self.pid,
                "gpu_uuid": uuid,
                "time": time.time(),
                "host": self.host,
                **holder,
            }
        ).encode()
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.folder)  # O_EXCL, 0600, unpredictable
        name = os.path.basename(tmp)
        final = f"{self.pid}-{secrets.token_hex(8)}.json"
        try:
            try:
                if os.write(fd, payload) != len(payload):
                    raise OSError(errno.ENOSPC, "the claim was written only in part")
                os.fchmod(fd, 0o644)  # others read it; only this user writes in its folder
            finally:
                os.close(fd)
            os.link(name, final, src_dir_fd=folder, dst_dir_fd=folder)  # never replaces an existing name
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
        return self.folder / final

    def release(self) -> None:
        """Remove this process's claims (a new selection, or the process ends)."""
        for path in self.mine:
            with contextlib.suppress(OSError):
                path.unlink()
        self.mine = []

    def remove_ended(self, ended: Iterable[ProcessKey] = ()) -> int:
        """Delete this user's claims whose process has ended; returns how many were deleted.

        A claim goes when no process of this user runs under its PID, when the process there now
        started after the claim was written (the PID was reused), and when its process is one of
        ``ended``: ``(pid, start)`` of processes known to have ended or to be ending (a kernel just
        shut down; ``start`` from :func:`jupyter_gpu.sources.processes.process_start`, or None for
        "whatever runs under that PID now"). Other users' folders are never touched; nothing raises
        (claims are never required)."""
        if self.problem is not None:
            return 0
        ending = dict(ended)
        removed = 0
        try:
            folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return 0  # no folder: no claims
        try:
            if not _private_folder(os.fstat(folder), self.uid):
                return 0
            with os.scandir(folder) as entries:
                names = [entry.name for _, entry in zip(range(MAX_SCAN), entries, strict=False)]
            for name in names:
                match = _NAME.match(name)
                if match is None:
                    continue
                pid = int(match.group(1))
                if pid == self.pid and pid not in ending:
                    continue
                if self._ended(folder, name, pid, ending):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=folder)
                        removed += 1
        except OSError:
            pass
        finally:
            os.close(folder)
        return removed

    def _ended(self, folder: int, name: str, pid: int, ending: dict[int, int | float | None]) -> bool:
        """Whether the claim ``name`` of ``pid`` was written by a process that has ended (or is ending)."""
        process = _process(pid)
        if process is None or process[0] != self.uid:
            return True
        if pid in ending and (ending[pid] is None or ending[pid] == process_start(pid)):
            return True
        claim = self._read(folder, name, self.uid)
        return claim is not None and claim.time < process[1] - START_SKEW_S  # the PID's earlier process

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        """Hold the directory's advisory lock while choosing and claiming; yields whether it was
        obtained within ``lock_timeout_s`` (or :data:`CONTENDED_WAIT_S` after a miss; without it, the
        choice is made anyway)."""
        import fcntl

        fd = None
        try:
            # The directory itself, not a file in it: anyone could create that file first, mode 0600,
            # and so turn the lock off for everybody else.
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            wait_s = min(self.lock_timeout_s, CONTENDED_WAIT_S) if self.lock_missed else self.lock_timeout_s
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.lock_missed = False
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        self.lock_missed = True
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


def host_reservations(
    gpus: Sequence[Any], ancestors: Mapping[int, Collection[int]] | None = None, directory: str | None = None
) -> list[Reservation]:
    """The host's reservations for a face (:meth:`ClaimBoard.reservations` in the claims directory
    kernels and runs use, ``$JUPYTER_GPU_CLAIMS_DIR`` else ``/tmp``); empty when claims cannot be
    read there. Never raises: reservations only refine what a face shows."""
    try:
        board = ClaimBoard(directory or claims_directory())
    except Exception:
        return []
    return board.reservations(gpus, ancestors=ancestors) if board.problem is None else []


def _parents(pid: int) -> list[int]:
    """The PIDs of ``pid``'s parent, grandparent, …; empty when it is gone or unreadable."""
    try:
        import psutil

        return [parent.pid for parent in psutil.Process(pid).parents()]
    except Exception:
        return []


def claims_enabled() -> bool:
    """Whether claims are used here: not turned off by ``JUPYTER_GPU_CLAIMS=0`` (or false, no, off)."""
    return os.environ.get("JUPYTER_GPU_CLAIMS", "").strip().lower() not in {"0", "false", "no", "off"}


def viewer(gpus: Sequence[Any], me: str | None, own_pids: Collection[int] = (), now: float | None = None) -> Viewer:
    """What this user sees of the host's claims (:class:`~jupyter_gpu.core.availability.Viewer`): the
    reservations, and this user's runs among the GPU processes of ``gpus``. A claim is believed only
    about its owner's own processes: only processes of ``me`` (or ``own_pids``) are looked up as
    descendants of a run. Nothing of the claims where they are off (:func:`claims_enabled`). Never raises."""
    if not claims_enabled():
        return Viewer(me=me, own_pids=frozenset(own_pids))
    now = time.time() if now is None else now
    units = [*gpus, *(s for gpu in gpus for s in getattr(gpu, "slices", ()))]
    mine = {p.pid for unit in units for p in unit.processes if p.pid in own_pids or (me is not None and p.user == me)}
    ancestors = {pid: _parents(pid) for pid in mine}
    reservations = host_reservations(gpus, ancestors)
    runs: dict[int, str] = {}
    for pid in mine:
        run = run_of(pid, ancestors.get(pid, ()), reservations)
        if run is not None:
            runs[pid] = run_description(run, now)
    return Viewer(me=me, own_pids=frozenset(own_pids), reservations=tuple(reservations), runs=runs)


def _by_account(gpus: Sequence[Any], directory: str | None) -> list[tuple[str, Claim, bool]]:
    """Every claim that counts on this host's board, with its owner's account (system user name;
    ``uid N`` where a uid has none) and whether it holds memory there: the hub service's reading.
    Empty where claims are off or cannot be read here."""
    if not claims_enabled():
        return []
    import pwd

    board = ClaimBoard(directory or claims_directory())
    if board.problem is not None:
        return []
    names: dict[int, str] = {}
    found = []
    for claim, holding in _seen(board, gpus, time.time(), {}):
        if claim.uid not in names:
            try:
                names[claim.uid] = pwd.getpwuid(claim.uid).pw_name
            except KeyError:
                names[claim.uid] = f"uid {claim.uid}"
        found.append((names[claim.uid], claim, holding))
    return found


def runs_by_account(gpus: Sequence[Any], directory: str | None = None) -> dict[str, tuple[Reservation, ...]]:
    """Account → that account's ``jupyter-gpu run`` claims (one per run and GPU, as
    :class:`~jupyter_gpu.core.availability.Reservation` with ``own`` True: label and start), for the
    hub service's console, which shows each account's runs to that account's user only. Never raises."""
    try:
        runs: dict[str, list[Reservation]] = {}
        for account, claim, holding in _by_account(gpus, directory):
            if claim.kind == "run":
                runs.setdefault(account, []).append(_reservation(claim, holding, claim.uid))
        return {account: tuple(found) for account, found in runs.items()}
    except Exception:
        return {}


def reserved_accounts(gpus: Sequence[Any], directory: str | None = None) -> dict[str, frozenset[str]]:
    """GPU or MIG UUID → the accounts with a reservation there (a claim whose process holds nothing
    there yet), for the hub service's console. Never raises."""
    try:
        found: dict[str, set[str]] = {}
        for account, claim, holding in _by_account(gpus, directory):
            if not holding:
                found.setdefault(claim.gpu_uuid, set()).add(account)
        return {uuid: frozenset(accounts) for uuid, accounts in found.items()}
    except Exception:
        return {}
