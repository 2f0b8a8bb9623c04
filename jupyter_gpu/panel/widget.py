"""The live GPU panel for notebooks: ``GPUMonitor`` (``%gpu_monitor``), ipywidgets over NVML.

A grid of GPU cards (one column in a narrow output area, as many as fit in a wide one, for 1 to 16
GPUs and more). Each card: index and name, a memory bar (used/total GiB as text, the kernel's memory
limit drawn as a red mark), utilization, temperature and power in three aligned columns, a history
chart of memory (filled area) and utilization (line) on a fixed 0-100 % scale with the current
values in its legend, and the processes on that GPU (user, PID, memory) with this kernel's own
process marked. A GPU in MIG mode lists its slices under it instead (profile, MIG UUID, a memory
bar, the slice's processes, "this kernel" marked) and says "n/a on MIG" for the utilization NVML
does not measure there. GPUs outside the kernel's selection (``%gpu_select``) are
dimmed. The panel says so when NVML is unavailable (and why), when a GPU is lost, and when the GPUs
are simulated (``JUPYTER_GPU_SIMULATE``).

Sampling happens on one background thread per kernel (a :class:`jupyter_gpu.sources.sampler.Sampler`
shared by every panel), never on the kernel's main thread, so cells keep running while panels
update. The thread runs at the shortest interval any open panel asks for and stops when every panel
is closed or paused, or when the kernel exits.

Everything rendered from data as HTML (GPU and process names, users, error texts) is escaped, with
bidi control characters neutralised and long texts cut with "…" (the full text in the tooltip;
:func:`jupyter_gpu.core.text.display_text`). Updates are cheap: only widget values that changed are sent
to the front end.

Only standard ipywidgets (``HTML``, ``Label``, ``ToggleButton``, ``Box``/``GridBox`` with
``Layout``) and inline CSS with no JupyterLab-only dependency: the panel renders in JupyterLab,
Notebook 7, VS Code and any other front end with the ipywidgets 8 manager. Colours are JupyterLab's
theme variables with neutral fallbacks, so the light and dark themes of each of them work.
"""

from __future__ import annotations

import atexit
import html
import operator
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import ipywidgets as widgets

from ..core.snapshot import GpuInfo, GpuProcess, Snapshot
from ..core.text import display_text
from ..core.units import format_bytes
from ..sources.sampler import Sampler

MIN_INTERVAL_S = 0.1
SAMPLER_NAME = "jupyter-gpu-monitor"

#: The panel's CSS (``style.css`` beside this module), in a ``<style>`` element the panel carries.
_STYLE = f"<style>{resources.files('jupyter_gpu.panel').joinpath('style.css').read_text(encoding='utf-8')}</style>"

# -- the one sampler shared by every panel of this kernel

_lock = threading.RLock()
_sampler: Sampler | None = None
_panels: weakref.WeakSet[GPUMonitor] = weakref.WeakSet()


def shared_sampler() -> Sampler:
    """The kernel's one panel sampler (created on first use; its thread runs only while needed)."""
    global _sampler
    with _lock:
        if _sampler is None:
            # linger_s=0: the thread lives exactly as long as some panel listens.
            _sampler = Sampler(interval_s=1.0, linger_s=0.0, name=SAMPLER_NAME)
        return _sampler


def open_panels() -> list[GPUMonitor]:
    """The panels of this kernel that are not closed."""
    with _lock:
        return [panel for panel in _panels if not panel.closed]


def close_all() -> None:
    """Close every panel of this kernel; the sampler thread then stops."""
    for panel in open_panels():
        panel.close()


def _shutdown() -> None:
    """At interpreter (kernel) exit: close the panels and stop the sampler thread."""
    global _sampler
    close_all()
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


