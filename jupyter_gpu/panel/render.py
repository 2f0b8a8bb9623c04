"""The GPU panel's HTML, rendered from data without any widget: the memory bar, the history chart,
the MIG slices and the process table, and the panel's CSS (``style.css``).

Everything rendered from data (GPU and process names, users, error texts) is escaped, with hidden
characters neutralised and long texts cut with "…" (the full text in the tooltip;
:func:`jupyter_gpu.core.text.display_text`). :mod:`jupyter_gpu.panel.widget` puts these strings in
ipywidgets ``HTML`` values. Pure: no ipywidgets, no NVML.
"""

from __future__ import annotations

import html
import operator
from collections import deque
from collections.abc import Iterable
from importlib import resources

from ..core.availability import FREE_MEMORY_BYTES as RULE_FREE_MEMORY_BYTES
from ..core.availability import Viewer
from ..core.availability import label as availability_label
from ..core.i18n import N_, _
from ..core.messages import shown
from ..core.snapshot import GpuInfo, GpuProcess
from ..core.text import display_text
from ..core.units import UNKNOWN, format_bytes, format_duration

#: The panel's CSS (``style.css`` beside this module), in a ``<style>`` element the panel carries.
STYLE = f"<style>{resources.files('jupyter_gpu.panel').joinpath('style.css').read_text(encoding='utf-8')}</style>"

#: What a panel whose kernel restarted says (``style.css``'s ``::before`` content: the browser shows
#: it with no kernel behind the panel, so the text is put in the CSS when the panel is made).
KERNEL_RESTARTED = N_("GPU panel: kernel restarted: run the cell again")


def style() -> str:
    """:data:`STYLE` with :data:`KERNEL_RESTARTED` in the user's language (a CSS string: quotes,
    backslashes and ``<`` escaped, so no translation can end the string or the element)."""
    translated = _(KERNEL_RESTARTED)
    if translated == KERNEL_RESTARTED:
        return STYLE
    escaped = "".join(f"\\{ord(char):x} " if char in '"\\<>\n' else char for char in translated)
    return STYLE.replace(f'"{KERNEL_RESTARTED}"', f'"{escaped}"')


#: Memory's colour, as in the chart and the sidebar (the theme's accent colour; JupyterLab's light value
#: where no theme is loaded): one colour language (tests/test_visual_language.py).
MEMORY_COLOUR = "var(--jp-accent-color1, #388e3c)"


def memory_bar_html(used: int, total: int, limit: int | None) -> str:
    """A horizontal bar as wide as its cell: the used fraction filled in memory's colour (the chart's
    and the sidebar's), the kernel's limit as a red mark."""
    fraction = min(max(used / total, 0.0), 1.0) if total > 0 else 0.0
    mark = ""
    if limit is not None and total > 0:
        at = min(max(limit / total, 0.0), 1.0) * 100
        title = html.escape(_("this kernel's limit: {size}").format(size=format_bytes(limit)), quote=True)
        mark = (
            f'<div class="jupyter-gpu-limit" title="{title}" style="position:absolute;left:{at:.1f}%;'
            'top:-3px;bottom:-3px;width:2px;background:#d50000"></div>'
        )
    label = html.escape(_("memory"), quote=True)
    return (
        f'<div class="jupyter-gpu-bar" role="meter" aria-valuemin="0" aria-valuemax="100" '
        f'aria-valuenow="{fraction * 100:.0f}" aria-label="{label}">'
        '<div class="jupyter-gpu-fill" '
        f'style="width:{fraction * 100:.1f}%;background:{MEMORY_COLOUR}"></div>{mark}</div>'
    )


def percent_text(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.0f} %"


