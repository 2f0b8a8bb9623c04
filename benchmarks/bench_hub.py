"""The JupyterHub service: NVML calls per second against the number of user servers, and the
console's first paint with 50 users' kernels.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_hub.py [--seconds 5] [--runs 5]

1. NVML calls/s with 1, 2, 5 and 10 user servers polling once per second, counted by the simulated
   library beneath nvidia-ml-py (every reader in this process goes through it, so the count is
   exact): user servers on ``source = <the service>`` against the same servers on ``source =
   "nvml"`` (today's default: one sampler each), in one run.
   With ``--real-hub`` (root only; skipped with the reason otherwise): the same figure across
   processes, on a real JupyterHub 6 (``tests/browser/test_hub_real.py``'s: LocalProcessSpawner,
   the service as root, 1 to 10 user servers as two system users and their named servers, each
   sampling every 0.5 s while a client polls its ``jupyter-gpu/snapshot`` once per second). The
   calls are counted by the simulated library in every process (``JUPYTER_GPU_SIMULATE_CALLS_DIR``)
   and split into the service's and everybody else's. Control first (servers on ``source =
   "nvml"``, the service untouched), then the same numbers of servers on ``source = "hub-service"``.
   Median calls/s over ``--runs`` windows of ``--seconds``.

       PYTHONPATH=. .venv/bin/python benchmarks/bench_hub.py --real-hub [--seconds 6] [--runs 3]

2. Console first paint: headless Chromium (Debian's) opens ``/services/jupyter-gpu/`` with an admin
   token; time from navigation to the table showing all 50 users (2 GPU kernels each, the reports
   their servers push, ``tests/hub_fake.py``). Median over ``--runs`` fresh contexts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("JUPYTER_GPU_SIMULATE", "demo")

from console_page import first_paint  # noqa: E402
from hub_fake import FakeHub, report_of, scenario_of, user_snapshot  # noqa: E402
from hub_service import InThread  # noqa: E402

from jupyter_gpu import simulate  # noqa: E402
from jupyter_gpu.hub.app import HubService  # noqa: E402
from jupyter_gpu.server import GpuService, JupyterGpuServer  # noqa: E402


def start_service(hub: FakeHub, interval_s: float) -> tuple[HubService, str]:
    """The service on its own loop and thread; returns it and its URL."""
    running = InThread(hub.url, cache_max_age=300, interval_s=interval_s, linger_s=3)
    return running.service, running.url


def calls() -> int:
    library = simulate.installed()
    return sum(library.calls.values()) if library else 0


def nvml_phase(source: str, servers: int, seconds: float, service: HubService) -> float:
    config = JupyterGpuServer(source=source, interval_s=1.0, linger_s=5)
    services = [GpuService(config) for _ in range(servers)]
    for service in services:
        if source != "nvml":
            service._nvml_take.token = "server-token"
    for service in services:  # warm-up: first samples (NVML initialisation in this process)
        service.sampler.wait_for_snapshot(timeout=5)
    time.sleep(1.0)
    while source == "nvml" and service.sampler.running:  # the control: the service's sampler stopped
        time.sleep(0.2)
    before, began = calls(), time.monotonic()
    while time.monotonic() - began < seconds:
        for service in services:
            service.sampler.touch()  # a sidebar polling
        time.sleep(0.5)
    rate = (calls() - before) / (time.monotonic() - began)
    for service in services:
        service.sampler.close()
    return rate


def real_hub_calls(seconds: float, runs: int, counts: tuple[int, ...] = (1, 2, 5, 10)) -> None:
    """NVML calls/s across a real hub's processes with N user servers polled (see the docstring)."""
    sys.path.insert(0, str(REPO / "tests" / "browser"))
    import test_hub_real as real  # a test module: its hub, users and helpers

    reason = real.skip_reason()
    if reason:
        print(json.dumps({"real_hub": "skipped", "reason": reason}), flush=True)
        return
    alice, bob = real.PAIR  # the servers of two users; five are created (the test's USERS), three idle
    via_service = [(user, name) for name in ("", "s1", "s2", "s3", "s4") for user in (alice, bob)]
    own = [(user, f"nvml-{i}") for i in range(1, 6) for user in (alice, bob)]  # pre_spawn_hook: source=nvml
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    with real.real_hub(artifacts) as hub:
        real.start_servers(hub, tuple(via_service[: max(counts)] + own[: max(counts)]))
        service = real.service_pid(hub)
        results: dict[str, dict[int, dict[str, float]]] = {"source=nvml": {}, "source=hub-service": {}}
        for mode, servers in (("source=nvml", own), ("source=hub-service", via_service)):
            for count in counts:
                totals, by_service = [], []
                for _ in range(runs):
                    # the window starts once each own sampler (source=nvml) or the service reads NVML
                    samplers = count if mode == "source=nvml" else 1
                    rate, window = real.calls_while_polled(hub, tuple(servers[:count]), seconds, samplers=samplers)
                    totals.append(rate)
                    by_service.append(rate * window.get(service, 0) / max(1, sum(window.values())))
                results[mode][count] = {
                    "calls_per_s": round(statistics.median(totals), 1),
                    "of_which_service": round(statistics.median(by_service), 1),
                }
                print(json.dumps({"real_hub": mode, "servers": count, **results[mode][count]}), flush=True)
            if mode == "source=nvml":  # a polled server samples on for linger_s: stop them first
                for user, name in own[: max(counts)]:
                    hub.api("DELETE", f"/hub/api/users/{user}/servers/{name}")
                real.wait_until(
                    lambda: (
                        not any(
                            name.startswith("nvml-") and server.get("ready")
                            for user in real.USERS
                            for name, server in (
                                hub.api("GET", f"/hub/api/users/{user}")[1].get("servers") or {}
                            ).items()
                        )
                    ),
                    60,
                    "the source=nvml servers to stop",
                    interval_s=0.5,
                )
                time.sleep(2.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--real-hub", action="store_true", help="NVML calls/s across the processes of a real JupyterHub (root only)"
    )
    args = parser.parse_args()
    if args.real_hub:
        real_hub_calls(args.seconds, args.runs)
        return
    hub = FakeHub()
    hub.add_user("server", "server-token")
    hub.add_user("admin", "admin-token", admin=True)
    service, url = start_service(hub, interval_s=1.0)
    results: dict[str, Any] = {"nvml_calls_per_s": {}}
    for servers in (1, 2, 5, 10):
        via_service = nvml_phase(url, servers, args.seconds, service)
        direct = nvml_phase("nvml", servers, args.seconds, service)
        results["nvml_calls_per_s"][servers] = {
            "source=service": round(via_service, 1),
            "source=nvml": round(direct, 1),
        }
        print(json.dumps({"servers": servers, **results["nvml_calls_per_s"][servers]}), flush=True)
    service.board.interval_s = 3600.0  # the reports below stay fresh through the runs
    for i in range(50):
        hub.snapshots[f"user{i:02d}"] = user_snapshot(f"user{i:02d}", 2, gpu=i % 4)
        # what each user's server pushes to the service (issue 27: the service asks nobody)
        service.board.receive(f"user{i:02d}", report_of(hub.snapshots[f"user{i:02d}"]), time.time())
    # The service attributes memory by NVML's PID owner: its simulated GPUs hold those kernels.
    scenario = Path(tempfile.mkdtemp()) / "fifty-users.json"
    simulate.write_scenario(scenario, scenario_of(hub.snapshots))
    os.environ[simulate.ENV_VAR] = str(scenario)
    paints = first_paint(url, args.runs)
    results["first_paint_ms"] = {"median": round(statistics.median(paints), 1), "runs": [round(t, 1) for t in paints]}
    print(json.dumps(results["first_paint_ms"]), flush=True)
    service.sampler.close()


if __name__ == "__main__":
    main()
