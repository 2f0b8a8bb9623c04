"""The JupyterLab GPU sidebar and status-bar item, in headless Chromium against a real JupyterLab
whose server extension reads simulated GPUs (scenario rewritten by the tests while they run).

The tests of this module share one server and run in order: the kernel test leaves no kernel behind.
"""

from __future__ import annotations

import os
import random
import re
import time
import uuid
from typing import Any

import pytest
from side_panel import drag_side_panel_to_its_minimum
from snapshot_routes import show_an_idle_kernel_about_to_be_culled
from support import wait_until

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

NOTEBOOK = "gpu_train.ipynb"
SIDEBAR_ID = "jupyter-gpu-sidebar"  # the sidebar's widget id (labextension/src/tokens.ts), in the saved layout
EVIL_NAME = '<img src=x onerror="window.__jupyterGpuXss=1">'


def open_sidebar(lab: Any, page: Any, reset: bool = True, load: bool = True, path: str = "lab") -> Any:
    """Load JupyterLab at ``path`` (unless ``load=False``), activate the GPU tab by clicking it,
    return the sidebar locator."""
    if load:
        lab.open(page, path=path, reset=reset)
    sidebar = page.locator("#jupyter-gpu-sidebar")
    if not sidebar.is_visible():
        page.locator('.jp-SideBar [title="GPU monitor"]').click()
    sidebar.wait_for(state="visible")
    return sidebar


def card(sidebar: Any, index: int) -> Any:
    return sidebar.locator(f'.jp-GpuCard[data-gpu-index="{index}"]')


def vary_load(lab: Any, seconds: int) -> None:
    """Let utilization wander for a while, so history charts have something to show."""
    rng = random.Random(6)
    for _ in range(seconds):

        def change(s: dict[str, Any]) -> None:
            for gpu, base in zip(s["gpus"], (80, 35, 5), strict=False):
                gpu["utilization"] = max(0, min(100, base + rng.randint(-15, 15)))

        lab.scenario.update(change)
        time.sleep(1)


def own_workspace() -> str:
    """A workspace name of this test alone (see ``Lab.wait_for_saved_sidebar``)."""
    return f"gpu-test-{uuid.uuid4().hex[:12]}"


def test_sidebar_lists_every_gpu_and_is_restored_with_the_layout(lab, page, artifacts):
    workspace = own_workspace()
    sidebar = open_sidebar(lab, page, path=f"lab/workspaces/{workspace}")
    cards = sidebar.locator(".jp-GpuCard")
    cards.first.wait_for()
    assert cards.count() == 3
    for index in range(3):
        title = card(sidebar, index).locator(".jp-GpuCard-title")
        assert title.inner_text() == f"GPU {index} · NVIDIA A100-SXM4-80GB [simulated]"
    # Another user's process on GPU 0: user and memory, no kernel controls.
    other = card(sidebar, 0).locator(".jp-GpuProc.jp-mod-other")
    assert other.locator(".jp-GpuProc-user").inner_text() == "alice"
    assert other.locator(".jp-GpuProc-memory").inner_text() == "20 GiB"
    assert card(sidebar, 0).locator(".jp-GpuProc-shutdown").count() == 0
    assert card(sidebar, 1).locator(".jp-GpuCard-empty").inner_text() == "No processes"
    assert sidebar.locator(".jp-GpuSidebar-linesHead").is_hidden()  # three GPUs: cards, no column heads
    # The memory bar is an ARIA meter that says what it shows.
    meter = card(sidebar, 0).get_by_role("meter", name="Memory")
    assert "20 GiB of 80 GiB used" in meter.get_attribute("aria-valuetext")
    page.screenshot(path=str(artifacts / "sidebar-gpus.png"))

    # The panel comes back with the layout after a reload (ILayoutRestorer), without a click.
    lab.wait_for_saved_sidebar(workspace, SIDEBAR_ID)  # the layout is saved on a debounce
    lab.open(page, path=f"lab/workspaces/{workspace}", reset=False)
    page.locator("#jupyter-gpu-sidebar .jp-GpuCard").first.wait_for(state="visible")
    assert not page.errors


