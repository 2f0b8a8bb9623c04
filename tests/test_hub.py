"""The JupyterHub service (console, JSON API, admin action, device API) against a stand-in hub API,
and user servers taking their GPU data from it (one NVML sampler per host), on simulated GPUs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from hub_fake import SERVICE_TOKEN
from hub_service import people, service_for, start
from live_processes import free_port
from support import UNDER_LOAD_S, ScenarioFile, wait_until

from jupyter_gpu import simulate
from jupyter_gpu.core.snapshot import Snapshot
from jupyter_gpu.hub import core
from jupyter_gpu.server import GpuService, JupyterGpuServer
from jupyter_gpu.sources import remote

pytestmark = pytest.mark.usefixtures("stop_started")


@pytest.fixture
def hub_gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    """Four simulated GPUs; :func:`people` puts the users' kernel processes on them."""
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


def test_console_admin_sees_every_users_kernels_by_notebook(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        code, raw = await run.call("api/console", "admin-token")
        assert code == 200, raw
        data = json.loads(raw)
        assert data["admin"] is True and data["simulated"] is True
        assert [gpu["index"] for gpu in data["gpus"]] == [0, 1, 2, 3]
        assert {user["name"] for user in data["users"]} == {"alice", "bob"}
        bob = next(user for user in data["users"] if user["name"] == "bob")
        assert [k["notebook"] for k in bob["kernels"]] == ["bob/secret-0.ipynb", "bob/secret-1.ipynb"]
        assert bob["memory_by_gpu"] == {"1": 2 * (2048 << 20)}
        assert bob["kernels"][0]["idle_s"] == 7200.0 and bob["kernels"][0]["idle"] is True
        assert b"ipykernel secret" not in raw  # command lines never leave the service, even for admins

    asyncio.run(body())


def test_reader_gets_no_other_users_notebooks_or_commands(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        code, raw = await run.call("api/console", "alice-token")
        assert code == 200, raw
        data = json.loads(raw)
        assert data["admin"] is False
        alice = next(user for user in data["users"] if user["name"] == "alice")
        bob = next(user for user in data["users"] if user["name"] == "bob")
        assert alice["kernels"][0]["notebook"] == "alice/secret-0.ipynb"
        assert [(k["notebook"], k["kernel_id"]) for k in bob["kernels"]] == [(None, None), (None, None)]
        assert bob["gpu_memory"] == 2 * (2048 << 20)  # the figures stay
        assert b"bob/secret" not in raw and b"bob-kernel" not in raw and b"ipykernel" not in raw

    asyncio.run(body())


def test_requests_waiting_for_a_hung_nvml_share_one_waiter() -> None:
    """While the first sample hangs in NVML, every user server asking api/devices waits on one
    thread (at most 1 s), not one thread each from the loop's small default executor."""
    release = threading.Event()

    def hung_nvml() -> Any:
        release.wait(30)
        return Snapshot(nvml_available=False, timestamp=time.time(), gpus=(), error="released")

    async def body() -> None:
        service = service_for("http://127.0.0.1:9", interval_s=0.1, take=hung_nvml)
        waits = []
        wait_for_snapshot = service.sampler.wait_for_snapshot

        def counted(*args: Any, **kwargs: Any) -> Any:
            waits.append(threading.current_thread().name)
            return wait_for_snapshot(*args, **kwargs)

        service.sampler.wait_for_snapshot = counted  # type: ignore[method-assign]
        try:
            answers = await asyncio.gather(*(service.devices() for _ in range(20)))
        finally:
            release.set()
            service.close()
        assert answers == [None] * 20  # no sample yet: each request says so (devices_body)
        assert len(waits) == 1 and waits[0].startswith("jupyter-gpu-hub-wait"), waits

    asyncio.run(body())


def test_plain_user_and_unknown_tokens_cannot_read_the_console(demo_gpus: None) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub)
        for token in ("bob-token", "no-such-token", ""):
            code, raw = await run.call("api/console", token)
            assert code == 403, (token, raw)
            assert b"secret" not in raw
        code, _ = await run.call("", "bob-token")
        assert code == 403

    asyncio.run(body())


def test_only_admins_shut_kernels_down_and_the_log_says_who(demo_gpus: None, caplog: pytest.LogCaptureFixture) -> None:
    """The admin's "Shut down" is an instruction queued for bob's server (handed over in the answer
    to its next report, test_hub_push.py): nothing is sent to any user server, and only an admin's
    request queues one."""

    async def body() -> None:
        run = await start()
        people(run.hub)
        code, _ = await run.call("api/users/bob/kernels/bob-kernel-0", "alice-token", method="DELETE")
        assert code == 403 and run.service.board.pending == {}
        code, _ = await run.call("api/users/bob/kernels/bob-kernel-0", "bob-token", method="DELETE")
        assert code == 403 and run.service.board.pending == {}
        with caplog.at_level(logging.INFO, logger="jupyter_gpu.hub"):
            code, raw = await run.call("api/users/bob/kernels/bob-kernel-0", "admin-token", method="DELETE")
        assert code == 202, raw
        assert [(key, [(i.kernel_id, i.by) for i in queue]) for key, queue in run.service.board.pending.items()] == [
            (("bob", ""), [("bob-kernel-0", "root-admin")])
        ]
        assert "root-admin asked for the shutdown of kernel bob-kernel-0 of user bob" in caplog.text
        assert run.hub.deleted == [] and run.hub.snapshot_calls == {}  # no request to any user server
        code, _ = await run.call("api/users/carol/kernels/x", "admin-token", method="DELETE")
        assert code == 404
        code, _ = await run.call("api/users/bob/kernels/alice-kernel-0", "admin-token", method="DELETE")
        assert code == 404  # only a kernel bob's own report lists

    asyncio.run(body())


def test_devices_api_serves_any_hub_identity_without_names_or_commands(demo_gpus: None) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub)
        code, raw = await run.call("api/devices", "bob-token")
        assert code == 200, raw
        data = json.loads(raw)
        processes = [p for gpu in data["gpus"] for p in gpu["processes"]]
        assert processes and all(p["name"] is None and "command" not in p for p in processes)
        assert remote.snapshot_from_dict(data).gpus  # the contract user servers parse
        code, _ = await run.call("api/devices", "no-such-token")
        assert code == 403

    asyncio.run(body())


