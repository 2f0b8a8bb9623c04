"""deploy/grafana/: the usage dashboard is a Grafana dashboard model whose every PromQL expression a
real Prometheus (Debian's) answers, with data, from the shipped usage rules.

The Prometheus scrapes a stand-in exporter on loopback every second: the hub service's per-GPU
families (``core.gauges``, the real code, from a snapshot of two GPUs) and two users' kernel series
with the labels ``server/metrics.py`` gives them (alice: idle with 30 GiB on GPU 0; bob: busy with
24 GiB on GPU 1). The shipped rule files are loaded with the usage group's interval at 1 s instead
of 1 min (so the test waits seconds, not minutes); Grafana's ``$__range`` becomes ``5m`` and
``$user`` ``.*`` (its "All")."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_processes import PROMETHEUS, get_json, start_prometheus, stop, wait_for
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from jupyter_gpu.core import gauges
from jupyter_gpu.core.snapshot import GpuInfo, Snapshot

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "jupyter_gpu_usage.json"
RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "rules"
GIB = 1 << 30


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel's targets."""
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_is_a_grafana_model_on_a_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "jupyter-gpu-usage" and isinstance(dashboard["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["user"]["includeAll"] is True and variables["user"]["allValue"] == ".*"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) == 6
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["targets"], panel["title"]
        assert [target["refId"] for target in panel["targets"]] == [chr(65 + i) for i in range(len(panel["targets"]))]
    recorded = {
        rule["record"]
        for path in RULES.glob("*.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    for title, expr in expressions(dashboard):  # every recorded series a panel reads is shipped
        for name in ("user_notebook:jupyter_gpu_gpus_held:count", "user_notebook:jupyter_gpu_gpus_held_idle:count"):
            if name in expr:
                assert name in recorded, title


class _Exporter(Collector):
    def collect(self) -> list[Any]:
        snapshot = Snapshot(
            True,
            1.0,
            (
                GpuInfo(0, "GPU-a", "NVIDIA A100", memory_total=80 * GIB, memory_used=31 * GIB, utilization=5),
                GpuInfo(1, "GPU-b", "NVIDIA A100", memory_total=80 * GIB, memory_used=25 * GIB, utilization=90),
            ),
        )
        return gauges.device_families(gauges.gpu_rows(snapshot), gauges.slice_rows(snapshot), "node-1")

    def describe(self) -> list[Any]:
        return []


KERNELS = """\
# TYPE jupyter_gpu_kernel_memory_used_bytes gauge
jupyter_gpu_kernel_memory_used_bytes{kernel_id="k1",notebook="t.ipynb",user="alice",gpu="0",UUID="GPU-a"} 32212254720
jupyter_gpu_kernel_memory_used_bytes{kernel_id="k2",notebook="a.ipynb",user="bob",gpu="1",UUID="GPU-b"} 25769803776
# TYPE jupyter_gpu_kernel_idle_seconds gauge
jupyter_gpu_kernel_idle_seconds{kernel_id="k1",notebook="t.ipynb",user="alice"} 18000
jupyter_gpu_kernel_idle_seconds{kernel_id="k2",notebook="a.ipynb",user="bob"} 0
"""


@pytest.fixture
def exporter() -> Iterator[str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Exporter())

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry) + KERNELS.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install prometheus)")
def test_every_dashboard_query_answers_with_data_from_a_real_prometheus(tmp_path: Path, exporter: str) -> None:
    rule_files = []
    for path in sorted(RULES.glob("*.yml")):
        copy = tmp_path / path.name
        copy.write_text(path.read_text().replace("interval: 1m", "interval: 1s"))
        rule_files.append(str(copy))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": rule_files,
                "scrape_configs": [{"job_name": "stand-in", "static_configs": [{"targets": [exporter]}]}],
            }
        )
    )
    process, url, log = start_prometheus(config, tmp_path)
    try:

        def query(expr: str) -> Any:
            return get_json(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")

        wait_for(
            "the usage rules' first samples",
            lambda: (
                len(query("user_notebook:jupyter_gpu_gpus_held_idle:count")["data"]["result"]) == 1
                and len(query("user_notebook:jupyter_gpu_gpus_held:count")["data"]["result"]) == 2
            ),
            60,
            process,
            log,
        )
        dashboard = json.loads(DASHBOARD.read_text())
        for title, expr in expressions(dashboard):
            answer = query(expr.replace("$__range", "5m").replace("$user", ".*"))
            assert answer["status"] == "success", (title, answer)
            assert answer["data"]["result"], (title, expr)
        user = next(v for v in dashboard["templating"]["list"] if v["name"] == "user")
        match = user["definition"].removeprefix("label_values(").removesuffix(", user)")
        users = get_json(f"{url}/api/v1/label/user/values?{urllib.parse.urlencode({'match[]': match})}")
        assert users == {"status": "success", "data": ["alice", "bob"]}
        busy = query(
            next(e for t, e in expressions(dashboard) if t.startswith("Busy"))
            .replace("$__range", "5m")
            .replace("$user", ".*")
        )
        assert {sample["metric"]["user"] for sample in busy["data"]["result"]} == {"alice", "bob"}
        idle = query(expressions(dashboard)[3][1].replace("$__range", "5m").replace("$user", ".*"))
        assert {sample["metric"]["user"] for sample in idle["data"]["result"]} == {"alice"}  # bob is busy
    finally:
        stop(process)
