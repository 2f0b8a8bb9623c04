"""The push (issue 27 items 1-2): user servers report their kernels to the hub service with their own
token, the service believes a report only about its user's own GPU processes, and an admin's
"Shut down" travels back in the answer to that user's next report.

Three levels: the pure rules (``hub.reports.Board``, ``server.hub_report``), the service's
``api/report`` over HTTP with the stand-in hub's tokens, and a real ``GpuService`` with its
``HubPusher`` reporting to the running service (kernel manager stood in for)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
from hub_fake import SERVICE_TOKEN, report_of, scenario_of, user_snapshot
from hub_service import people, start
from support import ScenarioFile
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpu import simulate
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
from jupyter_gpu.hub import core, reports
from jupyter_gpu.hub.reports import Board, Refused
from jupyter_gpu.server import GpuService, JupyterGpuServer, KernelInfo
from jupyter_gpu.server.hub_pusher import HubPusher, family_pids, start_pusher
from jupyter_gpu.server.hub_report import report_body, shutdown_line

pytestmark = pytest.mark.usefixtures("stop_started")

GIB = 1 << 30


def body(kernels: list[dict[str, Any]], server: str = "") -> bytes:
    return json.dumps({"server": server, "kernels": kernels}).encode()


def truth(*processes: tuple[int, str]) -> core.Truth:
    """NVML as the service sees it: each (pid, owner) holding 1 GiB on GPU 0."""
    gpu = GpuInfo(
        0,
        "GPU-0",
        "A100",
        memory_total=80 * GIB,
        processes=tuple(GpuProcess(pid, GIB, user) for pid, user in processes),
    )
    return core.Truth.of(Snapshot(nvml_available=True, timestamp=time.time(), gpus=(gpu,)))


# -- 1. the pure rules


def test_a_report_is_parsed_strictly() -> None:
    report = reports.parse(body([{"kernel_id": "k1", "notebook": "a.ipynb", "idle_s": 5, "pids": [10, 11]}], "gpu"))
    assert report.server == "gpu" and report.kernels[0].pids == (10, 11) and report.kernels[0].idle_s == 5.0
    for bad in (
        b"nope",
        b"[]",
        body([{"kernel_id": "../x"}]),
        body([{"kernel_id": "k"}, {"kernel_id": "k"}]),
        body([{"kernel_id": "k", "pids": [0]}]),
        body([{"kernel_id": "k", "pids": list(range(1, 1002))}]),
        body([{"kernel_id": "k", "idle_s": -1}]),
        b'{"kernels": [{"kernel_id": "k", "idle_s": NaN}]}',
    ):
        with pytest.raises(Refused) as refused:
            reports.parse(bad)
        assert refused.value.reason == "malformed", bad[:80]
    with pytest.raises(Refused) as refused:
        reports.parse(b" " * (reports.MAX_REPORT_BYTES + 1))
    assert refused.value.reason == "oversized"


def test_too_frequent_reports_are_dropped_and_counted() -> None:
    board = Board(interval_s=10)
    board.receive("bob", body([]), 100.0)
    with pytest.raises(Refused) as refused:
        board.receive("bob", body([]), 104.0)
    assert refused.value.reason == "too_frequent"
    board.receive("bob", body([]), 105.0)  # half an interval later: fine
    board.receive("bob", body([], "gpu"), 105.5)  # another server of bob's has its own clock
    board.receive("alice", body([]), 105.5)
    assert board.dropped["too_frequent"] == 1


def test_a_lying_report_is_dropped_at_once_or_when_used() -> None:
    board = Board(interval_s=10)
    nvml = truth((10, "bob"), (20, "alice"))
    lie = body([{"kernel_id": "k", "pids": [10, 20]}])
    with pytest.raises(Refused) as refused:
        board.receive("alice", lie, 100.0, nvml)  # the service's fresh sample shows PID 10 is bob's
    assert refused.value.reason == "lying" and "alice" not in {u for u, _ in board.latest}
    board.receive("alice", lie, 200.0, None)  # no fresh sample at receipt: checked when used
    [row] = board.servers(201.0, nvml)
    assert row.snapshot is None and "another account" in (row.error or "")
    board.servers(202.0, nvml)
    assert board.dropped["lying"] == 2  # each lying report counted once
    honest = body([{"kernel_id": "k", "pids": [20, 99]}])  # 99: not on a GPU, harmless
    board.receive("alice", honest, 210.0, nvml)
    [row] = board.servers(211.0, nvml)
    assert row.error is None and core.user_kernels(row.snapshot or {}, nvml, "alice")[0]["gpu_memory"] == GIB


def test_a_silent_server_is_stale_after_two_intervals() -> None:
    board = Board(interval_s=5)
    board.receive("bob", body([{"kernel_id": "k"}]), 100.0)
    assert board.servers(110.0, truth())[0].error is None
    [row] = board.servers(110.5, truth())
    assert row.snapshot is None and (row.error or "").startswith("stale: no report from this server for 10 s")


def test_shutdown_instructions_go_to_the_listing_server_of_that_user_only() -> None:
    board = Board(interval_s=5)
    board.receive("bob", body([{"kernel_id": "k1"}]), 100.0)
    board.receive("bob", body([{"kernel_id": "k2"}], "gpu"), 100.0)
    board.receive("alice", body([{"kernel_id": "a1"}]), 100.0)
    with pytest.raises(KeyError):
        board.ask_shutdown("bob", "a1", "root-admin", 101.0)  # alice's kernel, asked of bob
    assert board.ask_shutdown("bob", "k2", "root-admin", 101.0) == "gpu"
    report = reports.parse(body([{"kernel_id": "a1"}, {"kernel_id": "k2"}]))
    assert board.answer("alice", report, 103.0)["shutdown"] == []  # alice claims k2 too: nothing for her
    assert board.answer("bob", reports.parse(body([{"kernel_id": "k1"}])), 103.0)["shutdown"] == []
    gpu = reports.parse(body([{"kernel_id": "k2"}], "gpu"))
    assert board.answer("bob", gpu, 103.0) == {"interval_s": 5, "shutdown": [{"kernel_id": "k2", "by": "root-admin"}]}
    assert board.answer("bob", reports.parse(body([], "gpu")), 108.0)["shutdown"] == []  # done: forgotten
    assert board.pending == {}
    board.ask_shutdown("bob", "k1", "root-admin", 103.0)
    assert board.answer("bob", reports.parse(body([{"kernel_id": "k1"}])), 103.0 + 31)["shutdown"] == []  # expired
    for_stale = Board(interval_s=5)
    for_stale.receive("bob", body([{"kernel_id": "k1"}]), 100.0)
    with pytest.raises(KeyError):
        for_stale.ask_shutdown("bob", "k1", "root-admin", 111.0)  # only a fresh report counts


def test_too_many_servers_of_one_user_are_refused() -> None:
    board = Board(interval_s=5)
    for i in range(reports.MAX_SERVERS_PER_USER):
        board.receive("bob", body([], f"s{i}"), 100.0)
    with pytest.raises(Refused) as refused:
        board.receive("bob", body([], "one-more"), 100.0)
    assert refused.value.reason == "too_many_servers"
    board.receive("alice", body([]), 100.0)


def test_idle_and_culling_are_computed_from_the_memory_the_service_checked() -> None:
    """The server's word is the idle clock only: "idle" needs GPU memory NVML shows its account holding."""
    board = Board(interval_s=5)
    raw = json.dumps(
        {
            "kernels": [
                {"kernel_id": "holds", "idle_s": 7200, "cull_idle_s": 7200, "pids": [10], "execution_state": "idle"},
                {"kernel_id": "empty", "idle_s": 7200, "cull_idle_s": 7200, "pids": [11], "execution_state": "idle"},
            ],
            "idle_threshold_s": 3600,
            "cull_idle_after_s": 10800,
        }
    ).encode()
    board.receive("bob", raw, 100.0)
    nvml = truth((10, "bob"))
    [row] = board.servers(101.0, nvml)
    kernels = {k["kernel_id"]: k for k in core.user_kernels(row.snapshot or {}, nvml, "bob")}
    assert (kernels["holds"]["idle"], kernels["holds"]["cull_in_s"]) == (True, 3600.0)
    assert (kernels["empty"]["idle"], kernels["empty"]["cull_in_s"]) == (False, None)


