"""The live GPU panel for notebooks: ``GPUMonitor`` (``%gpu_monitor``), ipywidgets over NVML.

A grid of GPU cards (one column in a narrow output area, as many as fit in a wide one, for 1 to 16
GPUs and more). Each card: index and name, a memory bar (used/total GiB as text, the kernel's memory
limit drawn as a red mark), temperature and power, a history chart of memory (filled area) and
utilization (line) on a fixed 0-100 % scale with the current values in its legend (utilization is
said there, once, as in the sidebar), and the processes on that GPU (user, program, memory, PID: the
sidebar's words; a program column of nothing but withheld names is left out) with this kernel's own
process marked. Above :data:`COMPACT_ABOVE_GPUS` GPUs the panel is compact, as the sidebar: each
card is its name, memory bar and text, readings, and who is on it. What cannot be read shows as "—"
(a lost GPU's memory and legend). A GPU in MIG mode lists its slices under it instead (profile, MIG
UUID, a memory bar, the slice's processes, "this kernel" marked) and says "n/a on MIG" for the
utilization NVML does not measure there. GPUs outside the kernel's selection (``%gpu_select``) are
marked (a dashed border and "not selected in this kernel"; their text keeps its full contrast). The
panel says so when NVML is unavailable (and why), when a GPU is lost, and when the GPUs are simulated
(``JUPYTER_GPU_SIMULATE``).

Sampling happens on one background thread per kernel (a :class:`jupyter_gpu.sources.sampler.Sampler`
shared by every panel), never on the kernel's main thread, so cells keep running while panels
update. It takes the host's sample (:mod:`jupyter_gpu.sources.host`): the snapshot of the Jupyter
server that started the kernel, else the hub service's, else NVML read here. The thread runs at the shortest
interval any open panel asks for and stops when every panel is closed or paused, or when the kernel exits.

A panel samples only while a view of it is shown: it asks the front end to count its views
(ipywidgets' ``_view_count``: each view adds one when it is displayed and takes one away when it is
removed, by "Clear output", a deleted cell or a closed notebook). When the last view goes, the panel
pauses ("paused: no view"); when a view comes back, it resumes (unless the user had paused it).
Closing a notebook or a browser tab is not reported to the kernel, but its websocket closes: when
the sample comes from the server that started this kernel, it says how many websockets are connected
to the kernel (``kernel_connections``), and with none for :data:`UNCONNECTED_GRACE_S` seconds no view
can be shown, so the panel pauses the same way (:class:`Unconnected`). A front end that loads the
panel again (notebook reopened, page reloaded) restarts the count (see :meth:`GPUMonitor.get_state`),
and its views resume the panel.
"Close" stops the panel for good and replaces every output of it by one line of text.

The HTML inside the widgets (bar, chart, slices, process tables) and the CSS come from
:mod:`jupyter_gpu.panel.render`, which escapes and neutralises everything rendered from data.
Updates are cheap: only widget values that changed are sent to the front end.

Only standard ipywidgets (``HTML``, ``Label``, ``ToggleButton``, ``Box``/``GridBox`` with
``Layout``) and inline CSS with no JupyterLab-only dependency: the panel renders in JupyterLab,
Notebook 7, VS Code and any other front end with the ipywidgets 8 manager. Colours are JupyterLab's
theme variables with neutral fallbacks, so the light and dark themes of each of them work.
"""

from __future__ import annotations

import atexit
import html
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets as widgets

from ..core.availability import Viewer
from ..core.i18n import N_, _, ngettext
from ..core.messages import shown
from ..core.snapshot import GpuInfo, Snapshot
from ..core.text import display_text
from ..core.units import format_bytes
from ..sources.sampler import Sampler
from .render import Sparkline, memory_bar_html, percent_text, processes_html, style, who_text