def nvml_calls() -> int:
    library = simulate.installed()
    return 0 if library is None else sum(library.calls.values())


@pytest.mark.parametrize("servers", [1, 2, 5])
def test_one_nvml_sampler_for_every_user_server(demo_gpus: None, servers: int) -> None:
    """NVML is read by the service only: while N user servers sample through it, every NVML call of
    the process is made inside one of the service's samples, none between them, whatever N."""

    async def body() -> None:
        run = await start(interval_s=0.1)
        run.hub.add_user("user-server", "server-token")
        await run.call("api/devices", "server-token")  # the first sample (installs the simulation)
        sampler = run.service.sampler
        take = run.service._nvml_take
        between: list[int] = []  # NVML calls made by anybody between two of the service's samples
        last_end: list[int] = []

        def counted() -> Any:
            if last_end:
                between.append(nvml_calls() - last_end[-1])
            try:
                return take()
            finally:
                last_end.append(nvml_calls())

        run.service._nvml_take = counted
        for _ in range(2):  # two samples through the count (one may have begun before it)
            latest = sampler.latest
            await asyncio.get_running_loop().run_in_executor(None, sampler.wait_for_snapshot, latest.timestamp, 30.0)
        config = JupyterGpuServer(source=run.url, interval_s=0.1, linger_s=5)
        services = []
        for _ in range(servers):
            service = GpuService(config, take=None)
            service._nvml_take.token = "server-token"
            service._nvml_take.timeout_s = 60.0  # this test counts NVML calls; a loaded CI machine is no fault
            services.append(service)
        for _ in range(10):
            for service in services:
                await asyncio.get_running_loop().run_in_executor(None, service.sampler.wait_for_snapshot, None, 30.0)
            await asyncio.sleep(0.05)
        for service in services:
            service.sampler.close()
            assert service.sampler.samples_taken >= 1
            assert service.sampler.latest is not None and service.sampler.latest.warnings == ()
            assert service._nvml_take.fallbacks == 0
        run.service.sampler.close()
        between.append(nvml_calls() - last_end[-1])
        # The service sampled all along (its samples' calls counted in last_end), and nobody else
        # read NVML: a single user server sampling for itself would make its calls between them.
        assert len(last_end) >= 3 and last_end[-1] > last_end[0]
        assert sum(between) == 0, between

    asyncio.run(body())


