"""HTTP handlers of the server extension: one small class per endpoint, routes as a table."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .service import GpuService

NAMESPACE = "jupyter-gpu"
# Authorization: reading the GPU snapshot reveals this server's kernels, so it needs "read" on
# "kernels" (what an authorizer such as JupyterHub's grants to whoever may list kernels).
AUTH_RESOURCE = "kernels"


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
            raise web.HTTPError(503, "the jupyter_gpu server extension is not loaded")
        return service

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


def routes(base_url: str) -> list[tuple[str, type[GpuHandler]]]:
    """The extension's URL table, under ``{base_url}jupyter-gpu/`` (works behind JupyterHub)."""
    return [
        (url_path_join(base_url, NAMESPACE, "snapshot"), SnapshotHandler),
    ]
