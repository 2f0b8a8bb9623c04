"""The server extension against a real Jupyter Server, real kernels and simulated GPUs.

pytest-jupyter's fixtures are imported into this module only (not registered as a plugin), so its
autouse fixtures do not reach other test modules; async bodies run on its loop via ``asynctest``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import NOTEBOOK, asynctest, get_snapshot, kernel_pid, metric_samples, place, run_code, start_session, until
from tornado.httpclient import HTTPClientError

from jupyter_gpu import simulate
from jupyter_gpu.server import GpuService

pytestmark = pytest.mark.usefixtures("stop_sampler_after_test")

MIB = 1024 * 1024


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
        "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "idle_threshold_s": 0.5, "wait_s": 1.0},
    }


def processes(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {process["pid"]: process for gpu in data["gpus"] for process in gpu["processes"]}


@pytest.fixture
def sleeper() -> Any:
    """A real process of this user, not a kernel: its PID can be placed on a simulated GPU."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--secret=hunter2"])
    yield process
    process.kill()
    process.wait()


# -- the endpoint


@asynctest
async def test_snapshot_serves_the_contract_under_base_url(jp_fetch, jp_base_url, scenario):
    # Given two simulated GPUs and a server under a JupyterHub-like base_url (pytest-jupyter's "/a%40b/")
    # When the snapshot is fetched
    data = await until(jp_fetch, lambda d: d["gpus"])
    # Then it is the core contract plus the server's fields
    assert data["nvml_available"] is True and data["simulated"] is True
    assert [gpu["name"] for gpu in data["gpus"]] == ["NVIDIA A100-SXM4-80GB [simulated]"] * 2
    assert data["gpus"][0]["memory_total"] == 81920 * MIB
    assert data["idle_threshold_s"] == 0.5
    assert data["attribution"] == "pid" and data["attribution_note"] is None
    assert data["stale"] is False and data["age_s"] < 1
    assert data["kernels"] == []


@asynctest
async def test_keep_running_with_culling_off_is_409_and_the_list_of_culls_is_empty(jp_fetch, jp_serverapp, scenario):
    """Culling is off by default: nothing to postpone (one line), and no culls to list."""
    import json

    from support import start_session

    kernel_id = await start_session(jp_fetch)
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("jupyter-gpu", "keep-running", method="POST", body=json.dumps({"kernel_id": kernel_id}))
    assert raised.value.code == 409
    message = json.loads(raised.value.response.body)["message"]
    assert "culling is off" in message and "\n" not in message
    assert json.loads((await jp_fetch("jupyter-gpu", "culls")).body) == {"culls": []}


@asynctest
async def test_without_a_hub_service_the_page_config_says_so_and_usage_is_404(jp_fetch, jp_serverapp, monkeypatch):
    """The sidebar asks for "your GPU use" only where the page config says there is a hub service."""
    from jupyter_gpu.server.handlers import usage_target

    assert jp_serverapp.web_app.settings["page_config_data"]["jupyterGpuUsage"] is False
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("jupyter-gpu", "usage")
    assert raised.value.code == 404
    monkeypatch.setenv("JUPYTER_GPU_SERVICE_URL", "http://127.0.0.1:1/services/jupyter-gpu/")
    assert usage_target() is None  # no JUPYTERHUB_USER: nobody to ask about
    monkeypatch.setenv("JUPYTERHUB_USER", "ann")
    assert usage_target() == ("http://127.0.0.1:1/services/jupyter-gpu/", "ann")


@asynctest
async def test_unauthenticated_requests_get_403_and_no_data(jp_fetch, scenario):
    for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
        with pytest.raises(HTTPClientError) as raised:
            await jp_fetch("jupyter-gpu", "snapshot", headers=headers)
        assert raised.value.code == 403
        body = raised.value.response.body.decode()
        assert "A100" not in body and "gpus" not in body


@asynctest
async def test_kernel_process_is_attributed_with_its_notebook(jp_fetch, jp_serverapp, scenario):
    # Given a notebook session whose kernel holds 3 GiB on GPU 1
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    place(scenario, 1, pid=pid, memory_mib=3072)
    # When the snapshot is fetched
    data = await until(jp_fetch, lambda d: pid in processes(d))
    # Then the process carries its kernel, notebook and idle time
    process = processes(data)[pid]
    assert process["kernel_id"] == kernel_id
    assert process["notebook"] == NOTEBOOK
    assert process["own"] is True
    assert isinstance(process["idle_s"], float)
    assert process["memory"] == 3072 * MIB
    assert process["command"]  # this user's own process keeps its command line
    (kernel,) = data["kernels"]
    assert kernel["kernel_id"] == kernel_id and kernel["notebook"] == NOTEBOOK
    assert kernel["gpu_memory"] == 3072 * MIB and kernel["gpus"] == [1]


