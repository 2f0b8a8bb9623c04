"""What the moving ``demo`` costs a snapshot against ``demo-still`` (issue 21 item 8).

The moving demo evaluates its motion tracks at most once per second (``ScenarioSource.current``
keeps the figures of the current whole second); every other NVML call reads them as a still
scenario does. This measures, interleaved, the median time of one ``NvmlReader.snapshot()`` on each
preset, and the time of one evaluation (``Scenario.at``) of the demo:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_demo_motion.py [--runs 5] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from jupyter_gpu import simulate
from jupyter_gpu.sources.nvml import NvmlReader


def per_snapshot(spec: str, repeat: int) -> float:
    simulate.install(spec)
    try:
        reader = NvmlReader()
        reader.snapshot()  # opens the GPUs
        started = time.perf_counter()
        for _ in range(repeat):
            reader.snapshot()
        return (time.perf_counter() - started) / repeat
    finally:
        simulate.uninstall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"demo": [], simulate.DEMO_STILL: []}
    for _ in range(args.runs):
        for spec in results:
            results[spec].append(per_snapshot(spec, args.repeat))
    for spec, times in results.items():
        print(f"snapshot on {spec:10}: median {statistics.median(times) * 1e3:.3f} ms ({args.runs} runs)")
    scenario = simulate.Scenario.from_dict(simulate.demo_scenario())
    evaluations = []
    for run in range(args.runs):
        started = time.perf_counter()
        for second in range(args.repeat):
            scenario.at(run * args.repeat + second)
        evaluations.append((time.perf_counter() - started) / args.repeat)
    print(f"one evaluation of the demo's motion (Scenario.at): median {statistics.median(evaluations) * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
