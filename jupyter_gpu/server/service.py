"""The server's GPU service: one sampler, the kernel table, and the annotated answer.

Work is split by thread so the event loop never waits on NVML, walks ``/proc`` or joins thousands
of processes to kernels:

- the sampling thread (:class:`jupyter_gpu.sources.sampler.Sampler`) reads NVML, keys each GPU process by
  PID **and start time**, looks up its ancestors (cached per process in
  :class:`jupyter_gpu.sources.processes.PidCache`), reads and validates the kernels' self-reports, and then
  builds the answer (:class:`Answer`: the annotated snapshot, its JSON bytes, an ETag and the
  Prometheus rows) once for every client;
- the event loop keeps a table of this server's kernels (PID and start time from the provisioner,
  notebook from the session manager, when it last ran a cell: :mod:`.cell_activity`). It is
  refreshed on the kernel manager's start / shutdown / restart events and at most once per
  interval otherwise; a change of the table
  makes the next request rebuild the answer on a worker thread (one build however many requests
  wait). A request only picks the answer that matches the newest sample and table.

This module is the wiring; the rules it applies are pure modules of their own: which kernel holds
which GPU process (:mod:`.attribution`), how an answer is rendered (:mod:`.answer`), which kernels
the culler shuts down (:mod:`.cull`, over :mod:`jupyter_gpu.core.culling`, run by :mod:`.culler`); reading the kernel
manager is :mod:`.kernel_table`, the report files :mod:`.report_files`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

import psutil

from ..core.history import GpuHistory
from ..core.snapshot import Snapshot
from ..sources.claims import host_reservations
from ..sources.kernel_reports import ReportReader
from ..sources.processes import PidCache, ProcessKey, current_user, process_key, process_starts
from ..sources.sampler import Sampler
from .answer import Answer, AnswerBuilder, answer_key, newer, stale_after_s
from .attribution import AttributedSnapshot, KernelInfo, KernelTable
from .cell_activity import CellWatch
from .config import JupyterGpuServer
from .cull import kept_message
from .culler import Culler
from .kernel_table import read_kernels, session_notebooks
from .report_files import ReportFiles, remove_ended_claims

__all__ = ["Answer", "AttributedSnapshot", "GpuService", "KernelInfo", "KernelTable", "ancestors"]

log = logging.getLogger(__name__)

KERNEL_ACTIONS_SCHEMA = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


def ancestors(pid: int) -> tuple[ProcessKey, ...]:
    """(pid, start) of ``pid``'s parent, grandparent, …; empty when the process is gone or unreadable."""
    try:
        return tuple(process_key(parent.pid) for parent in psutil.Process(pid).parents())
    except (psutil.Error, OSError):
        return ()


