"""The server's GPU service: one sampler, the kernel table, and the annotated snapshot.

Work is split by thread so the event loop never waits on NVML or walks ``/proc``:

- the sampling thread (:class:`jupyter_gpu.sampler.Sampler`) reads NVML, looks up the ancestors of
  each GPU process (cached per PID while it stays on a GPU) and reads the kernels' self-reports
  (only files whose stamp changed); the result is an :class:`AttributedSnapshot`;
- the event loop keeps a table of this server's kernels (PID from the provisioner, notebook from the
  session manager, last activity), refreshed at most once per interval, and joins it to the newest
  snapshot for each request: dictionary look-ups only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import psutil

from ..history import GpuHistory
from ..processes import PidCache, current_user
from ..sampler import Sampler
from ..snapshots import Snapshot
from .config import JupyterGpuServer

log = logging.getLogger(__name__)

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

    def idle_s(self, now: float) -> float | None:
        """Seconds since the kernel was last busy (0 while busy), None when unknown."""
        if self.execution_state == "busy":
            return 0.0
        if self.last_activity is None:
            return None
        return max(0.0, now - self.last_activity)


@dataclass(frozen=True)
class AttributedSnapshot(Snapshot):
    """A snapshot plus what the sampling thread learnt for attribution (not part of ``to_dict()``)."""

    ancestry: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)


def ancestors(pid: int) -> tuple[int, ...]:
    """The PIDs of ``pid``'s parent, grandparent, …; empty when the process is gone or unreadable."""
    try:
        return tuple(parent.pid for parent in psutil.Process(pid).parents())
    except (psutil.Error, OSError):
        return ()


