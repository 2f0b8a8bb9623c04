"""``%gpu_select auto:N --wait``: try once a second until the GPUs fit, the time is up, or an interrupt.

A live line says what is awaited, who holds each GPU and how long it has waited. Nothing changes
until the selection is made: when the time is up or the kernel is interrupted, the plan is as it was.
Time is this module's :data:`_clock` and :data:`_sleep` (tests replace both).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..core.units import format_bytes, format_duration
from .plan_report import shown
from .session import NoGpuFitsError, PlanSession, current_user

if TYPE_CHECKING:
    from ..plan import GpuPlan

POLL_INTERVAL_S = 1.0  # %gpu_select --wait reads NVML at most once a second
_clock = time.monotonic
_sleep = time.sleep
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``90``/``90s``, ``30m``, ``1.5h`` as seconds; a one-line UsageError otherwise."""
    import re

    match = re.fullmatch(r"\s*([0-9]{1,7}(?:\.[0-9]{1,3})?)\s*(s|sec|m|min|h)?\s*", text, re.IGNORECASE)
    if match is None:
        raise UsageError(f"--wait {text!r} is not a duration; give e.g. 90s, 30m or 2h (a plain number is seconds)")
    seconds = float(match[1]) * _DURATION_UNITS[(match[2] or "").lower()]
    if not 0 < seconds <= 7 * 86400:
        raise UsageError(f"--wait {text!r} must be more than 0 and at most 7 days")
    return seconds


def _waiting_line(
    spec: str, min_free: str | None, snapshot: Any, claims: dict[int | str, int], waited: float, wait_s: float
) -> str:
    """One line: what is awaited, who holds each GPU now, how long it has waited."""
    want = f"{spec} with at least {min_free} free" if min_free else f"{spec} without other users' work"
    parts = []
    own = os.getpid()
    me = current_user()
    for gpu in getattr(snapshot, "gpus", ()):
        holders: dict[str, int] = {}
        for process in gpu.processes:
            if process.pid == own or process.type == "graphics":
                continue
            who = "you" if me is not None and process.user == me else shown(process.user, f"PID {process.pid}")
            holders[who] = holders.get(who, 0) + (process.memory or 0)
        who = ", ".join(f"{name} {format_bytes(size)}" for name, size in holders.items())
        claimed = f", {claims[gpu.index]} claim{'s' if claims[gpu.index] > 1 else ''}" if claims.get(gpu.index) else ""
        parts.append(f"GPU {gpu.index}: {format_bytes(gpu.memory_free)} free{'; ' + who if who else ''}{claimed}")
    gpus = " | ".join(parts) or "NVML shows no GPU"
    return (
        f"Waiting for {want} — {gpus} — waited {format_duration(waited)} of {format_duration(wait_s)} "
        "(interrupt the kernel to stop; nothing changes until the GPUs fit)"
    )


def _show_progress(handle: Any, text: str) -> Any:
    """Show ``text`` in one output line that is replaced at each update (printed again outside Jupyter)."""
    from IPython.display import Pretty, display

    if handle is None:
        return display(Pretty(text), display_id=True)
    handle.update(Pretty(text))
    return handle


def wait_and_select(session: PlanSession, spec: str, wait_s: float, changes: dict[str, Any]) -> GpuPlan | None:
    """Select ``spec`` (with ``changes``) through ``session`` once the GPUs fit, waiting up to ``wait_s``
    seconds; a UsageError when the time is up or on an interrupt, with nothing changed."""
    from ..plan import parse_size

    if changes.get("min_free"):  # a malformed size is reported before any waiting
        try:
            parse_size(changes["min_free"])
        except ValueError as error:
            raise UsageError(str(error)) from None
    started = _clock()
    handle = None
    while True:
        try:
            last = _clock() - started + POLL_INTERVAL_S >= wait_s  # the "would fit if" hints only then
            plan = session.change_if_fits(
                "%gpu_select", require_idle=not changes.get("min_free"), hints=last, host_sample=True, **changes
            )
        except NoGpuFitsError as error:
            waited = _clock() - started
            if waited >= wait_s:
                raise UsageError(
                    f"no GPUs fit after waiting {format_duration(waited)}: {error}; nothing was changed"
                ) from None
            line = _waiting_line(
                spec, changes.get("min_free"), session.last_snapshot, session.last_claims, waited, wait_s
            )
            handle = _show_progress(handle, line)
            try:
                _sleep(POLL_INTERVAL_S)
            except KeyboardInterrupt:
                raise UsageError(
                    f"stopped waiting for {spec} after {format_duration(_clock() - started)} "
                    "(interrupted); nothing was changed"
                ) from None
            continue
        if handle is not None:
            waited = _clock() - started
            _show_progress(handle, f"Waited {format_duration(waited)} for {spec}: the GPUs fit now.")
        return plan