MIN_INTERVAL_S = 0.1
COMPACT_ABOVE_GPUS = 4
"""Above this many GPUs the panel is compact, as the sidebar (labextension/src/overview.ts): one short
card per GPU (name, memory bar and text, readings, who is on it), without chart and process table."""
SAMPLER_NAME = "jupyter-gpu-monitor"
CLOSED_TEXT = N_("GPU panel closed; run %gpu_monitor for a new one.")
NO_VIEW_TEXT = N_("paused: no view of this panel is shown; it resumes when one is")
UNCONNECTED_GRACE_S = 10.0
"""How long nobody may be connected to the kernel before its panels pause: a page reload or a
short network drop reconnects within seconds, so those do not pause a panel someone is watching."""


class Unconnected:
    """The rule "nobody has been connected to this kernel for ``grace_s`` seconds", fed with each
    sample's time and its ``kernel_connections`` (None when the sample does not say: never pauses)."""

    def __init__(self, grace_s: float = UNCONNECTED_GRACE_S) -> None:
        self.grace_s = grace_s
        self._since: float | None = None  # time of the first sample of this stretch with none connected

    def seen(self, timestamp: float, connections: Any) -> bool:
        """Take one sample's figures; True once none has been connected for ``grace_s`` seconds."""
        if not isinstance(connections, int) or isinstance(connections, bool) or connections != 0:
            self._since = None
            return False
        if self._since is None or timestamp < self._since:
            self._since = timestamp
        return timestamp - self._since >= self.grace_s

    def reset(self) -> None:
        """Forget the stretch (the panel resumed: count again from its next sample)."""
        self._since = None


# -- the one sampler shared by every panel of this kernel

_lock = threading.RLock()
_sampler: Sampler | None = None
_panels: weakref.WeakSet[GPUMonitor] = weakref.WeakSet()


def shared_sampler() -> Sampler:
    """The kernel's one panel sampler (created on first use; its thread runs only while needed)."""
    global _sampler
    with _lock:
        if _sampler is None:
            # linger_s=0: the thread lives exactly as long as some panel listens. It takes the host's
            # sample (this user's Jupyter server, the hub service, else NVML here): N panels on a
            # host make no more NVML calls than the server's one sampler.
            from ..sources.host import default_host_sample

            _sampler = Sampler(interval_s=1.0, take=default_host_sample(), linger_s=0.0, name=SAMPLER_NAME)
        return _sampler


def open_panels() -> list[GPUMonitor]:
    """The panels of this kernel that are not closed."""
    with _lock:
        return [panel for panel in _panels if not panel.closed]


def close_all(note: bool = True) -> None:
    """Close every panel of this kernel; the sampler thread then stops (``note``: leave the line
    saying so where each panel was shown)."""
    for panel in open_panels():
        panel.close(note=note)


def _shutdown() -> None:
    """At interpreter (kernel) exit: close the panels and stop the sampler thread."""
    global _sampler
    close_all(note=False)  # the kernel's output channel is going away
    with _lock:
        sampler, _sampler = _sampler, None
    if sampler is not None:
        sampler.close(timeout=2.0)


atexit.register(_shutdown)


def _retune_sampler() -> None:
    """Run the shared sampler at the shortest interval an active panel asks for."""
    with _lock:
        intervals = [panel.interval_s for panel in _panels if panel.active]
        if intervals and _sampler is not None and _sampler.interval_s != min(intervals):
            _sampler.interval_s = min(intervals)


# -- the kernel's plan (selection, limits), when the plan module exists


def _plan_view() -> tuple[tuple[int, ...] | None, Callable[[int], int | None]]:
    """(selected NVML indices or None, limit-of-index function) from ``jupyter_gpu.plan``."""
    try:
        from ..plan import current_plan
    except ImportError:
        return None, lambda index: None
    try:
        plan = current_plan()
        selected = plan.selected_indices
        selected = None if selected is None else tuple(selected)
    except Exception:  # a broken plan must not break the panel
        return None, lambda index: None

    def limit(index: int) -> int | None:
        try:
            return plan.memory_limit_bytes(index)
        except Exception:
            return None

    return selected, limit


