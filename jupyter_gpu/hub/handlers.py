"""The service's request handlers (tornado wiring; the routes are in :mod:`.app`).

Identity and roles: :mod:`.auth`. Every answer's content comes from the pure rules (:mod:`.core`,
:mod:`.reports`, :mod:`.accounting`) over :class:`jupyter_gpu.hub.service.HubService`'s state.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from jupyterhub.services.auth import HubAuthenticated, HubOAuthCallbackHandler
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from tornado import web

from ..core import gauges
from ..core.i18n import N_, _
from ..core.snapshot import Snapshot
from . import accounting, core, page
from .auth import Api, Base, ConsoleBase, HubAuthFromSettings, UserFirst
from .reports import MAX_REPORT_BYTES, Refused
from .usage import UsageAccountant

log = logging.getLogger("jupyter_gpu.hub")
STATIC = page.STATIC


async def console_body(handler: ConsoleBase, role: str) -> str:
    """``api/console``'s JSON for the handler's viewer with ``role``: what the page polls and what
    its first request carries inline (:class:`ConsolePage`), its messages in the request's language
    (:meth:`ConsoleBase.language`; its fields as they are). A bug is logged and the page says so,
    never a 500."""
    service, viewer = handler.service, handler.viewer()
    try:
        if service.prometheus_url:
            data = await service.prometheus_console(viewer, role, handler.language())
            return json.dumps(data, allow_nan=False)
        # The join of this sample, made once for every request (and ahead of them): the same
        # answer as core.console's, its messages in the request's language.
        return service.console_json(await service.devices(), viewer, role, handler.language())
    except Exception as error:  # a bug: logged, and the page says so instead of a 500
        log.exception("jupyter-gpu: the console could not be built")
        with handler.speaking():
            return json.dumps(
                {
                    **core.console(None, {}, [], viewer, role),
                    "error": _("the console could not be built ({error}; see the service's log)").format(
                        error=type(error).__name__
                    ),
                }
            )


class ConsolePage(ConsoleBase):
    """The console's page with its style, script and first data inline (:mod:`.page`; issue 27:
    its first paint waits for no request of its own). The first data is what ``api/console``
    answers this viewer now; the page's head goes out before it is joined."""

    @web.authenticated
    async def get(self) -> None:
        role = self.role()
        self.xsrf_token  # sets the _xsrf cookie the page's DELETE sends back  # noqa: B018
        built = page.page(self.language())
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", built.csp)
        self.set_header("Cache-Control", "no-store")
        self.write(built.before)  # the head and style, parsed while the data is joined
        await self.flush()
        self.finish(built.rest(await console_body(self, role)))  # never raises: a bug is an error line


class ConsoleApi(Api, ConsoleBase):
    @web.authenticated
    async def get(self) -> None:
        body = await console_body(self, self.role())
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


class KernelApi(Api, ConsoleBase):
    """``DELETE api/users/<user>/kernels/<kernel_id>``: an admin asks for a kernel's shutdown.

    Nothing is sent to the user's server: the instruction waits in the service until that user's
    server picks it up with its next report (its own token) and shuts the kernel down itself,
    logging the admin's name (``202``; ``404`` when no fresh report of the user lists the kernel).
    """

    @web.authenticated
    async def delete(self, user: str, kernel_id: str) -> None:
        if self.role() != "admin":
            raise self.refusal(403, N_("only admins can shut down other users' kernels"))
        if core.KERNEL_ID.fullmatch(kernel_id) is None:
            raise self.refusal(400, N_("not a kernel id"))
        who = self.viewer()
        try:
            server = self.service.ask_shutdown(user, kernel_id, who)
        except KeyError:
            raise self.refusal(
                404, N_("no fresh report of {user}'s servers lists that kernel"), user=user[:200]
            ) from None
        log.warning(
            "jupyter-gpu: %s asked for the shutdown of kernel %s of user %s%s (its server carries it out)",
            who,
            kernel_id,
            user,
            f" (server {server!r})" if server else "",
        )
        self.set_status(202)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"pending": True, "within_s": 2 * self.service.board.interval_s}))


