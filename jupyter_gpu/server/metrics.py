"""Prometheus gauges on the server's own ``/metrics``, read from the sampler's cache.

One :class:`GpuCollector` is registered in ``prometheus_client.REGISTRY`` per process, however
often the extension is loaded (tests start many servers; a server may load it twice); loading binds
it to the newest service. ``/metrics`` itself belongs to jupyter_server, so
``ServerApp.authenticate_prometheus`` decides who may scrape. A scrape records demand (the sampler
keeps running while Prometheus scrapes) and never waits for NVML: it serves the newest sample and
says how old it is in ``jupyter_gpu_sample_age_seconds``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from .service import GpuService

log = logging.getLogger(__name__)

GPU_LABELS = ["gpu", "uuid", "name"]
MIG_LABELS = ["gpu", "parent_uuid", "mig_uuid", "profile"]  # one series per MIG slice


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

    def collect(self) -> list[GaugeMetricFamily | CounterMetricFamily]:  # type: ignore[override]
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
        up = GaugeMetricFamily("jupyter_gpu_nvml_up", "1 when the newest sample could read NVML, else 0")
        age = GaugeMetricFamily("jupyter_gpu_sample_age_seconds",
                                "Age of the newest GPU sample served (grows while NVML hangs)")
        if answer is None:
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1 if answer.nvml_available else 0)
        age.add_metric([], max(0.0, time.time() - answer.timestamp))

        families = {
            "memory_used": GaugeMetricFamily("jupyter_gpu_memory_used_bytes", "GPU memory in use",
                                             labels=GPU_LABELS),
            "memory_total": GaugeMetricFamily("jupyter_gpu_memory_total_bytes", "GPU memory in total",
                                              labels=GPU_LABELS),
            "utilization": GaugeMetricFamily("jupyter_gpu_utilization_percent",
                                             "GPU utilization (percent of time a kernel ran)", labels=GPU_LABELS),
            "temperature": GaugeMetricFamily("jupyter_gpu_temperature_celsius", "GPU temperature",
                                             labels=GPU_LABELS),
            "power": GaugeMetricFamily("jupyter_gpu_power_watts", "GPU power draw", labels=GPU_LABELS),
        }
        errors = GaugeMetricFamily("jupyter_gpu_error", "1 when the GPU could not be read", labels=GPU_LABELS)
        # Kernel series carry the server's user; UUID is spelled as DCGM's exporter spells it, so
        # PromQL joins ours with DCGM's device series "on (UUID)" (docs/prometheus.md).
        kernel_memory = GaugeMetricFamily(
            "jupyter_gpu_kernel_memory_used_bytes",
            "GPU memory held by a kernel of this server and its child processes (NVML, by PID)",
            labels=["kernel_id", "notebook", "user", "gpu", "UUID"])
        kernel_idle = GaugeMetricFamily(
            "jupyter_gpu_kernel_idle_seconds", "Seconds since a kernel holding GPU memory was last busy",
            labels=["kernel_id", "notebook", "user"])
        cull_in = GaugeMetricFamily(
            "jupyter_gpu_kernel_cull_in_seconds",
            "Seconds until the GPU-aware culler shuts down this idle kernel holding GPU memory",
            labels=["kernel_id", "notebook", "user"])
        culled = CounterMetricFamily("jupyter_gpu_kernels_culled",
                                     "Idle kernels holding GPU memory shut down by the GPU-aware culler",
                                     labels=["user"])
        info = GaugeMetricFamily("jupyter_gpu_gpu_info", "1 per GPU: its index, UUID, model and host",
                                 labels=["gpu", "UUID", "name", "host"])
        host = service.config.host_label or os.environ.get("JUPYTER_GPU_HOST") or socket.gethostname()
        uuids = {}
        for index, uuid, name, error, values in answer.gpu_rows:
            labels = [index, uuid, name]
            uuids[index] = uuid
            info.add_metric([index, uuid, name, host], 1)
            errors.add_metric(labels, 1 if error else 0)
            for key, value in values:
                if value is not None and not error:
                    families[key].add_metric(labels, value)
        # Public /metrics (authenticate_prometheus = False): no notebook paths unless the admin opts in.
        hide = service.metrics_public and not service.config.prometheus_notebook_labels
        user = service.user
        for kernel_id, notebook, gpu_index, used in answer.kernel_memory:
            kernel_memory.add_metric([kernel_id, "" if hide else notebook, user, gpu_index, uuids.get(gpu_index, "")],
                                     used)
        for kernel_id, notebook, idle_s in answer.kernel_idle:
            kernel_idle.add_metric([kernel_id, "" if hide else notebook, user], idle_s)
        for kernel_id, notebook, seconds in answer.kernel_cull_in:
            cull_in.add_metric([kernel_id, "" if hide else notebook, user], seconds)
        # MIG slices: memory only (NVML measures no utilization, temperature or power per slice).
        mig_used = GaugeMetricFamily("jupyter_gpu_mig_memory_used_bytes", "MIG slice memory in use",
                                     labels=MIG_LABELS)
        mig_total = GaugeMetricFamily("jupyter_gpu_mig_memory_total_bytes", "MIG slice memory in total",
                                      labels=MIG_LABELS)
        for gpu_index, parent_uuid, mig_uuid, profile, used, total in answer.slice_rows:
            mig_labels = [gpu_index, parent_uuid, mig_uuid, profile]
            mig_used.add_metric(mig_labels, used)
            mig_total.add_metric(mig_labels, total)
        families_out: list[GaugeMetricFamily | CounterMetricFamily] = [
            up, age, info, *families.values(), errors, kernel_memory, kernel_idle, cull_in, mig_used, mig_total]
        if service.config.cull_idle_after_s > 0 or service.culled:
            culled.add_metric([user], service.culled)
            families_out.append(culled)
        return families_out


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