class GpuService:
    """Everything the handlers and the Prometheus collector need; kept in ``web_app.settings``."""

    SETTINGS_KEY = "jupyter_gpu"

    def __init__(
        self,
        config: JupyterGpuServer,
        kernel_manager: Any = None,
        session_manager: Any = None,
        report_dir: str | None = None,
        take: Callable[[], Snapshot] | None = None,
        metrics_public: bool = False,
    ) -> None:
        self.config = config
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.report_dir = report_dir
        self.metrics_public = metrics_public
        self.me = current_user()
        # The user the kernel series are labelled with: JupyterHub's name for this server's owner
        # (in a container the process user is often "jovyan" for everybody), else the process user.
        self.user = os.environ.get("JUPYTERHUB_USER") or self.me or ""
        self.culler = Culler(self)  # GPU-aware culling, "Keep running", the latest culls
        # The hub service this server takes its GPU data from (None: it reads NVML itself). Then the
        # service exports the host's per-GPU series, and this server's /metrics only its kernels'.
        self.device_source: str | None = None
        self._follow_ups: set[asyncio.Task[None]] = set()  # delayed refreshes after kernel events
        self._event_logger: Any = None
        self._nvml_take = take if take is not None else self._device_reader(config.source)
        self._ancestry = PidCache(ancestors)  # per (pid, start), while the PID stays on a GPU
        self._report_reader = ReportReader()
        self.report_files = ReportFiles(report_dir, self._report_reader)
        self.history = GpuHistory(config.history_s, config.interval_s)  # served by history_handler
        self.sampler = Sampler(
            config.interval_s, take=self._take, linger_s=config.linger_s, name="jupyter-gpu-server-sampler"
        )
        self._table = KernelTable()
        self._table_at = float("-inf")
        self._refreshing: asyncio.Future[None] | None = None
        self._answer: Answer | None = None
        self._answer_lock = threading.Lock()
        self._building: tuple[tuple[Any, ...], asyncio.Future[Answer]] | None = None
        self._waiting: asyncio.Future[Snapshot | None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._wait_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.builds = 0
        self._gone: set[str] = set()  # shut down, maybe still listed by the kernel manager
        self.cells = CellWatch()  # when each kernel last ran a cell: the one idle clock
        self._builder = AnswerBuilder(config, self.me)
        self.pusher: Any = None  # hub_pusher.HubPusher when this server reports to the hub service
        _services.add(self)
        config.observe(self._reconfigure, names=["interval_s", "linger_s"])

    def _device_reader(self, source: str) -> Callable[[], Snapshot]:
        """What the sampler reads: NVML in this process, or the hub service or URL that ``source``
        names (issue 12), with NVML here as its fallback; sets :attr:`device_source`."""
        from ..sources.host import with_world
        from ..sources.nvml import snapshot
        from ..sources.remote import RemoteSource, resolve_source

        self.device_source = resolve_source(source)  # "nvml", "hub-service" or a URL
        read_here = with_world(snapshot)  # a simulated sample names its world (readers of another world skip it)
        if self.device_source is None:
            return read_here
        return RemoteSource(self.device_source, fallback=read_here, account=self.config.service_account)

    def _reconfigure(self, change: Any) -> None:
        if change["name"] == "interval_s":
            self.sampler.interval_s = change["new"]
        else:
            self.sampler.linger_s = change["new"]

    @property
    def stale_after_s(self) -> float:
        """A sample older than this is marked ``stale`` (NVML is slow or hung)."""
        return stale_after_s(self.config.interval_s)

    def close(self) -> None:
        """Stop sampling and remove the reports of this server's kernels (the server stops)."""
        self.sampler.close(timeout=1.0)
        if self.pusher is not None:
            self.pusher.close()
        if self._event_logger is not None:
            try:
                self._event_logger.remove_listener(schema_id=KERNEL_ACTIONS_SCHEMA, listener=self._on_kernel_action)
            except Exception:
                pass
            self._event_logger = None
        self.culler.cancel()
        self._cancel_follow_ups()
        self.cells.close()
        for executor in (self._executor, self._wait_executor):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        for kernel_id in list(self._table.kernels):
            self.remove_report(kernel_id)
        self.remove_claims(info.key for info in self._table.kernels.values())

    # -- the sampling thread

    def _take(self) -> Snapshot:
        snapshot = self._nvml_take()
        self.history.record(snapshot)
        pids = {process.pid for gpu in snapshot.gpus for process in gpu.processes}
        keys = {pid: (pid, start) for pid, start in process_starts(pids).items()}
        ancestry = {pid: self._ancestry.get(pid, keys[pid][1]) for pid in pids}
        self._ancestry.forget_all_but(pids)
        reports = self._report_reader.read(self.report_dir) if self.report_dir else {}
        reservations = tuple(
            host_reservations(snapshot.gpus, {pid: [key[0] for key in line] for pid, line in ancestry.items()})
        )
        values = {f.name: getattr(snapshot, f.name) for f in fields(Snapshot)}
        attributed = AttributedSnapshot(
            **values, keys=keys, ancestry=ancestry, reports=reports, reservations=reservations
        )
        try:  # build the answer here, once, for every client to come
            self._store(self._build(attributed, self._table, time.time()))
        except Exception:
            log.exception("jupyter_gpu: building the snapshot answer failed")
        return attributed

    # -- the kernel table (event loop)

    def attach_events(self, event_logger: Any) -> None:
        """Refresh the kernel table on the kernel manager's start / shutdown / restart events."""
        if event_logger is None:
            return
        try:
            event_logger.add_listener(schema_id=KERNEL_ACTIONS_SCHEMA, listener=self._on_kernel_action)
            self._event_logger = event_logger
        except Exception:
            log.warning(
                "jupyter_gpu: cannot listen to kernel events; the kernel table is refreshed every interval only",
                exc_info=True,
            )

    follow_up_s = 0.25
    """After a kernel start, the kernel table is read again this much later (its session is saved
    just after the start, in the same request)."""

    def _follow_up(self, delay_s: float) -> None:
        """Refresh the kernel table once more after ``delay_s``, in a task this service keeps (and
        :meth:`close` cancels), so that none is left pending when the server stops."""

        async def refresh_later() -> None:
            await asyncio.sleep(delay_s)
            try:
                await self.refresh_kernels()
            except Exception:
                log.exception("jupyter_gpu: refreshing the kernel table after a kernel event failed")

        task = asyncio.ensure_future(refresh_later())
        self._follow_ups.add(task)
        task.add_done_callback(self._follow_ups.discard)

    def _cancel_follow_ups(self) -> None:
        """Cancel the pending follow-up refreshes and let them finish: at once when the loop runs
        (they end on its next turn), else by running their stopped loop until they have."""
        tasks = [task for task in self._follow_ups if not task.done()]
        for task in tasks:
            task.cancel()
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Task[None]]] = {}
        for task in tasks:
            by_loop.setdefault(task.get_loop(), []).append(task)
        for loop, pending in by_loop.items():
            if not loop.is_running() and not loop.is_closed():
                try:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                except RuntimeError:  # another loop runs in this thread: they end when theirs runs
                    pass

    async def _on_kernel_action(self, logger: Any = None, schema_id: str = "", data: Any = None) -> None:
        """jupyter_events listener (called with keywords). Never raises: a failure is logged."""
        try:
            await self._kernel_action(data if isinstance(data, dict) else {})
        except Exception:
            log.exception("jupyter_gpu: refreshing the kernel table after a kernel event failed")

    async def _kernel_action(self, data: dict[str, Any]) -> None:
        action = data.get("action")
        kernel_id = data.get("kernel_id")
        if data.get("status") != "success" or action not in ("start", "shutdown", "restart"):
            return
        before = self._table.kernels.get(kernel_id) if isinstance(kernel_id, str) else None
        if action == "shutdown" and isinstance(kernel_id, str):
            # At once, before any await: the next request must not attribute anything to it, even
            # while the kernel manager still lists it for a moment.
            self._gone.add(kernel_id)
            kernels = {kid: info for kid, info in self._table.kernels.items() if kid != kernel_id}
            self._set_table(kernels)
            self.remove_report(kernel_id)
            self.remove_claims([before.key if before is not None else None])
        elif isinstance(kernel_id, str):
            self._gone.discard(kernel_id)
        await self.refresh_kernels()
        if action == "restart" and isinstance(kernel_id, str):
            info = self._table.kernels.get(kernel_id)
            self.remove_report(kernel_id, unless=info.key if info else None)
            if before is not None and (info is None or info.key != before.key):
                self.remove_claims([before.key])  # the process before the restart
        if action == "start":
            # The session (notebook path) is saved right after the kernel starts, in the same
            # request: the next request or scrape reads the table again, and so do we, shortly.
            self._table_at = float("-inf")
            self._follow_up(self.follow_up_s)

    async def kernels(self) -> dict[str, KernelInfo]:
        """This server's kernels, refreshed at most once per sampling interval (and on events)."""
        if time.monotonic() - self._table_at >= self.config.interval_s:
            await self.refresh_kernels()
        return self._table.kernels

    async def refresh_kernels(self) -> None:
        """Re-read the kernel table now (one refresh at a time; concurrent callers share it)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh_kernels())
        await asyncio.shield(self._refreshing)

    def _schedule_refresh(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh_kernels())

    async def _refresh_kernels(self) -> None:
        notebooks = await session_notebooks(self.session_manager)
        table: dict[str, KernelInfo] = {}
        km = self.kernel_manager
        if km is not None:
            listed = list(km.list_kernel_ids())
            self._gone.intersection_update(listed)  # forgotten once the kernel manager forgot it
            alive = [kernel_id for kernel_id in listed if kernel_id not in self._gone]
            table = read_kernels(km, alive, notebooks, self._table.kernels, self.cells)
            self.cells.keep_only(alive)
        self._set_table(self.culler.postponed.apply(table))
        self._table_at = time.monotonic()

    async def keep_running(self, kernel_id: str, user: str) -> float:
        """ "Keep running": postpone ``kernel_id``'s cull by one ``cull_idle_after_s`` (logged with
        ``user``); the seconds now postponed. KeyError: no such kernel; ValueError: culling is off."""
        await self.refresh_kernels()
        kept = self.culler.postponed.add(self._table.kernels, kernel_id, self.config.cull_idle_after_s)
        self._set_table({**self._table.kernels, kernel_id: kept})
        log.warning("%s", kept_message(kernel_id, kept.notebook, user, self.config.cull_idle_after_s))
        return kept.cull_postponed_s

    def _set_table(self, kernels: dict[str, KernelInfo]) -> None:
        if kernels != self._table.kernels:
            self._table = KernelTable(self._table.version + 1, kernels)

    def remove_report(self, kernel_id: str, unless: ProcessKey | None = None) -> None:
        """Delete a kernel's report file (it went away), unless it is the report of process ``unless``."""
        self.report_files.remove(kernel_id, unless)

    def remove_claims(self, ended: Iterable[ProcessKey | None] = ()) -> int:
        """Delete the GPU claims of the ``ended`` kernel processes and of dead ones (:func:`remove_ended_claims`)."""
        return remove_ended_claims(key for key in ended if key is not None)

    # -- answers (event loop picks, worker threads build)

    async def latest(self) -> Snapshot | None:
        """Record demand and return the newest sample without ever blocking the event loop.

        When this request wakes an idle sampler, wait (off the loop, at most ``wait_s``) for the
        fresh sample; otherwise answer at once with what the sampler has, however old.
        """
        was_running = self.sampler.running
        self.sampler.touch()
        latest = self.sampler.latest
        if latest is None and was_running:
            return None  # the first sample is on its way (or NVML hangs): do not wait for it
        if latest is None or (not was_running and time.time() - latest.timestamp > self.config.interval_s):
            fresh = await self._wait_for_sample(None if latest is None else latest.timestamp)
            latest = fresh or latest
        return latest

    async def _wait_for_sample(self, newer_than: float | None) -> Snapshot | None:
        # One waiter thread for all concurrent requests, so a hung NVML call ties up one thread.
        wait_s = self.config.wait_s
        if self._waiting is None or self._waiting.done():
            if self._wait_executor is None:
                self._wait_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-wait")
            loop = asyncio.get_running_loop()
            self._waiting = loop.run_in_executor(
                self._wait_executor, self.sampler.wait_for_snapshot, newer_than, wait_s
            )
        try:
            return await asyncio.wait_for(asyncio.shield(self._waiting), wait_s + 0.5)
        except asyncio.TimeoutError:
            return self.sampler.latest

    async def answer(self) -> Answer:
        """The answer for the newest sample and kernel table: picked as is when it was built
        already, else built once on a worker thread for every request waiting for it."""
        latest = await self.latest()
        await self.kernels()
        table = self._table
        now = time.time()
        key = self._key(latest, table, now)
        answer = self._answer
        if answer is not None and answer.key == key:
            return answer
        building = self._building
        if building is None or building[0] != key or building[1].done():
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-build")
            future = asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: self._store(self._build(latest, table, now))
            )
            self._building = building = (key, future)
        return await asyncio.shield(building[1])

    async def snapshot(self) -> dict[str, Any]:
        """The JSON answer of ``GET jupyter-gpu/snapshot`` as a dict (see docs/server.md)."""
        return json.loads((await self.answer()).body)

    def _key(self, snapshot: Snapshot | None, table: KernelTable, now: float) -> tuple[Any, ...]:
        return answer_key(snapshot, table, now, self.config.interval_s)

    def _store(self, answer: Answer) -> Answer:
        with self._answer_lock:
            current = self._answer
            if current is None or newer(answer.key, current.key):
                self._answer = answer
        return answer

    def _build(self, snapshot: Snapshot | None, table: KernelTable, now: float) -> Answer:
        """The answer for ``snapshot`` joined to ``table`` (see :class:`AnswerBuilder`), counted."""
        self.builds += 1
        return self._builder.build(snapshot, table, now)

    def annotate(self, snapshot: Snapshot | None, kernels: dict[str, KernelInfo], now: float) -> dict[str, Any]:
        """The answer for ``snapshot`` joined to ``kernels``, as a dict (what the endpoint sends)."""
        return json.loads(self._build(snapshot, KernelTable(0, kernels), now).body)

    # -- Prometheus

    def metrics_answer(self) -> Answer | None:
        """The answer for a scrape: records demand, never waits for NVML (None before any sample).

        Built answers are reused; only when the kernel table changed since (a kernel started or
        went away) is it rebuilt here, so the kernel gauges follow the kernels at once.
        """
        self.sampler.touch()
        if time.monotonic() - self._table_at >= self.config.interval_s:
            self._schedule_refresh()
        latest = self.sampler.latest
        if latest is None:
            return None
        table = self._table
        answer = self._answer
        if answer is not None and answer.key[0] == latest.timestamp and answer.key[1] == table.version:
            return answer
        return self._store(self._build(latest, table, time.time()))


_services: weakref.WeakSet[GpuService] = weakref.WeakSet()


@atexit.register
def _remove_reports_at_exit() -> None:
    """The server process exits: no report of its kernels may outlive it."""
    for service in list(_services):
        for kernel_id in list(service._table.kernels):
            service.remove_report(kernel_id)
        service.remove_claims(info.key for info in service._table.kernels.values())
