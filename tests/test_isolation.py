"""What one test leaves in this process does not reach the next (``tests/conftest.py``'s autouse
fixtures): these tests run in file order on one worker, the first leaves the state, the second
checks it is gone. They guard the leaks found by running test modules in another order."""

from __future__ import annotations

from typing import Any

from jupyter_gpu import simulate
from jupyter_gpu.sources import nvml

LEFT: dict[str, Any] = {}


def test_a_test_reads_a_simulated_pid_through_the_shared_reader(scenario: Any) -> None:
    scenario.update(lambda data: data["gpus"][0].update(processes=[{"pid": 910001, "memory_mib": 10, "user": "eve"}]))
    snapshot = nvml.snapshot()
    assert [p.user for p in snapshot.gpus[0].processes] == ["eve"]
    LEFT["reader"] = nvml.default_reader()


def test_the_next_test_does_not_see_the_previous_tests_owner_of_that_pid(scenario: Any) -> None:
    # Given the same simulated PID, now another user's, in this test's scenario
    scenario.update(lambda data: data["gpus"][0].update(processes=[{"pid": 910001, "memory_mib": 10, "user": "bob"}]))
    # Then the shared reader names this scenario's owner: it is a fresh one
    assert [p.user for p in nvml.snapshot().gpus[0].processes] == ["bob"]
    assert nvml.default_reader() is not LEFT.get("reader") and simulate.installed() is not None
