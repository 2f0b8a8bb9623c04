"""The kernel's plan session: :class:`jupyter_gpu.session.plan_session.PlanSession` as a kernel face.

Everything below IPython (the snapshot, the planner, the admin ceiling, the claims, the framework
changes) is :mod:`jupyter_gpu.session.plan_session`'s, shared with ``jupyter-gpu run``. The kernel adds
three things: a refused change is IPython's one-line ``UsageError``, a change refused as too late
offers a restart (:mod:`jupyter_gpu.kernel.restart_offer`), and the claims are released however the
kernel ends (:mod:`jupyter_gpu.kernel.exit_hooks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..session import plan_session as _base
from ..session.plan_session import (
    NoGpuFitsError,
    SessionSettings,
    Settings,
    admin_ceiling,
    current_user,
    gpu_settings_change,
    loosens_admin_ceiling,
    take_snapshot,
    warn_already_initialized,
    would_fit_hints,
)

if TYPE_CHECKING:
    from ..plan import PlanRequest

__all__ = [
    "NoGpuFitsError",
    "PlanSession",
    "SessionSettings",
    "Settings",
    "admin_ceiling",
    "current_user",
    "gpu_settings_change",
    "loosens_admin_ceiling",
    "take_snapshot",
    "warn_already_initialized",
    "would_fit_hints",
]


class PlanSession(_base.PlanSession):
    """One kernel's changes of the GPU plan (see :class:`jupyter_gpu.session.plan_session.PlanSession`)."""

    refused = UsageError

    def too_late(self, pending: PlanRequest, why: str) -> None:
        from .restart_offer import offer_restart

        offer_restart(pending, why)

    def at_exit(self, release: Any) -> None:
        from .exit_hooks import at_kernel_exit

        at_kernel_exit(release)  # exit, SIGTERM, SIGHUP, the parent's death
