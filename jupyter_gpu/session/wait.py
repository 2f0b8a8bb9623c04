"""``%gpu_select auto:N --wait`` and ``jupyter-gpu run --wait``: try once a second until the GPUs fit,
the time is up, or an interrupt.

A live line says what is awaited, who holds each GPU and how long it has waited (the face shows it:
a notebook output replaced in place, a terminal line on stderr). Nothing changes until the selection
is made: when the time is up or the wait is interrupted, the plan is as it was. A refusal is one
line, raised as the session's :attr:`~jupyter_gpu.session.plan_session.PlanSession.refused`.
Time is this module's :data:`_clock` and :data:`_sleep` (tests replace both).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.errors import PlanError
from ..core.i18n import N_, _, ngettext
from ..core.units import format_bytes, format_duration
from . import plan_session, report
from .plan_session import NoGpuFitsError, PlanSession
from .report import listed, shown

if TYPE_CHECKING:
    from ..plan import GpuPlan

POLL_INTERVAL_S = 1.0  # %gpu_select --wait reads NVML at most once a second
_clock = time.monotonic
_sleep = time.sleep
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``90``/``90s``, ``30m``, ``1.5h`` as seconds; a one-line :class:`~jupyter_gpu.plan.PlanError` otherwise."""
    import re

    match = re.fullmatch(r"\s*([0-9]{1,7}(?:\.[0-9]{1,3})?)\s*(s|sec|m|min|h)?\s*", text, re.IGNORECASE)
    if match is None:
        raise PlanError(
            _("--wait {text} is not a duration; give e.g. 90s, 30m or 2h (a plain number is seconds)").format(
                text=repr(text)
            )
        )
    seconds = float(match[1]) * _DURATION_UNITS[(match[2] or "").lower()]
    if not 0 < seconds <= 7 * 86400:
        raise PlanError(_("--wait {text} must be more than 0 and at most 7 days").format(text=repr(text)))
    return seconds


STOP_HINT = N_("interrupt the kernel to stop; nothing changes until the GPUs fit")
"""How the progress line says to stop waiting (a face with another way says its own: Ctrl-C); marked
text, translated where it is shown (a face's own hint too)."""


def waiting_line(
    spec: str,
    min_free: str | None,
    snapshot: Any,
    claims: dict[int | str, int],
    waited: float,
    wait_s: float,
    stop_hint: str | None = None,
) -> str:
    """One line: what is awaited, who holds each GPU now, how long it has waited."""
    want = (
        _("{spec} with at least {size} free").format(spec=spec, size=min_free)
        if min_free
        else _("{spec} without other users' work").format(spec=spec)
    )
    parts = []
    own = os.getpid()
    me = plan_session.current_user()
    for gpu in getattr(snapshot, "gpus", ()):
        holders: dict[str, int] = {}
        for process in gpu.processes:
            if process.pid == own or process.type == "graphics":
                continue
            who = _("you") if me is not None and process.user == me else shown(process.user, f"PID {process.pid}")
            holders[who] = holders.get(who, 0) + (process.memory or 0)
        clauses = [_("GPU {index}: {free} free").format(index=gpu.index, free=format_bytes(gpu.memory_free))]
        if holders:
            clauses.append(listed([f"{name} {format_bytes(size)}" for name, size in holders.items()]))
        part = report.clauses(clauses)
        count = claims.get(gpu.index)
        if count:
            part = ngettext("{gpu}, {count} claim", "{gpu}, {count} claims", count).format(gpu=part, count=count)
        parts.append(part)
    gpus = " | ".join(parts) or _("NVML shows no GPU")
    return _("Waiting for {want} — {gpus} — waited {waited} of {wait} ({stop_hint})").format(
        want=want,
        gpus=gpus,
        waited=format_duration(waited),
        wait=format_duration(wait_s),
        stop_hint=_(stop_hint or STOP_HINT),
    )


Progress = Callable[[Any, str], Any]


class FinalLine(str):
    """The wait's last progress line ("Waited 3 s for auto:1: the GPUs fit now."), in any language:
    a face that rewrites its line in place ends it here."""


