"""The jupyter-gpu JupyterHub service: tornado app, hub OAuth, the collector of user servers.

Routes under the service prefix (``/services/jupyter-gpu/``):

- ``/`` — the admin's GPU console (HTML + ``static/console.js``), hub OAuth login;
- ``api/console`` — its JSON (:func:`jupyter_gpu.hub.core.console`), same auth; with
  ``--prometheus-url``, every node's GPUs and kernels from Prometheus
  (:func:`jupyter_gpu.hub.prometheus.console`) instead of local NVML and the user servers' snapshots;
- ``api/users/<user>/kernels/<kernel_id>`` — ``DELETE``: shut one kernel down (admins only), through
  the hub's API (to find the server) and the user server's own kernel API, with the service's token;
- ``api/devices`` — the host's device snapshot for user servers (any hub user or service token);
- ``metrics`` — the host's per-GPU Prometheus series (:mod:`jupyter_gpu.core.gauges`), once for every
  user server taking its GPU data from here; a token with ``access:services!service=jupyter-gpu``
  (Prometheus's, ``deploy/prometheus/prometheus.yml``);
- ``api/usage?window=day|week|30d`` — usage accounting (:mod:`jupyter_gpu.hub.accounting`): GPU-hours,
  GiB-hours, busy and idle, per user and notebook for admins, one's own for any other hub user;
  ``api/usage.csv`` the same for admins as CSV (kept in ``--usage-db``, :mod:`jupyter_gpu.hub.store`);
- ``oauth_callback`` — hub OAuth.

Who may see the console: hub admins, holders of ``custom:jupyter-gpu:admin`` (act) and of
``custom:jupyter-gpu:read`` (look, privacy-filtered). See ``docs/jupyterhub.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from jupyterhub.services.auth import (
    HubAuthenticated,
    HubOAuth,
    HubOAuthCallbackHandler,
    HubOAuthenticated,
    UserNotAllowed,
)
from jupyterhub.utils import url_path_join
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..core import gauges, wire
from ..core.history import GpuHistory
from ..core.snapshot import GpuInfo, Snapshot
from ..sources.remote import account_uid, get_with_credential
from ..sources.sampler import Sampler
from . import accounting, core
from . import prometheus as prom
from .store import UsageStore

log = logging.getLogger("jupyter_gpu.hub")
STATIC = Path(__file__).with_name("static")

# Bounds on what the hub and the user servers may cost the service (user servers are untrusted).
SERVER_TIMEOUT_S = 3.0  # one user server's snapshot, connection included
HUB_TIMEOUT_S = 5.0  # the hub's list of running servers
SERVER_MAX_BYTES = 8 * 1024 * 1024  # one user server's snapshot
HUB_MAX_BYTES = 64 * 1024 * 1024  # the hub's list of running servers
# Its servers carry each user's ``user_options`` (any JSON a spawn form sent): one user nesting them
# deeply must not cost everybody the console's list of servers, so the bound is about where the
# parser's recursion stopped before (1000 frames, some spent elsewhere).
HUB_MAX_DEPTH = 500
MAX_CONNECTIONS = 256  # user servers asked at once (more wait in tornado's queue)


class Unusable(Exception):
    """A hub or user server answer the service refuses (one line: why)."""


def server_path(url: Any) -> str:
    """A server URL from the hub as a path on the proxy, or :class:`Unusable`.

    The service sends its token with every request to a user server: it only ever asks the hub's
    own proxy, so the URL must be an absolute path (``/user/alice/``), not a URL of another host
    (``http://...``, ``//host/``, ``@host/`` that would turn the proxy's address into a user name),
    nor one that climbs out of it (``..``) or carries a query.
    """
    if not isinstance(url, str) or not url.startswith("/") or url.startswith("//") or len(url) > 2048:
        raise Unusable("the hub gave a server URL that is not a path on its proxy")
    parts = url.split("/")
    if any(unquote(part) in (".", "..") for part in parts) or any(ch in url for ch in "\\?#") or not url.isprintable():
        raise Unusable("the hub gave a server URL that is not a plain path on its proxy")
    return url


class HubService:
    """One NVML sampler for the host, its history, and the user servers' answers (cached)."""

    def __init__(
        self,
        api_url: str,
        api_token: str,
        proxy_url: str,
        interval_s: float = 1.0,
        linger_s: float = 90.0,
        take: Any = None,
        history_s: float = 900.0,
        prometheus_url: str | None = None,
        prometheus_token_file: str | None = None,
        prometheus_account: str | None = "prometheus",
        idle_after_s: float = 3600.0,
        host: str | None = None,
        system_user: str = "{name}",
        usage_db: str | None = None,
        usage_interval_s: float = 60.0,
    ) -> None:
        if take is None:
            from ..sources.nvml import snapshot as take
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token
        self.proxy_url = proxy_url.rstrip("/")
        self.interval_s = interval_s
        self._nvml_take = take
        self.history = GpuHistory(history_s, interval_s)
        self.sampler = Sampler(interval_s, take=self._take, linger_s=linger_s, name="jupyter-gpu-hub-sampler")
        self._devices_body: tuple[float, bytes] | None = None
        self._servers: tuple[float, list[core.UserServer]] | None = None
        self._collecting: asyncio.Future[list[core.UserServer]] | None = None
        self.system_user = system_user  # the account owning a hub user's processes (core.account_of)
        self.hub_warning: str | None = None  # why the last gather could not list the servers
        # The hub's and the user servers' answers are bounded in size and time (untrusted input).
        self.client = AsyncHTTPClient(force_instance=True, max_clients=MAX_CONNECTIONS, max_body_size=SERVER_MAX_BYTES)
        self.hub_client = AsyncHTTPClient(force_instance=True, max_body_size=HUB_MAX_BYTES)
        self._parser = ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-hub-json")
        self._waiter = ThreadPoolExecutor(1, thread_name_prefix="jupyter-gpu-hub-wait")
        self._waiting: asyncio.Future[Snapshot | None] | None = None  # devices(): the shared wait
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.prometheus_token_file = prometheus_token_file
        self.prometheus_account = prometheus_account
        self.idle_after_s = idle_after_s
        self.host = gauges.host_label(host)  # the "host" label of jupyter_gpu_gpu_info
        self._logged: set[str] = set()  # dropped-series log lines already written (each kind once)
        self.history_s = history_s
        self._prometheus: tuple[float, Any, dict[str, Any], str | None] | None = None
        self._asking: asyncio.Future[tuple[float, Any, dict[str, Any], str | None]] | None = None
        self._ranges: tuple[float, dict[str, Any]] | None = None  # (when asked, prom.history of the answers)
        # Prometheus's answers are untrusted input: bounded in size before they are parsed.
        self.prometheus_client = (
            AsyncHTTPClient(force_instance=True, max_body_size=prom.MAX_BODY_BYTES) if self.prometheus_url else None
        )
        self.accountant = UsageAccountant(self, usage_db, usage_interval_s) if usage_db else None  # None: off

    def close(self) -> None:
        """Stop sampling, the JSON parser's thread and the HTTP clients (the service stops)."""
        self.sampler.close(timeout=1.0)
        for executor in (self._parser, self._waiter):
            executor.shutdown(wait=False, cancel_futures=True)
        if self.accountant is not None:
            self.accountant.close()
        for client in (self.client, self.hub_client, self.prometheus_client):
            if client is not None:
                client.close()

    def _take(self) -> Snapshot:
        snapshot = self._nvml_take()
        self.history.record(snapshot)
        return snapshot

    async def devices(self) -> Snapshot | None:
        """The newest device sample (waking the sampler; waits up to 1 s for a fresh one, less than
        the user servers' 3 s timeout, so a slow NVML call never makes them fall back)."""
        latest = self.sampler.latest
        if latest is not None and time.time() - latest.timestamp < 2 * self.interval_s + 1:
            self.sampler.touch()
            return latest
        # One waiter for every request of that moment, as GpuService._wait_for_sample: while NVML
        # hangs, N user servers asking tie up one thread, not N of the loop's default executor (whose
        # queue would outlast their 3 s timeout and send them all to NVML themselves).
        if self._waiting is None or self._waiting.done():
            self._waiting = asyncio.get_running_loop().run_in_executor(
                self._waiter,
                lambda: self.sampler.wait_for_snapshot(newer_than=latest.timestamp if latest else None, timeout=1.0),
            )
        return await asyncio.shield(self._waiting)

    async def devices_body(self) -> bytes:
        """``/api/devices``: JSON bytes built once per sample for every user server."""
        snapshot = await self.devices()
        if snapshot is None:
            return json.dumps(
                {
                    "nvml_available": False,
                    "error": "no GPU sample yet",
                    "timestamp": time.time(),
                    "gpus": [],
                    "warnings": [],
                }
            ).encode()
        cached = self._devices_body
        if cached is None or cached[0] != snapshot.timestamp:
            cached = (snapshot.timestamp, json.dumps(core.devices_answer(snapshot), allow_nan=False).encode())
            self._devices_body = cached
        return cached[1]

    # -- the hub and the user servers

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.api_token}", "Accept": "application/json"}

    async def _get_json(
        self, url: str, timeout: float, client: AsyncHTTPClient, max_bytes: int, max_depth: int = 64
    ) -> Any:
        response = await client.fetch(
            HTTPRequest(
                url, headers=self._headers(), request_timeout=timeout, connect_timeout=timeout, follow_redirects=False
            )
        )
        # Strict JSON (core.wire: NaN, Infinity, deep nesting, duplicate keys refused) rather than
        # carried into the console's answer. Parsed on the service's parser thread: up to 8 MiB
        # (~0.2 s) per answer, and a user may run many named servers; the event loop keeps serving
        # api/devices to every user server meanwhile.
        return await asyncio.get_running_loop().run_in_executor(
            self._parser, lambda: wire.loads(response.body, max_bytes=max_bytes, max_depth=max_depth)
        )

    def _on_proxy(self, path: str, *more: str) -> str:
        """``path`` (checked by :func:`server_path`) on the proxy; never another host."""
        url = url_path_join(self.proxy_url + server_path(path), *more)
        if urlsplit(url).netloc != urlsplit(self.proxy_url).netloc:
            raise Unusable("the hub gave a server URL that leaves the proxy")
        return url

    async def active_servers(self) -> list[tuple[str, str | None, str | None]]:
        """(user, server url path, why it is unusable) of every ready server, from
        ``GET /hub/api/users?state=active`` (raises when the hub cannot be asked)."""
        users = await self._get_json(
            f"{self.api_url}/users?state=active", HUB_TIMEOUT_S, self.hub_client, HUB_MAX_BYTES, HUB_MAX_DEPTH
        )
        if not isinstance(users, list):
            raise Unusable("the hub's list of users is not a JSON list")
        found: list[tuple[str, str | None, str | None]] = []
        for user in users:
            name = user.get("name") if isinstance(user, dict) else None
            if not isinstance(name, str) or not name or len(name) > 255 or not name.isprintable():
                continue  # not a hub user name: nothing to show it under
            servers = user.get("servers")
            for server in servers.values() if isinstance(servers, dict) else ():
                if not isinstance(server, dict) or server.get("ready") is not True:
                    continue
                try:
                    found.append((name, server_path(server.get("url")), None))
                except Unusable as error:
                    found.append((name, None, str(error)))
        return found

    async def _server_snapshot(self, user: str, url: str | None, problem: str | None = None) -> core.UserServer:
        try:
            if problem is not None or url is None:
                raise Unusable(problem or "no server URL")
            data = await self._get_json(
                self._on_proxy(url, "jupyter-gpu/snapshot"), SERVER_TIMEOUT_S, self.client, SERVER_MAX_BYTES
            )
            problem = core.snapshot_problem(data)
            if problem is not None:
                raise Unusable(problem)
            return core.UserServer(user, url, data)
        except HTTPClientError as error:
            if error.code == 599:  # tornado: no HTTP answer (timeout, size cap, connection closed)
                reason = (
                    f"no answer within {SERVER_TIMEOUT_S:g} s"
                    if "Timeout" in str(error)
                    else f"no usable answer ({error.message or 'connection closed'}; answers are "
                    f"capped at {SERVER_MAX_BYTES >> 20} MiB)"
                )
            else:
                reason = f"HTTP {error.code}" + (
                    " (is jupyter_gpu installed in the user's environment?)" if error.code == 404 else ""
                )
        except Exception as error:  # refused connection, not JSON, ...: this row's error, never a 500
            reason = str(error)[:300] or type(error).__name__
        return core.UserServer(user, url, None, f"cannot read this server's GPU kernels: {reason}")

    async def servers(self) -> list[core.UserServer]:
        """Every running server's answer, gathered at most once per interval (shared by requests)."""
        cached = self._servers
        if cached is not None and time.monotonic() - cached[0] < self.interval_s:
            return cached[1]
        if self._collecting is None or self._collecting.done():
            self._collecting = asyncio.ensure_future(self._collect())
        return await asyncio.shield(self._collecting)

    async def _collect(self) -> list[core.UserServer]:
        try:
            servers = await self.active_servers()
        except Exception as error:  # the hub is down or answers nonsense: GPUs only, and say why
            if isinstance(error, HTTPClientError):
                reason = f"HTTP {error.code}" + (f" {error.message}" if error.code == 599 else "")
            else:
                reason = str(error)[:300] or type(error).__name__
            warning = f"cannot list the running servers from the hub: {reason}"
            if warning != self.hub_warning:  # once while it lasts (each console request asks again)
                log.warning("jupyter-gpu: %s", warning)
            self.hub_warning = warning
            self._servers = (time.monotonic(), [])
            return []
        if self.hub_warning is not None:
            log.info("jupyter-gpu: the hub lists the running servers again")
        self.hub_warning = None
        answers = list(await asyncio.gather(*(self._server_snapshot(*server) for server in servers)))
        self._servers = (time.monotonic(), answers)
        return answers

    # -- Prometheus mode (--prometheus-url): every node's GPUs and kernels

    def _prometheus_headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.prometheus_token_file:  # read each time: a rotated token is picked up
            with open(self.prometheus_token_file, encoding="utf-8") as file:
                headers["Authorization"] = "Bearer " + file.read(4096).strip()
        return headers

    async def _prometheus_get(self, path: str, params: dict[str, Any]) -> Any:
        assert self.prometheus_client is not None, "not in Prometheus mode"
        url = f"{self.prometheus_url}/api/v1/{path}?{urlencode(params)}"
        headers = self._prometheus_headers()
        loop = asyncio.get_running_loop()
        if "Authorization" in headers:  # the bearer token: only to Prometheus's own listener (docs/security.md)
            owners = self.prometheus_owners
            body = await loop.run_in_executor(
                None, lambda: get_with_credential(url, headers, owners, 10.0, prom.MAX_BODY_BYTES)
            )
        else:
            response = await self.prometheus_client.fetch(
                HTTPRequest(url, headers=headers, request_timeout=10, follow_redirects=False)
            )
            body = response.body
        # Up to MAX_BODY_BYTES of JSON: parsed on the service's parser thread, like the user servers'
        # answers, so the event loop keeps serving api/devices meanwhile.
        return await loop.run_in_executor(self._parser, lambda: wire.loads(body, max_bytes=prom.MAX_BODY_BYTES))

    @property
    def prometheus_owners(self) -> frozenset[int]:
        """Who may listen at a ``http://`` Prometheus of this host and get the bearer token: root,
        the service's own account, and ``--prometheus-account`` (the account Prometheus runs as)."""
        owners = {0, os.getuid()}
        if self.prometheus_account:
            try:
                owners.add(account_uid(self.prometheus_account))
            except KeyError:
                pass  # no such account: root and the service only
        return frozenset(owners)

    async def _ask_prometheus(self) -> tuple[float, Any, dict[str, Any], str | None]:
        """One instant query; the history's range queries once per history step (they are larger)."""
        now = time.time()
        step = max(self.interval_s, self.history_s / 300)
        asks = [self._prometheus_get("query", {"query": prom.INSTANT_QUERY})]
        renew = self._ranges is None or now - self._ranges[0] >= step
        if renew:
            asks += [
                self._prometheus_get(
                    "query_range", {"query": query, "start": now - self.history_s, "end": now, "step": step}
                )
                for query in prom.range_queries().values()
            ]
        instant, *ranges = await asyncio.gather(*asks, return_exceptions=True)
        if renew:  # a failed range query costs the history, never the console
            for answer in ranges:
                if isinstance(answer, Exception) and not isinstance(instant, Exception):
                    log.warning("jupyter-gpu: no GPU history from Prometheus: %s", str(answer)[:300])
            # The history columns are built here, once per history step, not per console request.
            self._ranges = (
                now,
                prom.history(
                    {
                        key: None if isinstance(answer, BaseException) else answer
                        for key, answer in zip(prom.range_queries(), ranges, strict=True)
                    },
                    logged=self._logged,
                ),
            )
        error = None
        if isinstance(instant, (HTTPClientError, urllib.error.HTTPError)):  # urllib's: with the bearer token
            error = f"cannot read Prometheus at {self.prometheus_url}: HTTP {instant.code}"
        elif isinstance(instant, Exception):  # unreachable, not JSON, token file unreadable
            error = f"cannot read Prometheus at {self.prometheus_url}: {str(instant)[:300] or type(instant).__name__}"
        elif isinstance(instant, BaseException):
            raise instant
        if error:
            log.warning("jupyter-gpu: %s", error)
        answer = (now, None if error else instant, self._ranges[1] if self._ranges else {}, error)
        self._prometheus = answer
        return answer

    async def prometheus_console(self, viewer: str, role: str) -> dict[str, Any]:
        """The console from Prometheus (asked at most once per interval, shared by requests)."""
        cached = self._prometheus
        if cached is None or time.time() - cached[0] >= self.interval_s:
            if self._asking is None or self._asking.done():
                self._asking = asyncio.ensure_future(self._ask_prometheus())
            cached = await asyncio.shield(self._asking)
        now, instant, past, error = cached
        data = prom.console(instant, viewer, role, past, self.idle_after_s, error, self._logged)
        data["timestamp"] = data["timestamp"] or now
        return data

    async def shutdown_kernel(self, user: str, kernel_id: str) -> None:
        """``DELETE {server}api/kernels/<id>`` on the server of ``user`` (found through the hub's API)
        that lists that kernel; 404 when none of the user's running servers does."""
        if core.KERNEL_ID.fullmatch(kernel_id) is None:
            raise web.HTTPError(400, "not a kernel id")
        self._servers = None  # a fresh gather: the kernel must be there now
        candidates = [s for s in await self.servers() if s.user == user]
        if self.hub_warning:
            raise web.HTTPError(502, self.hub_warning)
        if not candidates:
            raise web.HTTPError(404, f"{user} has no running server")
        for server in candidates:
            listed = (server.snapshot or {}).get("kernels")
            if (
                server.server_url
                and isinstance(listed, list)
                and any(isinstance(k, dict) and k.get("kernel_id") == kernel_id for k in listed)
            ):
                await self.client.fetch(
                    HTTPRequest(
                        self._on_proxy(server.server_url, "api/kernels", quote(kernel_id, safe="")),
                        method="DELETE",
                        headers=self._headers(),
                        request_timeout=30,
                        follow_redirects=False,
                    )
                )
                self._servers = None
                return
        raise web.HTTPError(404, f"no running server of {user} lists that kernel")