def test_unreachable_service_falls_back_to_own_sampler_and_says_so(demo_gpus: None) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connection refused
    config = JupyterGpuServer(source=f"http://127.0.0.1:{port}/services/jupyter-gpu/", interval_s=0.1)
    service = GpuService(config)
    before = nvml_calls()
    snapshot = service.sampler.wait_for_snapshot(timeout=UNDER_LOAD_S)
    service.sampler.close()
    assert snapshot is not None and len(snapshot.gpus) == 4  # read locally
    assert nvml_calls() > before
    assert any(
        "jupyter-gpu service" in w and "unreachable" in w and "reads NVML itself" in w for w in snapshot.warnings
    )


def test_source_setting_refuses_anything_else() -> None:
    with pytest.raises(Exception, match='must be "nvml", "hub-service" or an http'):
        JupyterGpuServer(source="gpu-service")
    assert JupyterGpuServer().source == "nvml"
    assert remote.resolve_source("nvml") is None
    assert remote.resolve_source("https://hub.example/services/jupyter-gpu").endswith("/jupyter-gpu/api/devices")


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"nvml_available": "yes", "timestamp": 1},
        {"nvml_available": True, "timestamp": 1, "gpus": [{"index": -1}]},
        {
            "nvml_available": True,
            "timestamp": 1,
            "gpus": [{"index": 0, "uuid": "u", "name": "n", "processes": [{"pid": "1"}]}],
        },
        {"nvml_available": True, "timestamp": float("nan")},
        json.loads('{"nvml_available": true, "timestamp": 1e400}'),  # infinity, though not spelled so
        {"nvml_available": True, "timestamp": 1, "gpus": [{"index": 0, "uuid": "u", "name": "n", "power": 1e999}]},
        {"nvml_available": True, "timestamp": 10**400},  # an int too large for a float
    ],
)
def test_a_bad_service_answer_is_refused_with_one_line(bad: Any) -> None:
    with pytest.raises(remote.BadAnswer):
        remote.snapshot_from_dict(bad)


def test_names_from_the_service_are_dropped_and_own_ones_read_here() -> None:
    import os

    from jupyter_gpu.sources.processes import ProcessDirectory, current_user

    data = {
        "nvml_available": True,
        "timestamp": time.time(),
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-0",
                "name": "A100",
                "processes": [
                    {"pid": os.getpid(), "memory": 1, "user": current_user(), "name": "forged", "command": "forged"},
                    {"pid": 1, "memory": 1, "user": "someone-else", "name": "leak", "command": "leak --secret"},
                ],
            }
        ],
    }
    snapshot = remote.fill_own_names(remote.snapshot_from_dict(data), ProcessDirectory())
    mine, other = snapshot.gpus[0].processes
    assert mine.name != "forged" and mine.command and "forged" not in mine.command
    assert other.name is None and other.command is None


def test_access_roles() -> None:
    assert core.access({"kind": "user", "name": "a", "admin": True, "scopes": []}) == "admin"
    assert core.access({"kind": "user", "name": "a", "admin": False, "scopes": [core.ADMIN_SCOPE]}) == "admin"
    assert core.access({"kind": "user", "name": "a", "admin": False, "scopes": [core.READ_SCOPE]}) == "read"
    assert core.access({"kind": "user", "name": "a", "admin": False, "scopes": ["access:services"]}) is None
    assert core.access({"kind": "service", "name": "s", "admin": True, "scopes": []}) is None
    assert core.access(None) is None


def test_a_mig_gpu_from_the_service_keeps_its_slices(tmp_path, monkeypatch) -> None:
    """User servers on the service see the same MIG slices (and each process's slice) as NVML."""
    from support import ScenarioFile, a100_mig_scenario

    from jupyter_gpu import simulate
    from jupyter_gpu.sources import nvml

    scenario = ScenarioFile(tmp_path / "mig.json", a100_mig_scenario())
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    local = nvml.snapshot()
    assert local.gpus[0].slices  # the scenario's A100 is in MIG mode
    parsed = remote.snapshot_from_dict(json.loads(json.dumps(local.to_dict())))
    assert parsed.gpus[0].mig_mode and [s.to_dict() for s in parsed.gpus[0].slices] == [
        {**s.to_dict(), "processes": [{**p, "name": None} for p in s.to_dict()["processes"]]}
        for s in local.gpus[0].slices
    ]
    assert [p.slice for p in parsed.gpus[0].processes] == [p.slice for p in local.gpus[0].processes]
    # and the service sends no program name or command line, in a slice either
    from jupyter_gpu.hub.core import devices_answer

    sent = devices_answer(
        replace(
            local,
            gpus=(
                replace(
                    local.gpus[0],
                    slices=tuple(
                        replace(
                            part,
                            processes=tuple(
                                replace(p, name="secret-name", command="secret --cmd") for p in part.processes
                            ),
                        )
                        for part in local.gpus[0].slices
                    ),
                ),
            ),
        )
    )
    assert "secret" not in json.dumps(sent)
    bad = local.to_dict()
    bad["gpus"][0]["slices"] = [{"index": -1}]
    with pytest.raises(remote.BadAnswer, match=r"gpus\[0\].slices\[0\].index"):
        remote.snapshot_from_dict(bad)


