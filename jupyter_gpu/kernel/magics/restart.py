"""``%gpu_restart``: restart the kernel and apply the GPU plan first thing in the new one."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from ...core.i18n import _
from ..restart_offer import offer_restart
from ..session import PlanSession
from .arguments import help_pages_in_language


@help_pages_in_language
@magics_class
class GpuRestartMagics(Magics):
    """``%gpu_restart``: the restart offer (:mod:`jupyter_gpu.kernel.restart_offer`) for the plan of ``session``."""

    def __init__(self, shell: Any, session: PlanSession) -> None:
        super().__init__(shell=shell)
        self.session = session

    @line_magic
    def gpu_restart(self, line: str = "") -> None:
        """Restart the kernel and apply the GPU plan in the new kernel before anything else runs.

        In JupyterLab and Notebook 7 (with jupyter_gpu's extension) the frontend first asks (a
        dialog: this kernel's variables are lost, as with any restart, and the plan the new kernel
        gets; "Do not ask again" turns the question off in the extension's settings), then
        restarts the kernel through its own session API, runs the plan's magics silently in the
        new kernel, with ``%gpu_watch on`` when the watch is on, and confirms in a notification.
        The plan is the last one refused as too late (after a ``GPUAlreadyInitializedWarning``),
        else the current one. Where the frontend cannot do it (classic Notebook, VS Code, a
        terminal), the magic prints the lines to run after restarting by hand, and says so.

        Example::

            %gpu_select 1 --growth    # warns: PyTorch already initialized the GPU
            %gpu_restart              # new kernel on GPU 1 with growth
        """
        from ...plan import current_plan

        if line.strip():
            raise UsageError(_("%gpu_restart takes no arguments; it applies the last refused (or the current) plan"))
        request = self.session.pending_request or current_plan().request
        offer_restart(request, "%gpu_restart", automatic=True)
