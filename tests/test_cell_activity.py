"""The server's cell clock: only cells (status messages whose parent is an execute_request) count
as activity; widget comm traffic, comm handling and other requests do not."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from jupyter_client.session import Session

from jupyter_gpu.server.cell_activity import CellClock, CellWatch
from jupyter_gpu.server.kernel_table import idle_figures


def test_a_cell_starts_and_ends_the_clock_and_nothing_else_moves_it() -> None:
    clock = CellClock(last_cell=100.0)
    assert clock.observe("status", "execute_request", "busy", 110.0)
    assert clock.running and clock.last_cell == 110.0
    assert clock.observe("status", "execute_request", "idle", 120.0)
    assert not clock.running and clock.last_cell == 120.0
    # widget updates from a thread carry the last cell's parent header but are no status messages
    assert not clock.observe("comm_msg", "execute_request", None, 130.0)
    # the kernel handling a front end's comm message, a completion, a kernel_info request
    for parent in ("comm_msg", "complete_request", "kernel_info_request", None):
        assert not clock.observe("status", parent, "busy", 140.0)
        assert not clock.observe("status", parent, "idle", 141.0)
    assert clock.last_cell == 120.0 and not clock.running


def test_a_restart_or_crash_ends_a_running_cell() -> None:
    clock = CellClock(last_cell=0.0)
    clock.observe("status", "execute_request", "busy", 5.0)
    clock.observe("status", "shutdown_request", "restarting", 6.0)
    assert not clock.running and clock.last_cell == 5.0


def test_the_state_shown_is_busy_only_while_a_cell_runs() -> None:
    clock = CellClock(last_cell=0.0)
    assert clock.execution_state("busy") == "idle"  # the manager's "busy" around a comm message
    assert clock.execution_state("starting") == "starting"
    clock.observe("status", "execute_request", "busy", 1.0)
    assert clock.execution_state("idle") == "busy"


class FakeStream:
    def __init__(self) -> None:
        self.receive: Any = None
        self.is_closed = False

    def on_recv(self, callback: Any) -> None:
        self.receive = callback

    def closed(self) -> bool:
        return self.is_closed

    def close(self) -> None:
        self.is_closed = True


class FakeKernel:
    """What CellWatch reads of a jupyter_server kernel manager's kernel."""

    def __init__(self, key: bytes = b"secret") -> None:
        self.session = Session(key=key)
        self.iopub_port = 5555
        self.execution_state = "idle"
        self.last_activity = datetime(2026, 1, 1, tzinfo=timezone.utc)
        self.streams: list[FakeStream] = []

    def connect_iopub(self) -> FakeStream:
        self.streams.append(FakeStream())
        return self.streams[-1]

    def publish(self, msg_type: str, content: dict[str, Any], parent_type: str | None, session: Any = None) -> None:
        """Send one IOPub message, signed by ``session`` (the kernel's, unless given), to the watch."""
        session = session or self.session
        parent = session.msg_header(parent_type) if parent_type else {}
        message = session.msg(msg_type, content, parent=parent)
        self.streams[-1].receive(session.serialize(message))


def test_the_watch_counts_cells_from_real_signed_messages_and_ignores_widget_traffic() -> None:
    watch = CellWatch()
    kernel = FakeKernel()
    clock = watch.follow("k1", kernel, pid=42)
    assert clock is not None and clock.last_cell == kernel.last_activity.timestamp()
    kernel.publish("status", {"execution_state": "busy"}, "execute_request")
    assert clock.running and clock.last_cell > kernel.last_activity.timestamp()
    kernel.publish("status", {"execution_state": "idle"}, "execute_request")
    ended = clock.last_cell
    kernel.publish("comm_msg", {"comm_id": "c", "data": {"method": "update"}}, "execute_request")
    kernel.publish("status", {"execution_state": "busy"}, "comm_msg")
    kernel.publish("status", {"execution_state": "idle"}, "comm_msg")
    assert clock.last_cell == ended and not clock.running
    # a message not signed with the kernel's key is dropped
    kernel.publish("status", {"execution_state": "busy"}, "execute_request", session=Session(key=b"other"))
    assert not clock.running
    # the same kernel is followed by the same subscription
    assert watch.follow("k1", kernel, pid=42) is clock and len(kernel.streams) == 1


def test_a_restarted_kernel_gets_a_new_subscription_and_clock_and_gone_kernels_are_dropped() -> None:
    watch = CellWatch()
    kernel = FakeKernel()
    first = watch.follow("k1", kernel, pid=42)
    second = watch.follow("k1", kernel, pid=43)
    assert second is not first and kernel.streams[0].is_closed and len(kernel.streams) == 2
    kernel.iopub_port = 6000
    assert watch.follow("k1", kernel, pid=43) is not second and kernel.streams[1].is_closed
    watch.keep_only([])
    assert kernel.streams[2].is_closed and watch.clock("k1") is None


def test_without_a_clock_the_kernel_managers_figures_are_used() -> None:
    kernel = FakeKernel()
    kernel.execution_state = "busy"
    assert idle_figures(kernel, None) == ("busy", kernel.last_activity.timestamp())
    assert idle_figures(kernel, CellClock(last_cell=7.0)) == ("idle", 7.0)
    assert CellWatch().follow("k", object(), pid=1) is None  # nothing to subscribe to