def memory_bar_html(used: int, total: int, limit: int | None) -> str:
    """A horizontal bar as wide as its cell: the used fraction filled, the kernel's limit as a red mark."""
    fraction = min(max(used / total, 0.0), 1.0) if total > 0 else 0.0
    color = "#2e7d32" if fraction < 0.75 else "#ef6c00" if fraction < 0.95 else "#c62828"
    mark = ""
    if limit is not None and total > 0:
        at = min(max(limit / total, 0.0), 1.0) * 100
        title = html.escape(f"this kernel's limit: {format_bytes(limit)}", quote=True)
        mark = (
            f'<div class="jupyter-gpu-limit" title="{title}" style="position:absolute;left:{at:.1f}%;'
            'top:-3px;bottom:-3px;width:2px;background:#d50000"></div>'
        )
    return (
        f'<div class="jupyter-gpu-bar" role="meter" aria-valuemin="0" aria-valuemax="100" '
        f'aria-valuenow="{fraction * 100:.0f}" aria-label="memory"><div class="jupyter-gpu-fill" '
        f'style="width:{fraction * 100:.1f}%;background:{color}"></div>{mark}</div>'
    )


def _percent_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


class Sparkline:
    """A bounded history of memory and utilization (percent) drawn as an inline SVG chart.

    A fixed 0-100 % scale (labelled 100/50/0 % beside the plot, dashed grid lines), memory as a
    filled area and utilization as a line (told apart by shape, not only by colour; the colours are
    those of ``style.css``, the presentation attributes only a fallback where it is not loaded), and
    a legend with the current values. Each sample's
    y coordinate is formatted once, when it arrives, and the x coordinates once per chart, so
    redrawing costs a string join, not a float formatting per point.
    """

    def __init__(self, capacity: int, width: int = 300, height: int = 40) -> None:
        self.capacity = capacity
        self.width = width
        self.height = height
        self.memory: deque[float] = deque(maxlen=capacity)
        self.utilization: deque[float | None] = deque(maxlen=capacity)
        self._memory_y: deque[str] = deque(maxlen=capacity)
        self._utilization_y: deque[str | None] = deque(maxlen=capacity)
        step = width / max(capacity - 1, 1)
        self._xs = [f"{i * step:.1f}," for i in range(capacity)]  # right-aligned: newest at the right
        grid = "".join(
            f'<line x1="0" x2="{width}" y1="{y}" y2="{y}" stroke="rgba(128,128,128,0.45)" '
            'stroke-dasharray="2 3" vector-effect="non-scaling-stroke"/>'
            for y in (0.5, height / 2, height - 0.5)
        )
        self._head = (
            '<div class="jupyter-gpu-plot"><div class="jupyter-gpu-axis" aria-hidden="true">'
            "<span>100 %</span><span>50 %</span><span>0 %</span></div>"
            f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
            f'aria-label="memory (area) and utilization (line), 0 to 100 %">{grid}'
        )

    def _y(self, percent: float) -> str:
        percent = min(max(percent, 0.0), 100.0)
        return f"{self.height - percent / 100 * self.height:.1f}"

    def append(self, memory_percent: float, utilization_percent: float | None) -> None:
        self.memory.append(memory_percent)
        self.utilization.append(utilization_percent)
        self._memory_y.append(self._y(memory_percent))
        self._utilization_y.append(None if utilization_percent is None else self._y(utilization_percent))

    def svg(self, memory_now: float | None = None, utilization_now: float | None = None) -> str:
        """The chart and its legend (current values: the arguments, else the newest samples)."""
        xs = self._xs[self.capacity - len(self._memory_y) :]
        parts = [self._head]
        if len(self._memory_y) >= 2:
            line = " ".join(map(operator.add, xs, self._memory_y))
            area = f"{xs[0]}{self.height} {line} {xs[-1]}{self.height}"
            parts.append(
                '<polygon class="jupyter-gpu-chart-memory" fill="#388e3c" fill-opacity="0.25" stroke="#388e3c" '
                f'stroke-width="1" vector-effect="non-scaling-stroke" points="{area}"/>'
            )
        util = [x + y for x, y in zip(xs, self._utilization_y, strict=True) if y is not None]
        if len(util) >= 2:
            parts.append(
                '<polyline class="jupyter-gpu-chart-utilization" fill="none" stroke="#1976d2" stroke-width="2" '
                'stroke-linejoin="round" '
                f'vector-effect="non-scaling-stroke" points="{" ".join(util)}"/>'
            )
        if memory_now is None and self.memory:
            memory_now = self.memory[-1]
        if utilization_now is None and self.utilization:
            utilization_now = self.utilization[-1]
        parts.append(
            '</svg></div><div class="jupyter-gpu-legend">'
            f'<span><span class="jupyter-gpu-key-line"></span>util <b>{_percent_text(utilization_now)}</b></span>'
            f'<span><span class="jupyter-gpu-key-area"></span>mem <b>{_percent_text(memory_now)}</b></span>'
            f"<span>last {len(self._memory_y)} samples</span></div>"
        )
        return "".join(parts)