class ReportApi(Api, UserFirst, HubAuthFromSettings, HubAuthenticated, Base):
    """``POST api/report``: a user server's report, with that server's own hub token (which names
    its user: the report is kept as that user's, whatever it says). The answer carries the next
    interval and the admins' shutdown instructions for this server (:mod:`.reports`)."""

    @property
    def hub_scopes(self) -> None:
        return None  # every identified hub user; a service's token is refused below

    def check_xsrf_cookie(self) -> None:
        pass  # token-authenticated only: a login cookie is refused below

    @web.authenticated
    async def post(self) -> None:
        model = self.current_user or {}
        if model.get("kind", "user") != "user" or self.get_cookie(self.hub_auth.cookie_name):
            raise web.HTTPError(403, "reports come from user servers, with their own hub token")
        user = str(model.get("name"))
        body = self.request.body
        if len(body) > MAX_REPORT_BYTES:
            self.service.board.drop("oversized")
            raise web.HTTPError(413, f"a report is at most {MAX_REPORT_BYTES} bytes")
        try:
            _report, answer = self.service.receive_report(user, body)
        except Refused as refused:
            raise web.HTTPError(429 if refused.reason == "too_frequent" else 422, str(refused)[:300]) from None
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(answer))


class DevicesApi(Api, UserFirst, HubAuthFromSettings, HubAuthenticated, Base):
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


class UsageApi(Api, ConsoleBase):
    """``api/usage``: any hub user's own usage (the sidebar's "your GPU use"); admins everybody's."""

    @property
    def hub_scopes(self) -> None:
        return None  # every identified hub user or service; what each sees is decided below

    def window(self) -> str:
        window = self.get_argument("window", "week")
        if window not in accounting.WINDOWS:
            raise self.refusal(
                400,
                N_("window must be one of {windows}, not {window}"),
                windows=", ".join(accounting.WINDOWS),
                window=repr(window[:40]),
            )
        if self.service.accountant is None:
            raise self.refusal(404, N_("usage accounting is off in this service (no --usage-db)"))
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
            raise self.refusal(403, N_("the usage export is for admins"))
        window = self.window()
        data = await self.accountant.usage(window, self.viewer(), True)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="gpu-usage-{window}.csv"')
        self.set_header("Cache-Control", "no-store")
        self.finish(accounting.csv_text(data).encode())


class _DeviceSeries(Collector):
    """The per-GPU families of one sample and the per-kernel families of the reports believed
    against it (a registry per scrape: nothing shared between requests)."""

    def __init__(self, snapshot: Snapshot | None, host: str, servers: list[core.UserServer], system_user: str) -> None:
        self.snapshot, self.host, self.servers, self.system_user = snapshot, host, servers, system_user

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
        try:
            believed = core.console(snapshot, {}, self.servers, "", "admin", self.system_user)
            kernels = gauges.kernel_families(*core.kernel_rows(believed, {g.index: g.uuid for g in snapshot.gpus}))
        except Exception:  # the GPUs without the kernels, never a 500 (logged: it is a bug)
            log.exception("jupyter-gpu: the kernel series are left out of this scrape")
            kernels = []
        return [*gauges.health_families(snapshot.nvml_available, snapshot.timestamp), *devices, *kernels]


class MetricsApi(Api, UserFirst, HubAuthFromSettings, HubAuthenticated, Base):
    """``/metrics``: the host's GPUs and every user's kernels for Prometheus (the service's access
    scope, as for any service endpoint: ``access:services!service=<name>``). The kernel series come
    from the user servers' pushed reports, believed as the console believes them (NVML's PID owner,
    stale and lying reports left out: :func:`jupyter_gpu.hub.core.kernel_rows`), so Prometheus
    scrapes this one endpoint and sends no credential to any user server (issue 27)."""

    @web.authenticated
    async def get(self) -> None:
        devices = await self.service.devices()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            _DeviceSeries(devices, self.service.host, self.service.servers(devices), self.service.system_user)
        )
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.set_header("Cache-Control", "no-store")
        self.finish(generate_latest(registry))


class OAuthCallback(HubAuthFromSettings, HubOAuthCallbackHandler):
    pass
