"""The shared sampler: one thread while there is demand, none after."""

from __future__ import annotations

import threading
import time

import pytest
from support import UNDER_LOAD_S, wait_until

from jupyter_gpu.core.snapshot import Snapshot
from jupyter_gpu.sources.sampler import Sampler


class CountingTake:
    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()

    def __call__(self) -> Snapshot:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        return Snapshot(nvml_available=True, timestamp=time.time())


def test_listeners_get_snapshots_from_one_background_thread():
    take = CountingTake()
    sampler = Sampler(interval_s=0.02, take=take, linger_s=0)
    got_a: list[Snapshot] = []
    got_b: list[Snapshot] = []
    stop_a = sampler.subscribe(got_a.append)
    stop_b = sampler.subscribe(got_b.append)
    wait_until(lambda: len(got_b) >= 3)
    assert take.threads == {"jupyter-gpu-sampler"}
    assert threading.current_thread().name not in take.threads
    stop_a()
    stop_b()
    wait_until(lambda: not sampler.running)
    calls = take.calls
    time.sleep(0.1)
    assert take.calls == calls  # no demand, no sampling


def test_touch_keeps_sampling_for_linger_then_stops():
    take = CountingTake()
    sampler = Sampler(interval_s=0.01, take=take, linger_s=0.2)
    sampler.touch()
    assert sampler.wait_for_snapshot(timeout=UNDER_LOAD_S) is not None
    assert sampler.running
    wait_until(lambda: not sampler.running, timeout_s=UNDER_LOAD_S)
    sampler.touch()  # demand again: a new thread
    assert sampler.running
    sampler.close()
    assert not sampler.running


def test_wait_for_snapshot_newer_than():
    sampler = Sampler(interval_s=0.01, take=CountingTake(), linger_s=1)
    first = sampler.wait_for_snapshot(timeout=UNDER_LOAD_S)
    second = sampler.wait_for_snapshot(newer_than=first.timestamp, timeout=UNDER_LOAD_S)
    assert second.timestamp > first.timestamp
    sampler.close()


def test_a_failing_take_or_listener_does_not_kill_the_thread():
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    sampler = Sampler(interval_s=0.01, take=broken, linger_s=0)
    got: list[Snapshot] = []
    sampler.subscribe(lambda s: 1 / 0)
    sampler.subscribe(got.append)
    wait_until(lambda: len(got) >= 2)
    assert got[-1].nvml_available is False and "boom" in got[-1].error
    sampler.close()


def test_interval_validation():
    with pytest.raises(ValueError):
        Sampler(interval_s=0)
