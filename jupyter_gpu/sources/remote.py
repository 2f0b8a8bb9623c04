"""GPU snapshots read from the host's jupyter-gpu JupyterHub service instead of NVML.

On a JupyterHub host every user server used to sample NVML on its own (N servers with sidebars
open: N samplers). With ``c.JupyterGpuServer.source = "hub-service"`` (or the service's URL) a user
server takes the device snapshot from the service (``GET <service>/api/devices``, one NVML sampler
for the host, see :mod:`jupyter_gpu.hub`) and only adds its own kernels' attribution.

The service's answer is untrusted input (it crosses a socket): it is read with
:mod:`jupyter_gpu.core.wire` (strict JSON, bounded size and nesting) and :func:`snapshot_from_dict`
checks every field's type and size (whole numbers at most :data:`MAX_INT`), refusing the answer with
one line otherwise. When the service cannot be reached, cannot prove it is the service, or answers
badly, :class:`RemoteSource` reads NVML itself for that sample and says so in the snapshot's
``warnings``; the next sample asks the service again. A redirect counts as a bad
answer: it is not followed (urllib would carry this server's token to wherever it points).

**Who gets the token.** This server authenticates with its own ``JUPYTERHUB_API_TOKEN``, which also
opens this user's server (``access:servers!server``): whoever receives it can run code as this user.
A URL on this host is just a port, and any local user may listen on it while the service is down or
restarting. So, for ``http://``, the token is only sent on a connection whose other end is a socket
of this host owned by the service's account (``JupyterGpuServer.service_account``, ``root`` by
default, the account a hub-managed service runs as): after connecting and before writing a byte,
:func:`peer_uid` finds the other end's row in ``/proc/net/tcp``/``tcp6`` (the kernel records the
owner of the listening socket there, which no other user can fake). A listener of another account,
or an address that is not this host's (its owner cannot be checked), gets no request at all: this
server reads NVML itself and its warning says why. ``https://`` URLs are checked by TLS (the
certificate must name the host) instead. ``service_account = ""`` turns the check off and sends the
token to whoever listens.

Pure: the standard library's ``urllib`` and :mod:`jupyter_gpu.sources.processes`, no tornado.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import os
import pwd
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import messages
from ..core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from ..core.wire import Fields, WireError, loads, text
from .processes import ProcessDirectory

log = logging.getLogger(__name__)

MAX_BYTES = 8 * 1024 * 1024
MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 10_000
MAX_SLICES_PER_GPU = 7  # what one GPU can be split into (MIG)
MAX_INT = 2**63 - 1  # any count or byte size NVML gives (an unsigned long long beyond is no GPU's)
MAX_TEXT = 1024
SERVICE_URL_ENV = "JUPYTER_GPU_SERVICE_URL"
DEFAULT_SERVICE_URL = "http://127.0.0.1:10101/services/jupyter-gpu/"
DEFAULT_SERVICE_ACCOUNT = "root"  # a hub-managed service runs as the hub's account (root, usually)
PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")


class BadAnswer(WireError):
    """The service's answer does not follow the device snapshot contract."""


def _processes(fields: Fields, name: str) -> tuple[GpuProcess, ...]:
    processes = []
    for process in fields.objects(name, MAX_PROCESSES_PER_GPU, default=[]):
        kind = process.raw("type", "compute")
        if kind not in ("compute", "graphics", "compute+graphics"):
            raise BadAnswer(f"{process.path('type')} is not a process type")
        processes.append(
            GpuProcess(
                pid=process.integer("pid", 0, MAX_INT),
                memory=process.optional_integer("memory", 0, MAX_INT),
                user=process.optional_text("user", 256),
                type=kind,
                slice=process.optional_text("slice", 128),
            )
        )
    return tuple(processes)


