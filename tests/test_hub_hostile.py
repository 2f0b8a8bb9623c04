"""The JupyterHub service attacked: hostile user servers' reports, odd admin requests, NVML faults.
The rule: the console answers 200, a bad report is dropped and counted (its user keeps NVML's
memory and, when it never reported well, an empty row), the other rows are unaffected, and nobody's
GPU memory is shown as somebody else's. The push itself (tokens, 413/422/429) is test_hub_push.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hub_fake import scenario_of, user_snapshot
from hub_service import Running, people, start
from support import UNDER_LOAD_S, ScenarioFile
from tornado import netutil, web
from tornado.httpserver import HTTPServer

from jupyter_gpu import simulate
from jupyter_gpu.hub import core

pytestmark = pytest.mark.usefixtures("stop_started")

GIB = 1 << 30


@pytest.fixture
def gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


def row(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(user for user in data["users"] if user["name"] == name)


async def console(run: Running, token: str = "admin-token") -> dict[str, Any]:
    code, raw = await run.call("api/console", token)
    assert code == 200, raw
    return json.loads(raw)


def bob_is_intact(data: dict[str, Any]) -> None:
    bob = row(data, "bob")
    assert bob["error"] is None and bob["warnings"] == []
    assert [(k["kernel_id"], k["memory_by_gpu"]) for k in bob["kernels"]] == [
        ("bob-kernel-0", {"1": 2 * GIB}),
        ("bob-kernel-1", {"1": 2 * GIB}),
    ]
    assert bob["memory_by_gpu"] == {"1": 4 * GIB} and bob["gpu_memory"] == 4 * GIB


# -- 1. hostile user servers


def test_alice_cannot_take_bobs_process_nor_inflate_her_own(gpus: ScenarioFile) -> None:
    """alice's server names bob's PID as her kernel and claims 2**70 bytes for her own: the report
    lies, so none of it is believed; bob keeps his, alice's row shows what NVML says she holds."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        bob_pid = run.hub.snapshots["bob"]["gpus"][0]["processes"][0]["pid"]
        alice = run.hub.snapshots["alice"]
        alice["gpus"][0]["processes"][0]["memory"] = 2**70
        alice["gpus"].append(
            {
                "index": 1,
                "uuid": "GPU-1",
                "name": "A100",
                "processes": [{"pid": bob_pid, "memory": 60 * GIB, "user": "alice", "kernel_id": "alice-forged"}],
            }
        )
        alice["kernels"].append(
            {
                "kernel_id": "alice-forged",
                "notebook": "bob-looks-idle.ipynb",
                "execution_state": "idle",
                "idle_s": 1e9,
                "idle": True,
                "gpu_memory": 60 * GIB,
            }
        )
        data = await console(run)
        bob_is_intact(data)
        mine = row(data, "alice")
        # a report naming bob's PID is a lie: not believed at all, and counted
        assert mine["kernels"] == [] and "another account: not believed" in mine["error"]
        assert mine["memory_by_gpu"] == {"0": GIB} and mine["gpu_memory"] == GIB  # NVML's figure, not 2**70
        assert run.service.board.dropped["lying"] == 1
        await console(run)
        assert run.service.board.dropped["lying"] == 1  # one report, counted once

    asyncio.run(body())


def test_system_user_template_maps_hub_users_to_their_accounts(gpus: ScenarioFile) -> None:
    """The Littlest JupyterHub: hub user alice runs as jupyter-alice (--system-user jupyter-{name});
    with the default template the same PIDs are nobody's kernels (never somebody else's)."""

    async def body() -> None:
        run = await start()
        people(run.hub)
        # PIDs of their own: NVML's reader caches who owns a PID (here simulated), and the other
        # tests' processes with these users' PIDs belonged to "alice" and "bob"
        for snapshot in run.hub.snapshots.values():
            for item in [*snapshot["gpus"][0]["processes"], *snapshot["kernels"]]:
                item["pid"] += 500
        scenario = scenario_of(run.hub.snapshots)
        for gpu in scenario["gpus"]:
            for process in gpu.get("processes", []):
                process["user"] = "jupyter-" + process["user"]
        gpus.write(scenario)
        data = await console(run)
        assert all(user["gpu_memory"] == 0 for user in data["users"])
        assert all("another account" in user["error"] for user in data["users"])
        run.service.system_user = "jupyter-{name}"
        data = await console(run)
        bob_is_intact(data)
        assert row(data, "alice")["memory_by_gpu"] == {"0": GIB}

    asyncio.run(body())


