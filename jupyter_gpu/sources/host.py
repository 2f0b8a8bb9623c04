"""The host's GPU sample: taken where it is taken already, NVML here only when nobody answers.

Every panel (``%gpu_monitor``), ``%gpu_watch``, ``%gpu_select --wait`` and ``jupyter-gpu status``
used to read NVML itself: N panels, N samplers. A :class:`HostSample` asks, best first:

1. **This user's running Jupyter server** with the jupyter_gpu extension, found through
   jupyter_server's runtime files (``jpserver-<pid>.json`` in ``jupyter --runtime-dir``, or the
   folder of a kernel's connection file, written by the server and readable by its user only):
   ``GET {url}jupyter-gpu/snapshot`` authenticated with the server's token. A kernel asks only the
   server that started it (an ancestor process, as the OOM report does); a terminal asks a server
   that is its ancestor first (a JupyterLab terminal), then the user's other running servers. The
   server's answer carries what NVML cannot say: which of this user's GPU processes is which
   kernel, its notebook and idle time (:attr:`HostReading.kernels`). Asked before the hub service
   because its answer is a superset, and a server on a hub takes its devices from the service
   (``c.JupyterGpuServer.source = "hub-service"``) so the host still has one sampler.
2. **The JupyterHub service** when ``$JUPYTER_GPU_SERVICE_URL`` names it:
   :class:`jupyter_gpu.sources.remote.RemoteSource` with ``$JUPYTERHUB_API_TOKEN``.
3. **NVML in this process** (:mod:`jupyter_gpu.sources.nvml`), with a one-line note saying why
   (``source_note``); when a server or service was found but failed, that is a warning too.

**Who gets the token.** The server's token opens the user's server. Servers are found and asked by
:mod:`jupyter_gpu.sources.servers`' one rule: only this user's own runtime files (no link followed),
the token only to a listener of this user (or verified TLS), no redirects.

**Untrusted answers.** A server's answer crosses a socket: it is read with
:mod:`jupyter_gpu.core.wire` and :func:`jupyter_gpu.sources.remote.snapshot_from_dict` (strict,
bounded), the kernel entries field by field; a bad answer is a failed server.

**The world asked for.** A reader shows the world its own environment asks for. A server whose
GPUs are of another world than this process would read is not used, and the note says so (a
choice, not a warning): simulated vs. real NVML, or another simulated world: a server reading
NVML itself names its simulation in its answer (``"simulated_world"``, :func:`with_world`), and
``JUPYTER_GPU_SIMULATE=4 jupyter-gpu status`` beside a server running ``demo`` reads its own four
GPUs (with two servers, the first of the same world answers). This is the one rule every reader
follows: ``jupyter-gpu status``, the panel, ``%gpu_watch`` and ``--wait`` all read through
:class:`HostSample`.

**Choosing the source.** ``HostSample(source=...)`` (``jupyter-gpu status --source``): ``"auto"``
(the order above), ``"server"`` (this user's Jupyter server only), ``"hub"`` (the hub service
only) or ``"local"`` (NVML in this process). A chosen source that does not answer gives a snapshot
without GPUs whose ``error`` says why; nothing else is read in its place.

A server that does not answer within :data:`SERVER_TIMEOUT_S` is given up for this sample. After a
failure, servers are looked for again at most every :data:`REDISCOVER_S` seconds.

``--json`` and the panel see the source in the snapshot's ``extra``: ``"source"`` (``"jupyter-server"``,
``"hub-service"`` or ``"nvml"``) and ``"source_note"`` (str or null). In a kernel whose own server
answered, ``"kernel_connections"`` too: the websockets connected to this kernel (the panel's cue
that no view of it can be shown).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import messages
from ..core.environ import SIMULATE_ENV_VAR, simulation_requested
from ..core.i18n import N_
from ..core.messages import (
    CHOSEN_SERVICE_NOTE,
    LOCAL_BECAUSE_NOTE,
    LOCAL_NOTE,
    NOTHING_ANSWERED_NOTE,
    SERVER_NOTE,
    SERVICE_NOTE,
)
from ..core.messages import said as _said
from ..core.snapshot import Snapshot
from ..core.wire import Fields, maybe
from .peers import KernelPeer, parse_server_snapshot
from .processes import ProcessDirectory
from .processes import show_other_names as other_names_shown
from .servers import RunningServer, ask, running_servers, runtime_folder

__all__ = [
    "HostReading",
    "HostSample",
    "KernelView",
    "RunningServer",
    "default_host_sample",
    "running_servers",
]

SOURCE_SERVER = "jupyter-server"
SOURCE_SERVICE = "hub-service"
SOURCE_NVML = "nvml"
SOURCE_CHOICES = ("auto", "server", "hub", "local")
"""What ``HostSample(source=...)`` and ``jupyter-gpu status --source`` take (module docstring)."""
WORLD_KEY = "simulated_world"
"""The answer's field naming the simulated world a server reads (:func:`with_world`)."""
SOURCE_LABELS = {
    SOURCE_SERVER: N_("from the server"),
    SOURCE_SERVICE: N_("from the hub"),
    SOURCE_NVML: N_("NVML read here"),
}
"""A few words for a narrow status line (the panel's); ``source_note`` says it in full. English in
the data (``source``); shown through :func:`source_label`."""


