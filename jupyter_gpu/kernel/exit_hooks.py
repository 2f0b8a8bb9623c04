"""Clean-up that runs however a kernel ends, SIGKILL apart: its GPU claims and its kernel report.

A kernel ends in one of these ways, and :func:`at_kernel_exit` callbacks run in each:

- **it exits** (shut down by its server, ``exit``, ``sys.exit``): :mod:`atexit`;
- **SIGTERM or SIGHUP** (a provisioner's terminate, a closed terminal, a batch system): Python's
  default for both is to die without running :mod:`atexit`. A handler runs the callbacks, then
  hands the signal on: to the handler that was there before (a Python callable), or, when that was
  the default action, restores it and sends the signal again, so the kernel still dies *by that
  signal* (its exit status unchanged). A signal the process ignored (``SIG_IGN``) stays ignored
  and gets no handler: the kernel lives on, so its claims must stay;
- **its parent dies** (the hub stops or kills the user server): ipykernel's ``ParentPollerUnix``
  thread notices within a second and calls ``os._exit(1)`` (``ipykernel/parentpoller.py``,
  ipykernel 6 and 7.4.0), which runs no :mod:`atexit` callback and no signal handler. The poller
  calls ``os._exit`` through its module's ``os`` name at that moment, so that name is pointed at
  :class:`_ExitAfterCleanUp`, which is :mod:`os` except that ``_exit`` runs the callbacks first.
  Nothing else in ipykernel or in this process changes.

SIGKILL (the OOM killer, a provisioner's last resort) runs nothing: a claim left then counts for
nothing (a claim counts only while its process runs, :mod:`jupyter_gpu.sources.claims`), and the
server removes the claims and reports of its kernels when they are shut down.

Each callback runs at most once per process, whichever path comes first, and a failing one never
stops the others or the exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["at_kernel_exit", "run_exit_callbacks"]

SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_callbacks: list[Callable[[], None]] = []
_lock = threading.Lock()
_installed = False


def at_kernel_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` once when this kernel ends by exit, SIGTERM, SIGHUP or its parent's death."""
    global _installed
    with _lock:
        if callback not in _callbacks:
            _callbacks.append(callback)
        if _installed:
            return
        _installed = True
    atexit.register(run_exit_callbacks)
    for signum in SIGNALS:
        _chain_signal(signum)
    _wrap_parent_poller()


def run_exit_callbacks() -> None:
    """Run (and forget) every registered callback, each once; failures are swallowed."""
    with _lock:
        callbacks = list(_callbacks)
        _callbacks.clear()
    for callback in callbacks:
        with contextlib.suppress(Exception):
            callback()


def _chain_signal(signum: int) -> None:
    """Run the callbacks on ``signum``, then what was there before (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still applies
    try:
        previous = signal.getsignal(signum)
    except (ValueError, OSError):
        return
    if previous == signal.SIG_IGN or previous is None:
        return  # ignored (or set outside Python): the process lives on through it

    def handler(number: int, frame: FrameType | None) -> None:
        run_exit_callbacks()
        if callable(previous):
            previous(number, frame)
            return
        signal.signal(number, signal.SIG_DFL)  # default action: die by the same signal
        os.kill(os.getpid(), number)

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signum, handler)


class _ExitAfterCleanUp:
    """:mod:`os` for ipykernel's parent poller, whose ``os._exit`` first runs the exit callbacks."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def _exit(status: int) -> None:
        run_exit_callbacks()
        os._exit(status)


def _wrap_parent_poller() -> None:
    """Let ipykernel's parent poller run the callbacks before its ``os._exit`` (when ipykernel is loaded)."""
    poller = sys.modules.get("ipykernel.parentpoller")
    if poller is not None and getattr(poller, "os", None) is os:
        poller.os = _ExitAfterCleanUp()  # type: ignore[attr-defined]
