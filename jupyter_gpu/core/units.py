"""Memory sizes and durations as jupyter_gpu shows them everywhere.

The twins, kept to these rules and pinned by the same golden table (``tests/golden/format.json``),
are ``formatBytes``/``formatDuration`` in ``labextension/src/format.ts`` and the ``format``
namespace of ``jupyter_gpu/hub/static/console.js``.

**Bytes** (:func:`format_bytes`): binary units, as nvidia-smi counts. From 1 GiB up: GiB with one
decimal, dropped when it is zero ("80 GiB", "74.2 GiB", "123.4 GiB"), so a limit typed as ``8GiB``
reads back as ``8 GiB``. Below: whole MiB ("512 MiB"), except that what rounds to 1024 MiB reads
"1 GiB". Rounding is half-up on the exact byte count: the value is first rounded half-up to whole
bytes, then to tenths of a GiB (or whole MiB) in integer arithmetic, so a tie such as 39.25 GiB
reads "39.3 GiB" in every face (no binary-float half-to-even). A negative size reads as its
magnitude with "-" in front ("-2 GiB"; no "-0 MiB"); an unknown one (``None``, NaN, infinite) as
"—". Exact up to 2**53 bytes, where JavaScript numbers stop being integers.

**Durations** (:func:`format_duration`): whole seconds rounded down, then the two largest units
that matter: "45 s", "12 min" (no seconds from a minute up), "3 h 5 min", "2 d 4 h". Negative
durations read "0 s", unknown ones "—".
"""

from __future__ import annotations

import math

MIB = 1024**2
GIB = 1024**3

UNKNOWN = "—"


def _known(value: float | None) -> bool:
    """A number to show: not None, not a bool, finite (any int is; ``math.isfinite`` overflows on 10**400)."""
    if value is None or isinstance(value, bool):
        return False
    return isinstance(value, int) or math.isfinite(value)


def format_bytes(value: float | None) -> str:
    """``80 GiB``, ``74.2 GiB``, ``512 MiB``, ``-2 GiB``; ``—`` when unknown (the module's rule)."""
    if value is None or not _known(value):
        return UNKNOWN
    magnitude = abs(value)
    count = int(magnitude)  # exact: a float's integer part, then half-up on the fraction
    if magnitude - count >= 0.5:
        count += 1
    mebibytes = (2 * count + MIB) // (2 * MIB)
    if count < GIB and mebibytes < 1024:
        text = f"{mebibytes} MiB"
    else:
        whole, tenth = divmod((20 * count + GIB) // (2 * GIB), 10)
        text = f"{whole}.{tenth} GiB" if tenth else f"{whole} GiB"
    return f"-{text}" if value < 0 and text != "0 MiB" else text


def format_duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 5 min``, ``1 h``, ``2 d 4 h``, ``1 d``; ``—`` when unknown (the module's rule)."""
    if seconds is None or not _known(seconds):
        return UNKNOWN
    whole = max(0, math.floor(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    # "1 h", not "1 h 0 min": a zero part is left out (the sidebar's "idle after 1 h").
    if hours < 24:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h" if hours % 24 else f"{hours // 24} d"