def source_label(source: str) -> str:
    """The few words of :data:`SOURCE_LABELS` in the user's language (``source`` itself when unknown)."""
    from ..core.i18n import _

    return _(SOURCE_LABELS[source]) if source in SOURCE_LABELS else source


SERVER_TIMEOUT_S = 2.0
"""How long one server may take to answer. A server whose sampler runs answers from its last sample
in milliseconds; one whose sampler is idle (no sidebar open) takes one NVML sample first, which can
take a second on a busy host, and is still cheaper than starting NVML here."""
REDISCOVER_S = 10.0
"""After no server answered, how long before the runtime files are read again."""
MAX_ANSWER = 64 * 1024 * 1024  # the server's answer with thousands of processes
MAX_KERNELS = 10_000
_PID = (1, 2**31 - 1)


@dataclass(frozen=True)
class KernelView:
    """One kernel of the server the sample came from (the answer's ``kernels`` entry)."""

    kernel_id: str
    notebook: str | None
    pid: int | None
    execution_state: str | None
    idle_s: float | None
    idle: bool | None
    gpu_memory: int
    gpu_pids: tuple[int, ...] = ()
    connections: int | None = None  # websockets connected to the kernel (None: the server did not say)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "notebook": self.notebook,
            "pid": self.pid,
            "execution_state": self.execution_state,
            "idle_s": self.idle_s,
            "idle": self.idle,
            "gpu_memory": self.gpu_memory,
            "gpu_pids": list(self.gpu_pids),
        }


@dataclass(frozen=True)
class HostReading:
    """A sample and what came with it: where from, and (from a server) its kernels."""

    snapshot: Snapshot
    source: str
    note: str | None = None
    kernels: tuple[KernelView, ...] = ()
    by_pid: dict[int, KernelPeer] = field(default_factory=dict)  # GPU PID -> its kernel
    shown_note: str | None = None
    """``note`` in the user's language, for a face to show (``note`` stays English: ``source_note``)."""


def parse_kernels(data: Any, by_pid: dict[int, KernelPeer]) -> tuple[KernelView, ...]:
    """The answer's ``kernels`` (see docs/server.md), leniently: an entry without a kernel id is
    skipped, a bad optional field is None. ``by_pid`` (from :func:`parse_server_snapshot`) gives
    each kernel the GPU PIDs the server attributes to it."""
    top = maybe(Fields, data)
    entries = maybe(top.items, "kernels", MAX_KERNELS, []) if top is not None else None
    pids: dict[str, list[int]] = {}
    for pid, peer in by_pid.items():
        if peer.kernel_id is not None:
            pids.setdefault(peer.kernel_id, []).append(pid)
    kernels = []
    for entry in entries or []:
        item = maybe(Fields, entry)
        kernel_id = maybe(item.text, "kernel_id", 256) if item is not None else None
        if item is None or kernel_id is None:
            continue
        kernels.append(
            KernelView(
                kernel_id=kernel_id,
                notebook=maybe(item.text, "notebook", 4096),
                pid=maybe(item.integer, "pid", *_PID),
                execution_state=maybe(item.text, "execution_state", 64),
                idle_s=maybe(item.number, "idle_s", 0),
                idle=maybe(item.boolean, "idle"),
                gpu_memory=maybe(item.integer, "gpu_memory", 0, 2**63 - 1) or 0,
                gpu_pids=tuple(sorted(pids.get(kernel_id, ()))),
                connections=maybe(item.integer, "connections", 0, 2**31 - 1),
            )
        )
    return tuple(kernels)