def _slices(fields: Fields) -> tuple[MigSlice, ...]:
    return tuple(
        MigSlice(
            index=item.integer("index", 0, MAX_INT),
            uuid=item.text("uuid", 128, 0),
            name=item.text("name", 256, 0),
            profile=item.text("profile", 64, 0),
            gpu_instance_id=item.integer("gpu_instance_id", 0, MAX_INT),
            compute_instance_id=item.integer("compute_instance_id", 0, MAX_INT),
            memory_total=item.integer("memory_total", 0, MAX_INT, default=0),
            memory_used=item.integer("memory_used", 0, MAX_INT, default=0),
            memory_free=item.integer("memory_free", 0, MAX_INT, default=0),
            error=item.optional_text("error", MAX_TEXT),
            processes=_processes(item, "processes"),
        )
        for item in fields.objects("slices", MAX_SLICES_PER_GPU, default=[])
    )


def _gpu(gpu: Fields) -> GpuInfo:
    return GpuInfo(
        index=gpu.integer("index", 0, MAX_INT),
        uuid=gpu.text("uuid", 128, 0),
        name=gpu.text("name", 256, 0),
        memory_total=gpu.integer("memory_total", 0, MAX_INT, default=0),
        memory_used=gpu.integer("memory_used", 0, MAX_INT, default=0),
        memory_free=gpu.integer("memory_free", 0, MAX_INT, default=0),
        memory_reserved=gpu.optional_integer("memory_reserved", 0, MAX_INT),
        utilization=gpu.optional_integer("utilization", 0, MAX_INT),
        temperature=gpu.optional_integer("temperature", 0, MAX_INT),
        power=gpu.optional_number("power"),
        power_limit=gpu.optional_number("power_limit"),
        error=gpu.optional_text("error", MAX_TEXT),
        processes=_processes(gpu, "processes"),
        mig_mode=gpu.boolean("mig_mode", default=False),
        slices=_slices(gpu),
        fan_speed=gpu.optional_integer("fan_speed", 0, MAX_INT),
        pci_bus_id=gpu.optional_text("pci_bus_id", 64),
        ecc_errors=gpu.optional_integer("ecc_errors", 0, MAX_INT),
        clock_sm=gpu.optional_integer("clock_sm", 0, MAX_INT),
        clock_memory=gpu.optional_integer("clock_memory", 0, MAX_INT),
    )


def snapshot_from_dict(data: Any) -> Snapshot:
    """A :class:`Snapshot` from its ``to_dict()`` form, checked field by field (BadAnswer otherwise,
    its message naming the field: ``gpus[0].slices[0].index must be ...``).

    MIG slices (``mig_mode``, ``slices``, each process's ``slice``) are carried over. Program names
    and command lines are dropped whatever the answer says: they are filled in here for this user's
    own processes only (:func:`fill_own_names`).
    """
    if not isinstance(data, dict):
        raise BadAnswer("the answer must be a JSON object")
    try:
        fields = Fields(data)
        gpus = tuple(_gpu(gpu) for gpu in fields.objects("gpus", MAX_GPUS, default=[]))
        warnings = tuple(
            text(line, f"warnings[{i}]", MAX_TEXT, 0) for i, line in enumerate(fields.items("warnings", 32, default=[]))
        )
        return Snapshot(
            nvml_available=fields.boolean("nvml_available"),
            timestamp=fields.number("timestamp"),
            gpus=gpus,
            error=fields.optional_text("error", MAX_TEXT),
            driver_version=fields.optional_text("driver_version", 64),
            simulated=bool(fields.raw("simulated", False)),
            warnings=warnings,
        )
    except BadAnswer:
        raise
    except WireError as error:
        raise BadAnswer(str(error)) from None


