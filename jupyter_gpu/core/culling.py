"""The GPU-aware idle rule and the culling countdown, written once for every face.

A kernel counts as **idle** when it holds GPU memory and nothing ran in it for at least the idle
threshold; a kernel is a **culling candidate** only while it holds GPU memory and is not busy, and
is shut down once it has been idle ``cull_idle_after_s``. The server extension applies the rule to
its kernels (and counts down to culling); the hub service applies the idle part to the kernels it
reads from Prometheus, where the user servers' flags are not carried. Both are faces, which may
not import each other, so the rule lives here, below both.
"""

from __future__ import annotations


def is_idle(idle_s: float | None, holds_memory: bool, threshold_s: float) -> bool:
    """Whether a kernel idle ``idle_s`` seconds (None: unknown) counts as idle: it holds GPU memory
    and has been idle at least ``threshold_s``."""
    return bool(idle_s is not None and idle_s >= threshold_s and holds_memory)


def cull_in_s(idle_s: float | None, holds_memory: bool, busy: bool, cull_after_s: float) -> float | None:
    """Seconds until the culler shuts the kernel down (0: due now), rounded to milliseconds.

    None when it never will as things stand: culling is off (``cull_after_s`` <= 0), the kernel
    holds no GPU memory, is busy, or its idle time is unknown.
    """
    if cull_after_s <= 0 or not holds_memory or idle_s is None or busy:
        return None
    return round(max(0.0, cull_after_s - idle_s), 3)


def cull_warning(seconds_to_cull: float | None, warn_s: float) -> bool:
    """Whether a kernel ``seconds_to_cull`` away from culling is warned about (within ``warn_s``)."""
    return seconds_to_cull is not None and seconds_to_cull <= warn_s