"""How a face shows the progress line: ``show(handle, text) -> handle`` (``handle`` None the first time)."""


def wait_and_select(
    session: PlanSession,
    spec: str,
    wait_s: float,
    changes: dict[str, Any],
    show: Progress,
    magic: str = "%gpu_select",
    stop_hint: str | None = None,
) -> GpuPlan | None:
    """Select ``spec`` (with ``changes``) through ``session`` once the GPUs fit, waiting up to ``wait_s``
    seconds, showing the progress line with ``show``; ``session.refused`` (one line) when the time
    is up or on an interrupt, with nothing changed. An interrupt held while a try took the GPUs
    (:class:`_Attempt`) leaves the selection made and said, then is raised (``KeyboardInterrupt``)."""
    from ..plan import parse_size

    if changes.get("min_free"):  # a malformed size is reported before any waiting
        try:
            parse_size(changes["min_free"])
        except ValueError as error:
            raise session.refused(str(error)) from None
    started = _clock()
    handle = None
    attempt = _Attempt()
    try:
        while True:
            last = _clock() - started + POLL_INTERVAL_S >= wait_s  # the "would fit if" hints only then
            no_fit = attempt.run(session, magic, changes, hints=last)
            if no_fit is None:
                break
            if attempt.interrupted:
                raise KeyboardInterrupt
            waited = _clock() - started
            if waited >= wait_s:
                raise session.refused(
                    _("no GPUs fit after waiting {waited}: {error}; nothing was changed").format(
                        waited=format_duration(waited), error=no_fit
                    )
                ) from None
            line = waiting_line(
                spec, changes.get("min_free"), session.last_snapshot, session.last_claims, waited, wait_s, stop_hint
            )
            handle = show(handle, line)
            _sleep(POLL_INTERVAL_S)
    except KeyboardInterrupt as interrupt:
        if attempt.committed:  # it landed as the GPUs were taken: the plan is applied, the interrupt stands
            raise
        # the interrupt stays the cause: a command-line face exits as interrupted (130), not refused
        raise session.refused(
            _("stopped waiting for {spec} after {waited} (interrupted); nothing was changed").format(
                spec=spec, waited=format_duration(_clock() - started)
            )
        ) from interrupt
    if handle is not None:
        waited = _clock() - started
        show(
            handle,
            FinalLine(
                _("Waited {waited} for {spec}: the GPUs fit now.").format(waited=format_duration(waited), spec=spec)
            ),
        )
    if attempt.interrupted:  # the GPUs were taken as the interrupt came: said above, then the cell stops
        raise KeyboardInterrupt
    return attempt.plan


class _Attempt:
    """One try at the selection, with the user's interrupt (SIGINT) held while it runs: a selection that
    claims GPUs is made whole or not started, never left half made by an interrupt landing between the
    plan and its claim. A held interrupt is :attr:`interrupted`, for the loop to act on after.

    Held only where Python's own handler would raise it (the main thread, SIGINT raising
    ``KeyboardInterrupt``, as in a kernel's cell or ``jupyter-gpu run``); any other handler is left in
    charge."""

    def __init__(self) -> None:
        self.plan: GpuPlan | None = None
        self.committed = False
        self.interrupted = False

    def run(self, session: PlanSession, magic: str, changes: dict[str, Any], hints: bool) -> NoGpuFitsError | None:
        """Try once; the :class:`NoGpuFitsError` when nothing fits now, None when the attempt ended
        (:attr:`plan` applied, or None when a framework already uses the GPU)."""
        held = threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        if held:
            signal.signal(signal.SIGINT, self._hold)
        try:
            self.plan = session.change_if_fits(
                magic, require_idle=not changes.get("min_free"), hints=hints, host_sample=True, **changes
            )
            self.committed = True
            return None
        except NoGpuFitsError as error:
            return error
        finally:
            if held:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    def _hold(self, signum: int, frame: Any) -> None:
        self.interrupted = True
