"""The start-up hook for plans carried to children (``jupyter_gpu_plan.pth``): its cost at interpreter
start, and a child's ``import torch`` with a plan.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_startup_hook.py [--runs 41] [--torch-runs 7] [--kernels 5]

1. ``python -S -c "import site; site.addpackage(<tree>, <file>, set())"``, interleaved, median of
   ``--runs``: ``import site`` alone; with the tree's ``jupyter_gpu_plan.pth`` and
   ``JUPYTER_GPU_PLAN`` unset; with it set to a plan (GPU 0 at 4 GiB on two simulated A100s). ``-S``
   keeps every installed ``.pth`` file out, so the difference is this file's line alone. Wall time
   and CPU time (user + system of the child: on a loaded host, what the start itself costs). Then
   ``python -X importtime`` of the set case: what of jupyter_gpu is imported at start; and the file
   processed 2,000 times in one interpreter, variable unset (its own cost, without process noise).
2. ``import torch`` timed inside the process (``time.perf_counter`` around the statement), median of
   ``--torch-runs`` fresh interpreters each: a child without the variable, a child with the plan
   (its post-import hook applies the cap: it imports ``jupyter_gpu.frameworks``), and (``--kernels``
   fresh kernels) a kernel with the same plan made by ``%gpu_select 0`` + ``%gpu_limit 4GiB`` before
   ``import torch`` (its hook was registered by the magic; ``jupyter_gpu.frameworks`` was imported
   by the extension before the timed statement); and the start-up hook's own time inside the child's
   ``import torch``. Children and kernels run the tree's ``.pth`` from a
   ``sitecustomize`` (as ``tests/standin_site.plan_site`` does), and ``JUPYTER_GPU_SIMULATE=2``.

Every process keeps compiled modules (``PYTHONPYCACHEPREFIX``, a temporary folder warmed first), as
an installed package has them, even where ``PYTHONDONTWRITEBYTECODE`` is set.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

TIMED_TORCH = (
    "import time\nstarted = time.perf_counter()\nimport torch\nprint(f'TORCH {time.perf_counter() - started:.6f}')\n"
)


def base_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JUPYTER_GPU_", "CUDA_"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def cache_bytecode(folder: Path) -> None:
    """Compiled modules kept (in ``folder``, not the tree) for every process this benchmark starts, as
    an installed package has them: with ``PYTHONDONTWRITEBYTECODE`` each start would compile
    jupyter_gpu's sources again (0.2 s for ``jupyter_gpu.frameworks`` on a loaded host)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    warm = "import jupyter_gpu._startup, jupyter_gpu.frameworks, jupyter_gpu.plan.carry, torch"
    subprocess.run([sys.executable, "-c", warm], env=base_env(), check=True, capture_output=True)


def carried_plan() -> str:
    """The JUPYTER_GPU_PLAN a kernel writes for GPU 0 at 4 GiB on two simulated A100s."""
    os.environ["JUPYTER_GPU_SIMULATE"] = "2"
    from jupyter_gpu.plan import Fence, PlanRequest, build_plan
    from jupyter_gpu.plan.carry import PLAN_VARIABLE, plan_environment
    from jupyter_gpu.sources.nvml import snapshot

    gpus = snapshot()
    plan = build_plan(PlanRequest(selection="0", limits=("4GiB",)), gpus, Fence({}))
    return plan_environment(plan, gpus.gpus)[PLAN_VARIABLE]


def start_up(runs: int, plan: str) -> dict[str, float]:
    pth = f"import site; site.addpackage({str(REPO)!r}, 'jupyter_gpu_plan.pth', set())"
    cases = {
        "import site (no .pth)": ("import site", None),
        "with jupyter_gpu_plan.pth, variable unset": (pth, None),
        "with jupyter_gpu_plan.pth, variable set to a plan": (pth, plan),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (code, value) in cases.items():
            env = base_env()
            if value is not None:
                env["JUPYTER_GPU_PLAN"] = value
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", code], env=env, check=True, cwd="/")
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[name].append((wall, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)))
    return {
        name: (statistics.median(w for w, _ in values) * 1000, statistics.median(c for _, c in values) * 1000)
        for name, values in times.items()
    }


def line_cost(repeats: int = 2000) -> float:
    """Microseconds to process the ``.pth`` file once with the variable unset, inside one interpreter
    (``site.addpackage`` opens, reads and runs its line), median of ``repeats``: the hook's own cost,
    without the noise of starting processes."""
    code = (
        "import site, statistics, time\n"
        "times = []\n"
        f"for _ in range({repeats}):\n"
        "    t = time.perf_counter()\n"
        f"    site.addpackage({str(REPO)!r}, 'jupyter_gpu_plan.pth', set())\n"
        "    times.append(time.perf_counter() - t)\n"
        "print(statistics.median(times) * 1e6)\n"
    )
    command = [sys.executable, "-S", "-c", code]
    done = subprocess.run(command, env=base_env(), capture_output=True, text=True, check=True)
    return float(done.stdout)


def import_time(plan: str) -> list[str]:
    """``-X importtime`` lines of jupyter_gpu's modules at a start with the plan set (self, cumulative µs)."""
    env = {**base_env(), "JUPYTER_GPU_PLAN": plan}
    code = f"import site; site.addpackage({str(REPO)!r}, 'jupyter_gpu_plan.pth', set())"
    done = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, cwd="/"
    )
    return [line for line in done.stderr.splitlines() if "jupyter_gpu" in line]