class HostSample:
    """The host's sample (module docstring); a ``take()`` for :class:`~jupyter_gpu.sources.sampler.Sampler`.

    ``kernel``: this process is a kernel (ask only the server that started it). ``fallback`` reads
    NVML here (default: :func:`jupyter_gpu.sources.nvml.snapshot`). ``show_other_names``: fill in
    other users' program names from this host's ``/proc`` (admins; a server withholds them).
    Thread-safe: the sampler thread and a magic may take samples at once.
    """

    def __init__(
        self,
        kernel: bool = False,
        fallback: Callable[[], Snapshot] | None = None,
        runtime_dir: Path | None = None,
        service_url: str | None = None,
        timeout_s: float | None = None,
        show_other_names: bool | None = None,
        source: str = "auto",
    ) -> None:
        if source not in SOURCE_CHOICES:
            raise ValueError(f"source must be one of {', '.join(SOURCE_CHOICES)}, got {source!r}")
        self.kernel = kernel
        self.source = source
        self._fallback = fallback
        self._runtime_dir = runtime_dir
        self._service_url = service_url
        self.timeout_s = SERVER_TIMEOUT_S if timeout_s is None else timeout_s
        self.directory = ProcessDirectory(show_other_names=show_other_names)
        self._lock = threading.Lock()
        self._server: RunningServer | None = None
        self._looked_at = float("-inf")
        self._service: Any = None
        self._opener: urllib.request.OpenerDirector | None = None
        self._reader: Any = None  # an NVML reader showing other users' names (show_other_names)
        self.last_source: str | None = None

    @property
    def everyone(self) -> bool:
        """Whether other users' program names are shown too (admins: ``show_other_names``, else
        ``$JUPYTER_GPU_SHOW_OTHER_NAMES`` as it is now, as every other face reads it)."""
        chosen = self.directory.show_other_names
        return other_names_shown() if chosen is None else chosen

    def __call__(self) -> Snapshot:
        """The sample, its ``extra`` saying where it came from (``source``, ``source_note``) and, in
        a kernel whose own server answered, ``kernel_connections``: the websockets connected to this
        kernel (the panel pauses when nobody is; see :mod:`jupyter_gpu.panel.widget`)."""
        reading = self.read()
        note: dict[str, Any] = {"source": reading.source, "source_note": reading.note}
        connections = self.own_connections(reading)
        if connections is not None:
            note["kernel_connections"] = connections
        return replace(reading.snapshot, extra={**reading.snapshot.extra, **note})

    def own_connections(self, reading: HostReading) -> int | None:
        """The websockets connected to this kernel by ``reading`` when it is the answer of the server
        that started this kernel (a kernel's host sample asks no other), else None."""
        if not self.kernel or reading.source != SOURCE_SERVER or not _in_kernel():
            return None
        from .kernel_reports import kernel_identity

        own_id = kernel_identity()[0]
        return next((view.connections for view in reading.kernels if view.kernel_id == own_id), None)

    # -- the three sources

    def read(self) -> HostReading:
        """A sample from the best source that answers, or from the one chosen (never raises)."""
        failures: list[str] = []  # a server or service that should have answered: warnings
        without: list[str] = []  # servers without the extension (404), of another world: said in the note only
        if self.source == "local":
            self.last_source = SOURCE_NVML
            note, shown = _said(LOCAL_NOTE)
            return HostReading(self._read_nvml(), SOURCE_NVML, note, shown_note=shown)
        servers = self._servers() if self.source in ("auto", "server") else []
        for server in servers:
            try:
                reading = self.ask_server(server)
            except Exception as error:  # unreachable, refused, not the user's listener, bad answer
                if isinstance(error, OtherWorld):
                    without.append(error.template.format(url=server.url, **error.fields))
                elif isinstance(error, urllib.error.HTTPError) and error.code == 404:
                    without.append(messages.SERVER_WITHOUT_EXTENSION.format(url=server.url))
                else:
                    failures.append(messages.SERVER_FAILED.format(url=server.url, reason=_reason(error)))
                with self._lock:
                    if self._server == server:
                        self._server = None
                continue
            with self._lock:
                self._server = server
            self.last_source = SOURCE_SERVER
            return reading
        if self.source == "server":
            return self._nothing(SOURCE_SERVER, messages.NO_SERVER_ANSWERED, [*failures, *without])
        service = self._service_source()
        if self.source == "hub":
            if service is None:
                return self._nothing(SOURCE_SERVICE, messages.NO_SERVICE_NAMED, [])
            try:
                fetched = service.fetch()
            except Exception as error:  # unreachable, not the service's listener, bad answer
                why = messages.SERVICE_SILENT.format(url=service.url)
                return self._nothing(SOURCE_SERVICE, why, [_reason(error)])
            self.last_source = SOURCE_SERVICE
            note, shown = _said(CHOSEN_SERVICE_NOTE, url=service.url)
            return HostReading(fetched, SOURCE_SERVICE, note, shown_note=shown)
        if service is not None:
            snapshot = service()
            if service.last_error is None:
                self.last_source = SOURCE_SERVICE
                note, shown = _said(SERVICE_NOTE, url=service.url)
                return HostReading(snapshot, SOURCE_SERVICE, note, shown_note=shown)
            failures.append(service.last_error)
            note, shown = _said(LOCAL_BECAUSE_NOTE, reasons=messages.JOINER.join([*failures, *without]))
            self.last_source = SOURCE_NVML
            return HostReading(snapshot, SOURCE_NVML, note, shown_note=shown)
        snapshot = self._read_nvml()
        if failures:
            note, shown = _said(LOCAL_BECAUSE_NOTE, reasons=messages.JOINER.join([*failures, *without]))
            snapshot = replace(snapshot, warnings=(*snapshot.warnings, note))
        elif without:
            note, shown = _said(LOCAL_BECAUSE_NOTE, reasons=messages.JOINER.join(without))
        else:
            note, shown = _said(NOTHING_ANSWERED_NOTE)
        self.last_source = SOURCE_NVML
        return HostReading(snapshot, SOURCE_NVML, note, shown_note=shown)

    def _nothing(self, source: str, why: str, reasons: list[str]) -> HostReading:
        """The chosen ``source`` did not answer: no GPUs, and why (nothing is read in its place)."""
        detail = messages.JOINER.join(reason for reason in reasons if reason)
        if detail:
            error = messages.CHOSEN_SILENT_BECAUSE.format(why=why, source=self.source, reasons=detail)
        else:
            error = messages.CHOSEN_SILENT.format(why=why, source=self.source)
        self.last_source = source
        return HostReading(Snapshot(nvml_available=False, timestamp=time.time(), error=error), source, error)

    def _servers(self) -> list[RunningServer]:
        """The server that answered last, else (at most every REDISCOVER_S) the runtime files'."""
        with self._lock:
            if self._server is not None:
                return [self._server]
            now = time.monotonic()
            if now - self._looked_at < REDISCOVER_S:
                return []
            self._looked_at = now
        return running_servers(self._folder(), ancestors_only=self.kernel)

    def _folder(self) -> Path | None:
        if self._runtime_dir is not None:
            return self._runtime_dir
        if self.kernel:
            if not _in_kernel():
                return None  # a panel in a plain IPython or a test: no kernel, so no server of its own
            from .kernel_reports import kernel_identity

            return kernel_identity()[1]
        return runtime_folder()

    def ask_server(self, server: RunningServer) -> HostReading:
        """``server``'s ``jupyter-gpu/snapshot`` as a reading (:func:`jupyter_gpu.sources.servers.ask`:
        its own token, only to this user's listener). Raises ``OSError`` (``urllib.error.HTTPError``
        for an HTTP status), ``BadAnswer``, or :class:`OtherWorld` (its GPUs are not of the world
        this process asks for)."""
        from .remote import fill_own_names, opener, snapshot_from_dict

        if self._opener is None:
            self._opener = opener(str(os.getuid()))  # http://: only to this user's own listener
        data = ask(server, "jupyter-gpu/snapshot", self.timeout_s, MAX_ANSWER, via=self._opener)
        snapshot = snapshot_from_dict(data)
        own = simulated_world()
        if snapshot.simulated != (own is not None):
            if snapshot.simulated:
                raise OtherWorld(messages.SERVER_SEES_SIMULATED)
            raise OtherWorld(messages.SERVER_SEES_REAL, world=str(own), variable=SIMULATE_ENV_VAR)
        theirs = maybe(Fields(data).text, WORLD_KEY, 4096) if isinstance(data, dict) else None
        if own is not None and theirs is not None and theirs != own:
            raise OtherWorld(messages.SERVER_OTHER_WORLD, theirs=theirs, world=own, variable=SIMULATE_ENV_VAR)
        if snapshot.simulated and self.everyone:
            _follow_the_scenario()
        snapshot = fill_own_names(snapshot, self.directory, everyone=self.everyone)
        self.directory.forget_all_but({p.pid for gpu in snapshot.gpus for p in gpu.processes})
        by_pid = parse_server_snapshot(data)
        note, shown = _said(SERVER_NOTE, url=server.url)
        return HostReading(snapshot, SOURCE_SERVER, note, parse_kernels(data, by_pid), by_pid, shown_note=shown)

    def _service_source(self) -> Any:
        from .remote import SERVICE_URL_ENV, RemoteSource

        url = self._service_url or os.environ.get(SERVICE_URL_ENV)
        if not url:
            return None
        if self._service is None:
            devices = url.rstrip("/") + "/api/devices"
            self._service = RemoteSource(devices, fallback=self._read_nvml, timeout_s=self.timeout_s)
        return self._service

    def _read_nvml(self) -> Snapshot:
        if self._fallback is not None:
            return self._fallback()
        from .nvml import NvmlReader, default_reader

        if self.everyone:
            if self._reader is None:
                self._reader = NvmlReader(self.directory)
            return self._reader.snapshot()
        return default_reader().snapshot()


