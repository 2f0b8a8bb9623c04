"""Issue 21 item 4 in a real JupyterLab: the out-of-memory report with its next steps as buttons.

A notebook's kernel (the real CPU build of PyTorch) raises PyTorch's own out-of-memory error with
the message PyTorch writes, on a simulated shared server where another notebook of the user,
train_old.ipynb, holds 22 GiB of the GPU that ran out and GPU 2 is nearly free. The report shows as
text with code as code, and its next steps are buttons, each confirmed: shut train_old.ipynb's
kernel down, free this kernel's cache, restart on GPU 2 with growth.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from offer_payloads import OOM_MIME, display_cell, oom_report
from panel_cells import open_notebook
from support import wait_until

import jupyter_gpu

# Asked without importing it: importorskip would import torch into the pytest process at collection,
# and every test that needs the frameworks unimported (the `clean` fixture) would then skip.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="the OOM report is shown for PyTorch's own error class"
    ),
]

BUILT = Path(jupyter_gpu.__file__).parent / "labextension"
MIB = 1024**2
TORCH_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.50 GiB is "
    "free. Including non-PyTorch memory, this process has 30.00 GiB memory in use. Of the allocated memory 24.90 GiB "
    "is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but unallocated."
)


def shared_server(pid: int | None = None, old: int | None = None) -> dict[str, Any]:
    """GPU 0 bob's; GPU 1 this kernel's (30 GiB), train_old.ipynb's (22 GiB) and carol's; GPU 2 free."""
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_reserved_mib": 512}
    return {
        "gpus": [
            {**a100, "processes": [{"pid": 910001, "memory_mib": 66000, "user": "bob", "name": "python"}]},
            {
                **a100,
                "processes": [
                    *([{"pid": pid, "memory_mib": 30720, "name": "python"}] if pid else []),
                    *([{"pid": old, "memory_mib": 22528, "name": "python"}] if old else []),
                    {"pid": 910002, "memory_mib": 24576, "user": "carol", "name": "python"},
                ],
            },
            {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140, "memory_reserved_mib": 300, "processes": []},
        ]
    }


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Any]) -> Any:
    if not (BUILT / "package.json").exists():
        pytest.skip("the JupyterLab extension of this checkout is not built (pip install -e . builds it)")
    return lab_factory(shared_server(), name="oom")


@pytest.fixture(scope="module")
def notebook_app(lab_factory: Callable[..., Any]) -> Any:
    if not (BUILT / "package.json").exists():
        pytest.skip("the JupyterLab extension of this checkout is not built (pip install -e . builds it)")
    pytest.importorskip("notebook", reason="Notebook 7 is not installed (pip install notebook)")
    return lab_factory(shared_server(), name="oom-notebook7", app="notebook")


def start_old_kernel(app: Any) -> tuple[str, int]:
    """train_old.ipynb's kernel, with the extension loaded (so it reports itself): (id, PID)."""
    session = app.api(
        "POST", "api/sessions", {"path": "train_old.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = wait_until(
        lambda: next((k for k in app.snapshot().get("kernels", []) if k["kernel_id"] == kernel_id), None),
        timeout_s=60,
        what="train_old.ipynb's kernel in the snapshot",
    )
    return kernel_id, kernel["pid"]


def set_theme(page: Any, theme: str) -> None:
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    light = "true" if theme.endswith("Light") else "false"
    page.wait_for_selector(f"body[data-jp-theme-light='{light}']", state="attached")


def raise_oom(app: Any, page: Any, path: str, old_pid: int) -> Any:
    """Open ``path``, run the cell that prints the kernel's PID, put the kernel on GPU 1, raise
    PyTorch's out-of-memory error; the rendered report."""
    app.write_notebook(
        path,
        [
            "%load_ext jupyter_gpu\nimport os, torch\nprint('PID', os.getpid())",
            f"raise torch.cuda.OutOfMemoryError({TORCH_OOM!r})",
        ],
    )
    cells = open_notebook(app, page, path)
    cells.nth(0).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    output = cells.nth(0).locator(".jp-OutputArea-output", has_text="PID")
    output.wait_for(timeout=90_000)
    pid = int(re.search(r"PID (\d+)", output.inner_text()).group(1))
    app.scenario.write(shared_server(pid, old=old_pid))
    cells.nth(1).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    report = cells.nth(1).locator(".jp-GpuOom")
    report.locator(".jp-GpuOom-actions").wait_for(timeout=60_000)
    return report


def test_the_next_steps_are_buttons_each_confirmed(lab: Any, page: Any, artifacts: Path, docs_screenshot: Any) -> None:
    old_id, old_pid = start_old_kernel(lab)
    report = raise_oom(lab, page, "oom.ipynb", old_pid)
    text = report.locator(".jp-GpuOom-report").inner_text()
    assert text.startswith("jupyter_gpu: PyTorch cuda:0 ran out of GPU memory; it tried to allocate 2 GiB."), text
    assert "`" not in text  # code is shown as code, not between literal backticks
    assert "%gpu_free" in report.locator(".jp-GpuOom-report code").all_inner_texts()
    buttons = report.locator(".jp-GpuOom-actions button")
    labels = buttons.all_inner_texts()
    assert labels[0].startswith("Shut down train_old.ipynb (") and labels[0].endswith("holds 22 GiB on GPU 1)"), labels
    assert "Restart on GPU 2 with growth" in labels and any(label.startswith("Free memory (") for label in labels)
    report.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "oom-report-light.png"))
    docs_screenshot(report, "oom-report.png")
    set_theme(page, "JupyterLab Dark")
    page.screenshot(path=str(artifacts / "oom-report-dark.png"))
    docs_screenshot(report, "oom-report-dark.png")

    # Shut down: asked first; Cancel keeps the kernel, Shut Down ends it
    report.get_by_role("button", name=re.compile("^Shut down train_old.ipynb")).click()
    dialog = page.locator(".jp-Dialog", has_text="Shut down kernel?")
    dialog.wait_for()
    assert "loses the variables" in dialog.inner_text()
    page.screenshot(path=str(artifacts / "oom-shutdown-confirm-dark.png"))
    dialog.get_by_role("button", name="Cancel").click()
    assert old_id in lab.kernel_ids()
    set_theme(page, "JupyterLab Light")
    report.get_by_role("button", name=re.compile("^Shut down train_old.ipynb")).click()
    page.locator(".jp-Dialog", has_text="Shut down kernel?").get_by_role("button", name="Shut Down").click()
    wait_until(lambda: old_id not in lab.kernel_ids(), timeout_s=30, what="train_old.ipynb's kernel to go")
    shut = report.locator(".jp-GpuOom-actions button", has_text="Shut down train_old.ipynb")
    wait_until(lambda: shut.inner_text() == "✓ Shut down train_old.ipynb", timeout_s=30, what="the finished look")
    assert shut.is_disabled() and "jp-mod-done" in (shut.get_attribute("class") or "")

    # Free memory: asked, then %gpu_free runs in this kernel and its report is a notification
    report.get_by_role("button", name=re.compile("^Free memory")).click()
    page.locator(".jp-Dialog", has_text="Free GPU memory?").get_by_role("button", name="Free").click()
    # the success toast of %gpu_free's report, not the one that said train_old.ipynb's kernel shut down
    freed = page.locator(".Toastify__toast--success, .jp-Notification-Toast-success").filter(has_not_text="shut down")
    freed.first.wait_for(timeout=60_000)

    # Restart on GPU 2 with growth: the restart question, then the new kernel has that plan
    report.get_by_role("button", name="Restart on GPU 2 with growth").click()
    dialog = page.locator(".jp-Dialog", has_text="Restart the kernel on GPU 2?")
    dialog.wait_for()
    assert "%gpu_select 2 --growth" in dialog.inner_text() and "variables" in dialog.inner_text()
    dialog.get_by_role("button", name="Restart").click()
    page.get_by_text("Kernel restarted; GPU plan applied: GPU 2; growth on").wait_for(timeout=60_000)
    restarted = report.locator(".jp-GpuOom-actions button.jp-mod-done", has_text="Restarted on GPU 2")
    restarted.wait_for(timeout=60_000)
    assert restarted.inner_text() == "✓ Restarted on GPU 2 with growth" and restarted.is_disabled()
    assert not page.errors, page.errors


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_notebook_7_shows_the_buttons_and_asks_before_a_restart(
    notebook_app: Any, page: Any, artifacts: Path, theme: str
) -> None:
    _, old_pid = start_old_kernel(notebook_app)
    name = "light" if theme.endswith("Light") else "dark"
    report = raise_oom(notebook_app, page, f"oom7-{name}.ipynb", old_pid)
    set_theme(page, theme)
    assert "`" not in report.locator(".jp-GpuOom-report").inner_text()
    report.get_by_role("button", name="Restart on GPU 2 with growth").click()
    dialog = page.locator(".jp-Dialog", has_text="Restart the kernel on GPU 2?")
    dialog.wait_for()
    page.screenshot(path=str(artifacts / f"oom-notebook7-{name}.png"))
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="detached")
    assert report.get_by_role("button", name="Restart on GPU 2 with growth").is_enabled()
    # %gpu_restart asks in Notebook 7 too, then restarts and applies the plan
    cells = page.locator(".jp-Notebook .jp-Cell")
    cells.nth(2).locator(".jp-InputArea-editor").click()
    page.keyboard.type("%gpu_restart")
    page.keyboard.press("Shift+Enter")
    dialog = page.locator(".jp-Dialog", has_text="Restart kernel and apply the GPU plan?")
    dialog.wait_for(timeout=60_000)
    assert "variables" in dialog.inner_text()
    dialog.get_by_role("button", name="Restart").click()
    page.get_by_text("Kernel restarted; GPU plan applied").first.wait_for(timeout=60_000)
    own = [e for e in page.errors if "jupyter-gpu" in e or "jupyter_gpu" in e]
    assert not own, own
    notebook_app.shutdown_all_kernels()


