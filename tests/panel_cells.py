"""Driving a notebook that shows a GPU panel in a real browser (JupyterLab and Notebook 7): its
cells, running one, reading the kernel's panel state, and the Clear output / Close / delete walk
the browser tests of both front ends share."""

from __future__ import annotations

from typing import Any

from support import wait_until


def run_panel(lab: Any, page: Any, notebook: str, code: str, *more_cells: str) -> Any:
    """Open ``notebook`` (a cell of ``code``, then ``more_cells``) in the lab, run it, return the
    panel's locator."""
    lab.write_notebook(notebook, [code, *more_cells])
    lab.open(page, path=f"lab/tree/{notebook}")
    page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").first.wait_for()
    # Opened by URL before the kernel specs have loaded, JupyterLab may ask which kernel to start;
    # the dialog can come late, so answer it until the notebook's kernel exists and is idle.
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select")

    def kernel_idle() -> bool:
        if select.is_visible():
            select.click()
        sessions = [s for s in lab.api("GET", "api/sessions") if s["path"] == notebook]
        return bool(sessions) and sessions[0]["kernel"]["execution_state"] == "idle"

    wait_until(kernel_idle, timeout_s=90, what="the notebook's kernel")
    page.wait_for_timeout(500)
    if select.is_visible():
        select.click()
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    panel = page.locator(".jp-NotebookPanel .jupyter-gpu-monitor").first
    panel.wait_for(timeout=60_000)
    return panel


def open_notebook(app: Any, page: Any, path: str) -> Any:
    """Open the notebook ``path`` and wait until its kernel is idle; its cells."""
    app.open(page, path=f"lab/tree/{path}" if app.app == "jupyterlab" else f"notebooks/{path}")
    cells = page.locator(".jp-Notebook .jp-Cell")
    cells.first.locator(".jp-InputArea-editor").wait_for(timeout=60_000)
    wait_until(
        lambda: any(
            s["path"] == path and s["kernel"]["execution_state"] == "idle" for s in app.api("GET", "api/sessions")
        ),
        timeout_s=60,
        what="the notebook's kernel idle",
    )
    page.wait_for_timeout(1000)  # the page connects to the kernel it was told of
    return cells


PANEL_CELL = "%load_ext jupyter_gpu\n%gpu_monitor --interval 0.3"
STATE_CELL = (
    "from jupyter_gpu.panel import widget\n"
    "import time\n"
    "print('panels', sorted((p._view_count, p.active) for p in widget.open_panels()), widget.shared_sampler().running,"
    " 'at', time.monotonic_ns())"
)


def run_cell(page: Any, index: int) -> None:
    """Make cell ``index`` of the open notebook the active one and run it (JupyterLab and Notebook 7)."""
    page.evaluate(f"() => {{ window.jupyterapp.shell.currentWidget.content.activeCellIndex = {index}; }}")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-cell'); }")


def kernel_state(page: Any, cell: int = 1) -> str:
    """Run the state cell and return its printed line, once its new output is there."""
    output = page.locator(".jp-Cell").nth(cell).locator(".jp-OutputArea")
    before = output.inner_text() if output.count() else ""
    run_cell(page, cell)
    wait_until(lambda: "panels" in output.inner_text() and output.inner_text() != before, what="the state cell")
    return output.inner_text().strip()


def clear_output_close_and_delete(page: Any) -> None:
    """Clear output pauses the panel's sampling (no view of it left); Close replaces it by a line;
    deleting the cell pauses it too. The notebook's cells: a panel, :data:`STATE_CELL`. Shared by the
    JupyterLab and the Notebook 7 tests."""
    # The state cell's printed line tells whether the panel samples: (views, active), sampler running.
    wait_until(lambda: "panels [(1, True)] True" in kernel_state(page), what="one shown, sampling panel")
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 0; }")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:clear-cell-output'); }")
    wait_until(lambda: "panels [(0, False)] False" in kernel_state(page), what="the sampler to stop")
    # A new panel (the cleared one stays paused); its Close button stops it for good and leaves one
    # line where it was.
    run_cell(page, 0)
    panel = page.locator(".jupyter-gpu-monitor").first
    panel.wait_for(timeout=60_000)
    wait_until(lambda: "panels [(0, False), (1, True)] True" in kernel_state(page), what="the new panel sampling")
    panel.get_by_role("button", name="Close").click()
    closed = page.locator(".jp-Cell").nth(0).get_by_text("GPU panel closed; run %gpu_monitor for a new one.")
    closed.wait_for(timeout=30_000)
    assert page.locator(".jupyter-gpu-monitor").count() == 0
    wait_until(lambda: "panels [(0, False)] False" in kernel_state(page), what="the closed panel gone")
    # Deleting the cell of a shown panel takes its view away too: it pauses.
    run_cell(page, 0)
    page.locator(".jupyter-gpu-monitor").first.wait_for(timeout=60_000)
    wait_until(lambda: "panels [(0, False), (1, True)] True" in kernel_state(page), what="a third panel sampling")
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 0; }")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:delete-cell'); }")
    wait_until(lambda: "panels [(0, False), (0, False)] False" in kernel_state(page, 0), what="the sampler to stop")
