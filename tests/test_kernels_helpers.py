"""The kernel-driving helpers of ``kernels`` hold their deadlines (issue 28: green under load)."""

from __future__ import annotations

import queue
from typing import Any

import pytest
from kernels import execute_drained, iopub_until_idle


class ChattyClient:
    """A kernel client whose IOPub never runs dry (a panel updating) and whose cell never says idle."""

    def __init__(self, waiting: int = 0) -> None:
        self.waiting = waiting  # messages queued before the cell is sent
        self.sent: list[str] = []

    def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]:
        if self.waiting:
            self.waiting -= 1
            return {"parent_header": {"msg_id": "earlier"}, "msg_type": "comm_msg", "content": {}}
        if timeout == 0 and not self.sent:
            raise queue.Empty
        return {"parent_header": {"msg_id": "panel"}, "msg_type": "comm_msg", "content": {}}

    def execute(self, code: str) -> str:
        self.sent.append(code)
        return "cell"


def test_the_deadline_holds_while_other_messages_keep_coming() -> None:
    with pytest.raises(AssertionError, match=r"no idle status of cell within 0\.2 s"):
        iopub_until_idle(ChattyClient(), "cell", 0.2)  # type: ignore[arg-type]


def test_messages_waiting_since_the_last_cell_are_read_away_first() -> None:
    client = ChattyClient(waiting=1500)  # more than ZMQ's high-water mark of 1,000
    assert execute_drained(client, "print(1)") == "cell"  # type: ignore[arg-type]
    assert client.waiting == 0 and client.sent == ["print(1)"]


def test_the_idle_status_of_the_cell_ends_the_read() -> None:
    class Answering(ChattyClient):
        def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]:
            return {"parent_header": {"msg_id": "cell"}, "msg_type": "status", "content": {"execution_state": "idle"}}

    messages = iopub_until_idle(Answering(), "cell", 5)  # type: ignore[arg-type]
    assert [m["msg_type"] for m in messages] == ["status"]
