"""Prometheus gauges on the server's own ``/metrics``, read from the sampler's cache.

One :class:`GpuCollector` is registered in ``prometheus_client.REGISTRY`` per process, however
often the extension is loaded (tests start many servers; a server may load it twice); loading binds
it to the newest service. ``/metrics`` itself belongs to jupyter_server, so
``ServerApp.authenticate_prometheus`` decides who may scrape. A scrape records demand (the sampler
keeps running while Prometheus scrapes) and never waits for NVML: it serves the newest sample and
says how old it is in ``jupyter_gpu_sample_age_seconds``.

The per-GPU series (:mod:`jupyter_gpu.core.gauges`) are exported here only when this server reads NVML
itself. A server that takes its GPU data from the jupyter-gpu hub service
(``c.JupyterGpuServer.source = "hub-service"``) exports its kernels' series only: the service
exports the host's GPUs once, at ``/services/jupyter-gpu/metrics`` — also while this server has
fallen back to its own sampler, so that a host never has two sources of one GPU's series.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from ..core.gauges import device_families, health_families, host_label, kernel_families
from .service import GpuService

log = logging.getLogger(__name__)


class GpuCollector(Collector):
    """Yields the ``jupyter_gpu_*`` gauges from the bound service's newest answer.

    The families are built completely before the first one is handed over: any exception costs
    this scrape the ``jupyter_gpu_*`` families (logged once per kind of failure), never the rest of
    ``/metrics`` (jupyter_server's own metrics, other collectors), which stays a 200.
    """

    def __init__(self) -> None:
        self.service: GpuService | None = None
        self._logged: set[str] = set()

    def describe(self) -> list[Any]:
        return []  # no collect() at registration time: that would touch NVML at start-up

    def collect(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        try:
            return self._families()
        except Exception as error:
            kind = f"{type(error).__name__}: {error}"[:200]
            if kind not in self._logged:
                self._logged.add(kind)
                log.exception("jupyter_gpu: the GPU gauges are left out of this scrape")
            return []

    def _families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        service = self.service
        if service is None or not service.config.prometheus:
            return []
        answer = service.metrics_answer()
        if answer is None:
            return list(health_families(None, None))
        families: list[GaugeMetricFamily | CounterMetricFamily] = list(
            health_families(answer.nvml_available, answer.timestamp)
        )
        if service.device_source is None:  # with the hub service, the host's GPUs are its series
            families += device_families(answer.gpu_rows, answer.slice_rows, host_label(service.config.host_label))
        culled = CounterMetricFamily(
            "jupyter_gpu_kernels_culled",
            "Idle kernels holding GPU memory shut down by the GPU-aware culler",
            labels=["user"],
        )
        uuids = {index: uuid for index, uuid, *_ in answer.gpu_rows}
        # Public /metrics (authenticate_prometheus = False): no notebook paths unless the admin opts in.
        hide = service.metrics_public and not service.config.prometheus_notebook_labels
        user = service.user
        families += kernel_families(
            [
                (kernel_id, "" if hide else notebook, user, gpu_index, uuids.get(gpu_index, ""), used)
                for kernel_id, notebook, gpu_index, used in answer.kernel_memory
            ],
            [(kernel_id, "" if hide else notebook, user, idle_s) for kernel_id, notebook, idle_s in answer.kernel_idle],
            [(kernel_id, "" if hide else notebook, user, s) for kernel_id, notebook, s in answer.kernel_cull_in],
        )
        if service.config.cull_idle_after_s > 0 or service.culler.culled:
            culled.add_metric([user], service.culler.culled)
            families.append(culled)
        return families


_collector: GpuCollector | None = None
_lock = threading.Lock()


def bind(service: GpuService | None) -> GpuCollector:
    """Register the process's collector once and point it at ``service`` (None unbinds)."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = GpuCollector()
            REGISTRY.register(_collector)
        _collector.service = service
        return _collector


def unbind(service: GpuService) -> None:
    """Unbind the collector if it still serves ``service`` (a server shutting down)."""
    with _lock:
        if _collector is not None and _collector.service is service:
            _collector.service = None
