"""The after-cell hook on a 1 MB exception message (issue 23 item 10).

Run: PYTHONPATH=. JUPYTER_GPU_SIMULATE=demo .venv/bin/python benchmarks/bench_post_cell.py [--runs 5] [--reps 50]

The hook as the extension registers it (``hooks.guarded(hooks._after_cell)``, in a fresh
InteractiveShell with ``%load_ext jupyter_gpu``), called with a cell result whose error is:

- ``ValueError("x" * 1 MiB)``: not an out-of-memory error, the whole path a failed cell takes;
- ``ValueError("CUDA out of memory. " + "7" * 1 MiB)``: the recogniser's vocabulary, not recognised
  (a ValueError is no framework's error);
- ``RuntimeError("CUDA out of memory. " + "7" * 1 MiB)``: recognised, so the report is gathered too
  (simulated NVML, the user's other kernels): reported apart, it is not a cost of the message;
  and ``oom.recognize()`` alone on it (what the message costs).

Each figure: the median over --runs fresh interpreters of the median of --reps calls (stderr to
/dev/null). Before the fix ``recognize()`` on "CUDA out of memory. " + 20k sevens took 73 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import contextlib, io, json, os, statistics, sys, time
from types import SimpleNamespace
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "jupyter_gpu")
from jupyter_gpu.kernel import hooks, oom
hook = hooks.registered(ip, "post_run_cell", hooks._after_cell)
MB = 2**20
cases = {
    "not out of memory": ValueError("x" * MB),
    "vocabulary, not recognised": ValueError("CUDA out of memory. " + "7" * MB),
    "recognised, report gathered": RuntimeError("CUDA out of memory. " + "7" * MB),
}
reps = int(sys.argv[1])
out = {}
with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
    for name, error in cases.items():
        result = SimpleNamespace(error_in_exec=error)
        hook(result)  # first call: imports, NVML start
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            hook(result)
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1000
    error = cases["recognised, report gathered"]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        oom.recognize(error)
        times.append(time.perf_counter() - start)
    out["recognize() alone, recognised"] = statistics.median(times) * 1000
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    runs = [
        json.loads(subprocess.check_output([sys.executable, "-c", CHILD, str(args.reps)], text=True).splitlines()[-1])
        for _ in range(args.runs)
    ]
    print(f"post_run_cell on a 1 MiB exception message, median of {args.runs} runs x {args.reps} calls:")
    for name in runs[0]:
        print(f"  {name:32s} {statistics.median(run[name] for run in runs):8.3f} ms")


if __name__ == "__main__":
    main()
