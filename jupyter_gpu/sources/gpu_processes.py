"""A GPU's processes from NVML's process arrays, sample after sample (for :mod:`.nvml`'s reader).

At thousands of processes per GPU the per-process work was most of a snapshot (issue 28 item 4:
64 GPUs x 2,000 processes). :class:`ProcessTable` keeps each GPU's last sample (:class:`_Memo`) and
answers a steady GPU with C-level comparisons only: when NVML's arrays are the same lists (the
reader hands back the last list when the array's bytes are the same), the MIG slices are the same,
every PID has the same start time, no identity was cached or dropped since (the directory's
``generation``) and none has expired, the last sample's tuple is returned as it is: exactly what
the identity cache would answer PID by PID. Otherwise one :meth:`ProcessDirectory.identify_all`
pass (the same rule as one PID's ``identify``); when it gives the same identities, the last tuple
again. Otherwise each process whose fields are all unchanged keeps its (immutable) object: a sample
then allocates little that lives on, which keeps the garbage collector's full collections rare.
"""

from __future__ import annotations

import operator
import threading
import time
from dataclasses import dataclass, replace

from ..core.snapshot import GpuProcess
from .processes import ProcessDirectory, ProcessIdentity, ProcListing, process_starts

#: One entry of NVML's process array: (pid, bytes or None, GPU instance id, compute instance id).
Entry = tuple[int, int | None, int, int]

_PID = operator.attrgetter("pid")


@dataclass(frozen=True, slots=True)
class _Memo:
    """One GPU's last sample: NVML's two lists as read, the MIG slices they were read with, the
    merged entries, the PIDs' start times, each PID's identity and until when those hold, the
    processes by PID and as returned."""

    compute: list[Entry]
    graphics: list[Entry]
    slices: dict[tuple[int, int], str] | None
    merged: dict[int, tuple[int | None, str, tuple[int, int]]]
    starts: dict[int, int | float | None]
    generation: int  # the identity cache's, once these identities were looked up
    good_until: float  # time.monotonic() when the first of these identities expires
    identities: list[ProcessIdentity]
    by_pid: dict[int, GpuProcess]
    result: tuple[GpuProcess, ...]


class ProcessTable:
    """Each GPU's processes sample after sample, identified through ``directory``.

    A snapshot calls :meth:`begin`, :meth:`processes` per GPU (from any one thread; concurrent
    snapshots each have their own sample state), then :meth:`end` with every GPU's processes.
    """

    def __init__(self, directory: ProcessDirectory) -> None:
        self.directory = directory
        self._last: dict[int, _Memo] = {}  # per GPU index
        self._last_forget: tuple[list[tuple[GpuProcess, ...]], int] | None = None  # see end()
        self._sample = threading.local()  # per snapshot, per thread: its /proc listing, its memos

    def begin(self) -> None:
        """A new sample: one listing of ``/proc`` for all its GPUs."""
        self._sample.listing = ProcListing()
        self._sample.memos = []  # the GPU indices whose memo this sample made

    def processes(
        self, index: int, compute: list[Entry], graphics: list[Entry], slices: dict[tuple[int, int], str] | None
    ) -> tuple[GpuProcess, ...]:
        """GPU ``index``'s processes from NVML's ``compute`` and ``graphics`` arrays (merged by
        PID); with ``slices`` ((GI id, CI id) -> MIG UUID) each carries its slice."""
        last = self._last.get(index)
        memo = last  # the last sample's, while it still says what this one would
        if memo is not None and memo.compute == compute and memo.graphics == graphics and memo.slices == slices:
            merged = memo.merged
        else:
            memo = None
            merged = _merged(compute, graphics)
        starts = process_starts(merged, getattr(self._sample, "listing", None))
        directory = self.directory
        if (
            memo is not None
            and memo.starts == starts
            and memo.generation == directory.generation
            and time.monotonic() < memo.good_until
        ):
            return memo.result  # the same processes, and every identity the cache would give again
        identities, good_until = directory.identify_all(starts)
        # After the look-ups (this pass's own entries count as seen; end() stamps this sample's
        # memos again). An entry another thread wrote meanwhile for one of these PIDs has another
        # start time (caught above next time) or replaces one that expires by good_until: an
        # identity is never reused longer than the cache's own TTL allows.
        generation = directory.generation
        memos = getattr(self._sample, "memos", None)
        if memos is not None:
            memos.append(index)
        if memo is not None and memo.identities == identities:  # the same objects: compared by identity first
            self._last[index] = replace(memo, starts=starts, generation=generation, good_until=good_until)
            return memo.result
        previous = last.by_pid if last is not None else {}
        current: dict[int, GpuProcess] = {}
        for (pid, (memory, kind, instance)), identity in zip(merged.items(), identities, strict=True):
            known = previous.get(pid)
            slice_uuid = None if slices is None else slices.get(instance)
            if (
                known is not None
                and known.memory == memory
                and known.type == kind
                and known.user == identity.user
                and known.name == identity.name
                and known.command == identity.command
                and known.slice == slice_uuid
            ):
                current[pid] = known
            else:
                current[pid] = GpuProcess(
                    pid=pid,
                    memory=memory,
                    user=identity.user,
                    name=identity.name,
                    type=kind,
                    command=identity.command,
                    slice=slice_uuid,
                )
        result = tuple(current.values())
        self._last[index] = _Memo(
            compute, graphics, slices, merged, starts, generation, good_until, identities, current, result
        )
        return result

    def end(self, processes: list[tuple[GpuProcess, ...]]) -> None:
        """The sample is read (``processes``: every GPU's). Drop the cached identities of PIDs on no
        GPU now (nothing to do when every GPU's processes are the very tuples of the last time and
        no identity was cached since); then this sample's own look-ups (one GPU's pass caching PIDs
        another GPU's memo does not hold) stop counting against its memos."""
        directory = self.directory
        last = self._last_forget
        if not (
            last is not None
            and last[1] == directory.generation
            and len(last[0]) == len(processes)
            and all(a is b for a, b in zip(last[0], processes, strict=True))
        ):
            on_gpus: set[int] = set()
            for each in processes:
                on_gpus.update(map(_PID, each))
            directory.forget_all_but(on_gpus)
            self._last_forget = (processes, directory.generation)
        generation = directory.generation
        for index in getattr(self._sample, "memos", ()):
            self._last[index] = replace(self._last[index], generation=generation)


def _merged(compute: list[Entry], graphics: list[Entry]) -> dict[int, tuple[int | None, str, tuple[int, int]]]:
    """PID -> (bytes, "compute", "graphics" or "compute+graphics", (GI id, CI id)): a process in
    both lists once, with the larger of its two figures."""
    merged: dict[int, tuple[int | None, str, tuple[int, int]]] = {}
    for kind, entries in (("compute", compute), ("graphics", graphics)):
        for pid, memory, gi, ci in entries:
            if pid in merged:
                known_memory, known_kind, instance = merged[pid]
                both = None if known_memory is None and memory is None else max(known_memory or 0, memory or 0)
                merged[pid] = (both, f"{known_kind}+{kind}" if known_kind != kind else kind, instance)
            else:
                merged[pid] = (memory, kind, (gi, ci))
    return merged