@asynctest
async def test_kernels_carry_how_many_websockets_are_connected_to_them(jp_fetch, jp_ws_fetch, scenario):
    # Given a notebook session's kernel nobody is connected to
    kernel_id = await start_session(jp_fetch)

    def connections(data: dict[str, Any]) -> Any:
        return {kernel["kernel_id"]: kernel["connections"] for kernel in data["kernels"]}.get(kernel_id)

    await until(jp_fetch, lambda d: connections(d) == 0)
    # When a front end opens the kernel's websocket, then another, then both close
    first = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    await until(jp_fetch, lambda d: connections(d) == 1)
    second = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    await until(jp_fetch, lambda d: connections(d) == 2)
    first.close()
    second.close()
    # Then the answer counts them, down to 0 again
    await until(jp_fetch, lambda d: connections(d) == 0)


@asynctest
async def test_child_process_of_a_kernel_is_attributed_to_it(jp_fetch, jp_serverapp, scenario):
    # Given a kernel that started a worker process (a data loader, say)
    kernel_id = await start_session(jp_fetch)
    out = await run_code(
        jp_serverapp,
        kernel_id,
        "import subprocess, sys\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(worker.pid)",
    )
    worker_pid = int(out.strip())
    try:
        # When only the worker holds GPU memory
        place(scenario, 0, pid=worker_pid, memory_mib=1500)
        data = await until(jp_fetch, lambda d: worker_pid in processes(d))
        # Then it is attributed to the kernel that started it
        process = processes(data)[worker_pid]
        assert process["kernel_id"] == kernel_id and process["notebook"] == NOTEBOOK and process["own"] is True
    finally:
        await run_code(jp_serverapp, kernel_id, "worker.kill()")


@asynctest
async def test_idle_time_grows_while_the_kernel_is_idle_and_resets_when_busy(jp_fetch, jp_serverapp, scenario):
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    await run_code(jp_serverapp, kernel_id, "x = 1")
    place(scenario, 0, pid=pid, memory_mib=2048)
    first = processes(await until(jp_fetch, lambda d: pid in processes(d)))[pid]
    # Later samples count on (idle_threshold_s is 0.5 in these tests). On a loaded machine the
    # first answer can already say idle: the wait is for a later sample, not for the idle mark.
    later = processes(
        await until(jp_fetch, lambda d: processes(d)[pid]["idle"] and processes(d)[pid]["idle_s"] > first["idle_s"])
    )[pid]
    assert later["idle_s"] >= 0.5
    # When the kernel runs a cell, its idle time starts again
    await run_code(jp_serverapp, kernel_id, "import time; time.sleep(0.3)")
    again = processes(await get_snapshot(jp_fetch))[pid]
    assert again["idle_s"] < later["idle_s"] and again["idle"] is False


@asynctest
async def test_other_users_processes_carry_user_and_memory_only(jp_fetch, scenario, sleeper):
    # Given a real process of another user (the scenario overrides its owner) and one of ours
    place(scenario, 0, pid=sleeper.pid, memory_mib=4096, user="mallory")
    place(scenario, 1, pid=910001, memory_mib=100, user="bob", name="python")
    data = await until(jp_fetch, lambda d: sleeper.pid in processes(d))
    raw = json.dumps(data)
    mallory = processes(data)[sleeper.pid]
    assert mallory["user"] == "mallory" and mallory["memory"] == 4096 * MIB
    assert mallory["name"] is None and "command" not in mallory
    assert mallory["own"] is False and mallory["kernel_id"] is None
    assert "hunter2" not in raw and "sleep" not in raw
    assert processes(data)[910001]["name"] is None


@asynctest
async def test_other_users_can_be_hidden(jp_fetch, jp_serverapp, scenario):
    jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY].config.show_other_users = False
    place(scenario, 0, pid=910001, memory_mib=100, user="bob", name="python")
    data = await until(jp_fetch, lambda d: d["gpus"] and d["gpus"][0]["memory_used"] > 0)
    assert processes(data) == {}


# -- demand and the sampler