def test_status_bar_item_summarises_and_opens_the_sidebar(lab, page):
    lab.open(page)
    item = page.locator(".jp-GpuStatus")
    item.wait_for()
    wait_until(lambda: item.inner_text() == "1/3 GPUs in use", what="status text")
    assert "1 of 3 GPUs in use" in item.get_attribute("title")
    # Once restored, JupyterLab opens the Launcher and moves the focus there: on a loaded machine that
    # came after the focus below and took the Enter (seen beside two CPU hogs). Focus after it.
    wait_until(
        lambda: page.evaluate("() => document.activeElement?.closest('.jp-Launcher') != null"),
        what="JupyterLab to focus its Launcher",
    )
    item.focus()
    wait_until(
        lambda: page.evaluate("() => document.activeElement?.classList.contains('jp-GpuStatus') === true"),
        what="the status item to hold the focus",
    )
    page.keyboard.press("Enter")  # keyboard-usable: it is a button
    page.locator("#jupyter-gpu-sidebar .jp-GpuCard").first.wait_for(state="visible")


def test_html_in_a_process_name_is_shown_as_text(lab, page):
    lab.scenario.update(
        lambda s: s["gpus"][2].__setitem__(
            "processes", [{"pid": 4_000_002, "memory_mib": 1024, "user": "<b>mallory</b>", "name": EVIL_NAME}]
        )
    )
    try:
        sidebar = open_sidebar(lab, page)
        user = card(sidebar, 2).locator(".jp-GpuProc-user")
        user.wait_for()
        assert user.inner_text() == "<b>mallory</b>"
        # The server may withhold other users' program names; whatever reaches the page is text.
        assert sidebar.locator("img, b").count() == 0
        assert page.evaluate("window.__jupyterGpuXss") is None
    finally:
        lab.scenario.update(lambda s: s["gpus"][2].__setitem__("processes", []))


