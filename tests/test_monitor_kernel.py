"""A real kernel (jupyter_client + ipykernel) runs a cell while a GPU panel polls simulated GPUs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager
from kernels import execute_drained, iopub_until_idle
from support import start_kernel


@pytest.fixture
def kernel(scenario: Any, tmp_path: Path) -> Iterator[BlockingKernelClient]:
    manager: KernelManager
    manager, client = start_kernel(tmp_path)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def execute(client: BlockingKernelClient, code: str, timeout: float = 60) -> tuple[str, list[dict[str, Any]]]:
    """Run ``code``; return its stdout and every iopub message sent while it ran."""
    msg_id = execute_drained(client, code)
    stdout: list[str] = []
    messages = iopub_until_idle(client, msg_id, timeout)
    for message in messages:
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "error":
            raise AssertionError("\n".join(content["traceback"]))
    reply = client.get_shell_msg(timeout=10)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(stdout), messages


def test_a_cell_runs_while_the_panel_polls(kernel: BlockingKernelClient, scenario: Any) -> None:
    out, messages = execute(
        kernel,
        (
            "from jupyter_gpu.kernel import monitor_magics\n"
            "monitor_magics.register(get_ipython())\n"
            "%gpu_monitor --interval 0.1\n"
            "from jupyter_gpu.panel import widget\n"
            "import threading, time\n"
            "panel = widget.open_panels()[0]\n"
            "deadline = time.monotonic() + 60\n"
            "while not panel.updates and time.monotonic() < deadline:\n"
            "    time.sleep(0.02)\n"
            "print(len(panel.rows))\n"
            "print(panel.status.value)"
        ),
    )
    assert out.splitlines()[0] == "2", out
    views = [m for m in messages if m["msg_type"] == "display_data"]
    assert any("application/vnd.jupyter.widget-view+json" in m["content"]["data"] for m in views)
    assert views[0]["content"]["data"]["text/plain"] == "GPUMonitor(interval_s=0.1, history=60)"

    scenario.update(lambda data: data["gpus"][0].update(utilization=66))
    out, messages = execute(
        kernel,
        (
            "sampler = widget.shared_sampler()\n"
            "before, updates = sampler.samples_taken, panel.updates\n"
            "main = threading.current_thread().name\n"
            "for i in range(4):\n"
            "    print('tick', i, flush=True)\n"
            "    time.sleep(0.5)\n"
            "print('samples', sampler.samples_taken - before, 'updates', panel.updates - updates)\n"
            "print('threads', sorted(t.name for t in threading.enumerate() if t.name.startswith('jupyter-gpu')))\n"
            "print('utilization', panel.rows[0].utilization.value)\n"
        ),
    )
    lines = out.splitlines()
    assert lines[:4] == ["tick 0", "tick 1", "tick 2", "tick 3"]
    _, samples, _, updates = lines[4].split()
    assert int(samples) >= 5 and int(updates) >= 5  # ~20 expected in 2 s; the box is shared and slow
    assert lines[5] == "threads ['jupyter-gpu-monitor']"
    assert lines[6] == "utilization util 66 %"
    # the panel's model updates reached the front end while the cell was running
    updates_sent = [
        m for m in messages if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"
    ]
    assert len(updates_sent) >= 5
    assert any("util 66 %" in json.dumps(m["content"]["data"]["state"]) for m in updates_sent)

    out, _ = execute(
        kernel,
        (
            "panel.close()\n"
            "deadline = time.monotonic() + 60\n"
            "while sampler.running and time.monotonic() < deadline:\n"
            "    time.sleep(0.05)\n"
            "print('threads', sorted(t.name for t in threading.enumerate() if t.name.startswith('jupyter-gpu')))\n"
        ),
    )
    assert out.strip() == "threads []"


def test_close_replaces_the_panel_by_a_line_of_text(kernel: BlockingKernelClient, scenario: Any) -> None:
    _, messages = execute(
        kernel,
        "from jupyter_gpu.kernel import monitor_magics\nmonitor_magics.register(get_ipython())\n%gpu_monitor",
    )
    (shown,) = [m for m in messages if m["msg_type"] == "display_data"]
    display_id = shown["content"]["transient"]["display_id"]
    assert "application/vnd.jupyter.widget-view+json" in shown["content"]["data"]
    # the "Close" button, as a front end's click reaches the kernel
    _, messages = execute(kernel, "from jupyter_gpu.panel import widget\nwidget.open_panels()[0].close_button.click()")
    (replaced,) = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert replaced["content"]["transient"]["display_id"] == display_id
    assert replaced["content"]["data"] == {"text/plain": "GPU panel closed; run %gpu_monitor for a new one."}
    out, _ = execute(
        kernel,
        (
            "import time\nsampler = widget.shared_sampler()\n"
            "deadline = time.monotonic() + 60  # the thread ends after its current sample\n"
            "while sampler.running and time.monotonic() < deadline:\n"
            "    time.sleep(0.05)\n"
            "print(widget.open_panels(), sampler.running)\n"
        ),
    )
    assert out.strip() == "[] False"