def test_the_servers_report_body_and_shutdown_line() -> None:
    now = 1000.0
    kernels = {
        "k1": KernelInfo("k1", pid=10, notebook="a.ipynb", execution_state="idle", last_activity=now - 60),
        "k2": KernelInfo("k2", execution_state="busy"),
    }
    made = report_body(kernels, {"k1": [10, 12]}, now, "gpu", 3600.0, 0.0)
    assert made == {
        "server": "gpu",
        "idle_threshold_s": 3600.0,
        "cull_idle_after_s": None,
        "kernels": [
            {
                "kernel_id": "k1",
                "notebook": "a.ipynb",
                "execution_state": "idle",
                "idle_s": 60.0,
                "cull_idle_s": 60.0,
                "pids": [10, 12],
            },
            {
                "kernel_id": "k2",
                "notebook": None,
                "execution_state": "busy",
                "idle_s": 0.0,
                "cull_idle_s": 0.0,
                "pids": [],
            },
        ],
    }
    assert reports.parse(json.dumps(made).encode()).kernels[0].pids == (10, 12)  # the service reads it
    assert "at the request of hub admin 'root-admin'" in shutdown_line("k1", "a.ipynb", "root-admin", "bob")


def test_family_pids_finds_a_kernels_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = family_pids({"me": os.getpid(), "gone": 2**22 + 12345, "unknown": None})
        assert found["me"][0] == os.getpid() and child.pid in found["me"]
        assert found["gone"] == [] and found["unknown"] == []
    finally:
        child.kill()
        child.wait()