def test_a_notebooks_kernel_appears_goes_idle_and_is_shut_down(lab, page, artifacts, docs_screenshot):
    lab.write_notebook(NOTEBOOK, ["import os\nprint('PID', os.getpid())"])
    # Open the notebook from the file browser and run its cell, the way a user does.
    lab.open(page)
    if not page.locator("#filebrowser").is_visible():
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="filebrowser"]').click()
    page.locator(".jp-DirListing-item", has_text=NOTEBOOK).dblclick()
    sidebar = open_sidebar(lab, page, load=False)
    editor = page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").first
    editor.wait_for()
    # Run only once the kernel is up (the server says so), or JupyterLab asks which kernel to start.
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
        what="the notebook's kernel",
    )
    kernel_id = session["kernel"]["id"]
    page.locator(
        ".jp-NotebookPanel .jp-KernelStatus, .jp-NotebookPanel-toolbar .jp-Toolbar-kernelName", has_text="Python 3"
    ).first.wait_for()
    editor.click()
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output", has_text="PID").first
    output.wait_for(timeout=60_000)
    pid = int(re.search(r"PID (\d+)", output.inner_text()).group(1))

    # The kernel's real PID appears on GPU 1 in the simulation: 4 GiB.
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", [{"pid": pid, "memory_mib": 4096}]))
    row = card(sidebar, 1).locator(".jp-GpuProc.jp-mod-own")
    row.wait_for()
    assert row.locator(".jp-GpuProc-notebook").inner_text() == NOTEBOOK
    assert row.locator(".jp-GpuProc-memory").inner_text() == "4 GiB"
    assert "(yours: 4 GiB)" in card(sidebar, 1).locator(".jp-GpuMemory-label").inner_text()

    # Idle beyond the server's threshold (3 s here) while holding memory: flagged, status bar warns.
    row.locator(".jp-GpuProc-idleBadge").wait_for(state="visible", timeout=60_000)
    assert "jp-mod-idle" in row.get_attribute("class")
    assert re.fullmatch(r"idle for \d+ s", row.locator(".jp-GpuProc-idle").inner_text())
    status = page.locator(".jp-GpuStatus")
    assert "jp-mod-warning" in status.get_attribute("class")
    # The idle state is said in words too, not by the colour alone.
    assert re.fullmatch(r"2/3 GPUs in use · yours 4 GiB · idle \d+ s", status.inner_text())
    if os.environ.get("JUPYTER_GPU_UPDATE_DOCS") == "1":
        vary_load(lab, seconds=45)  # the README's screenshot gets a history worth looking at
    page.wait_for_timeout(1000)
    page.screenshot(path=str(artifacts / "sidebar-kernel-idle.png"))
    docs_screenshot(page, "sidebar.png")

    # Clicking the notebook's name brings it back to the front (opens it if it was closed).
    page.evaluate("() => { window.jupyterapp.commands.execute('launcher:create'); }")
    current_tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
    wait_until(lambda: current_tab.inner_text() == "Launcher", what="a launcher in front")
    row.locator(".jp-GpuProc-notebook").click()
    wait_until(lambda: current_tab.inner_text() == NOTEBOOK, what="the notebook in front")

    # Shut it down: confirm dialog, then Jupyter's kernel API; the REST API agrees it is gone.
    row.get_by_role("button", name=re.compile(f"Shut down kernel of {re.escape(NOTEBOOK)}")).click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for()
    assert "4 GiB on GPU 1" in dialog.inner_text()
    page.screenshot(path=str(artifacts / "sidebar-shutdown-dialog.png"))
    dialog.get_by_role("button", name="Shut Down").click()
    wait_until(lambda: kernel_id not in lab.kernel_ids(), what="the kernel to be shut down")
    row.wait_for(state="detached")
    lab.scenario.update(lambda s: s["gpus"][1].__setitem__("processes", []))
    assert not page.errors


def test_a_gpu_lost_mid_run_shows_its_error(lab, page, artifacts):
    sidebar = open_sidebar(lab, page)
    card(sidebar, 2).locator(".jp-GpuCard-title").wait_for()
    lab.scenario.update(lambda s: s["gpus"][2].__setitem__("fault", "lost"))
    try:
        error = card(sidebar, 2).locator(".jp-GpuCard-error")
        error.wait_for(state="visible")
        assert "GPU is lost" in error.inner_text()
        assert error.get_attribute("role") == "alert"
        assert "jp-mod-error" in card(sidebar, 2).get_attribute("class")
        assert card(sidebar, 0).locator(".jp-GpuCard-error").is_hidden()  # the others still work
        assert page.locator(".jp-GpuStatus").inner_text().endswith("1 failed")
        page.screenshot(path=str(artifacts / "sidebar-gpu-lost.png"))
    finally:
        lab.scenario.update(lambda s: s["gpus"][2].pop("fault"))
    card(sidebar, 2).locator(".jp-GpuCard-error").wait_for(state="hidden")


def test_no_nvml_shows_the_reason(lab, page):
    sidebar = open_sidebar(lab, page)
    sidebar.locator(".jp-GpuCard").first.wait_for()
    lab.scenario.update(lambda s: s.__setitem__("fault", "driver_not_loaded"))
    try:
        banner = sidebar.locator(".jp-GpuSidebar-banner")
        banner.wait_for(state="visible")
        assert banner.inner_text().startswith("No GPU information:")
        assert "Driver Not Loaded" in banner.inner_text() or "driver" in banner.inner_text().lower()
        # Said once: the header's attribution note no longer repeats the banner's reason.
        assert sidebar.inner_text().count("Driver Not Loaded") == 1, sidebar.inner_text()
        assert sidebar.locator(".jp-GpuCard").count() == 0
        wait_until(lambda: page.locator(".jp-GpuStatus").inner_text() == "GPU: n/a", what="status n/a")
    finally:
        lab.scenario.update(lambda s: s.pop("fault"))
    sidebar.locator(".jp-GpuCard").first.wait_for()


