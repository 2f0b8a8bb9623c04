"""What jupyter_gpu says in a Jupyter server goes through the server's own log.

jupyter_gpu's modules log to ``logging.getLogger(__name__)`` (``jupyter_gpu.server.service``,
``jupyter_gpu.sources.remote``, …). Nobody configures those loggers in a Jupyter server: the server's
log is its application logger (``ServerApp``, ``propagate = False``, its own stderr handler), so
their warnings fell through to Python's last-resort handler and reached stderr bare, without time,
level or logger. When the extension loads, :func:`attach` gives the ``jupyter_gpu`` logger a
handler that hands each record to the server's log: its format (``log_format``, ``log_datefmt``),
its handlers (``logging_config``; those of the server's logger itself) and its level
(``--log-level``, followed when it changes) apply, the way jupyter_server itself hooks tornado's
loggers to its own (``ServerApp.init_logging``, jupyter_server 2.21). The handler stays for the
process's life: jupyter_server 2 never unloads a module extension.

On a JupyterHub, every user server writes into the hub's log; each line then names the server it
comes from (``server alice``, ``server alice/second`` for a named server, from ``JUPYTERHUB_USER``
and ``JUPYTERHUB_SERVER_NAME``), so five identical lines of five servers can be told apart.
Records still propagate to the root logger as before (nothing is printed there unless something
configured it).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["ServerLogHandler", "attach", "detach", "server_name"]

PACKAGE = "jupyter_gpu"
_PREFIX = "jupyter_gpu: "  # the kernels' lines start so; in the server the logger's name says it


def server_name(environ: dict[str, str] | None = None) -> str:
    """``"server alice"`` (``"server alice/second"``) on a JupyterHub, else ``""``."""
    environ = dict(os.environ) if environ is None else environ
    user = environ.get("JUPYTERHUB_USER", "")
    if not user:
        return ""
    name = environ.get("JUPYTERHUB_SERVER_NAME", "")
    return f"server {user}/{name}" if name else f"server {user}"


class ServerLogHandler(logging.Handler):
    """Hands ``jupyter_gpu`` records to the server's log, naming the hub server they come from."""

    def __init__(self, server_log: logging.Logger, context: str = "") -> None:
        super().__init__()
        self.server_log = server_log
        self.context = context
        self.follow: Callable[[Any], None] | None = None  # keeps the level in step (see attach)
        self.level_before = logging.NOTSET  # the jupyter_gpu logger's level before attach
        self.serverapp: Any = None  # the application attach() follows

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if message.startswith(_PREFIX):
                message = message[len(_PREFIX) :]
            moved = copy.copy(record)  # the record itself still goes on to other handlers unchanged
            moved.msg = f"{self.context}: {message}" if self.context else message
            moved.args = None
            # The server log's own handlers only: the record itself goes on to the root logger
            # (as before), so a server log that propagates must not bring it there twice.
            for handler in self.server_log.handlers:
                if moved.levelno >= handler.level:
                    handler.handle(moved)
        except Exception:
            self.handleError(record)


def attach(serverapp: Any) -> ServerLogHandler:
    """Send the ``jupyter_gpu`` loggers' records to ``serverapp.log`` at its ``log_level`` (kept in step).

    One server per process: a server attached earlier in this process (tests start many; jupyter_server
    2 never unloads a module extension) is detached first."""
    package = logging.getLogger(PACKAGE)
    level_before = package.level
    for earlier in [h for h in package.handlers if isinstance(h, ServerLogHandler)]:
        detach(earlier.serverapp, earlier)
        level_before = earlier.level_before
    handler = ServerLogHandler(serverapp.log, server_name())
    handler.serverapp = serverapp
    handler.level_before = level_before
    package.addHandler(handler)
    package.setLevel(_level(serverapp))

    def follow(_change: Any) -> None:
        package.setLevel(_level(serverapp))

    handler.follow = follow
    try:
        serverapp.observe(follow, names=["log_level"])
    except Exception:  # not a traitlets application (a test double): its level at start stays
        pass
    return handler


def detach(serverapp: Any, handler: ServerLogHandler) -> None:
    """Undo :func:`attach` (the extension is unloaded)."""
    package = logging.getLogger(PACKAGE)
    package.removeHandler(handler)
    package.setLevel(handler.level_before)
    try:
        serverapp.unobserve(handler.follow, names=["log_level"])
    except Exception:
        pass


def _level(serverapp: Any) -> int:
    level = getattr(serverapp, "log_level", logging.INFO)
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    return level if isinstance(level, int) else logging.INFO
