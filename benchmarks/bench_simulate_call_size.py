"""One simulated NVML call costs the same at any scenario size (issue 28 item 4): the median cost of
``nvmlDeviceGetUtilizationRates`` on GPU 0, 2,000 calls in a row (or 2 s, at least 3 calls), for
scenario files of 4 GPUs x 2 processes and 64 GPUs x 2,000 processes (still and moving), in
alternating rounds so load hits every size alike. Point ``PYTHONPATH`` at another tree to compare::

    env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=. .venv/bin/python benchmarks/bench_simulate_call_size.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_simulate_scale import scenario

CASES = {"4x2": (4, 2, False), "64x2000": (64, 2000, False), "64x2000-moving": (64, 2000, True)}


def main(rounds: int = 3, calls: int = 2000) -> None:
    import pynvml

    from jupyter_gpu import simulate

    costs: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as folder:
        libraries = {}
        for name, (gpus, per_gpu, moving) in CASES.items():
            path = Path(folder) / f"{name}.json"
            simulate.write_scenario(path, scenario(gpus, per_gpu, moving))
            libraries[name] = simulate.install(str(path))  # parsed once, here
        for _ in range(rounds):
            for name in CASES:
                simulate.uninstall()
                pynvml.nvmlLib = None
                library = libraries[name]
                with pynvml.libLoadLock:
                    pynvml.nvmlLib = library
                    pynvml._nvmlGetFunctionPointer_cache.clear()
                    pynvml._nvmlLib_refcount = 0
                pynvml.nvmlInit()
                handle = pynvml.nvmlDeviceGetHandleByIndex(0)
                count, began = 0, time.perf_counter()
                while count < calls and (count < 3 or time.perf_counter() - began < 2):  # 2 s at most
                    pynvml.nvmlDeviceGetUtilizationRates(handle)
                    count += 1
                costs[name].append((time.perf_counter() - began) / count)
                pynvml.nvmlShutdown()
    print(
        f"one nvmlDeviceGetUtilizationRates call, median of {rounds} rounds: "
        + ", ".join(f"{name} {statistics.median(c) * 1e6:.1f} us" for name, c in costs.items())
    )


if __name__ == "__main__":
    main()
