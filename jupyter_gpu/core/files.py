"""The one way jupyter_gpu writes a file: atomically, never through a link, private unless asked.

Every file the package writes (a kernel's report, a scenario file) may lie in a folder other users
can write: ``/tmp``, where nbclient, papermill and a bare ``KernelManager`` put connection files, or
a shared runtime directory. :func:`replace_file` is the one writer such folders are safe for. It is
in ``core`` (the only file I/O here besides reading ``/proc/self``) because every layer that writes
files may import it, :mod:`jupyter_gpu.simulate` included, which may import nothing but ``core`` and
``sources.processes``. The claims board (:mod:`jupyter_gpu.sources.claims`) keeps its own writer:
it holds a lock file and wants a world-readable board.

:func:`others_can_replace` is the matching reader's rule: whether a file some process trusts (the
simulation's scenario) could be put there or swapped by another user. :func:`private_folder` is where
a child process of the package starts instead of the caller's folder (the doctor's probes, ``jupyter-gpu
run``'s question to the command's interpreter).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["others_can_replace", "owner_name", "private_folder", "replace_file"]


def replace_file(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Put ``data`` at ``path`` atomically, as a file of mode ``mode`` (only this user: 0600).

    What it relies on (Linux; POSIX for the first two):

    - The temporary file gets an unpredictable name in ``path``'s folder and is created with
      ``O_CREAT | O_EXCL`` (``tempfile.mkstemp``, mode 0600; with ``O_EXCL`` ``open(2)`` fails on
      any existing name, a symbolic link included, and never follows it). A name another user
      planted (a link to the victim's notebook) is never opened, let alone written through, and
      nobody else can read the data while it is written.
    - ``os.replace`` (``rename(2)``) swaps the directory entry itself: a link already at ``path`` is
      replaced, never followed; a reader sees the old file or the new one, never half of either.
    - In a sticky folder (mode 1777, as ``/tmp``) ``rename(2)`` fails with ``EPERM`` when ``path``
      is another user's file: this raises rather than writing anywhere else.

    The mode is set on the open file (``fchmod``) before any data is written, whatever the umask.
    Raises :class:`OSError`; nothing is left behind on failure (the temporary file is removed).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            if mode != 0o600:
                os.fchmod(file.fileno(), mode)
            file.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def private_folder(prefix: str) -> str | None:
    """A new empty folder only this user can write (``mkdtemp``: 0700), for a child process to start
    in instead of the caller's current folder, where another user may have planted modules; None
    when none can be made (start it in ``/`` then: ordinary users cannot write there either). The
    caller removes it."""
    try:
        return tempfile.mkdtemp(prefix=prefix)
    except OSError:
        return None


def owner_name(uid: int) -> str:
    """``'name' (uid N)``, or ``uid N`` for a uid with no account: for one-line refusals."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _private_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is ``uid``'s own private group (same name, primary group, no other member):
    a folder writable by that group is writable by that user alone (umask 002 systems)."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def others_can_replace(path: str, uid: int | None = None) -> str | None:
    """Why a user other than ``uid`` (default: the effective user) or root could put other content
    at ``path``, in one line, or None when nobody else can.

    ``path`` is absolute with its links resolved (``os.path.realpath``). Refused: a file that exists
    and is not owned by ``uid`` or root (what kind of file it is, the reader decides); a folder on the way (the file's,
    up to ``/``) owned by another user, or writable by group or others without the sticky bit
    (mode 1777, as ``/tmp``: others may add names there but not remove or rename ``uid``'s), unless
    the group is ``uid``'s private group. A missing file is not refused here: the reader checks the
    owner of what it opens (``os.fstat``), which is what a folder with the sticky bit needs."""
    uid = os.geteuid() if uid is None else uid
    trusted = (uid, 0)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as error:
        return f"{path} cannot be checked ({error.strerror or error})"
    if info is not None and info.st_uid not in trusted:
        return f"{path} is owned by {owner_name(info.st_uid)}, not by you or root"
    folder = os.path.dirname(path)
    while True:
        try:
            info = os.stat(folder)
        except OSError as error:
            return f"the folder {folder} cannot be checked ({error.strerror or error})"
        if info.st_uid not in trusted:
            return f"the folder {folder} is owned by {owner_name(info.st_uid)}, who can replace what it holds"
        writable = info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not _private_group(info.st_gid, uid))
        if writable and not info.st_mode & stat.S_ISVTX:
            return (
                f"the folder {folder} is writable by other users without the sticky bit, "
                "so anyone can replace what it holds"
            )
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