def _cell(value: object, max_chars: int, missing: str = "?") -> str:
    """A table cell's escaped text, cut with "…", the full (neutralised) text as its tooltip."""
    short = html.escape(display_text(value, max_chars, missing))
    full = html.escape(display_text(value, 1000, missing), quote=True)
    return f'<td title="{full}">{short}</td>'


def slices_html(gpu: GpuInfo, own_pid: int) -> str:
    """A GPU in MIG mode: each slice (profile, MIG UUID, memory bar and text, its processes), escaped."""
    if not gpu.slices:
        return '<div class="jupyter-gpu-procs"><i>MIG mode, no slices</i></div>'
    parts = []
    for slice_ in gpu.slices:
        label = (
            f'<div class="jupyter-gpu-slice-title"><b>{gpu.index}:{slice_.index}</b> MIG '
            f"{html.escape(display_text(slice_.profile, 24))} "
            f'<span title="{html.escape(display_text(slice_.uuid, 200), quote=True)}">'
            f"{html.escape(display_text(slice_.uuid, 48))}</span> · util n/a on MIG</div>"
        )
        if slice_.error:
            body = f'<span class="jupyter-gpu-error">⚠ {html.escape(display_text(slice_.error, 300))}</span>'
        else:
            body = (
                memory_bar_html(slice_.memory_used, slice_.memory_total, None)
                + f"<div>{format_bytes(slice_.memory_used)} / {format_bytes(slice_.memory_total)}</div>"
                + _process_table(slice_.processes, own_pid)
            )
        parts.append(f'<div class="jupyter-gpu-slice">{label}{body}</div>')
    return "".join(parts)


def processes_html(gpu: GpuInfo, own_pid: int) -> str:
    """The processes on ``gpu`` as an escaped table; this kernel's process is marked (by slice in MIG mode)."""
    if gpu.mig_mode and not gpu.error:
        return slices_html(gpu, own_pid)
    return _process_table(gpu.processes, own_pid)


def _process_table(processes: Iterable[GpuProcess], own_pid: int) -> str:
    processes = tuple(processes)
    if not processes:
        return '<div class="jupyter-gpu-procs"><i>no processes</i></div>'
    rows = []
    for process in sorted(processes, key=lambda p: -(p.memory or 0)):
        own = process.pid == own_pid
        mark = ' <span class="jupyter-gpu-own">◀ this kernel</span>' if own else ""
        css = ' class="jupyter-gpu-own"' if own else ""
        name = _cell(process.name, 80)
        rows.append(
            f'<tr{css}>{_cell(process.user, 40)}<td class="jupyter-gpu-num">{process.pid}</td>'
            f'<td class="jupyter-gpu-num">{format_bytes(process.memory)}</td>{name[:-5]}{mark}</td></tr>'
        )
    return (
        '<div class="jupyter-gpu-procs"><table><colgroup><col style="width:28%"><col style="width:10ch">'
        '<col style="width:10ch"><col></colgroup><tr><th>user</th><th class="jupyter-gpu-num">PID</th>'
        f'<th class="jupyter-gpu-num">memory</th><th>process</th></tr>{"".join(rows)}</table></div>'
    )