class UsageAccountant:
    """Usage accounting for a :class:`HubService` (``--usage-db``): a sample of who holds what every
    ``interval_s``, added to the SQLite file (:mod:`jupyter_gpu.hub.store`) on its own thread, and
    the answers of ``api/usage``. The charts' history is restored from the file at the start."""

    def __init__(self, service: HubService, path: str, interval_s: float = 60.0) -> None:
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
        store's thread, so accounting alone never keeps the sampler running (``--linger``)."""
        if self.service.prometheus_url:
            return await self.service.prometheus_console("", "admin")
        devices = self.service.sampler.latest
        if devices is None or time.time() - devices.timestamp >= 2 * self.service.interval_s + 1:
            devices = await self._in_store(self.service._take)
        return core.console(devices, {}, await self.service.servers(), "", "admin", self.service.system_user)

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


class _Base(web.RequestHandler):
    @property
    def service(self) -> HubService:
        return self.settings["jupyter_gpu_hub"]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            reason = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": reason}))


class _HubAuthFromSettings:
    """The app's one HubOAuth (``settings["hub_auth"]``) rather than a process-wide singleton."""

    @property
    def hub_auth(self) -> HubOAuth:
        # A mixin: ``settings`` is the tornado RequestHandler's it is mixed into, unknown to mypy here.
        return self.settings["hub_auth"]  # type: ignore[attr-defined]

    @hub_auth.setter
    def hub_auth(self, value: Any) -> None:
        pass


