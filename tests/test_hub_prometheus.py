"""The hub service's Prometheus mode (``--prometheus-url``): Prometheus API answers (constructed as
Prometheus 2.x sends them, hostile ones included) turned into the console, and the service app
reading from a stand-in Prometheus. The real Prometheus is in test_hub_prometheus_real.py."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import types
from pathlib import Path
from typing import Any

import pytest
from hub_fake import FakeHub
from hub_service import listen, service_for
from prometheus_fake import GIB, StandInPrometheus, T, kernel, matrix, node, series, two_nodes, vector
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpu.core import wire
from jupyter_gpu.hub import core, prometheus_mode
from jupyter_gpu.hub import prometheus as prom
from jupyter_gpu.hub.__main__ import main as service_main
from jupyter_gpu.hub.app import HubService


def test_every_gpu_of_every_node_once_grouped_by_host() -> None:
    data = prom.console(two_nodes(), "root", "admin")
    assert data["source"] == "prometheus" and data["hosts"] == ["node-a", "node-b"] and data["error"] is None
    assert [(g["host"], g["index"], g["uuid"]) for g in data["gpus"]] == [
        ("node-a", 0, "GPU-a0"),
        ("node-a", 1, "GPU-a1"),
        ("node-b", 0, "GPU-b0"),
        ("node-b", 1, "GPU-b1"),
    ]
    a1 = data["gpus"][1]
    assert (a1["memory_used"], a1["memory_total"], a1["utilization"], a1["error"]) == (2 * GIB, 80 * GIB, 20, None)
    assert data["timestamp"] == T


def test_kernels_by_user_with_notebook_memory_per_gpu_idle_and_cull() -> None:
    data = prom.console(two_nodes(), "root", "admin", idle_after_s=3600)
    alice, bob = data["users"]
    assert (alice["name"], bob["name"]) == ("alice", "bob")
    [k] = alice["kernels"]
    assert (k["kernel_id"], k["notebook"], k["host"]) == ("k-alice-1", "alice/train.ipynb", "node-a")
    assert k["memory_by_gpu"] == {"node-a:1": 3 * GIB} and k["gpu_memory"] == 3 * GIB
    assert (k["idle_s"], k["idle"], k["cull_in_s"]) == (7200, True, 600)
    assert bob["kernels"][0]["idle"] is False and bob["memory_by_gpu"] == {"node-b:0": 5 * GIB}
    assert bob["gpu_memory"] == 5 * GIB


def test_one_host_keys_memory_by_gpu_index_as_the_local_console_does() -> None:
    answer = vector(
        *node("node-a", "h:1", ["GPU-a0", "GPU-a1"]), *kernel("alice", "k1", "a.ipynb", "1", "GPU-a1", GIB, None, "h:1")
    )
    data = prom.console(answer, "alice", "read")
    assert data["hosts"] == ["node-a"] and data["users"][0]["memory_by_gpu"] == {"1": GIB}


def test_reader_gets_no_other_users_kernel_ids_or_notebooks() -> None:
    data = prom.console(two_nodes(), "alice", "read")
    alice, bob = data["users"]
    assert alice["kernels"][0]["notebook"] == "alice/train.ipynb"
    assert [(k["kernel_id"], k["notebook"]) for k in bob["kernels"]] == [(None, None)]
    assert bob["gpu_memory"] == 5 * GIB  # the figures stay
    raw = json.dumps(data)
    assert "bob/secret" not in raw and "k-bob-1" not in raw


def test_user_from_the_scrape_configs_target_label_and_host_without_gpu_info() -> None:
    # Servers without the user label and gpu_info: the shipped config's jupyterhub_user and host target labels.
    gpu = {"gpu": "0", "uuid": "GPU-x", "name": "T4", "host": "node-x", "instance": "x:1"}
    answer = vector(
        series("jupyter_gpu_memory_used_bytes", GIB, **gpu),
        series(
            "jupyter_gpu_kernel_memory_used_bytes",
            GIB,
            kernel_id="k",
            notebook="n.ipynb",
            gpu="0",
            jupyterhub_user="carol",
            host="node-x",
            instance="x:1",
        ),
    )
    data = prom.console(answer, "root", "admin")
    assert data["hosts"] == ["node-x"] and data["gpus"][0]["host"] == "node-x"
    assert data["users"][0]["name"] == "carol" and data["users"][0]["kernels"][0]["host"] == "node-x"


def test_a_server_cannot_put_its_kernels_under_another_user(caplog: pytest.LogCaptureFixture) -> None:
    """mallory's server (scrape target jupyterhub_user="mallory") exports a kernel series with
    user="bob": dropped with a log line, never shown as bob's; bob's own stays."""
    answer = two_nodes()
    answer["data"]["result"] += kernel(
        "bob", "k-forged", "bob/fake.ipynb", "0", "GPU-b0", 70 * GIB, 99999, "10.0.1.9:8888"
    )
    for item in answer["data"]["result"][-2:]:
        item["metric"]["jupyterhub_user"] = "mallory"
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
        data = prom.console(answer, "root", "admin")
    users = {u["name"]: u for u in data["users"]}
    assert set(users) == {"alice", "bob"}
    assert [k["kernel_id"] for k in users["bob"]["kernels"]] == ["k-bob-1"] and users["bob"]["gpu_memory"] == 5 * GIB
    assert "not the scrape target's jupyterhub_user" in caplog.text


def test_the_same_kernel_scraped_twice_counts_once() -> None:
    twice = kernel("alice", "k1", "a.ipynb", "0", "GPU-a0", GIB, None, "h:1")
    data = prom.console(vector(*node("node-a", "h:1", ["GPU-a0"]), *twice, *twice), "root", "admin")
    assert data["users"][0]["gpu_memory"] == GIB


@pytest.mark.parametrize(
    "answer, message",
    [
        ("<html>", "not a JSON object"),
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "parse error"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "no vector result"),
        ({"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}, "no vector result"),
        (vector(*[{}] * (prom.MAX_SERIES + 1)), "more than"),
    ],
)
def test_an_unusable_answer_becomes_the_consoles_error(answer: Any, message: str) -> None:
    data = prom.console(answer, "root", "admin")
    assert message in data["error"] and data["gpus"] == [] and data["users"] == []


def test_hostile_series_are_dropped_one_log_line_each_and_the_rest_kept(caplog: pytest.LogCaptureFixture) -> None:
    good = two_nodes()["data"]["result"]
    bad = [
        "not a series",
        {"metric": "x", "value": [T, "1"]},
        series("jupyter_gpu_memory_used_bytes", "NaN", gpu="2", uuid="GPU-nan", name="x"),
        series("jupyter_gpu_memory_used_bytes", "+Inf", gpu="2", uuid="GPU-inf", name="x"),
        series("jupyter_gpu_memory_used_bytes", -5, gpu="2", uuid="GPU-neg", name="x"),
        series("jupyter_gpu_utilization_percent", 250, gpu="2", uuid="GPU-hot", name="x"),
        {"metric": {"__name__": "jupyter_gpu_memory_used_bytes", "gpu": 2, "uuid": "GPU-int"}, "value": [T, "1"]},
        {"metric": {"__name__": "jupyter_gpu_memory_used_bytes", "gpu": "2", "uuid": "GPU-val"}, "value": [T, 1]},
        {"metric": {"__name__": "jupyter_gpu_memory_used_bytes", "gpu": "2", "uuid": "GPU-ts"}, "value": ["x", "1"]},
        {
            "metric": {"__name__": "jupyter_gpu_memory_used_bytes", "gpu": "2", "uuid": "GPU-big"},
            "value": [10**400, "1"],
        },  # a timestamp beyond any float
        series("jupyter_gpu_memory_used_bytes", 1, gpu="../2", uuid="GPU-idx", name="x"),
        series("jupyter_gpu_kernel_memory_used_bytes", GIB, kernel_id="k-nouser", gpu="0", UUID="GPU-a0"),
        series(
            "jupyter_gpu_kernel_memory_used_bytes", GIB, kernel_id="k-long", user="eve", gpu="0", notebook="n" * 5000
        ),
        series("jupyter_gpu_kernel_memory_used_bytes", GIB, kernel_id="k" * 65, user="eve", gpu="0"),
        series("jupyter_gpu_kernel_idle_seconds", "1e400", kernel_id="k-alice-1", user="alice"),
        series("some_other_metric", 1),
    ]
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
        data = prom.console(vector(*good, *bad), "root", "admin")
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-a0", "GPU-a1", "GPU-b0", "GPU-b1"]
    assert [u["name"] for u in data["users"]] == ["alice", "bob"]
    assert data["users"][0]["kernels"][0]["idle_s"] == 7200  # the overflowing idle figure was dropped
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == prom.MAX_LOG_LINES + 1 and all("Prometheus series dropped" in line for line in lines)
    assert f"{len(bad) - prom.MAX_LOG_LINES} more" in lines[-1]


def test_a_few_bad_series_log_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
        prom.console(
            vector(
                *two_nodes()["data"]["result"], series("jupyter_gpu_memory_used_bytes", "NaN", gpu="2", uuid="GPU-nan")
            ),
            "root",
            "admin",
        )
    assert [r.getMessage() for r in caplog.records] == [
        "jupyter-gpu: Prometheus series dropped (value is not a finite number in range): jupyter_gpu_memory_used_bytes"
    ]


def test_history_columns_aligned_by_time_from_the_range_queries() -> None:
    past = prom.history(
        {
            "utilization": matrix("GPU-a0", [(T, "10"), (T + 15, "NaN"), (T + 30, "30")]),
            "memory": matrix("GPU-a0", [(T + 15, "12.34"), (T + 30, "50")]),
        }
    )
    assert past == {"GPU-a0": {"t": [T, T + 15, T + 30], "utilization": [10, None, 30], "memory": [None, 12.3, 50.0]}}
    data = prom.console(two_nodes(), "root", "admin", past)
    assert data["gpus"][0]["history"]["t"] == [T, T + 15, T + 30] and data["gpus"][1]["history"]["t"] == []


def test_a_bad_range_answer_gives_no_history_not_an_error() -> None:
    assert prom.history({"utilization": {"status": "error"}, "memory": matrix("GPU-a0", [(T, "500")])}) == {
        "GPU-a0": {"t": [], "utilization": [], "memory": []}
    }
    assert (
        prom.history(
            {"memory": {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": 3}]}}}
        )
        == {}
    )
    # a timestamp beyond any float (an integer JSON allows) drops its point, not the console
    assert prom.history({"memory": matrix("GPU-a0", [(10**400, "5"), (T, "6")])}) == {
        "GPU-a0": {"t": [T], "utilization": [None], "memory": [6.0]}
    }


# -- the service app in Prometheus mode, against a stand-in Prometheus


async def call(port: int, path: str, token: str) -> tuple[int, Any]:
    try:
        response = await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{port}/services/jupyter-gpu/{path}", headers={"Authorization": f"token {token}"}
        )
    except HTTPClientError as error:
        return error.code, error.response.body if error.response else b""
    return response.code, json.loads(response.body)


async def start_service(prometheus_url: str, token_file: str | None) -> tuple[FakeHub, HubService, int]:
    hub = FakeHub()
    hub.add_user("root-admin", "admin-token", admin=True)
    hub.add_user("alice", "alice-token", scopes=[core.READ_SCOPE])
    hub.add_user("bob", "bob-token")

    def no_nvml() -> Any:
        raise AssertionError("Prometheus mode must not sample local NVML for the console")

    service = service_for(
        hub.url,
        interval_s=0.2,
        linger_s=5,
        take=no_nvml,
        prometheus_url=prometheus_url,
        prometheus_token_file=token_file,
    )
    _, port = listen(service, hub.url)
    return hub, service, port


def test_service_in_prometheus_mode_shows_every_node_with_the_bearer_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("prom-secret\n")
    stand_in = StandInPrometheus(two_nodes())

    async def body() -> None:
        hub, service, port = await start_service(stand_in.url + "/", str(token_file))
        code, data = await call(port, "api/console", "admin-token")
        assert code == 200, data
        assert data["hosts"] == ["node-a", "node-b"] and len(data["gpus"]) == 4
        assert data["gpus"][0]["history"]["utilization"] == [40]
        assert [u["name"] for u in data["users"]] == ["alice", "bob"]
        assert data["users"][1]["kernels"][0]["notebook"] == "bob/secret.ipynb"
        code, data = await call(port, "api/console", "alice-token")
        assert code == 200 and data["users"][1]["kernels"][0]["notebook"] is None
        code, _ = await call(port, "api/console", "bob-token")
        assert code == 403
        assert service.sampler.latest is None  # no local NVML sample was taken
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()
    assert stand_in.requests and all(auth == "Bearer prom-secret" for _, auth in stand_in.requests)
    assert any("jupyter_gpu_kernel_memory_used_bytes" in path for path, _ in stand_in.requests)


def test_the_history_is_built_once_per_history_step_not_per_console_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every console request of a history step shares one parse of the range answers (about 24 ms
    for 64 GPUs, on the event loop): viewers polling the console do not each rebuild it."""
    stand_in = StandInPrometheus(two_nodes())
    builds = []
    real = prom.history
    monkeypatch.setattr(prom, "history", lambda *args, **kwargs: builds.append(1) or real(*args, **kwargs))

    async def body() -> None:
        hub, service, port = await start_service(stand_in.url, None)
        service.history_s = 3600.0  # a 12 s history step: no second range query during this test
        for token in ("admin-token", "alice-token", "admin-token", "alice-token"):
            service.prometheus.answer = None  # a new instant query each time, as a console a second later
            code, data = await call(port, "api/console", token)
            assert code == 200 and data["gpus"][0]["history"]["utilization"] == [40], data
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()
    assert len(builds) == 1
    assert sum(path.startswith("/api/v1/query_range") for path, _ in stand_in.requests) == 2  # both queries once