@asynctest
async def test_one_sampler_reads_nvml_once_per_interval_and_stops_when_idle(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    service.sampler.linger_s = 0.5
    # No request yet: no NVML call at all
    await asyncio.sleep(0.3)
    assert service.sampler.samples_taken == 0
    # 20 concurrent pollers share the sampler: at most one sample per interval of the time they took
    # (counted from the time itself, not a quiet machine's: 100 requests, 0.1 s interval)
    started = time.monotonic()
    for _ in range(5):
        await asyncio.gather(*(get_snapshot(jp_fetch) for _ in range(20)))
        await asyncio.sleep(0.05)
    intervals = (time.monotonic() - started) / service.config.interval_s
    assert service.sampler.samples_taken <= int(intervals) + 2
    assert service.sampler.samples_taken < 100  # not one per request
    # Nobody polls: the thread stops and NVML is no longer called
    deadline = time.monotonic() + 5
    while service.sampler.running and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not service.sampler.running
    calls, samples = sum(simulate.installed().calls.values()), service.sampler.samples_taken
    await asyncio.sleep(0.5)
    assert sum(simulate.installed().calls.values()) == calls
    assert service.sampler.samples_taken == samples


# -- faults


@pytest.mark.parametrize(
    "fault, words",
    [
        ("driver_not_loaded", "driver is not loaded"),
        ("no_permission", "no permission"),
        ("library_not_found", "libnvidia-ml.so.1"),
    ],
)
@asynctest
async def test_nvml_faults_mid_run_keep_the_endpoint_answering(jp_fetch, scenario, fault, words):
    await until(jp_fetch, lambda d: d["nvml_available"])
    scenario.update(lambda data: data.update(fault=fault))
    data = await until(jp_fetch, lambda d: not d["nvml_available"])
    assert words in data["error"]
    assert data["attribution"] == "unavailable" and words in data["attribution_note"]
    scenario.update(lambda data: data.update(fault=None))
    data = await until(jp_fetch, lambda d: d["nvml_available"])
    assert len(data["gpus"]) == 2


@asynctest
async def test_a_lost_gpu_mid_run_is_reported_and_the_other_still_read(jp_fetch, scenario):
    await until(jp_fetch, lambda d: d["nvml_available"])
    scenario.update(lambda data: data["gpus"][1].update(fault="lost"))
    data = await until(jp_fetch, lambda d: d["gpus"][1]["error"])
    assert "GPU is lost" in data["gpus"][1]["error"]
    assert data["gpus"][0]["error"] is None and data["gpus"][0]["memory_total"] > 0


@asynctest
async def test_a_hung_nvml_call_does_not_hang_requests(jp_fetch, scenario):
    await until(jp_fetch, lambda d: d["nvml_available"])
    # Every NVML call now takes 1.5 s: a sample takes many seconds
    scenario.update(lambda data: data.update(latency_ms=1500))
    worst = 0.0
    deadline = time.monotonic() + 10
    data: dict[str, Any] = {}
    while time.monotonic() < deadline:
        started = time.monotonic()
        data = await get_snapshot(jp_fetch)
        worst = max(worst, time.monotonic() - started)
        if data["stale"]:
            break
        await asyncio.sleep(0.1)
    assert data["stale"] is True and data["age_s"] > 1.2  # 2 x interval + 1 s
    assert data["nvml_available"] is True and len(data["gpus"]) == 2  # the last good sample
    assert worst < 0.5
    scenario.update(lambda data: data.update(latency_ms=0))
    await until(jp_fetch, lambda d: not d["stale"])


@asynctest
async def test_nvml_hung_from_the_start_answers_within_wait_s(jp_fetch, scenario):
    # Given a driver whose every call takes 2 s, before anybody asked
    scenario.update(lambda data: data.update(latency_ms=2000))
    started = time.monotonic()
    data = await get_snapshot(jp_fetch)
    # Then the first request waits at most wait_s (1 s here) and says why there is no data
    assert time.monotonic() - started < 1.9
    assert data["nvml_available"] is False and data["stale"] is True and data["age_s"] is None
    assert "has not answered" in data["error"] and data["gpus"] == []
    # And the next requests do not wait at all while the first sample is still on its way
    started = time.monotonic()
    await get_snapshot(jp_fetch)
    assert time.monotonic() - started < 0.5
    scenario.update(lambda data: data.update(latency_ms=0))
    await until(jp_fetch, lambda d: d["nvml_available"] and not d["stale"])


# -- Prometheus


@asynctest
async def test_prometheus_gauges_per_gpu_and_per_kernel(jp_fetch, jp_serverapp, scenario):
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    place(scenario, 1, pid=pid, memory_mib=5000)
    await until(jp_fetch, lambda d: pid in processes(d) and d["kernels"])
    response = await jp_fetch("metrics")
    families = metric_samples(response.body.decode())
    total = {s.labels["gpu"]: s.value for s in families["jupyter_gpu_memory_total_bytes"]}
    assert total == {"0": 81920 * MIB, "1": 81920 * MIB}
    for name in (
        "jupyter_gpu_memory_used_bytes",
        "jupyter_gpu_utilization_percent",
        "jupyter_gpu_temperature_celsius",
        "jupyter_gpu_power_watts",
    ):
        assert len(families[name]) == 2, name
    (kernel,) = families["jupyter_gpu_kernel_memory_used_bytes"]
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert kernel.labels == {
        "kernel_id": kernel_id,
        "notebook": NOTEBOOK,
        "gpu": "1",
        "user": service.user,
        "UUID": families["jupyter_gpu_gpu_info"][1].labels["UUID"],
    }
    assert kernel.value == 5000 * MIB
    assert families["jupyter_gpu_nvml_up"][0].value == 1


@asynctest
async def test_prometheus_needs_authentication_and_registers_once(jp_fetch, jp_serverapp, scenario):
    from jupyter_gpu.server import _load_jupyter_server_extension, metrics

    await until(jp_fetch, lambda d: d["gpus"])
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("metrics", headers={"Authorization": ""})
    assert raised.value.code == 403
    # Loading the extension again neither duplicates the collector nor the routes
    collector = metrics.bind(jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY])
    _load_jupyter_server_extension(jp_serverapp)
    assert metrics.bind(jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]) is collector
    text = (await jp_fetch("metrics")).body.decode()
    assert text.count("# TYPE jupyter_gpu_memory_total_bytes gauge") == 1


