"""Kernel magics (issue 3): cost of %gpu_select / %gpu_limit / %load_ext and of the post-import hook.

Run: JUPYTER_GPU_SIMULATE=4 .venv/bin/python benchmarks/bench_magics.py [--runs 5] [--reps 200]

Every measurement runs in fresh interpreters with no framework imported beforehand:
- ``%load_ext jupyter_gpu`` in a fresh InteractiveShell (median over --runs interpreters);
- ``%gpu_select`` and ``%gpu_limit`` (alternating values, so each call really changes the plan;
  output discarded), median over --reps calls, beside ``import tensorflow`` timed in the same run;
- ``import tensorflow`` with and without a pending plan (hook included), interleaved, and the hook's
  own time measured inside the import;
- the check after every cell (``post_run_cell``: hint for framework errors, selection variables and
  framework states), median over --reps calls, with no framework imported and with TensorFlow,
  PyTorch and JAX imported and idle (after the one comparison their import triggered);
- the out-of-memory explainer (issue 11): ``post_run_cell`` after a cell that raised PyTorch's real
  ``torch.cuda.OutOfMemoryError``, on a simulated server where this process, another kernel of the
  user (found through its kernel report) and another user hold memory: the first error of a kernel
  (NVML started by it) and the median of --reps later ones; and whether a cell without an error
  imports the explainer at all;
- ``%gpu_select auto:1 --min-free 79GiB --wait 5s`` on GPUs where nothing fits, in real time:
  how many times NVML was read per second of waiting (the target is at most one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD_MAGICS = r"""
import contextlib, io, json, time
import ipykernel.ipkernel  # a kernel has it (and jupyter_client) loaded before any extension
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
start = time.perf_counter()
import jupyter_gpu.kernel.magics
jupyter_gpu.kernel.magics.register(ip)
face = time.perf_counter() - start
start = time.perf_counter()
ip.run_line_magic("load_ext", "jupyter_gpu")
load = time.perf_counter() - start + face
sink = io.StringIO()
def median_of(magic, lines, reps):
    times = []
    with contextlib.redirect_stdout(sink):
        for i in range(reps):
            start = time.perf_counter()
            ip.run_line_magic(magic, lines[i % len(lines)])
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]
reps = int(__import__("sys").argv[1])
select = median_of("gpu_select", ["1", "0,2 --growth", "auto:2"], reps)
limit = median_of("gpu_limit", ["2GiB", "30%", "1GiB 1GiB"], reps)
from jupyter_gpu.kernel.magics import _after_cell
class Result:
    error_in_exec = None
def check_median(reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        _after_cell(Result)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]
check_bare = check_median(reps)
start = time.perf_counter()
import tensorflow
imported = time.perf_counter() - start
import torch, jax
with contextlib.redirect_stdout(sink):
    _after_cell(Result)  # the one comparison after the imports
check_frameworks = check_median(reps)
# Issue 19: with frameworks imported and CUDA not started, a magic asks whether the CUDA driver is
# mapped (/proc/self/maps, kept until the loader loads another library): selections only, since a
# limit makes TensorFlow list its devices.
select_frameworks = median_of("gpu_select", ["1", "0,2 --growth", "auto:2"], reps)
from jupyter_gpu.core import visibility
maps_read = None
if hasattr(visibility, "_loaded_objects"):
    visibility._driver_seen = None
    start = time.perf_counter()
    visibility.cuda_driver_loaded()
    maps_read = time.perf_counter() - start
print(json.dumps({"load": load, "face": face, "select": select, "limit": limit, "import_tf": imported,
                  "check_bare": check_bare, "check_frameworks": check_frameworks,
                  "select_frameworks": select_frameworks, "maps_read": maps_read}))
"""

CHILD_IMPORT = r"""
import json, sys, time
hook_time = [0.0]
if sys.argv[1] == "plan":
    from IPython.core.interactiveshell import InteractiveShell
    import contextlib, io
    ip = InteractiveShell.instance()
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "jupyter_gpu")
        ip.run_line_magic("gpu_select", "0 --growth")
        ip.run_line_magic("gpu_limit", "2GiB")
    from jupyter_gpu import frameworks
    original = frameworks.TENSORFLOW.apply
    def timed(module, plan):
        start = time.perf_counter()
        original(module, plan)
        hook_time[0] += time.perf_counter() - start
    frameworks.TENSORFLOW.apply = timed
start = time.perf_counter()
import tensorflow
print(json.dumps({"import_tf": time.perf_counter() - start, "hook": hook_time[0]}))
"""


CHILD_OOM = r"""
import contextlib, io, json, os, sys, tempfile, time
from pathlib import Path
folder = Path(tempfile.mkdtemp())
from jupyter_gpu import simulate
a100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_reserved_mib": 512}
simulate.write_scenario(folder / "gpus.json", {"gpus": [
    {**a100, "processes": [{"pid": os.getpid(), "memory_mib": 30720}, {"pid": os.getppid(), "memory_mib": 22528},
                           {"pid": 910002, "memory_mib": 24576, "user": "carol"}]},
    {**a100}, {**a100, "processes": [{"pid": 910001, "memory_mib": 60000, "user": "bob"}]}]})
os.environ["JUPYTER_GPU_SIMULATE"] = str(folder / "gpus.json")
from jupyter_gpu.sources.processes import process_start
for n, pid in enumerate((os.getppid(), 999991, 999992)):  # a report counts while its writer runs (PID + start)
    (folder / f"jupyter-gpu-kernel-k{n}.json").write_text(json.dumps(
        {"version": 1, "kernel_id": f"k{n}", "pid": pid, "start_time": process_start(pid) or 1,
         "session": f"/home/u/nb{n}.ipynb", "timestamp": time.time()}))
