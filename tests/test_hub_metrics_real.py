"""Integration: one source of per-GPU series per host, as a real Prometheus sees it.

The jupyter-gpu hub service (``python -m jupyter_gpu.hub``, run as the hub runs it, against the
stand-in hub API of ``hub_fake.py``) and two real Jupyter servers whose GPU data comes from it
(``c.JupyterGpuServer.source``) on one simulated host; a real Prometheus (Debian's) scrapes the
service alone, as ``deploy/prometheus/prometheus.yml`` does (issue 27: no credential to a user
server). Each GPU's series come from the service (one ``jupyter_gpu_gpu_info`` per UUID), and so do
the kernels', from the reports the servers push with their own tokens, under the pushing user; the
documented join (``docs/prometheus.md``) must put user and host together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hub_fake import SERVICE_TOKEN, FakeHub
from live_processes import PROMETHEUS, LiveServer, free_port, get_json, start_prometheus, stop, wait_for
from support import ScenarioFile

from jupyter_gpu import simulate

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install prometheus)"
)
PREFIX = "/services/jupyter-gpu/"
REPO = Path(__file__).resolve().parent.parent
JOIN = (
    "sum by (user, host) (jupyter_gpu_kernel_memory_used_bytes"
    " * on (UUID) group_left (host) max by (UUID, host) (jupyter_gpu_gpu_info))"
)


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


class Host:
    """The stand-in hub, the service and two users' servers on one simulated host."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.scenario = ScenarioFile(base / "scenario.json", simulate.plausible_gpus(2))
        self.hub = FakeHub()
        self.hub.add_user("prometheus", "prometheus-token")  # holds access:services!service=jupyter-gpu
        self.processes: list[subprocess.Popen[bytes]] = []
        env = {**os.environ, simulate.ENV_VAR: str(self.scenario.path)}
        self.service_port = free_port()
        self.service_url = f"http://127.0.0.1:{self.service_port}{PREFIX}"
        service_env = {
            **env,
            "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{self.service_port}",
            "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
            "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
            "JUPYTERHUB_API_URL": self.hub.url + "/hub/api",
            "JUPYTERHUB_SERVICE_NAME": "jupyter-gpu",
            "JUPYTERHUB_OAUTH_ACCESS_SCOPES": json.dumps(["access:services!service=jupyter-gpu"]),
        }
        self.service_log = base / "service.log"
        self.service = _spawn(
            [
                sys.executable,
                "-m",
                "jupyter_gpu.hub",
                "--proxy-url",
                self.hub.url,
                "--interval",
                "0.5",
                "--host-label",
                "sim-host",
                "--usage-db",  # the default is a file in the working directory: here, the checkout
                str(base / "usage.sqlite"),
            ],
            service_env,
            self.service_log,
        )
        self.processes.append(self.service)
        self.servers: dict[str, LiveServer] = {}
        for user in ("alice", "bob"):  # both start at once, then both are waited for
            self.hub.add_user(user, f"hub-token-of-{user}")
            self.servers[user] = LiveServer(
                base / user,
                user,
                f"token-of-{user}",
                {"interval_s": 0.5, "linger_s": 30, "source": self.service_url},
                env={**env, "JUPYTERHUB_API_TOKEN": f"hub-token-of-{user}"},  # what the hub gives a server
                wait_s=None,
            )
            self.processes.append(self.servers[user].process)
        for server in self.servers.values():
            server.wait(90)

    def start_kernel_on(self, user: str, gpu: int, mib: int) -> None:
        """A kernel of ``user``'s server holding ``mib`` on ``gpu``, owned by ``user``'s account as
        NVML shows the service (what the service believes a report about)."""
        pid = self.servers[user].start_kernel()
        self.scenario.update(
            lambda d: d["gpus"][gpu].setdefault("processes", []).append({"pid": pid, "memory_mib": mib, "user": user})
        )

    def snapshot(self, user: str) -> dict[str, Any]:
        server = self.servers[user]
        return get_json(server.url + "jupyter-gpu/snapshot", server.token)

    def stop(self) -> None:
        for process in self.processes:
            stop(process)
        self.hub.stop()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    running = Host(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_each_gpu_is_exported_once_per_host_and_kernels_join_it_by_uuid(tmp_path: Path, host: Host) -> None:
    # Given alice's kernel on GPU 0 and bob's on GPU 1, both servers taking GPU data from the service
    host.start_kernel_on("alice", 0, 1024)
    host.start_kernel_on("bob", 1, 2048)
    # and a Prometheus scraping the service alone every second, as the shipped config does
    prometheus_token = tmp_path / "prometheus.token"
    prometheus_token.write_text("prometheus-token")
    [shipped] = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    jobs: list[dict[str, Any]] = [
        {
            "job_name": shipped["job_name"],
            "metrics_path": shipped["metrics_path"],
            "scrape_interval": "1s",
            "authorization": {"type": "Bearer", "credentials_file": str(prometheus_token)},
            "static_configs": [{"targets": [f"127.0.0.1:{host.service_port}"]}],
        }
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    prometheus, url, log = start_prometheus(config, tmp_path)
    try:

        def series(query: str) -> list[dict[str, Any]]:
            return get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query}))["data"]["result"]

        # When every target has been scraped and both kernels' series are in
        wait_for(
            "the service's target up",
            lambda: [s["value"][1] for s in series("up")] == ["1"],
            90,
            prometheus,
            log,
        )
        kernels = wait_for(
            "both kernels' series",
            lambda: (lambda r: r if len(r) == 2 else None)(series("jupyter_gpu_kernel_memory_used_bytes > 0")),
            90,
            prometheus,
            log,
        )
        # Then the servers took their GPUs from the service (no fallback) ...
        for user in host.servers:
            assert host.snapshot(user)["warnings"] == [], user
        # ... each GPU's series come from the service only, once per UUID, with the host's label
        uuids = {gpu["uuid"] for gpu in host.snapshot("alice")["gpus"]}
        info = series("jupyter_gpu_gpu_info")
        assert sorted(s["metric"]["UUID"] for s in info) == sorted(uuids)
        assert {(s["metric"]["job"], s["metric"]["host"]) for s in info} == {("jupyter-gpu-service", "sim-host")}
        for name in ("jupyter_gpu_memory_used_bytes", "jupyter_gpu_memory_total_bytes", "jupyter_gpu_error"):
            found = series(name)
            assert len(found) == 2 and {s["metric"]["job"] for s in found} == {"jupyter-gpu-service"}, (name, found)
        # ... the kernels' series from the service too (the servers' reports), by user and UUID
        assert {s["metric"]["job"] for s in kernels} == {"jupyter-gpu-service"}
        assert {(s["metric"]["user"], s["metric"]["UUID"], float(s["value"][1])) for s in kernels} == {
            ("alice", next(g["uuid"] for g in host.snapshot("alice")["gpus"] if g["index"] == 0), 1024 * 2**20),
            ("bob", next(g["uuid"] for g in host.snapshot("alice")["gpus"] if g["index"] == 1), 2048 * 2**20),
        }
        # ... and the documented join puts user and host together
        joined = series(JOIN)
        assert {(s["metric"]["user"], s["metric"]["host"]) for s in joined} == {
            ("alice", "sim-host"),
            ("bob", "sim-host"),
        }
    finally:
        stop(prometheus)