@asynctest
async def test_a_scrape_counts_as_demand(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert not service.sampler.running
    await jp_fetch("metrics")
    assert service.sampler.running


# -- containers


@asynctest
async def test_container_host_pids_fall_back_to_kernel_reports(jp_fetch, jp_serverapp, scenario):
    # Given NVML reporting host PIDs that exist nowhere here (the server runs in a container)
    kernel_id = await start_session(jp_fetch)
    place(scenario, 0, pid=3_000_001, memory_mib=6000)
    data = await until(jp_fetch, lambda d: 3_000_001 in processes(d))
    # Then attribution says it is impossible rather than guessing
    assert data["attribution"] == "unavailable"
    assert "PID namespace" in data["attribution_note"] and "IPython extension" in data["attribution_note"]
    assert processes(data)[3_000_001]["kernel_id"] is None
    # When the kernel reports about itself after each cell (what `%load_ext jupyter_gpu` sets up;
    # the framework's figure is given by hand here: no GPU framework runs on simulated GPUs)
    uuid = data["gpus"][0]["uuid"]
    await run_code(
        jp_serverapp,
        kernel_id,
        "from jupyter_gpu.kernel import report as kernel_report\n"
        "kernel_report.register(get_ipython())\n"
        f"kernel_report.write_report(gpu_memory={{{uuid!r}: 5 * 2**30}})",
    )
    await run_code(jp_serverapp, kernel_id, "x = 1")  # the refresh after a cell keeps the figure
    data = await until(jp_fetch, lambda d: d["attribution"] == "kernel-report")
    # Then its memory shows under its kernel, and the note says processes are not matched
    (kernel,) = data["kernels"]
    assert kernel["kernel_id"] == kernel_id and kernel["notebook"] == NOTEBOOK
    assert kernel["reported_gpu_memory"] == {uuid: 5 * 2**30}
    assert "not matched" in data["attribution_note"]
    # And a kernel that knows its NVML PID (passed by the spawner) gets its process attributed
    await run_code(jp_serverapp, kernel_id, "kernel_report.write_report(nvml_pids=[3_000_001])")
    data = await until(jp_fetch, lambda d: processes(d)[3_000_001]["kernel_id"] == kernel_id)
    assert processes(data)[3_000_001]["notebook"] == NOTEBOOK


# -- hostile kernel reports (issue 10, item 1)


def report_path(serverapp: Any, kernel_id: str) -> str:
    from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX

    return os.path.join(serverapp.kernel_manager.connection_dir, f"{REPORT_PREFIX}{kernel_id}.json")


@pytest.mark.parametrize(
    "change",
    [
        {"nvml_pids": 5},
        {"timestamp": "x"},
        {"gpu_memory": {"GPU-x": float("nan")}},
        {"gpu_memory": {"GPU-x": float("inf")}},
        {"gpu_memory": {"GPU-x": "lots"}},
        {"session": ["a"]},
    ],
)
@asynctest
async def test_a_bad_kernel_report_costs_only_itself(jp_fetch, jp_serverapp, scenario, change):
    # Given kernel K running and holding GPU memory
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    place(scenario, 0, pid=pid, memory_mib=1000)
    await until(jp_fetch, lambda d: pid in processes(d))
    # When something in the kernel writes a malformed report for K
    report = {
        "version": 1,
        "kernel_id": kernel_id,
        "pid": pid,
        "nvml_pids": [],
        "gpu_memory": {},
        "session": None,
        "timestamp": time.time(),
        **change,
    }
    with open(report_path(jp_serverapp, kernel_id), "w") as file:
        file.write(json.dumps(report))  # NaN and Infinity as Python writes them
    await asyncio.sleep(0.3)
    # Then the snapshot and the whole /metrics still answer, the report ignored
    data = await get_snapshot(jp_fetch)
    (kernel,) = data["kernels"]
    assert kernel["reported_gpu_memory"] is None and processes(data)[pid]["kernel_id"] == kernel_id
    text = (await jp_fetch("metrics")).body.decode()
    assert "jupyter_gpu_kernel_memory_used_bytes" in text and "http_request_duration_seconds" in text


@asynctest
async def test_a_failing_gpu_collector_costs_only_its_own_families(jp_fetch, jp_serverapp, scenario, monkeypatch):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    await until(jp_fetch, lambda d: d["gpus"])

    def broken() -> None:
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(service, "metrics_answer", broken)
    response = await jp_fetch("metrics")
    text = response.body.decode()
    assert response.code == 200
    assert "http_request_duration_seconds" in text and "jupyter_gpu_" not in text


# -- reports tied to the process that wrote them (item 2)


@asynctest
async def test_a_report_of_another_process_is_ignored_and_removed_with_the_kernel(jp_fetch, jp_serverapp, scenario):
    # Given kernel K whose report claims 5 GiB, written by a process that is not K's (a dead
    # predecessor: same kernel id, another PID or start time)
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    path = report_path(jp_serverapp, kernel_id)
    stale = {
        "version": 1,
        "kernel_id": kernel_id,
        "pid": pid,
        "start_time": 1,
        "nvml_pids": [],
        "gpu_memory": {"GPU-x": 5 * 2**30},
        "session": None,
        "timestamp": time.time(),
    }
    with open(path, "w") as file:
        json.dump(stale, file)
    # Then it is not shown as K's memory
    await asyncio.sleep(0.3)
    (kernel,) = (await get_snapshot(jp_fetch))["kernels"]
    assert kernel["reported_gpu_memory"] is None
    # And K's own report (its PID and start time) is
    await run_code(
        jp_serverapp,
        kernel_id,
        "from jupyter_gpu.kernel import report as kernel_report\n"
        "kernel_report.write_report(gpu_memory={'GPU-x': 2**30})",
    )
    data = await until(jp_fetch, lambda d: d["kernels"][0]["reported_gpu_memory"])
    assert data["kernels"][0]["reported_gpu_memory"] == {"GPU-x": 2**30}
    # When the kernel is shut down (DELETE), its report goes with it
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    await asyncio.sleep(0.2)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    "jp_server_config",
    [
        {
            "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
            "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "idle_threshold_s": 0.5, "wait_s": 1.0},
            "KernelRestarter": {"restart_limit": 5},
        }
    ],
)
@asynctest
async def test_after_an_oom_kill_the_restarted_kernel_does_not_inherit_the_dead_ones_report(
    jp_fetch, jp_serverapp, scenario, jp_server_config
):
    # Given a kernel that reported 5 GiB and holds GPU memory
    kernel_id = await start_session(jp_fetch)
    old_pid = kernel_pid(jp_serverapp, kernel_id)
    await run_code(
        jp_serverapp,
        kernel_id,
        "from jupyter_gpu.kernel import report as kernel_report\n"
        "kernel_report.write_report(gpu_memory={'GPU-x': 5 * 2**30})",
    )
    await until(jp_fetch, lambda d: d["kernels"] and d["kernels"][0]["reported_gpu_memory"])
    # When the kernel is killed (the OOM killer's SIGKILL: no atexit, the file stays)
    os.kill(old_pid, 9)
    # Then, once Jupyter restarted it, the new process is not shown with the dead one's 5 GiB
    data = await until(jp_fetch, lambda d: d["kernels"] and d["kernels"][0]["pid"] not in (None, old_pid))
    assert data["kernels"][0]["reported_gpu_memory"] is None
    # And the dead process's report is gone
    await asyncio.sleep(0.5)
    path = report_path(jp_serverapp, kernel_id)
    if os.path.exists(path):
        with open(path) as file:
            assert json.load(file)["pid"] != old_pid


