"""deploy/prometheus/: the shipped scrape configs and rules pass ``promtool``, and a real Prometheus
(Debian's binary, on loopback) scrapes two real Jupyter servers on simulated GPUs and returns both
servers' kernel series with their ``user`` labels.

promtool and prometheus come with Debian's ``prometheus`` package (``scripts/test.sh`` installs it
when run as root); without them these tests are skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_processes import free_port, get_json, kernel_child, stop, wait_for

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "prometheus"
TOKEN_PATH = "/etc/prometheus/jupyterhub-token"

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus; "
                             "scripts/test.sh installs it when run as root)")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install prometheus; "
                               "scripts/test.sh installs it when run as root)")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def deploy_copy(tmp_path: Path) -> Path:
    """deploy/prometheus with the token path pointing at a real file (promtool checks it exists)."""
    target = tmp_path / "prometheus"
    shutil.copytree(DEPLOY, target)
    token = tmp_path / "jupyterhub-token"
    token.write_text("not-a-real-token\n")
    for config in target.rglob("*.yml"):
        config.write_text(config.read_text().replace(TOKEN_PATH, str(token)))
    return target


def test_every_shipped_file_is_yaml_and_points_at_the_documented_token_file() -> None:
    for path in DEPLOY.rglob("*.yml"):
        yaml.safe_load(path.read_text())  # raises on a syntax error
    for name in ("prometheus.yml", "kubernetes/prometheus.yml"):
        config = yaml.safe_load((DEPLOY / name).read_text())
        for job in config["scrape_configs"]:
            assert job["authorization"] == {"type": "Bearer", "credentials_file": TOKEN_PATH}, job["job_name"]


@needs_promtool
def test_promtool_accepts_the_scrape_config_and_its_rule_files(deploy_copy: Path) -> None:
    result = promtool("check", "config", "prometheus.yml", cwd=deploy_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr


@needs_promtool
def test_promtool_accepts_the_kubernetes_scrape_config(deploy_copy: Path) -> None:
    result = promtool("check", "config", "kubernetes/prometheus.yml", cwd=deploy_copy)
    output = result.stdout + result.stderr
    if "field kubernetes_sd_configs not found" in output:
        # Debian builds Prometheus without Kubernetes discovery; the syntax of the rest was read.
        pytest.skip("this promtool was built without Kubernetes service discovery (Debian's is)")
    assert result.returncode == 0, output


@needs_promtool
def test_promtool_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", "tests/jupyter_gpu.rules_test.yml", cwd=DEPLOY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# -- integration: a real Prometheus scrapes two real Jupyter servers


class Server:
    """A real ``jupyter server`` (jupyter_gpu enabled) for one simulated hub user."""

    def __init__(self, base: Path, user: str, token: str) -> None:
        self.user = user
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        for folder in ("root", "runtime", "config"):
            (base / folder).mkdir(parents=True, exist_ok=True)
        (base / "config" / "jupyter_server_config.json").write_text(json.dumps({
            "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
            "JupyterGpuServer": {"interval_s": 0.5, "linger_s": 30, "host_label": "sim-host"},
        }))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(base / "config"),
               "JUPYTER_RUNTIME_DIR": str(base / "runtime"), "JUPYTERHUB_USER": user}
        self.log = base / "server.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
                 f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                 f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={base / 'root'}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(f"{user}'s server", lambda: get_json(self.url + "api/status", token), 60, self.process, self.log)

    def start_kernel(self) -> int:
        """Start a notebook session; return the kernel's PID (the server's child process)."""
        data = json.dumps({"path": f"{self.user}.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
        request = urllib.request.Request(self.url + "api/sessions", data=data.encode(), method="POST",
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=60):
            pass
        return kernel_child(self.process.pid)


@pytest.fixture
def servers(tmp_path: Path, scenario: Any) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for user in ("alice", "bob"):
            started.append(Server(tmp_path / user, user, f"token-of-{user}"))
        yield started
    finally:
        for server in started:
            stop(server.process)


@needs_prometheus
def test_a_real_prometheus_scrapes_two_servers_kernel_series_with_their_users(tmp_path, scenario, servers):
    # Given two users' servers whose kernels hold memory on the two simulated GPUs
    for gpu, server in enumerate(servers):
        pid = server.start_kernel()
        scenario.update(lambda data, gpu=gpu, pid=pid: data["gpus"][gpu].setdefault("processes", []).append(
            {"pid": pid, "memory_mib": 1024 * (gpu + 1)}))
    # and a Prometheus scraping both every second with a bearer token from a file (as shipped)
    jobs = []
    for server in servers:
        token_file = tmp_path / f"{server.user}.token"
        token_file.write_text(server.token)
        jobs.append({"job_name": f"jupyter-{server.user}", "scrape_interval": "1s",
                     "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                     "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]})
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "w") as out:
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        api = f"http://127.0.0.1:{port}/api/v1/query?query="

        def series(query: str) -> list[dict[str, Any]]:
            return get_json(api + urllib.parse.quote(query))["data"]["result"]

        # When Prometheus has scraped them, its API returns both servers' kernel series with users
        found = wait_for("both kernels in Prometheus",
                         lambda: (lambda r: r if len(r) == 2 else None)(series("jupyter_gpu_kernel_memory_used_bytes")),
                         60, prometheus, log)
        by_user = {s["metric"]["user"]: s for s in found}
        assert sorted(by_user) == ["alice", "bob"]
        uuids = [gpu["uuid"] for gpu in get_json(servers[0].url + "jupyter-gpu/snapshot", servers[0].token)["gpus"]]
        assert by_user["alice"]["metric"]["UUID"] == uuids[0] and float(by_user["alice"]["value"][1]) == 1024 * 2**20
        assert by_user["bob"]["metric"]["UUID"] == uuids[1] and float(by_user["bob"]["value"][1]) == 2048 * 2**20
        assert by_user["alice"]["metric"]["notebook"] == "alice.ipynb"
        # and the GPU info series joins by UUID, with the host
        info = series('jupyter_gpu_gpu_info{job="jupyter-alice"}')
        assert {s["metric"]["UUID"] for s in info} == set(uuids) and {s["metric"]["host"] for s in info} == {"sim-host"}
        joined = series("sum by (user, host) (jupyter_gpu_kernel_memory_used_bytes * on (UUID) "
                        "group_left (host) max by (UUID, host) (jupyter_gpu_gpu_info))")  # docs/prometheus.md
        assert {(s["metric"]["user"], s["metric"]["host"]) for s in joined} == {("alice", "sim-host"),
                                                                               ("bob", "sim-host")}
    finally:
        stop(prometheus)
