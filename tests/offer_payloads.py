"""The restart offer's and the out-of-memory report's display payloads, as the kernel makes them
(``jupyter_gpu.kernel.restart_offer``, ``jupyter_gpu.kernel.oom_offer.offer_data``), for the browser
tests that show them without provoking them: a cell that displays them (output of this session, so
trusted: the buttons are offered), or a saved notebook output carrying one (from elsewhere: not).
"""

from __future__ import annotations

from typing import Any

from jupyter_gpu.kernel.oom_offer import OOM_MIME
from jupyter_gpu.kernel.restart_offer import RESTART_MIME

#: The plain text each payload is displayed with (what a frontend without the extension shows).
PLAIN = {RESTART_MIME: "offer", OOM_MIME: "report"}

__all__ = ["OOM_MIME", "RESTART_MIME", "display_cell", "oom_report", "restart_offer", "saved_output"]


def restart_offer(
    lines: list[str], *, offer_id: str, reason: str = "too late", automatic: bool = False
) -> dict[str, Any]:
    """A restart offer's data: restart the kernel, then run ``lines`` first."""
    return {
        "version": 1,
        "lines": lines,
        "reason": reason,
        "automatic": automatic,
        "kernel_id": None,
        "id": offer_id,
    }


def oom_report(report: str, actions: list[dict[str, Any]]) -> dict[str, Any]:
    """An out-of-memory report's data: its text and the steps its buttons take."""
    return {"version": 1, "report": report, "actions": actions, "kernel_id": None}


def display_cell(*bundles: tuple[str, dict[str, Any]], prelude: str = "") -> str:
    """A cell's source that displays each ``(mime, data)`` as the kernel does (raw, with a
    ``text/plain`` beside it); ``prelude``: lines run first (``%load_ext jupyter_gpu``)."""
    lines = [*([prelude] if prelude else []), "from IPython.display import display"]
    lines += [f"display({{{mime!r}: {data!r}, 'text/plain': {PLAIN[mime]!r}}}, raw=True)" for mime, data in bundles]
    return "\n".join(lines)


def saved_output(mime: str, data: dict[str, Any]) -> dict[str, Any]:
    """A notebook's saved ``display_data`` output carrying ``data`` (an untrusted notebook's)."""
    return {"output_type": "display_data", "metadata": {}, "data": {mime: data, "text/plain": "offer"}}
