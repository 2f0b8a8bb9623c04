"""Kernel reports do not outlive their kernels, however the server stops (issue 12, section 5).

Real ``jupyter server`` processes with real kernels that load the jupyter_gpu IPython extension
(from ``ipython_kernel_config.py``, as docs/server.md says) on simulated GPUs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from live_processes import LiveServer, stop, wait_for

from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX

SERVER_CONFIG = {"interval_s": 0.5, "linger_s": 30, "host_label": "sim-host"}


@pytest.fixture
def kernels_load_the_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text('c.InteractiveShellApp.extensions = ["jupyter_gpu"]\n')
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


def reports(runtime: Path) -> list[str]:
    return sorted(p.name for p in runtime.iterdir() if p.name.startswith(REPORT_PREFIX))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_server_stopped_by_a_signal_leaves_no_report(tmp_path, scenario, kernels_load_the_extension, how):
    server = LiveServer(tmp_path / "alice", "alice", "token-a", SERVER_CONFIG)
    try:
        kernel = server.start_kernel()
        runtime = tmp_path / "alice" / "runtime"
        wait_for("the kernel's report", lambda: reports(runtime), 60)
        # When the hub stops the server (LocalProcessSpawner: SIGINT, then SIGTERM)
        server.process.send_signal(getattr(signal, how))
        server.process.wait(timeout=60)
        wait_for("the kernel to exit", lambda: not psutil.pid_exists(kernel), 30)
        assert reports(runtime) == []
    finally:
        stop(server.process)


def test_reports_of_a_killed_server_are_removed_when_a_server_starts_again(
    tmp_path, scenario, kernels_load_the_extension
):
    # Given a server killed outright (SIGKILL) while its kernel ran: the kernel dies through
    # ipykernel's parent poller (os._exit) and its report stays behind
    base = tmp_path / "alice"
    server = LiveServer(base, "alice", "token-a", SERVER_CONFIG)
    try:
        kernel = server.start_kernel()
        runtime = base / "runtime"
        (left,) = wait_for("the kernel's report", lambda: reports(runtime), 60)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
        wait_for("the orphaned kernel to exit", lambda: not psutil.pid_exists(kernel), 30)
        assert reports(runtime) == [left]
    finally:
        stop(server.process)
    # and a report of a process that still runs (a kernel outliving its server, say)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        from jupyter_gpu.sources.processes import process_start

        data = json.loads((runtime / left).read_text())
        data.update(kernel_id="still-running", pid=alive.pid, start_time=process_start(alive.pid))
        still = runtime / f"{REPORT_PREFIX}still-running.json"
        still.write_text(json.dumps(data))
        # When the hub starts the server again on the same runtime directory
        again = LiveServer(base, "alice", "token-a", SERVER_CONFIG)
        try:
            # Then the dead kernel's report is gone, the live process's kept
            assert reports(runtime) == [still.name]
        finally:
            stop(again.process)
    finally:
        alive.kill()
        alive.wait()


def test_the_docs_name_the_config_file_kernels_read(tmp_path: Path) -> None:
    """README and docs/magics.md name the same, kernel-specific file (the test above uses it)."""
    repo = Path(__file__).resolve().parent.parent
    for doc in ("README.md", "docs/magics.md", "docs/server.md"):
        text = (repo / doc).read_text()
        assert "ipython_kernel_config.py" in text, doc
        assert "/ipython_config.py" not in text, doc  # no autoload advice naming the other file


def test_the_refresh_after_a_kernel_start_is_the_services_and_ends_with_it(demo_gpus: None) -> None:
    """A kernel start refreshes the kernel table at once and again shortly after (its session is
    saved just after). jupyter_events runs the listener as a task; the late refresh is a task the
    service keeps, so closing the service leaves nothing pending ("Task was destroyed but it is
    pending" at the loop's end) and nothing refreshes after it closed."""
    import asyncio

    from jupyter_gpu.server import GpuService, JupyterGpuServer

    loop = asyncio.new_event_loop()
    service = GpuService(JupyterGpuServer(interval_s=60))
    refreshes: list[str] = []
    real_refresh = service._refresh_kernels

    async def counted() -> None:
        refreshes.append("refresh")
        await real_refresh()

    service._refresh_kernels = counted  # type: ignore[method-assign]
    start = {"action": "start", "kernel_id": "k1", "status": "success"}
    listeners = []  # jupyter_events keeps its listeners' tasks too

    async def event_then_until(count: int) -> None:
        listeners.append(loop.create_task(service._on_kernel_action(data=start)))  # as jupyter_events does
        for _ in range(3000):
            if len(refreshes) >= count:
                return
            await asyncio.sleep(0.01)

    try:
        service.follow_up_s = 0.05
        loop.run_until_complete(event_then_until(2))
        assert len(refreshes) == 2  # at once, and the follow-up
        service.follow_up_s = 3600.0
        loop.run_until_complete(event_then_until(3))  # the immediate refresh; the follow-up waits
        service.close()
        assert [task for task in asyncio.all_tasks(loop) if not task.done()] == []
        assert len(refreshes) == 3  # the cancelled follow-up never refreshed
    finally:
        service.close()
        loop.close()
