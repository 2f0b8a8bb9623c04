"""``%gpu_monitor`` and ``%gpu_watch``: the live GPU panel and the per-cell GPU memory report.

Registered by ``%load_ext jupyter_gpu`` (see :mod:`jupyter_gpu.kernel.extension`);
``%unload_ext jupyter_gpu`` removes the event hooks and closes the panels.

Defaults are configurable (``%config MonitorMagics.monitor_interval_s = 2`` or
``c.MonitorMagics.monitor_interval_s = 2`` in ``ipython_config.py``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, Integer

from ..core.i18n import _
from .hooks import off_cell_event, on_cell_event
from .magics.arguments import help_pages_in_language, parse

if TYPE_CHECKING:
    from .watch import CellWatch


@help_pages_in_language
@magics_class
class MonitorMagics(Magics):
    """The live GPU panel (``%gpu_monitor``) and the per-cell GPU memory report (``%gpu_watch``)."""

    monitor_interval_s = Float(1.0, config=True, help="Default seconds between panel updates (%gpu_monitor).")
    monitor_history = Integer(60, config=True, help="Default number of samples in the panel's history charts.")
    watch_interval_s = Float(
        0.2,
        config=True,
        help="Seconds between NVML samples while a cell runs under %gpu_watch (the peak is sampled, so a "
        "spike shorter than this can escape it).",
    )

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.panels: list[Any] = []
        self.watch: CellWatch | None = None

    def _shell(self) -> Any:
        """The shell whose cell events the watch hooks (:func:`register` always gives these magics one)."""
        if self.shell is None:
            raise RuntimeError("MonitorMagics without a shell: register it with register(ipython)")
        return self.shell

    # -- %gpu_monitor

    @magic_arguments()
    @argument(
        "--interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help=_("seconds between updates (at least 0.1; default 1)"),
    )
    @argument(
        "--history",
        type=int,
        default=None,
        metavar="SAMPLES",
        help=_("samples shown in each history chart (at least 2; default 60)"),
    )
    @line_magic
    def gpu_monitor(self, line: str = "") -> None:
        """Show a live GPU panel below this cell.

        One row per GPU: index and name, a memory bar (used / total GiB; this kernel's limit from
        ``%gpu_limit`` drawn as a red mark), utilization, temperature, power, a history chart of
        memory (blue) and utilization (orange), and the processes on the GPU (user, PID, memory)
        with this kernel's process marked. GPUs not selected by ``%gpu_select`` are dimmed.

        Sampling runs on one background thread shared by all panels of the kernel; cells keep
        running while the panel updates. "Pause" stops a panel; a panel with no view shown ("Clear
        output", its cell deleted) pauses by itself and resumes when a view of it is shown again.
        "Close" or ``%unload_ext jupyter_gpu`` stops it for good (leaving one line of text where it
        was), and the thread ends with the last panel. After a kernel restart an old panel says
        "kernel restarted: run the cell again".

        Examples::

            %gpu_monitor
            %gpu_monitor --interval 0.5 --history 120

        From Python: ``from jupyter_gpu import GPUMonitor; panel = GPUMonitor(interval_s=0.5)``,
        then ``display(panel)`` and later ``panel.close()``.
        """
        args = parse(self.gpu_monitor, line)
        interval_s = self.monitor_interval_s if args.interval is None else args.interval
        history = self.monitor_history if args.history is None else args.history
        if not interval_s >= 0.1:
            raise UsageError(_("--interval must be at least 0.1 seconds, not {value}").format(value=f"{interval_s:g}"))
        if history < 2:
            raise UsageError(_("--history must be at least 2 samples, not {value}").format(value=history))
        from IPython.display import display

        from ..panel.widget import GPUMonitor

        self.panels = [panel for panel in self.panels if not panel.closed]
        panel = GPUMonitor(interval_s=interval_s, history=history)
        self.panels.append(panel)
        display(panel)

    # -- %gpu_watch

    @magic_arguments()
    @argument(
        "state",
        nargs="?",
        choices=("on", "off"),
        help=_("on: report after every cell; off: stop reporting; nothing: say which"),
    )
    @argument(
        "--interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help=_("seconds between samples while a cell runs (default 0.2)"),
    )
    @line_magic
    def gpu_watch(self, line: str = "") -> None:
        """Report this kernel's GPU memory after every cell: ``%gpu_watch on`` / ``%gpu_watch off``.

        After each cell one line shows the GPU memory NVML attributes to this kernel's process:
        its change over the cell and its peak during the cell (summed over GPUs), for example::

            GPU memory of this kernel (PID 4711): +2.0 GiB over the cell (1.0 GiB → 3.0 GiB),
            peak 3.5 GiB during the cell on GPU 0 · torch: +1.8 GiB in use, peak 2.1 GiB

        NVML counts what the driver gave the process (the framework's reserved pool plus the CUDA
        context). Where PyTorch, JAX or TensorFlow is already initialized in the kernel, the
        framework's own count of memory in use is added; measuring never imports or initializes a
        framework. The peak is sampled in the background every ``--interval`` seconds (and read
        from the framework's peak counter where it has one): a shorter spike can escape NVML.

        Inside containers NVML may report host PIDs, and the kernel's own process is then not found:
        the line says "none held" while the framework figures still show.

        A restart made by jupyter_gpu (``%gpu_restart``, "Restart kernel and apply") carries the
        watch over to the new kernel with the GPU plan.
        """
        args = parse(self.gpu_watch, line)
        interval_s = self.watch_interval_s if args.interval is None else args.interval
        if not interval_s > 0:
            raise UsageError(_("--interval must be positive, not {value}").format(value=f"{interval_s:g}"))
        if args.state is None:
            print(_("%gpu_watch is on") if self.watch is not None else _("%gpu_watch is off"))
        elif args.state == "on":
            if self.watch is not None:
                self.watch.interval_s = interval_s
            else:
                from .watch import CellWatch  # imported on first use: loading the extension stays cheap

                self.watch = CellWatch(interval_s=interval_s)
                on_cell_event(self._shell(), "pre_run_cell", self._pre_run_cell, "%gpu_watch")
                on_cell_event(self._shell(), "post_run_cell", self._post_run_cell, "%gpu_watch")
            print(
                _("%gpu_watch on: one line of GPU memory after each cell (sampled every {interval} s)").format(
                    interval=f"{interval_s:g}"
                )
            )
        else:
            self.stop_watching()
            print(_("%gpu_watch off"))

    def carried_lines(self) -> list[str]:
        """The magic lines that give a fresh kernel this kernel's ``%gpu_watch`` (none while it is
        off): what a restart made by jupyter_gpu carries over with the plan
        (:func:`jupyter_gpu.kernel.restart_offer.carried_lines`)."""
        if self.watch is None:
            return []
        interval_s = self.watch.interval_s
        return ["%gpu_watch on" if interval_s == self.watch_interval_s else f"%gpu_watch on --interval {interval_s:g}"]

    def stop_watching(self) -> None:
        """Remove the event hooks and stop any measurement under way."""
        watch, self.watch = self.watch, None
        if watch is None:
            return
        watch.cancel()
        for event, callback in (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell)):
            off_cell_event(self._shell(), event, callback)

    def _pre_run_cell(self, info: Any = None) -> None:
        if self.watch is not None:
            self.watch.start()

    def _post_run_cell(self, result: Any = None) -> None:
        # The cell that turned the watch on never started a measurement: nothing to report.
        if self.watch is None or not self.watch.running:
            return
        print(self.watch.stop().line())

    # -- teardown

    def close(self) -> None:
        """Stop watching and close this kernel's panels."""
        self.stop_watching()
        for panel in self.panels:
            panel.close()
        self.panels.clear()


_MAGIC_NAMES = ("gpu_monitor", "gpu_watch")


def register(ipython: Any) -> None:
    """Register ``%gpu_monitor`` and ``%gpu_watch`` in ``ipython`` (again: no effect)."""
    if "MonitorMagics" in ipython.magics_manager.registry:
        return
    ipython.register_magics(MonitorMagics(shell=ipython))


def unregister(ipython: Any) -> None:
    """Undo :func:`register`: remove the event hooks, close the panels, remove the magics."""
    magics = ipython.magics_manager.registry.pop("MonitorMagics", None)
    if magics is None:
        return
    magics.close()
    widget = sys.modules.get("jupyter_gpu.panel.widget")  # never import ipywidgets just to unload
    if widget is not None:
        widget.close_all()
    line_magics = ipython.magics_manager.magics["line"]
    for name in _MAGIC_NAMES:
        line_magics.pop(name, None)