def test_missing_server_extension_is_actionable(lab, page):
    # The frontend without its server half: the endpoint answers 404 as Jupyter Server would.
    page.route("**/jupyter-gpu/snapshot*", lambda route: route.fulfill(status=404, body="Not Found"))
    sidebar = open_sidebar(lab, page)
    banner = sidebar.locator(".jp-GpuSidebar-banner")
    banner.wait_for(state="visible")
    assert "server extension" in banner.inner_text()
    assert "jupyter server extension list" in banner.inner_text()
    assert banner.get_attribute("role") == "alert"


def test_dark_theme(lab, page, artifacts, docs_screenshot):
    show_an_idle_kernel_about_to_be_culled(page)  # the screenshot shows the IDLE row and countdown
    sidebar = open_sidebar(lab, page)
    sidebar.locator(".jp-GpuCard").first.wait_for()
    if os.environ.get("JUPYTER_GPU_UPDATE_DOCS") == "1":
        vary_load(lab, seconds=40)  # the docs' screenshot gets a history worth looking at
    page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'}); }")
    page.wait_for_selector("body[data-jp-theme-light='false']", state="attached")
    page.wait_for_selector("#jupyterlab-splash", state="detached")
    background = sidebar.evaluate("node => getComputedStyle(node).backgroundColor")
    red, green, blue = (int(v) for v in re.findall(r"\d+", background)[:3])
    assert red + green + blue < 3 * 80, background  # follows the theme's variables
    page.wait_for_timeout(1000)
    page.screenshot(path=str(artifacts / "sidebar-dark.png"))
    docs_screenshot(page, "sidebar-dark.png")
    page.unroute_all(behavior="ignoreErrors")
    page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'}); }")


def test_charts_open_with_the_servers_history_and_read_at_a_glance(lab, page, artifacts):
    lab.scenario.update(lambda s: s["gpus"][0].update(utilization=87))  # (another test may vary it)
    # The server samples while polled: five seconds of history before the page exists.
    loaded_at = time.time()
    deadline = loaded_at + 5
    while time.time() < deadline:
        lab.snapshot()
        time.sleep(0.25)
    history = lab.api("GET", "jupyter-gpu/history")
    assert len(history["gpus"][0]["t"]) >= 10
    page_opened_at = time.time()
    workspace = own_workspace()
    sidebar = open_sidebar(lab, page, path=f"lab/workspaces/{workspace}")
    chart = card(sidebar, 0).locator(".jp-GpuHistory")
    chart.wait_for()
    oldest = page.evaluate("""() => {
        const panel = Array.from(window.jupyterapp.shell.widgets('left')).find(w => w.id === 'jupyter-gpu-sidebar');
        const uuid = panel.model.snapshot.gpus[0].uuid;
        return panel.model.history(uuid)[0].t;
    }""")
    # Samples older than the page can only come from the server's history.
    assert oldest < page_opened_at - 3, (oldest, page_opened_at)
    path = chart.locator("path.jp-GpuHistory-utilization").get_attribute("d")
    assert path.count("L") >= 10  # a line, not a few pixels at the right edge
    # A fixed 0-100 % scale, the current values, memory as an area and utilization as a line.
    assert chart.locator(".jp-GpuHistory-axis").inner_text().split() == ["100", "%", "50", "%", "0", "%"]
    assert chart.locator(".jp-GpuHistory-now.jp-mod-utilization").inner_text() == "87 %"
    assert chart.locator(".jp-GpuHistory-now.jp-mod-memory").inner_text() == "25 %"  # 20 of 80 GiB
    assert chart.locator("path.jp-GpuHistory-memory").get_attribute("d").endswith("Z")  # a closed area
    fill = chart.locator("path.jp-GpuHistory-utilization").evaluate("n => getComputedStyle(n).fill")
    assert fill == "none"
    page.screenshot(path=str(artifacts / "sidebar-history.png"))

    # A reload loses nothing: the chart comes back just as full.
    lab.wait_for_saved_sidebar(workspace, SIDEBAR_ID)  # the layout (sidebar open) is saved on a debounce
    lab.open(page, path=f"lab/workspaces/{workspace}", reset=False)
    chart = page.locator('#jupyter-gpu-sidebar .jp-GpuCard[data-gpu-index="0"] path.jp-GpuHistory-utilization')
    chart.wait_for(state="attached")
    wait_until(lambda: (chart.get_attribute("d") or "").count("L") >= 10, what="a full chart after reload")
    assert not page.errors


