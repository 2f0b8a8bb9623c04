"""Issue 11 item 4 in a real JupyterLab: warn → "Restart kernel and apply" → a new kernel with the plan.

The JupyterLab extension is the one built from this checkout (``jupyter_gpu/labextension``, put
first on ``JUPYTER_PATH``), so the MIME renderer under test is this code, not an older install.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from offer_payloads import RESTART_MIME, restart_offer, saved_output
from support import wait_until

import jupyter_gpu
from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

NOTEBOOK = "restart.ipynb"
BUILT = Path(jupyter_gpu.__file__).parent / "labextension"


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (BUILT / "package.json").exists():
        pytest.skip("the JupyterLab extension of this checkout is not built (pip install -e . builds it)")
    data = tmp_path_factory.mktemp("jupyter-path")
    (data / "labextensions").mkdir()
    (data / "labextensions" / "jupyter-gpu").symlink_to(BUILT)
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(data), saved]))
    try:
        yield lab_factory(simulate.plausible_gpus(2), name="restart")
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved


def kernel_id(lab: Any) -> str:
    session = wait_until(
        lambda: next(
            (
                s
                for s in lab.api("GET", "api/sessions")
                if s["path"] == NOTEBOOK and s["kernel"]["execution_state"] == "idle"
            ),
            None,
        ),
        timeout_s=60,
        what="the notebook's kernel idle",
    )
    return session["kernel"]["id"]


def run_cell(page: Any, index: int) -> Any:
    cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    return cell


def confirm_dialog(page: Any) -> Any:
    """The restart confirmation (JupyterLab's own dialog), once it is shown."""
    dialog = page.locator(".jp-Dialog", has_text="Restart kernel and apply the GPU plan?")
    dialog.wait_for(timeout=60_000)
    return dialog


def set_theme(page: Any, theme: str) -> None:
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    light = "true" if theme == "JupyterLab Light" else "false"
    page.wait_for_selector(f"body[data-jp-theme-light='{light}']", state="attached")


def test_warning_button_restarts_the_kernel_and_applies_the_plan(
    lab: Any, page: Any, artifacts: Path, toasts: Callable[[Any, str], Any]
) -> None:
    lab.write_notebook(
        NOTEBOOK,
        [
            "%load_ext jupyter_gpu\n%gpu_watch on\nimport os\nprint('PID', os.getpid())",
            "%gpu_select 1 --growth",
            "%gpu_status",
            "%gpu_restart",
            "%gpu_status",
            "%gpu_restart",
        ],
    )
    lab.open(page)
    if not page.locator("#filebrowser").is_visible():
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="filebrowser"]').click()
    page.locator(".jp-DirListing-item", has_text=NOTEBOOK).dblclick()
    page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").first.wait_for()
    applied = toasts(page, "Kernel restarted; GPU plan applied")
    first_kernel = kernel_id(lab)
    page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName", has_text="Python 3").first.wait_for()

    output = run_cell(page, 0).locator(".jp-OutputArea-output", has_text="PID")
    output.wait_for(timeout=60_000)
    pid = int(re.search(r"PID (\d+)", output.inner_text()).group(1))
    # This kernel now holds memory on GPU 0 (NVML says so): a new selection is too late.
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": pid, "memory_mib": 2048}]))

    warned = run_cell(page, 1)
    warned.locator(".jp-OutputArea-output", has_text="GPUAlreadyInitializedWarning").wait_for(timeout=60_000)
    offer = warned.locator(".jp-GpuRestart")
    offer.wait_for()
    # The kernel's jupyter_gpu settings are carried over: the plan and %gpu_watch
    assert (
        offer.locator(".jp-GpuRestart-text").inner_text()
        == "GPU plan for a fresh kernel: %gpu_select 1 --growth; %gpu_watch on"
    )
    page.screenshot(path=str(artifacts / "restart-offer.png"))
    offer.get_by_role("button", name="Restart kernel and apply").click()
    # It asks first, as JupyterLab's own restart does: what is lost, and the new plan (as text)
    dialog = confirm_dialog(page)
    body = dialog.locator(".jp-Dialog-body").inner_text()
    assert "variables" in body and "are lost" in body, body
    assert "%gpu_select 1 --growth; %gpu_watch on" in body, body
    page.screenshot(path=str(artifacts / "restart-confirm-light.png"))
    # Cancel changes nothing
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="detached")
    assert lab.api("GET", f"api/kernels/{first_kernel}")["execution_state"] != "restarting"
    assert offer.get_by_role("button", name="Restart kernel and apply").is_enabled()
    # In the dark theme too; then Restart
    set_theme(page, "JupyterLab Dark")
    offer.get_by_role("button", name="Restart kernel and apply").click()
    dialog = confirm_dialog(page)
    page.screenshot(path=str(artifacts / "restart-confirm-dark.png"))
    dialog.get_by_role("button", name="Restart").click()
    set_theme(page, "JupyterLab Light")

    page.get_by_text("Kernel restarted; GPU plan applied: GPU 1; growth on; no memory limit; %gpu_watch on").wait_for(
        timeout=60_000
    )
    assert lab.api("GET", f"api/kernels/{first_kernel}")["id"] == first_kernel  # the same kernel, restarted
    status = run_cell(page, 2).locator(".jp-OutputArea-output", has_text="Plan:")
    status.wait_for(timeout=60_000)
    text = status.inner_text()
    assert "Plan: GPU 1; growth on" in text, text
    assert re.search(r"\* GPU 1 ", text), text  # marked as selected in the new kernel's listing
    assert "GPUAlreadyInitializedWarning" not in text
    assert "GPU memory of this kernel" in text, text  # %gpu_watch came along

    # %gpu_restart from code asks at once; "Do not ask again" turns the question off
    run_cell(page, 3).locator(".jp-GpuRestart").wait_for(timeout=60_000)
    dialog = confirm_dialog(page)
    dialog.get_by_label("Do not ask again").check()
    dialog.get_by_role("button", name="Restart").click()
    applied.wait_for(2)
    status = run_cell(page, 4).locator(".jp-OutputArea-output", has_text="Plan:")
    status.wait_for(timeout=60_000)
    assert "Plan: GPU 1; growth on" in status.inner_text()
    # The next %gpu_restart restarts without asking (the choice is kept in the settings)
    run_cell(page, 5).locator(".jp-GpuRestart").wait_for(timeout=60_000)
    applied.wait_for(3)
    assert page.locator(".jp-Dialog").count() == 0
    saved = lab.api("GET", "lab/api/settings/jupyter-gpu:plugin")
    assert saved["settings"]["confirmRestart"] is False
    lab.api("PUT", "lab/api/settings/jupyter-gpu:plugin", {"raw": "{}"})  # ask again in later tests
    assert not page.errors, page.errors


