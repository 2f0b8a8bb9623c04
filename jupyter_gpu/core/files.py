"""The one way jupyter_gpu writes a file: atomically, never through a link, private unless asked.

Every file the package writes (a kernel's report, a scenario file) may lie in a folder other users
can write: ``/tmp``, where nbclient, papermill and a bare ``KernelManager`` put connection files, or
a shared runtime directory. :func:`replace_file` is the one writer such folders are safe for. It is
in ``core`` (the only file I/O here besides reading ``/proc/self``) because every layer that writes
files may import it, :mod:`jupyter_gpu.simulate` included, which may import nothing but ``core`` and
``sources.processes``. The claims board (:mod:`jupyter_gpu.sources.claims`) keeps its own writer:
it holds a lock file and wants a world-readable board.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["replace_file"]


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