def test_warnings_long_and_bidi_names_are_text_and_stay_in_the_card(lab, page):
    def warn(route):
        response = route.fetch()
        data = response.json()
        data["warnings"] = [
            "simulated scenario rejected: gpus[0].memory_used_mib must be ≥ 0",
            "<b>bold</b> \u202eevil",
        ]
        route.fulfill(response=response, json=data)

    page.route("**/jupyter-gpu/snapshot*", warn)
    lab.scenario.update(
        lambda s: s["gpus"][2].__setitem__(
            "processes",
            [{"pid": 4_000_003, "memory_mib": 2048, "user": "a\u202eevil" + "u" * 240, "name": "evil\u202egnp.ipynb"}],
        )
    )
    try:
        sidebar = open_sidebar(lab, page)
        warnings = sidebar.locator(".jp-GpuSidebar-warning")
        warnings.first.wait_for()
        assert warnings.nth(0).inner_text() == "simulated scenario rejected: gpus[0].memory_used_mib must be ≥ 0"
        assert warnings.nth(1).inner_text() == "<b>bold</b> \ufffdevil"
        assert sidebar.locator("b").count() == 0
        row = card(sidebar, 2).locator(".jp-GpuProc.jp-mod-other")
        row.wait_for()
        user = row.locator(".jp-GpuProc-user").inner_text()
        assert user.startswith("a\ufffdevil") and "\u202e" not in user and len(user) <= 64
        assert "\u202e" not in row.get_attribute("title") and row.get_attribute("title").startswith("a\ufffdevil")
        assert "\u202e" not in row.inner_text()  # (the server withholds other users' program names)
        # The memory stays visible inside the card (a 10 KB name once pushed it 84,000 px away).
        memory = row.locator(".jp-GpuProc-memory").bounding_box()
        box = card(sidebar, 2).bounding_box()
        assert box["x"] <= memory["x"] and memory["x"] + memory["width"] <= box["x"] + box["width"] + 0.5
    finally:
        lab.scenario.update(lambda s: s["gpus"][2].__setitem__("processes", []))


