"""The sidebar at its narrowest (about 250 px: Lab's default side panel, Notebook 7's), in
JupyterLab and Notebook 7, light and dark (issue 31, item 9): who is on each GPU and its free memory
are never clipped (a long name takes a second line), the compact columns line up from GPU 0 to 15,
a lost GPU's bar is not a free GPU's, the tooltips hold the whole names, card titles keep
"[simulated]", and every text keeps WCAG AA contrast.
"""

from __future__ import annotations

from typing import Any

import pytest
from side_panel import drag_side_panel_to_its_minimum
from support import wait_until

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

LONG = "zhang_wei_research_group"
USERS = {1: [LONG], 3: ["wu_hao", "alice"], 9: ["bob"], 12: ["carol", "dave", "erin"]}


def sixteen_gpus() -> dict[str, Any]:
    scenario = simulate.plausible_gpus(16)
    for index, names in USERS.items():
        scenario["gpus"][index]["processes"] = [
            {"pid": 4_300_000 + 10 * index + n, "memory_mib": 4096 * (n + 1), "user": name, "name": "python"}
            for n, name in enumerate(names)
        ]
    scenario["gpus"][14]["fault"] = "lost"
    return scenario


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def app(request: pytest.FixtureRequest, lab_factory: Any) -> Any:
    if request.param == "notebook":
        pytest.importorskip("notebook", reason="Notebook 7 is not installed")
    return lab_factory(sixteen_gpus(), name=f"sidebar250_{request.param}", app=request.param)


def open_narrow_sidebar(app: Any, page: Any) -> Any:
    if app.app == "notebook":
        # Notebook 7's side panel is a share of the window (1 : 2.5 : 1): about 250 px at 1120 px.
        page.set_viewport_size({"width": 1120, "height": 800})
    app.open(page)
    if app.app == "notebook":
        page.locator(".jp-GpuStatus").click()
    else:
        page.locator('.jp-SideBar [title="GPU monitor"]').click()
    sidebar = page.locator("#jupyter-gpu-sidebar")
    sidebar.wait_for(state="visible")
    if sidebar.bounding_box()["width"] > 262 and app.app != "notebook":
        drag_side_panel_to_its_minimum(page)
    wait_until(lambda: sidebar.bounding_box()["width"] <= 262, what="a sidebar about 250 px wide")
    return sidebar


CLIPPED_JS = """
nodes => nodes.filter(n => n.offsetParent !== null && n.textContent.trim() !== '' &&
  (n.scrollWidth > n.clientWidth + 1 || n.scrollHeight > n.clientHeight + 1))
  .map(n => n.className + ': ' + n.textContent)
"""


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_who_and_free_memory_are_readable_at_250_px(app, page, artifacts, contrast, theme, dark):
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "jupyter-gpu/usage" in request.url else None)
    sidebar = open_narrow_sidebar(app, page)
    lines = sidebar.locator(".jp-GpuLine")
    wait_until(lambda: lines.count() == 16, what="16 compact lines")
    theme(page, dark)
    page.wait_for_timeout(500)
    # Who and free memory: whole, never clipped or cut with an ellipsis (a second line instead).
    clipped = sidebar.locator(".jp-GpuLine-who, .jp-GpuLine-free, .jp-GpuLine-label").evaluate_all(CLIPPED_JS)
    assert clipped == [], clipped
    assert lines.nth(1).locator(".jp-GpuLine-who").inner_text() == LONG
    assert lines.nth(12).locator(".jp-GpuLine-who").inner_text() == "carol, dave, erin"
    assert lines.nth(14).locator(".jp-GpuLine-who").inner_text() == "cannot be read"
    assert LONG in lines.nth(1).locator(".jp-GpuLine-row").get_attribute("title")  # the tooltip: whole
    # The columns line up on every line, GPU 10 to 15 included (and under the heads).
    rows = [sidebar.locator(".jp-GpuSidebar-linesHead")] + [lines.nth(i).locator(".jp-GpuLine-row") for i in range(16)]
    for column in ("meter", "utilization", "free"):
        starts = {round(row.locator(f".jp-GpuLine-{column}").bounding_box()["x"]) for row in rows}
        assert len(starts) == 1, (column, starts)
    # Everything stays inside the sidebar.
    right = sidebar.bounding_box()["x"] + sidebar.bounding_box()["width"]
    for i in range(16):
        who = lines.nth(i).locator(".jp-GpuLine-who").bounding_box()
        assert who["x"] + who["width"] <= right + 0.5, i
    # A lost GPU's bar is not the grey bar of a free one.
    background = "n => getComputedStyle(n).backgroundImage"
    assert "gradient" in lines.nth(14).locator(".jp-GpuLine-meter").evaluate(background)
    assert "gradient" not in lines.nth(15).locator(".jp-GpuLine-meter").evaluate(background)
    contrast(page, "#jupyter-gpu-sidebar", must_include=("jp-GpuLine-who", "jp-GpuLine-free"))
    name = f"sidebar-250-{app.app}-{'dark' if dark else 'light'}"
    page.screenshot(path=str(artifacts / f"{name}-compact.png"))

    # The cards: the whole title ("[simulated]" kept), other users' names whole.
    sidebar.locator(".jp-GpuSidebar-compact").click()
    wait_until(lambda: sidebar.locator(".jp-GpuCard").count() == 16, what="16 cards")
    first = sidebar.locator('.jp-GpuCard[data-gpu-index="1"]')
    first.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    title = first.locator(".jp-GpuCard-title")
    assert title.inner_text().endswith("[simulated]")
    texts = ".jp-GpuCard-title, .jp-GpuProc-user, .jp-GpuProc-memory, .jp-GpuMemory-label"
    clipped = first.locator(texts).evaluate_all(CLIPPED_JS)
    assert clipped == [], clipped
    assert first.locator(".jp-GpuProc-user").inner_text() == LONG
    page.screenshot(path=str(artifacts / f"{name}-cards.png"))
    sidebar.locator(".jp-GpuSidebar-compact").click()  # back to lines for the next test
    theme(page, False)
    # No hub service here: "your GPU use" is never asked (no 404 logged on every page load).
    assert asked == []
