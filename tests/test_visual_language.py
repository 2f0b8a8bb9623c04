"""One visual language: utilization and memory have the same colours in the panel, the sidebar and
the hub console (the theme's brand colour for utilization, its accent colour for memory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