def _families(text: str) -> dict[str, list[Any]]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, []).extend(family.samples)
    return found


DEVICE_SERIES = (
    "jupyter_gpu_gpu_info",
    "jupyter_gpu_memory_used_bytes",
    "jupyter_gpu_memory_total_bytes",
    "jupyter_gpu_utilization_percent",
    "jupyter_gpu_error",
)


def test_service_metrics_export_each_gpu_of_the_host_once(demo_gpus: None) -> None:
    """/services/jupyter-gpu/metrics: the host's per-GPU series, for a token with the service's access scope."""
    from jupyter_gpu.sources import nvml

    async def body() -> None:
        run = await start()
        run.service.host = "gpu-node-7"
        people(run.hub)
        code, raw = await run.call("metrics", "bob-token")  # any token with access:services!service=jupyter-gpu
        assert code == 200, raw
        families = _families(raw.decode())
        truth = nvml.snapshot()
        info = {s.labels["UUID"]: s.labels for s in families["jupyter_gpu_gpu_info"]}
        assert set(info) == {gpu.uuid for gpu in truth.gpus} and len(families["jupyter_gpu_gpu_info"]) == 4
        assert {labels["host"] for labels in info.values()} == {"gpu-node-7"}
        used = {s.labels["uuid"]: s.value for s in families["jupyter_gpu_memory_used_bytes"]}
        assert used == {gpu.uuid: gpu.memory_used for gpu in truth.gpus}
        assert families["jupyter_gpu_nvml_up"][0].value == 1
        # the kernel families are there, empty: the demo's GPUs hold none of the reports' PIDs
        # (the kernels' series from the reports: test_hub_push.py)
        assert all(not samples for name, samples in families.items() if name.startswith("jupyter_gpu_kernel"))
        # The service's token has no access scope for itself; no token: the hub's login is not offered.
        assert (await run.call("metrics", SERVICE_TOKEN))[0] == 403
        assert (await run.call("metrics", "no-such-token"))[0] == 403

    asyncio.run(body())


def test_user_servers_on_the_service_export_kernel_series_only(demo_gpus: None) -> None:
    """One source of per-GPU series per host: a server taking its GPUs from the service leaves them
    to the service (even while it has fallen back to its own sampler); one reading NVML exports them."""
    from jupyter_gpu.server.metrics import GpuCollector

    async def body() -> None:
        run = await start(interval_s=0.1)
        run.hub.add_user("user-server", "server-token")
        exported = {}
        for source in ("hub-service", "nvml"):
            config = JupyterGpuServer(source=run.url if source == "hub-service" else "nvml", interval_s=0.1)
            service = GpuService(config)
            if source == "hub-service":
                service._nvml_take.token = "server-token"
                service._nvml_take.timeout_s = 60.0
            await asyncio.get_running_loop().run_in_executor(None, service.sampler.wait_for_snapshot, None, 30.0)
            collector = GpuCollector()
            collector.service = service
            exported[source] = {family.name for family in collector.collect()}
            service.sampler.close()
        run.service.sampler.close()
        assert exported["nvml"] >= set(DEVICE_SERIES)
        assert not exported["hub-service"] & set(DEVICE_SERIES), exported["hub-service"]
        assert {"jupyter_gpu_kernel_memory_used_bytes", "jupyter_gpu_nvml_up"} <= exported["hub-service"]

    asyncio.run(body())


