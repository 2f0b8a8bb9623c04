"""The reader's per-process work at scale (issue 28 item 4): a GPU's processes that did not change
since the last sample are the last sample's tuple, with nobody looked up again; anything that could
change an answer (NVML's arrays, a PID's start time, the identity cache, its TTL) is read afresh."""

from __future__ import annotations

import os
from typing import Any

import pytest
from support import ScenarioFile

from jupyter_gpu.sources import gpu_processes
from jupyter_gpu.sources.nvml import NvmlReader
from jupyter_gpu.sources.processes import PidCache, ProcessDirectory, ProcessIdentity, process_start, process_starts

MIB = 1024 * 1024
PER_GPU = 100  # over process_starts' 64: one /proc listing answers for the PIDs not here


def world(memory_mib: int = 10, missing: bool = False) -> dict[str, Any]:
    """2 GPUs x 100 processes of 10 MiB (GPU 0's first: ``memory_mib``; ``missing``: unknown)."""
    return {
        "gpus": [
            {
                "memory_total_mib": 81920,
                "processes": [
                    {
                        "pid": 3_000_000 + g * PER_GPU + p,
                        "memory_mib": None if missing and p == 0 else (memory_mib if (g, p) == (0, 0) else 10),
                        "user": f"user{p % 7}",
                        "name": "python",
                    }
                    for p in range(PER_GPU)
                ],
            }
            for g in range(2)
        ]
    }


@pytest.fixture
def counted(scenario: ScenarioFile) -> tuple[NvmlReader, list[int]]:
    """A reader over 2 GPUs x 100 simulated processes, and every identity look-up it makes."""
    scenario.write(world())
    directory = ProcessDirectory()
    looked_up: list[int] = []
    missing = directory._identities.missing
    assert missing is not None

    def counting(pid: int) -> ProcessIdentity:
        looked_up.append(pid)
        return missing(pid)

    directory._identities.missing = counting
    return NvmlReader(directory), looked_up


def test_a_steady_sample_is_the_last_one_with_nobody_looked_up(counted: tuple[NvmlReader, list[int]]) -> None:
    reader, looked_up = counted
    first = reader.snapshot()
    assert len(looked_up) == 2 * PER_GPU
    second, third = reader.snapshot(), reader.snapshot()
    assert len(looked_up) == 2 * PER_GPU  # nothing looked up again
    for a, b in zip(second.gpus, third.gpus, strict=True):
        assert b.processes is a.processes
    assert [gpu.to_dict() for gpu in third.gpus] == [gpu.to_dict() for gpu in first.gpus]
    assert third.gpus[0].processes[1].user == "user1"


def test_one_process_changing_keeps_every_other_processs_object(
    counted: tuple[NvmlReader, list[int]], scenario: ScenarioFile
) -> None:
    reader, looked_up = counted
    before = reader.snapshot().gpus
    scenario.write(world(memory_mib=20))
    after = reader.snapshot().gpus
    assert after[0].processes[0].memory == 20 * MIB and before[0].processes[0].memory == 10 * MIB
    assert all(a is b for a, b in zip(before[0].processes[1:], after[0].processes[1:], strict=True))
    assert after[1].processes is before[1].processes
    assert len(looked_up) == 2 * PER_GPU  # the same processes: their identities are still cached


def test_unknown_memory_stays_null_sample_after_sample(scenario: ScenarioFile) -> None:
    scenario.write(world(missing=True))
    reader = NvmlReader()
    for _ in range(3):
        assert reader.snapshot().gpus[0].processes[0].memory is None


class Directory:
    """A stand-in identity directory: ``identify_all`` repeats its last answer's objects while
    ``same`` (else answers other users), good for ``good_for`` seconds; ``asked`` counts the calls."""

    def __init__(self) -> None:
        self.generation = 0
        self.good_for = 60.0
        self.asked = 0
        self.same = True
        self._last: list[ProcessIdentity] | None = None

    def identify_all(self, starts: dict[int, Any]) -> tuple[list[ProcessIdentity], float]:
        import time

        self.asked += 1
        if not (self.same and self._last is not None and len(self._last) == len(starts)):
            user = "u" if self.same else "v"
            self._last = [ProcessIdentity(user=f"{user}{pid}", name="python", command=None) for pid in starts]
        return self._last, time.monotonic() + self.good_for

    def forget_all_but(self, pids: set[int]) -> None:
        pass


def test_a_changed_start_a_new_cache_entry_or_an_expiry_means_asking_again(
    scenario: ScenarioFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario.write(world())
    directory = Directory()
    reader = NvmlReader(directory)  # type: ignore[arg-type]
    shift = {"start": None}
    real = gpu_processes.process_starts
    monkeypatch.setattr(
        gpu_processes, "process_starts", lambda pids, listing=None: {pid: shift["start"] for pid in real(pids, listing)}
    )
    first = reader.snapshot()
    asked = directory.asked  # once per GPU
    assert reader.snapshot().gpus[0].processes is first.gpus[0].processes and directory.asked == asked

    shift["start"] = 12345  # every PID is another process now (reused PIDs)
    third = reader.snapshot()
    assert directory.asked == asked + 2
    assert third.gpus[0].processes is first.gpus[0].processes  # asked, and the answers were the same objects

    directory.generation += 1  # an identity was cached or dropped since
    directory.good_for = -1.0  # and from now on the answers expire at once
    reader.snapshot()
    assert directory.asked == asked + 4
    reader.snapshot()
    reader.snapshot()
    assert directory.asked == asked + 8

    directory.same = False  # another answer: the processes with its fields
    changed = reader.snapshot()
    assert changed.gpus[0].processes is not first.gpus[0].processes
    assert [p.user for p in changed.gpus[0].processes[:2]] == ["v3000000", "v3000001"]
    assert first.gpus[0].processes[0].user == "u3000000"


def test_get_all_answers_as_get_and_says_until_when() -> None:
    import time

    cache: PidCache[str] = PidCache(lambda pid: f"p{pid}", ttl_s=30, missing=lambda pid: f"gone {pid}")
    me = os.getpid()
    generation = cache.generation
    before = time.monotonic()
    values, good_until = cache.get_all({me: process_start(me), 2**22 + 1: None})
    assert values == [f"p{me}", f"gone {2**22 + 1}"] == [cache.get(me), cache.get(2**22 + 1)]
    assert before + 30 <= good_until <= time.monotonic() + 30
    assert cache.generation == generation + 2  # two entries written
    assert cache.get_all({me: process_start(me)})[1] <= good_until  # the oldest entry decides
    cache.forget_all_but(set())
    assert cache.generation == generation + 4 and len(cache) == 0


def test_get_all_never_vouches_for_a_value_it_could_not_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu.sources import processes

    starts = iter([200])  # the process changed while it was looked up (100 before)
    monkeypatch.setattr(processes, "process_start", lambda pid: next(starts))
    cache: PidCache[str] = PidCache(lambda pid: "a mix")
    values, good_until = cache.get_all({42: 100})
    assert values == ["a mix"] and good_until == float("-inf") and len(cache) == 0


def test_process_starts_of_many_pids_is_process_start_of_each() -> None:
    pids = [os.getpid(), os.getppid(), *range(2**22 + 1, 2**22 + 100)]
    assert process_starts(pids) == {pid: process_start(pid) for pid in pids}
    assert list(process_starts(pids)) == pids  # in the order asked
