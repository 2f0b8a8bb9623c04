"""Simulated figures that move: a :class:`Track` is a value as a pure function of elapsed time.

A scenario's ``motion`` sections (see :mod:`jupyter_gpu.simulate.scenario`) give a GPU's
utilization, memory utilization, temperature and power, and a process's memory, as tracks:
keyframes ``[[seconds, value], ...]`` joined by straight lines, held before the first and after
the last, optionally repeating every ``loop_s`` seconds, with an optional ``jitter``: a smooth,
deterministic wobble of that fraction of the value (``0.03`` = ±3 %), so charts look alive. A
value of 0 does not wobble (an idle GPU stays at 0 %), and the result never leaves the field's
range (:attr:`Track.low`, :attr:`Track.high`).

Nothing here reads a clock or draws a random number: :meth:`Track.at` of the same elapsed time is
the same value in every process and on every run, so the moving ``demo`` is reproducible and
tests evaluate it at chosen times.
"""

from __future__ import annotations

import math
import zlib
from bisect import bisect_right
from dataclasses import dataclass

MAX_POINTS = 64
"""Keyframes per track."""
MAX_SECONDS = 10_000_000.0
"""The latest keyframe and the longest loop (about 116 days)."""

_WOBBLE_PERIODS_S = (11.0, 29.0)  # two incommensurate sine periods: an irregular-looking wobble


@dataclass(frozen=True)
class Track:
    """One moving figure (see the module docstring). ``points`` are ``(seconds, value)``,
    strictly increasing in time; ``whole`` rounds the value to a whole number."""

    points: tuple[tuple[float, float], ...]
    low: float
    high: float
    loop_s: float | None = None
    jitter: float = 0.0
    whole: bool = False
    seed: str = ""  # tracks with different seeds wobble out of step

    def at(self, elapsed_s: float) -> float:
        """The value ``elapsed_s`` seconds after the motion started."""
        t = elapsed_s % self.loop_s if self.loop_s else max(elapsed_s, 0.0)
        value = interpolate(self.points, t)
        if self.jitter and value:
            value += value * self.jitter * wobble(t, self.seed)
        value = min(max(value, self.low), self.high)
        return float(round(value)) if self.whole else value

    @property
    def peak(self) -> float:
        """The largest value the track can take (its highest keyframe with the jitter, within range)."""
        return min(max(v for _, v in self.points) * (1 + self.jitter), self.high)


def interpolate(points: tuple[tuple[float, float], ...], t: float) -> float:
    """The keyframes' value at ``t``: linear between two keyframes, held outside them."""
    times = [p[0] for p in points]
    after = bisect_right(times, t)
    if after == 0:
        return points[0][1]
    if after == len(points):
        return points[-1][1]
    (t0, v0), (t1, v1) = points[after - 1], points[after]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def wobble(t: float, seed: str) -> float:
    """A smooth deterministic wave in [-1, 1]; ``seed`` shifts its phase."""
    phase = zlib.crc32(seed.encode()) / 2**32 * 2 * math.pi
    slow, fast = _WOBBLE_PERIODS_S
    return 0.6 * math.sin(2 * math.pi * t / slow + phase) + 0.4 * math.sin(2 * math.pi * t / fast + 2 * phase)