def test_prometheus_answers_are_parsed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers of up to MAX_BODY_BYTES are parsed on the service's parser thread, as the user
    servers' answers are, never on the loop that serves api/devices to every user server."""
    stand_in = StandInPrometheus(two_nodes())
    parsed_on: list[str] = []

    def loads(raw: Any, **kwargs: Any) -> Any:
        parsed_on.append(threading.current_thread().name)
        return wire.loads(raw, **kwargs)

    monkeypatch.setattr(prometheus_mode, "wire", types.SimpleNamespace(loads=loads))

    async def body() -> None:
        hub, _, port = await start_service(stand_in.url, None)
        code, data = await call(port, "api/console", "admin-token")
        assert code == 200 and len(data["gpus"]) == 4, data
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()
    assert len(parsed_on) == 3 and all(name.startswith("jupyter-gpu-hub-json") for name in parsed_on), parsed_on


def test_unreachable_prometheus_is_the_consoles_error_not_a_failure(tmp_path: Path) -> None:
    async def body() -> None:
        hub, _, port = await start_service("http://127.0.0.1:9", None)
        code, data = await call(port, "api/console", "admin-token")
        assert code == 200
        assert data["error"].startswith("cannot read Prometheus at http://127.0.0.1:9") and data["gpus"] == []
        hub.stop()

    asyncio.run(body())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prometheus-url", "prometheus:9090"], "give the http(s) URL"),
        (["--prometheus-url", "ftp://p:9090"], "give the http(s) URL"),
        (["--prometheus-token-file", "/nonexistent"], "needs --prometheus-url"),
        (["--prometheus-url", "http://p:9090", "--prometheus-token-file", "/nonexistent/token"], "No such file"),
        (["--prometheus-url", "http://p:9090", "--idle-after", "0"], "--idle-after must be positive"),
    ],
)
def test_bad_prometheus_options_are_one_line_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert service_main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_empty_token_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "token").write_text("\n")
    assert service_main(["--prometheus-url", "http://p:9090", "--prometheus-token-file", str(tmp_path / "token")]) == 2
    assert "the file is empty" in capsys.readouterr().err


