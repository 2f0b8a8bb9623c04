"""A stand-in Prometheus for the hub service's Prometheus mode: answers built as Prometheus 2.x
sends them (instant vectors and range matrices of the user servers' ``jupyter_gpu_*`` series), and a
loopback HTTP server answering ``/api/v1/query`` and ``/api/v1/query_range`` with them.
Importable as ``prometheus_fake`` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

T = 1_763_733_000.0
GIB = 2**30


def series(metric: str, value: Any, /, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": metric, **labels}, "value": [T, value if isinstance(value, str) else str(value)]}


def vector(*result: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(result)}}


def node(host: str, instance: str, uuids: list[str]) -> list[dict[str, Any]]:
    """What one user server of ``host`` exports per GPU (every user server of a host repeats it)."""
    out = []
    for index, uuid in enumerate(uuids):
        gpu = {"gpu": str(index), "uuid": uuid, "name": "NVIDIA A100-SXM4-80GB", "instance": instance}
        out += [
            series(
                "jupyter_gpu_gpu_info", 1, gpu=str(index), UUID=uuid, name=gpu["name"], host=host, instance=instance
            ),
            series("jupyter_gpu_memory_used_bytes", (index + 1) * GIB, **gpu),
            series("jupyter_gpu_memory_total_bytes", 80 * GIB, **gpu),
            series("jupyter_gpu_utilization_percent", 10 * (index + 1), **gpu),
            series("jupyter_gpu_error", 0, **gpu),
        ]
    return out


def kernel(
    user: str, kernel_id: str, notebook: str, gpu: str, uuid: str, memory: int, idle_s: float | None, instance: str
) -> list[dict[str, Any]]:
    labels = {"kernel_id": kernel_id, "notebook": notebook, "user": user, "instance": instance}
    out = [series("jupyter_gpu_kernel_memory_used_bytes", memory, gpu=gpu, UUID=uuid, **labels)]
    if idle_s is not None:
        out.append(series("jupyter_gpu_kernel_idle_seconds", idle_s, **labels))
    return out


def two_nodes() -> dict[str, Any]:
    """Two nodes of two GPUs; alice on node-a (two servers' scrapes repeat node-a's GPUs), bob on node-b."""
    return vector(
        *node("node-a", "10.0.0.1:8888", ["GPU-a0", "GPU-a1"]),
        *node("node-a", "10.0.0.2:8888", ["GPU-a0", "GPU-a1"]),
        *node("node-b", "10.0.1.1:8888", ["GPU-b0", "GPU-b1"]),
        *kernel("alice", "k-alice-1", "alice/train.ipynb", "1", "GPU-a1", 3 * GIB, 7200, "10.0.0.1:8888"),
        *kernel("bob", "k-bob-1", "bob/secret.ipynb", "0", "GPU-b0", 5 * GIB, 12, "10.0.1.1:8888"),
        series(
            "jupyter_gpu_kernel_cull_in_seconds",
            600,
            kernel_id="k-alice-1",
            notebook="alice/train.ipynb",
            user="alice",
            instance="10.0.0.1:8888",
        ),
    )


def matrix(uuid: str, points: list[tuple[float, str]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"uuid": uuid}, "values": [[t, v] for t, v in points]}]},
    }


class StandInPrometheus:
    """A loopback HTTP server answering /api/v1/query and /api/v1/query_range from fixed JSON."""

    def __init__(self, instant: Any) -> None:
        self.instant = instant
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Authorization")))
                body = matrix("GPU-a0", [(T, "40")]) if self.path.startswith("/api/v1/query_range") else outer.instant
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