class _UserFirst(HubAuthenticated):
    """Who asks, found once in ``prepare()`` on the event loop, before any handler code runs.

    JupyterHub 6.1's ``HubAuthenticated.get_current_user`` asks ``hub_auth.get_user`` synchronously:
    the lookup runs on HubAuth's one-thread pool while the event loop waits for it. For a request
    with a login cookie that needs an XSRF check (DELETE, POST, ``Sec-Fetch-Mode: cors``...) and
    carries no valid ``_xsrf`` cookie, that lookup makes a new ``_xsrf`` cookie, which asks for
    ``current_user`` again: a second job on the same one-thread pool, waited for by the first. The
    loop waited for good (every user server's ``api/devices`` included), and any identity that can
    log in could cause it, before any role check. Here the lookup is awaited (``sync=False``), the
    pool is never used, and ``get_current_user`` only returns what ``prepare()`` found, so a nested
    ``current_user`` (the XSRF cookie's) sees "nobody yet" instead of re-entering the lookup.
    """

    _resolved_user: Any = None

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        user = None
        if model:
            try:
                user = self.check_hub_user(model)
            except UserNotAllowed:
                raise web.HTTPError(403, "{kind} {name} is not allowed".format(**model)) from None
            self.hub_auth._persist_url_token_if_set(self)
        self._resolved_user = user
        self.current_user = user  # replaces what a nested current_user cached meanwhile (nobody)

    def get_current_user(self) -> Any:
        return self._resolved_user


