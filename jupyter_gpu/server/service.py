"""The server's GPU service: one sampler, the kernel table, and the annotated answer.

Work is split by thread so the event loop never waits on NVML, walks ``/proc`` or joins thousands
of processes to kernels:

- the sampling thread (:class:`jupyter_gpu.sources.sampler.Sampler`) reads NVML, keys each GPU process by
  PID **and start time**, looks up its ancestors (cached per process in
  :class:`jupyter_gpu.sources.processes.PidCache`), reads and validates the kernels' self-reports, and then
  builds the answer (:class:`Answer`: the annotated snapshot, its JSON bytes, an ETag and the
  Prometheus rows) once for every client;
- the event loop keeps a table of this server's kernels (PID and start time from the provisioner,
  notebook from the session manager, last activity). It is refreshed on the kernel manager's
  start / shutdown / restart events and at most once per interval otherwise; a change of the table
  makes the next request rebuild the answer on a worker thread (one build however many requests
  wait). A request only picks the answer that matches the newest sample and table.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import gzip
import hashlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import psutil

from ..core.gauges import GAUGED
from ..core.history import GpuHistory
from ..core.snapshot import GpuProcess, Snapshot
from ..sources.kernel_reports import REPORT_PREFIX, KernelReport, ReportReader
from ..sources.processes import PidCache, ProcessKey, current_user, process_key, process_start, process_starts
from ..sources.sampler import Sampler
from .config import JupyterGpuServer

log = logging.getLogger(__name__)

KERNEL_ACTIONS_SCHEMA = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"

CONTAINER_NOTE = (
    "NVML reports PIDs that do not exist in this server's PID namespace: the server runs in a "
    "container and NVML sees host PIDs, so GPU processes cannot be matched to kernels by PID."
)


@dataclass(frozen=True)
class KernelInfo:
    """One of this server's kernels, as the event loop knows it."""

    kernel_id: str
    name: str | None = None
    pid: int | None = None
    notebook: str | None = None
    execution_state: str | None = None
    last_activity: float | None = None  # epoch seconds of the last message from the kernel
    start: int | float | None = None  # processes.process_start(pid) when the kernel was first seen

    def idle_s(self, now: float) -> float | None:
        """Seconds since the kernel was last busy (0 while busy), None when unknown."""
        if self.execution_state == "busy":
            return 0.0
        if self.last_activity is None:
            return None
        return max(0.0, now - self.last_activity)

    @property
    def key(self) -> ProcessKey | None:
        """(pid, start): the kernel's process, never a later process that reuses its PID."""
        return None if self.pid is None or self.start is None else (self.pid, self.start)


