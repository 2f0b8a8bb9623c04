"""``jupyter-gpu doctor`` (issue 20): the machine part and the whole report, medians over runs.

Each run is the real command in a fresh process (``python -m jupyter_gpu.cli doctor --json``), as a
user types it: interpreter start, the plan built by the magics, the machine part, and every
installed framework (TensorFlow, PyTorch, JAX) started at once in a child process of its own. The
wall time of the command is the whole report; the machine part and each child's time are the ones
the report itself records (``machine.elapsed_s``, ``frameworks[].elapsed_s``).

Here the frameworks are CPU builds and the GPUs simulated, so each child's time is its framework's
import and device listing on a CPU build; on a GPU machine CUDA's own start (cuInit, the device
listing) comes on top. For scale, each run also times the floor: TensorFlow alone (the slowest
framework to start) in a fresh interpreter, ``import tensorflow`` and its device listing, run after
the doctor, not beside it.

Command: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_doctor.py --runs 7``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--plan", default="%gpu_select 1 --growth; %gpu_limit 2GiB")
    args = parser.parse_args()
    env = {**os.environ, "JUPYTER_GPU_SIMULATE": "demo", "TF_CPP_MIN_LOG_LEVEL": "3"}
    whole: list[float] = []
    machine: list[float] = []
    children: dict[str, list[float]] = {}
    floor: list[float] = []
    for _ in range(args.runs):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_gpu.cli", "doctor", "--json", "--plan", args.plan],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        whole.append(time.perf_counter() - started)
        report = json.loads(done.stdout)
        machine.append(report["machine"]["elapsed_s"])
        for framework in report["frameworks"]:
            if framework["elapsed_s"] is not None:
                children.setdefault(framework["name"], []).append(framework["elapsed_s"])
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices('GPU')"],
            env=env,
            capture_output=True,
            check=True,
        )
        floor.append(time.perf_counter() - started)
    print(f"runs: {args.runs}, exit status of the last: {done.returncode}, load average: {os.getloadavg()}")
    print(f"whole report (the command's wall time): median {statistics.median(whole):.2f} s, max {max(whole):.2f} s")
    print(f"machine part: median {statistics.median(machine) * 1000:.0f} ms, max {max(machine) * 1000:.0f} ms")
    print(f"floor, TensorFlow alone: median {statistics.median(floor):.2f} s, max {max(floor):.2f} s")
    for name, times in children.items():
        print(f"{name} child: median {statistics.median(times):.2f} s, max {max(times):.2f} s")


if __name__ == "__main__":
    main()
