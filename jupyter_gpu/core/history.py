"""A bounded, per-GPU history of utilization and memory: what the sidebar's charts open with.

The server extension feeds every sample its sampler takes to one :class:`GpuHistory`
(:meth:`GpuHistory.record`) and serves :meth:`GpuHistory.to_dict` at ``GET
{base_url}jupyter-gpu/history``, so a sidebar opened (or reloaded) after minutes of work shows those
minutes at once instead of an empty chart.

Memory is fixed at construction and independent of how long the server runs: each GPU gets a ring
of ``capacity`` slots in three typed arrays (``array.array``): the sample time as a double (8
bytes), utilization as a signed byte (1 byte, -1 = unknown) and memory in use as tenths of a
percent of the GPU's total (2 bytes, 0xFFFF = unknown): 11 bytes per sample. 8 GPUs x 15 minutes
at 1 s is 8 x 900 x 11 B = 79 KB of buffers (:meth:`GpuHistory.nbytes` counts them with the objects
around them; ``tests/test_history.py`` measures the allocation with ``tracemalloc``). The number of
GPUs is bounded too (:data:`MAX_GPUS`), and a GPU that left the machine is forgotten once its
newest sample is older than the window.

The history holds what the sampler saw: the server samples only while somebody polls (see
``JupyterGpuServer.linger_s``), so a time when nobody looked is a gap, which the charts draw as one.
This module is pure: no tornado, no IPython, no NVML.
"""

from __future__ import annotations

import bisect
import math
import sys
import threading
from array import array
from typing import Any

from .snapshot import GpuInfo, Snapshot
from .wire import finite, maybe, number

MAX_GPUS = 64
MAX_SAMPLES_PER_GPU = 3600
_UNKNOWN_UTIL = -1
_UNKNOWN_MEMORY = 0xFFFF


