"""The push to the hub service: this server's report every interval, with its own token, and the
admins' shutdown instructions carried out from the answer (wiring; the body is :mod:`.hub_report`).

Runs when the server has a hub token (``JUPYTERHUB_API_TOKEN``) and knows the service
(``c.JupyterGpuServer.source = "hub-service"`` or a URL, or ``$JUPYTER_GPU_SERVICE_URL``), unless
``c.JupyterGpuServer.report_to_hub = False``. It reads the kernel manager's table (never NVML: the
sampler is not woken) and the kernels' descendants (``/proc``), off the event loop. The token goes
only to the service's proven socket (:func:`jupyter_gpu.sources.remote.push_report`); the service
sends nothing to this server but answers.

A shutdown instruction is carried out only for a kernel of this server's own kernel table (the
service can only name this user's kernels, and only an admin can cause one), and logged with the
admin's name (:func:`.hub_report.shutdown_line`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import psutil

from ..sources.remote import DEFAULT_SERVICE_ACCOUNT, push_report
from .hub_report import MAX_PIDS_PER_KERNEL, report_body, shutdown_line

if TYPE_CHECKING:
    from .service import GpuService

log = logging.getLogger("jupyter_gpu.server")

FIRST_INTERVAL_S = 5.0  # until the service's first answer says otherwise


def family_pids(pids: dict[str, int | None]) -> dict[str, list[int]]:
    """Each kernel's PID and its descendants' (DataLoader workers, subprocesses), at most
    :data:`MAX_PIDS_PER_KERNEL`; a kernel whose process is gone or unknown gets none."""
    found: dict[str, list[int]] = {}
    for kernel_id, pid in pids.items():
        if pid is None:
            found[kernel_id] = []
            continue
        try:
            children = psutil.Process(pid).children(recursive=True)
        except (psutil.Error, OSError):
            found[kernel_id] = []
            continue
        found[kernel_id] = [pid, *(child.pid for child in children)][:MAX_PIDS_PER_KERNEL]
    return found


class HubPusher:
    """The report loop of one :class:`jupyter_gpu.server.service.GpuService`."""

    def __init__(self, service: GpuService, url: str, token: str, account: str = DEFAULT_SERVICE_ACCOUNT) -> None:
        self.service = service
        self.url = url
        self.token = token
        self.account = account
        self.interval_s = FIRST_INTERVAL_S
        self.server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
        self.last_error: str | None = None
        self.pushes = 0
        self.shut_down: list[tuple[str, str]] = []  # (kernel_id, admin) carried out
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Report now and every interval until :meth:`close` (on the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._forever())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _forever(self) -> None:
        while True:
            try:
                await self.push_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the service down or refusing: said once, tried again
                message = f"cannot report to the jupyter-gpu service ({self.url}): {str(error)[:300]}"
                if message != self.last_error:
                    log.warning("jupyter_gpu: %s", message)
                self.last_error = message
            await asyncio.sleep(self.interval_s)

    async def push_once(self) -> dict[str, Any]:
        """One report and its answer's instructions carried out; the answer returned."""
        kernels = dict(await self.service.kernels())
        loop = asyncio.get_running_loop()
        pids = await loop.run_in_executor(None, family_pids, {kid: info.pid for kid, info in kernels.items()})
        config = self.service.config
        body = report_body(kernels, pids, time.time(), self.server, config.idle_threshold_s, config.cull_idle_after_s)
        raw = json.dumps(body, allow_nan=False).encode()
        answer = await loop.run_in_executor(None, push_report, self.url, raw, self.token, self.account)
        self.pushes += 1
        if self.last_error is not None:
            log.info("jupyter_gpu: reporting to the jupyter-gpu service again (%s)", self.url)
        self.last_error = None
        self.interval_s = answer["interval_s"]
        for item in answer["shutdown"]:
            await self._shut_down(item["kernel_id"], item["by"])
        return answer

    async def _shut_down(self, kernel_id: str, by: str) -> None:
        info = (await self.service.kernels()).get(kernel_id)
        if info is None:  # not one of this server's kernels (any more): nothing to do
            return
        result = self.service.kernel_manager.shutdown_kernel(kernel_id)
        if inspect.isawaitable(result):
            await result
        self.shut_down.append((kernel_id, by))
        log.warning("%s", shutdown_line(kernel_id, info.notebook, by, self.service.user))
        await self.service.refresh_kernels()


def start_pusher(service: GpuService) -> HubPusher | None:
    """The pusher of ``service`` when this server has a hub token and knows the service (started
    on the running loop), else None."""
    from ..sources.remote import report_url

    config = service.config
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    url = report_url(config.source) if config.report_to_hub else None
    if not token or not url:
        return None
    pusher = HubPusher(service, url, token, config.service_account)
    pusher.start()
    return pusher