class _Api:
    def get_login_url(self) -> str:
        raise web.HTTPError(403, "authentication required (a hub token or the console's login)")


class _ConsoleBase(_UserFirst, _HubAuthFromSettings, HubOAuthenticated, _Base):
    def viewer(self) -> str:
        """Who asks: a user's name, or ``service:<name>`` for a service's token (a service named
        like a user must not see that user's notebooks as its own)."""
        model = self.current_user or {}  # @web.authenticated: never None here
        name = str(model.get("name"))
        return name if model.get("kind", "user") == "user" else f"service:{name}"

    def role(self) -> str:
        role = core.access(self.current_user)
        if role is None:
            raise web.HTTPError(403, f"the GPU console is for hub admins and holders of {core.READ_SCOPE}")
        return role


class ConsolePage(_ConsoleBase):
    @web.authenticated
    def get(self) -> None:
        self.role()
        self.xsrf_token  # sets the _xsrf cookie the page's DELETE sends back  # noqa: B018
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'")
        self.finish((STATIC / "console.html").read_bytes())


class ConsoleApi(_Api, _ConsoleBase):
    @web.authenticated
    async def get(self) -> None:
        role = self.role()
        viewer = self.viewer()
        try:
            if self.service.prometheus_url:
                data = await self.service.prometheus_console(viewer, role)
            else:
                devices = await self.service.devices()
                servers = await self.service.servers()
                data = core.console(
                    devices,
                    self.service.history.to_dict(),
                    servers,
                    viewer,
                    role,
                    self.service.system_user,
                    [self.service.hub_warning] if self.service.hub_warning else [],
                )
            body = json.dumps(data, allow_nan=False)
        except Exception as error:  # a bug: logged, and the page says so instead of a 500
            log.exception("jupyter-gpu: the console could not be built")
            body = json.dumps(
                {
                    **core.console(None, {}, [], viewer, role),
                    "error": f"the console could not be built ({type(error).__name__}; see the service's log)",
                }
            )
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