class _Ring:
    """One GPU's samples, oldest first once read: fixed-size typed arrays and a write cursor."""

    __slots__ = ("count", "index", "memory", "name", "next", "times", "utilization")

    def __init__(self, capacity: int, index: int, name: str) -> None:
        self.times = array("d", bytes(8 * capacity))
        self.utilization = array("b", bytes(capacity))
        self.memory = array("H", bytes(2 * capacity))
        self.next = 0  # slot the next sample goes to
        self.count = 0  # filled slots (<= capacity)
        self.index = index
        self.name = name

    @property
    def capacity(self) -> int:
        return len(self.times)

    @property
    def newest(self) -> float:
        return self.times[(self.next - 1) % self.capacity] if self.count else -math.inf

    def append(self, t: float, utilization: int, memory_permille: int) -> None:
        slot = self.next
        self.times[slot] = t
        self.utilization[slot] = utilization
        self.memory[slot] = memory_permille
        self.next = (slot + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def ordered(self) -> tuple[list[float], list[int], list[int]]:
        """(times, utilization codes, memory codes), oldest first (copies, taken under the lock)."""
        if self.count < self.capacity:
            return (
                self.times[: self.count].tolist(),
                self.utilization[: self.count].tolist(),
                self.memory[: self.count].tolist(),
            )
        cut = self.next
        return (
            (self.times[cut:] + self.times[:cut]).tolist(),
            (self.utilization[cut:] + self.utilization[:cut]).tolist(),
            (self.memory[cut:] + self.memory[:cut]).tolist(),
        )

    def nbytes(self) -> int:
        return (
            sys.getsizeof(self)
            + sys.getsizeof(self.times)
            + sys.getsizeof(self.utilization)
            + sys.getsizeof(self.memory)
            + sys.getsizeof(self.name)
        )


def _utilization_code(gpu: GpuInfo) -> int:
    value = gpu.utilization
    if gpu.error is not None or not finite(value):  # finite: never OverflowError, whatever the int
        return _UNKNOWN_UTIL
    return int(min(100, max(0, round(value))))


def _memory_code(gpu: GpuInfo) -> int:
    used, total = gpu.memory_used, gpu.memory_total
    if gpu.error is not None or not finite(total) or not finite(used) or total <= 0:
        return _UNKNOWN_MEMORY
    # compared before dividing: an int beyond any float (from a remote snapshot) cannot overflow
    share = 1.0 if used >= total else used / total
    return round(1000 * min(1.0, max(0.0, share)))


class GpuHistory:
    """The last ``window_s`` seconds of every GPU, one slot per sample at ``interval_s``.

    Parameters
    ----------
    window_s:
        How far back the history reaches (seconds, > 0). Default 15 minutes.
    interval_s:
        The sampling interval the history is sized for (seconds, > 0): each GPU gets
        ``ceil(window_s / interval_s)`` slots, at most :data:`MAX_SAMPLES_PER_GPU` (a faster sampler
        then keeps a shorter history rather than more memory).

    Thread-safe: the sampling thread records while the event loop reads.
    """

    def __init__(self, window_s: float = 900.0, interval_s: float = 1.0) -> None:
        for name, value in (("window_s", window_s), ("interval_s", interval_s)):
            if maybe(number, value, name, 0) in (None, 0):  # not a finite number > 0 (10**400 neither)
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        self.window_s = float(window_s)
        self.interval_s = float(interval_s)
        self.capacity = max(2, min(MAX_SAMPLES_PER_GPU, math.ceil(self.window_s / self.interval_s)))
        self._rings: dict[str, _Ring] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Samples held, over all GPUs."""
        return sum(ring.count for ring in self._rings.values())

    def record(self, snapshot: Snapshot) -> None:
        """Append one sample per GPU of ``snapshot``; a snapshot without NVML records nothing.

        A sample not newer than the GPU's newest one (the same snapshot twice) is ignored.
        """
        stamp = maybe(number, snapshot.timestamp, "timestamp")
        if not snapshot.nvml_available or stamp is None:
            return
        # Kept to the millisecond, as served: a client's ``since`` (a time it was sent) then names
        # exactly that sample, and ``since`` never returns it again.
        t = round(stamp, 3)
        with self._lock:
            for gpu in snapshot.gpus:
                key = gpu.uuid or f"index-{gpu.index}"
                ring = self._rings.get(key)
                if ring is None:
                    if len(self._rings) >= MAX_GPUS:
                        self._forget_older_than(t - self.window_s)
                        if len(self._rings) >= MAX_GPUS:
                            continue
                    ring = self._rings[key] = _Ring(self.capacity, gpu.index, gpu.name)
                elif t <= ring.newest:
                    continue
                ring.index = gpu.index
                ring.append(t, _utilization_code(gpu), _memory_code(gpu))
            self._forget_older_than(t - self.window_s)

    def _forget_older_than(self, oldest: float) -> None:
        for key in [key for key, ring in self._rings.items() if ring.newest < oldest]:
            del self._rings[key]

    def to_dict(self, since: float | None = None, now: float | None = None) -> dict[str, Any]:
        """The JSON answer of ``GET jupyter-gpu/history``: per GPU, columns oldest first.

        ::

            {"window_s": float, "interval_s": float, "capacity": int,
             "gpus": [{"index": int, "uuid": str,
                       "t": [float, ...],                 (epoch seconds)
                       "utilization": [int|null, ...],    (percent)
                       "memory": [float|null, ...]}]}     (percent of memory_total, one decimal)

        Only samples newer than ``since`` (epoch seconds) and within the window before ``now``
        (default: the newest sample) are included.
        """
        with self._lock:
            rings = sorted(self._rings.items(), key=lambda item: (item[1].index, item[0]))
            newest = max((ring.newest for _, ring in rings), default=-math.inf)
            oldest = (newest if now is None else now) - self.window_s
            if since is not None:
                oldest = max(oldest, since)
            columns = [(uuid, ring.index, ring.ordered()) for uuid, ring in rings]
        gpus = []
        for uuid, index, (times, utilization, memory) in columns:
            first = bisect.bisect_right(times, oldest)
            gpus.append(
                {
                    "index": index,
                    "uuid": uuid,
                    "t": list(times[first:]),
                    "utilization": [None if u == _UNKNOWN_UTIL else u for u in utilization[first:]],
                    "memory": [None if m == _UNKNOWN_MEMORY else m / 10 for m in memory[first:]],
                }
            )
        return {"window_s": self.window_s, "interval_s": self.interval_s, "capacity": self.capacity, "gpus": gpus}

    def nbytes(self) -> int:
        """Bytes held by the history's objects (buffers, rings, the table of GPUs)."""
        with self._lock:
            return (
                sys.getsizeof(self)
                + sys.getsizeof(self._rings)
                + sum(sys.getsizeof(key) + ring.nbytes() for key, ring in self._rings.items())
            )
