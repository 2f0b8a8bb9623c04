"""Usage accounting: the 30-day query, the SQLite file's size, and the console's first paint at 200
users x 2 kernels.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_accounting.py [--runs 7] [--skip-paint] [--days 30]

(``--days 1``: a quick file for the first paint alone; the size and query figures are for 30.)

1. Size: 30 days of 8 GPUs and 200 users x 2 notebooks at the default interval (60 s), written
   through the real store (:class:`jupyter_gpu.hub.store.UsageStore`: one transaction per interval,
   every notebook holding a GPU in every interval, the prune once an hour as the service does):
   43,200 intervals. The file's size on disk after the last interval (WAL checkpointed by the prune).
2. Query: ``api/usage?window=30d`` for an admin on that file: the store's sums plus
   :func:`jupyter_gpu.hub.accounting.summary` (the JSON's dict), median over ``--runs``.
3. Console first paint: headless Chromium (Debian's) opens ``/services/jupyter-gpu/`` with an admin
   token; time from navigation until both the users table (50 of 200 users a page, each with two
   GPU kernels, answers of the stand-in hub API and user servers, ``tests/hub_fake.py``) and the
   usage table are drawn. Median over ``--runs`` fresh contexts (the first, which also starts the
   service's sampler and HTTP clients, left out). The stand-in hub and its 200 user servers run in a
   process of their own (as real user servers do), so their Python does not share the service's
   interpreter lock; ``--hub-in-process`` puts them in the service's process, as
   ``bench_hub.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from console_page import USAGE_ROWS, USERS_ROWS, first_paint  # noqa: E402
from hub_fake import FakeHub, report_of, scenario_of, user_snapshot  # noqa: E402

from jupyter_gpu import simulate  # noqa: E402
from jupyter_gpu.hub.accounting import Usage, interval_usage, summary  # noqa: E402
from jupyter_gpu.hub.store import UsageStore  # noqa: E402

DAYS, USERS, NOTEBOOKS, GPUS, INTERVAL_S = 30, 200, 2, 8, 60


def console_of(now: float) -> dict[str, Any]:
    """The console's admin view of 200 users x 2 kernels, each on one of 8 GPUs (as interval_usage reads it)."""
    users = []
    for n in range(USERS):
        memory = (4 + n % 8) << 30
        kernels = [
            {
                "kernel_id": f"user{n:03d}-kernel-{k}",
                "notebook": f"projects/user{n:03d}/experiment-{k}.ipynb",
                "idle": (n + k + int(now // 3600)) % 3 == 0,
                "gpu_memory": memory,
                "memory_by_gpu": {str((n + k) % GPUS): memory},
            }
            for k in range(NOTEBOOKS)
        ]
        by_gpu: dict[str, int] = {}
        for kernel in kernels:
            for index, used in kernel["memory_by_gpu"].items():
                by_gpu[index] = by_gpu.get(index, 0) + used
        users.append({"name": f"user{n:03d}", "memory_by_gpu": by_gpu, "kernels": kernels})
    return {"users": users}


def fill(path: Path, days: int = DAYS) -> float:
    store = UsageStore(path)
    end = time.time()
    start = end - days * 86_400
    began = time.perf_counter()
    t = start
    hour_data: tuple[int, list[Usage]] | None = None
    while t < end:
        hour = int(t // 3600)
        if hour_data is None or hour_data[0] != hour:  # the idle flags change per hour here
            hour_data = (hour, interval_usage(console_of(t), INTERVAL_S))
        gpus = [
            {"uuid": f"GPU-{i}", "index": i, "name": "NVIDIA A100-SXM4-80GB", "utilization": 50.0, "memory": 40.0}
            for i in range(GPUS)
        ]
        store.record(t, hour_data[1], gpus)
        t += INTERVAL_S
    store.prune(end)
    store.close()
    return time.perf_counter() - began


def query_ms(path: Path, runs: int) -> list[float]:
    store = UsageStore(path)
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        now = time.time()
        answer = summary(store.usage(now - DAYS * 86_400, now), "30d", now - DAYS * 86_400, now, "admin", True)
        times.append((time.perf_counter() - began) * 1000)
    assert len(answer["users"]) == USERS and sum(len(u["notebooks"]) for u in answer["users"]) == USERS * NOTEBOOKS
    store.close()
    return times


def serve_crowd(folder: str) -> None:
    """The stand-in hub with the benchmark's 200 users (and the simulated GPUs holding their
    kernels' processes, written to ``folder``/gpus.json) until killed; prints its URL."""
    hub = crowd(Path(folder))
    print(hub.url, flush=True)
    threading.Event().wait()


def crowd(folder: Path) -> FakeHub:
    hub = FakeHub()
    hub.add_user("admin", "admin-token", admin=True)
    for n in range(USERS):
        name = f"user{n:03d}"
        hub.add_user(name, f"{name}-token")
        hub.snapshots[name] = user_snapshot(name, NOTEBOOKS, gpu=n % GPUS, mib=512 + n)
    simulate.write_scenario(folder / "gpus.json", scenario_of(hub.snapshots, gpus=GPUS))
    return hub


def start_service(hub_url: str, usage_db: str) -> str:
    from hub_service import InThread

    async def reports(service: Any) -> None:
        service.board.interval_s = 3600.0  # the reports below stay fresh through the runs
        for n in range(USERS):  # what each user's server pushes (issue 27): the crowd's kernels
            name = f"user{n:03d}"
            snapshot = user_snapshot(name, NOTEBOOKS, gpu=n % GPUS, mib=512 + n)
            service.board.receive(name, report_of(snapshot), time.time())

    return InThread(hub_url, prepare=reports, cache_max_age=300, interval_s=1.0, usage_db=usage_db).url


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--skip-paint", action="store_true", help="no browser: size and query only")
    parser.add_argument("--days", type=int, default=DAYS, help="days of usage written before measuring")
    parser.add_argument("--hub-in-process", action="store_true", help="the stand-in hub in the service's process")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "usage.sqlite"
        results["days"] = args.days
        results["fill_s"] = round(fill(path, args.days), 1)
        results["file_mib"] = round(path.stat().st_size / 2**20, 2)
        results["wal_mib"] = round(Path(f"{path}-wal").stat().st_size / 2**20, 2) if Path(f"{path}-wal").exists() else 0
        times = query_ms(path, args.runs)
        results["query_30d_ms_median"] = round(statistics.median(times), 1)
        results["query_30d_ms_runs"] = [round(t, 1) for t in times]
        if not args.skip_paint:
            os.environ[simulate.ENV_VAR] = str(Path(folder) / "gpus.json")
            if args.hub_in_process:
                hub: Any = crowd(Path(folder))
                hub_url = hub.url
            else:
                env = {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join([str(REPO / "benchmarks"), str(REPO / "tests"), str(REPO)]),
                }
                hub = subprocess.Popen(
                    [sys.executable, "-c", f"import bench_accounting; bench_accounting.serve_crowd({folder!r})"],
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert hub.stdout is not None
                hub_url = hub.stdout.readline().strip()
            paint = first_paint(start_service(hub_url, str(path)), args.runs, (USERS_ROWS, USAGE_ROWS))
            results["hub"] = "in the service's process" if args.hub_in_process else "its own process"
            results["first_paint_ms_median"] = round(statistics.median(paint), 1)
            results["first_paint_ms_runs"] = [round(t, 1) for t in paint]
            if args.hub_in_process:
                hub.stop()
            else:
                hub.kill()
                hub.wait()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
