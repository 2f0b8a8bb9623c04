"""The out-of-memory report as the frontends get it: text everywhere, buttons in JupyterLab.

After a cell fails with a GPU out-of-memory error, the report (:mod:`jupyter_gpu.kernel.oom`) is
displayed as a MIME bundle: ``text/plain`` (the report, what every frontend shows) and
:data:`OOM_MIME`, which jupyter_gpu's JupyterLab/Notebook 7 extension renders as the report's text
(code as code, no literal backticks) with its next steps as buttons, each confirmed: shut down an
idle kernel of yours (Jupyter's kernel API), restart on a roomier GPU with growth (the restart
offer's flow: :mod:`jupyter_gpu.kernel.restart_offer`), free memory (``%gpu_free`` in this kernel).
As with the restart offer, the buttons need trusted output and lines the renderer allows.
"""

from __future__ import annotations

from typing import Any

from .oom import Report

OOM_MIME = "application/vnd.jupyter-gpu.oom+json"


def offer_data(report: Report) -> dict[str, Any]:
    """The :data:`OOM_MIME` data of ``report``: its text and its actions as JSON; a restart's plan
    becomes the lines a restart by jupyter_gpu runs first (the plan and ``%gpu_watch``), and a
    restart whose lines could wait in the new kernel is left out (as the restart offer does)."""
    from ..sources.kernel_reports import kernel_identity
    from .restart_offer import blocking_option, carried_lines

    actions = []
    for action in report.actions:
        if action["kind"] == "restart":
            lines = carried_lines(action["request"])
            if any(blocking_option(line) for line in lines):
                continue
            actions.append({"kind": "restart", "gpu": action["gpu"], "lines": lines})
        elif action["kind"] == "raise_limit":
            lines = carried_lines(action["request"])
            if any(blocking_option(line) for line in lines):
                continue
            actions.append({"kind": "raise_limit", "gpu": action["gpu"], "limit": action["limit"], "lines": lines})
        else:
            actions.append(dict(action))
    return {"version": 1, "report": report.text, "actions": actions, "kernel_id": kernel_identity()[0]}


def show_report(report: Report) -> None:
    """Display ``report`` under the failed cell's traceback (text, and the bundle the extension renders)."""
    from IPython.display import display

    display({OOM_MIME: offer_data(report), "text/plain": report.text}, raw=True)