def _kernel_pid(kernel: Any) -> int | None:
    provisioner = getattr(kernel, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    if pid is None:
        pid = getattr(getattr(provisioner, "process", None), "pid", None)
    return pid if isinstance(pid, int) else None


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
    ) -> None:
        from ..kernel_report import ReportReader

        self.config = config
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.report_dir = report_dir
        self.me = current_user()
        if take is None:
            from ..nvml import snapshot as take
        self._nvml_take = take
        self._ancestry = PidCache(ancestors)  # cached while the PID stays on a GPU
        self._report_reader = ReportReader()
        self.history = GpuHistory(config.history_s, config.interval_s)  # served by history_handler
        self.sampler = Sampler(config.interval_s, take=self._take, linger_s=config.linger_s,
                               name="jupyter-gpu-server-sampler")
        self._kernels: dict[str, KernelInfo] = {}
        self._kernels_at = float("-inf")
        self._refreshing: asyncio.Future[None] | None = None
        self._waiting: asyncio.Future[Snapshot | None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
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
        self.sampler.close(timeout=1.0)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- the sampling thread

    def _take(self) -> Snapshot:
        snapshot = self._nvml_take()
        self.history.record(snapshot)
        pids = {process.pid for gpu in snapshot.gpus for process in gpu.processes}
        ancestry = {pid: self._ancestry.get(pid) for pid in pids}
        self._ancestry.forget_all_but(pids)
        reports = self._report_reader.read(self.report_dir) if self.report_dir else {}
        values = {f.name: getattr(snapshot, f.name) for f in fields(Snapshot)}
        return AttributedSnapshot(**values, ancestry=ancestry, reports=reports)

    # -- the kernel table (event loop)

    async def kernels(self) -> dict[str, KernelInfo]:
        """This server's kernels, refreshed at most once per sampling interval."""
        if time.monotonic() - self._kernels_at >= self.config.interval_s:
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.ensure_future(self._refresh_kernels())
            await asyncio.shield(self._refreshing)
        return self._kernels

    def kernels_nowait(self) -> dict[str, KernelInfo]:
        """The cached kernel table; schedules a refresh when it is old (for synchronous callers)."""
        if time.monotonic() - self._kernels_at >= self.config.interval_s:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return self._kernels
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.ensure_future(self._refresh_kernels())
        return self._kernels

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
        table: dict[str, KernelInfo] = {}
        km = self.kernel_manager
        if km is not None:
            for kernel_id in list(km.list_kernel_ids()):
                try:
                    kernel = km.get_kernel(kernel_id)
                except KeyError:
                    continue
                last = getattr(kernel, "last_activity", None)
                table[kernel_id] = KernelInfo(
                    kernel_id=kernel_id,
                    name=getattr(kernel, "kernel_name", None),
                    pid=_kernel_pid(kernel),
                    notebook=notebooks.get(kernel_id),
                    execution_state=getattr(kernel, "execution_state", None),
                    last_activity=last.timestamp() if last is not None else None,
                )
        self._kernels = table
        self._kernels_at = time.monotonic()

    # -- snapshots (event loop)

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
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-wait")
            loop = asyncio.get_running_loop()
            self._waiting = loop.run_in_executor(self._executor, self.sampler.wait_for_snapshot, newer_than, wait_s)
        try:
            return await asyncio.wait_for(asyncio.shield(self._waiting), wait_s + 0.5)
        except asyncio.TimeoutError:
            return self.sampler.latest

    async def snapshot(self) -> dict[str, Any]:
        """The JSON answer of ``GET jupyter-gpu/snapshot`` (see docs/server.md)."""
        latest = await self.latest()
        kernels = await self.kernels()
        return self.annotate(latest, kernels, time.time())

    def annotate(self, snapshot: Snapshot | None, kernels: dict[str, KernelInfo], now: float) -> dict[str, Any]:
        """Join a snapshot to the kernel table: the contract plus attribution, idle time, staleness."""
        if snapshot is None:
            snapshot = Snapshot(
                nvml_available=False, timestamp=now,
                error=f"no GPU sample yet: NVML has not answered within {self.config.wait_s:g} s "
                      "(the driver may be hung or starting; NVML start-up can take seconds)",
            )
            age_s: float | None = None
            stale = True
        else:
            age_s = max(0.0, now - snapshot.timestamp)
            stale = age_s > self.stale_after_s
        data = snapshot.to_dict()
        ancestry: dict[int, tuple[int, ...]] = getattr(snapshot, "ancestry", {})
        reports = {kid: report for kid, report in getattr(snapshot, "reports", {}).items() if kid in kernels}
        threshold = self.config.idle_threshold_s
        by_pid = {info.pid: info for info in kernels.values() if info.pid is not None}
        for kernel_id, report in reports.items():
            for pid in report.get("nvml_pids") or ():
                if isinstance(pid, int):
                    by_pid.setdefault(pid, kernels[kernel_id])

        idle_of = {kid: info.idle_s(now) for kid, info in kernels.items()}
        memory_of: dict[str, int] = {}
        gpus_of: dict[str, set[int]] = {}
        total = unknown = matched = 0
        for gpu in data["gpus"]:
            shown = []
            for process in gpu["processes"]:
                total += 1
                info = by_pid.get(process["pid"])
                if info is None:
                    info = next((by_pid[a] for a in ancestry.get(process["pid"], ()) if a in by_pid), None)
                if info is not None:
                    matched += 1
                    idle_s = idle_of[info.kernel_id]
                    memory = process.get("memory") or 0
                    memory_of[info.kernel_id] = memory_of.get(info.kernel_id, 0) + memory
                    gpus_of.setdefault(info.kernel_id, set()).add(gpu["index"])
                    process.update(kernel_id=info.kernel_id, notebook=info.notebook or _session_of(reports, info),
                                   own=True, idle_s=idle_s,
                                   idle=bool(idle_s is not None and idle_s >= threshold and memory > 0))
                    shown.append(process)
                    continue
                if process.get("user") is None and process.get("name") is None:
                    unknown += 1  # a PID that does not exist here (another PID namespace)
                user = process.get("user")
                if user is None or user != self.me:
                    if not self.config.show_other_users:
                        continue
                    process = {"pid": process["pid"], "memory": process.get("memory"),
                               "user": process.get("user"), "name": None, "type": process.get("type")}
                process.update(kernel_id=None, notebook=None, own=False, idle_s=None, idle=False)
                shown.append(process)
            gpu["processes"] = shown

        data["kernels"] = [
            self._kernel_summary(info, idle_of[kid], memory_of.get(kid), gpus_of.get(kid), reports.get(kid), now)
            for kid, info in kernels.items()
        ]
        data["idle_threshold_s"] = float(threshold)
        data["attribution"], data["attribution_note"] = self._attribution(
            snapshot, total, unknown, matched, reports)
        data["stale"] = stale
        data["age_s"] = None if age_s is None else round(age_s, 3)
        data["interval_s"] = float(self.config.interval_s)
        return data

    def _kernel_summary(self, info: KernelInfo, idle_s: float | None, memory: int | None,
                        gpus: set[int] | None, report: dict[str, Any] | None, now: float) -> dict[str, Any]:
        reported = None
        if report is not None and isinstance(report.get("gpu_memory"), dict):
            reported = {str(key): int(value) for key, value in report["gpu_memory"].items()
                        if isinstance(value, (int, float))}
        holds = bool(memory) or bool(reported and any(reported.values()))
        return {
            "kernel_id": info.kernel_id,
            "name": info.name,
            "notebook": info.notebook or _session_of({info.kernel_id: report} if report else {}, info),
            "pid": info.pid,
            "execution_state": info.execution_state,
            "idle_s": idle_s,
            "idle": bool(idle_s is not None and idle_s >= self.config.idle_threshold_s and holds),
            "gpu_memory": memory or 0,  # bytes NVML attributes to the kernel and its children
            "gpus": sorted(gpus or ()),
            "reported_gpu_memory": reported,  # bytes per GPU as the kernel itself reports (allocator)
            "report_age_s": None if report is None else round(max(0.0, now - float(report.get("timestamp", now))), 3),
        }

    def _attribution(self, snapshot: Snapshot, total: int, unknown: int, matched: int,
                     reports: dict[str, dict[str, Any]]) -> tuple[str, str | None]:
        if not snapshot.nvml_available:
            return "unavailable", f"NVML cannot be read: {snapshot.error}"
        if total == 0 or unknown == 0:
            return "pid", None
        reporting = [r for r in reports.values() if r.get("gpu_memory")]
        if unknown < total:
            return "pid", (f"{unknown} of {total} GPU processes have PIDs that do not exist in this "
                           "server's PID namespace (other containers, or host PIDs); they are not "
                           "attributed to kernels.")
        if reporting:
            how = (f"{matched} matched by the NVML PIDs the kernels reported" if matched else
                   "processes are not matched to kernels")
            return "kernel-report", (f"{CONTAINER_NOTE} Each kernel's GPU memory comes from its own report "
                                     f"(kernels[].reported_gpu_memory, the framework's allocator, without "
                                     f"the CUDA context); {how}.")
        if matched:
            return "kernel-report", f"{CONTAINER_NOTE} {matched} matched by the NVML PIDs the kernels reported."
        return "unavailable", (f"{CONTAINER_NOTE} No kernel reported its GPU use: load the jupyter_gpu "
                               "IPython extension in kernels (see the server extension's documentation).")

    # -- Prometheus

    def metrics_view(self) -> dict[str, Any] | None:
        """The annotated snapshot for a scrape: records demand, never waits (None before any sample)."""
        self.sampler.touch()
        latest = self.sampler.latest
        if latest is None:
            return None
        return self.annotate(latest, self.kernels_nowait(), time.time())


def _session_of(reports: dict[str, dict[str, Any]], info: KernelInfo) -> str | None:
    report = reports.get(info.kernel_id)
    session = report.get("session") if report else None
    return session if isinstance(session, str) else None