# -- 2. api/report over HTTP


async def post(run: Any, token: str, raw: bytes) -> tuple[int, Any]:
    client = AsyncHTTPClient(force_instance=True)
    headers = {"Authorization": f"token {token}"}
    try:
        response = await client.fetch(
            run.url + "api/report", method="POST", body=raw, headers=headers, raise_error=True
        )
        return response.code, json.loads(response.body)
    except HTTPClientError as error:
        return error.code, error.response.body if error.response else b""
    finally:
        client.close()


@pytest.fixture
def hub_gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


def test_reports_are_kept_under_the_tokens_user_and_only_a_users_token_reports(hub_gpus: ScenarioFile) -> None:
    async def run_test() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        code, answer = await post(run, "bob-token", report_of(run.hub.snapshots["bob"]))
        assert code == 200 and answer == {"interval_s": run.service.board.interval_s, "shutdown": []}
        assert list(run.service.board.latest) == [("bob", "")]
        for token in (SERVICE_TOKEN, "no-such-token", ""):
            code, _ = await post(run, token, report_of(run.hub.snapshots["alice"]))
            assert code == 403, token
        assert list(run.service.board.latest) == [("bob", "")]  # nothing kept from those

    asyncio.run(run_test())


def _kernel_series(raw: bytes) -> dict[str, list[Any]]:
    """The per-kernel samples of a /metrics answer, by family name."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        family.name: family.samples
        for family in text_string_to_metric_families(raw.decode())
        if family.name.startswith("jupyter_gpu_kernel_")
    }


def test_the_services_metrics_export_each_users_kernels_as_their_reports_are_believed(
    hub_gpus: ScenarioFile,
) -> None:
    """Prometheus scrapes the service only (issue 27: no credential to a user server): its /metrics
    carries the per-kernel series the user servers export, from the pushed reports, under the user
    whose token pushed, with NVML's memory; a lying report's kernels and a stale report's are not there."""

    async def run_test() -> None:
        run = await start(interval_s=0.1)
        people(run.hub, hub_gpus)  # alice: 1 kernel on GPU 0 (1 GiB), bob: 2 kernels on GPU 1 (2 GiB each)
        run.hub.add_user("mallory", "mallory-token")
        bob_pids = [p["pid"] for gpu in run.hub.snapshots["bob"]["gpus"] for p in gpu["processes"]]
        run.hub.raw["mallory"] = body([{"kernel_id": "mallory-k", "notebook": "m.ipynb", "pids": bob_pids}])
        code, raw = await run.call("metrics", "admin-token")
        assert code == 200, raw
        series = _kernel_series(raw)
        sample = run.service.sampler.latest
        assert sample is not None
        uuids = {gpu.index: gpu.uuid for gpu in sample.gpus}
        memory = sorted(
            (s.labels["user"], s.labels["kernel_id"], s.labels["notebook"], s.labels["gpu"], s.labels["UUID"], s.value)
            for s in series["jupyter_gpu_kernel_memory_used_bytes"]
        )
        assert memory == [
            ("alice", "alice-kernel-0", "alice/secret-0.ipynb", "0", uuids[0], GIB),
            ("bob", "bob-kernel-0", "bob/secret-0.ipynb", "1", uuids[1], 2 * GIB),
            ("bob", "bob-kernel-1", "bob/secret-1.ipynb", "1", uuids[1], 2 * GIB),
        ]  # mallory's claim on bob's processes: not exported, not added to anyone
        assert {s.labels["user"] for s in series["jupyter_gpu_kernel_idle_seconds"]} == {"alice", "bob"}
        assert run.service.board.dropped["lying"] == 1
        # alice's server stops reporting: two intervals later her kernels leave the series
        run.service.board.latest[("alice", "")].at -= 3 * run.service.board.interval_s
        code, raw = await run.call("metrics", "admin-token")
        assert {s.labels["user"] for s in _kernel_series(raw)["jupyter_gpu_kernel_memory_used_bytes"]} == {"bob"}

    asyncio.run(run_test())


