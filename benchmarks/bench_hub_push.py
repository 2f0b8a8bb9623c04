"""The push (issue 27): the console's first paint at 200 users x 2 kernels with two CPU hogs running,
this tree against another (``--against``, e.g. the current main) in the same run; and, with usage
accounting on and nobody looking, how often user servers' samplers wake and whose NVML calls they are.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_hub_push.py --against /work/main [--runs 7] [--rounds 2]

1. First paint: headless Chromium (Debian's) opens ``/services/jupyter-gpu/`` with an admin token;
   milliseconds from navigation until the 50th user's row is drawn (``tests/console_page.py``),
   median over ``--runs`` fresh contexts (a first run left out), while two ``yes > /dev/null`` run;
   beside it the page's own clock (navigation start until its script had drawn the users:
   ``console_page.first_paint``'s ``page_clock``), without the harness's share, and the paint clock
   (navigation start until the frame that drew the 50th user's row was painted: ``paint_clock``,
   the same measure for both trees, style, layout and paint included), and the data clock
   (navigation start until the page's last byte: its head goes out at once, the rest once the
   service has joined the viewer's data: ``data_clock``).
   Each tree runs in its own child process (``PYTHONPATH`` = that tree first, this tree's
   ``tests/`` helpers): a tree whose service has ``board`` (the push) is given the 200 users'
   reports as its user servers push them (``hub_fake.report_of``, into ``HubService.board``); an
   older tree gathers the same users' snapshots from the stand-in hub's user servers
   (``tests/hub_fake.py``), as it does. The simulated GPUs hold every kernel's process.
2. Accounting with no viewer (this tree): 5 real ``GpuService`` user servers report through their
   ``HubPusher`` (their own tokens, the service's HTTP endpoint) while the service accounts 5
   intervals; the user servers' samplers' samples (must be 0) and the process's NVML calls, split
   into the service's and anybody else's (the simulated library counts every call in the process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def start_service(hub: Any, **options: Any) -> tuple[Any, str, asyncio.AbstractEventLoop]:
    """The service of the tree on ``sys.path`` on its own loop and thread: (service, URL, loop)."""
    from hub_service import InThread

    running = InThread(hub.url, cache_max_age=300, ready_s=30, **options)
    return running.service, running.url, running.loop


def push_reports(hub: Any, service: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Every user's report into the service's board, as their user servers push them (on its loop)."""
    from hub_fake import report_of

    done = threading.Event()

    def push_all() -> None:
        for name, snapshot in hub.snapshots.items():
            service.board.receive(name, report_of(snapshot), time.time())
        done.set()

    loop.call_soon_threadsafe(push_all)
    done.wait(60)


def paint_child(runs: int, wait_until: str = "load") -> None:
    """In the child: the 200 users, the service of the tree on sys.path, the first paints (JSON out)."""
    from bench_accounting import crowd  # the same 200 users x 2 kernels on 8 simulated GPUs
    from console_page import first_paint

    from jupyter_gpu import simulate

    folder = Path(tempfile.mkdtemp())
    hub = crowd(folder)
    os.environ[simulate.ENV_VAR] = str(folder / "gpus.json")
    import importlib.util

    pushed = importlib.util.find_spec("jupyter_gpu.hub.reports") is not None  # the push (issue 27)
    options: dict[str, Any] = {"interval_s": 1.0}
    if pushed:
        options["report_interval_s"] = 3600.0  # the reports stay fresh through the runs
    service, url, loop = start_service(hub, **options)
    if pushed:
        push_reports(hub, service, loop)
    page_clock: list[float] = []
    paint_clock: list[float] = []
    data_clock: list[float] = []
    paints = first_paint(
        url, runs, page_clock=page_clock, wait_until=wait_until, paint_clock=paint_clock, data_clock=data_clock
    )
    answers = []  # api/console alone, as the page asks it (the service's part of the paint)
    for _ in range(runs):
        request = urllib.request.Request(url + "api/console", headers={"Authorization": "token admin-token"})
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            users = len(json.loads(response.read())["users"])
        answers.append((time.perf_counter() - began) * 1000)
    print(
        json.dumps(
            {
                "flow": "push" if pushed else "gather",
                "users": users,
                "runs": [round(t, 1) for t in paints],
                "page_clock_ms": [round(t, 1) for t in page_clock],
                "paint_clock_ms": [round(t, 1) for t in paint_clock],
                "data_clock_ms": [round(t, 1) for t in data_clock],
                "api_console_ms": [round(t, 1) for t in answers],
            }
        ),
        flush=True,
    )
    hub.stop()