# -- attribution that is never wrong (items 4 and 5)


@asynctest
async def test_a_recycled_pid_of_a_kernels_child_is_not_the_kernels(jp_fetch, jp_serverapp, scenario):
    from support import spawn_at_pid

    # Given a kernel's worker on a GPU, attributed to the kernel
    kernel_id = await start_session(jp_fetch)
    out = await run_code(
        jp_serverapp,
        kernel_id,
        "import subprocess, sys\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(worker.pid)",
    )
    worker_pid = int(out.strip())
    place(scenario, 0, pid=worker_pid, memory_mib=1500)
    await until(jp_fetch, lambda d: worker_pid in processes(d) and processes(d)[worker_pid]["own"])
    # When the worker dies and another user's process gets its PID (the world says whose first: a
    # sample between the two would rightly remember the new process as this user's, the real owner)
    await run_code(jp_serverapp, kernel_id, "worker.kill(); worker.wait()")
    scenario.update(lambda data: data["gpus"][0]["processes"][0].update(user="mallory"))
    await asyncio.sleep(0.05)  # a start time (100 Hz ticks) the worker's cannot share
    intruder = spawn_at_pid(worker_pid, ["sleep", "120"])
    if intruder is None:
        pytest.skip("cannot choose the next PID here (needs root in this PID namespace)")
    spawned_at = time.time()
    try:
        # Then the first sample taken after it started shows it as mallory's, never as the kernel's
        data = await until(jp_fetch, lambda d: d["timestamp"] > spawned_at)
        process = processes(data)[worker_pid]
        assert process["user"] == "mallory"
        assert process["own"] is False and process["kernel_id"] is None and "command" not in process
    finally:
        intruder.kill()
        intruder.wait()


