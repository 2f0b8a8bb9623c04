"""The user servers' reports and the admins' shutdown instructions (pure: no tornado, no I/O).

Each user server pushes its kernel table to the service every ``interval_s`` (``POST
api/report``) with its **own** JupyterHub token, which names its user; the service never sends a
credential to a user server (issue 27). This module holds the rules of that exchange; the
service's wiring (``hub.handlers``) checks the token with the hub and hands the body here.

A report (JSON, at most :data:`MAX_REPORT_BYTES`)::

    {"server": str,                     # JupyterHub's server name ("" for the default server)
     "kernels": [{"kernel_id": str, "notebook": str|null, "execution_state": str|null,
                  "idle_s": float|null, "cull_idle_s": float|null,
                  "pids": [int],        # the kernel's process and its descendants (this host's PIDs)
                  "reported_gpu_memory": {"<index>": int}|null}],   # containers: the kernel's own report
     "idle_threshold_s": float, "cull_idle_after_s": float|null}

The service's answer (:meth:`Board.answer`)::

    {"interval_s": float,               # when to report next
     "shutdown": [{"kernel_id": str, "by": str}]}   # the admins' instructions for this server

**What is believed.** A report is the user's own code speaking: it is believed only about GPU
processes that the user's system account owns (NVML's PID owner, ``--system-user``), checked at
the time of use (:func:`believed`). A report that is malformed or oversized (:func:`parse`), too
frequent (:meth:`Board.receive`: sooner than half an interval after the previous one of the same
server), or lying (naming a GPU process NVML shows owned by another account) is dropped, counted
in :attr:`Board.dropped`, and never believed; the user's previous report stays until it is stale
(two intervals without a report), when the console marks the row stale and accounting stops
counting its kernels (NVML's per-account memory still counts: a silent server hides nothing).

**Shutdown.** Only the service's admin endpoint calls :meth:`Board.ask_shutdown` (admins only,
checked there), for a kernel that the user's latest fresh report lists; the instruction goes to
that user's server in the answer to its next report, and nowhere else, with the admin's name for
the server's log. A user can only ever receive instructions about their own kernels, and only an
admin can cause one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import wire
from ..core.i18n import _, ngettext
from .core import KERNEL_ID, MAX_GPUS, MAX_KERNELS_PER_USER, Truth, UserServer, account_of

MAX_REPORT_BYTES = 1 << 20  # one report: 1,000 kernels with their PIDs fit in far less
MAX_PIDS_PER_KERNEL = 1000
MAX_PIDS = 20_000  # in one report
MAX_SERVERS_PER_USER = 16  # server names kept per user (more are dropped as "too_many_servers")
MAX_TEXT = 1024
SHUTDOWN_TTL_INTERVALS = 6  # an instruction no report picked up within this many intervals is dropped
DROP_REASONS = ("malformed", "oversized", "too_frequent", "lying", "too_many_servers")


class Refused(Exception):
    """A report that is dropped: ``reason`` is one of :data:`DROP_REASONS`, the message one line."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ReportedKernel:
    kernel_id: str
    notebook: str | None
    execution_state: str | None
    idle_s: float | None
    cull_idle_s: float | None
    pids: tuple[int, ...]
    reported_gpu_memory: dict[str, int] | None


@dataclass(frozen=True)
class Report:
    """One parsed report of one user server (what :func:`parse` returns)."""

    server: str
    kernels: tuple[ReportedKernel, ...]
    idle_threshold_s: float = 3600.0
    cull_idle_after_s: float | None = None

    def claimed_pids(self) -> set[int]:
        return {pid for kernel in self.kernels for pid in kernel.pids}


