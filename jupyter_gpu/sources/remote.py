"""GPU snapshots read from the host's jupyter-gpu JupyterHub service instead of NVML.

On a JupyterHub host every user server used to sample NVML on its own (N servers with sidebars
open: N samplers). With ``c.JupyterGpuServer.source = "hub-service"`` (or the service's URL) a user
server takes the device snapshot from the service (``GET <service>/api/devices``, one NVML sampler
for the host, see :mod:`jupyter_gpu.hub`) and only adds its own kernels' attribution.

The service's answer is untrusted input (it crosses a socket): :func:`snapshot_from_dict` checks
every field's type and size and refuses the answer with one line otherwise. When the service cannot
be reached or answers badly, :class:`RemoteSource` reads NVML itself for that sample and says so in
the snapshot's ``warnings``; the next sample asks the service again. A redirect counts as a bad
answer: it is not followed (urllib would carry this server's token to wherever it points).

Pure: the standard library's ``urllib`` and :mod:`jupyter_gpu.sources.processes`, no tornado.
"""

from __future__ import annotations

import json
import logging
import math
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from .processes import ProcessDirectory

log = logging.getLogger(__name__)

MAX_BYTES = 8 * 1024 * 1024
MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 10_000
MAX_SLICES_PER_GPU = 7  # what one GPU can be split into (MIG)
SERVICE_URL_ENV = "JUPYTER_GPU_SERVICE_URL"
DEFAULT_SERVICE_URL = "http://127.0.0.1:10101/services/jupyter-gpu/"


class BadAnswer(ValueError):
    """The service's answer does not follow the device snapshot contract."""