@asynctest
async def test_a_dead_kernels_pid_reused_by_another_process_is_not_the_kernel(jp_fetch, jp_serverapp, scenario):
    from support import spawn_at_pid

    # Given a kernel on a GPU
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    jp_serverapp.kernel_manager.get_kernel(kernel_id).autorestart = False
    place(scenario, 0, pid=pid, memory_mib=1000)
    await until(jp_fetch, lambda d: processes(d).get(pid, {}).get("kernel_id") == kernel_id)
    # When it is killed and another user's process gets its PID
    os.kill(pid, 9)
    jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.process.wait()  # reaped (the restarter would)
    scenario.update(lambda data: data["gpus"][0]["processes"][0].update(user="mallory"))  # whose it is next
    await asyncio.sleep(0.05)  # a start time (100 Hz ticks) the kernel's cannot share
    intruder = spawn_at_pid(pid, ["sleep", "120"])
    if intruder is None:
        pytest.skip("cannot choose the next PID here (needs root in this PID namespace)")
    spawned_at = time.time()
    try:
        data = await until(jp_fetch, lambda d: d["timestamp"] > spawned_at)
        # Then the first sample after it started shows mallory's process, without the kernel's
        # identity or a shutdown button
        assert processes(data)[pid]["user"] == "mallory"
        assert processes(data)[pid]["own"] is False and processes(data)[pid]["kernel_id"] is None
    finally:
        intruder.kill()
        intruder.wait()


@asynctest
async def test_kernel_events_update_the_table_at_once(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    # Given a kernel attributed on a GPU, and a timer that would refresh the table only every 30 s
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    place(scenario, 0, pid=pid, memory_mib=1000)
    await until(jp_fetch, lambda d: processes(d).get(pid, {}).get("kernel_id") == kernel_id)
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    assert [s.labels["kernel_id"] for s in scrape["jupyter_gpu_kernel_memory_used_bytes"]] == [kernel_id]
    service.config.interval_s = 30.0
    # When a new kernel starts, the next answer lists it
    other = await start_session(jp_fetch, "other.ipynb")
    assert {k["kernel_id"] for k in (await get_snapshot(jp_fetch))["kernels"]} == {kernel_id, other}
    # When the first kernel's DELETE returned, nothing is attributed to it any more
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    data = await get_snapshot(jp_fetch)
    assert [k["kernel_id"] for k in data["kernels"]] == [other]
    assert all(p["kernel_id"] != kernel_id for p in processes(data).values())
    # And the very next scrape has no gauge for it
    scrape = metric_samples((await jp_fetch("metrics")).body.decode())
    assert scrape.get("jupyter_gpu_kernel_memory_used_bytes", []) == []


@asynctest
async def test_the_kernel_table_is_read_before_the_first_sample(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    kernel_id = await start_session(jp_fetch)
    await asyncio.sleep(0.4)
    assert service.sampler.samples_taken == 0  # nobody asked for GPUs yet
    assert list(service._table.kernels) == [kernel_id]


# -- one answer for every client (item 3)


@asynctest
async def test_the_answer_is_built_once_and_revalidated_with_etag(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    first = await jp_fetch("jupyter-gpu", "snapshot")
    etag = first.headers["Etag"]
    assert etag.startswith('"') and first.headers["Cache-Control"].startswith("no-cache")
    # A client that has the answer gets 304 and no body while it is current
    service.config.interval_s = 30.0  # no new sample meanwhile
    await asyncio.sleep(0.2)
    current = (await jp_fetch("jupyter-gpu", "snapshot")).headers["Etag"]
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("jupyter-gpu", "snapshot", headers={"If-None-Match": current})
    assert raised.value.code == 304 and not raised.value.response.body
    # 30 clients at once share one built answer
    builds = service.builds
    answers = await asyncio.gather(*(jp_fetch("jupyter-gpu", "snapshot") for _ in range(30)))
    assert {a.headers["Etag"] for a in answers} == {current} and service.builds == builds
    # A change (here: a new kernel) gives a new answer and a new ETag
    await start_session(jp_fetch)
    changed = await jp_fetch("jupyter-gpu", "snapshot", headers={"If-None-Match": current})
    assert changed.code == 200 and changed.headers["Etag"] != current and json.loads(changed.body)["kernels"]


# -- Prometheus exposure (item 9)


def public_metrics_config(opt_in: bool) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}, "authenticate_prometheus": False},
        "JupyterGpuServer": {
            "interval_s": 0.1,
            "linger_s": 5.0,
            "idle_threshold_s": 0.5,
            "wait_s": 1.0,
            "prometheus_notebook_labels": opt_in,
        },
    }


