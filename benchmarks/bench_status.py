"""``jupyter-gpu status`` beside a running Jupyter server, and NVML calls per host with N panels.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_status.py [--runs 15] [--panels 0,1,5] [--seconds 5]
    PYTHONPATH=/path/to/older/checkout .venv/bin/python benchmarks/bench_status.py --control   # panels reading NVML

1. Wall time of ``python -m jupyter_gpu.cli status`` (a fresh interpreter each run, as a user
   types it) beside a real Jupyter server of this user with jupyter_gpu (the demo's simulated GPUs,
   ``tests/live_processes.LiveServer``), found through its runtime files: the sample is the
   server's (checked in the output). Also, for comparison, ``python -c pass`` (the interpreter's
   own start) and the same command with no server (NVML read in the process). Median over ``--runs``.
2. NVML calls per second on the host (every process counts its own: ``JUPYTER_GPU_SIMULATE_CALLS_DIR``)
   with the server's sidebar polling once per second and 0, 1, 5 ... ``GPUMonitor`` panels open in
   as many notebooks' kernels of that server (``--panels``), median over 3 windows of ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from live_processes import LiveServer, get_json, stop  # noqa: E402

from jupyter_gpu.simulate import counters  # noqa: E402


def timed(command: list[str], env: dict[str, str], expect: str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of ``command``. On a host shared with
    other work the CPU time is what the command itself costs: its wall time on an idle host."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if expect is not None and expect not in done.stdout:
        raise SystemExit(f"unexpected output of {command}: {done.stdout[:500]}{done.stderr[:500]}")
    return elapsed, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def status_times(server: LiveServer, runtime: Path, runs: int) -> dict[str, tuple[float, float]]:
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    alone = {**env, "JUPYTER_RUNTIME_DIR": str(runtime.parent / "no-runtime")}
    status = [sys.executable, "-m", "jupyter_gpu.cli", "status"]
    results: dict[str, list[tuple[float, float]]] = {
        "python -c pass": [],
        "status beside the server": [],
        "status, NVML here": [],
    }
    for _ in range(runs):  # interleaved: the host's load falls on each alike
        results["python -c pass"].append(timed([sys.executable, "-c", "pass"], env))
        results["status beside the server"].append(timed(status, env, f"from the Jupyter server at {server.url}"))
        results["status, NVML here"].append(timed(status, alone, "NVML read locally"))
    return {
        name: (statistics.median(wall for wall, _ in values), statistics.median(cpu for _, cpu in values))
        for name, values in results.items()
    }


def open_notebook(server: LiveServer, path: str) -> str:
    data = json.dumps({"path": path, "type": "notebook", "kernel": {"name": "python3"}}).encode()
    request = urllib.request.Request(
        server.url + "api/sessions", data=data, method="POST", headers={"Authorization": f"token {server.token}"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["kernel"]["id"]


def calls_per_second(folder: Path, seconds: float, windows: int = 3) -> float:
    rates = []
    for _ in range(windows):
        before, started = counters.calls_in(folder), time.monotonic()
        time.sleep(seconds)
        rates.append((counters.calls_in(folder) - before) / (time.monotonic() - started))
    return statistics.median(rates)


def panel_rates(
    server: LiveServer, runtime: Path, calls: Path, panels: list[int], seconds: float, control: bool = False
) -> dict[int, float]:
    from kernels import Kernel, attach

    stop_polling = threading.Event()

    def sidebar() -> None:
        while not stop_polling.is_set():
            get_json(server.url + "jupyter-gpu/snapshot", server.token)
            stop_polling.wait(1.0)

    threading.Thread(target=sidebar, daemon=True).start()
    kernels: list[Kernel] = []
    rates: dict[int, float] = {}
    try:
        for count in sorted(panels):
            while len(kernels) < count:
                kernel_id = open_notebook(server, f"notebook-{len(kernels)}.ipynb")
                kernel = attach(runtime / f"kernel-{kernel_id}.json")
                # watched panels: a ZMQ client is no websocket, so without this they pause after 10 s
                kernel.run(
                    "from jupyter_gpu.panel.widget import GPUMonitor\npanel = GPUMonitor(interval_s=1.0)\n"
                    "panel.unconnected.grace_s = float('inf')"
                )
                kernels.append(kernel)
            time.sleep(1.0)
            rates[count] = calls_per_second(calls, seconds)
        for kernel in kernels:
            out, _ = kernel.run("print(panel.last_snapshot.extra.get('source'))")
            assert control or out.strip() == "jupyter-server", out
    finally:
        stop_polling.set()
        for kernel in kernels:
            kernel.client.stop_channels()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--panels", default="0,1,5")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--control",
        action="store_true",
        help="panels only, their source unchecked: run with PYTHONPATH at a checkout from before the host "
        "sample to measure panels that read NVML themselves",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-status-") as folder:
        base = Path(folder)
        calls = base / "nvml-calls"
        calls.mkdir()
        os.environ["JUPYTER_GPU_SIMULATE"] = "demo"
        os.environ["JUPYTER_GPU_SIMULATE_CALLS_DIR"] = str(calls)
        server = LiveServer(base / "server", "alice", "alice-token", {"interval_s": 1.0, "linger_s": 30})
        runtime = base / "server" / "runtime"
        try:
            if not args.control:
                load = os.getloadavg()[0]
                for name, (wall, cpu) in status_times(server, runtime, args.runs).items():
                    print(f"{name}: median {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU over {args.runs} runs")
                print(f"(load average {load:.1f} on {os.cpu_count()} CPUs when it started)")
            panels = [int(n) for n in args.panels.split(",")]
            for count, rate in panel_rates(server, runtime, calls, panels, args.seconds, args.control).items():
                print(f"NVML calls/s on the host, sidebar polling + {count} panel(s): {rate:.1f}")
        finally:
            stop(server.process)


if __name__ == "__main__":
    main()
