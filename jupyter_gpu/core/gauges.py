"""The per-GPU Prometheus series, built in one place for every exporter (pure: prometheus_client only).

Two processes export them, never both for one host:

- a Jupyter server reading NVML itself (``c.JupyterGpuServer.source = "nvml"``, the default), on
  its ``/metrics`` (:mod:`jupyter_gpu.server.metrics`);
- the jupyter-gpu JupyterHub service, on ``/services/jupyter-gpu/metrics`` (:mod:`jupyter_gpu.hub.handlers`).
  User servers that take their GPU data from it (``source = "hub-service"``) export only their
  kernels' series, so a host's per-GPU series come from one place however many users it has.

Series (``gpu`` is NVML's index, ``uuid`` the GPU's UUID; ``UUID`` and ``host`` on
``jupyter_gpu_gpu_info`` are spelled as NVIDIA's DCGM exporter spells them, to join "on (UUID)"):

- ``jupyter_gpu_nvml_up``, ``jupyter_gpu_sample_age_seconds`` — the exporter's health;
- ``jupyter_gpu_gpu_info{gpu, UUID, name, host}`` — 1 per GPU;
- ``jupyter_gpu_memory_used_bytes``, ``…_memory_total_bytes``, ``…_utilization_percent``,
  ``…_temperature_celsius``, ``…_power_watts``, ``jupyter_gpu_error`` ``{gpu, uuid, name}``;
- ``jupyter_gpu_mig_memory_used_bytes``, ``…_mig_memory_total_bytes``
  ``{gpu, parent_uuid, mig_uuid, profile}`` — per MIG slice (NVML measures nothing else per slice).

The per-kernel series (:func:`kernel_families`) have two exporters too: a user server for its own
kernels (``/metrics``, which Prometheus scrapes only where no credential goes with the scrape:
Kubernetes, docs/prometheus.md), and the hub service for every user's kernels from their servers'
pushed reports, as far as NVML's PID owners confirm them (:func:`jupyter_gpu.hub.core.kernel_rows`).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from .snapshot import Snapshot

GPU_LABELS = ["gpu", "uuid", "name"]
KERNEL_LABELS = ["kernel_id", "notebook", "user"]
MIG_LABELS = ["gpu", "parent_uuid", "mig_uuid", "profile"]
GAUGED = ("memory_used", "memory_total", "utilization", "temperature", "power")

GpuRow = tuple[str, str, str, str | None, tuple[tuple[str, Any], ...]]  # index, uuid, name, error, values
SliceRow = tuple[str, str, str, str, int, int]  # gpu, parent uuid, MIG uuid, profile, used, total


def host_label(configured: str | None = None) -> str:
    """The ``host`` label: the configured one, else ``$JUPYTER_GPU_HOST``, else the host name."""
    return configured or os.environ.get("JUPYTER_GPU_HOST") or socket.gethostname()


def gpu_rows(snapshot: Snapshot) -> tuple[GpuRow, ...]:
    """One row per GPU of ``snapshot``: the values :func:`device_families` exports."""
    return tuple(
        (str(gpu.index), gpu.uuid, gpu.name, gpu.error, tuple((name, getattr(gpu, name)) for name in GAUGED))
        for gpu in snapshot.gpus
    )


def slice_rows(snapshot: Snapshot) -> tuple[SliceRow, ...]:
    """One row per readable MIG slice of ``snapshot``."""
    return tuple(
        (str(gpu.index), gpu.uuid, slice_.uuid, slice_.profile, slice_.memory_used, slice_.memory_total)
        for gpu in snapshot.gpus
        for slice_ in gpu.slices
        if slice_.error is None
    )


# (kernel_id, notebook, user, GPU index, GPU UUID, bytes) and (kernel_id, notebook, user, seconds)
KernelMemoryRow = tuple[str, str, str, str, str, int]
KernelRow = tuple[str, str, str, float]


def kernel_families(
    memory: list[KernelMemoryRow], idle: list[KernelRow], cull_in: list[KernelRow]
) -> list[GaugeMetricFamily]:
    """``jupyter_gpu_kernel_memory_used_bytes{kernel_id, notebook, user, gpu, UUID}``,
    ``jupyter_gpu_kernel_idle_seconds`` and ``jupyter_gpu_kernel_cull_in_seconds``
    ``{kernel_id, notebook, user}``. UUID is spelled as DCGM's exporter spells it, so PromQL joins
    these with DCGM's device series "on (UUID)" (docs/prometheus.md)."""
    kernel_memory = GaugeMetricFamily(
        "jupyter_gpu_kernel_memory_used_bytes",
        "GPU memory held by a kernel and its child processes (NVML, by PID)",
        labels=[*KERNEL_LABELS, "gpu", "UUID"],
    )
    kernel_idle = GaugeMetricFamily(
        "jupyter_gpu_kernel_idle_seconds",
        "Seconds since a kernel holding GPU memory last ran a cell",
        labels=KERNEL_LABELS,
    )
    cull = GaugeMetricFamily(
        "jupyter_gpu_kernel_cull_in_seconds",
        "Seconds until the GPU-aware culler shuts down this idle kernel holding GPU memory",
        labels=KERNEL_LABELS,
    )
    for *labels, used in memory:
        kernel_memory.add_metric(labels, used)
    for *labels, seconds in idle:
        kernel_idle.add_metric(labels, seconds)
    for *labels, seconds in cull_in:
        cull.add_metric(labels, seconds)
    return [kernel_memory, kernel_idle, cull]


