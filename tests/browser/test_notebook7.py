"""Notebook 7 (``jupyter notebook``, built on JupyterLab components) gets the GPU sidebar and the
status item too: the same extension, in its left side panel and (no status bar there) its top area.
"""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

pytest.importorskip("notebook", reason="Notebook 7 is not installed (pip install notebook)")


@pytest.fixture(scope="module")
def notebook_app(lab_factory: Any) -> Any:
    scenario = simulate.plausible_gpus(2)
    scenario["gpus"][0]["processes"] = [{"pid": 4_000_001, "memory_mib": 20480, "user": "alice", "name": "python"}]
    scenario["gpus"][0].update(utilization=87)
    return lab_factory(scenario, name="notebook7", app="notebook")


def own_errors(page: Any) -> list[str]:
    # Notebook 7.6 itself logs a settings error on this headless set-up; only ours count here.
    return [error for error in page.errors if "jupyter-gpu" in error or "jupyter_gpu" in error]


@pytest.mark.parametrize("path", ["tree", "notebooks/gpu7.ipynb"])
def test_sidebar_and_status_item_in_notebook_7(notebook_app, page, artifacts, docs_screenshot, path):
    notebook_app.write_notebook("gpu7.ipynb", ["print('hello')"])
    notebook_app.open(page, path=path)
    assert page.evaluate("window.jupyterapp.name") == "Jupyter Notebook"
    item = page.locator(".jp-GpuStatus")
    item.wait_for()
    page.wait_for_function("() => document.querySelector('.jp-GpuStatus').textContent === 'GPU 1/2'")
    assert "1 of 2 GPUs in use" in item.get_attribute("title")
    item.click()  # opens the left side panel on the GPU monitor
    sidebar = page.locator("#jupyter-gpu-sidebar")
    sidebar.wait_for(state="visible")
    cards = sidebar.locator(".jp-GpuCard")
    cards.first.wait_for()
    assert cards.count() == 2
    assert sidebar.locator('.jp-GpuCard[data-gpu-index="0"] .jp-GpuProc-user').inner_text() == "alice"
    # The panel fits Notebook's side panel: the refresh button is not cut off.
    panel_box = sidebar.bounding_box()
    refresh = sidebar.locator(".jp-GpuSidebar-refresh").bounding_box()
    assert refresh["x"] + refresh["width"] <= panel_box["x"] + panel_box["width"] + 0.5
    name = path.split("/")[0]
    page.screenshot(path=str(artifacts / f"notebook7-{name}.png"))
    if name == "tree":
        docs_screenshot(page, "sidebar-notebook7.png")
    # It is listed where Notebook lists side panels: View > Left Sidebar > Show GPU monitor.
    page.get_by_role("menuitem", name="View").click()
    page.locator(".lm-Menu .lm-Menu-item", has_text="Left Sidebar").hover()
    page.locator(".lm-Menu .lm-Menu-item", has_text="GPU monitor").first.wait_for()
    page.keyboard.press("Escape")
    assert not own_errors(page)