def parse(body: bytes) -> Report:
    """The report in ``body`` (untrusted bytes), or :class:`Refused` ("oversized", "malformed")."""
    if len(body) > MAX_REPORT_BYTES:
        raise Refused("oversized", f"a report is at most {MAX_REPORT_BYTES} bytes, this one has {len(body)}")
    try:
        fields = wire.Fields(wire.loads(body, max_bytes=MAX_REPORT_BYTES, max_depth=8), "report")
        kernels = []
        seen: set[str] = set()
        pids = 0
        for kernel in fields.objects("kernels", MAX_KERNELS_PER_USER):
            kernel_id = kernel.text("kernel_id", 128)
            if KERNEL_ID.fullmatch(kernel_id) is None:
                raise wire.WireError(f"{kernel.path('kernel_id')} is not a kernel id")
            if kernel_id in seen:
                raise wire.WireError(f"{kernel.path('kernel_id')} repeats {kernel_id!r}")
            seen.add(kernel_id)
            listed = kernel.items("pids", MAX_PIDS_PER_KERNEL, default=[])
            pids += len(listed)
            if pids > MAX_PIDS:
                raise wire.WireError(f"more than {MAX_PIDS} PIDs in one report")
            own = tuple(wire.integer(pid, f"{kernel.path('pids')}[{i}]", 1, 2**31 - 1) for i, pid in enumerate(listed))
            memory = kernel.data.get("reported_gpu_memory")
            reported = None
            if memory is not None:
                raw = kernel.mapping("reported_gpu_memory", MAX_GPUS, 8)
                reported = {
                    key: wire.integer(value, f"{kernel.path('reported_gpu_memory')}.{key}", 0, 1 << 53)
                    for key, value in raw.items()
                    if key.isdigit()
                }
            kernels.append(
                ReportedKernel(
                    kernel_id,
                    kernel.optional_text("notebook", MAX_TEXT * 16),
                    kernel.optional_text("execution_state", 32),
                    kernel.optional_number("idle_s", 0, 1e10),
                    kernel.optional_number("cull_idle_s", -1e10, 1e10),
                    own,
                    reported,
                )
            )
        return Report(
            fields.text("server", 255, 0, default=""),
            tuple(kernels),
            fields.number("idle_threshold_s", 0, 1e10, default=3600.0),
            fields.optional_number("cull_idle_after_s", 0, 1e10),
        )
    except wire.WireError as error:
        raise Refused("malformed", f"the report is malformed: {error}") from None


def foreign_claims(report: Report, truth: Truth, account: str) -> list[int]:
    """The PIDs ``report`` claims that NVML (``truth``) shows owned by an account other than
    ``account``: a lie about another user's process (empty: none)."""
    return sorted(
        pid
        for pid in report.claimed_pids()
        if any(owner is not None and owner != account for _, owner, _ in truth.by_pid.get(pid, ()))
    )


def as_snapshot(report: Report) -> dict[str, Any]:
    """``report`` in the shape :func:`jupyter_gpu.hub.core.user_kernels` reads (the user server's
    ``jupyter-gpu/snapshot``): each claimed PID under its kernel, the kernels' fields as reported."""
    return {
        "gpus": [
            {
                "processes": [
                    {"pid": pid, "kernel_id": kernel.kernel_id} for kernel in report.kernels for pid in kernel.pids
                ]
            }
        ],
        "kernels": [
            {
                "kernel_id": kernel.kernel_id,
                "notebook": kernel.notebook,
                "execution_state": kernel.execution_state,
                "idle_s": kernel.idle_s,
                "reported_gpu_memory": kernel.reported_gpu_memory,
            }
            for kernel in report.kernels
        ],
        # user_kernels computes idle and cull_in_s from these and the memory it checked
        "idle_threshold_s": report.idle_threshold_s,
        "cull_idle_after_s": report.cull_idle_after_s,
        "cull_idle_s": {kernel.kernel_id: kernel.cull_idle_s for kernel in report.kernels},
    }


@dataclass
class Received:
    """A server's latest believed-so-far report and when it came."""

    user: str
    report: Report
    at: float
    lied: bool = False  # found lying at the time of use (counted once)


@dataclass
class Instruction:
    kernel_id: str
    by: str
    at: float