from jupyter_gpu.sources import kernel_reports
kernel_reports.kernel_identity = lambda: ("me", folder)  # as inside a kernel started by a server
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_line_magic("load_ext", "jupyter_gpu")
from jupyter_gpu.kernel.magics import _after_cell
class Clean:
    error_in_exec = None
_after_cell(Clean)
clean_imports = "jupyter_gpu.kernel.oom" in sys.modules
import torch
class Failed:
    error_in_exec = torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.50 GiB "
        "is free. Of the allocated memory 24.90 GiB is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch "
        "but unallocated.")
sink = io.StringIO()
with contextlib.redirect_stderr(sink):
    start = time.perf_counter()
    _after_cell(Failed)
    first = time.perf_counter() - start
    times = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        _after_cell(Failed)
        times.append(time.perf_counter() - start)
times.sort()
assert "your kernel nb0.ipynb" in sink.getvalue(), sink.getvalue()
print(json.dumps({"oom_first": first, "oom": times[len(times) // 2], "clean_imports": clean_imports}))
"""


CHILD_WAIT = r"""
import contextlib, io, json, os, tempfile, time
from pathlib import Path
from jupyter_gpu import simulate
folder = Path(tempfile.mkdtemp())
simulate.write_scenario(folder / "gpus.json", {"gpus": [
    {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_reserved_mib": 512,
     "processes": [{"pid": 910001, "memory_mib": 40000, "user": "bob"}]}] * 4})
os.environ["JUPYTER_GPU_SIMULATE"] = str(folder / "gpus.json")
os.environ["JUPYTER_GPU_CLAIMS_DIR"] = str(folder)
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.error import UsageError
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "jupyter_gpu")
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    try:
        ip.run_line_magic("gpu_select", "auto:1 --min-free 79GiB --wait " + __import__("sys").argv[1])
    except UsageError:
        pass
elapsed = time.perf_counter() - start
reads = simulate.installed().calls.get("nvmlDeviceGetMemoryInfo_v2", 0) / 4  # one memory read per GPU per look
print(json.dumps({"elapsed": elapsed, "looks": reads}))
"""


def run(code: str, *args: str) -> dict[str, float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.setdefault("JUPYTER_GPU_SIMULATE", "4")
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    magics = [run(CHILD_MAGICS, str(args.reps)) for _ in range(args.runs)]
    ooms = [run(CHILD_OOM, str(max(1, args.reps // 10))) for _ in range(args.runs)]
    plain, planned = [], []
    for _ in range(args.runs):  # interleaved, so drifting machine load hits both alike
        plain.append(run(CHILD_IMPORT, "plain"))
        planned.append(run(CHILD_IMPORT, "plan"))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    import_tf = med(magics, "import_tf")
    print(
        f"%load_ext jupyter_gpu: {med(magics, 'load') * 1e3:.2f} ms in all faces, of which the GPU-plan magics "
        f"(import + register) {med(magics, 'face') * 1e3:.2f} ms (median of {args.runs} fresh kernel-like processes)"
    )
    for key, name in (("select", "%gpu_select"), ("limit", "%gpu_limit")):
        value = med(magics, key)
        print(
            f"{name}: {value * 1e3:.3f} ms median of {args.reps} calls x {args.runs} runs "
            f"(import tensorflow in the same runs: {import_tf:.2f} s; ratio 1:{import_tf / value:,.0f})"
        )
    print(
        f"%gpu_select with TensorFlow, PyTorch and JAX imported, CUDA not started: "
        f"{med(magics, 'select_frameworks') * 1e3:.3f} ms median of {args.reps} calls x {args.runs} runs"
    )
    if all(row.get("maps_read") is not None for row in magics):
        maps_ms = med(magics, "maps_read") * 1e3
        print(f"one uncached look for the CUDA driver in /proc/self/maps there: {maps_ms:.2f} ms")
    for key, what in (
        ("check_bare", "no framework imported"),
        ("check_frameworks", "TensorFlow, PyTorch and JAX imported, idle"),
    ):
        print(
            f"after-cell check: {med(magics, key) * 1e6:.1f} µs median of {args.reps} cells x {args.runs} runs ({what})"
        )
    print(
        f"out-of-memory explainer after a failed cell: first error of a kernel {med(ooms, 'oom_first') * 1e3:.1f} ms "
        f"(NVML starts), later errors {med(ooms, 'oom') * 1e3:.2f} ms (median of {max(1, args.reps // 10)} x "
        f"{args.runs} runs); a cell without an error imports it: {any(row['clean_imports'] for row in ooms)}"
    )
    wait = run(CHILD_WAIT, "5s")
    print(
        f"%gpu_select --wait 5s where nothing fits: {wait['looks']:.0f} NVML looks in {wait['elapsed']:.2f} s = "
        f"{wait['looks'] / wait['elapsed']:.2f} per second (target <= 1 per second, plus the first)"
    )
    plain_s, planned_s, hook_s = med(plain, "import_tf"), med(planned, "import_tf"), med(planned, "hook")
    print(
        f"import tensorflow: {plain_s:.2f} s without a plan, {planned_s:.2f} s with a pending plan "
        f"(difference {(planned_s - plain_s) / plain_s * 100:+.1f} %, within noise); "
        f"the hook itself: {hook_s * 1e3:.2f} ms = {hook_s / planned_s * 100:.2f} % of the import"
    )


if __name__ == "__main__":
    main()