class KernelApi(_Api, _ConsoleBase):
    @web.authenticated
    async def delete(self, user: str, kernel_id: str) -> None:
        if self.role() != "admin":
            raise web.HTTPError(403, "only admins can shut down other users' kernels")
        who = self.viewer()
        try:
            await self.service.shutdown_kernel(user, kernel_id)
        except HTTPClientError as error:
            log.warning(
                "jupyter-gpu: %s could not shut down kernel %r of %r: HTTP %s",
                who,
                kernel_id[:200],
                user[:200],
                error.code,
            )
            raise web.HTTPError(
                502 if error.code != 404 else 404, f"{user}'s server answered HTTP {error.code}"
            ) from None
        except (OSError, Unusable) as error:  # refused connection, a server URL off the proxy
            log.warning(
                "jupyter-gpu: %s could not shut down kernel %r of %r: %s", who, kernel_id[:200], user[:200], error
            )
            raise web.HTTPError(502, f"cannot reach {user}'s server: {error}") from None
        log.warning("jupyter-gpu: %s shut down kernel %s of user %s", who, kernel_id, user)
        self.set_status(204)
        self.finish()


class DevicesApi(_Api, _UserFirst, _HubAuthFromSettings, HubAuthenticated, _Base):
    """Any hub user or service (user servers use their own token): what nvidia-smi shows anybody."""

    @property
    def hub_scopes(self) -> None:
        return None  # every identified hub user or service (allow_all)

    @web.authenticated
    async def get(self) -> None:
        body = await self.service.devices_body()
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


