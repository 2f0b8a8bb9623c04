"""The console's join kept per sample (pure: no tornado, no NVML; issue 27's first paint).

``api/console`` (and the page's first data) joins every user server's report with the service's
NVML sample (:func:`jupyter_gpu.hub.core.user_row`): at 200 users x 2 kernels that is 10-35 ms of
CPU per request, the service's largest share of the console's first paint. The join does not
depend on who asks, so :class:`ConsoleJoin` makes it once per sample (and language) and every
request of that sample reads it:

- **Each user's row is built once per sample and per report, and only when what it reads
  changed**: :meth:`ConsoleJoin.refresh` builds the row of a user whose reports changed since the
  last refresh (a new report, a server gone, a report gone stale) and keeps every other row. A new
  sample is a new :class:`ConsoleJoin` that keeps the previous one's rows whose figures of the
  sample are unchanged (:meth:`ConsoleJoin._read`: the memory NVML shows the user's account
  holding, the owners and bytes of the PIDs the user's reports claim), so a steady GPU costs no
  join. A row with a stale server is built on every refresh (its error says for how many seconds;
  it has no kernels to join). The service makes each sample's join ahead of requests while a
  console is open (:meth:`jupyter_gpu.hub.service.HubService.console_json`).
- **Each row is serialized once, in its two forms**: as an admin or its user sees it
  (:func:`~jupyter_gpu.hub.core.user_row`) and as anybody else does
  (:func:`~jupyter_gpu.hub.core.private_row`, the privacy rule's one place). :meth:`ConsoleJoin.answer`
  puts a viewer's answer together from those texts: the viewer's own row (with its runs) and, for
  a reader, every other row in its private form; the GPUs with this viewer's availability words.

The answer is exactly :func:`jupyter_gpu.hub.core.console`'s for the same inputs
(``tests/test_hub_console_join.py`` compares them), serialized.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.availability import Reservation
from ..core.snapshot import Snapshot
from . import core
from .reports import Board, Received


def _json(value: Any) -> str:
    return json.dumps(value, allow_nan=False)


@dataclass(frozen=True)
class _Row:
    """One user's row, joined: the reports it was built from, and its two forms as JSON."""

    sources: tuple[Received, ...]
    stale: bool
    read: tuple[Any, ...]  # what the row read of the sample (:meth:`ConsoleJoin._read`)
    full: dict[str, Any]
    full_json: str
    private_json: str

    def built_from(self, sources: Sequence[Received]) -> bool:
        """Whether this row was built from exactly these reports (the same objects)."""
        return len(sources) == len(self.sources) and all(a is b for a, b in zip(sources, self.sources, strict=True))


class ConsoleJoin:
    """The console's join of one sample (``devices``), in the language it was built in.

    ``previous``: the last sample's join in the same language (its rows' messages are in it),
    whose rows are kept where what they read of the sample is unchanged. ``rows_built`` counts the
    user rows joined so far (what the caching saves is counted, not timed). Not thread-safe: the
    service uses it on its event loop only.
    """

    def __init__(
        self,
        devices: Snapshot | None,
        history: dict[str, Any],
        system_user: str = "{name}",
        reserved: Mapping[str, Collection[str]] | None = None,
        runs: Mapping[str, Sequence[Reservation]] | None = None,
        previous: ConsoleJoin | None = None,
    ) -> None:
        self.devices = devices
        self.history = history
        self.system_user = system_user
        self.reserved = reserved or {}
        self.runs = runs or {}
        self.truth = core.Truth.of(devices)
        self.rows: dict[str, _Row] = {}
        if previous is not None and previous.system_user == system_user:
            self.rows = dict(previous.rows)
        self.rows_built = 0
        self._gpus: dict[str | None, str] = {}  # the viewer's account -> the GPUs' JSON for it

    def refresh(self, board: Board, now: float) -> None:
        """Rows for the board's reports as of ``now``: a user's row is built again only when the
        reports it was built from changed (or one of them is stale)."""
        for _step in self.steps(board, now):
            pass

    def steps(self, board: Board, now: float, rows_per_step: int = 0) -> Iterator[None]:
        """:meth:`refresh` in steps of at most ``rows_per_step`` rows built (0: one step), so that
        the service's loop answers other requests between them (the join made ahead of requests).
        A row is kept in :attr:`rows` as soon as it is built; a request's own :meth:`refresh`
        meanwhile finishes the rest (and the steps left then find nothing to do)."""
        by_user: dict[str, list[Received]] = {}
        for _key, got in sorted(board.latest.items()):
            by_user.setdefault(got.user, []).append(got)
        for name in [name for name in self.rows if name not in by_user]:
            del self.rows[name]  # every server of this user forgotten
        built = 0
        for name, sources in by_user.items():
            if rows_per_step and built == rows_per_step:
                yield
                built = 0
                if any(board.latest.get((name, got.report.server)) is not got for got in sources):
                    continue  # a newer report came meanwhile: the next refresh builds this row
            row = self.rows.get(name)
            stale = any(board.stale(got, now) for got in sources)
            read = self._read(name, sources)
            if row is not None and not (stale or row.stale) and row.built_from(sources) and row.read == read:
                continue  # built already from the same reports and the same figures of the sample
            servers = [board.server(got, now, self.truth, self.system_user) for got in sources]
            full = core.user_row(name, servers, self.truth, self.system_user)
            self.rows[name] = _Row(tuple(sources), stale, read, full, _json(full), _json(core.private_row(full)))
            self.rows_built += 1
            built += 1

    def _read(self, name: str, sources: Sequence[Received]) -> tuple[Any, ...]:
        """All that a user's row reads of the sample (:func:`jupyter_gpu.hub.core.user_row`): the
        memory NVML shows the user's account holding, NVML's entries (GPU, owner, bytes) of every
        PID the user's reports claim, and the host's GPU memory. Equal in two samples: the row is
        the same (a new sample with the same figures builds nothing)."""
        truth = self.truth
        pids = sorted({pid for got in sources for pid in got.report.claimed_pids()})
        return (
            truth.total_memory,
            tuple(sorted(truth.by_owner.get(core.account_of(name, self.system_user), {}).items())),
            tuple((pid, tuple(truth.by_pid.get(pid, ()))) for pid in pids),
        )

    def answer(self, viewer: str, role: str, extra: Mapping[str, Any] | None = None) -> str:
        """``api/console``'s JSON for ``viewer`` with ``role`` ("admin" or "read"), privacy applied
        (:func:`jupyter_gpu.hub.core.console`'s answer, serialized); ``extra``: fields added at the
        end (the admins' ``reports_dropped``)."""
        admin = role == "admin"
        me = core.account_of(viewer, self.system_user) if viewer else None
        gpus = self._gpus.get(me)
        if gpus is None:
            gpus = self._gpus[me] = _json(core.gpu_entries(self.devices, self.history, self.reserved, me))
        users = []
        for name, row in sorted(self.rows.items()):
            if name == viewer:
                runs = core.runs_text(self.runs.get(core.account_of(name, self.system_user), ()), self.devices)
                users.append(_json({**row.full, "runs": runs}) if runs else row.full_json)
            else:
                users.append(row.full_json if admin else row.private_json)
        head = _json(core.console_head(self.devices, viewer, admin))
        tail = "".join(f", {_json(key)}: {_json(value)}" for key, value in (extra or {}).items())
        return f'{head[:-1]}, "gpus": {gpus}, "users": [{", ".join(users)}]{tail}}}'