def _in_kernel() -> bool:
    """Whether this process is a running IPython kernel (asked without creating its application:
    ``IPKernelApp.instance()`` outside a kernel would change how ipywidgets open their comms)."""
    if "ipykernel.kernelapp" not in sys.modules:
        return False
    return bool(sys.modules["ipykernel.kernelapp"].IPKernelApp.initialized())


class OtherWorld(Exception):
    """A server's GPUs are of another world than this process asks for: which, as one of
    :mod:`jupyter_gpu.core.messages`' templates (``{url}``: the server's, filled by the asker) and its fields."""

    def __init__(self, template: str, **fields: str) -> None:
        super().__init__(template)
        self.template = template
        self.fields = fields


def world_name(spec: str) -> str:
    """A ``JUPYTER_GPU_SIMULATE`` value as a name two processes can compare: ``4`` for four
    GPUs, ``demo``/``demo-still``, or the scenario file's absolute path (a relative one resolved
    against this process's folder, where the simulation resolves it)."""
    spec = spec.strip()
    if spec.isdigit():
        return f"{int(spec)} GPUs"
    if spec in ("demo", "demo-still"):
        return spec
    return os.path.abspath(os.path.expanduser(spec))


def simulated_world() -> str | None:
    """The simulated world NVML read here would show (:func:`world_name`), None for real NVML;
    without importing the simulation when nothing has (``jupyter-gpu status`` beside a server has
    150 ms in all)."""
    spec = os.environ.get(SIMULATE_ENV_VAR)
    if spec is not None and simulation_requested(spec):
        return world_name(spec)  # what the next NVML read here follows (install_from_environment)
    simulate = sys.modules.get("jupyter_gpu.simulate")
    library = simulate.installed() if simulate is not None else None
    return world_name(library.source.spec) if library is not None else None  # installed explicitly


