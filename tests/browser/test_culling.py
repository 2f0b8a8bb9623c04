"""GPU-aware culling as the user sees it, in headless Chromium: the sidebar row and the status bar
count down to the cull, a JupyterLab notification warns, and the kernel is then shut down."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from live_processes import kernel_child
from support import wait_until

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

AFTER_S = 14
WARN_S = 12


@pytest.fixture(scope="module")
def lab(lab_factory: Any) -> Any:
    return lab_factory(
        simulate.plausible_gpus(2),
        name="culling",
        extra_args=(f"--JupyterGpuServer.cull_idle_after_s={AFTER_S}", f"--JupyterGpuServer.cull_warn_s={WARN_S}"),
    )


def seconds(text: str) -> int:
    match = re.search(r"shut(?:s)? down in (\d+) s", text)
    assert match, text
    return int(match.group(1))


def test_an_idle_gpu_kernel_counts_down_notifies_and_is_culled(lab, page, artifacts):
    # Given a notebook's kernel holding 2 GiB on GPU 0, left idle
    session = lab.api(
        "POST", "api/sessions", {"path": "train.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = kernel_child(lab.process.pid)
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": kernel, "memory_mib": 2048}]))
    lab.open(page)
    sidebar = page.locator("#jupyter-gpu-sidebar")
    if not sidebar.is_visible():
        page.locator('.jp-SideBar [title="GPU monitor"]').click()
    row = sidebar.locator('.jp-GpuCard[data-gpu-index="0"] .jp-GpuProc.jp-mod-own')
    row.wait_for(timeout=60_000)
    # Then, within cull_warn_s of the cull, the row counts down in the warning style
    idle = row.locator(".jp-GpuProc-idle")
    wait_until(lambda: "shut down in" in idle.inner_text(), timeout_s=30, what="the countdown in the row")
    assert "jp-mod-culling" in row.get_attribute("class")
    first = seconds(idle.inner_text())
    assert first <= WARN_S
    # and the status bar says it too
    status = page.locator(".jp-GpuStatus")
    assert "idle kernel shut down in" in status.inner_text()
    assert "jp-mod-warning" in status.get_attribute("class")
    # and one JupyterLab notification warns, as text
    toast = page.locator(".Toastify__toast", has_text="shuts down in")
    toast.wait_for(timeout=60_000)
    assert "train.ipynb" in toast.inner_text() and "Run a cell to keep it" in toast.inner_text()
    assert toast.get_by_role("button", name="Keep running").is_visible()
    page.screenshot(path=str(artifacts / "culling-countdown.png"))
    # The countdown moves
    wait_until(lambda: seconds(idle.inner_text()) < first, timeout_s=10, what="the countdown to move")
    # When the time is up, the server shuts the kernel down; the row and the notification go
    wait_until(lambda: kernel_id not in lab.kernel_ids(), timeout_s=AFTER_S + 30, what="the cull")
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", []))
    row.wait_for(state="detached", timeout=60_000)
    toast.wait_for(state="detached", timeout=60_000)
    assert "shut down in" not in status.inner_text()
    # and a notification stays: which notebook, how long idle, what was freed where
    lasting = page.locator(".Toastify__toast", has_text="train.ipynb shut down after")
    lasting.wait_for(timeout=60_000)
    assert re.search(r"train\.ipynb shut down after \d+ s idle, 2 GiB freed on GPU 0\.", lasting.inner_text())
    page.screenshot(path=str(artifacts / "culling-culled.png"))
    assert bell_count(page) == 1  # in the notification center too (the countdown is gone from it)
    page.locator(".jp-Notification-Status").click()
    center = page.locator(".jp-Notification-Center")
    center.wait_for()
    assert "train.ipynb shut down after" in center.inner_text()
    assert not page.errors


def bell_count(page: Any) -> int:
    """The number the status bar's notification bell shows."""
    text = page.locator(".jp-Notification-Status").inner_text().strip()
    return int(text or 0)


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_keep_running_postpones_the_cull(lab, page, artifacts, theme):
    session = lab.api(
        "POST", "api/sessions", {"path": f"keep-{theme[-4:]}.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = kernel_child(lab.process.pid)
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", [{"pid": kernel, "memory_mib": 1024}]))
    lab.open(page)
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    light = "true" if theme.endswith("Light") else "false"
    page.wait_for_selector(f"body[data-jp-theme-light='{light}']", state="attached")
    toast = page.locator(".Toastify__toast", has_text="shuts down in").filter(has_text="keep-")
    toast.wait_for(timeout=40_000)
    first_cull_at = time.monotonic() + seconds(toast.inner_text())
    page.screenshot(path=str(artifacts / f"culling-keep-running-{light}.png"))
    # When the user says "Keep running"
    toast.get_by_role("button", name="Keep running").click()
    # Then the countdown goes, the server says by how long, and the kernel outlives its first cull time
    page.locator(".Toastify__toast", has_text="keeps running: its shutdown is postponed by 14 s").wait_for()
    toast.wait_for(state="detached", timeout=60_000)
    countdown = next(k for k in lab.snapshot()["kernels"] if k["kernel_id"] == kernel_id)["cull_in_s"]
    assert countdown > WARN_S, countdown  # one cull_idle_after_s more: out of the warning window
    time.sleep(max(0.0, first_cull_at - time.monotonic()) + 2)
    assert kernel_id in lab.kernel_ids()
    with open(lab.log) as log:
        assert any(f"kept idle GPU kernel {kernel_id}" in line for line in log), "the keep is not in the server log"
    lab.api("DELETE", f"api/sessions/{session['id']}")
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", []))
    assert not page.errors


def test_a_kernel_known_only_by_its_report_is_counted_down_and_notified(lab, page):
    """In a container no GPU process matches a kernel (NVML shows host PIDs); the server still knows
    and culls a kernel whose own report shows framework memory, so the user must see it coming too."""
    import json
    import time

    from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX
    from jupyter_gpu.sources.processes import process_start

    session = lab.api(
        "POST", "api/sessions", {"path": "in_container.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = kernel_child(lab.process.pid)
    uuid = lab.snapshot()["gpus"][1]["uuid"]
    # NVML shows a host PID nobody here has; the kernel's report (beside its connection file) says
    # its framework holds 3 GiB on GPU 1
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", [{"pid": 4_000_000 - 7, "memory_mib": 3072}]))
    report = lab.root.parent / "runtime" / f"{REPORT_PREFIX}{kernel_id}.json"
    report.write_text(
        json.dumps(
            {
                "version": 1,
                "kernel_id": kernel_id,
                "pid": kernel,
                "start_time": process_start(kernel),
                "session": "in_container.ipynb",
                "nvml_pids": [],
                "gpu_memory": {uuid: 3 << 30},
                "timestamp": time.time(),
            }
        )
    )
    wait_until(
        lambda: any(k["kernel_id"] == kernel_id and k["cull_warning"] for k in lab.snapshot()["kernels"]),
        timeout_s=30,
        what="the server to count the reported kernel down",
    )
    lab.open(page)
    # Then the status bar counts down and one notification names the notebook and the memory
    status = page.locator(".jp-GpuStatus")
    wait_until(lambda: "idle kernel shut down in" in status.inner_text(), timeout_s=20, what="the status bar")
    toast = page.locator(".Toastify__toast", has_text="in_container.ipynb").filter(has_text="shuts down in")
    toast.wait_for(timeout=60_000)
    assert "3 GiB" in toast.inner_text(), toast.inner_text()
    # and after the cull both go
    wait_until(lambda: kernel_id not in lab.kernel_ids(), timeout_s=AFTER_S + 30, what="the cull")
    toast.wait_for(state="detached", timeout=60_000)
    assert "shut down in" not in status.inner_text()
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", []))
    assert not page.errors


def test_a_kernel_showing_a_live_gpu_panel_is_counted_down_and_culled_like_any_other(lab, page, artifacts):
    """An open %gpu_monitor panel updates all the time; those widget messages are not cells, so its
    kernel is idle, counted down and culled (issue 21)."""
    from panel_cells import PANEL_CELL, run_panel

    panel = run_panel(lab, page, "panel_cull.ipynb", PANEL_CELL + "\nimport os\nprint('PID', os.getpid())")
    (session,) = [s for s in lab.api("GET", "api/sessions") if s["path"] == "panel_cull.ipynb"]
    kernel_id = session["kernel"]["id"]
    output = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']", has_text="PID")
    output.first.wait_for(timeout=60_000)
    pid = int(re.search(r"PID (\d+)", output.first.inner_text()).group(1))
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": pid, "memory_mib": 2048}]))
    # The panel is live: it shows the kernel's own process as it appears
    wait_until(lambda: "this kernel" in panel.inner_text(), timeout_s=30, what="the panel to update")
    sidebar = page.locator("#jupyter-gpu-sidebar")
    if not sidebar.is_visible():
        page.locator('.jp-SideBar [title="GPU monitor"]').click()
    row = sidebar.locator('.jp-GpuCard[data-gpu-index="0"] .jp-GpuProc.jp-mod-own')
    row.wait_for(timeout=60_000)
    # Then the sidebar counts its kernel down, while the panel keeps updating
    idle = row.locator(".jp-GpuProc-idle")
    wait_until(lambda: "shut down in" in idle.inner_text(), timeout_s=30, what="the countdown in the row")
    stamp = panel.locator(".widget-hbox").first.inner_text()
    wait_until(lambda: panel.locator(".widget-hbox").first.inner_text() != stamp, what="another panel update")
    page.screenshot(path=str(artifacts / "culling-with-panel.png"))
    # and the server culls it
    wait_until(lambda: kernel_id not in lab.kernel_ids(), timeout_s=AFTER_S + 30, what="the cull")
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", []))


@pytest.fixture(scope="module")
def notebook_app(lab_factory: Any) -> Any:
    pytest.importorskip("notebook", reason="Notebook 7 is not installed (pip install notebook)")
    return lab_factory(
        simulate.plausible_gpus(2),
        name="culling-notebook7",
        app="notebook",
        extra_args=(f"--JupyterGpuServer.cull_idle_after_s={AFTER_S}", f"--JupyterGpuServer.cull_warn_s={WARN_S}"),
    )


@pytest.fixture(params=["lab", "notebook7"])
def front(request: pytest.FixtureRequest) -> Any:
    """JupyterLab, then Notebook 7 (each its own server, started once for the module)."""
    return request.getfixturevalue("lab" if request.param == "lab" else "notebook_app")


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_a_cull_made_while_the_page_was_closed_is_shown_once_on_the_next_visit(
    front, page, artifacts, contrast, theme, dark
):
    """Issue 31 item 10: the page keeps the last snapshot's server time in local storage; the next
    visit shows the server's culls after it (``GET jupyter-gpu/culls``) once, in the bell (JupyterLab;
    Notebook 7 has no status bar, so no bell: its notification), in both themes."""
    lab = front
    name = f"away-{lab.app}-{'dark' if dark else 'light'}"
    lab.shutdown_all_kernels()
    lab.scenario.update(lambda s: [gpu.__setitem__("processes", []) for gpu in s["gpus"]])
    # A first visit: the page sees snapshots (and remembers their time), then the user leaves
    lab.open(page)
    theme(page, dark)  # kept by the server's settings for the next visit
    page.locator(".jp-GpuStatus").wait_for(timeout=60_000)
    wait_until(
        lambda: page.evaluate("() => Object.keys(localStorage).some(k => k.startsWith('jupyter-gpu:last-seen:'))"),
        timeout_s=30,
        what="the page to remember the last snapshot's time",
    )
    page.goto("about:blank")
    # While no page is open, a notebook's kernel holding 2 GiB on GPU 0 stays idle and is culled
    session = lab.api(
        "POST", "api/sessions", {"path": f"{name}.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = kernel_child(lab.process.pid)
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": kernel, "memory_mib": 2048}]))
    wait_until(lambda: kernel_id not in lab.kernel_ids(), timeout_s=AFTER_S + 40, what="the cull")
    lab.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", []))
    assert any(c.get("kernel_id") == kernel_id for c in lab.api("GET", "jupyter-gpu/culls").get("culls", []))
    # The next visit: the cull is shown once, as for live culls, and stays in the bell
    lab.open(page)
    page.wait_for_selector(f"body[data-jp-theme-light='{'false' if dark else 'true'}']", state="attached")
    away = page.locator(".Toastify__toast", has_text=f"While you were away: {name}.ipynb shut down after")
    away.wait_for(timeout=60_000)
    assert re.search(rf"{name}\.ipynb shut down after \d+ s idle, 2 GiB freed on GPU 0\.", away.inner_text())
    page.screenshot(path=str(artifacts / f"culling-while-away-{lab.app}-{'dark' if dark else 'light'}.png"))
    checked = contrast(page, ".Toastify__toast")  # the notice is readable in this theme
    assert any("While you were away" in entry["text"] for entry in checked), checked
    if lab.app == "jupyterlab":
        assert bell_count(page) >= 1
        page.locator(".jp-Notification-Status").click()
        center = page.locator(".jp-Notification-Center")
        center.wait_for()
        assert center.inner_text().count(f"While you were away: {name}.ipynb") == 1
    # Once only: the visit after that one asks the server again, and shows nothing of it
    with page.expect_response(lambda response: "jupyter-gpu/culls" in response.url, timeout=60_000):
        lab.open(page)
    page.locator(".jp-GpuStatus").wait_for(timeout=60_000)
    page.wait_for_timeout(1000)  # the answer is rendered (or not) right after it arrives
    assert page.locator(".Toastify__toast", has_text="While you were away").count() == 0
    own = [e for e in page.errors if "jupyter-gpu" in e or "jupyter_gpu" in e]
    assert not own, own


def test_notebook_7_counts_down_keeps_running_and_leaves_a_notification_after_the_cull(notebook_app, page, artifacts):
    # The page first (Notebook 7 loads slowly under load), then the kernel's idle clock starts
    notebook_app.open(page)
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_selector("body[data-jp-theme-light='false']", state="attached")
    page.locator(".jp-GpuStatus").wait_for()
    session = notebook_app.api(
        "POST", "api/sessions", {"path": "nb7.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    kernel = kernel_child(notebook_app.process.pid)
    notebook_app.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": kernel, "memory_mib": 2048}]))
    toast = page.locator(".Toastify__toast", has_text="shuts down in").filter(has_text="nb7.ipynb")
    toast.wait_for(timeout=40_000)
    page.screenshot(path=str(artifacts / "culling-notebook7-dark.png"))
    toast.get_by_role("button", name="Keep running").click()
    page.locator(".Toastify__toast", has_text="nb7.ipynb keeps running").wait_for()
    toast.wait_for(state="detached", timeout=60_000)
    # The postponement runs out: the countdown comes back, the kernel is culled, a notification stays
    wait_until(lambda: kernel_id not in notebook_app.kernel_ids(), timeout_s=2 * AFTER_S + 30, what="the cull")
    notebook_app.scenario.update(lambda s: s["gpus"][0].__setitem__("processes", []))
    lasting = page.locator(".Toastify__toast", has_text="nb7.ipynb shut down after")
    lasting.wait_for(timeout=60_000)
    assert "2 GiB freed on GPU 0" in lasting.inner_text()
    page.screenshot(path=str(artifacts / "culling-notebook7-culled-dark.png"))
    own = [e for e in page.errors if "jupyter-gpu" in e or "jupyter_gpu" in e]
    assert not own, own