@pytest.mark.parametrize(
    ("jp_server_config", "shown"), [(public_metrics_config(False), ""), (public_metrics_config(True), NOTEBOOK)]
)
@asynctest
async def test_public_metrics_leave_notebook_paths_out_unless_the_admin_opts_in(
    jp_fetch, jp_serverapp, scenario, jp_server_config, shown
):
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    place(scenario, 0, pid=pid, memory_mib=1000)
    await until(jp_fetch, lambda d: pid in processes(d))
    text = (await jp_fetch("metrics", headers={"Authorization": ""})).body.decode()  # anybody may scrape
    (sample,) = metric_samples(text)["jupyter_gpu_kernel_memory_used_bytes"]
    assert sample.labels["kernel_id"] == kernel_id and sample.labels["notebook"] == shown
    assert ("train model" in text) == bool(shown)


# -- simulated scenarios (item 6)


@asynctest
async def test_a_rejected_scenario_edit_reaches_the_answer_as_a_warning(jp_fetch, scenario):
    await until(jp_fetch, lambda d: d["gpus"])
    bad = json.loads(json.dumps(scenario.data))
    bad["gpus"][0]["memory_used_mib"] = -5
    scenario.path.write_text(json.dumps(bad))
    data = await until(jp_fetch, lambda d: d["warnings"])
    assert data["warnings"] == [
        "simulated scenario rejected: gpus[0].memory_used_mib must be >= 0 (keeping the last good scenario)"
    ]
    assert data["gpus"][0]["memory_used"] == 0 and data["nvml_available"] is True


@asynctest
async def test_clients_accepting_gzip_get_the_body_compressed_once(jp_fetch, jp_serverapp, scenario):
    plain = await jp_fetch("jupyter-gpu", "snapshot", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers
    # (tornado's client asks for gzip and decompresses; the raw bytes are checked on the service)
    zipped = await jp_fetch("jupyter-gpu", "snapshot", headers={"Accept-Encoding": "gzip"})
    assert json.loads(zipped.body)["gpus"] and zipped.headers["Etag"].endswith('-gzip"')
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert gzip.decompress(service._answer.gzipped) == service._answer.body


@asynctest
async def test_stopping_the_service_removes_its_kernels_reports(jp_fetch, jp_serverapp, scenario):
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    kernel_id = await start_session(jp_fetch)
    await service.refresh_kernels()
    path = report_path(jp_serverapp, kernel_id)
    with open(path, "w") as file:
        json.dump({"version": 1, "kernel_id": kernel_id, "pid": 1, "timestamp": 0}, file)
    service.close()  # what the server process does when it exits (atexit), kernels or not
    assert not os.path.exists(path)


# -- MIG slices (issue 13)


def on_slice(scenario: Any, gpu: int, slice_index: int, **process: Any) -> None:
    """Put a process on a MIG slice of a simulated GPU (memory in MiB)."""

    def change(data: dict[str, Any]) -> None:
        data["gpus"][gpu]["mig_slices"][slice_index].setdefault("processes", []).append(process)

    scenario.update(change)


@asynctest
async def test_a_kernel_on_a_slice_is_attributed_to_the_slice_and_gauged_per_slice(jp_fetch, jp_serverapp, scenario):
    from support import A100_MIG_UUIDS, a100_mig_scenario

    scenario.write(a100_mig_scenario())
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    on_slice(scenario, 0, 1, pid=pid, memory_mib=3000)
    data = await until(jp_fetch, lambda d: pid in processes(d))
    gpu = data["gpus"][0]
    assert gpu["mig_mode"] is True and [s["profile"] for s in gpu["slices"]] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    mine = next(p for p in gpu["slices"][1]["processes"] if p["pid"] == pid)
    assert mine["kernel_id"] == kernel_id and mine["own"] is True and mine["slice"] == A100_MIG_UUIDS[1]
    assert processes(data)[pid]["slice"] == A100_MIG_UUIDS[1]
    assert [p["pid"] for p in gpu["slices"][0]["processes"]] == [4100001]  # another user's, annotated too
    assert gpu["slices"][0]["processes"][0]["own"] is False
    (kernel,) = data["kernels"]
    assert kernel["gpus"] == [0] and kernel["slices"] == [A100_MIG_UUIDS[1]]
    families = metric_samples((await jp_fetch("metrics")).body.decode())
    used = {
        (s.labels["gpu"], s.labels["parent_uuid"], s.labels["mig_uuid"], s.labels["profile"]): s.value
        for s in families["jupyter_gpu_mig_memory_used_bytes"]
    }
    assert used == {
        ("0", gpu["uuid"], A100_MIG_UUIDS[0], "3g.40gb"): 30000 * MIB,
        ("0", gpu["uuid"], A100_MIG_UUIDS[1], "2g.20gb"): 3000 * MIB,
        ("0", gpu["uuid"], A100_MIG_UUIDS[2], "1g.10gb"): 4000 * MIB,
    }
    assert len(families["jupyter_gpu_mig_memory_total_bytes"]) == 3
    assert [s.labels["gpu"] for s in families["jupyter_gpu_utilization_percent"]] == ["1"]  # none in MIG mode


@asynctest
async def test_hidden_other_users_stay_hidden_on_their_slices(jp_fetch, jp_serverapp, scenario):
    from support import a100_mig_scenario

    jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY].config.show_other_users = False
    scenario.write(a100_mig_scenario())
    data = await until(jp_fetch, lambda d: d["gpus"] and d["gpus"][0]["slices"])
    assert processes(data) == {}
    assert all(s["processes"] == [] for s in data["gpus"][0]["slices"])
    assert data["gpus"][0]["slices"][0]["memory_used"] == 30000 * MIB  # the figures stay


