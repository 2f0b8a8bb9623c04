"""``%gpu_select auto:N --wait`` in a kernel: the loop of :mod:`jupyter_gpu.session.wait`, its progress
line shown as one notebook output replaced in place (printed again outside Jupyter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..core.errors import PlanError
from ..session import wait as _wait
from ..session.wait import POLL_INTERVAL_S

if TYPE_CHECKING:
    from ..plan import GpuPlan
    from .session import PlanSession

__all__ = ["POLL_INTERVAL_S", "parse_duration", "wait_and_select"]


def parse_duration(text: str) -> float:
    """``90``/``90s``, ``30m``, ``1.5h`` as seconds; a one-line UsageError otherwise."""
    try:
        return _wait.parse_duration(text)
    except PlanError as error:
        raise UsageError(str(error)) from None


def _show_progress(handle: Any, text: str) -> Any:
    """Show ``text`` in one output line that is replaced at each update (printed again outside Jupyter)."""
    from IPython.display import Pretty, display

    if handle is None:
        return display(Pretty(text), display_id=True)
    handle.update(Pretty(text))
    return handle


def wait_and_select(session: PlanSession, spec: str, wait_s: float, changes: dict[str, Any]) -> GpuPlan | None:
    """Select ``spec`` (with ``changes``) through ``session`` once the GPUs fit, waiting up to ``wait_s``
    seconds; a UsageError when the time is up or on an interrupt, with nothing changed."""
    return _wait.wait_and_select(session, spec, wait_s, changes, _show_progress)
