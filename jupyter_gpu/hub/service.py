"""The service's state: the host's one NVML sampler and its history, the user servers' reports
(:class:`jupyter_gpu.hub.reports.Board`), Prometheus mode, usage accounting (tornado wiring; the
rules are :mod:`.core`, :mod:`.reports`, :mod:`.accounting`).

**No credential ever goes to a user server.** The service used to gather every server's
``jupyter-gpu/snapshot`` through the proxy with its own token, which any user could record and use
(issue 27). Now each user server pushes its report to ``api/report`` with its own token, and the
service only answers; the admin's "Shut down" is an instruction in that answer (:mod:`.reports`).
The service's token goes to the hub's API only (checking who a report's or a console's token is).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core import gauges, i18n
from ..core.availability import Reservation
from ..core.history import GpuHistory
from ..core.snapshot import Snapshot
from ..sources.claims import reserved_accounts, runs_by_account
from ..sources.sampler import Sampler
from . import core
from .console_join import ConsoleJoin
from .prometheus_mode import PrometheusAsker
from .reports import Board, Refused, Report
from .usage import UsageAccountant

log = logging.getLogger("jupyter_gpu.hub")

REPORT_INTERVAL_S = 5.0  # how often user servers report (told in every answer)
FORGET_AFTER_INTERVALS = 720  # a server silent this long (an hour at 5 s) leaves the console
CONSOLE_OPEN_S = 30.0  # a console asked this recently is open: each sample's join is built ahead of it
JOIN_ROWS_PER_STEP = 20  # the join made ahead: the loop answers other requests every 20 user rows


class HubService:
    """One NVML sampler for the host, its history, and the user servers' latest reports."""

    def __init__(
        self,
        api_url: str,
        api_token: str,
        proxy_url: str = "",
        interval_s: float = 1.0,
        linger_s: float = 90.0,
        take: Any = None,
        history_s: float = 900.0,
        prometheus_url: str | None = None,
        prometheus_token_file: str | None = None,
        prometheus_account: str | None = "prometheus",
        idle_after_s: float = 3600.0,
        host: str | None = None,
        system_user: str = "{name}",
        usage_db: str | None = None,
        usage_interval_s: float = 60.0,
        report_interval_s: float = REPORT_INTERVAL_S,
        language: str | None = None,
    ) -> None:
        if take is None:
            from ..sources.nvml import snapshot as take
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token  # for the hub's API only (HubAuth): never sent to a user server
        self.language = language or None  # --language: the console's, unless a page asks for its own (?lang=)
        self.interval_s = interval_s
        self._nvml_take = take
        self.history = GpuHistory(history_s, interval_s)
        self.history_s = history_s
        self.sampler = Sampler(interval_s, take=self._take, linger_s=linger_s, name="jupyter-gpu-hub-sampler")
        self._devices_body: tuple[float, bytes] | None = None
        self.system_user = system_user  # the account owning a hub user's processes (core.account_of)
        self.reserved: dict[str, frozenset[str]] = {}  # GPU UUID -> accounts with a reservation (claims)
        self.runs: dict[str, tuple[Reservation, ...]] = {}  # account -> its `jupyter-gpu run` claims
        self.board = Board(report_interval_s)
        self._drops_logged: set[tuple[str, str]] = set()
        self._parser = ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-hub-json")
        self._waiter = ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-hub-wait")
        self._waiting: asyncio.Future[Snapshot | None] | None = None  # devices(): the shared wait
        self._joins: dict[str, ConsoleJoin] = {}  # language -> the console's join of the newest sample
        self._console_asked: dict[str, float] = {}  # language -> when a console last asked (monotonic)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the console's requests run on
        self._rows_built_before = 0  # user rows joined by the joins of earlier samples
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.idle_after_s = idle_after_s
        self.host = gauges.host_label(host)  # the "host" label of jupyter_gpu_gpu_info
        self.prometheus = (
            PrometheusAsker(
                prometheus_url,
                prometheus_token_file,
                self._parser,
                interval_s,
                history_s,
                idle_after_s,
                prometheus_account,
            )
            if prometheus_url
            else None
        )
        self.accountant = UsageAccountant(self, usage_db, usage_interval_s) if usage_db else None  # None: off

    def close(self) -> None:
        """Stop sampling, the JSON parser's thread and the HTTP clients (the service stops)."""
        self.sampler.close(timeout=1.0)
        for executor in (self._parser, self._waiter):
            executor.shutdown(wait=False, cancel_futures=True)
        if self.accountant is not None:
            self.accountant.close()
        if self.prometheus is not None:
            self.prometheus.close()

    def _take(self) -> Snapshot:
        snapshot = self._nvml_take()
        self.history.record(snapshot)
        if snapshot.nvml_available:  # who reserved which GPU, whose runs (claims): read here, off the event loop
            self.reserved = reserved_accounts(snapshot.gpus)
            self.runs = runs_by_account(snapshot.gpus)
        loop, now = self._loop, time.monotonic()
        if loop is not None and any(now - at < CONSOLE_OPEN_S for at in list(self._console_asked.values())):
            try:  # the join of this sample, made on the loop before the console's next request asks
                loop.call_soon_threadsafe(self._join_ahead, snapshot)
            except RuntimeError:  # the loop is closed: the service is stopping
                pass
        return snapshot

    async def devices(self) -> Snapshot | None:
        """The newest device sample (waking the sampler; waits up to 1 s for a fresh one, less than
        the user servers' 3 s timeout, so a slow NVML call never makes them fall back)."""
        latest = self.sampler.latest
        if latest is not None and time.time() - latest.timestamp < 2 * self.interval_s + 1:
            self.sampler.touch()
            return latest
        # One waiter for every request of that moment, as GpuService._wait_for_sample: while NVML
        # hangs, N user servers asking tie up one thread, not N of the loop's default executor (whose
        # queue would outlast their 3 s timeout and send them all to NVML themselves).
        if self._waiting is None or self._waiting.done():
            self._waiting = asyncio.get_running_loop().run_in_executor(
                self._waiter,
                lambda: self.sampler.wait_for_snapshot(newer_than=latest.timestamp if latest else None, timeout=1.0),
            )
        return await asyncio.shield(self._waiting)

    async def devices_body(self) -> bytes:
        """``/api/devices``: JSON bytes built once per sample for every user server."""
        snapshot = await self.devices()
        if snapshot is None:
            return json.dumps(
                {
                    "nvml_available": False,
                    "error": "no GPU sample yet",
                    "timestamp": time.time(),
                    "gpus": [],
                    "warnings": [],
                }
            ).encode()
        cached = self._devices_body
        if cached is None or cached[0] != snapshot.timestamp:
            cached = (snapshot.timestamp, json.dumps(core.devices_answer(snapshot), allow_nan=False).encode())
            self._devices_body = cached
        return cached[1]

    # -- the console

    def console_json(self, devices: Snapshot | None, viewer: str, role: str, language: str) -> str:
        """``api/console``'s JSON for ``viewer`` with ``role`` in ``language``, from the join of
        ``devices`` (:class:`jupyter_gpu.hub.console_join.ConsoleJoin`): made once per sample and
        language, each user's row again only when that user's reports changed, and ahead of the
        requests while a console is open (asked in the last :data:`CONSOLE_OPEN_S` seconds). On
        the event loop only."""
        self._loop = asyncio.get_running_loop()
        self._console_asked[language] = time.monotonic()
        with i18n.language_forced(language):
            join = self._join(devices, language)
            join.refresh(self.board, time.time())
            extra = {"reports_dropped": dict(self.board.dropped)} if role == "admin" else None
            return join.answer(viewer, role, extra)

    @property
    def console_rows_built(self) -> int:
        """User rows joined for the console so far (what the join per sample saves is counted)."""
        return self._rows_built_before + sum(join.rows_built for join in self._joins.values())

    def _join(self, devices: Snapshot | None, language: str) -> ConsoleJoin:
        """``devices``' join in ``language`` (a new sample: a new, empty one)."""
        join = self._joins.get(language)
        if join is None or join.devices is not devices or join.system_user != self.system_user:
            self._rows_built_before += join.rows_built if join is not None else 0
            history, reserved, runs = self.history.to_dict(), self.reserved, self.runs
            join = ConsoleJoin(devices, history, self.system_user, reserved, runs, previous=join)
            self._joins[language] = join
        return join

    def _join_ahead(self, devices: Snapshot) -> None:
        """The join of a new sample for each language an open console reads, made on the loop in
        steps (:data:`JOIN_ROWS_PER_STEP` rows each), other requests answered between them."""
        latest = self.sampler.latest
        if latest is not None and latest is not devices and latest.timestamp > devices.timestamp:
            return  # a newer sample came first
        now = time.monotonic()
        for language, at in list(self._console_asked.items()):
            if now - at < CONSOLE_OPEN_S:
                join = self._join(devices, language)
                self._join_step(join, join.steps(self.board, time.time(), JOIN_ROWS_PER_STEP), language)

    def _join_step(self, join: ConsoleJoin, steps: Iterator[None], language: str) -> None:
        if self._joins.get(language) is not join:
            return  # a newer sample's join replaced it
        try:
            with i18n.language_forced(language):
                next(steps)
        except StopIteration:
            return
        except Exception:  # a bug: the request joins again, and says so if it fails too
            log.exception("jupyter-gpu: the console's join could not be made ahead")
            return
        asyncio.get_running_loop().call_soon(self._join_step, join, steps, language)

    # -- the user servers' reports

    def recent_truth(self) -> core.Truth | None:
        """The processes index of the newest sample when it is fresh (None: no fresh sample; never
        waits for one nor wakes the sampler)."""
        latest = self.sampler.latest
        if latest is None or time.time() - latest.timestamp >= 2 * self.interval_s + 1:
            return None
        return core.Truth.of(latest)

    def receive_report(self, user: str, body: bytes) -> tuple[Report, dict[str, Any]]:
        """Keep ``user``'s report (its own token named ``user``) and the answer for its server, or
        :class:`Refused` (dropped and counted; logged once per user and reason)."""
        now = time.time()
        self.board.forget_before(now - FORGET_AFTER_INTERVALS * self.board.interval_s)
        try:
            report = self.board.receive(user, body, now, self.recent_truth(), self.system_user)
        except Refused as refused:
            if (user, refused.reason) not in self._drops_logged:  # once per user and reason: no log flood
                self._drops_logged.add((user, refused.reason))
                log.warning("jupyter-gpu: a report of %s was dropped (%s): %s", user[:200], refused.reason, refused)
            raise
        return report, self.board.answer(user, report, now)

    def servers(self, devices: Snapshot | None) -> list[core.UserServer]:
        """Every reporting server, as the console's join reads it (no waiting: the reports are here)."""
        return self.board.servers(time.time(), core.Truth.of(devices), self.system_user)

    def ask_shutdown(self, user: str, kernel_id: str, by: str) -> str:
        """Queue the admin ``by``'s shutdown of ``user``'s kernel for that user's server to pick up
        with its next report (the server's name returned); KeyError when no fresh report lists it."""
        return self.board.ask_shutdown(user, kernel_id, by, time.time())

    async def prometheus_console(self, viewer: str, role: str, language: str | None = None) -> dict[str, Any]:
        """The console from Prometheus (``--prometheus-url``), its messages in ``language``."""
        assert self.prometheus is not None, "not in Prometheus mode"
        return await self.prometheus.console(viewer, role, language)
