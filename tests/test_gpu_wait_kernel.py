"""``%gpu_select auto:N --wait`` in a real kernel: the live line is one updated output, an interrupt
from the frontend stops the wait with one line and nothing changed, and freed GPUs end the wait."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from support import ScenarioFile, start_kernel

pytestmark = pytest.mark.frameworks  # a real kernel (slow)

FULL = {"pid": 910001, "memory_mib": 60000, "user": "bob", "name": "python"}


def busy(scenario: ScenarioFile, free: bool = False) -> None:
    def change(data: dict) -> None:
        for gpu in data["gpus"]:
            gpu["processes"] = [] if free else [FULL]

    scenario.update(change)


def collect(client: Any, msg_id: str, until: Any, timeout: float = 60) -> list[dict]:
    """IOPub messages of ``msg_id`` until ``until(messages)`` is true (or the cell is idle)."""
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = client.get_iopub_msg(timeout=0.5)
        except Exception:
            continue
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(message)
        if until(messages) or (message["msg_type"] == "status" and message["content"]["execution_state"] == "idle"):
            return messages
    raise AssertionError(f"timed out; got {[m['msg_type'] for m in messages]}")


def text(messages: list[dict]) -> str:
    parts = []
    for message in messages:
        content = message["content"]
        if message["msg_type"] == "stream":
            parts.append(content["text"])
        elif message["msg_type"] in ("display_data", "update_display_data"):
            parts.append(content["data"].get("text/plain", "") + "\n")
        elif message["msg_type"] == "error":
            parts.append(f"{content['ename']}: {content['evalue']}\n")
    return "".join(parts)


def test_interrupt_stops_the_wait_and_changes_nothing_then_a_freed_gpu_is_taken(
    scenario: ScenarioFile, tmp_path: Path
) -> None:
    busy(scenario)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    manager, client = start_kernel(tmp_path, env)
    try:
        client.execute("%load_ext jupyter_gpu\nimport os", reply=True, timeout=60)
        msg_id = client.execute("%gpu_select auto:1 --min-free 40GiB --wait 1h")
        shown = collect(client, msg_id, lambda ms: sum(m["msg_type"] == "update_display_data" for m in ms) >= 2)
        assert [m["msg_type"] for m in shown].count("display_data") == 1  # one line, updated in place
        assert "Waiting for auto:1 with at least 40GiB free — GPU 0: 20.9 GiB free; bob 58.6 GiB" in text(shown)
        manager.interrupt_kernel()
        rest = collect(client, msg_id, lambda ms: False)
        assert "UsageError: stopped waiting for auto:1 after" in text(rest) and "nothing was changed" in text(rest)
        reply = client.execute(
            "", user_expressions={"v": "os.environ.get('CUDA_VISIBLE_DEVICES')"}, reply=True, timeout=60
        )
        assert reply["content"]["user_expressions"]["v"]["data"]["text/plain"] == "None"

        msg_id = client.execute("%gpu_select auto:1 --min-free 40GiB --wait 1h")
        collect(client, msg_id, lambda ms: any(m["msg_type"] == "update_display_data" for m in ms))
        busy(scenario, free=True)  # bob's jobs end
        done = text(collect(client, msg_id, lambda ms: False))
        assert "the GPUs fit now" in done and "GPU 0 (A100-SXM4-80GB [simulated], 79.5 GiB free)" in done, done
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
