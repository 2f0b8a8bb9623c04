"""HTTP handlers of the server extension: one small class per endpoint, routes as a table.

An error's one-line ``message`` is read by the user (the sidebar shows it): it is in the user's
language (:func:`reader_language`), while the server's log keeps it in English (:class:`Refusal`).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..core.i18n import ENV, N_, _, forced_language, lab_language, language_forced
from .service import GpuService

NAMESPACE = "jupyter-gpu"
# Authorization: reading the GPU snapshot reveals this server's kernels, so it needs "read" on
# "kernels" (what an authorizer such as JupyterHub's grants to whoever may list kernels).
AUTH_RESOURCE = "kernels"


def reader_language() -> str | None:
    """The language of the messages the server's user reads: ``c.JupyterGpuServer.language``, else
    ``JUPYTER_GPU_LANG``, else the language
    chosen in JupyterLab's Settings → Language (read at each error: the user may change it while the
    server runs; the server runs as that user), else None (the standard variables decide)."""
    if forced_language() or os.environ.get(ENV, "").strip():
        return None  # c.JupyterGpuServer.language (set_language at load) or JUPYTER_GPU_LANG decides
    return lab_language()


class Refusal(web.HTTPError):
    """An error the user reads: ``shown`` in their language in the reply, English in the server's log."""

    def __init__(self, status: int, english: str, shown: str) -> None:
        super().__init__(status, "%s", english)  # the log line: never a format of the user's text
        self.english = english
        self.shown = shown


def refuse(status: int, message: str, **fields: Any) -> Refusal:
    """The :class:`Refusal` of ``message`` (marked ``N_``, named placeholders filled from ``fields``)."""
    with language_forced(reader_language()):
        shown = _(message).format(**fields)
    return Refusal(status, message.format(**fields), shown)


