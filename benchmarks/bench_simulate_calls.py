"""Cost of one simulated NVML call through nvidia-ml-py, with and without counting it in a file
(``JUPYTER_GPU_SIMULATE_CALLS_DIR``). Median over 7 runs of 20,000 ``nvmlDeviceGetCount`` calls.

    JUPYTER_GPU_SIMULATE=2 PYTHONPATH=. .venv/bin/python benchmarks/bench_simulate_calls.py
    JUPYTER_GPU_SIMULATE=2 JUPYTER_GPU_SIMULATE_CALLS_DIR=$(mktemp -d) PYTHONPATH=. \
        .venv/bin/python benchmarks/bench_simulate_calls.py
"""

import statistics
import time

import pynvml

pynvml.nvmlInit()
runs = []
for _ in range(7):
    began = time.perf_counter()
    for _ in range(20000):
        pynvml.nvmlDeviceGetCount()
    runs.append((time.perf_counter() - began) / 20000 * 1e6)
print(round(statistics.median(runs), 2), "us per call")