@dataclass(frozen=True)
class KernelTable:
    """An immutable version of the kernel table; ``version`` grows with every change."""

    version: int = 0
    kernels: dict[str, KernelInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class AttributedSnapshot(Snapshot):
    """A snapshot plus what the sampling thread learnt for attribution (not part of ``to_dict()``)."""

    keys: dict[int, ProcessKey] = field(default_factory=dict, compare=False)
    ancestry: dict[int, tuple[ProcessKey, ...]] = field(default_factory=dict, compare=False)
    reports: dict[str, KernelReport] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Answer:
    """The snapshot endpoint's answer for one sample and one kernel table, built once for all.

    It keeps bytes and flat rows, not the annotated dict: with thousands of processes, a dict per
    process kept alive between samples is work for Python's cyclic garbage collector, whose full
    collections pause every thread, the event loop included (measured: 100-300 ms at 8,000).
    """

    key: tuple[Any, ...]
    nvml_available: bool
    timestamp: float
    gpu_rows: tuple[tuple[str, str, str, str | None, tuple[tuple[str, Any], ...]], ...]  # index, uuid,
    # name, error, ((field, value), ...)
    body: bytes
    etag: str
    gzipped: bytes  # the same body, gzip-compressed once here for every client that accepts it
    kernel_memory: tuple[tuple[str, str, str, int], ...]  # (kernel_id, notebook, gpu, bytes)
    kernel_idle: tuple[tuple[str, str, float], ...]  # (kernel_id, notebook, idle seconds)
    # Kernels due for culling at build time: (kernel_id, notebook, idle_s, bytes, GPUs as words).
    due: tuple[tuple[str, str, float, int, tuple[str, ...]], ...] = ()
    kernel_cull_in: tuple[tuple[str, str, float], ...] = ()  # (kernel_id, notebook, seconds to cull)
    slice_rows: tuple[tuple[str, str, str, str, int, int], ...] = ()  # MIG: (gpu, parent uuid, MIG uuid,
    # profile, memory used, memory total) of every readable slice


def ancestors(pid: int) -> tuple[ProcessKey, ...]:
    """(pid, start) of ``pid``'s parent, grandparent, …; empty when the process is gone or unreadable."""
    try:
        return tuple(process_key(parent.pid) for parent in psutil.Process(pid).parents())
    except (psutil.Error, OSError):
        return ()


def _kernel_pid(kernel: Any) -> int | None:
    """The PID of the kernel's process while it runs (None once it exited or when unknown)."""
    provisioner = getattr(kernel, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is not None and hasattr(process, "poll"):
        try:
            if process.poll() is not None:
                return None  # it died (killed, crashed): its PID may already be another process's
        except Exception:
            pass
    pid = getattr(provisioner, "pid", None)
    if pid is None:
        pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


_dumps = functools.partial(json.dumps, allow_nan=False, separators=(",", ":"))


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
        self.culled = 0  # kernels shut down by the GPU-aware culler (jupyter_gpu_kernels_culled_total)
        self._culling: asyncio.Task[None] | None = None
        # The hub service this server takes its GPU data from (None: it reads NVML itself). Then the
        # service exports the host's per-GPU series, and this server's /metrics only its kernels'.
        self.device_source: str | None = None
        self._follow_ups: set[asyncio.Task[None]] = set()  # delayed refreshes after kernel events
        self._event_logger: Any = None
        if take is None:
            from ..sources.nvml import snapshot as take
            from ..sources.remote import RemoteSource, resolve_source

            self.device_source = resolve_source(config.source)  # "nvml", "hub-service" or a URL (issue 12)
            if self.device_source is not None:
                take = RemoteSource(self.device_source, fallback=take)
        self._nvml_take = take
        self._ancestry = PidCache(ancestors)  # per (pid, start), while the PID stays on a GPU
        self._report_reader = ReportReader()
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
        self._texts: dict[int, dict[int, tuple[GpuProcess, str]]] = {}
        self._texts_for: tuple[bool, str | None] | None = None
        _services.add(self)
        config.observe(self._reconfigure, names=["interval_s", "linger_s"])

    def _reconfigure(self, change: Any) -> None:
        if change["name"] == "interval_s":
            self.sampler.interval_s = change["new"]
        else:
            self.sampler.linger_s = change["new"]

    @property
    def stale_after_s(self) -> float:
        """A sample older than this is marked ``stale`` (NVML is slow or hung)."""
        return 2 * self.config.interval_s + 1.0

    def close(self) -> None:
        """Stop sampling and remove the reports of this server's kernels (the server stops)."""
        self.sampler.close(timeout=1.0)
        if self._event_logger is not None:
            try:
                self._event_logger.remove_listener(schema_id=KERNEL_ACTIONS_SCHEMA, listener=self._on_kernel_action)
            except Exception:
                pass
            self._event_logger = None
        if self._culling is not None:
            self._culling.cancel()
        self._cancel_follow_ups()
        for executor in (self._executor, self._wait_executor):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        for kernel_id in list(self._table.kernels):
            self.remove_report(kernel_id)

    # -- the sampling thread

    def _take(self) -> Snapshot:
        snapshot = self._nvml_take()
        self.history.record(snapshot)
        pids = {process.pid for gpu in snapshot.gpus for process in gpu.processes}
        keys = {pid: (pid, start) for pid, start in process_starts(pids).items()}
        ancestry = {pid: self._ancestry.get(pid, keys[pid][1]) for pid in pids}
        self._ancestry.forget_all_but(pids)
        reports = self._report_reader.read(self.report_dir) if self.report_dir else {}
        values = {f.name: getattr(snapshot, f.name) for f in fields(Snapshot)}
        attributed = AttributedSnapshot(**values, keys=keys, ancestry=ancestry, reports=reports)
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
        if action == "shutdown" and isinstance(kernel_id, str):
            # At once, before any await: the next request must not attribute anything to it, even
            # while the kernel manager still lists it for a moment.
            self._gone.add(kernel_id)
            kernels = {kid: info for kid, info in self._table.kernels.items() if kid != kernel_id}
            self._set_table(kernels)
            self.remove_report(kernel_id)
        elif isinstance(kernel_id, str):
            self._gone.discard(kernel_id)
        await self.refresh_kernels()
        if action == "restart" and isinstance(kernel_id, str):
            info = self._table.kernels.get(kernel_id)
            self.remove_report(kernel_id, unless=info.key if info else None)
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
        notebooks: dict[str, str] = {}
        if self.session_manager is not None:
            try:
                for session in await self.session_manager.list_sessions():
                    kernel = session.get("kernel") or {}
                    if kernel.get("id") and session.get("path"):
                        notebooks[kernel["id"]] = session["path"]
            except Exception:
                log.exception("jupyter_gpu: listing sessions failed")
        old = self._table.kernels
        table: dict[str, KernelInfo] = {}
        km = self.kernel_manager
        if km is not None:
            listed = list(km.list_kernel_ids())
            self._gone.intersection_update(listed)  # forgotten once the kernel manager forgot it
            for kernel_id in listed:
                if kernel_id in self._gone:
                    continue
                try:
                    kernel = km.get_kernel(kernel_id)
                except KeyError:
                    continue
                pid = _kernel_pid(kernel)
                before = old.get(kernel_id)
                # The start time is read when a PID is first seen (right after the start event), so
                # a PID reused later by another process never takes the kernel's identity.
                start = (
                    before.start
                    if before is not None and before.pid == pid
                    else (None if pid is None else process_start(pid))
                )
                last = getattr(kernel, "last_activity", None)
                table[kernel_id] = KernelInfo(
                    kernel_id=kernel_id,
                    name=getattr(kernel, "kernel_name", None),
                    pid=pid,
                    notebook=notebooks.get(kernel_id),
                    execution_state=getattr(kernel, "execution_state", None),
                    last_activity=last.timestamp() if last is not None else None,
                    start=start,
                )
        self._set_table(table)
        self._table_at = time.monotonic()

    def _set_table(self, kernels: dict[str, KernelInfo]) -> None:
        if kernels != self._table.kernels:
            self._table = KernelTable(self._table.version + 1, kernels)

    def remove_report(self, kernel_id: str, unless: ProcessKey | None = None) -> None:
        """Delete a kernel's report file (it went away), unless it is the report of process ``unless``."""
        if not self.report_dir or not kernel_id or "/" in kernel_id or kernel_id.startswith("."):
            return
        path = Path(self.report_dir) / f"{REPORT_PREFIX}{kernel_id}.json"
        if unless is not None:
            report = self._report_reader.read_one(path)
            if report is not None and report.key == unless:
                return
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            log.warning("jupyter_gpu: cannot remove the kernel report %s: %s", path, error)

    def remove_orphan_reports(self) -> list[str]:
        """Delete the reports that a dead kernel left behind; returns their kernel ids.

        A kernel removes its report when it exits, and this server removes its kernels' reports when
        it stops; but a server killed outright (SIGKILL: the hub's last resort, the OOM killer)
        does neither, and its kernels then exit through ipykernel's parent poller (``os._exit``)
        without their own clean-up. So when a server starts, every report in its runtime directory
        whose writer (PID and start time) no longer runs, in this PID namespace, is deleted. Files
        of other owners, bad files and reports from another PID namespace are left alone.
        """
        if not self.report_dir:
            return []
        try:
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            namespace = None
        removed = []
        for path in Path(self.report_dir).glob(f"{REPORT_PREFIX}*.json"):
            try:
                if path.stat().st_uid != os.getuid():
                    continue
                report = self._report_reader.read_one(path)
                if report is None or report.start_time is None:
                    continue
                with open(path, "rb") as file:
                    if json.loads(file.read(256 * 1024)).get("pid_namespace") != namespace:
                        continue
                if process_start(report.pid) == report.start_time:
                    continue  # its kernel still runs (a server restarted next to running kernels)
                path.unlink()
                removed.append(report.kernel_id)
            except (OSError, ValueError, AttributeError):
                continue
        if removed:
            log.info("jupyter_gpu: removed %d kernel report(s) left by kernels that no longer run", len(removed))
        return removed

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
        if snapshot is None:
            return (None, table.version, True, int(now))
        stale = now - snapshot.timestamp > self.stale_after_s
        # While stale, age_s is refreshed once a second; a fresh answer keeps the age it was built with.
        return (snapshot.timestamp, table.version, stale, int(now) if stale else None)

    def _store(self, answer: Answer) -> Answer:
        with self._answer_lock:
            current = self._answer
            if current is None or _newer(answer.key, current.key):
                self._answer = answer
        return answer

    def _build(self, snapshot: Snapshot | None, table: KernelTable, now: float) -> Answer:
        """Join a snapshot to the kernel table and render the answer: the snapshot contract plus
        attribution, idle time and staleness (see docs/server.md), as JSON bytes.

        Each process is rendered to its JSON text as soon as it is annotated, so a sample of
        thousands of processes never holds thousands of dicts at once: live dicts would be
        promoted through the garbage collector's generations and make its full collections, which
        pause every thread (the event loop too), more frequent.
        """
        self.builds += 1
        kernels = table.kernels
        if snapshot is None:
            snapshot = Snapshot(
                nvml_available=False,
                timestamp=now,
                error=f"no GPU sample yet: NVML has not answered within {self.config.wait_s:g} s "
                "(the driver may be hung or starting; NVML start-up can take seconds)",
            )
            age_s: float | None = None
            stale = True
        else:
            age_s = max(0.0, now - snapshot.timestamp)
            stale = age_s > self.stale_after_s
        keys: dict[int, ProcessKey] = getattr(snapshot, "keys", {})
        ancestry: dict[int, tuple[ProcessKey, ...]] = getattr(snapshot, "ancestry", {})
        # A report counts only while the process that wrote it is this kernel's process now.
        reports = {
            kid: report
            for kid, report in getattr(snapshot, "reports", {}).items()
            if kid in kernels and kernels[kid].key is not None and report.key == kernels[kid].key
        }
        threshold = self.config.idle_threshold_s
        cull_after, cull_warn = self.config.cull_idle_after_s, self.config.cull_warn_s
        by_key = {info.key: info for info in kernels.values() if info.key is not None}
        by_reported_pid: dict[int, KernelInfo] = {}
        for kernel_id, report in reports.items():
            for pid in report.nvml_pids:
                by_reported_pid.setdefault(pid, kernels[kernel_id])

        dumps = _dumps
        idle_of = {kid: info.idle_s(now) for kid, info in kernels.items()}
        memory_of: dict[str, int] = {}
        gpus_of: dict[str, set[int]] = {}
        slices_of: dict[str, set[str]] = {}
        slice_rows: list[tuple[str, str, str, str, int, int]] = []
        kernel_memory: dict[tuple[str, str, str], int] = {}
        total = unknown = matched = 0
        show_others = self.config.show_other_users
        me = self.me
        gpu_texts = []
        gpu_rows = []
        # The JSON text of each process nobody's kernel owns, per GPU, kept while its (immutable)
        # record is the same object: thousands of other users' steady processes cost no encoding.
        previous_texts = self._texts if (show_others, me) == self._texts_for else {}
        all_texts: dict[int, dict[int, tuple[GpuProcess, str]]] = {}
        for gpu in snapshot.gpus:
            fragments = []
            fragment_of: dict[int, str] = {}  # pid -> its JSON text, for the GPU's slices (MIG mode)
            old_texts = previous_texts.get(gpu.index, {})
            texts = all_texts[gpu.index] = {}
            for process in gpu.processes:
                total += 1
                pid = process.pid
                info = by_key.get(keys.get(pid)) if keys else None  # type: ignore[arg-type]
                if info is None and by_key:
                    info = next((by_key[a] for a in ancestry.get(pid, ()) if a in by_key), None)
                if info is None:
                    info = by_reported_pid.get(pid)
                if info is not None:
                    matched += 1
                    idle_s = idle_of[info.kernel_id]
                    memory = process.memory or 0
                    memory_of[info.kernel_id] = memory_of.get(info.kernel_id, 0) + memory
                    gpus_of.setdefault(info.kernel_id, set()).add(gpu.index)
                    if process.slice is not None:
                        slices_of.setdefault(info.kernel_id, set()).add(process.slice)
                    report = reports.get(info.kernel_id)
                    notebook = info.notebook or (report.session if report else None)
                    label = (info.kernel_id, notebook or "", str(gpu.index))
                    kernel_memory[label] = kernel_memory.get(label, 0) + memory
                    entry = process.to_dict()
                    cull_in_s = (
                        round(max(0.0, cull_after - idle_s), 3)
                        if cull_after > 0 and memory > 0 and idle_s is not None and info.execution_state != "busy"
                        else None
                    )
                    entry.update(
                        kernel_id=info.kernel_id,
                        notebook=notebook,
                        own=True,
                        idle_s=idle_s,
                        idle=bool(idle_s is not None and idle_s >= threshold and memory > 0),
                        cull_in_s=cull_in_s,
                        cull_warning=cull_in_s is not None and cull_in_s <= cull_warn,
                    )
                    fragments.append(dumps(entry))
                    fragment_of[pid] = fragments[-1]
                    continue
                if process.user is None and process.name is None:
                    unknown += 1  # a PID that does not exist here (another PID namespace)
                others = process.user is None or process.user != me
                if others and not show_others:
                    continue
                cached = old_texts.get(pid)
                if cached is not None and cached[0] is process:  # the reader reuses unchanged records
                    texts[pid] = cached  # the same tuple: nothing new for the garbage collector
                    fragments.append(cached[1])
                    fragment_of[pid] = cached[1]
                else:
                    if others:
                        entry = {
                            "pid": pid,
                            "memory": process.memory,
                            "user": process.user,
                            "name": None,
                            "type": process.type,
                        }
                        if process.slice is not None:
                            entry["slice"] = process.slice
                    else:
                        entry = process.to_dict()
                    entry.update(kernel_id=None, notebook=None, own=False, idle_s=None, idle=False)
                    text = dumps(entry)
                    texts[pid] = (process, text)
                    fragments.append(text)
                    fragment_of[pid] = text
            head = replace(gpu, processes=(), slices=()).to_dict()
            del head["processes"], head["slices"]
            # A slice lists the same process entries as its GPU (annotated and filtered the same way:
            # another user's process hidden on the GPU is hidden on its slice too).
            slice_texts = []
            for slice_ in gpu.slices:
                slice_head = replace(slice_, processes=()).to_dict()
                del slice_head["processes"]
                members = ",".join(fragment_of[p.pid] for p in slice_.processes if p.pid in fragment_of)
                slice_texts.append(dumps(slice_head)[:-1] + ',"processes":[' + members + "]}")
                if slice_.error is None:
                    slice_rows.append(
                        (str(gpu.index), gpu.uuid, slice_.uuid, slice_.profile, slice_.memory_used, slice_.memory_total)
                    )
            gpu_texts.append(
                dumps(head)[:-1]
                + ',"processes":['
                + ",".join(fragments)
                + '],"slices":['
                + ",".join(slice_texts)
                + "]}"
            )
            gpu_rows.append(
                (str(gpu.index), gpu.uuid, gpu.name, gpu.error, tuple((name, head.get(name)) for name in GAUGED))
            )

        self._texts, self._texts_for = all_texts, (show_others, me)
        known_slices = {s.uuid for gpu in snapshot.gpus for s in gpu.slices}
        summaries = [
            self._kernel_summary(
                info,
                idle_of[kid],
                memory_of.get(kid),
                gpus_of.get(kid),
                reports.get(kid),
                now,
                slices_of.get(kid),
                known_slices,
            )
            for kid, info in kernels.items()
        ]
        top = replace(snapshot, gpus=()).to_dict()
        del top["gpus"]
        top["kernels"] = summaries
        top["idle_threshold_s"] = float(threshold)
        top["attribution"], top["attribution_note"] = self._attribution(snapshot, total, unknown, matched, reports)
        top["stale"] = stale
        top["age_s"] = None if age_s is None else round(age_s, 3)
        top["interval_s"] = float(self.config.interval_s)
        culling = self.config.cull_idle_after_s > 0
        top["cull_idle_after_s"] = float(self.config.cull_idle_after_s) if culling else None
        top["cull_warn_s"] = float(self.config.cull_warn_s) if culling else None
        body = (dumps(top)[:-1] + ',"gpus":[' + ",".join(gpu_texts) + "]}").encode()
        etag = '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
        gzipped = gzip.compress(body, compresslevel=5, mtime=0)
        kernel_idle = tuple(
            (k["kernel_id"], k["notebook"] or "", k["idle_s"])
            for k in summaries
            if k["gpu_memory"] and k["idle_s"] is not None
        )
        uuids = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
        due = tuple(
            (
                k["kernel_id"],
                k["notebook"] or "",
                k["idle_s"],
                k["gpu_memory"] or sum((k["reported_gpu_memory"] or {}).values()),
                tuple(f"GPU {index} ({uuids.get(index, '?')})" for index in k["gpus"])
                or tuple(f"{key} (the kernel's report)" for key in (k["reported_gpu_memory"] or {})),
            )
            for k in summaries
            if k["cull_in_s"] == 0
        )
        cull_in = tuple(
            (k["kernel_id"], k["notebook"] or "", k["cull_in_s"]) for k in summaries if k["cull_in_s"] is not None
        )
        return Answer(
            key=self._key(snapshot if age_s is not None else None, table, now),
            nvml_available=snapshot.nvml_available,
            timestamp=snapshot.timestamp,
            gpu_rows=tuple(gpu_rows),
            body=body,
            etag=etag,
            gzipped=gzipped,
            kernel_memory=tuple((*label, used) for label, used in sorted(kernel_memory.items())),
            kernel_idle=kernel_idle,
            due=due,
            kernel_cull_in=cull_in,
            slice_rows=tuple(slice_rows),
        )

    def annotate(self, snapshot: Snapshot | None, kernels: dict[str, KernelInfo], now: float) -> dict[str, Any]:
        """The answer for ``snapshot`` joined to ``kernels``, as a dict (what the endpoint sends)."""
        return json.loads(self._build(snapshot, KernelTable(0, kernels), now).body)

    def _kernel_summary(
        self,
        info: KernelInfo,
        idle_s: float | None,
        memory: int | None,
        gpus: set[int] | None,
        report: KernelReport | None,
        now: float,
        slices: set[str] | None = None,
        known_slices: set[str] | frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        reported = dict(report.gpu_memory) if report is not None and report.gpu_memory else None
        # MIG slices the kernel uses: from NVML's processes (by PID), or, where PIDs cannot be
        # matched (a container), from the MIG UUIDs its own report names.
        slices = set(slices or ())
        if reported:
            slices.update(key for key, used in reported.items() if used and key in known_slices)
        holds = bool(memory) or bool(reported and any(reported.values()))
        # GPU-aware culling: only an idle (not busy) kernel that holds GPU memory is ever a candidate.
        after, warn = self.config.cull_idle_after_s, self.config.cull_warn_s
        cull_in_s = (
            round(max(0.0, after - idle_s), 3)
            if after > 0 and holds and idle_s is not None and info.execution_state != "busy"
            else None
        )
        return {
            "kernel_id": info.kernel_id,
            "name": info.name,
            "notebook": info.notebook or (report.session if report else None),
            "pid": info.pid,
            "execution_state": info.execution_state,
            "idle_s": idle_s,
            "idle": bool(idle_s is not None and idle_s >= self.config.idle_threshold_s and holds),
            "gpu_memory": memory or 0,  # bytes NVML attributes to the kernel and its children
            "gpus": sorted(gpus or ()),
            "slices": sorted(slices),  # MIG UUIDs of the slices it holds memory on (MIG only)
            "reported_gpu_memory": reported,  # bytes per GPU as the kernel itself reports (allocator)
            "report_age_s": None if report is None else round(max(0.0, now - report.timestamp), 3),
            "cull_in_s": cull_in_s,  # seconds until the culler shuts it down; null: never (as things stand)
            "cull_warning": cull_in_s is not None and cull_in_s <= warn,
        }

    def _attribution(
        self, snapshot: Snapshot, total: int, unknown: int, matched: int, reports: dict[str, KernelReport]
    ) -> tuple[str, str | None]:
        if not snapshot.nvml_available:
            return "unavailable", f"NVML cannot be read: {snapshot.error}"
        if total == 0 or unknown == 0:
            return "pid", None
        reporting = [r for r in reports.values() if r.gpu_memory]
        if unknown < total:
            return "pid", (
                f"{unknown} of {total} GPU processes have PIDs that do not exist in this "
                "server's PID namespace (other containers, or host PIDs); they are not "
                "attributed to kernels."
            )
        if reporting:
            how = (
                f"{matched} matched by the NVML PIDs the kernels reported"
                if matched
                else "processes are not matched to kernels"
            )
            return "kernel-report", (
                f"{CONTAINER_NOTE} Each kernel's GPU memory comes from its own report "
                f"(kernels[].reported_gpu_memory, the framework's allocator, without "
                f"the CUDA context); {how}."
            )
        if matched:
            return "kernel-report", f"{CONTAINER_NOTE} {matched} matched by the NVML PIDs the kernels reported."
        return "unavailable", (
            f"{CONTAINER_NOTE} No kernel reported its GPU use: load the jupyter_gpu "
            "IPython extension in kernels (see the server extension's documentation)."
        )

    # -- GPU-aware culling (event loop)

    def start_culling(self) -> None:
        """Start the culler on the running loop when ``cull_idle_after_s`` is set (idempotent)."""
        if self.config.cull_idle_after_s > 0 and (self._culling is None or self._culling.done()):
            self._culling = asyncio.ensure_future(self._cull_loop())

    @property
    def cull_every_s(self) -> float:
        """How often the culler looks: a tenth of the idle limit, at most 30 s, at least interval_s."""
        return max(self.config.interval_s, min(30.0, self.config.cull_idle_after_s / 10))

    async def _cull_loop(self) -> None:
        while self.config.cull_idle_after_s > 0:
            await asyncio.sleep(self.cull_every_s)
            try:
                await self.cull_idle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("jupyter_gpu: the GPU-aware culler failed this round; it tries again")

    async def cull_idle(self) -> list[str]:
        """Shut down every kernel that holds GPU memory and has been idle ``cull_idle_after_s``.

        The candidates come from the newest answer (the same figures the sidebar shows); each is
        checked once more against the kernel manager right before its shutdown, so a kernel that
        became busy meanwhile is spared. Returns the ids of the kernels shut down.
        """
        after = self.config.cull_idle_after_s
        km = self.kernel_manager
        if after <= 0 or km is None:
            return []
        answer = await self.answer()
        culled = []
        for kernel_id, notebook, idle_s, memory, gpus in answer.due:
            try:
                kernel = km.get_kernel(kernel_id)
            except KeyError:
                continue
            last = getattr(kernel, "last_activity", None)
            if getattr(kernel, "execution_state", None) == "busy" or (
                last is not None and time.time() - last.timestamp() < after
            ):
                continue  # it ran something since the answer was built
            try:
                await km.shutdown_kernel(kernel_id)
            except Exception:  # gone meanwhile, or a provisioner failure: the others are still culled
                log.exception("jupyter_gpu: culling the idle GPU kernel %s failed", kernel_id)
                continue
            self.culled += 1
            culled.append(kernel_id)
            where = ", ".join(gpus) or "GPUs unknown"
            log.warning(
                "jupyter_gpu: culled idle GPU kernel %s of user %s, notebook %s: idle %.0f s "
                "(cull_idle_after_s = %g), %d bytes (%.1f MiB) of GPU memory freed on %s",
                kernel_id,
                self.user or "?",
                notebook or "(no notebook)",
                idle_s,
                after,
                memory,
                memory / 2**20,
                where,
            )
        return culled

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


def _newer(key: tuple[Any, ...], than: tuple[Any, ...]) -> bool:
    """Whether answer ``key`` is at least as new as ``than`` (sample time, then table version)."""
    return ((key[0] or 0.0), key[1], key[3] or 0) >= ((than[0] or 0.0), than[1], than[3] or 0)