def paint(tree: Path, runs: int, wait_until: str = "load") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "tests"), str(REPO / "benchmarks")])}
    out = subprocess.run(
        [sys.executable, "-c", f"import bench_hub_push; bench_hub_push.paint_child({runs}, {wait_until!r})"],
        env=env,
        cwd=tree,  # "" first on sys.path: that tree's jupyter_gpu
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    ).stdout
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    answer["median_ms"] = round(statistics.median(answer["runs"]), 1)
    answer["page_clock_median_ms"] = round(statistics.median(answer["page_clock_ms"]), 1)
    answer["paint_clock_median_ms"] = round(statistics.median(answer["paint_clock_ms"]), 1)
    answer["data_clock_median_ms"] = round(statistics.median(answer["data_clock_ms"]), 1)
    answer["api_console_median_ms"] = round(statistics.median(answer["api_console_ms"]), 1)
    return answer


def pooled(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Two rounds of one tree as one: the runs of both, the medians over all of them."""
    answer = dict(later)
    for key in ("runs", "page_clock_ms", "paint_clock_ms", "data_clock_ms", "api_console_ms"):
        answer[key] = earlier[key] + later[key]
    answer["median_ms"] = round(statistics.median(answer["runs"]), 1)
    for clock in ("page_clock", "paint_clock", "data_clock", "api_console"):
        answer[f"{clock}_median_ms"] = round(statistics.median(answer[f"{clock}_ms"]), 1)
    return answer


def accounting_without_viewers(intervals: int = 5, servers: int = 5) -> dict[str, Any]:
    """This tree: accounting with nobody looking, ``servers`` real user servers pushing."""
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    from hub_fake import FakeHub, scenario_of, user_snapshot

    from jupyter_gpu import simulate
    from jupyter_gpu.server import GpuService, JupyterGpuServer
    from jupyter_gpu.server.hub_pusher import HubPusher

    def nvml_calls() -> int:
        library = simulate.installed()
        return sum(library.calls.values()) if library else 0

    hub = FakeHub()
    folder = Path(tempfile.mkdtemp())
    names = [f"user{n}" for n in range(servers)]
    for name in names:
        hub.add_user(name, f"{name}-token")
        hub.snapshots[name] = user_snapshot(name, 2, gpu=0)
    simulate.write_scenario(folder / "gpus.json", scenario_of(hub.snapshots))
    os.environ[simulate.ENV_VAR] = str(folder / "gpus.json")
    service, url, loop = start_service(hub, interval_s=1.0, usage_db=str(folder / "usage.sqlite"))
    by_service = 0
    take = service._nvml_take

    def counted() -> Any:
        nonlocal by_service
        before = nvml_calls()
        try:
            return take()
        finally:
            by_service += nvml_calls() - before

    service._nvml_take = counted
    users = []
    for name in names:
        config = JupyterGpuServer(source=url, interval_s=1.0)
        user = GpuService(config, take=None)
        users.append((user, HubPusher(user, url + "api/report", f"{name}-token")))

    async def run() -> None:
        for _ in range(intervals):
            for _, pusher in users:
                await pusher.push_once()
            service.board._last_try.clear()  # the next interval, without waiting for it
            await service.accountant.account_once()

    nvml_calls()  # the library is installed by the first NVML read (the service's first sample)
    before = nvml_calls()
    asyncio.run_coroutine_threadsafe(run(), loop).result(300)
    total = nvml_calls() - before
    samples = sum(user.sampler.samples_taken for user, _ in users)
    answer = {
        "intervals": intervals,
        "user_servers": servers,
        "user_server_sampler_samples": samples,
        "nvml_calls": total,
        "nvml_calls_by_service": by_service,
        "pushes": sum(pusher.pushes for _, pusher in users),
    }
    for user, _ in users:
        user.close()
    return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another checkout to time in the same run (e.g. /work/main)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--rounds", type=int, default=1, help="time the trees this many times each, in turn (A B, B A, ...)"
    )
    parser.add_argument("--skip-paint", action="store_true")
    parser.add_argument(
        "--wait-until",
        choices=("load", "commit"),
        default="load",
        help="when the harness starts looking for the rows (console_page.first_paint)",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if not args.skip_paint:
        hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
        try:
            trees = {"this tree": REPO, **({str(args.against): args.against} if args.against else {})}
            # Round r times the trees in turn, every other round the other way round (A B, B A, ...):
            # a load that rises or falls during the run weighs on both trees alike.
            for round_ in range(args.rounds):
                for name in list(trees)[:: -1 if round_ % 2 else 1]:
                    answer = paint(trees[name], args.runs, args.wait_until)
                    print(json.dumps({name: answer}), flush=True)
                    results[name] = pooled(results[name], answer) if name in results else answer
            if args.against:
                results["ratio"] = round(results[str(args.against)]["median_ms"] / results["this tree"]["median_ms"], 1)
                for clock in ("page_clock", "paint_clock", "data_clock"):
                    results[f"ratio_{clock}"] = round(
                        results[str(args.against)][f"{clock}_median_ms"] / results["this tree"][f"{clock}_median_ms"], 2
                    )
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    results["accounting"] = accounting_without_viewers()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
