"""The restart offer: "Restart kernel and apply" when a plan can only take effect in a new kernel.

A change refused as too late (a framework already uses the GPU) and ``%gpu_restart`` show it: a
MIME bundle (:data:`RESTART_MIME`) that the JupyterLab extension renders as a button, or acts on at
once (``automatic``), with plain text for every other frontend. Either way the extension asks
first (a dialog saying that the kernel's variables are lost and which plan the new kernel gets),
unless the user turned that off in its settings.

What carries over: the offer's lines are the kernel's jupyter_gpu settings as magics, run silently
in the new kernel before anything else: the plan (:func:`jupyter_gpu.plan.plan_magics`) and
``%gpu_watch`` when it is on (:func:`carried_lines`). This is the one mechanism; nothing is written
to a file or the environment for the new kernel.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.i18n import _
from ..core.text import wrap

RESTART_MIME = "application/vnd.jupyter-gpu.restart+json"

#: The first line of every offer; the only line a face may leave unsaid (it changes no plan).
LOAD_LINE = "%load_ext jupyter_gpu"

#: ``%gpu_select``'s options that return at once, by their exact names (argparse also takes unique
#: prefixes: ``--w 1h`` is ``--wait 1h``). The renderer allows the same (restart.ts
#: ``QUICK_SELECT_OPTIONS``): an offer runs before anything else in a new kernel, behind a
#: "Restarting…" button, so a line that can wait (``--wait``) is never offered.
QUICK_SELECT_OPTIONS = frozenset({"--growth", "--no-growth", "--min-free"})

#: What the extension evaluates (``user_expressions``) in the new kernel after running an offer's
#: lines, to say which plan is now in force. A contract with ``labextension/src/restart.ts``
#: (``SUMMARY``): tests/test_restart_offer.py evaluates the string found there.
SUMMARY_EXPRESSION = "__import__('jupyter_gpu.kernel.restart_offer', fromlist=['x']).applied_plan_summary()"


class PlanSummary(str):
    """A plan summary whose repr is a JSON string literal.

    The extension reads a user expression's ``text/plain``, which is the value's repr: with this,
    ``JSON.parse`` gives the text back exactly (quotes, backslashes, new lines), where a Python
    repr would need Python's quoting rules on the other side.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return json.dumps(str(self))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def applied_plan_summary() -> PlanSummary:
    """The plan in force in this kernel, in one line (what "Restart kernel and apply" reports),
    with "; %gpu_watch on" when the watch is on; its repr is JSON (:class:`PlanSummary`)."""
    from IPython import get_ipython

    from ..plan import current_plan
    from ..session.report import summary

    watching = "; %gpu_watch on" if watch_lines(get_ipython()) else ""
    return PlanSummary(summary(current_plan()) + watching)


def carried_lines(request: Any) -> list[str]:
    """The lines a restart by jupyter_gpu runs first in the new kernel: the plan of ``request`` as
    magics, then ``%gpu_watch on`` when this kernel's watch is on."""
    from IPython import get_ipython

    from ..plan import plan_magics

    return plan_magics(request) + watch_lines(get_ipython())


def watch_lines(ipython: Any) -> list[str]:
    """``ipython``'s ``%gpu_watch`` as magic lines for a fresh kernel (``MonitorMagics.carried_lines``,
    found in the shell's magics registry: this module is below the magics, which show offers)."""
    magics = ipython.magics_manager.registry.get("MonitorMagics") if ipython is not None else None
    carried = getattr(magics, "carried_lines", None)
    return list(carried()) if callable(carried) else []


def blocking_option(line: str) -> str | None:
    """The option of ``line`` that could keep a new kernel waiting (``--wait``, or anything that is
    not one of :data:`QUICK_SELECT_OPTIONS`), or None."""
    if not line.startswith("%gpu_select "):
        return None
    return next((w for w in line.split(" ")[1:] if w.startswith("-") and w not in QUICK_SELECT_OPTIONS), None)


def shown_lines(lines: list[str]) -> str:
    """The lines as the offer's text shows them: all of them, but an exact ``%load_ext jupyter_gpu``
    first line when more follow."""
    return "; ".join(lines[1:] if lines[:1] == [LOAD_LINE] and len(lines) > 1 else lines)


def offer_restart(request: Any, reason: str, automatic: bool = False) -> None:
    """Show "Restart kernel and apply": a MIME bundle the JupyterLab extension renders as a button
    (``automatic``: it restarts at once, for ``%gpu_restart``), plain text everywhere else."""
    import uuid

    from IPython.display import display

    from ..sources.kernel_reports import kernel_identity

    lines = carried_lines(request)
    blocking = next((option for option in map(blocking_option, lines) if option), None)
    if blocking is not None:
        # Never offered for a click (nor run at once): it could hold the new kernel with nothing
        # on screen saying why. The text says what to run, by hand.
        display(
            {
                "text/plain": wrap(
                    _(
                        "To apply this GPU plan, restart the kernel and run: {lines} "
                        "(not offered as a restart: {option} could keep the new kernel waiting)"
                    ).format(lines=shown_lines(lines), option=blocking)
                )
            },
            raw=True,
        )
        return
    text = (
        _(
            "To apply this GPU plan, restart the kernel and run first: {lines} (JupyterLab and Notebook 7 "
            "with jupyter_gpu's extension do it for you, after asking: %gpu_restart)"
        )
        if not automatic
        else _(
            "To apply this GPU plan, restart the kernel and run first: {lines} (JupyterLab and Notebook 7 "
            "with jupyter_gpu's extension ask, then restart; this frontend cannot restart the kernel from "
            "code: restart it yourself, then run the lines. This kernel's variables are lost either way)"
        )
    ).format(lines=shown_lines(lines))
    data = {
        "version": 1,
        "lines": lines,
        "reason": reason,
        "automatic": automatic,
        "kernel_id": kernel_identity()[0],
        "id": uuid.uuid4().hex,
    }
    display({RESTART_MIME: data, "text/plain": wrap(text)}, raw=True)
