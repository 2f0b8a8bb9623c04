"""Benchmark of the notebook panel (issue 4) on 8 simulated GPUs.

1. CPU: process CPU time (``time.process_time()``, all threads) over ``--seconds`` seconds at a 1 s
   sampling interval, (a) idle, (b) the shared sampler with one no-op listener, (c) the sampler with a
   ``GPUMonitor`` panel. Target: (b) and (c) at most 1 % of one core.
2. One widget update (``GPUMonitor.update``) for 8 GPUs: median over ``--updates`` updates of
   snapshots whose values change every time (the worst case: every label redrawn), and of an
   unchanged snapshot. Target: median at most 2 ms.
3. Memory over 10,000 samples: traced Python memory (tracemalloc) after 1,000 and after 10,000
   updates with the default history of 60 samples. Target: flat (bounded history).

Widgets here have no kernel (ipywidgets' dummy comm): the figures cover building and diffing the
values, not the ZeroMQ send a kernel adds per changed value.

    .venv/bin/python benchmarks/bench_monitor.py [--seconds 60] [--updates 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def scenario_file(directory: Path) -> Path:
    from jupyter_gpu import simulate

    data = simulate.plausible_gpus(8)
    for index, gpu in enumerate(data["gpus"]):
        gpu["utilization"] = 10 * index
        gpu["processes"] = [
            {"pid": 950000 + 10 * index + k, "memory_mib": 1000 * (k + 1), "user": f"user{k}", "name": "python"}
            for k in range(2)
        ]
    path = directory / "scenario.json"
    simulate.write_scenario(path, data)
    return path


def cpu_over(seconds: float) -> float:
    """Percent of one core this process used over ``seconds`` of sleeping in the main thread."""
    start_cpu, start_wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return 100 * (time.process_time() - start_cpu) / (time.monotonic() - start_wall)


def varied(snapshot, step: int):  # type: ignore[no-untyped-def]
    """``snapshot`` with memory and utilization changed on every GPU (forces every value to change)."""
    gpus = tuple(
        dataclasses.replace(
            gpu,
            memory_used=(gpu.memory_used + step * 7 * 1024**3) % gpu.memory_total,
            utilization=(step * 13 + gpu.index) % 101,
            temperature=40 + step % 30,
            power=50.0 + step % 300,
        )
        for gpu in snapshot.gpus
    )
    return dataclasses.replace(snapshot, gpus=gpus, timestamp=snapshot.timestamp + step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per CPU measurement")
    parser.add_argument("--updates", type=int, default=2000, help="widget updates to time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JUPYTER_GPU_SIMULATE"] = str(scenario_file(Path(tmp)))
        from jupyter_gpu.panel import widget
        from jupyter_gpu.sources import nvml

        snapshot = nvml.snapshot()
        assert snapshot.nvml_available and len(snapshot.gpus) == 8, snapshot
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, 8 simulated GPUs x 2 processes")

        # 1. CPU at a 1 s interval
        idle = cpu_over(args.seconds)
        sampler = widget.shared_sampler()
        sampler.interval_s = 1.0
        unsubscribe = sampler.subscribe(lambda snap: None)
        taken = sampler.samples_taken
        bare = cpu_over(args.seconds)
        bare_samples = sampler.samples_taken - taken
        unsubscribe()
        panel = widget.GPUMonitor(interval_s=1.0)
        taken = sampler.samples_taken
        with_panel = cpu_over(args.seconds)
        panel_samples = sampler.samples_taken - taken
        panel.close()
        print(
            f"CPU over {args.seconds:g} s at 1 s: idle {idle:.3f} %, sampler alone {bare:.3f} % "
            f"({bare_samples} samples), sampler + panel {with_panel:.3f} % ({panel_samples} samples) of one core"
        )

        # 2. one widget update
        panel = widget.GPUMonitor(interval_s=1.0, start=False)
        snapshots = [varied(snapshot, step) for step in range(64)]
        for snap in snapshots:
            panel.update(snap)
        changing = []
        for step in range(args.updates):
            snap = snapshots[step % len(snapshots)]
            start = time.perf_counter()
            panel.update(snap)
            changing.append(time.perf_counter() - start)
        unchanged = []
        for _ in range(args.updates):
            start = time.perf_counter()
            panel.update(snapshots[0])
            unchanged.append(time.perf_counter() - start)
        print(
            f"one update, 8 GPUs, every value changed: median {1e3 * statistics.median(changing):.3f} ms, "
            f"p95 {1e3 * sorted(changing)[int(0.95 * len(changing))]:.3f} ms"
        )
        print(
            f"one update, 8 GPUs, unchanged values (history chart only): "
            f"median {1e3 * statistics.median(unchanged):.3f} ms"
        )
        panel.close()

        # 3. memory over 10,000 samples
        panel = widget.GPUMonitor(interval_s=1.0, start=False)
        tracemalloc.start()
        for step in range(1000):
            panel.update(snapshots[step % len(snapshots)])
        after_1k = tracemalloc.get_traced_memory()[0]
        for step in range(1000, 10_000):
            panel.update(snapshots[step % len(snapshots)])
        after_10k, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"traced memory after 1,000 updates {after_1k / 1024:.1f} KiB, after 10,000 "
            f"{after_10k / 1024:.1f} KiB (change {(after_10k - after_1k) / 1024:+.1f} KiB), "
            f"history length {len(panel.rows[0].memory_history)}"
        )
        panel.close()
        widget.close_all()


if __name__ == "__main__":
    main()