def _close_tree(widget: widgets.Widget) -> None:
    """Close ``widget`` and every widget below it (their comms, and their front-end views)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


# -- one GPU


class GpuRow:
    """The widgets of one GPU row and its bounded history (``history`` samples)."""

    def __init__(self, uuid: str, history: int) -> None:
        self.uuid = uuid
        self.sparkline = Sparkline(history)
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
        self.dimmed = False
        self.lost = False
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
        ):
            widget.add_class(f"jupyter-gpu-{area}-cell" if area != "stats" else "jupyter-gpu-stats")
        self.box = widgets.Box(
            [self.title, self.memory_bar, self.memory_text, stats, self.history_chart, self.processes]
        )
        self.box.add_class("jupyter-gpu-row")

    def update(self, gpu: GpuInfo, selected: tuple[int, ...] | None, limit: int | None, own_pid: int) -> None:
        """Show ``gpu``; append to the history; set only the values that changed."""
        lost = gpu.error is not None
        dimmed = selected is not None and gpu.index not in selected
        name = html.escape(display_text(gpu.name or None, 60, "unknown GPU"))
        full_name = html.escape(display_text(gpu.name or None, 1000, "unknown GPU"), quote=True)
        notes = []
        if lost:
            notes.append(f'<span class="jupyter-gpu-error">⚠ {html.escape(display_text(gpu.error, 300))}</span>')
        if dimmed:
            notes.append("<span>not selected in this kernel</span>")
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
            _set(self.memory_text, "value", "memory: unavailable (GPU lost)")
            for label in (self.utilization, self.temperature, self.power):
                _set(label, "value", "")
        else:
            total = gpu.memory_total
            used = gpu.memory_used
            memory_text = f"{format_bytes(used)} / {format_bytes(total)}"
            if limit is not None:
                memory_text += f" (limit {format_bytes(limit)})"
            _set(self.memory_bar, "value", memory_bar_html(used, total, limit))
            _set(self.memory_text, "value", memory_text)
            if gpu.utilization is not None:
                utilization = f"util {gpu.utilization} %"
            else:
                utilization = "util n/a on MIG" if gpu.mig_mode else "util —"
            _set(self.utilization, "value", utilization)
            _set(self.temperature, "value", "" if gpu.temperature is None else f"{gpu.temperature} °C")
            power = "" if gpu.power is None else f"{gpu.power:.0f} W"
            if power and gpu.power_limit:
                power += f" / {gpu.power_limit:.0f} W"
            _set(self.power, "value", power)
            self.sparkline.append(
                100.0 * used / total if total else 0.0, None if gpu.utilization is None else float(gpu.utilization)
            )
        if lost:
            _set(self.history_chart, "value", self.sparkline.svg())
        else:
            share = 100.0 * gpu.memory_used / gpu.memory_total if gpu.memory_total else None
            _set(self.history_chart, "value", self.sparkline.svg(share, gpu.utilization))
        _set(self.processes, "value", processes_html(gpu, own_pid))

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

    ``close()`` stops the panel for good; when every panel of the kernel is closed (or paused) the
    sampling thread stops. :meth:`update` applies a snapshot directly (tests, benchmarks).
    """

    def __init__(self, interval_s: float = 1.0, history: int = 60, start: bool = True, **kwargs: Any) -> None:
        if not isinstance(interval_s, (int, float)) or interval_s < MIN_INTERVAL_S:
            raise ValueError(f"interval_s must be at least {MIN_INTERVAL_S} s, not {interval_s!r}")
        if not isinstance(history, int) or isinstance(history, bool) or history < 2:
            raise ValueError(f"history must be an integer of at least 2 samples, not {history!r}")
        self.status = widgets.HTML()
        self.pause_button = widgets.ToggleButton(
            value=False,
            description="Pause",
            icon="pause",
            tooltip="Pause or resume sampling",
            layout=widgets.Layout(width="90px"),
        )
        self.warnings = widgets.HTML()
        self.warnings.layout.display = "none"
        self.rows_box = widgets.Box()
        self.rows_box.add_class("jupyter-gpu-grid")
        header = widgets.HBox([self.pause_button, self.status])
        super().__init__([widgets.HTML(_STYLE), header, self.warnings, self.rows_box], **kwargs)
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
        self.last_snapshot: Snapshot | None = None
        self.pause_button.observe(self._on_pause_button, names="value")
        with _lock:
            _panels.add(self)
        sampler = shared_sampler()
        if sampler.latest is not None:
            self.update(sampler.latest)
        else:
            _set(self.status, "value", "<i>waiting for the first sample…</i>")
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
        with _lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        _set(self.pause_button, "value", True)
        _set(self.pause_button, "description", "Resume")
        _set(self.pause_button, "icon", "play")
        _retune_sampler()

    def resume(self) -> None:
        """Update again at ``interval_s``."""
        if self.closed:
            raise RuntimeError("this GPU panel is closed; create a new one")
        with _lock:
            if self._unsubscribe is None:
                sampler = shared_sampler()
                self._unsubscribe = sampler.subscribe(self._on_snapshot)
        _retune_sampler()
        _set(self.pause_button, "value", False)
        _set(self.pause_button, "description", "Pause")
        _set(self.pause_button, "icon", "pause")

    def _on_pause_button(self, change: dict[str, Any]) -> None:
        if self.closed:
            return
        if change["new"] and self.active:
            self.pause()
        elif not change["new"] and not self.active:
            self.resume()

    def close(self) -> None:
        """Stop for good: unsubscribe from the sampler and close every widget of the panel."""
        if getattr(self, "closed", True):  # closed already, or refused by __init__
            return
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
        # On the sampler thread. A panel slower than the shared interval skips samples.
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
            parts.append('<span style="background:#fff3cd;color:#3e2f00;padding:0 4px">simulated GPUs</span>')
        if not snapshot.nvml_available:
            reason = html.escape(display_text(snapshot.error or None, 500, "unknown reason"))
            parts.append(f'<span class="jupyter-gpu-error">NVML unavailable: {reason}</span>')
        else:
            count = len(snapshot.gpus)
            lost = sum(gpu.error is not None for gpu in snapshot.gpus)
            text = f"{count} GPU{'s' if count != 1 else ''}"
            if lost:
                text += f', <span class="jupyter-gpu-error">{lost} lost</span>'
            if count == 0:
                text = "no GPUs found"
            parts.append(text)
            if snapshot.driver_version:
                parts.append(f"driver {html.escape(display_text(snapshot.driver_version, 40))}")
        stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp))
        parts.append(f"every {self._interval_s:g} s · {stamp}")
        _set(self.status, "value", '<span style="line-height:28px">' + " · ".join(parts) + "</span>")

    def _show_warnings(self, snapshot: Snapshot) -> None:
        """The snapshot's ``warnings`` (e.g. a rejected simulated scenario) as escaped text lines."""
        warnings = getattr(snapshot, "warnings", None)
        if warnings is None:
            warnings = snapshot.extra.get("warnings") if isinstance(snapshot.extra, dict) else None
        lines = [w for w in warnings if isinstance(w, str)][:20] if isinstance(warnings, (list, tuple)) else []
        value = "".join(f"<div>⚠ {html.escape(display_text(line, 300))}</div>" for line in lines)
        if value:
            value = f'<div class="jupyter-gpu-warnings" role="status">{value}</div>'
        _set(self.warnings, "value", value)
        _set(self.warnings.layout, "display", None if value else "none")

    def _show_rows(
        self, gpus: Iterable[GpuInfo], selected: tuple[int, ...] | None, limit: Callable[[int], int | None]
    ) -> None:
        gpus = list(gpus)
        order = tuple(gpu.uuid or f"index-{gpu.index}" for gpu in gpus)
        if order != self._row_order:
            for gone in set(self._rows) - set(order):
                self._rows.pop(gone).close()
            for key in order:
                if key not in self._rows:
                    self._rows[key] = GpuRow(key, self._history)
            self._row_order = order
            self.rows_box.children = tuple(self._rows[key].box for key in order)
        for key, gpu in zip(order, gpus, strict=True):
            self._rows[key].update(gpu, selected, limit(gpu.index), self._own_pid)
