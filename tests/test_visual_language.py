"""One visual language: utilization and memory have the same colours in the panel, the sidebar and
the hub console (the theme's brand colour for utilization, its accent colour for memory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from jupyter_gpu.core import i18n
from jupyter_gpu.panel import render

ROOT = Path(__file__).resolve().parent.parent
PANEL = ROOT / "jupyter_gpu" / "panel" / "style.css"
SIDEBAR = ROOT / "labextension" / "style" / "base.css"
CONSOLE = ROOT / "jupyter_gpu" / "hub" / "static" / "console.css"
UTILIZATION = "#1976d2"  # JupyterLab's light-theme --jp-brand-color1
MEMORY = "#388e3c"  # JupyterLab's light-theme --jp-accent-color1


def _rule(css: str, selector: str) -> str:
    match = re.search(re.escape(selector) + r"\s*\{([^}]*)\}", css)
    assert match, f"no rule for {selector}"
    return match.group(1)


def test_the_panel_carries_its_style_file() -> None:
    assert f"<style>{PANEL.read_text(encoding='utf-8')}</style>" == render.STYLE


def test_utilization_is_the_brand_colour_and_memory_the_accent_colour_everywhere() -> None:
    panel, sidebar, console = (path.read_text(encoding="utf-8") for path in (PANEL, SIDEBAR, CONSOLE))
    assert f"var(--jp-brand-color1, {UTILIZATION})" in _rule(panel, ".jupyter-gpu-chart-utilization")
    assert f"var(--jp-brand-color1, {UTILIZATION})" in _rule(panel, ".jupyter-gpu-key-line")
    assert f"var(--jp-accent-color1, {MEMORY})" in _rule(panel, ".jupyter-gpu-chart-memory")
    assert f"var(--jp-accent-color1, {MEMORY})" in _rule(panel, ".jupyter-gpu-key-area")
    assert "var(--jp-brand-color1)" in _rule(sidebar, ".jp-GpuHistory-utilization")
    assert "var(--jp-accent-color1)" in _rule(sidebar, ".jp-GpuHistory-memory")
    assert "var(--jg-chart-util)" in _rule(console, ".jg-gpu .util")
    assert "var(--jg-chart-mem)" in _rule(console, ".jg-gpu .mem")
    light = _rule(console, ":root")
    assert f"--jg-chart-util: {UTILIZATION};" in light and f"--jg-chart-mem: {MEMORY};" in light


def test_the_panels_chart_falls_back_to_the_same_colours_without_its_style() -> None:
    chart = render.Sparkline(4)
    for memory, utilization in ((10.0, 20.0), (30.0, 40.0)):
        chart.append(memory, utilization)
    svg = chart.svg()
    assert f'class="jupyter-gpu-chart-memory" fill="{MEMORY}"' in svg
    assert f'class="jupyter-gpu-chart-utilization" fill="none" stroke="{UTILIZATION}"' in svg


def test_the_panels_html_renders_without_ipywidgets() -> None:
    """panel/render.py is pure: the HTML of the panel can be produced (and tested) without widgets."""
    code = "import sys, jupyter_gpu.panel.render; print('ipywidgets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "False"


# -- one vocabulary and one colour language for the panel and the sidebar (issue 31, item 8)

SIDEBAR_SRC = ROOT / "labextension" / "src"


def test_memory_is_the_accent_colour_in_the_bars_too() -> None:
    """The panel's bar was green-orange-red and the sidebar's grey-blue; memory is the accent colour."""
    sidebar = SIDEBAR.read_text(encoding="utf-8")
    bar = render.memory_bar_html(60, 100, None)
    assert f"background:var(--jp-accent-color1, {MEMORY})" in bar
    for traffic_light in ("#2e7d32", "#ef6c00", "#c62828"):
        assert traffic_light not in render.memory_bar_html(99, 100, None)
    assert "var(--jp-accent-color1)" in _rule(sidebar, ".jp-GpuMemory-own")
    assert "var(--jp-accent-color1)" in _rule(sidebar, ".jp-GpuMemory-others")
    assert "var(--jp-accent-color1)" in _rule(sidebar, ".jp-GpuLine-used")


def test_the_same_words_for_the_same_things() -> None:
    card = (SIDEBAR_SRC / "components" / "gpuCard.ts").read_text(encoding="utf-8")
    chart = (SIDEBAR_SRC / "components" / "historyChart.ts").read_text(encoding="utf-8")
    assert f"'{render.NO_PROCESSES}'" in card  # "No processes", not "no processes" in one of them
    assert "trans.__('last %1', window)" in chart and "formatDuration(windowS)" in chart  # "last 15 min"
    sparkline = render.Sparkline(10, interval_s=6.0)
    for _ in range(10):
        sparkline.append(1.0, 1.0)
    assert "<span>last 1 min</span>" in sparkline.svg()  # the same words: format_duration = formatDuration
    # ... and the same words in Chinese: the sidebar's and the panel's catalogs agree
    with i18n.language_forced("zh_CN"):
        chinese_panel = i18n._("last {duration}")
    lab = i18n.lab_catalog("zh_CN")
    assert lab["last %1"][0].replace("%1", "{duration}") == chinese_panel != "last {duration}"
    assert lab[render.NO_PROCESSES][0] == i18n.translator("zh_CN").gettext(render.NO_PROCESSES)


def test_the_panels_text_keeps_its_contrast_when_a_card_is_not_selected() -> None:
    """Opacity on a card's text measured 3.06-3.32:1 in the dark theme: only bar and chart fade."""
    panel = PANEL.read_text(encoding="utf-8")
    assert "opacity" not in _rule(panel, ".jupyter-gpu-dimmed")
    assert "opacity" not in _rule(panel, ".jupyter-gpu-note")
    assert "opacity" not in _rule(panel, ".jupyter-gpu-axis")


def test_the_monitor_notebook_names_the_colours_the_chart_draws() -> None:
    """The example said "memory blue, utilization orange" while the chart drew other colours."""
    import json

    notebook = json.loads((ROOT / "example_notebooks" / "monitor.ipynb").read_text(encoding="utf-8"))
    intro = "".join(notebook["cells"][0]["source"]).replace("\n", " ")
    # #1976d2 (brand: utilization) is a blue, #388e3c (accent: memory) a green: the colours asserted above.
    assert (UTILIZATION, MEMORY) == ("#1976d2", "#388e3c")
    assert "utilization a blue line" in intro and "memory a green filled area" in intro
    assert "orange" not in intro and "memory blue" not in intro


def test_utilization_is_said_once_per_card_in_the_panel() -> None:
    """Shown in the legend; the readings' label only where there is no chart (compact) or on MIG."""
    panel = PANEL.read_text(encoding="utf-8")
    hidden = ".jupyter-gpu-grid:not(.jupyter-gpu-compact) .jupyter-gpu-stats > .jupyter-gpu-util:not(.jupyter-gpu-mig)"
    assert "display: none" in _rule(panel, hidden)