def with_world(read: Callable[[], Snapshot]) -> Callable[[], Snapshot]:
    """``read`` whose simulated snapshots name their world (``extra["simulated_world"]``): what a
    Jupyter server that reads NVML itself answers, so a reader asking for another world knows."""

    def take() -> Snapshot:
        snapshot = read()
        world = simulated_world() if snapshot.simulated else None
        if world is None:
            return snapshot
        return replace(snapshot, extra={**snapshot.extra, WORLD_KEY: world})

    return take


def _follow_the_scenario() -> None:
    """Simulated processes exist only in the scenario, so their owners and program names (an
    admin's view) come from it, as ``/proc`` gives them for real processes: the simulation is put
    beneath pynvml here (no NVML call) and the scenario read as it is now."""
    from .. import simulate

    try:
        library = simulate.install_from_environment()
    except Exception:  # a bad JUPYTER_GPU_SIMULATE: names stay withheld, the sample stands
        return
    if library is not None:
        library.source.current()


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    reason = getattr(error, "reason", None)
    return str(reason if reason is not None else error) or type(error).__name__


_default: HostSample | None = None
_default_lock = threading.Lock()


def default_host_sample(kernel: bool = True) -> HostSample:
    """This process's shared host sample (a kernel's panels, %gpu_watch and --wait share it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = HostSample(kernel=kernel)
        return _default