def test_an_untrusted_or_forged_offer_runs_nothing(lab: Any, page: Any) -> None:
    """A notebook from elsewhere carrying the offer with other code: no button, nothing runs."""
    forged = restart_offer(
        ["%load_ext jupyter_gpu", "import os; os.system('touch /tmp/pwned')"], offer_id="x", reason="x", automatic=True
    )
    honest = {**forged, "lines": ["%load_ext jupyter_gpu", "%gpu_select 1"], "id": "y"}
    waiting = {**forged, "lines": ["%gpu_select auto:2 --min-free 999GiB --wait 168h", "%gpu_limit 1"], "id": "z"}
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "source": "",
            "execution_count": 1,
            "outputs": [saved_output(RESTART_MIME, data)],
        }
        for data in (forged, honest, waiting)
    ]
    content = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    lab.api("PUT", "api/contents/forged.ipynb", {"type": "notebook", "format": "json", "content": content})
    lab.open(page, path="lab/tree/forged.ipynb")
    offers = page.locator(".jp-GpuRestart")
    offers.nth(2).wait_for(timeout=60_000)
    assert "malformed" in offers.nth(0).inner_text()
    assert "Untrusted output" in offers.nth(1).inner_text()  # not run, not even offered as a button
    # Every line is shown (the first is not assumed to be %load_ext), and one that can wait is refused.
    assert "%gpu_select auto:2 --min-free 999GiB --wait 168h; %gpu_limit 1" in offers.nth(2).inner_text()
    assert "refused: --wait" in offers.nth(2).inner_text()
    assert page.locator(".jp-GpuRestart button").count() == 0
    assert not Path("/tmp/pwned").exists()
