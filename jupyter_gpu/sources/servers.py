"""This user's running Jupyter servers: found through their runtime files, asked with their token.

jupyter_server writes ``jpserver-<pid>.json`` (URL, token, PID) into the user's runtime directory
(``jupyter --runtime-dir``; for a kernel, the folder of its connection file). Three faces ask the
user's own server for what only it knows (kernels, notebooks, idle times): the host sample
(:mod:`.host`: panels, ``%gpu_watch``, ``jupyter-gpu status``), the out-of-memory report's peers
(:mod:`.peers`) and ``jupyter-gpu doctor``. They find and ask it here, by one rule:

**Who gets the token.** The server's token opens the user's server: whoever receives it can run
code as this user. A runtime file counts only when it is a small regular file owned by this user,
opened without following a link (``O_NOFOLLOW``, checked on the open descriptor), and names a live
process; the token is only sent over ``http://`` to a listener of this host owned by this user
(:func:`jupyter_gpu.sources.remote.opener`: ``/proc/net/tcp`` records the owner of the listening
socket), or over ``https://`` when TLS verifies the host; redirects are not followed. A port
another user listens on (a server that died, its port taken) gets nothing. Answers are read with
:mod:`jupyter_gpu.core.wire` (bounded, strict).
"""

from __future__ import annotations

import os
import stat
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.wire import Fields, WireError, loads, maybe

__all__ = ["RunningServer", "ask", "own_runtime_file", "running_servers", "runtime_folder"]

MAX_RUNTIME_FILE = 64 * 1024
MAX_SERVERS = 16
_PID = (1, 2**31 - 1)


@dataclass(frozen=True)
class RunningServer:
    """A Jupyter server of this user, as its runtime file says."""

    url: str  # ends with "/"
    token: str
    pid: int
    path: Path


def runtime_folder() -> Path | None:
    """This user's Jupyter runtime directory (``jupyter_core``'s rule), None without jupyter_core."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        return Path(jupyter_runtime_dir())
    except Exception:
        return None


def own_runtime_file(path: Path) -> Fields | None:
    """A runtime file's JSON when it is a small regular file of this user; None otherwise.

    Opened without following a link (``O_NOFOLLOW``) and checked on the open descriptor."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > MAX_RUNTIME_FILE:
            return None
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            return Fields(loads(file.read(MAX_RUNTIME_FILE + 1), max_bytes=MAX_RUNTIME_FILE))
    except (OSError, WireError):
        return None
    finally:
        os.close(descriptor)


def _ancestors() -> list[int]:
    try:
        import psutil

        return [parent.pid for parent in psutil.Process().parents()]
    except Exception:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs (another user's: its listener check will say no)
    return True


def running_servers(runtime_dir: Path | None, ancestors_only: bool) -> list[RunningServer]:
    """This user's running servers from ``runtime_dir``: ancestors of this process first (nearest
    first), then (unless ``ancestors_only``) the others, newest runtime file first."""
    if runtime_dir is None:
        return []
    try:
        paths = sorted(runtime_dir.glob("jpserver-*.json"), key=lambda p: p.name)[:256]
    except OSError:
        return []
    ancestors = _ancestors()
    rank = {pid: position for position, pid in enumerate(ancestors)}
    found: list[tuple[tuple[int, float], RunningServer]] = []
    for path in paths:
        info = own_runtime_file(path)
        if info is None:
            continue
        pid = maybe(info.integer, "pid", *_PID)
        url, token = maybe(info.text, "url", 4096), maybe(info.text, "token", 4096)
        if pid is None or url is None or not token or not url.startswith(("http://", "https://")):
            continue  # no token (password login, or no auth): nothing to authenticate with
        if pid not in rank and (ancestors_only or not _alive(pid)):
            continue
        try:
            age = -path.lstat().st_mtime
        except OSError:
            continue
        server = RunningServer(url if url.endswith("/") else url + "/", token, pid, path)
        found.append(((rank.get(pid, len(ancestors)), age), server))
    return [server for _, server in sorted(found, key=lambda item: item[0])][:MAX_SERVERS]


def ask(
    server: RunningServer,
    path: str,
    timeout_s: float,
    max_bytes: int,
    via: urllib.request.OpenerDirector | None = None,
) -> Any:
    """``GET {server.url}{path}`` with the server's own token; the answer's JSON (untrusted: read
    with :mod:`jupyter_gpu.core.wire`). Over ``http://`` only to a listener of this user (``via``:
    an opener from :func:`jupyter_gpu.sources.remote.opener` to reuse). Raises ``OSError``
    (``urllib.error.HTTPError`` for an HTTP status) or :class:`jupyter_gpu.sources.remote.BadAnswer`."""
    from .remote import BadAnswer, opener

    request = urllib.request.Request(
        server.url + path, headers={"Authorization": f"token {server.token}", "Accept": "application/json"}
    )
    with (via or opener(str(os.getuid()))).open(request, timeout=timeout_s) as response:
        body = response.read(max_bytes + 1)
    try:
        return loads(body, max_bytes=max_bytes)
    except WireError as error:
        raise BadAnswer(f"the answer is unusable: {error}") from None