def fill_own_names(snapshot: Snapshot, directory: ProcessDirectory, everyone: bool = False) -> Snapshot:
    """Program name and command line of this user's processes (on the GPUs and in their MIG
    slices), as ``directory`` tells them: keyed by PID and start time, like NVML readings here.
    ``everyone`` (admins: ``jupyter-gpu status --show-other-names``): other users' program names
    too, where ``directory`` shows them and the PID here is still that user's."""
    me = directory.me
    if me is None and not everyone:
        return snapshot

    def named(processes: tuple[GpuProcess, ...]) -> tuple[GpuProcess, ...]:
        out = []
        for process in processes:
            if process.user is not None and (process.user == me or everyone):
                identity = directory.identify(process.pid)
                if identity.user == process.user:  # the PID is still that user's process
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


class NotTheService(OSError):
    """The listener at the service's address is not proven to be the service: nothing was sent."""


def _row_address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``0100007F:2775`` (``/proc/net/tcp``: the address as the kernel's 32-bit words in host
    order, the port in hex) -> (address, port); an IPv4-mapped IPv6 address as its IPv4 one."""
    host, _, port = field.partition(":")
    raw = b"".join(struct.pack("=I", int(host[i : i + 8], 16)) for i in range(0, len(host), 8))
    address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)


def _address(pair: tuple[Any, ...]) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(pair[0].partition("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(pair[1])


def peer_uid(sock: socket.socket, wait_s: float = 0.2, tables: tuple[str, ...] | None = None) -> int | None:
    """The account (uid) owning the other end of the connected TCP socket ``sock``, when that end is
    a socket of this host (network namespace); None otherwise.

    The other end of our connection is the row of ``/proc/net/tcp`` (or ``tcp6``) whose local
    address is our peer and whose remote address is us; its ``uid`` column is the owner of the
    socket that accepted it (inherited from the listening socket: set by the kernel, not by the
    listener). The row can lag the ``connect()`` by a moment on a busy host: looked for up to
    ``wait_s``.
    """
    me, them = _address(sock.getsockname()), _address(sock.getpeername())
    deadline = time.monotonic() + wait_s
    while True:
        for table in tables or PROC_NET_TCP:
            try:
                with open(table, encoding="ascii") as rows:
                    next(rows, None)  # the header
                    for row in rows:
                        fields = row.split()
                        if len(fields) > 7 and _row_address(fields[1]) == them and _row_address(fields[2]) == me:
                            return int(fields[7])
            except (OSError, ValueError):
                continue
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def account_uid(account: str) -> int:
    """The uid of ``account`` (a user name or a number); KeyError when there is no such user."""
    return int(account) if account.isdigit() else pwd.getpwnam(account).pw_uid


def _account_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


class _ProvenConnection(http.client.HTTPConnection):
    """An HTTP connection that, once connected and before sending anything, checks that the other
    end is a socket of this host owned by the service's account (:func:`peer_uid`)."""

    account = DEFAULT_SERVICE_ACCOUNT

    def connect(self) -> None:
        super().connect()
        where = f"{self.host}:{self.port}"
        try:
            expected = account_uid(self.account)
        except KeyError:
            self.close()
            raise NotTheService(
                f"no account {self.account!r} on this host (c.JupyterGpuServer.service_account): "
                "this server's token was not sent"
            ) from None
        uid = peer_uid(self.sock)
        if uid == expected:
            return
        self.close()
        if uid is None:
            raise NotTheService(
                f"{where} is not a socket of this host, so who listens there cannot be checked: this "
                "server's token was not sent (use an https:// URL, or c.JupyterGpuServer.service_account "
                '= "" to send it unchecked)'
            )
        raise NotTheService(
            f"{where} is served by account {_account_name(uid)}, not by the service's account "
            f"{_account_name(expected)} (c.JupyterGpuServer.service_account): this server's token was "
            "not sent; another user may be listening on the service's port"
        )


class _ProvenHTTP(urllib.request.HTTPHandler):
    def __init__(self, account: str) -> None:
        super().__init__()
        self.account = account

    def http_open(self, req: Any) -> Any:
        account = self.account

        class Connection(_ProvenConnection):
            pass

        Connection.account = account
        return self.do_open(Connection, req)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would send this server's token along to wherever it points."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx code