def test_a_caller_asking_again_logs_each_kind_of_bad_series_once(caplog: pytest.LogCaptureFixture) -> None:
    answer = vector(*two_nodes()["data"]["result"], series("jupyter_gpu_memory_used_bytes", "NaN", gpu="2", uuid="X"))
    logged: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
        for _ in range(3):
            data = prom.console(answer, "root", "admin", logged=logged)
    assert len(caplog.records) == 1 and len(data["gpus"]) == 4


def test_a_failed_history_query_costs_the_history_not_the_console(tmp_path: Path) -> None:
    stand_in = StandInPrometheus(two_nodes())
    original = stand_in.server.RequestHandlerClass.do_GET

    def do_get(handler: Any) -> None:
        if handler.path.startswith("/api/v1/query_range"):
            handler.send_error(503)
        else:
            original(handler)

    stand_in.server.RequestHandlerClass.do_GET = do_get  # type: ignore[method-assign]

    async def body() -> None:
        hub, _, port = await start_service(stand_in.url, None)
        code, data = await call(port, "api/console", "admin-token")
        assert code == 200 and data["error"] is None and len(data["gpus"]) == 4
        assert data["gpus"][0]["history"] == {"t": [], "utilization": [], "memory": []}
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()


def test_an_oversized_answer_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prom, "MAX_BODY_BYTES", 4_000)
    stand_in = StandInPrometheus(two_nodes())  # about 6.7 kB of JSON

    async def body() -> None:
        hub, _, port = await start_service(stand_in.url, None)
        code, data = await call(port, "api/console", "admin-token")
        assert code == 200 and data["error"].startswith("cannot read Prometheus at") and data["gpus"] == []
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()


