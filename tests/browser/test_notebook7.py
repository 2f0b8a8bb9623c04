"""Notebook 7 (``jupyter notebook``, built on JupyterLab components) gets the GPU sidebar and the
status item too: the same extension, in its left side panel and (no status bar there) its top area.
"""

from __future__ import annotations

from typing import Any

import pytest
from panel_cells import PANEL_CELL, STATE_CELL, clear_output_close_and_delete, kernel_state, run_cell
from snapshot_routes import show_an_idle_kernel_about_to_be_culled
from support import wait_until

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
    page.wait_for_function("() => document.querySelector('.jp-GpuStatus').textContent === '1/2 GPUs in use'")
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


def test_gpu_panel_pauses_without_a_view_closes_and_says_restarted_in_notebook_7(notebook_app, page, artifacts):
    notebook_app.write_notebook("panel7.ipynb", [PANEL_CELL, STATE_CELL])
    notebook_app.open(page, path="notebooks/panel7.ipynb")
    page.locator(".jp-Cell .jp-InputArea-editor").first.wait_for()
    wait_until(
        lambda: any(
            s["path"] == "panel7.ipynb" and s["kernel"]["execution_state"] == "idle"
            for s in notebook_app.api("GET", "api/sessions")
        ),
        timeout_s=90,
        what="the notebook's kernel",
    )
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    panel = page.locator(".jupyter-gpu-monitor").first
    panel.wait_for(timeout=60_000)
    # Its kernel counts as idle although the panel keeps updating: widget updates are not cells
    (session,) = [s for s in notebook_app.api("GET", "api/sessions") if s["path"] == "panel7.ipynb"]
    stamp = panel.locator(".widget-hbox").first.inner_text()
    wait_until(
        lambda: any(
            k["kernel_id"] == session["kernel"]["id"] and (k["idle_s"] or 0) >= 3
            for k in notebook_app.snapshot()["kernels"]
        ),
        timeout_s=30,
        what="the kernel to count as idle",
    )
    assert panel.locator(".widget-hbox").first.inner_text() != stamp  # the panel updated meanwhile
    clear_output_close_and_delete(page)
    # A panel in the one cell left, then a kernel restart: the old panel says so in one line.
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 0; }")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:insert-cell-above'); }")
    cell = "window.jupyterapp.shell.currentWidget.content.activeCell"
    page.evaluate(f"() => {{ {cell}.model.sharedModel.setSource({PANEL_CELL!r}); }}")
    run_cell(page, 0)
    panel.locator(".jupyter-gpu-row").first.wait_for(timeout=60_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:restart-kernel'); }")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    panel.and_(page.locator(".jupyter-widgets-disconnected")).wait_for(timeout=60_000)
    assert (
        panel.evaluate("n => getComputedStyle(n, '::before').content")
        == '"GPU panel: kernel restarted: run the cell again"'
    )
    assert panel.locator(".jupyter-gpu-row").first.is_hidden()
    page.screenshot(path=str(artifacts / "notebook7-panel-restarted.png"))
    assert not own_errors(page)
    # The restarted kernel runs cells again, with no panel of its own yet
    wait_until(lambda: "panels [] False" in kernel_state(page), timeout_s=60, what="the restarted kernel")
    notebook_app.shutdown_all_kernels()


def test_the_status_item_is_readable_at_800_px_and_leaves_the_top_bar_alone(notebook_app, page, artifacts):
    notebook_app.write_notebook("a_rather_long_notebook_name_for_training.ipynb", ["1"])
    page.set_viewport_size({"width": 800, "height": 600})
    show_an_idle_kernel_about_to_be_culled(page, notebook="gpu7.ipynb")
    try:
        notebook_app.open(page, path="notebooks/a_rather_long_notebook_name_for_training.ipynb")
        item = page.locator("#menu-panel .jp-GpuStatus")  # right of the menu bar, where there is room
        wait_until(lambda: "shut down in" in item.inner_text(), what="the countdown in the status item")
        # One line with the short text (the long one used to wrap down to "GPU"), all of it in view;
        # the tooltip has everything.
        assert item.inner_text() == "shut down in 9 min"
        title = item.get_attribute("title")
        assert "your kernels hold 3 GiB" in title and "an idle kernel is shut down in 9 min" in title
        assert item.evaluate("n => n.scrollWidth <= n.clientWidth + 1")  # (rounding)
        # Neither the top bar (logo, title) nor the menu bar (menus, trust indicator) wraps or is
        # covered: each keeps one row inside its wrapper.
        page.wait_for_timeout(500)
        for bar in ("top", "menu"):
            wrapper = page.locator(f"#{bar}-panel-wrapper").bounding_box()
            assert page.locator(f"#{bar}-panel").bounding_box()["height"] <= wrapper["height"] + 0.5, bar
        wrapper = page.locator("#top-panel-wrapper").bounding_box()
        logo = page.locator("#jp-NotebookLogo").bounding_box()
        assert logo["y"] >= wrapper["y"] - 0.5 and logo["y"] + logo["height"] <= wrapper["y"] + wrapper["height"] + 0.5
        menus = page.locator("#menu-panel .lm-MenuBar").bounding_box()
        box = item.bounding_box()
        assert box["x"] >= menus["x"] + menus["width"] - 0.5  # not over the menus
        menu_bar = page.locator("#menu-panel-wrapper").bounding_box()
        assert box["y"] >= menu_bar["y"] and box["y"] + box["height"] <= menu_bar["y"] + menu_bar["height"] + 0.5
        page.screenshot(path=str(artifacts / "notebook7-800px.png"))
        assert not own_errors(page)
    finally:
        page.unroute_all(behavior="ignoreErrors")


def test_the_sidebar_is_restored_on_the_next_page(notebook_app, page):
    notebook_app.write_notebook("gpu7.ipynb", ["print('hello')"])
    notebook_app.open(page, path="notebooks/gpu7.ipynb")
    sidebar = page.locator("#jupyter-gpu-sidebar")
    page.locator(".jp-GpuStatus").click()
    sidebar.locator(".jp-GpuCard").first.wait_for()
    # Another page of the same server (the tree), then the notebook again: open without a click.
    for path in ("tree", "notebooks/gpu7.ipynb"):
        notebook_app.open(page, path=path)
        sidebar.locator(".jp-GpuCard").first.wait_for()
    # Closed by the user: stays closed on the next page.
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    sidebar.wait_for(state="hidden")
    notebook_app.open(page, path="notebooks/gpu7.ipynb")
    page.locator(".jp-GpuStatus").wait_for()
    page.wait_for_timeout(1000)  # what a restore would take
    assert not sidebar.is_visible()
    assert not own_errors(page)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_notebook_7_is_readable_in_both_themes(notebook_app, page, contrast, theme, dark):
    show_an_idle_kernel_about_to_be_culled(page, notebook="gpu7.ipynb")
    try:
        notebook_app.open(page, path="tree")
        page.locator(".jp-GpuStatus").click()
        sidebar = page.locator("#jupyter-gpu-sidebar")
        sidebar.locator(".jp-GpuProc.jp-mod-idle").wait_for()
        theme(page, dark)
        contrast(
            page,
            "#jupyter-gpu-sidebar",
            ".jp-GpuStatus",
            must_include=("jp-GpuProc-idleBadge", "jp-GpuProc-countdown", "jp-GpuStatus", "jp-GpuSidebar-free"),
        )
        assert not own_errors(page)
    finally:
        page.unroute_all(behavior="ignoreErrors")
        theme(page, False)
