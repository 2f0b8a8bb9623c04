"""Cost of one simulated snapshot at any size (issue 28 item 4): the demo's 4 GPUs, 16 GPUs x 200
processes, 64 GPUs x 2,000 processes, each still and moving, read by jupyter_gpu's NVML reader.

For each case: the first snapshot (NVML start, every identity looked up) and the median of
``--repeat`` later ones (``reader.snapshot()``, NVML calls included; 1 at 64 x 2,000), the NVML
calls per snapshot, and the cost of one NVML call alone (the simulation's share: the same at any
size when a call is O(1)). The moving cases give every GPU a utilization track and every 50th process a
memory track (the still figures otherwise the same).

Compare two trees in one run by pointing ``PYTHONPATH`` at each (a ``git worktree`` of main)::

    git worktree add /tmp/main-tree main
    for tree in /tmp/main-tree .; do
        env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=$tree .venv/bin/python benchmarks/bench_simulate_scale.py
    done

``--cases demo,16x200`` picks cases (``demo``, ``demo-still``, ``GxP``, ``GxP-moving``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_CASES = "demo,demo-still,16x200,16x200-moving,64x2000,64x2000-moving"


def scenario(gpus: int, per_gpu: int, moving: bool) -> dict[str, Any]:
    """``gpus`` GPUs of ``per_gpu`` processes of 50 other users (PIDs that do not exist here)."""

    def process(g: int, p: int) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "pid": 3_000_000 + g * per_gpu + p,
            "memory_mib": 1,
            "user": f"user{p % 50}",
            "name": "python",
        }
        if moving and p % 50 == 0:
            entry["motion"] = {"loop_s": 60, "memory_mib": {"points": [[0, 1], [30, 20], [60, 1]]}}
        return entry

    def gpu(g: int) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "memory_total_mib": 81920,
            "utilization": 10,
            "processes": [process(g, p) for p in range(per_gpu)],
        }
        if moving:
            entry["motion"] = {"loop_s": 60, "utilization": {"points": [[0, 5], [30, 95], [60, 5]], "jitter": 0.05}}
        return entry

    return {"gpus": [gpu(g) for g in range(gpus)]}


def measure(spec: str, label: str, repeat: int, processes: int) -> None:
    from jupyter_gpu import simulate
    from jupyter_gpu.sources.nvml import NvmlReader

    library = simulate.install(spec)
    reader = NvmlReader()
    try:
        began = time.perf_counter()
        snap = reader.snapshot()
        first = time.perf_counter() - began
        calls_before = sum(library.calls.values())
        samples = []
        for _ in range(repeat):
            began = time.perf_counter()
            snap = reader.snapshot()
            samples.append(time.perf_counter() - began)
        calls = (sum(library.calls.values()) - calls_before) / repeat
        per_call = call_cost(reader)
        found = sum(len(g.processes) for g in snap.gpus)
        assert library.callback_errors == [], library.callback_errors
        assert processes < 0 or found == processes, (found, processes)
    finally:
        reader.reset()
        simulate.uninstall()
    median = statistics.median(samples)
    print(
        f"{label:<16} first {first * 1000:9.2f} ms   median of {repeat} {median * 1000:9.3f} ms "
        f"(min {min(samples) * 1000:.3f}, max {max(samples) * 1000:.3f})   "
        f"{calls:.0f} NVML calls/snapshot; one call alone {per_call * 1e6:.1f} us"
    )


def call_cost(reader: Any) -> float:
    """Seconds per ``nvmlDeviceGetUtilizationRates`` call on GPU 0 through nvidia-ml-py: the
    simulation's cost per call without the reader's (calls in a row, up to 2,000 or 2 s)."""
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    count, began = 0, time.perf_counter()
    while count < 2000 and time.perf_counter() - began < 2:
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        count += 1
    return (time.perf_counter() - began) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--repeat", type=int, default=0, help="later snapshots per case (default: by size)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for case in args.cases.split(","):
            if case in ("demo", "demo-still"):
                measure(case, case, args.repeat or 200, -1)
                continue
            size, _, kind = case.partition("-")
            gpus, per_gpu = (int(n) for n in size.split("x"))
            path = Path(folder) / f"{case}.json"
            from jupyter_gpu import simulate

            simulate.write_scenario(path, scenario(gpus, per_gpu, moving=kind == "moving"))
            repeat = args.repeat or max(1, min(200, 200_000 // (gpus * per_gpu)))
            measure(str(path), case, repeat, gpus * per_gpu)


if __name__ == "__main__":
    main()
