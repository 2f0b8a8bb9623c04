"""The one rule of "free": what a GPU (or MIG slice) is to the user looking at it, in the same words
on every face.

A unit is, in this order of precedence:

================================  =========================================================
``cannot be read``                NVML gave an error for it
``in use by others``              another user's compute process holds memory on it
``in use by you``                 only this user's compute processes hold memory on it
``reserved by another user``      no job on it, but another user's kernel or ``jupyter-gpu run``
                                  chose it (a claim, :mod:`jupyter_gpu.sources.claims`)
``reserved by you``               no job on it, but one of this user's kernels or runs chose it
``in use``                        no job anybody can see, yet more than :data:`FREE_MEMORY_BYTES`
                                  used (a process in another container, NVML hiding PIDs)
``free``                          none of the above
================================  =========================================================

Graphics-only processes (the display server) are not jobs, as ``auto`` counts them. A GPU in MIG
mode is judged by its slices (each slice by this rule), never free as a whole.

:func:`availability` is the rule over plain facts; its TypeScript twin is ``availability`` in
``labextension/src/overview.ts``, and both are checked against ``tests/golden/availability.json``.
:func:`unit_availability` gathers the facts from a :class:`~jupyter_gpu.core.snapshot.GpuInfo`
or :class:`~jupyter_gpu.core.snapshot.MigSlice` and the host's :class:`Reservation` list.

The words are also values of the JSON answers (``availability``) and stay English there; a face
shows them to a person through :func:`label` (in the user's language, :mod:`jupyter_gpu.core.i18n`).

A :class:`Reservation` is a claim as a face may show it: another user's has no label, PID or
command (``own`` False: "reserved by another user" is all anybody else learns).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .i18n import N_, _
from .snapshot import GpuInfo, GpuProcess, MigSlice
from .text import display_text
from .units import format_duration

__all__ = [
    "CANNOT_BE_READ",
    "FREE",
    "FREE_MEMORY_BYTES",
    "IN_USE",
    "IN_USE_BY_OTHERS",
    "IN_USE_BY_YOU",
    "RESERVED_BY_ANOTHER_USER",
    "RESERVED_BY_YOU",
    "Reservation",
    "Viewer",
    "availability",
    "label",
    "reservations_of",
    "run_description",
    "run_of",
    "unit_availability",
]

FREE = "free"
IN_USE_BY_YOU = "in use by you"
IN_USE_BY_OTHERS = "in use by others"
IN_USE = "in use"
RESERVED_BY_YOU = "reserved by you"
RESERVED_BY_ANOTHER_USER = "reserved by another user"
CANNOT_BE_READ = "cannot be read"

#: The words as a person reads them (marked for translation; :func:`label`).
LABELS = {
    FREE: N_("free"),
    IN_USE_BY_YOU: N_("in use by you"),
    IN_USE_BY_OTHERS: N_("in use by others"),
    IN_USE: N_("in use"),
    RESERVED_BY_YOU: N_("reserved by you"),
    RESERVED_BY_ANOTHER_USER: N_("reserved by another user"),
    CANNOT_BE_READ: N_("cannot be read"),
}


def label(state: str) -> str:
    """One of the rule's words (``free``, ``in use by you`` ...) in the user's language."""
    return _(LABELS[state]) if state in LABELS else state


FREE_MEMORY_BYTES = 512 * 1024**2
"""Memory a unit may show as used and still be free: what the driver and a display server hold on
an otherwise empty card (a few hundred MiB at most), not a job."""


@dataclass(frozen=True)
class Reservation:
    """A GPU chosen by a kernel or a run (a live claim), as a face may show it.

    ``holding``: the claimant (or the run's child, or one of their descendants) already holds
    memory on the GPU, so it is "in use", not reserved; kept so that a run's processes can be
    shown as the user's own. ``label``, ``pid`` and ``child_pid`` are set for this user's own
    claims only (``own``); another user's reservation says nothing but that it exists.
    """

    gpu_uuid: str
    own: bool
    kind: str = "kernel"
    since: float = 0.0
    label: str = ""
    pid: int | None = None
    child_pid: int | None = None
    holding: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The answer's form: another user's reservation is ``{"own": false}`` and nothing more."""
        if not self.own:
            return {"own": False}
        return {"own": True, "kind": self.kind, "label": self.label, "since": self.since}


def availability(
    *,
    error: bool,
    memory_used: float,
    jobs_yours: int,
    jobs_others: int,
    reserved_yours: bool,
    reserved_others: bool,
) -> str:
    """The words for one GPU or MIG slice from plain facts (the table in this module's docstring)."""
    if error:
        return CANNOT_BE_READ
    if jobs_others:
        return IN_USE_BY_OTHERS
    if jobs_yours:
        return IN_USE_BY_YOU
    if reserved_others:
        return RESERVED_BY_ANOTHER_USER
    if reserved_yours:
        return RESERVED_BY_YOU
    if memory_used >= FREE_MEMORY_BYTES:
        return IN_USE
    return FREE


def _is_yours(process: GpuProcess, me: str | None, own_pids: Collection[int]) -> bool:
    return process.pid in own_pids or (me is not None and process.user == me)


def reservations_of(uuid: str, reservations: Iterable[Reservation]) -> list[Reservation]:
    """The reservations (claims whose process holds nothing there yet) of the unit ``uuid``."""
    return [r for r in reservations if r.gpu_uuid == uuid and not r.holding]


def unit_availability(
    unit: GpuInfo | MigSlice,
    reservations: Sequence[Reservation] = (),
    me: str | None = None,
    own_pids: Collection[int] = (),
) -> str:
    """:func:`availability` of a GPU or slice: ``me`` names this user (a process of that user is
    yours), ``own_pids`` are processes known to be this user's (a run's, a kernel's, in a container)."""
    jobs = [p for p in unit.processes if p.type != "graphics"]
    yours = sum(1 for p in jobs if _is_yours(p, me, own_pids))
    held = reservations_of(unit.uuid, reservations)
    return availability(
        error=unit.error is not None,
        memory_used=unit.memory_used,
        jobs_yours=yours,
        jobs_others=len(jobs) - yours,
        reserved_yours=any(r.own for r in held),
        reserved_others=any(not r.own for r in held),
    )


def run_of(pid: int, ancestors: Iterable[int], reservations: Iterable[Reservation]) -> Reservation | None:
    """This user's run whose claiming process or child is ``pid`` or one of its ``ancestors`` (PIDs),
    None when it is no run's. Only the user's own claims are believed (about the user's own processes:
    the caller passes processes of this user only)."""
    line = {pid, *ancestors}
    for reservation in reservations:
        mine = reservation.own and reservation.kind == "run"
        if mine and (reservation.pid in line or (reservation.child_pid is not None and reservation.child_pid in line)):
            return reservation
    return None


def run_description(reservation: Reservation, now: float) -> str:
    """``train.py (jupyter-gpu run), 2 h``: a run as its owner sees it."""
    name = display_text(reservation.label or None, 80, missing="a command")
    return f"{name} (jupyter-gpu run), {format_duration(max(0.0, now - reservation.since))}"


@dataclass(frozen=True)
class Viewer:
    """Who looks at the GPUs, and the host's claims: what a Python face (the terminal, the panel)
    needs to say "reserved by you" and "yours: train.py (jupyter-gpu run), 2 h" by the one rule.

    ``me``: this user's name (a process of that user is yours); ``own_pids``: processes known to be
    this user's besides; ``reservations``: the host's (:func:`jupyter_gpu.sources.claims.viewer`);
    ``runs``: PID of one of this user's GPU processes → its run's description.
    """

    me: str | None = None
    own_pids: frozenset[int] = frozenset()
    reservations: tuple[Reservation, ...] = ()
    runs: Mapping[int, str] = field(default_factory=dict)

    def state(self, unit: GpuInfo | MigSlice) -> str:
        """The one rule's words for ``unit`` as this viewer sees it."""
        return unit_availability(unit, self.reservations, self.me, self.own_pids | frozenset(self.runs))

    def run(self, pid: int) -> str | None:
        """``yours: train.py (jupyter-gpu run), 2 h`` when ``pid`` is one of this user's runs, else None."""
        described = self.runs.get(pid)
        return None if described is None else f"yours: {described}"
