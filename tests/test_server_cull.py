"""GPU-aware culling in the server extension, against a real Jupyter Server and real kernels on
simulated GPUs, with short timeouts (``cull_idle_after_s`` 2 s, warning 1.5 s before)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import NOTEBOOK, asynctest, get_snapshot, kernel_pid, metric_samples, place, run_code, start_session, until

from jupyter_gpu.server import GpuService

pytestmark = pytest.mark.usefixtures("stop_sampler_after_test")

MIB = 1024 * 1024
AFTER = 2.0
WARN = 1.5


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
        "JupyterGpuServer": {
            "interval_s": 0.1,
            "linger_s": 5.0,
            "wait_s": 1.0,
            "cull_idle_after_s": AFTER,
            "cull_warn_s": WARN,
            "host_label": "node-7",
        },
    }


def kernel(data: dict[str, Any], kernel_id: str) -> dict[str, Any]:
    return next(k for k in data["kernels"] if k["kernel_id"] == kernel_id)


def alive(serverapp: Any, kernel_id: str) -> bool:
    return kernel_id in serverapp.kernel_manager.list_kernel_ids()


CULL_DEADLINE_S = 60.0
"""How long a test waits for a due kernel to go: the culler looks every 0.2 s, but a loaded machine
(parallel workers, other work beside them) may take seconds per round."""


class CullerSwitch:
    """Holds the server's culler while a test reads a countdown, so a kernel whose warning window
    (``WARN`` s) passes on a loaded machine before the test looks is not gone already; the figures
    are computed in every answer whether the culler runs or not, and :meth:`resume` starts it again
    for the cull itself."""

    def __init__(self, serverapp: Any) -> None:
        self.culler = serverapp.web_app.settings[GpuService.SETTINGS_KEY].culler
        self.culler.cancel()

    async def resume(self) -> None:
        task = self.culler._task
        if task is not None:
            await asyncio.wait([task])  # cancelled: done once it has run its cancellation
        self.culler.start()


@pytest.fixture
def held_culler(jp_serverapp: Any) -> CullerSwitch:
    return CullerSwitch(jp_serverapp)


async def until_gone(serverapp: Any, kernel_ids: list[str], what: str) -> None:
    """Wait until none of ``kernel_ids`` is left (culled), at most :data:`CULL_DEADLINE_S`."""
    deadline = time.monotonic() + CULL_DEADLINE_S
    while any(alive(serverapp, kernel_id) for kernel_id in kernel_ids):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def counts_down(kernel: dict[str, Any], postponed_s: float = 0.0) -> bool:
    """Whether ``kernel``'s countdown is the rule's for its idle time (``core.culling.cull_in_s``)."""
    return kernel["cull_in_s"] == pytest.approx(max(0.0, AFTER + postponed_s - kernel["idle_s"]), abs=0.002)


@asynctest
async def test_an_idle_kernel_holding_gpu_memory_is_warned_then_culled_and_logged(
    jp_fetch, jp_serverapp, scenario, caplog, held_culler
):
    caplog.set_level(logging.WARNING, logger="jupyter_gpu")
    # Given a notebook's kernel holding 3 GiB on GPU 1 and then left alone
    kernel_id = await start_session(jp_fetch)
    place(scenario, 1, pid=kernel_pid(jp_serverapp, kernel_id), memory_mib=3072)
    data = await until(jp_fetch, lambda d: kernel(d, kernel_id)["gpu_memory"])
    assert data["cull_idle_after_s"] == AFTER and data["cull_warn_s"] == WARN
    first = kernel(data, kernel_id)
    assert first["cull_in_s"] is not None and first["cull_in_s"] <= AFTER
    # Then, cull_warn_s before the cull, the snapshot warns and counts down
    warned = kernel(await until(jp_fetch, lambda d: kernel(d, kernel_id)["cull_warning"]), kernel_id)
    assert 0 <= warned["cull_in_s"] <= WARN and counts_down(warned)
    later = kernel(await until(jp_fetch, lambda d: kernel(d, kernel_id)["idle_s"] > warned["idle_s"]), kernel_id)
    assert later["cull_warning"] is True and counts_down(later) and later["cull_in_s"] <= warned["cull_in_s"]
    # and /metrics exposes the idle figure and the countdown, with the user
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    (countdown,) = scrape["jupyter_gpu_kernel_cull_in_seconds"]
    assert countdown.labels["kernel_id"] == kernel_id and countdown.labels["notebook"] == NOTEBOOK
    assert countdown.value <= WARN
    (idle,) = scrape["jupyter_gpu_kernel_idle_seconds"]
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert idle.labels["user"] == service.user != ""
    # When cull_idle_after_s has passed, the kernel is shut down through the kernel manager
    await held_culler.resume()
    await until_gone(jp_serverapp, [kernel_id], "the idle GPU kernel was not culled")
    assert service.culler.culled == 1
    # and the cull is logged with user, notebook, GPU and memory freed
    (record,) = [r for r in caplog.records if "culled idle GPU kernel" in r.getMessage()]
    message = record.getMessage()
    uuid = data["gpus"][1]["uuid"]
    for words in (kernel_id, f"user {service.user}", NOTEBOOK, f"GPU 1 ({uuid})", "3072.0 MiB"):
        assert words in message
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    culled = [(s.name, s.value) for s in scrape["jupyter_gpu_kernels_culled"]]
    assert culled == [("jupyter_gpu_kernels_culled_total", 1)]
    # and GET jupyter-gpu/culls says so, for the notification that stays
    (cull,) = json.loads((await jp_fetch("jupyter-gpu", "culls")).body)["culls"]
    assert cull["kernel_id"] == kernel_id and cull["notebook"] == NOTEBOOK
    assert cull["memory"] == 3072 * MIB and cull["gpus"] == [1] and cull["idle_s"] >= AFTER


@asynctest
async def test_busy_kernels_and_kernels_without_gpu_memory_are_never_culled(
    jp_fetch, jp_serverapp, scenario, held_culler
):
    # Given a kernel holding no GPU memory and a kernel holding GPU memory that runs a long cell (the
    # culler held until the cell runs: a kernel slow to start is idle, and culled, before its first cell)
    plain = await start_session(jp_fetch, "plain.ipynb")
    busy = await start_session(jp_fetch, "busy.ipynb")
    place(scenario, 0, pid=kernel_pid(jp_serverapp, busy), memory_mib=1024)
    cell = asyncio.ensure_future(run_code(jp_serverapp, busy, "import time; time.sleep(5)"))
    await until(jp_fetch, lambda d: kernel(d, busy)["execution_state"] == "busy" and kernel(d, busy)["gpu_memory"])
    await held_culler.resume()
    # When more than twice cull_idle_after_s passes while the cell runs (it sleeps 5 s in the kernel:
    # the loop ends with the cell, however slowly a loaded machine answers)
    started = time.monotonic()
    while not cell.done():
        data = await get_snapshot(jp_fetch)
        # Then neither is a candidate nor culled
        assert kernel(data, plain)["cull_in_s"] is None and kernel(data, plain)["cull_warning"] is False
        # The answer's own execution state, not the test's future: the kernel goes idle, and its
        # countdown rightly starts, a few ms before the test has read the cell's reply (a whole run
        # saw cull_in_s 1.994 with the future not yet done).
        if kernel(data, busy)["execution_state"] == "busy":
            assert kernel(data, busy)["cull_in_s"] in (None, AFTER)
        if not cell.done():
            assert alive(jp_serverapp, busy)
        assert alive(jp_serverapp, plain)
        await asyncio.sleep(0.1)
    await cell
    assert time.monotonic() - started > 2 * AFTER
    # and once the busy one is idle (still holding memory), it is culled; the other never
    await until_gone(jp_serverapp, [busy], "the formerly busy GPU kernel was not culled once idle")
    assert alive(jp_serverapp, plain)


@asynctest
async def test_a_kernel_with_an_open_gpu_panel_is_flagged_idle_and_culled_like_any_other(
    jp_fetch, jp_serverapp, scenario, held_culler
):
    # Given a kernel showing a live %gpu_monitor panel (its updates flow on IOPub as widget comm
    # messages) and a kernel without one, both holding GPU memory and then left alone
    panel = await start_session(jp_fetch, "panel.ipynb")
    plain = await start_session(jp_fetch, "plain.ipynb")
    await run_code(jp_serverapp, panel, "%load_ext jupyter_gpu\n%gpu_monitor --interval 0.1")
    await run_code(jp_serverapp, plain, "x = 1")
    place(scenario, 0, pid=kernel_pid(jp_serverapp, panel), memory_mib=5120)
    place(scenario, 1, pid=kernel_pid(jp_serverapp, plain), memory_mib=1024)
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    # Then the panel's kernel is counted idle from its last cell, as the plain one is
    data = await until(jp_fetch, lambda d: kernel(d, panel)["gpu_memory"] and kernel(d, panel)["idle_s"] >= 1.5)
    assert kernel(data, panel)["execution_state"] == "idle"
    # although the panel kept the kernel talking after that cell (jupyter_server's own activity
    # clock moved on, which is what kept such a kernel "active" before)
    manager_last = jp_serverapp.kernel_manager.get_kernel(panel).last_activity.timestamp()
    assert manager_last > service._table.kernels[panel].last_activity
    # and the idle gauge carries the same figure
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    idle = {s.labels["kernel_id"]: s.value for s in scrape["jupyter_gpu_kernel_idle_seconds"]}
    assert idle[panel] >= 1.5
    # When cull_idle_after_s has passed, both are culled
    await held_culler.resume()
    await until_gone(jp_serverapp, [panel, plain], "a kernel with an open GPU panel was not culled")
    assert service.culler.culled == 2


@asynctest
async def test_gpu_info_series_carries_uuid_and_host_and_kernel_series_the_user(jp_fetch, jp_serverapp, scenario):
    kernel_id = await start_session(jp_fetch)
    place(scenario, 0, pid=kernel_pid(jp_serverapp, kernel_id), memory_mib=512)
    data = await until(jp_fetch, lambda d: kernel(d, kernel_id)["gpu_memory"])
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    infos = {s.labels["gpu"]: s for s in scrape["jupyter_gpu_gpu_info"]}
    assert sorted(infos) == ["0", "1"]
    for gpu in data["gpus"]:
        sample = infos[str(gpu["index"])]
        assert sample.value == 1 and sample.labels["UUID"] == gpu["uuid"] and sample.labels["host"] == "node-7"
    (memory,) = scrape["jupyter_gpu_kernel_memory_used_bytes"]
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert memory.labels["user"] == service.user and memory.labels["UUID"] == data["gpus"][0]["uuid"]
    assert memory.value == 512 * MIB


@asynctest
async def test_culling_is_off_by_default_and_the_host_defaults_to_the_host_name(
    jp_fetch, jp_serverapp, scenario, monkeypatch
):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    service.config.cull_idle_after_s = 0
    service.config.host_label = ""
    monkeypatch.delenv("JUPYTER_GPU_HOST", raising=False)
    kernel_id = await start_session(jp_fetch)
    await run_code(jp_serverapp, kernel_id, "x = 1")
    place(scenario, 0, pid=kernel_pid(jp_serverapp, kernel_id), memory_mib=512)
    data = await until(jp_fetch, lambda d: kernel(d, kernel_id)["gpu_memory"])
    assert data["cull_idle_after_s"] is None and kernel(data, kernel_id)["cull_in_s"] is None
    assert await service.culler.cull_idle() == []
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    assert {s.labels["host"] for s in scrape["jupyter_gpu_gpu_info"]} == {socket.gethostname()}
    assert "jupyter_gpu_kernels_culled" not in scrape


@asynctest
async def test_a_kernel_known_only_by_its_report_is_culled_too(jp_fetch, jp_serverapp, scenario, caplog, held_culler):
    # Given a container-like server: NVML's PIDs are host PIDs, the kernel reports its own memory
    caplog.set_level(logging.WARNING, logger="jupyter_gpu")
    kernel_id = await start_session(jp_fetch)
    place(scenario, 0, pid=3_000_001, memory_mib=6000)
    data = await until(jp_fetch, lambda d: d["gpus"][0]["processes"])
    uuid = data["gpus"][0]["uuid"]
    await run_code(
        jp_serverapp,
        kernel_id,
        "from jupyter_gpu.kernel import report as kernel_report\n"
        f"kernel_report.write_report(gpu_memory={{{uuid!r}: 5 * 2**30}})",
    )
    data = await until(jp_fetch, lambda d: kernel(d, kernel_id)["reported_gpu_memory"])
    assert kernel(data, kernel_id)["gpu_memory"] == 0  # nothing attributed by PID
    # When it stays idle past cull_idle_after_s, it is culled like any GPU kernel
    await held_culler.resume()
    await until_gone(jp_serverapp, [kernel_id], "the idle kernel holding reported GPU memory was not culled")
    (record,) = [r for r in caplog.records if "culled idle GPU kernel" in r.getMessage()]
    assert f"{uuid} (the kernel's report)" in record.getMessage() and "5120.0 MiB" in record.getMessage()


async def keep_running(jp_fetch: Any, body: bytes | str, **kwargs: Any) -> Any:
    return await jp_fetch("jupyter-gpu", "keep-running", method="POST", body=body, **kwargs)


@asynctest
async def test_keep_running_postpones_the_cull_by_one_idle_limit_and_is_logged(
    jp_fetch, jp_serverapp, scenario, caplog, held_culler
):
    caplog.set_level(logging.INFO, logger="jupyter_gpu")
    # Given an idle kernel holding GPU memory, counted down to its cull
    kernel_id = await start_session(jp_fetch)
    place(scenario, 0, pid=kernel_pid(jp_serverapp, kernel_id), memory_mib=1024)
    warned = kernel(await until(jp_fetch, lambda d: kernel(d, kernel_id)["cull_warning"]), kernel_id)
    # When its user says "Keep running"
    answer = json.loads((await keep_running(jp_fetch, json.dumps({"kernel_id": kernel_id}))).body)
    assert answer == {"kernel_id": kernel_id, "postponed_s": AFTER}
    # Then the countdown is one cull_idle_after_s further and the warning is gone (it comes back only
    # within cull_warn_s of the new cull time: 0.5 s after the first on this server)
    kept = kernel(await get_snapshot(jp_fetch), kernel_id)
    assert counts_down(kept, postponed_s=AFTER) and kept["cull_warning"] is (kept["cull_in_s"] <= WARN)
    assert kept["idle_s"] >= warned["idle_s"]  # the kernel's idle time itself is not touched
    # and the kernel outlives its first cull time: it is culled when the postponement runs out
    await held_culler.resume()
    await until_gone(jp_serverapp, [kernel_id], "the kept kernel was never culled")
    (cull,) = json.loads((await jp_fetch("jupyter-gpu", "culls")).body)["culls"]
    assert cull["kernel_id"] == kernel_id and cull["idle_s"] >= 2 * AFTER
    # and the keep was logged with the user, the kernel and its notebook
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    (record,) = [r for r in caplog.records if "running: its cull is postponed" in r.getMessage()]
    for words in (kernel_id, NOTEBOOK, f"postponed by {AFTER:g} s"):
        assert words in record.getMessage()
    assert "user " in record.getMessage() and "user ?" not in record.getMessage()
    assert not service.culler.postponed  # forgotten with its kernel


@asynctest
async def test_keep_running_refuses_strangers_bad_input_and_unknown_kernels(jp_fetch, jp_serverapp, scenario):
    from tornado.httpclient import HTTPClientError

    kernel_id = await start_session(jp_fetch)
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    good = json.dumps({"kernel_id": kernel_id})
    # Unauthenticated: 403, nothing postponed (for the list of culls too)
    for call in (
        lambda h: keep_running(jp_fetch, good, headers=h),
        lambda h: jp_fetch("jupyter-gpu", "culls", headers=h),
    ):
        for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
            with pytest.raises(HTTPClientError) as raised:
                await call(headers)
            assert raised.value.code == 403
    # Hostile or malformed bodies: 400 with one line, nothing postponed
    hostile = [
        b"",
        b"not json",
        b"[" * 2040,
        b'{"kernel_id": 1e400}',
        b'{"kernel_id": "a", "kernel_id": "b"}',
        b'{"kernel_id": ["x"]}',
        b'{"kernel_id": ""}',
        json.dumps({"kernel_id": "k" * 65}).encode(),
        json.dumps({"kernel": kernel_id}).encode(),
        json.dumps([kernel_id]).encode(),
        b"\xff\xfe",
        b'{"kernel_id": "' + b"x" * 5000 + b'"}',
    ]
    for body in hostile:
        with pytest.raises(HTTPClientError) as raised:
            await keep_running(jp_fetch, body)
        assert raised.value.code == 400, body[:40]
        message = json.loads(raised.value.response.body)["message"]
        assert message and "\n" not in message, message
    # A kernel this server does not have: 404, even when the id looks like one
    for other in ("0" * 36, "../../api/kernels", kernel_id.upper()):
        with pytest.raises(HTTPClientError) as raised:
            await keep_running(jp_fetch, json.dumps({"kernel_id": other}))
        assert raised.value.code == 404
    assert not service.culler.postponed
    assert all(k["cull_in_s"] is None or k["cull_in_s"] <= AFTER for k in (await get_snapshot(jp_fetch))["kernels"])
