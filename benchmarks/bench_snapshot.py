"""Snapshot cost: jupyter_gpu vs nvitop vs gpustat on the same simulated NVML, in one run.

8 simulated GPUs with 8 processes each (real, sleeping PIDs, so every tool can look them up).
Reports the median time per snapshot, the NVML C calls per snapshot against the floor (the calls
strictly needed for the contract's fields), and the time of ``import jupyter_gpu`` in fresh
interpreters.

    .venv/bin/python benchmarks/bench_snapshot.py [--repeat 200] [--gpustat-repeat 5]

``--big`` measures instead one simulated sample of a big machine (issue 10): 64 GPUs x 2,000
processes each (128,000 processes of 50 other users, PIDs that do not exist here), the first sample
and the median of ``--big-repeat`` later ones; ``--startup`` the interpreter start-up with and
without the ``jupyter_gpu_simulate.pth`` line (variable unset); ``--mig`` a snapshot of 4 GPUs each
split into 7 MIG slices against 4 whole GPUs with the same 28 processes (issue 13), interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

GPUS = 8
PROCESSES_PER_GPU = 8
# Per GPU: memory, utilization, temperature, power, compute processes (2 calls: size, fill),
# graphics processes (1 call: none). Name, UUID and power limit are read when a GPU is opened and
# again every 5 s (sources.nvml.MIG_REFRESH_SECONDS): not per snapshot.
FLOOR_PER_GPU = 4 + 2 + 1


def build_scenario(pids: list[int]) -> dict:
    return {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "utilization": 10 * g,
                "temperature": 40 + g,
                "power_w": 100 + g,
                "power_limit_w": 400,
                "processes": [
                    {"pid": pids[(g * PROCESSES_PER_GPU + p) % len(pids)], "memory_mib": 512 + p}
                    for p in range(PROCESSES_PER_GPU)
                ],
            }
            for g in range(GPUS)
        ]
    }


def time_calls(take: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median seconds per call in steady state, seconds of the first call)."""
    start = time.perf_counter()
    take()
    first = time.perf_counter() - start
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        take()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), first


def nvml_calls(library, take: Callable[[], object]) -> int:
    before = sum(library.calls.values())
    take()
    return sum(library.calls.values()) - before


def jupyter_gpu_take() -> Callable[[], object]:
    from jupyter_gpu.sources.nvml import NvmlReader

    reader = NvmlReader()
    return lambda: reader.snapshot().to_dict()


def nvitop_take(with_host_info: bool) -> Callable[[], object]:
    """nvitop's Device.all() with processes; with_host_info adds user and name (take_snapshots)."""
    from nvitop import Device, GpuProcess

    def take() -> list[dict]:
        rows = []
        for device in Device.all():
            found = device.processes().values()
            if with_host_info:
                processes = [
                    (p.pid, p.gpu_memory, p.username, p.name) for p in GpuProcess.take_snapshots(found, failsafe=True)
                ]
            else:
                processes = [(p.pid, p.gpu_memory()) for p in found]
            rows.append(
                {
                    "index": device.index,
                    "name": device.name(),
                    "uuid": device.uuid(),
                    "memory_total": device.memory_total(),
                    "memory_used": device.memory_used(),
                    "memory_free": device.memory_free(),
                    "utilization": device.gpu_utilization(),
                    "temperature": device.temperature(),
                    "power": device.power_usage(),
                    "power_limit": device.power_limit(),
                    "processes": processes,
                }
            )
        return rows

    return take


def gpustat_take() -> Callable[[], object]:
    import gpustat

    return lambda: gpustat.new_query().jsonify()


def import_times(runs: int) -> list[float]:
    """``import jupyter_gpu`` in fresh interpreters (without the simulation, which imports it early)."""
    code = "import time; t = time.perf_counter(); import jupyter_gpu; print(time.perf_counter() - t)"
    env = {key: value for key, value in os.environ.items() if key != "JUPYTER_GPU_SIMULATE"}
    return [float(subprocess.check_output([sys.executable, "-c", code], text=True, env=env)) for _ in range(runs)]