GONE_KERNEL = "cccccccc-1111-2222-3333-444444444444"  # no kernel of this server has this id


def capped_report_cell() -> str:
    """A cell that displays a report bundle as ``oom_offer.offer_data`` makes it for an allocation
    over this kernel's own ``%gpu_limit`` (docs/oom.md): raise the limit; and a shutdown offer for a
    kernel that is gone (a report read later)."""
    bundle = oom_report(
        "jupyter_gpu: TensorFlow ran out of GPU memory on GPU 2; the limit ran out, not the GPU.\n"
        "Next steps:\n  - raise this kernel's limit: `%gpu_limit 16GiB`, then `%gpu_restart`",
        [
            {
                "kind": "raise_limit",
                "gpu": 2,
                "limit": "16GiB",
                "lines": ["%load_ext jupyter_gpu", "%gpu_select 2", "%gpu_limit 16GiB"],
            },
            {"kind": "shutdown", "kernel_id": GONE_KERNEL, "label": "old.ipynb", "memory": 8 * 1024**3, "gpu": 2},
        ],
    )
    return display_cell((OOM_MIME, bundle), prelude="%load_ext jupyter_gpu")


@pytest.fixture(params=["lab", "notebook7"])
def front(request: pytest.FixtureRequest) -> Any:
    """JupyterLab, then Notebook 7 (each its own server, started once for the module)."""
    return request.getfixturevalue("lab" if request.param == "lab" else "notebook_app")