def test_hostile_pushes_get_their_status_and_are_counted(hub_gpus: ScenarioFile) -> None:
    """Oversized (413), malformed (422), too frequent (429), lying (422: the service's fresh NVML
    sample shows bob's PID): all dropped and counted, nothing of them believed."""

    async def run_test() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        await run.call("api/devices", "bob-token")  # wakes the service's sampler: a fresh sample
        await asyncio.get_running_loop().run_in_executor(None, run.service.sampler.wait_for_snapshot, None, 5.0)
        bob_pid = run.hub.snapshots["bob"]["gpus"][0]["processes"][0]["pid"]
        code, _ = await post(run, "alice-token", b"x" * (reports.MAX_REPORT_BYTES + 10))
        assert code == 413
        code, _ = await post(run, "alice-token", b"{not json")
        assert code == 422
        code, raw = await post(run, "alice-token", body([{"kernel_id": "forged", "pids": [bob_pid]}]))
        assert code == 422 and b"another account" in raw
        run.service.board._last_try.clear()  # the next interval
        code, _ = await post(run, "alice-token", report_of(run.hub.snapshots["alice"]))
        assert code == 200
        code, _ = await post(run, "alice-token", report_of(run.hub.snapshots["alice"]))
        assert code == 429
        dropped = run.service.board.dropped
        assert (dropped["oversized"], dropped["malformed"], dropped["lying"], dropped["too_frequent"]) == (1, 1, 1, 1)
        assert [k.kernel_id for k in run.service.board.latest[("alice", "")].report.kernels] == ["alice-kernel-0"]
        code, raw = await run.call("api/console", "admin-token")
        assert json.loads(raw)["reports_dropped"] == dict(dropped)  # admins see the counters
        code, raw = await run.call("api/console", "alice-token")
        assert "reports_dropped" not in json.loads(raw)  # readers do not

    asyncio.run(run_test())


def test_an_admins_shutdown_reaches_only_that_users_next_report(hub_gpus: ScenarioFile) -> None:
    async def run_test() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()
        run.service.board._last_try.clear()
        code, _ = await run.call("api/users/bob/kernels/bob-kernel-1", "admin-token", method="DELETE")
        assert code == 202
        run.service.board._last_try.clear()
        code, answer = await post(run, "alice-token", report_of(run.hub.snapshots["alice"]))
        assert code == 200 and answer["shutdown"] == []
        code, answer = await post(run, "bob-token", report_of(run.hub.snapshots["bob"]))
        assert code == 200 and answer["shutdown"] == [{"kernel_id": "bob-kernel-1", "by": "root-admin"}]
        assert run.hub.deleted == [] and run.hub.snapshot_calls == {}  # the service sent nothing anywhere

    asyncio.run(run_test())