@dataclass
class Board:
    """Every user server's latest report, the drop counters, and the pending shutdown instructions.

    ``interval_s``: how often servers report (told in every answer); a report is **stale** after
    two intervals without a newer one. Times are passed in (``now``), so the rules are testable.
    """

    interval_s: float = 5.0
    latest: dict[tuple[str, str], Received] = field(default_factory=dict)  # (user, server) -> report
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    pending: dict[tuple[str, str], list[Instruction]] = field(default_factory=dict)
    _last_try: dict[tuple[str, str], float] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def receive(
        self, user: str, body: bytes, now: float, truth: Truth | None = None, system_user: str = "{name}"
    ) -> Report:
        """Keep ``body`` as ``user``'s latest report of its server, or raise :class:`Refused` (counted).

        ``truth``: the service's newest NVML sample when it has one (a lie is refused at once;
        :func:`believed` checks again at the time of use).
        """
        try:
            report = parse(body)
            key = (user, report.server)
            last = self._last_try.get(key)
            if last is not None and now - last < self.interval_s / 2:
                raise Refused(
                    "too_frequent",
                    f"reports come every {self.interval_s:g} s; this one came {now - last:.2f} s after the last",
                )
            if key not in self._last_try and sum(1 for u, _ in self._last_try if u == user) >= MAX_SERVERS_PER_USER:
                raise Refused("too_many_servers", f"at most {MAX_SERVERS_PER_USER} servers per user are kept")
            self._last_try[key] = now
            if truth is not None:
                lies = foreign_claims(report, truth, account_of(user, system_user))
                if lies:
                    raise Refused("lying", f"the report claims {len(lies)} GPU process(es) of another account")
        except Refused as refused:
            self.drop(refused.reason)
            raise
        self.latest[key] = Received(user, report, now)
        return report

    def stale(self, received: Received, now: float) -> bool:
        return now - received.at > 2 * self.interval_s

    def forget_before(self, when: float) -> None:
        """Forget reports older than ``when`` (a server gone for good), and their instructions."""
        for key in [key for key, got in self.latest.items() if got.at < when]:
            del self.latest[key]
            self.pending.pop(key, None)
        for key in [key for key, at in self._last_try.items() if at < when]:
            del self._last_try[key]

    def ask_shutdown(self, user: str, kernel_id: str, by: str, now: float) -> str:
        """Queue a shutdown of ``user``'s kernel ``kernel_id`` for the server whose fresh report
        lists it (its name returned); KeyError when no fresh report of ``user`` lists it."""
        for (owner, server), got in sorted(self.latest.items()):
            if owner != user or self.stale(got, now):
                continue
            if any(kernel.kernel_id == kernel_id for kernel in got.report.kernels):
                queue = self.pending.setdefault((owner, server), [])
                if not any(item.kernel_id == kernel_id for item in queue):
                    queue.append(Instruction(kernel_id, by, now))
                return server
        raise KeyError(kernel_id)

    def answer(self, user: str, report: Report, now: float) -> dict[str, Any]:
        """The answer to ``user``'s accepted ``report``: the next interval and this server's
        pending instructions (kept until a report no longer lists the kernel, or they expire)."""
        key = (user, report.server)
        listed = {kernel.kernel_id for kernel in report.kernels}
        ttl = SHUTDOWN_TTL_INTERVALS * self.interval_s
        queue = [item for item in self.pending.get(key, []) if item.kernel_id in listed and now - item.at < ttl]
        if queue:
            self.pending[key] = queue
        else:
            self.pending.pop(key, None)
        return {
            "interval_s": self.interval_s,
            "shutdown": [{"kernel_id": item.kernel_id, "by": item.by} for item in queue],
        }

    def servers(self, now: float, truth: Truth, system_user: str = "{name}") -> list[UserServer]:
        """Every reporting server as the console's join reads it (:meth:`server`), by user and server."""
        return [self.server(got, now, truth, system_user) for _key, got in sorted(self.latest.items())]

    def server(self, got: Received, now: float, truth: Truth, system_user: str = "{name}") -> UserServer:
        """One reporting server as the console's join reads it: a fresh report that tells no lie
        about another account's GPU process (checked against ``truth`` now, :func:`foreign_claims`;
        a lie is dropped and counted once), else the row's error (stale, lying)."""
        user = got.user
        if self.stale(got, now):
            return UserServer(
                user,
                None,
                None,
                _("stale: no report from this server for {silent} s (servers report every {interval} s)").format(
                    silent=f"{now - got.at:.0f}", interval=f"{self.interval_s:g}"
                ),
            )
        lies = foreign_claims(got.report, truth, account_of(user, system_user))
        if lies:
            if not got.lied:
                got.lied = True
                self.drop("lying")
            return UserServer(
                user,
                None,
                None,
                ngettext(
                    "this server's report claims {count} GPU process of another account: not believed",
                    "this server's report claims {count} GPU processes of another account: not believed",
                    len(lies),
                ).format(count=len(lies)),
            )
        return UserServer(user, None, as_snapshot(got.report))
