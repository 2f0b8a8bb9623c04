"""The bounded per-GPU history (pure core): ring semantics, unknown values, bounds on memory."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

from jupyter_gpu.core.history import MAX_GPUS, MAX_SAMPLES_PER_GPU, GpuHistory
from jupyter_gpu.core.snapshot import GpuInfo, Snapshot

GIB = 1024**3


def snap(
    t: float, gpus: int = 2, util: int | None = 50, used_gib: float = 20, error: str | None = None, nvml: bool = True
) -> Snapshot:
    return Snapshot(
        nvml_available=nvml,
        timestamp=t,
        gpus=tuple(
            GpuInfo(
                index=i,
                uuid=f"GPU-{i}",
                name="A100",
                memory_total=80 * GIB,
                memory_used=int(used_gib * GIB),
                utilization=util,
                error=error if i == 0 else None,
            )
            for i in range(gpus)
        ),
    )


def test_samples_come_back_oldest_first_as_columns():
    history = GpuHistory(window_s=10, interval_s=1)
    for t in range(5):
        history.record(snap(1000.0 + t, util=t * 10, used_gib=t * 8))
    data = history.to_dict()
    assert [gpu["uuid"] for gpu in data["gpus"]] == ["GPU-0", "GPU-1"]
    gpu = data["gpus"][0]
    assert gpu["t"] == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    assert gpu["utilization"] == [0, 10, 20, 30, 40]
    assert gpu["memory"] == [0.0, 10.0, 20.0, 30.0, 40.0]  # percent of memory_total
    assert data["window_s"] == 10 and data["capacity"] == 10
    json.dumps(data, allow_nan=False)  # the route's encoder refuses NaN


def test_the_ring_keeps_only_the_window_and_wraps():
    history = GpuHistory(window_s=5, interval_s=1)
    for t in range(23):
        history.record(snap(float(t), gpus=1, util=t))
    gpu = history.to_dict()["gpus"][0]
    assert gpu["t"] == [18.0, 19.0, 20.0, 21.0, 22.0]
    assert gpu["utilization"] == [18, 19, 20, 21, 22]
    assert len(history) == 5


def test_since_returns_only_newer_samples():
    history = GpuHistory(window_s=60, interval_s=1)
    for t in range(10):
        history.record(snap(100.0 + t, gpus=1))
    assert history.to_dict(since=106.0)["gpus"][0]["t"] == [107.0, 108.0, 109.0]


def test_unknown_and_unreadable_values_are_null_and_a_repeated_sample_is_ignored():
    history = GpuHistory(window_s=60, interval_s=1)
    history.record(snap(1.0, util=None))
    history.record(snap(2.0, error="GPU is lost"))
    history.record(snap(2.0, util=99))  # the same timestamp again: ignored
    history.record(snap(3.0, nvml=False))  # NVML down: nothing to record
    history.record(
        Snapshot(
            nvml_available=True,
            timestamp=4.0,
            gpus=(GpuInfo(index=0, uuid="GPU-0", name="A100", memory_total=0, utilization=250),),
        )
    )
    gpu = history.to_dict()["gpus"][0]
    assert gpu["t"] == [1.0, 2.0, 4.0]
    assert gpu["utilization"] == [None, None, 100]  # clamped to 0..100
    assert gpu["memory"] == [25.0, None, None]  # no total: unknown share


def test_a_gpu_that_left_is_forgotten_after_the_window():
    history = GpuHistory(window_s=5, interval_s=1)
    history.record(snap(0.0, gpus=2))
    for t in range(1, 8):
        history.record(snap(float(t), gpus=1))
    assert [gpu["uuid"] for gpu in history.to_dict()["gpus"]] == ["GPU-0"]


def test_bounds_on_gpus_and_samples():
    history = GpuHistory(window_s=10_000, interval_s=0.01)
    assert history.capacity == MAX_SAMPLES_PER_GPU
    history.record(snap(1.0, gpus=MAX_GPUS + 5))
    assert len(history.to_dict()["gpus"]) == MAX_GPUS


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", True])
def test_bad_window_or_interval_is_refused(bad):
    with pytest.raises(ValueError, match="window_s must be a positive number"):
        GpuHistory(window_s=bad)
    with pytest.raises(ValueError, match="interval_s must be a positive number"):
        GpuHistory(interval_s=bad)


def test_eight_gpus_for_fifteen_minutes_at_one_second_take_less_than_one_mib():
    # Measured, not estimated: every allocation the full history holds after 15 minutes of samples.
    snapshots = [snap(1000.0 + t, gpus=8, util=t % 101, used_gib=t % 80) for t in range(1200)]
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    history = GpuHistory(window_s=900, interval_s=1)
    for snapshot in snapshots:
        history.record(snapshot)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(history) == 8 * 900
    assert held <= 1024 * 1024, held
    assert history.nbytes() <= 1024 * 1024
    # The accounting agrees with the measurement to within a few objects.
    assert abs(held - history.nbytes()) < 16 * 1024, (held, history.nbytes())


def test_since_a_served_time_never_returns_that_sample_again():
    history = GpuHistory(window_s=60, interval_s=1)
    start = 1795265648.8651  # a sub-millisecond time: it is served rounded to the millisecond
    for step in range(5):
        history.record(snap(start + step + 0.0004))
    served = history.to_dict()["gpus"][0]["t"]
    since = json.loads(json.dumps(served[2]))
    newer = history.to_dict(since=since)["gpus"][0]["t"]
    assert newer == served[3:]
