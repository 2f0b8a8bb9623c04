"""Usage accounting for the service (``--usage-db``): every interval, who holds what (the console's
admin view, from the service's NVML sample and the user servers' latest reports) added to the
SQLite file on its own thread, and ``api/usage``'s answers (tornado-free wiring around the pure
:mod:`.accounting` and the file :mod:`.store`)."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core.snapshot import GpuInfo, Snapshot
from . import accounting, core
from .store import UsageStore

log = logging.getLogger("jupyter_gpu.hub")


class UsageAccountant:
    """Usage accounting for a :class:`HubService` (``--usage-db``): a sample of who holds what every
    ``interval_s``, added to the SQLite file (:mod:`jupyter_gpu.hub.store`) on its own thread, and
    the answers of ``api/usage``. The charts' history is restored from the file at the start."""

    def __init__(self, service: Any, path: str, interval_s: float = 60.0) -> None:
        self.service = service
        self.store = UsageStore(path)  # used from one thread only: its executor's
        self.interval_s = interval_s
        self._store_thread = ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-hub-store")
        self._accounted: float | None = None  # when the last interval was accounted
        self._accounting: asyncio.Task[None] | None = None

    def close(self) -> None:
        """Stop accounting; the interval being written is finished, then the file closed."""
        if self._accounting is not None:
            self._accounting.cancel()
        self._store_thread.shutdown(wait=True, cancel_futures=True)
        self.store.close()

    async def _in_store(self, work: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._store_thread, work, *args)

    async def _sample_to_account(self) -> dict[str, Any]:
        """The console's admin view now (the attribution rule applied), for :meth:`account_once`.

        A fresh sample of the sampler when somebody is looking; else one NVML sample taken on the
        store's thread, so accounting alone never keeps the sampler running (``--linger``). The
        kernels are those of the user servers' latest reports (pushed to the service): accounting
        asks no user server anything, so it wakes no user server's sampler."""
        if self.service.prometheus_url:
            return await self.service.prometheus_console("", "admin")
        devices = self.service.sampler.latest
        if devices is None or time.time() - devices.timestamp >= 2 * self.service.interval_s + 1:
            devices = await self._in_store(self.service._take)
        return core.console(devices, {}, self.service.servers(devices), "", "admin", self.service.system_user)

    async def account_once(self, now: float | None = None) -> None:
        """Sample who holds what and add the time since the last call (at most two intervals: a gap
        while the service was down or stalled is not counted) to the usage file, one transaction."""
        data = await self._sample_to_account()
        now = time.time() if now is None else now
        seconds = 0.0 if self._accounted is None else min(now - self._accounted, 2 * self.interval_s)
        self._accounted = now
        gpus = [
            {
                "uuid": f"{gpu['host']}:{gpu['uuid']}" if gpu.get("host") else gpu["uuid"],
                "index": gpu["index"],
                "name": gpu["name"],
                "utilization": gpu["utilization"] if not gpu["error"] else None,
                "memory": 100 * gpu["memory_used"] / gpu["memory_total"]
                if not gpu["error"] and gpu["memory_total"]
                else None,
            }
            for gpu in data["gpus"]
        ]
        await self._in_store(self.store.record, now, accounting.interval_usage(data, seconds), gpus)

    def _restore_history(self) -> None:
        """The charts' history from the usage file, so a restart does not blank them."""
        by_time: dict[float, list[GpuInfo]] = {}
        for t, key, index, name, utilization, memory in self.store.gpu_history(time.time() - self.service.history_s):
            by_time.setdefault(t, []).append(
                GpuInfo(
                    index,
                    key,
                    name,
                    memory_total=1000 if memory is not None else 0,
                    memory_used=round(10 * memory) if memory is not None else 0,
                    utilization=round(utilization) if utilization is not None else None,
                )
            )
        for t, gpus in sorted(by_time.items()):
            self.service.history.record(Snapshot(nvml_available=True, timestamp=t, gpus=tuple(gpus)))

    def start(self) -> None:
        """Restore the charts' history and account every ``interval_s`` (on the clock's multiples)
        until :meth:`close`."""
        if self._accounting is not None:
            return
        try:
            self._restore_history()
        except Exception:  # a history lost, never the service
            log.exception("jupyter-gpu: the GPU history could not be read from %s", self.store.path)

        async def forever() -> None:
            while True:
                interval = self.interval_s
                await asyncio.sleep(interval - time.time() % interval)
                try:
                    await self.account_once()
                except Exception:  # one interval lost, logged; the next one is tried
                    log.exception("jupyter-gpu: this interval's usage could not be recorded")

        self._accounting = asyncio.ensure_future(forever())

    async def usage(self, window: str, viewer: str, admin: bool) -> dict[str, Any]:
        """``api/usage``'s answer for ``viewer`` over ``window`` (:data:`accounting.WINDOWS`): whole
        hours, the current one and those before it (a day: the current hour and the 23 before)."""
        until = time.time()
        since = (until // 3600 + 1) * 3600 - accounting.WINDOWS[window]
        rows = await self._in_store(self.store.usage, since, until)
        answer = accounting.summary(rows, window, since, until, viewer, admin)
        answer["interval_s"] = self.interval_s
        return answer