def test_prometheus_mode_accounts_every_nodes_kernels_idle_by_the_idle_after_rule(tmp_path: Path) -> None:
    """Usage accounting in Prometheus mode: every node's kernels from Prometheus's answer, idle as
    the console flags it (--idle-after, 1 h: alice's kernel, idle 2 h), GPUs keyed by host."""
    import time

    from jupyter_gpu.hub.app import UsageAccountant

    stand_in = StandInPrometheus(two_nodes())

    async def body() -> None:
        hub, service, port = await start_service(stand_in.url + "/", None)
        service.accountant = UsageAccountant(service, str(tmp_path / "usage.sqlite"), interval_s=180)
        now = time.time()
        await service.accountant.account_once(now - 180)
        await service.accountant.account_once(now)  # three minutes
        code, data = await call(port, "api/usage?window=day", "admin-token")
        assert code == 200, data
        rows = {(u["name"], n["notebook"]): n for u in data["users"] for n in u["notebooks"]}
        assert rows[("alice", "alice/train.ipynb")] == {
            "notebook": "alice/train.ipynb",
            "gpu_hours": 0.05,
            "gib_hours": 0.15,
            "busy_hours": 0.0,
            "idle_hours": 0.05,
        }
        assert rows[("bob", "bob/secret.ipynb")]["busy_hours"] == 0.05  # idle 12 s: busy
        assert rows[("bob", "bob/secret.ipynb")]["gib_hours"] == 0.25
        keys = {row[1] for row in service.accountant.store.gpu_history(0)}
        assert keys == {"node-a:GPU-a0", "node-a:GPU-a1", "node-b:GPU-b0", "node-b:GPU-b1"}
        service.close()
        hub.stop()

    try:
        asyncio.run(body())
    finally:
        stand_in.stop()