def test_raise_the_limit_restarts_with_it_and_finished_or_gone_buttons_say_so(
    front: Any,
    page: Any,
    artifacts: Path,
    contrast: Callable[..., Any],
    theme: Callable[[Any, bool], None],
    docs_screenshot: Any,
) -> None:
    """In JupyterLab and Notebook 7, light and dark (docs/oom-report-limit*.png, from JupyterLab)."""
    lab = front
    path = f"oom-capped-{lab.app}.ipynb"
    lab.write_notebook(
        path,
        [
            capped_report_cell(),
            "from jupyter_gpu.plan import current_plan\n"
            "print('LIMITS', current_plan().request.limits, current_plan().request.selection)",
        ],
    )
    cells = open_notebook(lab, page, path)
    cells.nth(0).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    report = cells.nth(0).locator(".jp-GpuOom")
    report.locator(".jp-GpuOom-actions").wait_for(timeout=60_000)

    # The kernel the report offered to shut down is gone: disabled, and it says why
    gone = report.locator(".jp-GpuOom-actions button", has_text="Shut down old.ipynb")
    wait_until(lambda: "that kernel no longer runs" in gone.inner_text(), timeout_s=30, what="the gone button")
    assert gone.is_disabled() and gone.get_attribute("title") == "that kernel no longer runs"
    for dark in (False, True):  # the live raise button and the gone one, before the click
        theme(page, dark)
        report.scroll_into_view_if_needed()
        contrast(page, ".jp-GpuOom-actions", must_include=("jp-mod-gone",))
        if lab.app == "jupyterlab":
            docs_screenshot(report, f"oom-report-limit{'-dark' if dark else ''}.png")
    theme(page, False)

    # Raise the limit: the restart question with the new plan, then the new kernel has that limit
    raise_button = report.get_by_role("button", name="Restart with %gpu_limit 16GiB")
    raise_button.click()
    dialog = page.locator(".jp-Dialog", has_text="Restart the kernel with a limit of 16GiB on GPU 2?")
    dialog.wait_for()
    assert "%gpu_limit 16GiB" in dialog.inner_text() and "variables" in dialog.inner_text()
    dialog.get_by_role("button", name="Restart").click()
    page.get_by_text("Kernel restarted; GPU plan applied").first.wait_for(timeout=60_000)
    done = report.locator(".jp-GpuOom-actions button.jp-mod-done")
    done.wait_for(timeout=60_000)
    assert done.inner_text() == "✓ Restarted with %gpu_limit 16GiB" and done.is_disabled()
    cells.nth(1).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    output = cells.nth(1).locator(".jp-OutputArea-output", has_text="LIMITS")
    output.wait_for(timeout=60_000)
    assert "LIMITS ('16GiB',) 2" in output.inner_text()

    # The finished and the gone look are readable in both themes
    for dark in (False, True):
        theme(page, dark)
        report.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / f"oom-raise-limit-{lab.app}-{'dark' if dark else 'light'}.png"))
        contrast(page, ".jp-GpuOom-actions", must_include=("jp-mod-done", "jp-mod-gone"))
    own = [e for e in page.errors if "jupyter-gpu" in e or "jupyter_gpu" in e]
    assert not own, own
    lab.shutdown_all_kernels()