# -- 3. a real server extension reporting to the service


class Kernels:
    """A kernel manager standing in for jupyter_server's: two kernels of this test's processes."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.shut: list[str] = []

    def list_kernel_ids(self) -> list[str]:
        return list(self.pids)

    def get_kernel(self, kernel_id: str) -> Any:
        if kernel_id not in self.pids:
            raise KeyError(kernel_id)
        return SimpleNamespace(
            kernel_name="python3",
            execution_state="idle",
            last_activity=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2),
            provisioner=SimpleNamespace(pid=self.pids[kernel_id]),
        )

    async def shutdown_kernel(self, kernel_id: str) -> None:
        self.shut.append(kernel_id)
        self.pids.pop(kernel_id)


def test_a_server_reports_with_its_own_token_and_carries_out_the_admins_shutdown(
    hub_gpus: ScenarioFile, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """bob's server (GpuService + HubPusher) reports his two kernels (real processes, on NVML as
    bob's); the console shows them from the report; the admin's "Shut down" comes back in the
    answer to the next report and the server shuts the kernel down itself, logging the admin's
    name. The server's sampler never runs for any of it (no NVML call of its own)."""
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]

    async def run_test() -> None:
        run = await start()
        people(run.hub)
        run.hub.snapshots.clear()  # only bob's real server reports here
        bob = user_snapshot("bob", 2, gpu=1)
        for process, worker in zip(bob["gpus"][0]["processes"], workers, strict=True):
            process["pid"] = worker.pid
        hub_gpus.write(scenario_of({"bob": bob}))
        kernels = Kernels({"bob-kernel-0": workers[0].pid, "bob-kernel-1": workers[1].pid})
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "bob-token")
        monkeypatch.setenv("JUPYTERHUB_USER", "bob")
        config = JupyterGpuServer(source=run.url, interval_s=0.2)
        server = GpuService(config, kernel_manager=kernels, take=lambda: pytest.fail("the server read NVML"))
        pusher = start_pusher(server)
        assert isinstance(pusher, HubPusher) and pusher.url == run.url + "api/report"
        pusher.close()  # pushed by hand below, for a test without waiting
        try:
            answer = await pusher.push_once()
            assert answer["shutdown"] == []
            code, raw = await run.call("api/console", "admin-token")
            row = next(u for u in json.loads(raw)["users"] if u["name"] == "bob")
            assert sorted(k["kernel_id"] for k in row["kernels"]) == ["bob-kernel-0", "bob-kernel-1"]
            assert all(k["memory_by_gpu"] == {"1": GIB} and k["idle"] for k in row["kernels"]), row
            code, _ = await run.call("api/users/bob/kernels/bob-kernel-0", "admin-token", method="DELETE")
            assert code == 202
            run.service.board._last_try.clear()  # the next interval
            with caplog.at_level(logging.INFO):
                answer = await pusher.push_once()
            assert answer["shutdown"] == [{"kernel_id": "bob-kernel-0", "by": "root-admin"}]
            assert kernels.shut == ["bob-kernel-0"] and pusher.shut_down == [("bob-kernel-0", "root-admin")]
            assert "kernel bob-kernel-0 of bob shut down at the request of hub admin 'root-admin'" in caplog.text
            run.service.board._last_try.clear()
            answer = await pusher.push_once()
            assert answer["shutdown"] == [] and run.service.board.pending == {}
            assert [k.kernel_id for k in run.service.board.latest[("bob", "")].report.kernels] == ["bob-kernel-1"]
            assert server.sampler.samples_taken == 0  # reporting never woke the server's sampler
        finally:
            server.close()

    try:
        asyncio.run(run_test())
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


def test_no_pusher_without_a_hub_token_or_a_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    monkeypatch.delenv("JUPYTER_GPU_SERVICE_URL", raising=False)
    server = GpuService(JupyterGpuServer(source="hub-service"), take=lambda: pytest.fail("no NVML here"))
    try:
        assert start_pusher(server) is None  # no token
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
        server.config.source = "nvml"
        assert start_pusher(server) is None  # no service known
        server.config.source = "hub-service"
        server.config.report_to_hub = False
        assert start_pusher(server) is None  # turned off
    finally:
        server.close()