class UsageApi(_Api, _ConsoleBase):
    """``api/usage``: any hub user's own usage (the sidebar's "your GPU use"); admins everybody's."""

    @property
    def hub_scopes(self) -> None:
        return None  # every identified hub user or service; what each sees is decided below

    def window(self) -> str:
        window = self.get_argument("window", "week")
        if window not in accounting.WINDOWS:
            raise web.HTTPError(400, f"window must be one of {', '.join(accounting.WINDOWS)}, not {window[:40]!r}")
        if self.service.accountant is None:
            raise web.HTTPError(404, "usage accounting is off in this service (no --usage-db)")
        return window

    @property
    def accountant(self) -> UsageAccountant:
        assert self.service.accountant is not None, "checked by window()"
        return self.service.accountant

    @web.authenticated
    async def get(self) -> None:
        window = self.window()
        data = await self.accountant.usage(window, self.viewer(), core.access(self.current_user) == "admin")
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data, allow_nan=False))


class UsageCsvApi(UsageApi):
    """``api/usage.csv``: everybody's usage as CSV, for admins (the console's "CSV" link)."""

    @web.authenticated
    async def get(self) -> None:
        if self.role() != "admin":
            raise web.HTTPError(403, "the usage export is for admins")
        window = self.window()
        data = await self.accountant.usage(window, self.viewer(), True)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="gpu-usage-{window}.csv"')
        self.set_header("Cache-Control", "no-store")
        self.finish(accounting.csv_text(data).encode())


