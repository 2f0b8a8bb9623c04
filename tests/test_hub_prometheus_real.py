"""Integration: a real Prometheus (Debian's ``prometheus``, started here on loopback with a temporary
config and storage, stopped at the end) scrapes two real Jupyter servers, each on its own simulated
node; the hub service in Prometheus mode (``--prometheus-url``) shows both servers' kernels.

The servers are ``jupyter server`` subprocesses with the jupyter_gpu extension (as in
``test_deploy_prometheus.py``): pytest-jupyter runs one server per test process. The scrape config
labels each target as the shipped Kubernetes one does (``jupyterhub_user``, ``host``), so the test
needs no server-side ``user`` label; when the servers export one, it must agree. (Each server is
scraped with its own token here; the shipped Kubernetes config sends none, docs/prometheus.md.)"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hub_fake import FakeHub
from hub_service import listen, service_for
from live_processes import PROMETHEUS, LiveServer, get_json, start_prometheus, stop, wait_for
from support import ScenarioFile
from tornado.httpclient import AsyncHTTPClient

from jupyter_gpu import simulate
from jupyter_gpu.hub import core
from jupyter_gpu.hub import prometheus as prom

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install prometheus)"
)
MIB = 2**20


class Server(LiveServer):
    """A real ``jupyter server`` (jupyter_gpu enabled) for one hub user, on its own simulated node."""

    def __init__(self, base: Path, user: str, node: int) -> None:
        base.mkdir(parents=True, exist_ok=True)
        gpus = simulate.plausible_gpus(2)
        for index, gpu in enumerate(gpus["gpus"]):  # every node's GPUs have their own UUIDs
            gpu["uuid"] = f"GPU-{node:08d}-0000-4000-8000-{index:012d}"
        self.scenario = ScenarioFile(base / "scenario.json", gpus)
        super().__init__(
            base,
            user,
            f"token-of-{user}",
            {"interval_s": 0.5, "linger_s": 30},
            env={simulate.ENV_VAR: str(self.scenario.path)},
        )

    def start_kernel_on(self, gpu: int, mib: int) -> None:
        """Start a notebook session whose kernel holds ``mib`` on ``gpu`` of this node."""
        pid = self.start_kernel()
        self.scenario.update(
            lambda d: d["gpus"][gpu].setdefault("processes", []).append({"pid": pid, "memory_mib": mib})
        )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for node, user in enumerate(("alice", "bob"), start=1):
            started.append(Server(tmp_path / user, user, node))
        yield started
    finally:
        for server in started:
            stop(server.process)


@pytest.fixture
def prometheus(tmp_path: Path, servers: list[Server]) -> Iterator[str]:
    """A real Prometheus scraping both servers every second (each server's own token from a file,
    target labels as the shipped Kubernetes config gives them); its URL."""
    jobs = []
    for node, server in enumerate(servers, start=1):
        token_file = tmp_path / f"{server.user}.token"
        token_file.write_text(server.token)
        jobs.append(
            {
                "job_name": f"jupyter-{server.user}",
                "scrape_interval": "1s",
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{server.port}"],
                        "labels": {"jupyterhub_user": server.user, "host": f"node-{node}"},
                    }
                ],
            }
        )
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    process, url, log = start_prometheus(config, tmp_path)
    try:
        wait_for(
            "Prometheus ready",
            lambda: urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200,
            60,
            process,
            log,
        )
        yield url
    finally:
        stop(process)


def test_service_in_prometheus_mode_shows_both_servers_kernels(servers: list[Server], prometheus: str) -> None:
    # Given a kernel of alice on node-1's GPU 0 and one of bob on node-2's GPU 1
    servers[0].start_kernel_on(0, 1024)
    servers[1].start_kernel_on(1, 2048)
    # When Prometheus has scraped both (its own API says so)
    query = prometheus + "/api/v1/query?" + urllib.parse.urlencode({"query": prom.INSTANT_QUERY})

    def both_kernels() -> Any:
        answer = get_json(query)
        kernels = [
            s
            for s in answer["data"]["result"]
            if s["metric"]["__name__"] == "jupyter_gpu_kernel_memory_used_bytes" and s["value"][1] != "0"
        ]
        return answer if len(kernels) == 2 else None

    answer = wait_for("both servers' kernel series in Prometheus", both_kernels, 90)
    for found in answer["data"]["result"]:
        if "user" in found["metric"]:  # servers exporting their user must agree with the hub's name
            assert found["metric"]["user"] == found["metric"]["jupyterhub_user"]

    # Then the pure reader shows both nodes and both users' kernels
    data = prom.console(answer, "root-admin", "admin")
    assert data["error"] is None and data["hosts"] == ["node-1", "node-2"]
    assert [(g["host"], g["index"]) for g in data["gpus"]] == [
        ("node-1", 0),
        ("node-1", 1),
        ("node-2", 0),
        ("node-2", 1),
    ]
    by_user = {u["name"]: u for u in data["users"]}
    assert by_user["alice"]["memory_by_gpu"] == {"node-1:0": 1024 * MIB}
    assert by_user["bob"]["memory_by_gpu"] == {"node-2:1": 2048 * MIB}
    assert by_user["alice"]["kernels"][0]["notebook"] == "alice.ipynb"

    # and so does the service app in Prometheus mode, for an admin and (privacy-filtered) for alice
    async def console(token: str) -> dict[str, Any]:
        hub = FakeHub()
        hub.add_user("root-admin", "admin-token", admin=True)
        hub.add_user("alice", "alice-token", scopes=[core.READ_SCOPE])
        service = service_for(hub.url, interval_s=1, prometheus_url=prometheus)
        server, port = listen(service, hub.url)
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}/services/jupyter-gpu/api/console",
                headers={"Authorization": f"token {token}"},
            )
            return json.loads(response.body)
        finally:
            server.stop()
            hub.stop()

    admin = asyncio.run(console("admin-token"))
    assert admin["source"] == "prometheus" and admin["hosts"] == ["node-1", "node-2"]
    assert {u["name"]: [k["notebook"] for k in u["kernels"]] for u in admin["users"]} == {
        "alice": ["alice.ipynb"],
        "bob": ["bob.ipynb"],
    }
    assert all(len(g["history"]["t"]) >= 1 for g in admin["gpus"])  # the range queries answered too
    reader = asyncio.run(console("alice-token"))
    assert {u["name"]: [k["notebook"] for k in u["kernels"]] for u in reader["users"]} == {
        "alice": ["alice.ipynb"],
        "bob": [None],
    }