class Sparkline:
    """A bounded history of memory and utilization (percent) drawn as an inline SVG chart.

    A fixed 0-100 % scale (labelled 100/50/0 % beside the plot, dashed grid lines), memory as a
    filled area and utilization as a line (told apart by shape, not only by colour; the colours are
    those of ``style.css``, the presentation attributes only a fallback where it is not loaded), and
    a legend with the current values. Each sample's
    y coordinate is formatted once, when it arrives, and the x coordinates once per chart, so
    redrawing costs a string join, not a float formatting per point.
    """

    def __init__(self, capacity: int, width: int = 300, height: int = 40, interval_s: float = 1.0) -> None:
        self.capacity = capacity
        self.interval_s = interval_s  # between samples: the legend says the window in time, as the sidebar
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
        label = html.escape(_("memory (area) and utilization (line), 0 to 100 %"), quote=True)
        self._head = (
            '<div class="jupyter-gpu-plot"><div class="jupyter-gpu-axis" aria-hidden="true">'
            "<span>100 %</span><span>50 %</span><span>0 %</span></div>"
            f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
            f'aria-label="{label}">{grid}'
        )

    def _y(self, percent: float) -> str:
        percent = min(max(percent, 0.0), 100.0)
        return f"{self.height - percent / 100 * self.height:.1f}"

    def append(self, memory_percent: float, utilization_percent: float | None) -> None:
        self.memory.append(memory_percent)
        self.utilization.append(utilization_percent)
        self._memory_y.append(self._y(memory_percent))
        self._utilization_y.append(None if utilization_percent is None else self._y(utilization_percent))

    def svg(self, memory_now: float | None = None, utilization_now: float | None = None, unknown: bool = False) -> str:
        """The chart and its legend (current values: the arguments, else the newest samples; ``unknown``:
        "—" for both, a GPU that cannot be read, never "mem 0 %")."""
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
        if unknown:
            memory_now = utilization_now = None
        else:
            if memory_now is None and self.memory:
                memory_now = self.memory[-1]
            if utilization_now is None and self.utilization:
                utilization_now = self.utilization[-1]
        parts.append(
            '</svg></div><div class="jupyter-gpu-legend">'
            '<span><span class="jupyter-gpu-key-line"></span>'
            + html.escape(_("util"))
            + f" <b>{percent_text(utilization_now)}</b></span>"
            '<span><span class="jupyter-gpu-key-area"></span>'
            + html.escape(_("mem"))
            + f" <b>{percent_text(memory_now)}</b></span>"
            + "<span>"
            + html.escape(_("last {duration}").format(duration=format_duration(len(self._memory_y) * self.interval_s)))
            + "</span></div>"
        )
        return "".join(parts)


def _cell(value: object, max_chars: int, missing: str = UNKNOWN) -> str:
    """A table cell's escaped text, cut with "…", the full (neutralised) text as its tooltip."""
    short = html.escape(display_text(value, max_chars, missing))
    full = html.escape(display_text(value, 1000, missing), quote=True)
    return f'<td title="{full}">{short}</td>'


def slices_html(gpu: GpuInfo, own_pid: int) -> str:
    """A GPU in MIG mode: each slice (profile, MIG UUID, memory bar and text, its processes), escaped."""
    if not gpu.slices:
        no_slices = html.escape(_("MIG mode, no slices"))
        return f'<div class="jupyter-gpu-procs"><i>{no_slices}</i></div>'
    parts = []
    no_utilization = html.escape(_("util n/a on MIG"))
    for slice_ in gpu.slices:
        label = (
            f'<div class="jupyter-gpu-slice-title"><b>{gpu.index}:{slice_.index}</b> MIG '
            f"{html.escape(display_text(slice_.profile, 24))} "
            f'<span title="{html.escape(display_text(slice_.uuid, 200), quote=True)}">'
            f"{html.escape(display_text(slice_.uuid, 48))}</span> · {no_utilization}</div>"
        )
        if slice_.error:
            body = f'<span class="jupyter-gpu-error">⚠ {html.escape(display_text(shown(slice_.error), 300))}</span>'
        else:
            body = (
                memory_bar_html(slice_.memory_used, slice_.memory_total, None)
                + f"<div>{format_bytes(slice_.memory_used)} / {format_bytes(slice_.memory_total)}</div>"
                + _process_table(slice_.processes, own_pid)
            )
        parts.append(f'<div class="jupyter-gpu-slice">{label}{body}</div>')
    return "".join(parts)