class _DeviceSeries(Collector):
    """The per-GPU families of one sample (a registry per scrape: nothing shared between requests)."""

    def __init__(self, snapshot: Snapshot | None, host: str) -> None:
        self.snapshot, self.host = snapshot, host

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        snapshot = self.snapshot
        if snapshot is None:
            return gauges.health_families(None, None)
        try:
            devices = gauges.device_families(gauges.gpu_rows(snapshot), gauges.slice_rows(snapshot), self.host)
        except Exception:  # a scrape without the GPUs, never a 500 (logged: it is a bug)
            log.exception("jupyter-gpu: the GPU series are left out of this scrape")
            return gauges.health_families(None, None)
        return [*gauges.health_families(snapshot.nvml_available, snapshot.timestamp), *devices]


class MetricsApi(_Api, _UserFirst, _HubAuthFromSettings, HubAuthenticated, _Base):
    """``/metrics``: the host's GPUs for Prometheus (the service's access scope, as for any service
    endpoint: ``access:services!service=<name>``). Kernel series stay with the user servers."""

    @web.authenticated
    async def get(self) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_DeviceSeries(await self.service.devices(), self.service.host))
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.set_header("Cache-Control", "no-store")
        self.finish(generate_latest(registry))


class OAuthCallback(_HubAuthFromSettings, HubOAuthCallbackHandler):
    pass


def make_app(service: HubService, prefix: str, hub_auth: HubOAuth | None = None) -> web.Application:
    """The tornado application of the service under ``prefix`` (``/services/jupyter-gpu/``)."""
    if hub_auth is None:
        hub_auth = HubOAuth(api_token=service.api_token, cache_max_age=60)
    prefix = prefix.rstrip("/")
    return web.Application(
        [
            (prefix + "/?", ConsolePage),
            (prefix + "/api/console", ConsoleApi),
            (prefix + "/api/devices", DevicesApi),
            (prefix + "/api/usage", UsageApi),
            (prefix + r"/api/usage\.csv", UsageCsvApi),
            (prefix + "/metrics", MetricsApi),
            (prefix + r"/api/users/([^/]+)/kernels/([^/]+)", KernelApi),
            (prefix + "/oauth_callback", OAuthCallback),
            (prefix + "/static/(.*)", web.StaticFileHandler, {"path": str(STATIC)}),
        ],
        cookie_secret=os.urandom(32),
        hub_auth=hub_auth,
        jupyter_gpu_hub=service,
    )
