"""The sidebar on a GPU in MIG mode: slices under their GPU, "n/a on MIG", processes per slice."""

from __future__ import annotations

from typing import Any

import pytest
from support import A100_MIG_UUIDS, UNDER_LOAD_S, a100_mig_scenario, wait_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab(lab_factory: Any) -> Any:
    return lab_factory(a100_mig_scenario(), name="sidebar_mig")


def open_sidebar(lab: Any, page: Any) -> Any:
    lab.forget_sidebar_settings()  # cards, whatever view an earlier test's last click was saving
    lab.open(page)
    sidebar = page.locator("#jupyter-gpu-sidebar")
    if not sidebar.is_visible():
        page.locator('.jp-SideBar [title="GPU monitor"]').click()
    sidebar.wait_for(state="visible")
    return sidebar


def test_slices_are_shown_under_their_gpu(lab, page, artifacts, docs_screenshot):
    sidebar = open_sidebar(lab, page)
    mig = sidebar.locator('.jp-GpuCard[data-gpu-index="0"]')
    whole = sidebar.locator('.jp-GpuCard[data-gpu-index="1"]')
    slices = mig.locator(".jp-GpuSlice")
    slices.first.wait_for()
    assert slices.count() == 3
    assert [slices.nth(i).locator(".jp-GpuSlice-title").inner_text() for i in range(3)] == [
        "0:0 · MIG 3g.40gb",
        "0:1 · MIG 2g.20gb",
        "0:2 · MIG 1g.10gb",
    ]
    assert [slices.nth(i).get_attribute("data-mig-uuid") for i in range(3)] == list(A100_MIG_UUIDS)
    assert A100_MIG_UUIDS[0] in slices.nth(0).locator(".jp-GpuSlice-title").get_attribute("title")
    # "n/a on MIG" rather than 0 where NVML measures nothing
    assert mig.locator(".jp-GpuCard-utilization").inner_text() == "util n/a on MIG"
    assert slices.nth(1).locator(".jp-GpuSlice-utilization").inner_text() == "util n/a on MIG"
    # Elsewhere utilization is said once per card, in the chart's legend (issue 31: not twice).
    assert whole.locator(".jp-GpuCard-utilization").is_hidden()
    wait_until(
        lambda: whole.locator(".jp-GpuHistory-now.jp-mod-utilization").inner_text() == "20 %",
        what="the legend's utilization",
    )
    assert whole.locator(".jp-GpuSlices").is_hidden()
    # each slice's memory bar and processes; other users' processes only under their slice
    meter = slices.nth(0).get_by_role("meter", name="Memory")
    assert "29.3 GiB of 39.3 GiB used" in meter.get_attribute("aria-valuetext")
    assert slices.nth(0).locator(".jp-GpuSlice-process").inner_text().startswith("bob · ")
    assert slices.nth(1).locator(".jp-GpuSlice-process").count() == 0
    assert slices.nth(2).locator(".jp-GpuSlice-process").inner_text().startswith("carol · ")
    assert mig.locator(".jp-GpuProc.jp-mod-other").count() == 0
    # Profiles in full at the default width (the utilization note moves to the next line instead).
    for i in range(3):
        title = slices.nth(i).locator(".jp-GpuSlice-title")
        assert title.evaluate("n => n.scrollWidth <= n.clientWidth"), title.inner_text()
    # The free slice is named in the summary line and counted in the status bar.
    assert sidebar.locator(".jp-GpuSidebar-free").inner_text() == "free: MIG 0:1"
    status = page.locator(".jp-GpuStatus")
    assert status.inner_text() == "2/2 GPUs in use · MIG 1/3 free"
    assert "1 of 3 MIG slices free" in status.get_attribute("title")
    page.wait_for_timeout(500)
    docs_screenshot(page, "sidebar-mig.png")
    # a slice created while the page is open appears without a reload
    lab.scenario.update(
        lambda s: s["gpus"][0]["mig_slices"].append(
            {
                "profile": "1g.10gb",
                "gpu_instance_id": 10,
                "compute_instance_id": 0,
                "memory_total_mib": 9728,
                "processes": [{"pid": 4_100_005, "memory_mib": 100, "user": "erin", "name": "python"}],
            }
        )
    )
    wait_until(lambda: slices.count() == 4, what="the new slice", timeout_s=UNDER_LOAD_S)
    wait_until(lambda: status.inner_text() == "2/2 GPUs in use · MIG 1/4 free", what="four slices counted")
    page.screenshot(path=str(artifacts / "sidebar-mig.png"))
    assert not page.errors


def test_your_kernel_on_a_slice_is_marked_yours(lab, page):
    lab.write_notebook("on_a_slice.ipynb", ["1"])
    session = lab.api(
        "POST",
        "api/sessions",
        {"path": "on_a_slice.ipynb", "name": "on_a_slice.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    try:
        kernel_id = session["kernel"]["id"]
        pid = wait_until(
            lambda: next(
                (k["pid"] for k in lab.snapshot()["kernels"] if k["kernel_id"] == kernel_id and k["pid"]), None
            ),
            timeout_s=60,
            what="the kernel's PID",
        )
        lab.scenario.update(
            lambda s: s["gpus"][0]["mig_slices"][1].__setitem__("processes", [{"pid": pid, "memory_mib": 2048}])
        )
        sidebar = open_sidebar(lab, page)
        slice_ = sidebar.locator(f'.jp-GpuSlice[data-mig-uuid="{A100_MIG_UUIDS[1]}"]')
        mine = slice_.locator(".jp-GpuSlice-process.jp-mod-own")
        mine.wait_for(timeout=60_000)
        assert mine.inner_text() == "yours · on_a_slice.ipynb · 2 GiB"
        assert "(yours: 2 GiB)" in slice_.locator(".jp-GpuMemory-label").inner_text()
        # the card keeps its kernel controls for it
        card = sidebar.locator('.jp-GpuCard[data-gpu-index="0"]')
        assert card.locator(".jp-GpuProc.jp-mod-own .jp-GpuProc-notebook").inner_text() == "on_a_slice.ipynb"
    finally:
        lab.scenario.update(lambda s: s["gpus"][0]["mig_slices"][1].__setitem__("processes", []))
        lab.shutdown_all_kernels()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_mig_rows_are_readable_in_both_themes_and_in_one_line(lab, page, contrast, theme, dark):
    sidebar = open_sidebar(lab, page)
    sidebar.locator(".jp-GpuSlice-process").first.wait_for()
    theme(page, dark)
    try:
        contrast(
            page,
            "#jupyter-gpu-sidebar",
            ".jp-GpuStatus",
            must_include=("jp-GpuSlice-title", "jp-GpuSlice-utilization", "jp-GpuSlice-process", "jp-GpuSidebar-free"),
        )
        # The compact view counts the GPU's free slices on its line.
        sidebar.locator(".jp-GpuSidebar-compact").click()
        line = sidebar.locator('.jp-GpuLine[data-gpu-index="0"]')
        line.wait_for()
        assert line.locator(".jp-GpuLine-utilization").inner_text() == "n/a"
        assert line.locator(".jp-GpuLine-free").inner_text().endswith(" MIG")
        assert line.locator(".jp-GpuLine-who").inner_text().startswith("bob, carol")
        contrast(page, "#jupyter-gpu-sidebar", must_include=("jp-GpuLine-free", "jp-GpuLine-who"))
        sidebar.locator(".jp-GpuSidebar-compact").click()
        sidebar.locator(".jp-GpuSlice").first.wait_for()
        assert not page.errors
    finally:
        theme(page, False)
