"""The restart offer: "Restart kernel and apply" when a plan can only take effect in a new kernel.

A change refused as too late (a framework already uses the GPU) and ``%gpu_restart`` show it: a
MIME bundle (:data:`RESTART_MIME`) that the JupyterLab extension renders as a button, or acts on at
once (``automatic``), with plain text for every other frontend.
"""

from __future__ import annotations

from typing import Any

RESTART_MIME = "application/vnd.jupyter-gpu.restart+json"

#: What the extension evaluates (``user_expressions``) in the new kernel after running an offer's
#: lines, to say which plan is now in force. A contract with ``labextension/src/restart.ts``
#: (``SUMMARY``): tests/test_restart_offer.py evaluates the string found there.
SUMMARY_EXPRESSION = "__import__('jupyter_gpu.kernel.restart_offer', fromlist=['x']).applied_plan_summary()"


def applied_plan_summary() -> str:
    """The plan in force in this kernel, in one line (what "Restart kernel and apply" reports)."""
    from ..plan import current_plan
    from .plan_report import summary

    return summary(current_plan())


def offer_restart(request: Any, reason: str, automatic: bool = False) -> None:
    """Show "Restart kernel and apply": a MIME bundle the JupyterLab extension renders as a button
    (``automatic``: it restarts at once, for ``%gpu_restart``), plain text everywhere else."""
    import uuid

    from IPython.display import display

    from ..plan import plan_magics
    from ..sources.kernel_reports import kernel_identity

    lines = plan_magics(request)
    text = (
        "To apply this GPU plan, restart the kernel and run first: "
        + "; ".join(lines[1:] or lines)
        + (
            " (JupyterLab with jupyter_gpu's extension does it for you: %gpu_restart)"
            if not automatic
            else " (this frontend cannot restart the kernel from code: restart it yourself)"
        )
    )
    data = {
        "version": 1,
        "lines": lines,
        "reason": reason,
        "automatic": automatic,
        "kernel_id": kernel_identity()[0],
        "id": uuid.uuid4().hex,
    }
    display({RESTART_MIME: data, "text/plain": text}, raw=True)