def site_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        f"import site\nsite.addpackage({str(REPO)!r}, 'jupyter_gpu_plan.pth', set())\n"
    )
    return folder


def child_torch(runs: int, plan: str, site: Path) -> dict[str, float]:
    env = {**base_env(), "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "JUPYTER_GPU_SIMULATE": "2"}
    with_plan = {**env, "JUPYTER_GPU_PLAN": plan, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    check = "import torch, sys\nprint('CAPPED', bool(torch.cuda._queued_calls))\n"
    done = subprocess.run([sys.executable, "-c", check], env=with_plan, capture_output=True, text=True, check=True)
    if "CAPPED True" not in done.stdout or done.stderr.strip():
        raise SystemExit(f"the child did not queue the plan's cap: {done.stdout} {done.stderr}")
    times: dict[str, list[float]] = {"child, no plan": [], "child, plan (GPU 0 at 4 GiB)": []}
    for _ in range(runs):
        for name, child_env in zip(times, (env, with_plan), strict=True):
            done = subprocess.run([sys.executable, "-c", TIMED_TORCH], env=child_env, capture_output=True, text=True)
            times[name].append(float(done.stdout.split("TORCH ")[1]))
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


HOOK_TIMED = (
    "import time, jupyter_gpu._startup as startup, jupyter_gpu.core.import_hooks as hooks\n"
    "spent = []\n"
    "def timed(module, _hook=startup._apply_carried_plan):\n"
    "    t = time.perf_counter(); _hook(module); spent.append(time.perf_counter() - t)\n"
    "hooks.cancel('torch', startup._apply_carried_plan); hooks.when_imported('torch', timed)\n"
    "import torch\n"
    "print(f'HOOK {spent[0]:.6f}')\n"
)


def child_hook(runs: int, plan: str, site: Path) -> float:
    """Milliseconds the start-up hook takes inside a child's ``import torch`` (median of ``runs``):
    importing ``jupyter_gpu.frameworks``, reading the plan, the framework's own hook."""
    env = {**base_env(), "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "JUPYTER_GPU_SIMULATE": "2"}
    env.update(JUPYTER_GPU_PLAN=plan, CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    times = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", HOOK_TIMED], env=env, capture_output=True, text=True, check=True)
        times.append(float(done.stdout.split("HOOK ")[1]))
    return statistics.median(times) * 1000


def kernel_torch(runs: int, site: Path) -> float:
    from kernels import start

    env = {"PYTHONPATH": f"{site}{os.pathsep}{REPO}", "JUPYTER_GPU_SIMULATE": "2"}
    times = []
    for _ in range(runs):
        for kernel in start(env):
            _, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 0\n%gpu_limit 4GiB")
            if "Error" in err:
                raise SystemExit(err)
            out, _ = kernel.run(TIMED_TORCH)
            queued = kernel.value("bool(torch.cuda._queued_calls)")
            if not queued:
                raise SystemExit("the kernel did not queue the plan's cap")
            times.append(float(out.split("TORCH ")[1]))
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--torch-runs", type=int, default=7)
    parser.add_argument("--kernels", type=int, default=5)
    args = parser.parse_args()
    pycache = tempfile.TemporaryDirectory(prefix="bench-startup-pycache-")
    cache_bytecode(Path(pycache.name))
    plan = carried_plan()
    print(f"JUPYTER_GPU_PLAN: {len(plan)} characters")
    startup = start_up(args.runs, plan)
    for name, (wall, cpu) in startup.items():
        print(f"start-up, median of {args.runs}: {name}: {wall:.2f} ms wall, {cpu:.2f} ms CPU")
    base_wall, base_cpu = startup["import site (no .pth)"]
    for case in ("variable unset", "variable set to a plan"):
        wall, cpu = startup[f"with jupyter_gpu_plan.pth, {case}"]
        print(f"  the line, {case}: {wall - base_wall:+.2f} ms wall, {cpu - base_cpu:+.2f} ms CPU")
    print(f"  processing jupyter_gpu_plan.pth once, variable unset, in one interpreter: {line_cost():.1f} µs")
    print("-X importtime, variable set (self µs | cumulative µs | module):")
    for line in import_time(plan):
        print("  " + line.removeprefix("import time:").strip())
    if not args.torch_runs:
        return
    with tempfile.TemporaryDirectory() as scratch:
        site = site_folder(Path(scratch) / "site")
        torch_times = child_torch(args.torch_runs, plan, site)
        for name, ms in torch_times.items():
            print(f"import torch, median of {args.torch_runs}: {name}: {ms:.0f} ms")
        hook_ms = child_hook(args.torch_runs, plan, site)
        print(f"  of which the start-up hook in the child (median of {args.torch_runs}): {hook_ms:.1f} ms")
        if args.kernels:
            kernel_ms = kernel_torch(args.kernels, site)
            kernels = f"median of {args.kernels} kernels: kernel, same plan by the magics"
            print(f"import torch, {kernels}: {kernel_ms:.0f} ms")
            child_ms = torch_times["child, plan (GPU 0 at 4 GiB)"]
            print(f"  child with the plan / kernel with the plan: {child_ms / kernel_ms:.2f}")


if __name__ == "__main__":
    main()