@asynctest
async def test_container_kernel_reports_name_their_slice(jp_fetch, jp_serverapp, scenario):
    from support import A100_MIG_UUIDS, a100_mig_scenario

    # Given a kernel in a container whose NVML PID exists nowhere here, on the 2g.20gb slice
    data = a100_mig_scenario()
    data["gpus"][0]["mig_slices"][1]["processes"] = [{"pid": 3_000_002, "memory_mib": 2000}]
    scenario.write(data)
    kernel_id = await start_session(jp_fetch)
    await until(jp_fetch, lambda d: 3_000_002 in processes(d))
    # When it reports its memory by the MIG UUID (what PyTorch calls the device in a MIG container)
    await run_code(
        jp_serverapp,
        kernel_id,
        "from jupyter_gpu.kernel import report as kernel_report\n"
        "kernel_report.register(get_ipython())\n"
        f"kernel_report.write_report(gpu_memory={{{A100_MIG_UUIDS[1]!r}: 2 * 2**30}})",
    )
    answer = await until(jp_fetch, lambda d: d["kernels"] and d["kernels"][0]["reported_gpu_memory"])
    (kernel,) = answer["kernels"]
    assert kernel["gpus"] == []  # NVML's process could not be matched: the report names the slice
    assert kernel["slices"] == [A100_MIG_UUIDS[1]] and kernel["reported_gpu_memory"] == {A100_MIG_UUIDS[1]: 2 * 2**30}


# -- the user's own GPU use, from the jupyter-gpu hub service (the sidebar's "your GPU use")


@asynctest
async def test_usage_is_the_users_own_from_the_hub_service(jp_fetch, jp_serverapp, scenario, tmp_path, monkeypatch):
    # Given the hub service keeping usage for alice and bob, and this server being bob's under it
    from hub_service import people, start

    run = await start(usage_db=str(tmp_path / "usage.sqlite"))
    try:
        people(run.hub, scenario)
        run.reported()  # their servers' reports (issue 27: accounting reads what servers push)
        await run.service.accountant.account_once(time.time() - 60)
        await run.service.accountant.account_once()
        for name, value in (
            ("JUPYTER_GPU_SERVICE_URL", run.url),
            ("JUPYTERHUB_USER", "bob"),
            ("JUPYTERHUB_API_TOKEN", "bob-token"),
        ):
            monkeypatch.setenv(name, value)
        jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY].config.service_account = ""  # no root socket here
        # When the sidebar asks for this week's use
        response = await jp_fetch("jupyter-gpu", "usage", params={"window": "day"})
        data = json.loads(response.body)
        # Then it is bob's own (two idle kernels of 2 GiB for a minute), nobody else's
        assert data["user"] == "bob" and data["window"] == "day"
        assert (data["gpu_hours"], data["idle_hours"], data["busy_hours"]) == (0.03, 0.03, 0.0)
        assert [n["notebook"] for n in data["notebooks"]] == ["bob/secret-0.ipynb", "bob/secret-1.ipynb"]
        assert b"alice" not in response.body
        with pytest.raises(HTTPClientError) as bad:
            await jp_fetch("jupyter-gpu", "usage", params={"window": "year"})
        assert bad.value.code == 400
        # Without a hub service there is nothing to show: 404, which the sidebar takes as "hide"
        monkeypatch.delenv("JUPYTER_GPU_SERVICE_URL")
        with pytest.raises(HTTPClientError) as missing:
            await jp_fetch("jupyter-gpu", "usage")
        assert missing.value.code == 404
    finally:
        run.close()
