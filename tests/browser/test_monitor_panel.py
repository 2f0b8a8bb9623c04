"""The notebook panel (``%gpu_monitor``) rendered by ipywidgets in a real JupyterLab, headless Chromium.

Uses the ``lab`` / ``page`` fixtures of ``tests/browser/conftest.py`` (three simulated A100s, another
user's process on GPU 0; the scenario file is rewritten while the panel runs).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from support import wait_until

pytestmark = pytest.mark.browser

NOTEBOOK = "gpu_monitor_panel.ipynb"
EVIL_NAME = '<img src=x onerror="window.__jupyterGpuXss=1">'


def test_panel_renders_updates_and_escapes(lab: Any, page: Any, artifacts: Any, docs_screenshot: Any) -> None:
    lab.scenario.update(lambda s: s["gpus"][2].__setitem__(
        "processes", [{"pid": 4_000_002, "memory_mib": 1024, "user": "mallory", "name": EVIL_NAME}]))
    lab.write_notebook(NOTEBOOK, [
        "import os\n%load_ext jupyter_gpu\n%gpu_monitor --interval 0.3 --history 30\nprint('PID', os.getpid())",
    ])
    lab.open(page, path=f"lab/tree/{NOTEBOOK}")
    page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").first.wait_for()
    # Opened by URL before the kernel specs have loaded, JupyterLab may ask which kernel to start;
    # the dialog can come late, so answer it until the notebook's kernel exists and is idle.
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select")

    def kernel_idle() -> bool:
        if select.is_visible():
            select.click()
        sessions = [s for s in lab.api("GET", "api/sessions") if s["path"] == NOTEBOOK]
        return bool(sessions) and sessions[0]["kernel"]["execution_state"] == "idle"

    wait_until(kernel_idle, timeout_s=90, what="the notebook's kernel")
    page.wait_for_timeout(500)
    if select.is_visible():
        select.click()
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")

    panel = page.locator(".jp-NotebookPanel .jupyter-gpu-monitor").first
    panel.wait_for(timeout=60_000)
    rows = panel.locator(".jupyter-gpu-row")
    wait_until(lambda: rows.count() == 3, what="three GPU rows")
    assert "simulated GPUs" in panel.inner_text()
    assert re.search(r"GPU 0\s+NVIDIA A100-SXM4-80GB", rows.nth(0).inner_text())
    assert "20.0 / 80.0 GiB" in rows.nth(0).inner_text()
    assert "alice" in rows.nth(0).inner_text()

    # Escaping: the process name shows as text; no <img> was created, its handler never ran.
    procs = rows.nth(2).locator(".jupyter-gpu-procs")
    assert EVIL_NAME in procs.inner_text()
    assert panel.locator("img").count() == 0
    assert page.evaluate("window.__jupyterGpuXss") is None

    # Live: the kernel's own process appears on GPU 1 while the panel runs, and is marked.
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']",
                          has_text="PID").first
    output.wait_for(timeout=30_000)
    pid = int(re.search(r"PID (\d+)", output.inner_text()).group(1))

    def busy(s: dict[str, Any]) -> None:
        s["gpus"][1]["utilization"] = 55
        s["gpus"][1]["processes"] = [{"pid": pid, "memory_mib": 40960}]

    lab.scenario.update(busy)
    wait_until(lambda: "util 55 %" in rows.nth(1).inner_text(), what="the panel to update")
    assert "40.0 / 80.0 GiB" in rows.nth(1).inner_text()
    assert rows.nth(1).locator(".jupyter-gpu-own").first.is_visible()
    assert "this kernel" in rows.nth(1).inner_text()
    assert rows.nth(1).locator("svg polyline").count() >= 1  # the history chart draws
    page.wait_for_timeout(1500)  # a few more history samples for the screenshot
    panel.screenshot(path=str(artifacts / "monitor-panel.png"))
    page.screenshot(path=str(artifacts / "monitor-panel-page.png"))
    docs_screenshot(panel, "monitor-panel.png")  # refreshed only with JUPYTER_GPU_UPDATE_DOCS=1

    # Pause stops updates in the browser.
    panel.get_by_role("button", name="Pause").click()
    wait_until(lambda: panel.get_by_role("button", name="Resume").count() == 1, what="Resume button")
    assert not page.errors
    lab.shutdown_all_kernels()
