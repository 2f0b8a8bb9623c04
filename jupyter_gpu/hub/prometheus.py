"""The console's data read from Prometheus instead of local NVML: every GPU of every node (pure).

On Kubernetes no process sees every node; Prometheus scrapes every user pod's ``/metrics``, with no
token (``deploy/prometheus/kubernetes/``; on one host it scrapes the service alone). With
``--prometheus-url`` the service asks Prometheus's HTTP API one instant query, :data:`INSTANT_QUERY`
(every ``jupyter_gpu_*`` series the console needs), and two range queries for the GPUs' history
(:func:`range_queries`), and this module turns the answers into the JSON of
:func:`jupyter_gpu.hub.core.console` plus ``"source": "prometheus"``, ``"hosts"`` (sorted) and
``"host"`` on every GPU and kernel. Per-GPU ``memory_by_gpu`` keys are the GPU index on one host and
``"<host>:<index>"`` when there are several.

Series used (names and labels as ``jupyter_gpu.server.metrics`` exports them):

- ``jupyter_gpu_gpu_info{gpu, UUID, name, host}`` — where each GPU is (joins on ``UUID``);
- ``jupyter_gpu_memory_used_bytes``, ``jupyter_gpu_memory_total_bytes``,
  ``jupyter_gpu_utilization_percent``, ``jupyter_gpu_error`` ``{gpu, uuid, name}`` — every user
  server of a host repeats them: one row per ``uuid`` is kept;
- ``jupyter_gpu_kernel_memory_used_bytes{kernel_id, notebook, user, gpu, UUID}``,
  ``jupyter_gpu_kernel_idle_seconds{kernel_id, notebook, user}``,
  ``jupyter_gpu_kernel_cull_in_seconds{kernel_id, notebook, user}``.

A kernel's user is ``jupyterhub_user``, the target label the Kubernetes scrape config gives each
user pod from KubeSpawner's annotation (the cluster's word, which a scraped series cannot override
while ``honor_labels`` is off, as by default), else its own ``user`` label (on one host, the hub
service's series: the user whose token pushed the report); a series whose ``user`` differs from its
target's ``jupyterhub_user`` is dropped (a server claiming its kernels are another user's). A GPU's
or kernel's host is ``jupyter_gpu_gpu_info``'s ``host`` for its UUID, else the series' own ``host``
label (a target label), else its ``instance``.

**Untrusted input.** Whatever answers at the configured URL is checked like any other process's
file: the answer's shape, at most :data:`MAX_SERIES` series, label values that are strings of
bounded length, values that are finite numbers (bytes non-negative, percentages in 0-100). A series
that fails is dropped with one log line (at most :data:`MAX_LOG_LINES` per answer, then a count);
an answer that fails as a whole becomes the console's ``error``, never an exception.

**Privacy rule**: the same as :func:`jupyter_gpu.hub.core.console` — a viewer who is not an admin
gets other users' kernels without ``kernel_id`` and ``notebook``.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from ..core.culling import is_idle
from ..core.i18n import _
from ..core.wire import WireError, maybe, number

log = logging.getLogger("jupyter_gpu.hub")

GPU_SERIES = {
    "jupyter_gpu_memory_used_bytes": "memory_used",
    "jupyter_gpu_memory_total_bytes": "memory_total",
    "jupyter_gpu_utilization_percent": "utilization",
    "jupyter_gpu_error": "error",
}
KERNEL_SERIES = {
    "jupyter_gpu_kernel_memory_used_bytes": "memory",
    "jupyter_gpu_kernel_idle_seconds": "idle_s",
    "jupyter_gpu_kernel_cull_in_seconds": "cull_in_s",
}
INFO_SERIES = "jupyter_gpu_gpu_info"
INSTANT_QUERY = '{__name__=~"' + "|".join(sorted([INFO_SERIES, *GPU_SERIES, *KERNEL_SERIES])) + '"}'
MAX_SERIES = 50_000
MAX_BODY_BYTES = 64 * 2**20  # the HTTP client refuses a larger answer before it is parsed
MAX_LOG_LINES = 5
MAX_HISTORY_POINTS = 2_000
LABEL_LIMITS = {"notebook": 4096}
LABEL_LIMIT = 256
_INDEX = re.compile(r"[0-9]{1,4}")


class PrometheusError(WireError):
    """The answer as a whole is unusable (its message becomes the console's ``error``)."""


def range_queries() -> dict[str, str]:
    """The two range queries of the GPUs' history: utilization (%) and memory (% of total), by uuid."""
    return {
        "utilization": "max by (uuid) (jupyter_gpu_utilization_percent)",
        "memory": "max by (uuid) (100 * jupyter_gpu_memory_used_bytes / jupyter_gpu_memory_total_bytes)",
    }


class _Dropped:
    """Counts dropped series and logs the first few, one line each."""

    def __init__(self, logged: set[str] | None = None) -> None:
        self.count = 0
        self.logged = logged

    def __call__(self, reason: str, metric: Any) -> None:
        name = metric.get("__name__") if isinstance(metric, dict) else None
        what = name if isinstance(name, str) else type(metric).__name__
        line = f"jupyter-gpu: Prometheus series dropped ({reason}): {what[:200]}"
        if self.logged is not None:  # a caller asking every few seconds: each kind of drop once
            if line in self.logged or len(self.logged) >= 1000:
                return
            self.logged.add(line)
        self.count += 1
        if self.count <= MAX_LOG_LINES:
            log.warning("%s", line)

    def summary(self) -> None:
        if self.count > MAX_LOG_LINES:
            log.warning("jupyter-gpu: %d more Prometheus series dropped", self.count - MAX_LOG_LINES)


def _result(answer: Any, result_type: str) -> list[Any]:
    """The ``data.result`` list of an API answer, or :class:`PrometheusError`."""
    if not isinstance(answer, dict):
        raise PrometheusError(_("Prometheus answered something that is not a JSON object"))
    if answer.get("status") != "success":
        error = answer.get("error")
        raise PrometheusError(
            _("Prometheus answered an error: {error}").format(error=error[:300] if isinstance(error, str) else "?")
        )
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != result_type or not isinstance(data.get("result"), list):
        raise PrometheusError(_("Prometheus answered no {kind} result").format(kind=result_type))
    if len(data["result"]) > MAX_SERIES:
        raise PrometheusError(
            _("Prometheus answered {count} series (more than {limit})").format(
                count=len(data["result"]), limit=MAX_SERIES
            )
        )
    return data["result"]


def _labels(metric: Any) -> dict[str, str] | None:
    """The series' labels if every one is a string of bounded length (else None)."""
    if not isinstance(metric, dict) or len(metric) > 64:
        return None
    for key, value in metric.items():
        if not isinstance(key, str) or not isinstance(value, str) or len(value) > LABEL_LIMITS.get(key, LABEL_LIMIT):
            return None
    return metric


def _number(sample: Any) -> tuple[float, float] | None:
    """(timestamp, value) of a ``[ts, "value"]`` pair, both finite (Prometheus sends "NaN", "+Inf")."""
    if not isinstance(sample, list) or len(sample) != 2 or not isinstance(sample[1], str) or len(sample[1]) > 64:
        return None
    stamp = maybe(number, sample[0], "timestamp")  # 10**400 included: None, not OverflowError
    try:
        value = float(sample[1])  # Prometheus writes values as strings
    except ValueError:
        return None
    return (stamp, value) if stamp is not None and math.isfinite(value) else None


def _host(labels: dict[str, str], uuid: str | None, hosts: dict[str, str]) -> str:
    return hosts.get(uuid or "") or labels.get("host") or labels.get("instance") or "unknown"


def _check_value(kind: str, value: float) -> bool:
    if kind == "utilization":
        return 0 <= value <= 100
    return value >= 0 and (kind in ("idle_s", "cull_in_s", "error") or value < 2**63)


def devices_and_kernels(
    answer: Any, logged: set[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float | None]:
    """GPUs (one per UUID) and kernels (one per user and kernel id) in the answer to
    :data:`INSTANT_QUERY`, plus the answer's evaluation time. Raises :class:`PrometheusError`.

    ``logged``: the log lines of dropped series already written (kept by the caller, updated here),
    so a service asking every second logs each kind of bad series once."""
    result = _result(answer, "vector")
    dropped = _Dropped(logged)
    rows: list[tuple[str, dict[str, str], float]] = []
    stamp: float | None = None
    for series in result:
        metric = series.get("metric") if isinstance(series, dict) else None
        labels = _labels(metric)
        name = labels.get("__name__") if labels else None
        if labels is None or name is None:
            dropped("labels are not short strings", metric)
            continue
        sample = _number(series.get("value"))
        kind = GPU_SERIES.get(name) or KERNEL_SERIES.get(name) or ("info" if name == INFO_SERIES else None)
        if kind is None:
            dropped("not a series the console reads", labels)
            continue
        if sample is None or not _check_value(kind, sample[1]):
            dropped("value is not a finite number in range", labels)
            continue
        stamp = sample[0] if stamp is None else max(stamp, sample[0])
        rows.append((kind, labels, sample[1]))

    hosts: dict[str, str] = {}
    for kind, labels, _value in rows:
        if kind == "info" and labels.get("UUID") and labels.get("host"):
            hosts[labels["UUID"]] = labels["host"]

    gpus: dict[str, dict[str, Any]] = {}
    for kind, labels, value in rows:
        if kind not in GPU_SERIES.values() and kind != "info":
            continue
        uuid = labels.get("uuid") or labels.get("UUID")
        index = labels.get("gpu", "")
        if not uuid or not _INDEX.fullmatch(index):
            dropped("no uuid or GPU index", labels)
            continue
        gpu = gpus.setdefault(
            uuid,
            {
                "host": _host(labels, uuid, hosts),
                "index": int(index),
                "uuid": uuid,
                "name": labels.get("name", ""),
                "memory_total": 0,
                "memory_used": 0,
                "utilization": None,
                "error": None,
            },
        )
        if kind in ("memory_used", "memory_total"):
            gpu[kind] = int(value)
        elif kind == "utilization":
            gpu["utilization"] = round(value)
        elif kind == "error" and value > 0:
            gpu["error"] = _("this GPU could not be read (jupyter_gpu_error)")

    kernels: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, labels, value in rows:
        if kind not in KERNEL_SERIES.values():
            continue
        # The scrape target's jupyterhub_user (set by the admin's scrape config) outranks the user
        # label the server exports about itself: a server cannot put its kernels under another user.
        claimed, target = labels.get("user"), labels.get("jupyterhub_user")
        if claimed and target and claimed != target:
            dropped("a user label that is not the scrape target's jupyterhub_user", labels)
            continue
        user = target or claimed
        kernel_id = labels.get("kernel_id")
        if not user or not kernel_id or len(kernel_id) > 64:
            dropped("no user or kernel_id label", labels)
            continue
        kernel = kernels.setdefault(
            (user, kernel_id),
            {
                "user": user,
                "host": None,
                "kernel_id": kernel_id,
                "notebook": labels.get("notebook") or None,
                "execution_state": None,
                "idle_s": None,
                "idle": False,
                "cull_in_s": None,
                "gpu_memory": 0,
                "memory_by_gpu": {},
                "_seen": set(),
            },
        )
        if kind == "memory":
            index = labels.get("gpu", "")
            if not _INDEX.fullmatch(index):
                dropped("no GPU index", labels)
                continue
            host = _host(labels, labels.get("UUID"), hosts)
            if (host, index) in kernel["_seen"]:  # the same target scraped twice
                continue
            kernel["_seen"].add((host, index))
            kernel["host"] = kernel["host"] or host
            key = (host, index)
            kernel["memory_by_gpu"][key] = kernel["memory_by_gpu"].get(key, 0) + int(value)
            kernel["gpu_memory"] += int(value)
        else:
            kernel[kind] = value
            if kernel["host"] is None and (labels.get("host") or labels.get("instance")):
                kernel["host"] = _host(labels, None, hosts)
    dropped.summary()
    for kernel in kernels.values():
        del kernel["_seen"]
    ordered = sorted(gpus.values(), key=lambda g: (g["host"], g["index"], g["uuid"]))
    return ordered, list(kernels.values()), stamp


def history(
    answers: dict[str, Any], limit: int = MAX_HISTORY_POINTS, logged: set[str] | None = None
) -> dict[str, dict[str, list[Any]]]:
    """Per uuid ``{"t", "utilization", "memory"}`` columns (as :class:`jupyter_gpu.core.history.GpuHistory`
    gives them) from the matrix answers to :func:`range_queries` (``{"utilization": answer, ...}``).
    An unusable answer (or None: the query failed) gives no history, never an error."""
    points: dict[str, dict[float, dict[str, float]]] = {}
    dropped = _Dropped(logged)
    for key, answer in answers.items():
        if answer is None:  # the query failed (the caller said so)
            continue
        try:
            result = _result(answer, "matrix")
        except PrometheusError as error:
            line = f"jupyter-gpu: no {key} history from Prometheus: {error}"
            if logged is None or (line not in logged and len(logged) < 1000):
                log.warning("%s", line)
                if logged is not None:
                    logged.add(line)
            continue
        for series in result:
            metric = series.get("metric") if isinstance(series, dict) else None
            labels = _labels(metric)
            values = series.get("values") if isinstance(series, dict) else None
            if labels is None or not labels.get("uuid") or not isinstance(values, list):
                dropped("not a uuid-labelled range", metric)
                continue
            column = points.setdefault(labels["uuid"], {})
            for sample in values[-limit:]:
                pair = _number(sample)
                if pair is not None and 0 <= pair[1] <= 100:
                    column.setdefault(pair[0], {})[key] = pair[1]
    dropped.summary()
    out: dict[str, dict[str, list[Any]]] = {}
    for uuid, column in points.items():
        times = sorted(column)[-limit:]
        utilization = [column[t].get("utilization") for t in times]
        out[uuid] = {
            "t": times,
            "utilization": [None if u is None else round(u) for u in utilization],
            "memory": [None if m is None else round(m, 1) for m in (column[t].get("memory") for t in times)],
        }
    return out


def console(
    answer: Any,
    viewer: str,
    role: str,
    past: dict[str, dict[str, list[Any]]] | None = None,
    idle_after_s: float = 3600.0,
    error: str | None = None,
    logged: set[str] | None = None,
) -> dict[str, Any]:
    """The console's JSON for ``viewer`` with ``role`` ("admin" or "read") from Prometheus's answer
    to :data:`INSTANT_QUERY` (``answer`` None with ``error``: Prometheus could not be asked).

    ``idle_after_s``: a kernel idle this long is flagged ``idle`` (the user servers'
    ``idle_threshold_s``, which Prometheus does not carry); ``logged``: see :func:`devices_and_kernels`."""
    admin = role == "admin"
    gpus: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    stamp = None
    if answer is not None and error is None:
        try:
            gpus, kernels, stamp = devices_and_kernels(answer, logged)
        except PrometheusError as problem:
            error = str(problem)
    hosts = sorted({g["host"] for g in gpus} | {k["host"] for k in kernels if k["host"]})
    several = len(hosts) > 1
    past = past or {}
    for gpu in gpus:
        gpu["history"] = past.get(gpu["uuid"], {"t": [], "utilization": [], "memory": []})
    users: dict[str, list[dict[str, Any]]] = {}
    for kernel in kernels:
        kernel["memory_by_gpu"] = {
            (f"{host}:{index}" if several else index): memory
            for (host, index), memory in sorted(kernel["memory_by_gpu"].items())
        }
        kernel["idle"] = is_idle(kernel["idle_s"], bool(kernel["gpu_memory"]), idle_after_s)
        if not admin and kernel["user"] != viewer:
            kernel["kernel_id"] = None
            kernel["notebook"] = None
        users.setdefault(kernel.pop("user"), []).append(kernel)
    rows = []
    for name in sorted(users):
        listed = sorted(users[name], key=lambda k: (-k["gpu_memory"], k["notebook"] or "", k["kernel_id"] or ""))
        total: dict[str, int] = {}
        for kernel in listed:
            for key, memory in kernel["memory_by_gpu"].items():
                total[key] = total.get(key, 0) + memory
        rows.append(
            {
                "name": name,
                "server_url": None,
                "error": None,
                "gpu_memory": sum(k["gpu_memory"] for k in listed),
                "memory_by_gpu": total,
                "kernels": listed,
            }
        )
    return {
        "timestamp": stamp,
        "viewer": viewer,
        "admin": admin,
        "simulated": False,
        "nvml_available": bool(gpus),
        "error": error,
        "warnings": [],
        "source": "prometheus",
        "hosts": hosts,
        "gpus": gpus,
        "users": rows,
    }