def processes_html(gpu: GpuInfo, own_pid: int, viewer: Viewer | None = None) -> str:
    """The processes on ``gpu`` as an escaped table; this kernel's process is marked (by slice in MIG
    mode), this user's runs named from their claims (``viewer``: ``yours: train.py (jupyter-gpu run), 2 h``)."""
    if gpu.mig_mode and not gpu.error:
        return slices_html(gpu, own_pid)
    return _process_table(gpu.processes, own_pid, viewer)


#: Memory a GPU may show as used and still be free (the driver's, a display server's): the one rule's
#: (core/availability.py; the sidebar's ``FREE_MEMORY_BYTES`` in labextension/src/overview.ts).
FREE_MEMORY_BYTES = RULE_FREE_MEMORY_BYTES

#: What the panel and the sidebar say of a GPU with nothing on it (the same words in both).
NO_PROCESSES = N_("No processes")


def _process_table(processes: Iterable[GpuProcess], own_pid: int, viewer: Viewer | None = None) -> str:
    """The processes as a table with the sidebar's words: user, program, memory (and the PID). Other
    users' program names are withheld unless an admin shows them: a column of nothing but "—" is left
    out (one "—" where only some are missing), and this kernel's row is marked."""
    processes = tuple(processes)
    if not processes:
        nothing = html.escape(_(NO_PROCESSES))
        return f'<div class="jupyter-gpu-procs"><i>{nothing}</i></div>'
    runs = {p.pid: run for p in processes if viewer is not None and (run := viewer.run(p.pid)) is not None}
    named = any(process.name for process in processes) or bool(runs)
    rows = []
    this_kernel = html.escape(_("this kernel"))
    for process in sorted(processes, key=lambda p: -(p.memory or 0)):
        own = process.pid == own_pid
        mark = f' <span class="jupyter-gpu-own">◀ {this_kernel}</span>' if own else ""
        if process.pid in runs:
            mark = f' <span class="jupyter-gpu-own">◀ {html.escape(runs[process.pid])}</span>'
            own = True
        css = ' class="jupyter-gpu-own"' if own else ""
        user = _cell(process.user, 40)
        if not named:
            user = user[:-5] + mark + "</td>"
        program = (_cell(process.name or None, 80)[:-5] + mark + "</td>") if named else ""
        rows.append(
            f'<tr{css}>{user}{program}<td class="jupyter-gpu-num">{format_bytes(process.memory)}</td>'
            f'<td class="jupyter-gpu-num">{process.pid}</td></tr>'
        )
    columns = '<col style="width:28%"><col>' if named else "<col>"
    user_head, program_head, memory_head = (html.escape(word) for word in (_("user"), _("program"), _("memory")))
    heads = f"<th>{user_head}</th><th>{program_head}</th>" if named else f"<th>{user_head}</th>"
    return (
        f'<div class="jupyter-gpu-procs"><table><colgroup>{columns}<col style="width:10ch">'
        f'<col style="width:10ch"></colgroup><tr>{heads}<th class="jupyter-gpu-num">{memory_head}</th>'
        f'<th class="jupyter-gpu-num">PID</th></tr>{"".join(rows)}</table></div>'
    )


def who_text(gpu: GpuInfo, own_pid: int, viewer: Viewer | None = None) -> str:
    """Who is on ``gpu``, in a few words, as the sidebar's compact line says it: ``this kernel``
    first, then other users once each; with nobody on it, the one rule's words
    (:mod:`jupyter_gpu.core.availability`: ``free``, ``reserved by you``, ``reserved by another
    user``, ``in use`` for memory no process seen holds; ``viewer`` brings the host's claims);
    ``nobody`` for a GPU in MIG mode (its slices say it); ``—`` when it cannot be read. Escaped."""
    if gpu.error:
        return UNKNOWN
    processes = [*gpu.processes, *(p for s in gpu.slices for p in s.processes)]
    own = any(p.pid == own_pid for p in processes)
    users = sorted({display_text(p.user, 40, f"pid {p.pid}") for p in processes if p.pid != own_pid})
    names = ([_("this kernel")] if own else []) + users
    if names:
        return html.escape(", ".join(names))
    if gpu.mig_mode:
        return html.escape(_("nobody"))
    return html.escape(availability_label((viewer if viewer is not None else Viewer()).state(gpu)))
