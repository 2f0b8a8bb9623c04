"""Where the console's first paint goes (issue 27): Chromium's timeline of the renderer's main thread
while the console of a tree draws 200 users x 2 kernels (the crowd of ``bench_accounting.py``, pushed
as ``bench_hub_push.py`` pushes it).

    PYTHONPATH=. .venv/bin/python benchmarks/trace_console_paint.py [--tree /work/main] [--runs 5] [--timeline]

Prints, per load, the page's navigation figures (the response's first and last byte: the head is
sent at once, the rest once the service has the viewer's data; ``rendered``: the page clock; the
paint entries) and, over ``--runs`` loads (a first one left out), the median of each kind of
main-thread event: wall time (``dur``) and thread time (``tdur``, the CPU the thread had, which load
changes less). ``--timeline`` also prints the first counted load's main-thread events over 3 ms,
in order, from navigation start.
A diagnostic, not a benchmark: no hogs, nothing interleaved.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EVENTS = ("ParseHTML", "EvaluateScript", "FunctionCall", "UpdateLayoutTree", "Layout", "PrePaint", "Paint")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose service and page to trace")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeline", action="store_true")
    args = parser.parse_args()
    sys.path[:0] = [str(args.tree), str(REPO / "tests"), str(REPO / "benchmarks")]
    from bench_accounting import crowd
    from bench_hub_push import push_reports, start_service
    from playwright.sync_api import sync_playwright

    from jupyter_gpu import simulate

    folder = Path(tempfile.mkdtemp())
    hub = crowd(folder)
    os.environ[simulate.ENV_VAR] = str(folder / "gpus.json")
    service, url, loop = start_service(hub, interval_s=1.0, report_interval_s=3600.0)
    push_reports(hub, service, loop)
    wall: dict[str, list[float]] = collections.defaultdict(list)
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=os.environ.get("JUPYTER_GPU_CHROMIUM", "/usr/bin/chromium"),
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        for run in range(args.runs + 1):
            context = browser.new_context(extra_http_headers={"Authorization": "token admin-token"})
            page = context.new_page()
            browser.start_tracing(page=page, categories=["devtools.timeline", "blink.user_timing", "loading"])
            page.goto(url)
            page.locator("#jg-users tr.jg-user").nth(49).wait_for(timeout=30_000)
            page.wait_for_timeout(300)
            trace: Any = json.loads(browser.stop_tracing())
            figures = page.evaluate(
                "({rendered: Number(document.body.dataset.rendered) - performance.timeOrigin,"
                " paints: performance.getEntriesByType('paint').map(e => [e.name, Math.round(e.startTime)]),"
                " response: ['responseStart', 'responseEnd'].map("
                "k => Math.round(performance.getEntriesByType('navigation')[0][k]))})"
            )
            context.close()
            if run == 0:
                continue
            events = trace["traceEvents"] if isinstance(trace, dict) else trace
            parses = collections.Counter(e.get("tid") for e in events if e.get("name") == "ParseHTML")
            main_thread = parses.most_common(1)[0][0] if parses else None
            starts = [e["ts"] for e in events if e.get("name") == "navigationStart"]
            origin = min(starts) if starts else 0
            timed = [e for e in events if e.get("ph") == "X" and e.get("tid") == main_thread]
            for name in EVENTS:
                wall[name].append(sum(e.get("dur", 0) for e in timed if e["name"] == name) / 1000)
                cpu[name].append(sum(e.get("tdur", 0) for e in timed if e["name"] == name) / 1000)
            first_byte, last_byte = figures["response"]  # the page's head, then its data (the service's join)
            print(
                f"load {run}: first byte {first_byte} ms, last byte {last_byte} ms, rendered"
                f" {figures['rendered']:.0f} ms, paints {figures['paints']}",
                flush=True,
            )
            if args.timeline and run == 1:
                for e in sorted(timed, key=lambda e: e["ts"]):
                    if e.get("dur", 0) > 3000 and e["name"] in EVENTS:
                        print(f"  {(e['ts'] - origin) / 1000:7.1f} ms  {e['name']} {e['dur'] / 1000:.1f} ms")
        browser.close()
    hub.stop()
    print(f"medians of {args.runs} loads (ms): event, wall, thread")
    for name in EVENTS:
        print(f"  {name:17s} {statistics.median(wall[name]):7.1f} {statistics.median(cpu[name]):7.1f}")


if __name__ == "__main__":
    main()
