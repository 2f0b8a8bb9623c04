"""The jupyter-gpu JupyterHub service's tornado application: its routes, under the service prefix
(``/services/jupyter-gpu/``). The rooms: :mod:`.service` (the sampler, the reports, the state),
:mod:`.handlers` (the requests), :mod:`.auth` (who asks), :mod:`.usage` (accounting),
:mod:`.prometheus_mode` (``--prometheus-url``); the pure rules :mod:`.core`, :mod:`.reports`,
:mod:`.accounting`, :mod:`.prometheus`.

- ``/`` — the admin's GPU console, one response with its style, script and first data inline
  (:mod:`.page`), hub OAuth login;
- ``api/console`` — its JSON (:func:`jupyter_gpu.hub.core.console`), same auth; with
  ``--prometheus-url``, every node's GPUs and kernels from Prometheus
  (:func:`jupyter_gpu.hub.prometheus.console`) instead of local NVML and the user servers' reports;
- ``api/report`` — ``POST``: a user server's report with its own token (:mod:`.reports`); the
  answer carries the admins' shutdown instructions for that server;
- ``api/users/<user>/kernels/<kernel_id>`` — ``DELETE``: an admin asks for a kernel's shutdown,
  which the user's server carries out with its next report (nothing is sent to it);
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

import os

from jupyterhub.services.auth import HubOAuth
from tornado import web

from .handlers import (
    STATIC,
    ConsoleApi,
    ConsolePage,
    DevicesApi,
    KernelApi,
    MetricsApi,
    OAuthCallback,
    ReportApi,
    UsageApi,
    UsageCsvApi,
)
from .service import HubService
from .usage import UsageAccountant

__all__ = ["HubService", "UsageAccountant", "make_app"]


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
            (prefix + "/api/report", ReportApi),
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