# -- formatting


def _set(widget: widgets.Widget, name: str, value: Any) -> bool:
    """Set a trait only if it changed (each change is a message to the front end)."""
    if getattr(widget, name) != value:
        setattr(widget, name, value)
        return True
    return False


def _close_tree(widget: widgets.Widget) -> None:
    """Close ``widget`` and every widget below it (their comms, and their front-end views)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


# -- one GPU


class GpuRow:
    """The widgets of one GPU row and its bounded history (``history`` samples)."""

    def __init__(self, uuid: str, history: int, interval_s: float = 1.0) -> None:
        self.uuid = uuid
        self.sparkline = Sparkline(history, interval_s=interval_s)
        self.memory_history = self.sparkline.memory  # percent of total, oldest first
        self.utilization_history = self.sparkline.utilization
        self.title = widgets.HTML()
        self.memory_bar = widgets.HTML()
        self.memory_text = widgets.Label()
        self.utilization = widgets.Label()
        self.temperature = widgets.Label()
        self.power = widgets.Label()
        self.history_chart = widgets.HTML()
        self.processes = widgets.HTML()
        self.who = widgets.HTML()  # shown in the compact panel only (style.css), instead of the table
        self.dimmed = False
        self.lost = False
        for label, css in ((self.utilization, "util"), (self.temperature, "temp"), (self.power, "power")):
            label.add_class(f"jupyter-gpu-{css}")
        stats = widgets.Box([self.utilization, self.temperature, self.power])
        # Each widget sits in a named area of the card's CSS grid (see style.css): title on top, bar and
        # memory text side by side, the three readings in equal columns, chart, processes.
        for widget, area in (
            (self.title, "title"),
            (self.memory_bar, "bar"),
            (self.memory_text, "memory"),
            (stats, "stats"),
            (self.history_chart, "chart"),
            (self.processes, "procs"),
            (self.who, "who"),
        ):
            widget.add_class(f"jupyter-gpu-{area}-cell" if area != "stats" else "jupyter-gpu-stats")
        self.box = widgets.Box(
            [self.title, self.memory_bar, self.memory_text, stats, self.history_chart, self.processes, self.who]
        )
        self.box.add_class("jupyter-gpu-row")

    def update(
        self,
        gpu: GpuInfo,
        selected: tuple[int, ...] | None,
        limit: int | None,
        own_pid: int,
        viewer: Viewer | None = None,
    ) -> None:
        """Show ``gpu``; append to the history; set only the values that changed."""
        lost = gpu.error is not None
        dimmed = selected is not None and gpu.index not in selected
        unknown = _("unknown GPU")
        name = html.escape(display_text(gpu.name or None, 60, unknown))
        full_name = html.escape(display_text(gpu.name or None, 1000, unknown), quote=True)
        notes = []
        if lost:
            notes.append(f'<span class="jupyter-gpu-error">⚠ {html.escape(display_text(shown(gpu.error), 300))}</span>')
        if dimmed:
            unselected = html.escape(_("not selected in this kernel"))
            notes.append(f'<span class="jupyter-gpu-unselected">{unselected}</span>')
        note = f'<span class="jupyter-gpu-note">{" · ".join(notes)}</span>' if notes else ""
        title = (
            f'<span class="jupyter-gpu-title" title="GPU {gpu.index} {full_name}"><b>GPU {gpu.index}</b> '
            f"{name}</span>{note}"
        )
        _set(self.title, "value", title)
        self._set_class("jupyter-gpu-dimmed", dimmed, "dimmed")
        self._set_class("jupyter-gpu-lost", lost, "lost")

        if lost:
            self.sparkline.append(0.0, None)
            _set(self.memory_bar, "value", memory_bar_html(0, 0, None))
            _set(self.memory_text, "value", _("memory: — (GPU lost)"))
            for label in (self.utilization, self.temperature, self.power):
                _set(label, "value", "")
        else:
            total = gpu.memory_total
            used = gpu.memory_used
            memory_text = f"{format_bytes(used)} / {format_bytes(total)}"
            if limit is not None:
                memory_text = _("{used} / {total} (limit {limit})").format(
                    used=format_bytes(used), total=format_bytes(total), limit=format_bytes(limit)
                )
            _set(self.memory_bar, "value", memory_bar_html(used, total, limit))
            _set(self.memory_text, "value", memory_text)
            # Utilization is said once per card: in the chart's legend (as in the sidebar), so this
            # label shows only in the compact panel (no chart) and, on MIG, to say why it is missing
            # (style.css; the class "jupyter-gpu-mig" marks that case).
            mig = gpu.mig_mode and gpu.utilization is None
            utilization = (
                _("util n/a on MIG") if mig else _("util {percent}").format(percent=percent_text(gpu.utilization))
            )
            _set(self.utilization, "value", utilization)
            self._set_label_class(self.utilization, "jupyter-gpu-mig", mig)
            _set(self.temperature, "value", "" if gpu.temperature is None else f"{gpu.temperature} °C")
            power = "" if gpu.power is None else f"{gpu.power:.0f} W"
            if power and gpu.power_limit:
                power += f" / {gpu.power_limit:.0f} W"
            _set(self.power, "value", power)
            self.sparkline.append(
                100.0 * used / total if total else 0.0, None if gpu.utilization is None else float(gpu.utilization)
            )
        if lost:
            _set(self.history_chart, "value", self.sparkline.svg(unknown=True))
        else:
            share = 100.0 * gpu.memory_used / gpu.memory_total if gpu.memory_total else None
            _set(self.history_chart, "value", self.sparkline.svg(share, gpu.utilization))
        _set(self.processes, "value", processes_html(gpu, own_pid, viewer))
        who = who_text(gpu, own_pid, viewer)
        on_it = html.escape(_("on it"), quote=True)
        _set(self.who, "value", f'<span class="jupyter-gpu-who" title="{on_it}">{who}</span>')

    @staticmethod
    def _set_label_class(label: widgets.Widget, css: str, on: bool) -> None:
        if on != (css in label._dom_classes):
            (label.add_class if on else label.remove_class)(css)

    def _set_class(self, css: str, on: bool, attribute: str) -> None:
        if getattr(self, attribute) != on:
            setattr(self, attribute, on)
            (self.box.add_class if on else self.box.remove_class)(css)

    def close(self) -> None:
        """Close every widget of the row."""
        _close_tree(self.box)


# -- the panel


class GPUMonitor(widgets.VBox):
    """A live GPU panel: ``display(GPUMonitor())`` or ``%gpu_monitor`` in a notebook.

    Parameters
    ----------
    interval_s:
        Seconds between samples (at least 0.1). Panels of one kernel share one sampler, which runs
        at the shortest interval any open panel asks for; a slower panel skips samples.
    history:
        How many samples the history chart shows (at least 2). History is bounded: memory stays
        flat however long the panel runs.
    start:
        Start updating right away (default). ``False`` leaves the panel paused.

    ``close()`` (the "Close" button) stops the panel for good and leaves one line of text where it
    was shown; when every panel of the kernel is closed or paused the sampling thread stops. A
    panel also pauses while no view of it is shown (see the module's documentation), and resumes
    when one is again. :meth:`update` applies a snapshot directly (tests, benchmarks).
    """

    def __init__(self, interval_s: float = 1.0, history: int = 60, start: bool = True, **kwargs: Any) -> None:
        if not isinstance(interval_s, (int, float)) or interval_s < MIN_INTERVAL_S:
            raise ValueError(
                _("interval_s must be at least {minimum} s, not {value}").format(
                    minimum=MIN_INTERVAL_S, value=repr(interval_s)
                )
            )
        if not isinstance(history, int) or isinstance(history, bool) or history < 2:
            raise ValueError(
                _("history must be an integer of at least 2 samples, not {value}").format(value=repr(history))
            )
        self.status = widgets.HTML()
        self.pause_button = widgets.ToggleButton(
            value=False,
            description=_("Pause"),
            icon="pause",
            tooltip=_("Pause or resume sampling"),
            layout=widgets.Layout(width="90px"),
        )
        self.close_button = widgets.Button(
            description=_("Close"),
            icon="times",
            tooltip=_("Stop this panel for good (run %gpu_monitor for a new one)"),
            layout=widgets.Layout(width="90px"),
        )
        self.warnings = widgets.HTML()
        self.warnings.layout.display = "none"
        self.rows_box = widgets.Box()
        self.rows_box.add_class("jupyter-gpu-grid")
        header = widgets.HBox([self.pause_button, self.close_button, self.status])
        # _view_count=0: the front end counts this panel's views (None would turn that off).
        kwargs.setdefault("_view_count", 0)
        super().__init__([widgets.HTML(style()), header, self.warnings, self.rows_box], **kwargs)
        self.add_class("jupyter-gpu-monitor")
        self._interval_s = float(interval_s)
        self._history = history
        self._rows: dict[str, GpuRow] = {}
        self._own_pid = os.getpid()
        self._unsubscribe: Callable[[], None] | None = None
        self._last_update = float("-inf")
        self._update_lock = threading.Lock()
        self.updates = 0
        self.closed = False
        self.no_view = False  # paused because no view of the panel is shown
        self.unconnected = Unconnected()
        self._display_id: str | None = None
        self.last_snapshot: Snapshot | None = None
        self.pause_button.observe(self._on_pause_button, names="value")
        self.close_button.on_click(lambda _button: self.close())
        self.observe(self._on_view_count, names="_view_count")
        self._comm_opened = True  # from now on, a request for the whole state is a front end loading it
        with _lock:
            _panels.add(self)
        sampler = shared_sampler()
        if sampler.latest is not None:
            self.update(sampler.latest)
        else:
            _set(self.status, "value", "<i>" + html.escape(_("waiting for the first sample…")) + "</i>")
        if start:
            self.resume()
        else:
            self.pause()

    def __repr__(self) -> str:
        return f"GPUMonitor(interval_s={self._interval_s:g}, history={self._history})"

    # -- properties

    @property
    def interval_s(self) -> float:
        """Seconds between this panel's updates."""
        return self._interval_s

    @property
    def history(self) -> int:
        """How many samples the history charts keep."""
        return self._history

    @property
    def active(self) -> bool:
        """True while the panel listens to the sampler (not paused, not closed)."""
        return self._unsubscribe is not None

    @property
    def paused(self) -> bool:
        return not self.active and not self.closed

    @property
    def rows(self) -> list[GpuRow]:
        """The GPU rows shown now, in NVML order."""
        return [self._rows[child_uuid] for child_uuid in self._row_order]

    _row_order: tuple[str, ...] = ()

    # -- control

    def pause(self) -> None:
        """Stop updating (the sampler thread stops if no other panel listens)."""
        self.no_view = False
        self._unsubscribe_sampler()

    def _unsubscribe_sampler(self) -> None:
        with _lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        _set(self.pause_button, "value", True)
        _set(self.pause_button, "description", _("Resume"))
        _set(self.pause_button, "icon", "play")
        _retune_sampler()

    def resume(self) -> None:
        """Update again at ``interval_s``."""
        if self.closed:
            raise RuntimeError(_("this GPU panel is closed; create a new one"))
        self.no_view = False
        self.unconnected.reset()
        with _lock:
            if self._unsubscribe is None:
                sampler = shared_sampler()
                self._unsubscribe = sampler.subscribe(self._on_snapshot)
        _retune_sampler()
        _set(self.pause_button, "value", False)
        _set(self.pause_button, "description", _("Pause"))
        _set(self.pause_button, "icon", "pause")

    def _on_pause_button(self, change: dict[str, Any]) -> None:
        if self.closed:
            return
        if change["new"] and self.active:
            self.pause()
        elif not change["new"] and not self.active:
            self.resume()

    def _on_view_count(self, change: dict[str, Any]) -> None:
        """The front end counted this panel's views: pause when the last one went, resume when one
        came back after that (a panel the user paused stays paused)."""
        if self.closed:
            return
        shown = isinstance(change["new"], int) and change["new"] > 0
        if not shown and self.active:
            self._pause_unseen()
        elif shown and self.no_view:
            self.resume()

    def _pause_unseen(self) -> None:
        """Pause because no view of the panel can be shown; a view shown again resumes it."""
        self._unsubscribe_sampler()
        self.no_view = True
        _set(self.status, "value", "<i>" + html.escape(_(NO_VIEW_TEXT)) + "</i>")

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        """ipywidgets' state of the panel's model. Asked for as a whole after the model was opened,
        a front end is loading the panel again (a notebook opened again, a page reloaded: ipywidgets'
        ``request_state(s)``). The views of a front end that went away were never taken off the
        count, so counting starts again from 0, without pausing: the views coming now add to it."""
        if key is None and getattr(self, "_comm_opened", False) and isinstance(self._view_count, int):
            self._trait_values["_view_count"] = 0  # no change event: no pause; the state sent carries it
        return super().get_state(key, drop_defaults)

    def _ipython_display_(self) -> None:
        """Display the panel under a display id, so that :meth:`close` can replace every output of
        it by one line of text."""
        from IPython.display import display

        if self._display_id is None:
            self._display_id = uuid.uuid4().hex
        display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)

    def close(self, note: bool = True) -> None:
        """Stop for good: unsubscribe from the sampler, close every widget of the panel and (``note``)
        replace the outputs that showed it by one line saying so."""
        if getattr(self, "closed", True):  # closed already, or refused by __init__
            return
        if note and self._display_id is not None:
            try:
                from IPython.display import update_display

                update_display({"text/plain": _(CLOSED_TEXT)}, raw=True, display_id=self._display_id)
            except Exception:  # no kernel output channel (a plain interpreter): nothing to replace
                pass
        self.pause()
        with self._update_lock:  # let an update under way on the sampler thread finish first
            self.closed = True
        with _lock:
            _panels.discard(self)
        for row in self._rows.values():
            row.close()
        self._rows.clear()
        for child in self.children:
            _close_tree(child)
        super().close()

    # -- updates

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        # On the sampler thread. Nobody connected to the kernel for a while: no view can be shown.
        if self.unconnected.seen(snapshot.timestamp, snapshot.extra.get("kernel_connections")):
            if self.active and not self.closed:
                self._pause_unseen()
            return
        # A panel slower than the shared interval skips samples.
        if snapshot.timestamp - self._last_update < self._interval_s * 0.9:
            return
        self.update(snapshot)

    def update(self, snapshot: Snapshot) -> None:
        """Show ``snapshot`` (called by the sampler thread; callable directly)."""
        if self.closed:
            return
        with self._update_lock:
            self._last_update = snapshot.timestamp
            self._show_status(snapshot)
            self._show_warnings(snapshot)
            if snapshot.nvml_available:
                selected, limit = _plan_view()
                self._show_rows(snapshot.gpus, selected, limit)
            else:
                self._show_rows([], None, lambda index: None)
            self.last_snapshot = snapshot
            self.updates += 1  # counted once shown, so a reader of `updates` sees a finished update

    def _show_status(self, snapshot: Snapshot) -> None:
        parts = []
        if snapshot.simulated:
            parts.append(
                '<span style="background:#fff3cd;color:#3e2f00;padding:0 4px">'
                + html.escape(_("simulated GPUs"))
                + "</span>"
            )
        if not snapshot.nvml_available:
            reason = html.escape(display_text(shown(snapshot.error or None), 500, _("unknown reason")))
            unavailable = html.escape(_("NVML unavailable: {reason}")).format(reason=reason)
            parts.append(f'<span class="jupyter-gpu-error">{unavailable}</span>')
        else:
            count = len(snapshot.gpus)
            lost = sum(gpu.error is not None for gpu in snapshot.gpus)
            text = html.escape(ngettext("{count} GPU", "{count} GPUs", count)).format(count=count)
            if lost:
                text = html.escape(_("{gpus}, {lost}")).format(
                    gpus=text,
                    lost='<span class="jupyter-gpu-error">'
                    + html.escape(_("{count} lost")).format(count=lost)
                    + "</span>",
                )
            if count == 0:
                text = html.escape(_("no GPUs found"))
            parts.append(text)
            if snapshot.driver_version:
                parts.append(
                    html.escape(_("driver {version}")).format(
                        version=html.escape(display_text(snapshot.driver_version, 40))
                    )
                )
        source = snapshot.extra.get("source")  # the host sample's (sources/host.py): where it came from
        if isinstance(source, str):
            from ..sources.host import source_label

            said = snapshot.extra.get("source_note")
            note = html.escape(display_text(shown(said) if isinstance(said, str) else source, 500), quote=True)
            label = display_text(source_label(source), 40)
            parts.append(f'<span title="{note}">{html.escape(label)}</span>')
        stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp))
        parts.append(html.escape(_("every {interval} s · {time}")).format(interval=f"{self._interval_s:g}", time=stamp))
        _set(self.status, "value", '<span style="line-height:28px">' + " · ".join(parts) + "</span>")

    def _show_warnings(self, snapshot: Snapshot) -> None:
        """The snapshot's ``warnings`` (e.g. a rejected simulated scenario) as escaped text lines."""
        warnings = getattr(snapshot, "warnings", None)
        if warnings is None:
            warnings = snapshot.extra.get("warnings") if isinstance(snapshot.extra, dict) else None
        lines = [w for w in warnings if isinstance(w, str)][:20] if isinstance(warnings, (list, tuple)) else []
        value = "".join(f"<div>⚠ {html.escape(display_text(shown(line), 300))}</div>" for line in lines)
        if value:
            value = f'<div class="jupyter-gpu-warnings" role="status">{value}</div>'
        _set(self.warnings, "value", value)
        _set(self.warnings.layout, "display", None if value else "none")

    def _show_rows(
        self, gpus: Iterable[GpuInfo], selected: tuple[int, ...] | None, limit: Callable[[int], int | None]
    ) -> None:
        gpus = list(gpus)
        order = tuple(gpu.uuid or f"index-{gpu.index}" for gpu in gpus)
        for key in order:
            if key not in self._rows:
                self._rows[key] = GpuRow(key, self._history, self._interval_s)
        # Every row is filled before a new one is shown: a card never appears as a blank row.
        view = _viewer(gpus, self._own_pid) if gpus else None
        for key, gpu in zip(order, gpus, strict=True):
            self._rows[key].update(gpu, selected, limit(gpu.index), self._own_pid, view)
        if order != self._row_order:
            self._row_order = order
            self.rows_box.children = tuple(self._rows[key].box for key in order)
            for gone in set(self._rows) - set(order):
                self._rows.pop(gone).close()
            compact = len(order) > COMPACT_ABOVE_GPUS
            if compact != ("jupyter-gpu-compact" in self.rows_box._dom_classes):
                (self.rows_box.add_class if compact else self.rows_box.remove_class)("jupyter-gpu-compact")


def _viewer(gpus: list[GpuInfo], own_pid: int) -> Viewer | None:
    """This user's view of the host's claims (reserved GPUs, this user's runs; nothing of them where
    claims are off). Never raises: the panel shows the GPUs without it (None)."""
    try:
        from ..sources.claims import viewer
        from ..sources.processes import current_user

        return viewer(gpus, current_user(), own_pids={own_pid})
    except Exception:
        return None