def opener(account: str) -> urllib.request.OpenerDirector:
    """urllib without redirects; for ``http://``, connections proven to reach ``account``'s socket
    (``""``: any listener)."""
    if not account:
        return urllib.request.build_opener(_NoRedirects)
    return urllib.request.build_opener(_NoRedirects, _ProvenHTTP(account))


def get_with_credential(
    url: str, headers: dict[str, str], owners: frozenset[int], timeout_s: float, max_bytes: int
) -> bytes:
    """``GET url`` with ``headers`` that carry a credential (a bearer token), sent only where it may go.

    Over ``http://`` to a socket of this host, the request is written only when the listening
    socket belongs to one of ``owners`` (uids), checked on the open connection (:func:`peer_uid`),
    so another local user listening on the port while its server is down gets no byte; a listener
    that is not on this host is the network's (its owner cannot be checked: use ``https://``).
    ``https://`` is checked by TLS. Redirects are not followed. Returns at most ``max_bytes + 1``
    bytes of the body (the caller's strict reader refuses more). Raises :class:`NotTheService`,
    ``urllib.error.HTTPError`` for a status other than 200, or ``OSError``.
    """
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout_s, context=ssl.create_default_context()
        )
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    else:
        raise ValueError(f"not an http(s) URL: {url[:200]!r}")
    try:
        connection.connect()
        if parts.scheme == "http":
            uid = peer_uid(connection.sock)
            if uid is not None and uid not in owners:
                raise NotTheService(
                    f"{parts.hostname}:{parts.port} is served by account {_account_name(uid)}, which may not "
                    "receive this credential: it was not sent; another user may be listening on the port"
                )
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        body = response.read(max_bytes + 1)
        if response.status != 200:
            raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, None)
        return body
    finally:
        connection.close()


class RemoteSource:
    """A ``take()`` for :class:`jupyter_gpu.sources.sampler.Sampler`: the service's snapshot, else NVML.

    ``token`` (default: ``$JUPYTERHUB_API_TOKEN``, the user server's own token) authenticates this
    server with the service; over ``http://`` it is only sent to a listener owned by ``account``
    (module docstring). ``fallback`` reads NVML in this process when the service fails; that
    sample's ``warnings`` say so. :attr:`last_error` is None while the service answers.
    """

    def __init__(
        self,
        url: str,
        fallback: Callable[[], Snapshot],
        token: str | None = None,
        timeout_s: float = 3.0,
        account: str = DEFAULT_SERVICE_ACCOUNT,
    ) -> None:
        self.url = url
        self.account = account
        self._opener = opener(account)
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
        with self._opener.open(request, timeout=self.timeout_s) as response:
            body = response.read(MAX_BYTES + 1)
        try:
            data = loads(body, max_bytes=MAX_BYTES)
        except WireError as error:
            raise BadAnswer(f"the answer is unusable: {error}") from None
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
            if isinstance(getattr(error, "reason", error), NotTheService):  # urllib wraps it in URLError
                message = messages.SERVICE_NOT_ASKED.format(url=self.url, reason=reason)
            else:
                message = messages.SERVICE_UNREACHABLE.format(url=self.url, reason=reason)
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


USAGE_WINDOWS = ("day", "week", "30d")  # the service's api/usage?window=
USAGE_MAX_BYTES = 1 << 20
_FIGURES = ("gpu_hours", "gib_hours", "busy_hours", "idle_hours")