def test_a_service_address_whose_owner_cannot_be_checked_gets_no_token(
    demo_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http:// service whose socket is not in this host's /proc/net/tcp (another host: its
    owner cannot be checked) gets no request; another account than service_account neither."""

    async def body() -> None:
        run = await start()
        people(run.hub)
        await run.sampled()  # else api/devices may answer "no GPU sample yet" after its 1 s on a loaded machine
        loop = asyncio.get_running_loop()
        devices = run.url + "api/devices"
        # the checks refuse before any request; where one is made, a loaded machine gets longer than
        # a user server's 3 s to answer (the timeout is not what this test is about)
        ok = remote.RemoteSource(
            devices, fallback=lambda: Snapshot(False, 0.0), token="bob-token", timeout_s=UNDER_LOAD_S
        )
        assert (await loop.run_in_executor(None, ok)).gpus and ok.last_error is None  # root's socket
        monkeypatch.setattr(remote, "PROC_NET_TCP", ("/dev/null",))
        blind = remote.RemoteSource(devices, fallback=lambda: Snapshot(False, 0.0), token="bob-token")
        await loop.run_in_executor(None, blind)
        assert "is not a socket of this host" in (blind.last_error or "") and "token was not sent" in (
            blind.last_error or ""
        )
        monkeypatch.undo()
        other = remote.RemoteSource(devices, fallback=lambda: Snapshot(False, 0.0), token="bob-token", account="99999")
        await loop.run_in_executor(None, other)
        assert "not by the service's account uid 99999" in (other.last_error or ""), other.last_error
        unchecked = remote.RemoteSource(
            devices, fallback=lambda: Snapshot(False, 0.0), token="bob-token", account="", timeout_s=UNDER_LOAD_S
        )
        assert (await loop.run_in_executor(None, unchecked)).gpus and unchecked.last_error is None

    asyncio.run(body())


# -- usage accounting (api/usage, api/usage.csv)


def test_usage_accounts_each_kernels_gpu_time_and_the_csv_matches_it(hub_gpus: ScenarioFile, tmp_path: Any) -> None:
    import csv
    import io

    async def body() -> None:
        run = await start(usage_db=str(tmp_path / "usage.sqlite"))
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        now = time.time()
        await run.service.accountant.account_once(now - 120)  # the first sample starts the count
        await run.service.accountant.account_once(now - 60)
        await run.service.accountant.account_once(now)  # two intervals of 60 s
        code, raw = await run.call("api/usage?window=day", "admin-token")
        assert code == 200, raw
        data = json.loads(raw)
        assert data["admin"] is True and data["window"] == "day"
        by_user = {user["name"]: user for user in data["users"]}
        assert list(by_user) == ["bob", "alice"]  # most GPU-hours first: bob holds two kernels
        assert by_user["bob"]["notebooks"] == [
            {
                "notebook": f"bob/secret-{k}.ipynb",
                "gpu_hours": 0.03,
                "gib_hours": 0.07,
                "busy_hours": 0.0,
                "idle_hours": 0.03,
            }
            for k in (0, 1)
        ]  # 2 min = 0.033 h of one GPU, 2 GiB x 2 min = 0.067 GiB-hours, idle (the kernels say so)
        code, csv_raw = await run.call("api/usage.csv?window=day", "admin-token")
        assert code == 200, csv_raw
        lines = list(csv.reader(io.StringIO(csv_raw.decode())))
        expected = [
            [
                user["name"],
                entry["notebook"],
                *(f"{entry[key]:.2f}" for key in ("gpu_hours", "gib_hours", "busy_hours", "idle_hours")),
            ]
            for user in data["users"]
            for entry in user["notebooks"]
        ]
        assert lines == [["user", "notebook", "gpu_hours", "gib_hours", "busy_hours", "idle_hours"], *expected]

    asyncio.run(body())


def test_usage_for_a_user_is_their_own_and_the_csv_is_for_admins(hub_gpus: ScenarioFile, tmp_path: Any) -> None:
    async def body() -> None:
        run = await start(usage_db=str(tmp_path / "usage.sqlite"))
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        await run.service.accountant.account_once(time.time() - 60)
        await run.service.accountant.account_once()
        for token, viewer in (("bob-token", "bob"), ("alice-token", "alice")):  # a plain user, a reader
            code, raw = await run.call("api/usage", token)
            assert code == 200, raw
            data = json.loads(raw)
            assert data["window"] == "week" and data["admin"] is False
            assert [user["name"] for user in data["users"]] == [viewer]
            other = "alice" if viewer == "bob" else "bob"
            assert other.encode() not in raw
            code, raw = await run.call("api/usage.csv", token)
            assert code == 403 and other.encode() not in raw
        assert (await run.call("api/usage?window=year", "bob-token"))[0] == 400
        assert (await run.call("api/usage", "no-such-token"))[0] == 403

    asyncio.run(body())


def test_usage_without_a_usage_file_says_accounting_is_off(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        code, raw = await run.call("api/usage", "admin-token")
        assert code == 404 and b"accounting is off" in raw

    asyncio.run(body())


def test_the_charts_history_survives_a_restart_through_the_usage_file(hub_gpus: ScenarioFile, tmp_path: Any) -> None:
    async def body() -> None:
        run = await start(usage_db=str(tmp_path / "usage.sqlite"))
        await run.service.accountant.account_once()
        run.close()
        again = await start(usage_db=str(tmp_path / "usage.sqlite"))
        assert len(again.service.history) == 0
        again.service.accountant.start()
        history = again.service.history.to_dict()
        assert [gpu["index"] for gpu in history["gpus"]] == [0, 1, 2, 3]
        assert all(len(gpu["t"]) == 1 and gpu["utilization"][0] is not None for gpu in history["gpus"])

    asyncio.run(body())


def test_a_user_servers_usage_request_keeps_only_its_users_row_and_refuses_a_bad_answer(
    hub_gpus: ScenarioFile, tmp_path: Any
) -> None:
    """sources.remote.own_usage against the real service: an admin's token gets everybody's rows,
    of which only the asked user's is kept; an answer that is not the service's is refused."""
    import http.server
    import urllib.error

    async def body() -> None:
        run = await start(usage_db=str(tmp_path / "usage.sqlite"))
        people(run.hub, hub_gpus)
        run.reported()  # the user servers have pushed their reports
        await run.service.accountant.account_once(time.time() - 60)
        await run.service.accountant.account_once()
        loop = asyncio.get_running_loop()
        mine = await loop.run_in_executor(
            None, lambda: remote.own_usage(run.url, "alice", "day", token="admin-token", account="")
        )
        assert mine["user"] == "alice" and [n["notebook"] for n in mine["notebooks"]] == ["alice/secret-0.ipynb"]
        assert mine["gpu_hours"] == 0.02 and "bob" not in json.dumps(mine)
        nobody = await loop.run_in_executor(
            None, lambda: remote.own_usage(run.url, "carol", token="admin-token", account="")
        )
        assert (nobody["gpu_hours"], nobody["notebooks"]) == (0.0, [])
        with pytest.raises(urllib.error.HTTPError) as refused:
            await loop.run_in_executor(
                None, lambda: remote.own_usage(run.url, "bob", token="no-such-token", account="")
            )
        assert refused.value.code == 403

    asyncio.run(body())

    class Odd(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(
                {"window": "week", "since": 0, "until": 1, "users": [{"name": "bob", "gpu_hours": "lots"}]}
            )
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Odd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(remote.BadAnswer, match="gpu_hours"):
            remote.own_usage(f"http://127.0.0.1:{server.server_address[1]}/", "bob", token="t", account="")
        with pytest.raises(ValueError, match="window"):
            remote.own_usage("http://127.0.0.1:1/", "bob", "year")
    finally:
        server.shutdown()
        server.server_close()


def test_the_service_stops_on_the_hubs_sigint_even_from_a_hub_that_ignores_it(tmp_path: Any) -> None:
    """JupyterHub stops a managed service with SIGINT, and SIGTERM only after its interrupt_timeout.
    A hub started as a background job of a script (``jupyterhub &``, no job control) hands its
    services an ignored SIGINT: the service still stops on it at once, instead of holding each stop
    or restart of the hub for those 10 s."""
    port = free_port()
    log = tmp_path / "service.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB_")},
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
        "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",  # never asked: nobody logs in
        simulate.ENV_VAR: "demo",
    }
    with open(log, "wb") as out:
        service = subprocess.Popen(
            [sys.executable, "-m", "jupyter_gpu.hub", "--usage-db", ""],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # what `jupyterhub &` passes on
        )
    try:
        wait_until(lambda: "jupyter-gpu console at" in log.read_text(), UNDER_LOAD_S, "the service to listen")
        service.send_signal(signal.SIGINT)
        assert service.wait(timeout=UNDER_LOAD_S) == 0, log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
