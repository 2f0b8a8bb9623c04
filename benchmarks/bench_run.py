"""``jupyter-gpu run -- python -c pass`` against ``python -c pass`` (issue 30: at most 150 ms more).

Each round starts, in turn, ``python -c pass`` and ``jupyter-gpu run [options] -- python -c pass``
(the console script next to this interpreter, else ``python -m jupyter_gpu.cli``), so both see the
same machine load; the medians and their difference are printed for each case, in wall-clock time
and in CPU time (user + system of the command and its children: less swayed by other work on a busy
machine):

- ``plain``: no option and no ``JUPYTER_GPU_DEFAULT_*``: nothing to plan (no NVML is read);
- ``select 1``: ``--select 1`` on 4 simulated GPUs (NVML snapshot, planner, frameworks' environment);
- ``auto``: ``--select auto --limit 8GiB`` (also the claims lock, a claim written and removed).

Measure with bytecode caching on, as an installed package has it (this development machine sets
``PYTHONDONTWRITEBYTECODE=1``: every start would compile jupyter_gpu's modules from source; the
first, unmeasured round of each case writes the caches).

Command: ``env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=. .venv/bin/python benchmarks/bench_run.py --runs 21``
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock seconds, and CPU seconds (user + system, the command and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("jupyter-gpu")
    run = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter_gpu.cli"]
    work = Path(tempfile.mkdtemp(prefix="jgpu-bench-run-"))
    (work / "claims").mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTER_GPU_", "CUDA_")) and key != "NVIDIA_VISIBLE_DEVICES"
    }
    env.update(PYTHONPATH=str(REPO), JUPYTER_GPU_CLAIMS_DIR=str(work / "claims"), JUPYTER_RUNTIME_DIR=str(work))
    simulated = {**env, "JUPYTER_GPU_SIMULATE": "4"}
    python = [sys.executable, "-c", "pass"]
    cases = [
        ("plain", [], env),
        ("select 1", ["--select", "1"], simulated),
        ("auto", ["--select", "auto", "--limit", "8GiB"], simulated),
    ]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("warning: PYTHONDONTWRITEBYTECODE is set: modules are compiled at every start (env -u it)")
    print(f"{args.runs} rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, {' '.join(run)}")
    try:
        for name, options, case_env in cases:
            bare: list[tuple[float, float]] = []
            wrapped: list[tuple[float, float]] = []
            timed(python, case_env)  # warm the page cache (and write the bytecode caches)
            timed([*run, "run", *options, "--", *python], case_env)
            for _ in range(args.runs):
                bare.append(timed(python, case_env))
                wrapped.append(timed([*run, "run", *options, "--", *python], case_env))
            for what, column in (("wall", 0), ("CPU", 1)):
                b = statistics.median(t[column] for t in bare) * 1000
                w = statistics.median(t[column] for t in wrapped) * 1000
                print(
                    f"{name:>9} {what:>4}: python -c pass {b:6.1f} ms   run -- python -c pass {w:6.1f} ms   "
                    f"+{w - b:6.1f} ms"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