def own_usage(
    service_url: str,
    user: str,
    window: str = "week",
    token: str | None = None,
    account: str = DEFAULT_SERVICE_ACCOUNT,
    timeout_s: float = 3.0,
) -> dict[str, Any]:
    """``user``'s GPU use over ``window`` from the service's ``api/usage`` (the sidebar's "your GPU
    use"), asked with this server's token on a connection proven as for snapshots (module doc).

    The service answers a user's token with that user's own figures (an admin's with everybody's:
    only ``user``'s row is kept). The answer is untrusted and checked field by field::

        {"window": str, "since": float, "until": float, "user": str, "gpu_hours": float,
         "gib_hours": float, "busy_hours": float, "idle_hours": float,
         "notebooks": [{"notebook": str, "gpu_hours": float, ...}]}

    (zeros and no notebooks when ``user`` used no GPU). Raises OSError (``urllib.error.HTTPError``
    with the service's status included) or :class:`BadAnswer`.
    """
    if window not in USAGE_WINDOWS:
        raise ValueError(f"window must be one of {', '.join(USAGE_WINDOWS)}")
    request = urllib.request.Request(
        service_url.rstrip("/") + "/api/usage?window=" + window, headers={"Accept": "application/json"}
    )
    token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN")
    if token:
        request.add_header("Authorization", f"token {token}")
    with opener(account).open(request, timeout=timeout_s) as response:
        body = response.read(USAGE_MAX_BYTES + 1)
    try:
        fields = Fields(loads(body, max_bytes=USAGE_MAX_BYTES))
        answer: dict[str, Any] = {
            "window": fields.text("window", 16),
            "since": fields.number("since"),
            "until": fields.number("until"),
            "user": user,
            **dict.fromkeys(_FIGURES, 0.0),
            "notebooks": [],
        }
        for row in fields.objects("users", 100_000):
            if row.text("name", 1024) != user:
                continue
            answer.update({key: row.number(key, 0, 1e12) for key in _FIGURES})
            answer["notebooks"] = [
                {
                    "notebook": notebook.text("notebook", MAX_TEXT, 0),
                    **{k: notebook.number(k, 0, 1e12) for k in _FIGURES},
                }
                for notebook in row.objects("notebooks", 10_000)
            ]
        return answer
    except WireError as error:
        raise BadAnswer(f"the usage answer is unusable: {error}") from None


REPORT_ANSWER_MAX_BYTES = 1 << 20


def report_url(source: str) -> str | None:
    """Where this server reports to the service (``<service>/api/report``) for
    ``JupyterGpuServer.source`` (None: nowhere). With source "nvml", the service at
    ``$JUPYTER_GPU_SERVICE_URL`` when that is set (a hub that runs the service says where it is)."""
    devices = resolve_source(source)
    if devices is None:
        base = os.environ.get(SERVICE_URL_ENV)
        return base.rstrip("/") + "/api/report" if base else None
    return devices.removesuffix("/api/devices") + "/api/report"


def push_report(
    url: str,
    body: bytes,
    token: str,
    account: str = DEFAULT_SERVICE_ACCOUNT,
    timeout_s: float = 3.0,
) -> dict[str, Any]:
    """POST this server's report to the service with this server's own ``token``, on a connection
    proven as for snapshots (module doc: over ``http://`` only to a socket of the service's
    ``account``; no redirect followed), and return its answer, checked field by field::

        {"interval_s": float, "shutdown": [{"kernel_id": str, "by": str}]}

    Raises OSError (``urllib.error.HTTPError`` with the service's status) or :class:`BadAnswer`.
    Nothing but this server's own token is ever sent, and nothing is received but instructions
    about this server's own kernels (the service keys them by the token's user).
    """
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Accept": "application/json", "Content-Type": "application/json", "Authorization": f"token {token}"},
    )
    with opener(account).open(request, timeout=timeout_s) as response:
        raw = response.read(REPORT_ANSWER_MAX_BYTES + 1)
    try:
        fields = Fields(loads(raw, max_bytes=REPORT_ANSWER_MAX_BYTES))
        return {
            "interval_s": fields.number("interval_s", 1, 600),
            "shutdown": [
                {"kernel_id": item.text("kernel_id", 128), "by": item.text("by", 256)}
                for item in fields.objects("shutdown", 1000, default=[])
            ],
        }
    except WireError as error:
        raise BadAnswer(f"the service's answer to a report is unusable: {error}") from None
