"""Figures on this machine's NVML: what a snapshot costs, in time and in NVML calls, and the sampler's
CPU. Recorded in the report, never asserted against a time (docs/real-gpu.md keeps them per run)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

SAMPLES = 20
# The sampler's window: 5 s (five samples at its 1 s interval) on a real GPU; over the simulated GPU
# the figure says nothing of a driver's cost, so two samples are enough to show the check runs.
SAMPLER_WINDOW_S = {"real": 5.0, "simulated": 2.0}


class Counted:
    """A C function of the NVML library, counted at every call (attributes such as ``restype``
    pass through to it)."""

    def __init__(self, function: Any, counter: list[int]) -> None:
        object.__setattr__(self, "_function", function)
        object.__setattr__(self, "_counter", counter)

    def __call__(self, *args: Any) -> Any:
        self._counter[0] += 1
        return self._function(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._function, name, value)


def test_snapshot_cost(check, monkeypatch: pytest.MonkeyPatch) -> None:
    """Time and NVML calls per snapshot: every call nvidia-ml-py makes into the library, counted
    where it fetches the library's function (``_nvmlGetFunctionPointer``)."""
    import pynvml

    from jupyter_gpu.sources.nvml import NvmlReader

    reader = NvmlReader()
    assert reader.snapshot().nvml_available  # opens NVML: not part of a sample's cost
    counter = [0]
    original = pynvml._nvmlGetFunctionPointer
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: Counted(original(name), counter))
    times = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        snap = reader.snapshot()
        times.append(time.perf_counter() - started)
    calls = counter[0] / SAMPLES
    processes = sum(len(g.processes) for g in snap.gpus)
    check.figure("snapshot_ms_median", round(1000 * statistics.median(times), 2))
    check.figure("nvml_calls_per_sample", round(calls, 1))
    check.detail(f"{len(snap.gpus)} GPU(s), {processes} process(es), {SAMPLES} samples")
    assert calls > 0


def test_sampler_cpu(check) -> None:
    """The sampler thread's CPU per second of wall time at its default 1 s interval, over
    :data:`SAMPLER_WINDOW_S` of this mode."""
    from jupyter_gpu.sources.sampler import Sampler

    sampler = Sampler(interval_s=1.0, linger_s=0.1)
    seen: list[Any] = []
    unsubscribe = sampler.subscribe(seen.append)
    try:
        sampler.wait_for_snapshot(timeout=30)
        window = SAMPLER_WINDOW_S[check.mode]
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(window)
        used = (time.process_time() - cpu) / (time.monotonic() - wall)
    finally:
        unsubscribe()
        sampler.close()
    check.figure("sampler_cpu_ms_per_s", round(1000 * used, 2))
    check.detail(f"{len(seen)} samples in about {window:g} s")
    assert seen
