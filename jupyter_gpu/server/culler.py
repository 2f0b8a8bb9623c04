"""The server's GPU-aware culler (event loop wiring): when to look, whom to shut down, what is left.

The rules are pure and live elsewhere: which kernels are due is :mod:`.cull` (over
:mod:`jupyter_gpu.core.culling`), computed into every answer of :class:`.service.GpuService`, so
the culler shuts down exactly the kernels whose countdown the sidebar showed at zero. This module
runs them: a loop every :func:`.cull.cull_every_s`, a last check of each candidate against the
kernel manager right before its shutdown, the count Prometheus exports
(``jupyter_gpu_kernels_culled_total``), the latest culls (``GET jupyter-gpu/culls``, for the
notification that stays), and the postponements users asked for ("Keep running").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Protocol

from .answer import Answer
from .cell_activity import CellWatch
from .config import JupyterGpuServer
from .cull import Postponements, cull_every_s, cull_record, culled_message, ran_since
from .kernel_table import idle_figures

log = logging.getLogger("jupyter_gpu")

RECENT_CULLS = 50
"""How many culls ``GET jupyter-gpu/culls`` remembers (since the server started)."""


class CulledServer(Protocol):
    """What the culler needs of the server's service (:class:`.service.GpuService`)."""

    config: JupyterGpuServer
    kernel_manager: Any
    user: str
    cells: CellWatch

    async def answer(self) -> Answer: ...


class Culler:
    """The culler of one :class:`.service.GpuService` (started by the extension when
    ``cull_idle_after_s`` is set)."""

    def __init__(self, service: CulledServer) -> None:
        self.service = service
        self.culled = 0  # kernels shut down by the GPU-aware culler (jupyter_gpu_kernels_culled_total)
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_CULLS)  # GET jupyter-gpu/culls
        self.postponed = Postponements()  # "Keep running"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the culler on the running loop when ``cull_idle_after_s`` is set (idempotent)."""
        if self.service.config.cull_idle_after_s > 0 and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._loop())

    def cancel(self) -> None:
        """Stop the loop (the server stops)."""
        if self._task is not None:
            self._task.cancel()

    @property
    def every_s(self) -> float:
        """How often the culler looks: a tenth of the idle limit, at most 30 s, at least interval_s."""
        config = self.service.config
        return cull_every_s(config.interval_s, config.cull_idle_after_s)

    async def _loop(self) -> None:
        while self.service.config.cull_idle_after_s > 0:
            await asyncio.sleep(self.every_s)
            try:
                await self.cull_idle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("jupyter_gpu: the GPU-aware culler failed this round; it tries again")

    async def cull_idle(self) -> list[str]:
        """Shut down every kernel that holds GPU memory and has been idle ``cull_idle_after_s``.

        The candidates come from the newest answer (the same figures the sidebar shows); each is
        checked once more against the kernel manager and its cell clock right before its shutdown,
        so a kernel that ran a cell meanwhile is spared. Returns the ids of the kernels shut down.
        """
        service = self.service
        after = service.config.cull_idle_after_s
        km = service.kernel_manager
        if after <= 0 or km is None:
            return []
        answer = await service.answer()
        culled = []
        for due in answer.due:
            try:
                kernel = km.get_kernel(due.kernel_id)
            except KeyError:
                continue
            state, last = idle_figures(kernel, service.cells.clock(due.kernel_id))
            if ran_since(state, last, time.time(), after):
                continue  # it ran a cell since the answer was built
            self.culled += 1  # counted and recorded before the shutdown: whoever sees it gone finds why
            self.recent.append(record := cull_record(due, time.time()))
            try:
                await km.shutdown_kernel(due.kernel_id)
            except Exception:  # gone meanwhile, or a provisioner failure: the others are still culled
                self.culled -= 1
                self.recent.remove(record)
                log.exception(
                    "jupyter_gpu: culling the idle GPU kernel %s of user %s, notebook %s failed",
                    due.kernel_id,
                    service.user or "?",
                    due.notebook or "(no notebook)",
                )
                continue
            culled.append(due.kernel_id)
            log.warning("%s", culled_message(due, service.user, after))
        return culled
