"""``GET {base_url}jupyter-gpu/history``: the server's bounded GPU history (:mod:`jupyter_gpu.core.history`).

The sidebar loads it once when the page opens, then appends its polls, so its charts open full and
a page reload loses nothing. Authenticated and authorized exactly like the snapshot (it lives on the
same base handler); it carries only per-GPU utilization and memory shares, no process or user.

Query: ``?since=<epoch seconds>`` returns only newer samples (a client catching up).
"""

from __future__ import annotations

import math

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from ..core.i18n import N_
from .handlers import NAMESPACE, GpuHandler, refuse


class HistoryHandler(GpuHandler):
    """``GET {base_url}jupyter-gpu/history[?since=<t>]``: per GPU, the last samples as columns."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        since_text = self.get_query_argument("since", None)
        since = None
        if since_text is not None:
            try:
                since = float(since_text)
            except ValueError:
                since = math.nan
            if not math.isfinite(since):
                raise refuse(
                    400, N_("since must be a number of epoch seconds, not {value}"), value=repr(since_text[:40])
                )
        service = self.service
        history = getattr(service, "history", None)
        if history is None:
            raise refuse(503, N_("the jupyter_gpu server extension keeps no history"))
        service.sampler.touch()  # looking at the history is demand, like a poll
        self.write_json(history.to_dict(since=since))


def routes(base_url: str) -> list[tuple[str, type[GpuHandler]]]:
    """The history route, under ``{base_url}jupyter-gpu/``."""
    return [(url_path_join(base_url, NAMESPACE, "history"), HistoryHandler)]
