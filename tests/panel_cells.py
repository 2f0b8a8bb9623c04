"""Driving a notebook that shows a GPU panel in a real browser (JupyterLab and Notebook 7): its
cells, running one, reading the kernel's panel state, and the Clear output / Close / delete walk
the browser tests of both front ends share."""

from __future__ import annotations

from typing import Any

from support import wait_until

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


def wait_for_idle_kernels(app: Any) -> None:
    """Wait until every kernel of ``app`` is idle (a restart finished: shutting a session down while
    its kernel restarts fails in jupyter_server)."""
    wait_until(
        lambda: all(k["execution_state"] == "idle" for k in app.api("GET", "api/kernels")),
        timeout_s=60,
        what="idle kernels",
    )