def cards_unless_many(lab: Any) -> None:
    """Forget a compact/cards choice an earlier test left in this server's settings (the header
    button's two clicks are two saves in flight: on a loaded machine the earlier one can land last),
    so the sidebar starts as a user's would: cards for these three GPUs."""
    lab.forget_sidebar_settings()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_every_text_is_readable_in_both_themes(lab, page, artifacts, contrast, theme, dark):
    cards_unless_many(lab)
    show_an_idle_kernel_about_to_be_culled(page)
    sidebar = open_sidebar(lab, page)
    row = card(sidebar, 1).locator(".jp-GpuProc.jp-mod-idle")
    row.wait_for()
    theme(page, dark)
    try:
        # The IDLE row, its countdown, the summary line and the status bar (idle said in words too).
        assert row.locator(".jp-GpuProc-countdown").inner_text() == "shut down in 9 min"
        status = page.locator(".jp-GpuStatus")
        assert status.inner_text() == "2/3 GPUs in use · yours 3 GiB · idle kernel shut down in 9 min"
        assert "jp-mod-warning" in status.get_attribute("class")
        assert sidebar.locator(".jp-GpuSidebar-free").inner_text() == "free: GPU 2"
        contrast(
            page,
            "#jupyter-gpu-sidebar",
            ".jp-GpuStatus",
            must_include=(
                "jp-GpuProc-idleBadge",
                "jp-GpuProc-idleTime",
                "jp-GpuProc-countdown",
                "jp-GpuProc-notebook",
                "jp-GpuSidebar-free",
                "jp-GpuStatus",
                "jp-GpuCard-title",
            ),
        )
        page.screenshot(path=str(artifacts / f"sidebar-contrast-{'dark' if dark else 'light'}.png"))
        # The compact view: one line per GPU, the idle one marked in words.
        sidebar.locator(".jp-GpuSidebar-compact").click()
        lines = sidebar.locator(".jp-GpuLine")
        lines.first.wait_for()
        assert lines.count() == 3
        assert lines.nth(1).locator(".jp-GpuLine-who").inner_text() == "you (idle)"
        assert lines.nth(2).locator(".jp-GpuLine-who").inner_text() == "free"
        contrast(
            page,
            "#jupyter-gpu-sidebar",
            must_include=("jp-GpuLine-label", "jp-GpuLine-utilization", "jp-GpuLine-free", "jp-GpuLine-who"),
        )
        sidebar.locator(".jp-GpuSidebar-compact").click()  # back to cards, a setting kept for later tests
        sidebar.locator(".jp-GpuCard").first.wait_for()
        assert not page.errors
    finally:
        page.unroute_all(behavior="ignoreErrors")
        theme(page, False)


def line_boxes(locator: Any) -> int:
    """How many line boxes the (inline) text of ``locator`` takes: 1 when it is not broken."""
    return locator.evaluate(
        "node => { const r = document.createRange(); r.selectNodeContents(node); "
        "return new Set(Array.from(r.getClientRects()).map(b => Math.round(b.top))).size; }"
    )


def test_the_countdown_stays_on_one_line_at_250_px(lab, page, artifacts):
    cards_unless_many(lab)
    show_an_idle_kernel_about_to_be_culled(page)
    try:
        sidebar = open_sidebar(lab, page)
        row = card(sidebar, 1).locator(".jp-GpuProc.jp-mod-idle")
        row.wait_for()
        drag_side_panel_to_its_minimum(page)
        wait_until(lambda: sidebar.bounding_box()["width"] <= 251, what="a 250 px sidebar")
        assert sidebar.bounding_box()["width"] >= 249
        countdown = row.locator(".jp-GpuProc-countdown")
        assert countdown.inner_text() == "shut down in 9 min"
        assert line_boxes(countdown) == 1
        assert line_boxes(row.locator(".jp-GpuProc-idleTime")) == 1
        # Everything of the row stays inside its card.
        card_box = card(sidebar, 1).bounding_box()
        for part in (countdown, row.locator(".jp-GpuProc-shutdown"), row.locator(".jp-GpuProc-memory")):
            part_box = part.bounding_box()
            assert part_box["x"] + part_box["width"] <= card_box["x"] + card_box["width"] + 0.5
        page.screenshot(path=str(artifacts / "sidebar-250px-countdown.png"))
    finally:
        page.unroute_all(behavior="ignoreErrors")