def health_families(nvml_available: bool | None, timestamp: float | None) -> list[GaugeMetricFamily]:
    """``jupyter_gpu_nvml_up`` (0 before any sample) and, once sampled, ``jupyter_gpu_sample_age_seconds``."""
    up = GaugeMetricFamily("jupyter_gpu_nvml_up", "1 when the newest sample could read NVML, else 0")
    if nvml_available is None or timestamp is None:
        up.add_metric([], 0)
        return [up]
    up.add_metric([], 1 if nvml_available else 0)
    age = GaugeMetricFamily(
        "jupyter_gpu_sample_age_seconds", "Age of the newest GPU sample served (grows while NVML hangs)"
    )
    age.add_metric([], max(0.0, time.time() - timestamp))
    return [up, age]


def device_families(rows: tuple[GpuRow, ...], slices: tuple[SliceRow, ...], host: str) -> list[GaugeMetricFamily]:
    """The per-GPU and per-slice families (see the module's docstring); a GPU that could not be read
    has ``jupyter_gpu_error`` 1 and no values."""
    families = {
        "memory_used": GaugeMetricFamily("jupyter_gpu_memory_used_bytes", "GPU memory in use", labels=GPU_LABELS),
        "memory_total": GaugeMetricFamily("jupyter_gpu_memory_total_bytes", "GPU memory in total", labels=GPU_LABELS),
        "utilization": GaugeMetricFamily(
            "jupyter_gpu_utilization_percent", "GPU utilization (percent of time a kernel ran)", labels=GPU_LABELS
        ),
        "temperature": GaugeMetricFamily("jupyter_gpu_temperature_celsius", "GPU temperature", labels=GPU_LABELS),
        "power": GaugeMetricFamily("jupyter_gpu_power_watts", "GPU power draw", labels=GPU_LABELS),
    }
    errors = GaugeMetricFamily("jupyter_gpu_error", "1 when the GPU could not be read", labels=GPU_LABELS)
    info = GaugeMetricFamily(
        "jupyter_gpu_gpu_info", "1 per GPU: its index, UUID, model and host", labels=["gpu", "UUID", "name", "host"]
    )
    for index, uuid, name, error, values in rows:
        labels = [index, uuid, name]
        info.add_metric([index, uuid, name, host], 1)
        errors.add_metric(labels, 1 if error else 0)
        for key, value in values:
            if value is not None and not error:
                families[key].add_metric(labels, value)
    mig_used = GaugeMetricFamily("jupyter_gpu_mig_memory_used_bytes", "MIG slice memory in use", labels=MIG_LABELS)
    mig_total = GaugeMetricFamily("jupyter_gpu_mig_memory_total_bytes", "MIG slice memory in total", labels=MIG_LABELS)
    for gpu_index, parent_uuid, mig_uuid, profile, used, total in slices:
        mig_used.add_metric([gpu_index, parent_uuid, mig_uuid, profile], used)
        mig_total.add_metric([gpu_index, parent_uuid, mig_uuid, profile], total)
    return [info, *families.values(), errors, mig_used, mig_total]