def _int(value: Any, where: str, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadAnswer(f"{where} must be a non-negative integer")
    return value


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    # finite: json.loads reads 1e400 as infinity even with NaN and Infinity refused
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond any float
        number = math.nan
    if not math.isfinite(number):
        raise BadAnswer(f"{where} must be a finite number")
    return number


def _str(value: Any, where: str, optional: bool = True, limit: int = 1024) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise BadAnswer(f"{where} must be a string of at most {limit} characters")
    return value


def _processes(items: Any, where: str) -> tuple[GpuProcess, ...]:
    if not isinstance(items, list) or len(items) > MAX_PROCESSES_PER_GPU:
        raise BadAnswer(f"{where} must be a list of at most {MAX_PROCESSES_PER_GPU}")
    processes = []
    for j, process in enumerate(items):
        pwhere = f"{where}[{j}]"
        if not isinstance(process, dict):
            raise BadAnswer(f"{pwhere} must be an object")
        kind = process.get("type", "compute")
        if kind not in ("compute", "graphics", "compute+graphics"):
            raise BadAnswer(f"{pwhere}.type is not a process type")
        processes.append(
            GpuProcess(
                pid=_int(process.get("pid"), f"{pwhere}.pid") or 0,
                memory=_int(process.get("memory"), f"{pwhere}.memory", optional=True),
                user=_str(process.get("user"), f"{pwhere}.user", limit=256),
                type=kind,
                slice=_str(process.get("slice"), f"{pwhere}.slice", limit=128),
            )
        )
    return tuple(processes)


def _slices(items: Any, where: str) -> tuple[MigSlice, ...]:
    if not isinstance(items, list) or len(items) > MAX_SLICES_PER_GPU:
        raise BadAnswer(f"{where} must be a list of at most {MAX_SLICES_PER_GPU}")
    slices = []
    for k, item in enumerate(items):
        swhere = f"{where}[{k}]"
        if not isinstance(item, dict):
            raise BadAnswer(f"{swhere} must be an object")
        slices.append(
            MigSlice(
                index=_int(item.get("index"), f"{swhere}.index") or 0,
                uuid=_str(item.get("uuid"), f"{swhere}.uuid", optional=False, limit=128) or "",
                name=_str(item.get("name"), f"{swhere}.name", optional=False, limit=256) or "",
                profile=_str(item.get("profile"), f"{swhere}.profile", optional=False, limit=64) or "",
                gpu_instance_id=_int(item.get("gpu_instance_id"), f"{swhere}.gpu_instance_id") or 0,
                compute_instance_id=_int(item.get("compute_instance_id"), f"{swhere}.compute_instance_id") or 0,
                memory_total=_int(item.get("memory_total", 0), f"{swhere}.memory_total") or 0,
                memory_used=_int(item.get("memory_used", 0), f"{swhere}.memory_used") or 0,
                memory_free=_int(item.get("memory_free", 0), f"{swhere}.memory_free") or 0,
                error=_str(item.get("error"), f"{swhere}.error"),
                processes=_processes(item.get("processes", []), f"{swhere}.processes"),
            )
        )
    return tuple(slices)


def snapshot_from_dict(data: Any) -> Snapshot:
    """A :class:`Snapshot` from its ``to_dict()`` form, checked field by field (BadAnswer otherwise).

    MIG slices (``mig_mode``, ``slices``, each process's ``slice``) are carried over. Program names
    and command lines are dropped whatever the answer says: they are filled in here for this user's
    own processes only (:func:`fill_own_names`).
    """
    if not isinstance(data, dict):
        raise BadAnswer("the answer must be a JSON object")
    gpus_in = data.get("gpus", [])
    if not isinstance(gpus_in, list) or len(gpus_in) > MAX_GPUS:
        raise BadAnswer(f"gpus must be a list of at most {MAX_GPUS}")
    gpus = []
    for i, gpu in enumerate(gpus_in):
        where = f"gpus[{i}]"
        if not isinstance(gpu, dict):
            raise BadAnswer(f"{where} must be an object")
        mig_mode = gpu.get("mig_mode", False)
        if not isinstance(mig_mode, bool):
            raise BadAnswer(f"{where}.mig_mode must be true or false")
        gpus.append(
            GpuInfo(
                index=_int(gpu.get("index"), f"{where}.index") or 0,
                uuid=_str(gpu.get("uuid"), f"{where}.uuid", optional=False, limit=128) or "",
                name=_str(gpu.get("name"), f"{where}.name", optional=False, limit=256) or "",
                memory_total=_int(gpu.get("memory_total", 0), f"{where}.memory_total") or 0,
                memory_used=_int(gpu.get("memory_used", 0), f"{where}.memory_used") or 0,
                memory_free=_int(gpu.get("memory_free", 0), f"{where}.memory_free") or 0,
                memory_reserved=_int(gpu.get("memory_reserved"), f"{where}.memory_reserved", optional=True),
                utilization=_int(gpu.get("utilization"), f"{where}.utilization", optional=True),
                temperature=_int(gpu.get("temperature"), f"{where}.temperature", optional=True),
                power=_number(gpu.get("power"), f"{where}.power"),
                power_limit=_number(gpu.get("power_limit"), f"{where}.power_limit"),
                error=_str(gpu.get("error"), f"{where}.error"),
                processes=_processes(gpu.get("processes", []), f"{where}.processes"),
                mig_mode=mig_mode,
                slices=_slices(gpu.get("slices", []), f"{where}.slices"),
            )
        )
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or len(warnings) > 32:
        raise BadAnswer("warnings must be a list of at most 32 lines")
    if not isinstance(data.get("nvml_available"), bool):
        raise BadAnswer("nvml_available must be true or false")
    timestamp = _number(data.get("timestamp"), "timestamp")
    if timestamp is None:
        raise BadAnswer("timestamp must be a number")
    return Snapshot(
        nvml_available=data["nvml_available"],
        timestamp=timestamp,
        gpus=tuple(gpus),
        error=_str(data.get("error"), "error"),
        driver_version=_str(data.get("driver_version"), "driver_version", limit=64),
        simulated=bool(data.get("simulated", False)),
        warnings=tuple(_str(w, "warnings[]", optional=False) or "" for w in warnings),
    )


def fill_own_names(snapshot: Snapshot, directory: ProcessDirectory) -> Snapshot:
    """Program name and command line of this user's processes (on the GPUs and in their MIG
    slices), as ``directory`` tells them: keyed by PID and start time, like NVML readings here."""
    me = directory.me
    if me is None:
        return snapshot

    def named(processes: tuple[GpuProcess, ...]) -> tuple[GpuProcess, ...]:
        out = []
        for process in processes:
            if process.user == me:
                identity = directory.identify(process.pid)
                if identity.user == me:  # the PID is still this user's process
                    process = replace(process, name=identity.name, command=identity.command)
            out.append(process)
        return tuple(out)

    gpus = tuple(
        replace(
            gpu,
            processes=named(gpu.processes),
            slices=tuple(replace(part, processes=named(part.processes)) for part in gpu.slices),
        )
        for gpu in snapshot.gpus
    )
    return replace(snapshot, gpus=gpus)


def resolve_source(source: str) -> str | None:
    """The devices URL for ``JupyterGpuServer.source``; None for "nvml" (read NVML directly).

    ``"hub-service"``: ``$JUPYTER_GPU_SERVICE_URL`` or :data:`DEFAULT_SERVICE_URL`; an ``http(s)://``
    URL: that service. Anything else raises ValueError with one line.
    """
    if source == "nvml":
        return None
    if source == "hub-service":
        base = os.environ.get(SERVICE_URL_ENV) or DEFAULT_SERVICE_URL
    elif source.startswith(("http://", "https://")):
        base = source
    else:
        raise ValueError(f'source must be "nvml", "hub-service" or an http(s) URL, not {source!r}')
    return base.rstrip("/") + "/api/devices"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would send this server's token along to wherever it points."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx code


_OPENER = urllib.request.build_opener(_NoRedirects)


class RemoteSource:
    """A ``take()`` for :class:`jupyter_gpu.sources.sampler.Sampler`: the service's snapshot, else NVML.

    ``token`` (default: ``$JUPYTERHUB_API_TOKEN``, the user server's own token) authenticates this
    server with the service. ``fallback`` reads NVML in this process when the service fails; that
    sample's ``warnings`` say so. :attr:`last_error` is None while the service answers.
    """

    def __init__(
        self, url: str, fallback: Callable[[], Snapshot], token: str | None = None, timeout_s: float = 3.0
    ) -> None:
        self.url = url
        self.fallback = fallback
        self.token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN")
        self.timeout_s = timeout_s
        self.directory = ProcessDirectory()  # this user's processes: names and command lines
        self.last_error: str | None = None
        self.fallbacks = 0

    def fetch(self) -> Snapshot:
        """The service's current device snapshot (raises OSError or BadAnswer)."""
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"token {self.token}")
        with _OPENER.open(request, timeout=self.timeout_s) as response:
            body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            raise BadAnswer(f"the answer is larger than {MAX_BYTES} bytes")
        try:
            data = json.loads(body, parse_constant=lambda name: (_ for _ in ()).throw(BadAnswer(name)))
        except ValueError as error:
            raise BadAnswer(f"the answer is not JSON ({error})") from None
        snapshot = fill_own_names(snapshot_from_dict(data), self.directory)
        self.directory.forget_all_but({p.pid for gpu in snapshot.gpus for p in gpu.processes})
        return snapshot

    def __call__(self) -> Snapshot:
        try:
            snapshot = self.fetch()
        except (OSError, BadAnswer, urllib.error.URLError) as error:
            reason = (
                f"HTTP {error.code}"
                if isinstance(error, urllib.error.HTTPError)
                else str(getattr(error, "reason", error))
            )
            message = (
                f"the jupyter-gpu service ({self.url}) is unreachable ({reason}): this server "
                "reads NVML itself until it answers again"
            )
            if message != self.last_error:
                log.warning("jupyter_gpu: %s", message)
            self.last_error = message
            self.fallbacks += 1
            local = self.fallback()
            return replace(local, warnings=(*local.warnings, message))
        if self.last_error is not None:
            log.info("jupyter_gpu: the jupyter-gpu service answers again (%s)", self.url)
        self.last_error = None
        return snapshot