def eight_gpus() -> dict[str, Any]:
    """Eight simulated A100s, all busy but GPUs 2 and 7 (GPU 5 holds only a display server)."""
    scenario = simulate.plausible_gpus(8)
    users = {0: ["alice"], 1: ["bob", "carol"], 3: ["dave"], 4: ["alice"], 6: ["erin", "bob"]}
    for index, names in users.items():
        scenario["gpus"][index]["processes"] = [
            {"pid": 4_200_000 + 10 * index + n, "memory_mib": 8192 * (n + 1), "user": name, "name": "python"}
            for n, name in enumerate(names)
        ]
        scenario["gpus"][index]["utilization"] = 30 + 8 * index
    scenario["gpus"][5]["processes"] = [
        {"pid": 4_200_099, "memory_mib": 2048, "user": "root", "name": "Xorg", "type": "compute"}
    ]
    return scenario


def test_eight_gpus_are_one_line_each_with_the_free_ones_named(lab_factory, page, artifacts, docs_screenshot):
    big = lab_factory(eight_gpus(), name="sidebar_eight")
    sidebar = open_sidebar(big, page)
    lines = sidebar.locator(".jp-GpuLine")
    lines.first.wait_for()
    # Above four GPUs the sidebar is compact by default: one line per GPU, all on one screen.
    assert lines.count() == 8
    assert sidebar.locator(".jp-GpuCard").count() == 0
    assert sidebar.locator(".jp-GpuSidebar-compact").get_attribute("aria-pressed") == "true"
    assert sidebar.locator(".jp-GpuSidebar-free").inner_text() == "free: GPU 2, 7"
    heights = [round(lines.nth(i).locator(".jp-GpuLine-row").bounding_box()["height"]) for i in range(8)]
    # One text line each, or two where who is on it does not fit beside the figures at this width
    # (a second line rather than an ellipsis on the names; tests/browser/test_sidebar_250.py).
    assert max(heights) < 40, heights
    assert heights[2] < 30  # "free": one line
    assert lines.nth(7).bounding_box()["y"] + lines.nth(7).bounding_box()["height"] <= page.viewport_size["height"]
    second = lines.nth(1)
    assert second.locator(".jp-GpuLine-label").inner_text() == "GPU 1"
    assert second.locator(".jp-GpuLine-utilization").inner_text() == "38 %"
    assert second.locator(".jp-GpuLine-free").inner_text() == "55.5 GiB"  # 80 - 8 - 16 - reserved
    assert second.locator(".jp-GpuLine-who").inner_text() == "bob, carol"
    assert lines.nth(2).locator(".jp-GpuLine-who").inner_text() == "free"
    assert "jp-mod-free" in lines.nth(7).get_attribute("class")
    assert lines.nth(5).locator(".jp-GpuLine-who").inner_text() == "root"  # 2 GiB used: not free
    if os.environ.get("JUPYTER_GPU_UPDATE_DOCS") == "1":
        page.wait_for_timeout(1000)
    page.screenshot(path=str(artifacts / "sidebar-compact.png"))
    docs_screenshot(page, "sidebar-compact.png")
    # A line opens its GPU's card (processes, chart) and closes it again.
    second.locator(".jp-GpuLine-row").click()
    opened = second.locator(".jp-GpuCard")
    opened.wait_for()
    assert second.locator(".jp-GpuLine-row").get_attribute("aria-expanded") == "true"
    assert opened.locator(".jp-GpuProc-user").all_inner_texts() == ["carol", "bob"]
    second.locator(".jp-GpuLine-row").click()
    opened.wait_for(state="hidden")
    # The header's toggle switches to a card per GPU and back.
    sidebar.locator(".jp-GpuSidebar-compact").click()
    wait_until(lambda: sidebar.locator(".jp-GpuCard").count() == 8, what="eight cards")
    assert sidebar.locator(".jp-GpuLine").count() == 0
    assert sidebar.locator(".jp-GpuSidebar-linesHead").is_hidden()  # no column heads over cards
    sidebar.locator(".jp-GpuSidebar-compact").click()
    wait_until(lambda: sidebar.locator(".jp-GpuLine").count() == 8, what="eight lines again")
    assert not page.errors