class GpuHandler(APIHandler):
    """Base: the service from ``web_app.settings``; errors leave as JSON ``{"message": ...}``.

    ``APIHandler`` answers unauthenticated requests with 403 (never a login redirect) and renders
    any exception as a JSON body; handlers add nothing but their verbs.
    """

    auth_resource = AUTH_RESOURCE

    @property
    def service(self) -> GpuService:
        service = self.settings.get(GpuService.SETTINGS_KEY)
        if service is None:
            raise refuse(503, N_("the jupyter_gpu server extension is not loaded"))
        return service

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A :class:`Refusal` leaves with its message in the user's language (logged in English);
        any other error as ``APIHandler`` writes it."""
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if not isinstance(error, Refusal):
            super().write_error(status_code, **kwargs)
            return
        self.set_header("Content-Type", "application/json")
        self.log.warning("wrote error: %r", error.english)
        self.finish(json.dumps({"message": error.shown, "reason": error.reason}))

    def write_json(self, data: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data, allow_nan=False))


class SnapshotHandler(GpuHandler):
    """``GET {base_url}jupyter-gpu/snapshot``: every GPU, each process attributed to its kernel.

    The body is built once per sample and kernel-table change for every client (see
    :meth:`GpuService.answer`); this handler only sends it. It carries a strong ``ETag``: a client
    that sends it back in ``If-None-Match`` gets ``304 Not Modified`` and no body until the answer
    changes. ``Cache-Control: no-cache`` lets browsers keep it but makes them revalidate every time.
    Clients that accept gzip (browsers, most HTTP libraries) get the body compressed once when it
    was built: with thousands of processes, ten times fewer bytes for the event loop to write.
    """

    @web.authenticated
    @authorized
    async def get(self) -> None:
        answer = await self.service.answer()
        compressed = "gzip" in self.request.headers.get("Accept-Encoding", "")
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-cache, private")
        self.set_header("Vary", "Accept-Encoding")
        # A strong ETag names one representation: the gzip one has its own.
        self.set_header("Etag", answer.etag[:-1] + '-gzip"' if compressed else answer.etag)
        if self.check_etag_header():
            self.set_status(304)
            self.finish()
            return
        if compressed:
            self.set_header("Content-Encoding", "gzip")
            self.finish(answer.gzipped)
        else:
            self.finish(answer.body)


class KeepRunningHandler(GpuHandler):
    """``POST {base_url}jupyter-gpu/keep-running`` with ``{"kernel_id": "…"}``: postpone the GPU-aware
    culler's shutdown of one of this server's kernels by one ``cull_idle_after_s`` (the countdown
    notification's "Keep running"). Logged with the kernel, its notebook and the user.

    Needs "write" on "kernels" (as shutting a kernel down does): whoever may stop this server's
    kernels may keep them. The body is read by :mod:`jupyter_gpu.core.wire`; anything else than one
    kernel id answers 400, a kernel this server does not have 404, culling off 409, each with a
    one-line message, and changes nothing. Answers ``{"kernel_id", "postponed_s"}``.
    """

    MAX_BODY_BYTES = 1024

    @web.authenticated
    @authorized
    async def post(self) -> None:
        from ..core.wire import Fields, WireError, loads

        try:
            fields = Fields(loads(self.request.body, max_bytes=self.MAX_BODY_BYTES, max_depth=2), "body")
            kernel_id = fields.text("kernel_id", 64)
        except WireError as error:
            raise refuse(400, N_('expected {{"kernel_id": "…"}}: {error}'), error=error) from None
        user = getattr(self.current_user, "username", None) or self.service.user
        try:
            postponed_s = await self.service.keep_running(kernel_id, user)
        except KeyError:
            raise refuse(404, N_("no kernel of this server has that id")) from None
        except ValueError as error:  # its message is marked where it is raised (server/cull.py)
            raise refuse(409, str(error).replace("{", "{{").replace("}", "}}")) from None
        self.write_json({"kernel_id": kernel_id, "postponed_s": postponed_s})


class CullsHandler(GpuHandler):
    """``GET {base_url}jupyter-gpu/culls``: the kernels the GPU-aware culler shut down lately, oldest
    first (at most 50 since the server started): ``{"culls": [{"kernel_id", "notebook", "idle_s",
    "memory", "gpus", "culled_at"}]}``. The sidebar leaves a notification that stays for each."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"culls": list(self.service.culler.recent)})


def usage_target() -> tuple[str, str] | None:
    """The jupyter-gpu hub service and the user ``GET jupyter-gpu/usage`` asks about
    (``$JUPYTER_GPU_SERVICE_URL``, ``$JUPYTERHUB_USER``), or None when this server has none: then the
    route answers 404, and the page config says so (``jupyterGpuUsage``) so the sidebar never asks."""
    from ..sources import remote

    base = os.environ.get(remote.SERVICE_URL_ENV)
    user = os.environ.get("JUPYTERHUB_USER")
    return (base, user) if base and user else None


class UsageHandler(GpuHandler):
    """``GET {base_url}jupyter-gpu/usage?window=day|week|30d``: this server's user's GPU use (the
    sidebar's "your GPU use this week"), asked from the jupyter-gpu hub service's ``api/usage`` with
    this server's own token (:func:`jupyter_gpu.sources.remote.own_usage`: the browser cannot call
    the service without its OAuth). 404 when there is no service (``$JUPYTER_GPU_SERVICE_URL`` unset)
    or it keeps no accounting; 502 with one line when it cannot be read."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        from ..sources import remote

        window = self.get_argument("window", "week")
        if window not in remote.USAGE_WINDOWS:
            raise refuse(400, N_("window must be one of {windows}"), windows=", ".join(remote.USAGE_WINDOWS))
        target = usage_target()
        if target is None:
            raise refuse(
                404, N_("no jupyter-gpu hub service for this server (JUPYTER_GPU_SERVICE_URL, JUPYTERHUB_USER)")
            )
        base, user = target
        account = self.service.config.service_account
        try:
            data = await asyncio.get_running_loop().run_in_executor(
                None, lambda: remote.own_usage(base, user, window, account=account)
            )
        except urllib.error.HTTPError as error:
            if error.code == 404:
                raise refuse(404, N_("the jupyter-gpu service keeps no usage accounting")) from None
            raise refuse(502, N_("the jupyter-gpu service answered HTTP {code}"), code=error.code) from None
        except (OSError, remote.BadAnswer) as error:
            reason = getattr(error, "reason", None) or error
            raise refuse(
                502, N_("cannot read your GPU use from the jupyter-gpu service: {reason}"), reason=reason
            ) from None
        self.write_json(data)


def routes(base_url: str) -> list[tuple[str, type[GpuHandler]]]:
    """The extension's URL table, under ``{base_url}jupyter-gpu/`` (works behind JupyterHub)."""
    return [
        (url_path_join(base_url, NAMESPACE, "snapshot"), SnapshotHandler),
        (url_path_join(base_url, NAMESPACE, "usage"), UsageHandler),
        (url_path_join(base_url, NAMESPACE, "keep-running"), KeepRunningHandler),
        (url_path_join(base_url, NAMESPACE, "culls"), CullsHandler),
    ]
