"""When each kernel last ran a cell: the one idle clock of the server (sidebar, status bar, hub
console, culler and ``jupyter_gpu_kernel_idle_seconds`` all read it).

jupyter_server's own ``kernel.last_activity`` is bumped by every IOPub message a kernel sends, and
its ``execution_state`` turns "busy" around every ``comm_msg`` the kernel handles. A kernel with an
open ipywidgets panel (``%gpu_monitor``, any widget updated from a thread) therefore never looks
idle there: the widget updates are ``comm_msg`` messages on IOPub, published with the parent header
of the last cell (see docs/server.md). Idle here means **no cell has run**: this module watches each
kernel's IOPub stream itself and counts only the ``status`` messages whose parent is an
``execute_request`` (the kernel turns "busy" when a cell starts and "idle" when it ends; Jupyter
messaging protocol, "Kernel status"). Widget traffic, completions, inspections and comm handling
leave the clock alone. This works for every kernel, whether it loaded ``jupyter_gpu`` or not.

:class:`CellClock` is the rule (pure); :class:`CellWatch` is the wiring (one IOPub subscription per
kernel, on the server's event loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

CELL_REQUEST = "execute_request"


@dataclass
class CellClock:
    """When a kernel's last cell ended, and whether a cell runs now.

    ``last_cell`` starts as the time the clock started (a new kernel, or a restarted one, counts as
    active when it starts), and moves on at the start and at the end of every cell.
    """

    last_cell: float
    running: bool = False

    def observe(self, msg_type: str | None, parent_type: str | None, state: str | None, now: float) -> bool:
        """Take one IOPub message (its type, its parent's type, its status ``state``) into account;
        whether it was a cell's start or end."""
        if msg_type != "status":
            return False
        if state in ("starting", "restarting", "dead"):
            self.running = False  # a cell cut short by a restart or a crash never ends itself
            return False
        if parent_type != CELL_REQUEST or state not in ("busy", "idle"):
            return False
        self.running = state == "busy"
        self.last_cell = now
        return True

    def execution_state(self, manager_state: str | None) -> str | None:
        """The state the faces show: "busy" only while a cell runs (the kernel manager says "busy"
        also while the kernel handles a widget's comm message), otherwise the manager's state."""
        if self.running:
            return "busy"
        return "idle" if manager_state == "busy" else manager_state


class _Watched:
    """One kernel's subscription: its stream, the process and port it watches, and its clock."""

    def __init__(self, stream: Any, pid: int | None, port: Any, clock: CellClock) -> None:
        self.stream = stream
        self.pid = pid
        self.port = port
        self.clock = clock

    def close(self) -> None:
        try:
            if self.stream is not None and not self.stream.closed():
                self.stream.close()
        except Exception:
            log.debug("jupyter_gpu: closing an IOPub watch failed", exc_info=True)


class CellWatch:
    """The cell clocks of this server's kernels, fed by one IOPub subscription per kernel.

    :meth:`follow` is called for each kernel whenever the kernel table is read (event loop): it
    subscribes once, again when the kernel's process or IOPub port changed (a restart), and returns
    the kernel's clock. A kernel whose IOPub cannot be watched (no ``connect_iopub``) gets no clock:
    the table then falls back to the kernel manager's figures.
    """

    def __init__(self) -> None:
        self._watched: dict[str, _Watched] = {}

    def follow(self, kernel_id: str, kernel: Any, pid: int | None) -> CellClock | None:
        """The clock of ``kernel`` (watching it from now on), or None when it cannot be watched."""
        port = getattr(kernel, "iopub_port", None)
        watched = self._watched.get(kernel_id)
        if watched is not None and watched.pid == pid and watched.port == port:
            return watched.clock
        if watched is not None:  # restarted: a new process, maybe on new ports
            watched.close()
            clock = CellClock(time.time())
        else:
            last = getattr(kernel, "last_activity", None)  # first seen: the kernel manager's start time
            clock = CellClock(last.timestamp() if last is not None else time.time())
        try:
            stream = self._subscribe(kernel, clock)
        except Exception:
            log.debug("jupyter_gpu: cannot watch the IOPub of kernel %s", kernel_id, exc_info=True)
            self._watched.pop(kernel_id, None)
            return None
        self._watched[kernel_id] = _Watched(stream, pid, port, clock)
        return clock

    def clock(self, kernel_id: str) -> CellClock | None:
        """The clock of a watched kernel (None when it is not watched)."""
        watched = self._watched.get(kernel_id)
        return None if watched is None else watched.clock

    def keep_only(self, kernel_ids: Iterable[str]) -> None:
        """Stop watching the kernels not in ``kernel_ids`` (they went away)."""
        for kernel_id in set(self._watched) - set(kernel_ids):
            self._watched.pop(kernel_id).close()

    def close(self) -> None:
        """Stop watching every kernel."""
        self.keep_only(())

    @staticmethod
    def _subscribe(kernel: Any, clock: CellClock) -> Any:
        from jupyter_client.session import Session

        stream = kernel.connect_iopub()
        session = Session(
            config=kernel.session.config,
            key=kernel.session.key,
            signature_scheme=kernel.session.signature_scheme,
        )

        def on_message(frames: list[Any]) -> None:
            try:
                _, message_frames = session.feed_identities(frames)
                message = session.deserialize(message_frames, content=False)
                msg_type = message["header"].get("msg_type")
                if msg_type != "status":
                    return
                parent = message.get("parent_header") or {}
                content = session.unpack(message["content"])
                state = content.get("execution_state") if isinstance(content, dict) else None
                clock.observe(msg_type, parent.get("msg_type"), state, time.time())
            except Exception:  # a malformed message must not stop the watch
                log.debug("jupyter_gpu: an IOPub message could not be read", exc_info=True)

        stream.on_recv(on_message)
        return stream