def big_machine(gpus: int, per_gpu: int, repeat: int) -> None:
    from jupyter_gpu import simulate
    from jupyter_gpu.sources.nvml import NvmlReader

    data = {
        "gpus": [
            {
                "memory_total_mib": 81920,
                "processes": [
                    {"pid": 3_000_000 + g * per_gpu + p, "memory_mib": 1, "user": f"user{p % 50}", "name": "python"}
                    for p in range(per_gpu)
                ],
            }
            for g in range(gpus)
        ]
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scenario.json"
        simulate.write_scenario(path, data)
        library = simulate.install(str(path))
        reader = NvmlReader()
        began = time.perf_counter()
        first = reader.snapshot()
        first_s = time.perf_counter() - began
        samples = []
        for _ in range(repeat):
            began = time.perf_counter()
            snap = reader.snapshot()
            samples.append(time.perf_counter() - began)
        assert sum(len(g.processes) for g in snap.gpus) == gpus * per_gpu == sum(len(g.processes) for g in first.gpus)
        assert library.callback_errors == []
        simulate.uninstall()
    print(
        f"{gpus} GPUs x {per_gpu} processes ({gpus * per_gpu} processes): first sample {first_s:.3f} s, "
        f"median of {repeat} later samples {statistics.median(samples):.3f} s "
        f"(min {min(samples):.3f}, max {max(samples):.3f})"
    )


def mig_against_whole(rounds: int, per_round: int) -> None:
    """Median snapshot time of 4 GPUs x 7 MIG slices against 4 whole GPUs, one process per slice
    (the whole GPUs carry the same 7 processes each), in alternating rounds so load hits both alike."""
    from jupyter_gpu import simulate
    from jupyter_gpu.sources.nvml import NvmlReader

    def process(g: int, s: int) -> dict:
        return {"pid": 3_500_000 + g * 7 + s, "memory_mib": 100 + s, "user": f"user{s}", "name": "python"}

    whole = {"gpus": [{"memory_total_mib": 81920, "processes": [process(g, s) for s in range(7)]} for g in range(4)]}
    mig = {
        "gpus": [
            {
                "memory_total_mib": 81920,
                "mig_slices": [
                    {
                        "profile": "1g.10gb",
                        "gpu_instance_id": 7 + s,
                        "memory_total_mib": 9856,
                        "processes": [process(g, s)],
                    }
                    for s in range(7)
                ],
            }
            for g in range(4)
        ]
    }
    medians: dict[str, list[float]] = {"whole": [], "mig": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name, data in (("whole", whole), ("mig", mig)):
                path = Path(folder) / f"{name}.json"
                simulate.write_scenario(path, data)
                library = simulate.install(str(path))
                reader = NvmlReader()
                snap = reader.snapshot()  # NVML start and identity look-ups: not measured
                samples = []
                for _ in range(per_round):
                    began = time.perf_counter()
                    snap = reader.snapshot()
                    snap.to_dict()
                    samples.append(time.perf_counter() - began)
                medians[name].append(statistics.median(samples))
                assert sum(len(g.processes) for g in snap.gpus) == 28 and library.callback_errors == []
                assert sum(len(g.slices) for g in snap.gpus) == (28 if name == "mig" else 0)
                reader.reset()
                simulate.uninstall()
    whole_s, mig_s = (statistics.median(medians[k]) for k in ("whole", "mig"))
    print(
        f"snapshot + to_dict, median of {rounds} rounds x {per_round} samples: 4 whole GPUs (28 processes) "
        f"{whole_s * 1000:.2f} ms, 4 GPUs x 7 MIG slices (28 processes) {mig_s * 1000:.2f} ms: "
        f"ratio {mig_s / whole_s:.2f}x (target <= 2x); per-round ratios "
        f"{', '.join(f'{m / w:.2f}' for m, w in zip(medians['mig'], medians['whole'], strict=True))}"
    )


def startup(runs: int) -> None:
    """``python -c pass`` with the .pth line processed (variable unset) vs without it, interleaved."""
    root = Path(__file__).resolve().parents[1]
    env = {key: value for key, value in os.environ.items() if key != "JUPYTER_GPU_SIMULATE"}
    with_pth = f"import site; site.addpackage({str(root)!r}, 'jupyter_gpu_simulate.pth', set())"
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(runs):
        for name, code in (("without", "import site"), ("with", with_pth)):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", code], env=env, check=True)
            times[name].append(time.perf_counter() - began)
    without, with_ = (statistics.median(times[k]) * 1000 for k in ("without", "with"))
    print(
        f"interpreter start-up, variable unset, median of {runs}: without the .pth line {without:.1f} ms, "
        f"with it {with_:.1f} ms (difference {with_ - without:+.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="one sample of 64 GPUs x 2,000 processes")
    parser.add_argument("--big-repeat", type=int, default=5)
    parser.add_argument(
        "--startup", type=int, default=0, metavar="RUNS", help="measure interpreter start-up with/without the .pth line"
    )
    parser.add_argument("--repeat", type=int, default=200, help="snapshots per tool (steady state)")
    parser.add_argument("--gpustat-repeat", type=int, default=5, help="gpustat sleeps 0.1 s per GPU; keep small")
    parser.add_argument("--import-runs", type=int, default=15)
    parser.add_argument("--mig", action="store_true", help="4 GPUs x 7 MIG slices against 4 whole GPUs")
    args = parser.parse_args()
    if args.mig:
        mig_against_whole(rounds=7, per_round=args.repeat)
        return
    if args.big or args.startup:
        if args.big:
            big_machine(64, 2000, args.big_repeat)
        if args.startup:
            startup(args.startup)
        return

    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(GPUS * PROCESSES_PER_GPU)]
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "scenario.json"
            from jupyter_gpu import simulate

            simulate.write_scenario(path, build_scenario([p.pid for p in sleepers]))
            os.environ[simulate.ENV_VAR] = str(path)
            library = simulate.install(str(path))
            results = {}
            tools = (
                ("jupyter_gpu", jupyter_gpu_take, args.repeat),
                ("nvitop", lambda: nvitop_take(with_host_info=False), args.repeat),
                ("nvitop + user/name", lambda: nvitop_take(with_host_info=True), args.repeat),
                ("gpustat", gpustat_take, args.gpustat_repeat),
            )
            for name, factory, repeat in tools:
                take = factory()
                median, first = time_calls(take, repeat)
                results[name] = {
                    "median_ms": median * 1000,
                    "first_ms": first * 1000,
                    "nvml_calls": nvml_calls(library, take),
                }
            assert library.callback_errors == [], library.callback_errors
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()

    imports = import_times(args.import_runs)
    floor = FLOOR_PER_GPU * GPUS
    ours = results["jupyter_gpu"]
    print(
        f"{GPUS} simulated GPUs x {PROCESSES_PER_GPU} processes; median of {args.repeat} snapshots "
        f"(gpustat: {args.gpustat_repeat})\n"
    )
    print(f"| tool | median per snapshot | first snapshot | NVML calls per snapshot (floor {floor}) |")
    print("|---|---|---|---|")
    for name, row in results.items():
        print(f"| {name} | {row['median_ms']:.2f} ms | {row['first_ms']:.1f} ms | {row['nvml_calls']} |")
    print(
        f"\njupyter_gpu / nvitop time ratio: {ours['median_ms'] / results['nvitop']['median_ms']:.2f} "
        f"(target <= 0.5; nvitop without host lookups)"
    )
    print(f"jupyter_gpu / gpustat time ratio: {ours['median_ms'] / results['gpustat']['median_ms']:.4f}")
    print(
        f"import jupyter_gpu: median {statistics.median(imports) * 1000:.1f} ms over {len(imports)} fresh "
        f"interpreters (target <= 30 ms)"
    )
    print(json.dumps({"results": results, "import_ms": [t * 1000 for t in imports]}), file=sys.stderr)


if __name__ == "__main__":
    main()
