"""The jupyter_gpu Jupyter Server extension: one shared GPU sampler, per-kernel attribution,
Prometheus gauges. Enabled on install (``etc/jupyter/jupyter_server_config.d/jupyter_gpu.json``).

- ``GET {base_url}jupyter-gpu/snapshot`` — the snapshot contract plus, per process, the kernel and
  notebook it belongs to and how long that kernel has been idle (see ``docs/server.md``).
- ``jupyter_gpu_*`` gauges on the server's ``/metrics``.
- Settings: ``c.JupyterGpuServer.*`` (:class:`JupyterGpuServer`).
"""

from __future__ import annotations

from typing import Any

from .config import JupyterGpuServer
from .service import GpuService, KernelInfo

__all__ = ["GpuService", "JupyterGpuServer", "KernelInfo"]

LOG_HANDLER_KEY = "jupyter_gpu_log"  # web_app.settings: the handler of server.logs.attach


def _start_pusher(service: GpuService) -> None:
    from .hub_pusher import start_pusher

    service.pusher = start_pusher(service)


def _refresh_when_the_loop_runs(service: GpuService) -> None:
    """Read the kernel table as soon as the server's loop runs (not only at the first sample), and
    start reporting to the hub service where there is one (:mod:`.hub_pusher`)."""
    try:
        from tornado.ioloop import IOLoop

        IOLoop.current().add_callback(service.refresh_kernels)
        IOLoop.current().add_callback(service.culler.start)
        IOLoop.current().add_callback(_start_pusher, service)
    except Exception:  # no loop yet: the first request refreshes it
        pass


def _unload_jupyter_server_extension(serverapp: Any) -> None:
    """The server stops: stop sampling, unbind the gauges, remove this server's kernel reports and claims."""
    from . import logs, metrics

    service = serverapp.web_app.settings.get(GpuService.SETTINGS_KEY)
    if service is not None:
        metrics.unbind(service)
        service.close()
    handler = serverapp.web_app.settings.pop(LOG_HANDLER_KEY, None)
    if handler is not None:
        logs.detach(serverapp, handler)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_gpu.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Create the service, add the routes and bind the Prometheus collector (idempotent); serve the
    sidebar's settings schema in JupyterLab's language (:mod:`.lab_settings`, even when disabled)."""
    from . import lab_settings, logs, metrics
    from .handlers import routes, usage_target
    from .history_handler import routes as history_routes

    lab_settings.install()
    web_app = serverapp.web_app
    if web_app.settings.get(GpuService.SETTINGS_KEY) is not None:
        serverapp.log.info("jupyter_gpu server extension already loaded")
        return
    config = JupyterGpuServer(parent=serverapp)
    if not config.enabled:
        serverapp.log.info("jupyter_gpu server extension disabled (JupyterGpuServer.enabled = False)")
        return
    if config.language:
        from ..core import i18n

        i18n.set_language(config.language)
    web_app.settings[LOG_HANDLER_KEY] = logs.attach(serverapp)  # jupyter_gpu's lines in the server's log
    service = GpuService(
        config,
        kernel_manager=serverapp.kernel_manager,
        session_manager=serverapp.session_manager,
        report_dir=getattr(serverapp.kernel_manager, "connection_dir", None) or serverapp.runtime_dir,
        metrics_public=not web_app.settings.get("authenticate_prometheus", True),
    )
    web_app.settings[GpuService.SETTINGS_KEY] = service
    service.report_files.remove_orphans()  # reports dead kernels left behind
    service.remove_claims()  # this user's claims of kernels that no longer run
    web_app.add_handlers(".*$", routes(web_app.settings["base_url"]) + history_routes(web_app.settings["base_url"]))
    # The sidebar asks for "your GPU use this week" only where there is a hub service to ask (no 404
    # logged on every page load without one): JupyterLab and Notebook 7 put this in the page config.
    web_app.settings.setdefault("page_config_data", {})["jupyterGpuUsage"] = usage_target() is not None
    service.attach_events(getattr(serverapp, "event_logger", None))
    if config.prometheus:
        metrics.bind(service)
    _refresh_when_the_loop_runs(service)

    serverapp.log.info(
        "jupyter_gpu: GPU snapshot at %sjupyter-gpu/snapshot (sampling every %g s while polled)",
        web_app.settings["base_url"],
        config.interval_s,
    )