def test_system_user_option_needs_the_name(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_gpu.hub.__main__ import main

    assert main(["--system-user", "jupyter-"]) == 2
    assert "--system-user 'jupyter-': the template must contain {name}" in capsys.readouterr().err


def test_a_silent_or_lying_server_cannot_hide_its_users_gpu_memory(gpus: ScenarioFile) -> None:
    """bob's server reports no GPU processes, then garbage, then nothing: his row still shows what
    NVML says he holds (and says the report is stale after two intervals)."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        for gpu in run.hub.snapshots["bob"]["gpus"]:
            gpu["processes"] = []
        data = await console(run)
        assert row(data, "bob")["memory_by_gpu"] == {"1": 4 * GIB}
        run.hub.raw["bob"] = b"not json"  # dropped and counted: his previous report stands
        data = await console(run)
        bob = row(data, "bob")
        assert run.service.board.dropped["malformed"] == 1
        assert bob["error"] is None and bob["memory_by_gpu"] == {"1": 4 * GIB}
        for got in run.service.board.latest.values():
            got.at -= 3 * run.service.board.interval_s  # two intervals without a report: stale
        bob = row(await console(run), "bob")
        assert bob["error"].startswith("stale: no report") and bob["kernels"] == []
        assert bob["memory_by_gpu"] == {"1": 4 * GIB}  # silence hides nothing

    asyncio.run(body())


def _many_processes() -> bytes:
    processes = [{"pid": 500_000 + i, "memory": 1, "kernel_id": f"k{i % 7}"} for i in range(100_000)]
    return json.dumps(
        {"gpus": [{"index": 0, "processes": processes}], "kernels": [{"kernel_id": f"k{i}"} for i in range(7)]}
    ).encode()


HOSTILE = {
    "not-json": b"<html>hello</html>",
    "a-list": b"[1, 2, 3]",
    "a-string": b'"snapshot"',
    "nan": b'{"gpus": [], "kernels": [{"kernel_id": "k1", "idle_s": NaN}]}',
    "infinity": b'{"gpus": [], "kernels": [{"kernel_id": "k1", "cull_in_s": -Infinity}]}',
    "wrong-types": b'{"gpus": 5, "kernels": {"a": 1}}',
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "deep-object": b'{"gpus": [], "kernels": [' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"]}",
    "huge": b'{"gpus": [], "kernels": [], "pad": "' + b"x" * (9 << 20) + b'"}',
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_report_is_dropped_and_counted(gpus: ScenarioFile, case: str) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        run.hub.raw["mallory"] = HOSTILE[case]
        data = await console(run)
        bob_is_intact(data)
        assert row(data, "alice")["error"] is None
        assert "mallory" not in {user["name"] for user in data["users"]}  # never believed
        reason = "oversized" if case == "huge" else "malformed"
        assert run.service.board.dropped[reason] == 1, run.service.board.dropped

    asyncio.run(body())


def test_odd_fields_are_refused_or_bounded(gpus: ScenarioFile) -> None:
    """A report of 100k processes (over the size bound) or with wrong types, repeated or bad kernel
    ids is refused whole (malformed, counted); a well-formed one's figures are bounded: a kernel's
    own memory report by the host's GPU memory, and it never counts as NVML's."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        run.hub.raw["mallory"] = _many_processes()
        await console(run)
        for odd in (
            {"kernel_id": "../../api/kernels"},
            {"kernel_id": 7},
            "not an object",
            {"kernel_id": "k-" + "9" * 10_000},
            {"kernel_id": "x", "idle_s": 10**400},
            {"kernel_id": "x", "pids": ["12"]},
            {"kernel_id": "x", "pids": [True]},
            {"kernel_id": "x", "execution_state": ["busy"]},
        ):
            run.hub.raw["mallory"] = json.dumps({"kernels": [odd]}).encode()
            await console(run)
        report = {"kernel_id": "oscar-report", "execution_state": "busy", "reported_gpu_memory": {"0": 2**53}}
        run.hub.raw["oscar"] = json.dumps({"kernels": [report], "idle_threshold_s": 60}).encode()
        data = await console(run)
        bob_is_intact(data)
        assert "mallory" not in {user["name"] for user in data["users"]}
        dropped = run.service.board.dropped
        assert (dropped["oversized"], dropped["malformed"]) == (1, 8), dropped  # 100k processes: > 1 MiB
        [kernel] = row(data, "oscar")["kernels"]
        total = sum(gpu["memory_total"] for gpu in data["gpus"])
        assert kernel["memory_source"] == "report" and kernel["gpu_memory"] == total  # bounded by the host
        assert kernel["idle"] is False and kernel["execution_state"] == "busy"
        assert row(data, "oscar")["memory_by_gpu"] == {}  # NVML shows oscar nothing

    asyncio.run(body())


@pytest.mark.parametrize(
    "name",
    [
        '<img src=x onerror="alert(1)">.ipynb',
        "safe\u202egnp.exe.ipynb",  # a right-to-left override
        "two\nlines\r\x00\u2028.ipynb",
        "\u200bhidden\u2066isolate\u2069.ipynb",
        "long-" + "x" * 10_000 + ".ipynb",
    ],
)
def test_notebook_names_are_one_visible_line(gpus: ScenarioFile, name: str) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        run.hub.snapshots["alice"]["kernels"][0]["notebook"] = name
        shown = row(await console(run), "alice")["kernels"][0]["notebook"]
        assert shown.isprintable() and len(shown) <= core.MAX_TEXT
        assert "\u202e" not in shown and "\n" not in shown and "\u2066" not in shown
        visible = [ch for ch in name if ch.isprintable()][:3]
        assert [ch for ch in shown if ch != "\ufffd"][:3] == visible  # text stays text (shown with textContent)

    asyncio.run(body())


# -- 2. odd user names, named servers


@pytest.mark.parametrize("name", ["a/b", "..", "a+b", "wéi 魏", "@evil.com", "x%2F..", "~tilde"])
def test_odd_user_names_get_their_own_row(gpus: ScenarioFile, name: str) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        snapshot = run.hub.snapshots[name] = user_snapshot(name, 1, gpu=3)
        snapshot["gpus"][0]["processes"][0]["kernel_id"] = snapshot["kernels"][0]["kernel_id"] = "odd-kernel-0"
        gpus.write(scenario_of(run.hub.snapshots))
        data = await console(run)
        bob_is_intact(data)
        odd = row(data, name)  # the name is the token's owner: no URL is built from it
        assert odd["error"] is None, odd
        assert [(k["kernel_id"], k["memory_by_gpu"]) for k in odd["kernels"]] == [("odd-kernel-0", {"3": GIB})]
        assert odd["memory_by_gpu"] == {"3": GIB}

    asyncio.run(body())


def test_a_users_named_servers_are_one_row_and_shutdown_finds_the_right_server(gpus: ScenarioFile) -> None:
    """alice has her default server and a named one ("gpu"), each with a kernel: one row, her NVML
    memory counted once; the admin's shutdown waits for the server that lists the kernel."""

    async def body() -> None:
        run = await start()
        people(run.hub)
        named = user_snapshot("alice-gpu", 1, gpu=2, mib=3072)  # its own PID range
        for process in named["gpus"][0]["processes"]:
            process["user"] = "alice"
        run.hub.named[("alice", "gpu")] = named
        gpus.write(scenario_of([*run.hub.snapshots.values(), named]))
        data = await console(run)
        bob_is_intact(data)
        [alice] = [user for user in data["users"] if user["name"] == "alice"]
        assert {k["kernel_id"]: k["memory_by_gpu"] for k in alice["kernels"]} == {
            "alice-kernel-0": {"0": GIB},
            "alice-gpu-kernel-0": {"2": 3 * GIB},
        }
        assert alice["memory_by_gpu"] == {"0": GIB, "2": 3 * GIB} and alice["gpu_memory"] == 4 * GIB
        code, raw = await run.call("api/users/alice/kernels/alice-gpu-kernel-0", "admin-token", method="DELETE")
        assert code == 202, raw
        assert [(key, [i.kernel_id for i in queue]) for key, queue in run.service.board.pending.items()] == [
            (("alice", "gpu"), ["alice-gpu-kernel-0"])  # for the named server that lists it
        ]

    asyncio.run(body())


# -- 3. many consoles


def test_fifty_concurrent_console_requests_ask_no_user_server(gpus: ScenarioFile) -> None:
    """The console reads the reports the servers pushed: no request to any user server, nor to the
    hub's list of servers, however many consoles look."""

    async def body() -> None:
        run = await start(interval_s=30.0)
        people(run.hub, gpus)
        answers = await asyncio.gather(*(run.call("api/console", "admin-token") for _ in range(50)))
        assert [code for code, _ in answers] == [200] * 50
        assert run.hub.users_calls == 0 and run.hub.snapshot_calls == {} and run.hub.deleted == []

    asyncio.run(body())


@pytest.mark.parametrize(
    "path, code",
    [
        ("api/users/bob/kernels/..%2F..%2Fapi", 400),
        ("api/users/bob/kernels/%2E%2E", 400),
        ("api/users/bob/kernels/" + "a" * 10_000, 400),
        ("api/users/bob/kernels/", 404),
        ("api/users/bob/kernels/bob-kernel-0%0A", 400),
        ("api/users/alice/kernels/bob-kernel-0", 404),  # bob's kernel id, asked of alice's server
        ("api/users/..%2Fbob/kernels/bob-kernel-0", 404),
        ("api/users/%00/kernels/bob-kernel-0", 404),
        ("api/users/" + "b" * 10_000 + "/kernels/bob-kernel-0", 404),
        ("api/users/bob/kernels/no-such-kernel", 404),
        ("api/users/%25d%25s%25(x)s/kernels/bob-kernel-0", 404),  # a name that is a format string
    ],
)
def test_odd_shutdown_requests_delete_nothing(gpus: ScenarioFile, path: str, code: int) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        got, raw = await run.call(path, "admin-token", method="DELETE")
        assert got == code, raw
        assert run.service.board.pending == {}
        got, _ = await run.call("api/users/bob/kernels/bob-kernel-1", "admin-token", method="DELETE")
        assert got == 202 and list(run.service.board.pending) == [("bob", "")]

    asyncio.run(body())


# -- 4. NVML faults


FAULTS: dict[str, Any] = {
    "driver-not-loaded": lambda s: s.update(fault="driver_not_loaded"),
    "library-not-found": lambda s: s.update(fault="library_not_found"),
    "no-permission": lambda s: s.update(fault="no_permission"),
    "gpu-lost": lambda s: s["gpus"][1].update(fault="lost"),
    "old-driver": lambda s: s.update(
        missing_functions=["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetUtilizationRates"]
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_nvml_faults_degrade_every_endpoint(gpus: ScenarioFile, fault: str) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        gpus.update(FAULTS[fault])
        for path in ("api/console", "api/devices", "metrics"):
            code, raw = await run.call(path, "admin-token")
            assert code == 200, (path, raw)
        data = await console(run)
        assert row(data, "bob")["error"] is None
        if fault == "gpu-lost":
            assert data["gpus"][1]["error"] and data["gpus"][0]["error"] is None
        elif fault != "old-driver":
            assert data["error"] and data["gpus"] == []

    asyncio.run(body())


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_nvml_faults_cost_usage_accounting_the_gpus_they_hide_never_the_interval(
    gpus: ScenarioFile, fault: str, tmp_path: Any
) -> None:
    """Accounting through every NVML fault: the interval is recorded (what NVML still shows), the
    usage answer stays 200, and a GPU in error leaves no made-up figures in the history."""

    async def body() -> None:
        run = await start(usage_db=str(tmp_path / "usage.sqlite"))
        people(run.hub, gpus)
        gpus.update(FAULTS[fault])
        await run.service.accountant.account_once(time.time() - 60)
        await run.service.accountant.account_once()
        code, raw = await run.call("api/usage?window=day", "admin-token")
        assert code == 200, raw
        assert run.service.accountant is not None
        lost = [row[4:] for row in run.service.accountant.store.gpu_history(0) if row[2] == 1]
        if fault == "gpu-lost":
            assert lost == [(None, None), (None, None)]  # two samples of GPU 1, neither figure made up

    asyncio.run(body())


def test_a_hung_driver_answers_without_a_sample(gpus: ScenarioFile) -> None:
    """Every NVML call takes 3 s: the console, devices and metrics answer (without GPUs) instead of
    waiting on the driver."""

    async def body() -> None:
        gpus.update(lambda s: s.update(latency_ms=3000))
        run = await start(first_sample=False)
        people(run.hub)
        for path in ("api/console", "api/devices", "metrics"):
            code, raw = await run.call(path, "admin-token")
            assert code == 200, (path, raw)
        data = await console(run)
        assert data["error"] == "no GPU sample yet" and data["gpus"] == []
        run.service.sampler.close(timeout=0.1)

    asyncio.run(body())


# -- 5. privacy


def test_a_reader_gets_no_other_users_kernel_or_notebook_in_any_field(gpus: ScenarioFile) -> None:
    """alice (custom:jupyter-gpu:read) looks at a console where bob's server is odd in every way."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        bob = run.hub.snapshots["bob"]
        bob["kernels"].append(
            {"kernel_id": "bob-kernel-9", "notebook": "bob/secret-9.ipynb", "reported_gpu_memory": {"0": 5}}
        )
        code, raw = await run.call("api/console", "alice-token")
        assert code == 200
        text = raw.decode()
        for secret in ("bob-kernel", "bob/secret", "secret-bob", "ipykernel", "/user/bob"):
            assert secret not in text, secret
        data = json.loads(raw)
        assert row(data, "bob")["server_url"] is None

    asyncio.run(body())


def test_a_bug_in_the_join_is_an_error_line_not_a_500(
    gpus: ScenarioFile, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever slips through (here: the join raising), the console answers 200 and says so."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise KeyError("surprise")

        monkeypatch.setattr(core, "user_row", broken)  # the join of one user's row (hub.console_join)
        data = await console(run)
        assert data["error"].startswith("the console could not be built (KeyError") and data["users"] == []
        assert "the console could not be built" in caplog.text

    asyncio.run(body())


def test_a_service_named_like_a_user_is_not_that_user(gpus: ScenarioFile) -> None:
    """A service token called "bob" with the read scope sees bob's kernels as anybody else's."""

    async def body() -> None:
        run = await start()
        people(run.hub, gpus)
        run.hub.tokens["bob-service-token"] = {
            "kind": "service",
            "name": "bob",
            "scopes": [core.READ_SCOPE, "access:services!service=jupyter-gpu"],
        }
        code, raw = await run.call("api/console", "bob-service-token")
        assert code == 200, raw
        data = json.loads(raw)
        assert data["viewer"] == "service:bob" and data["admin"] is False
        assert b"bob-kernel" not in raw and b"bob/secret" not in raw and row(data, "bob")["server_url"] is None

    asyncio.run(body())


def test_pure_console_survives_any_server_object() -> None:
    """core.console with odd UserServer snapshots (the pure join alone): no exception, an error line."""
    servers = [
        core.UserServer("a", "/user/a/", [1, 2]),
        core.UserServer("b", "/user/b/", {"gpus": "x"}),
        core.UserServer("c", None, None, "down"),
    ]
    data = core.console(None, {}, servers, "a", "admin")
    assert [u["error"] for u in data["users"]] == [
        "cannot read this server's GPU kernels: the answer is not a JSON object",
        "cannot read this server's GPU kernels: the answer is not a jupyter-gpu snapshot (gpus and kernels "
        "must be lists)",
        "down",
    ]


class Evil:
    """Another host that would like a token."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        seen = self.seen

        class Record(web.RequestHandler):
            def get(self, _: str) -> None:
                seen.append((self.request.path, self.request.headers.get("Authorization", "")))
                self.finish("{}")

        sockets = netutil.bind_sockets(0, "127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        HTTPServer(web.Application([(r"(.*)", Record)])).add_sockets(sockets)


def test_a_user_server_does_not_follow_a_redirect_with_its_token(gpus: ScenarioFile) -> None:
    """remote.py asks the service with the user server's own token: a redirect (a misconfigured
    proxy, a wrong URL) is an error and a local sample, never the token sent to another host."""
    from jupyter_gpu.sources import nvml, remote

    async def body() -> None:
        evil = Evil()
        target = f"http://127.0.0.1:{evil.port}/collect"

        class Redirect(web.RequestHandler):
            def get(self) -> None:
                self.redirect(target)

        sockets = netutil.bind_sockets(0, "127.0.0.1")
        HTTPServer(web.Application([(r".*", Redirect)])).add_sockets(sockets)
        url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/services/jupyter-gpu/api/devices"
        source = remote.RemoteSource(url, fallback=nvml.snapshot, token="user-server-secret")
        snapshot = await asyncio.get_running_loop().run_in_executor(None, source)
        assert evil.seen == []
        assert source.fallbacks == 1 and "HTTP 302" in (source.last_error or "")
        assert snapshot.gpus and any("reads NVML itself" in w for w in snapshot.warnings)

    asyncio.run(body())


def test_the_processes_index_is_built_once_per_sample() -> None:
    """Every console request of a second joins against the same sample: its index of PIDs and owners
    (0.1 s at 64 GPUs x 2,000 processes, benchmarks/README.md) is built once, not per request."""
    from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot

    def sample() -> Snapshot:
        gpu = GpuInfo(
            index=0,
            uuid="GPU-0",
            name="x",
            memory_total=GIB,
            memory_used=GIB,
            memory_free=0,
            processes=(GpuProcess(pid=7, memory=GIB, user="alice"),),
        )
        return Snapshot(True, 1.0, (gpu,), None, None, True, ())

    first, second = sample(), sample()
    assert core.Truth.of(first) is core.Truth.of(first)
    assert core.Truth.of(second) is not core.Truth.of(first)  # a new sample: a new index
    assert core.Truth.of(second).by_owner == {"alice": {"0": GIB}}


@pytest.fixture
def service_process() -> Any:
    """The service (hub_service.serve_in_this_process) in a child process: what it printed, then
    killed. A frozen service must fail the test, not hang the test's own process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)]),
        simulate.ENV_VAR: simulate.DEMO_STILL,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", "import hub_service; hub_service.serve_in_this_process()"],
        cwd=tests,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the service did not start"
        yield json.loads(line)
    finally:
        child.kill()
        child.wait(10)


def test_no_cookie_header_or_method_freezes_the_service(service_process: dict[str, Any]) -> None:
    """A logged-in reader's DELETE with any X-XSRFToken (or ?_xsrf=), no _xsrf cookie and no
    Sec-Fetch-Mode deadlocked the service for good (the XSRF check re-entered HubAuth's one-thread
    pool): every combination on every route answers within seconds, none deletes a kernel, and
    the service answers a user server afterwards."""
    import http.client
    import itertools
    from urllib.parse import urlsplit

    url = urlsplit(service_process["url"])
    cookie_name = service_process["cookie_name"]

    def ask(method: str, path: str, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=5)
        try:
            connection.request(method, url.path + path, body=b"" if method != "GET" else None, headers=headers)
            return connection.getresponse().status
        except TimeoutError:
            pytest.fail(f"the service froze on {method} {path} {headers}")
        finally:
            connection.close()

    routes = ["", "api/console", "api/users/bob/kernels/bob-kernel-0", "api/devices", "metrics"]
    cookies = [None, *service_process["cookies"]]  # nobody, alice (reader), root-admin
    for route, who, header, query, mode, method in itertools.product(
        routes,
        cookies,
        (False, True),
        (False, True),
        (None, "cors", "navigate", "same-origin"),
        ("GET", "POST", "DELETE"),
    ):
        headers = {}
        if who is not None:
            headers["Cookie"] = f"{cookie_name}={service_process['cookies'][who]}"
        if header:
            headers["X-XSRFToken"] = "anything"
        if mode is not None:
            headers["Sec-Fetch-Mode"] = mode
        status = ask(method, route + ("?_xsrf=anything" if query else ""), headers)
        assert status < 500 and status != 204, (status, method, route, who, header, query, mode)
    assert ask("GET", "api/devices", {"Authorization": "token bob-token"}) == 200


def test_a_neighbour_on_the_service_port_gets_no_token(
    neighbour: Any, demo_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23, item 6: while the service is down, another local user listens on its port. The
    user server used to send its JUPYTERHUB_API_TOKEN (which opens the user's server) with every
    sample and only said "unreachable (HTTP 503)". Now the neighbour gets no byte, the server reads
    NVML itself, and its warning names who was listening."""
    import socket

    from jupyter_gpu.server import GpuService, JupyterGpuServer

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "user-server-secret")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with neighbour.listening(port) as heard:
        config = JupyterGpuServer(source=f"http://127.0.0.1:{port}/services/jupyter-gpu/", interval_s=0.1)
        service = GpuService(config)
        try:
            snapshots = []
            for _ in range(5):
                snapshot = service.sampler.wait_for_snapshot(
                    newer_than=snapshots[-1].timestamp if snapshots else None, timeout=UNDER_LOAD_S
                )
                assert snapshot is not None
                snapshots.append(snapshot)
        finally:
            service.sampler.close()
        received = heard()
    assert received, "the user server never connected: the test proves nothing"
    assert all(data == b"" for data in received), received  # connected, checked, closed: nothing sent
    assert all(len(s.gpus) == 4 for s in snapshots)  # read locally
    warning = next(w for w in snapshots[-1].warnings if "jupyter-gpu service" in w)
    assert f"served by account {neighbour.name!r}" in warning and "token was not sent" in warning, warning
    assert "reads NVML itself" in warning
