"""The JupyterLab face in Chinese (issue 32): Settings → Language = 中文 (zh_CN) and the extension speaks it.

The server's own settings folder says ``@jupyterlab/translation-extension:plugin`` → ``{"locale":
"zh_CN"}`` (as Settings → Language saves it), with the zh-CN language pack installed: JupyterLab
asks its translation server for ``zh_CN``, which answers the pack's catalogs and ours
(``jupyter_gpu/locale/zh_CN/LC_MESSAGES/jupyter_gpu.json`` through the ``jupyterlab.locale``
entry point), and the extension's words come from ``translator.load('jupyter_gpu')``. Shown: the
sidebar, the status-bar item, the out-of-memory report's button and its question, the restart
offer and its question; the Settings editor's entry of the GPU monitor; then, with the setting back
to its default, the same page in English.
Notebook 7 (``jupyter notebook``) with the same setting: its GPU item, the side panel, and the two
offers in a notebook, in Chinese too.
"""

# ruff: noqa: RUF001  (Chinese text is written with full-width punctuation: docs/i18n.md)

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from offer_payloads import OOM_MIME, RESTART_MIME, display_cell, oom_report, restart_offer
from panel_cells import open_notebook
from support import wait_until

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

NOTEBOOK = "offers.ipynb"
TRANSLATION_PLUGIN = "@jupyterlab/translation-extension/plugin"
#: How many lines each ` · `-separated part of the sidebar's header line takes on screen.
LINES_PER_PART = """() => {
  const text = document.querySelector('#jupyter-gpu-sidebar .jp-GpuSidebar-summary').firstChild;
  let offset = 0;
  return text.data.split(' · ').map(part => {
    const range = document.createRange();
    range.setStart(text, offset);
    range.setEnd(text, offset + part.length);
    offset += part.length + 3;
    return new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size;
  });
}"""


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Any]) -> Any:
    """Three simulated A100s, GPU 0 busy with alice's job; JupyterLab's language set to zh_CN."""
    scenario = simulate.plausible_gpus(3)
    scenario["gpus"][0]["processes"] = [{"pid": 4_000_001, "memory_mib": 20480, "user": "alice", "name": "python"}]
    return lab_factory(scenario, name="lab_i18n", settings={TRANSLATION_PLUGIN: {"locale": "zh_CN"}})


def offers_cell() -> str:
    """A cell that displays a restart offer and an out-of-memory report with one step (free memory),
    as the kernel displays them: output of this session, so trusted, with buttons."""
    restart = restart_offer(["%load_ext jupyter_gpu", "%gpu_select 1 --growth"], offer_id="i18n")
    oom = oom_report("jupyter_gpu: PyTorch ran out of GPU memory on GPU 1.", [{"kind": "free", "memory": 2 * 1024**3}])
    return display_cell((RESTART_MIME, restart), (OOM_MIME, oom))


def open_sidebar(lab: Any, page: Any) -> Any:
    lab.open(page)
    sidebar = page.locator("#jupyter-gpu-sidebar")
    if not sidebar.is_visible():
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpu-sidebar"]').click()
    sidebar.wait_for(state="visible")
    sidebar.locator(".jp-GpuCard").first.wait_for()
    return sidebar


def run_offers(app: Any, page: Any) -> Any:
    """Open the notebook (JupyterLab or Notebook 7), run its cell; the cell (its two rendered offers
    wait inside)."""
    cell = open_notebook(app, page, NOTEBOOK).first
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    cell.locator(".jp-GpuOom-actions").wait_for(timeout=60_000)
    return cell


def offers_speak_chinese(app: Any, page: Any, artifacts: Path) -> None:
    """Run :func:`offers_cell`: the restart offer and the out-of-memory report, and their questions,
    in Chinese (JupyterLab and Notebook 7: the same renderers); no error of ours on the page."""
    front = "lab" if app.app == "jupyterlab" else "notebook7"
    cell = run_offers(app, page)
    offer = cell.locator(".jp-GpuRestart")
    assert offer.locator(".jp-GpuRestart-text").inner_text() == "新内核的 GPU 方案：%gpu_select 1 --growth"
    offer.get_by_role("button", name="重启内核并应用").click()
    dialog = page.locator(".jp-Dialog", has_text="重启内核并应用 GPU 方案？")
    dialog.wait_for(timeout=30_000)
    body = dialog.locator(".jp-Dialog-body").inner_text()
    assert "变量" in body and "%gpu_select 1 --growth" in body, body
    assert dialog.get_by_label("不再询问").is_visible()
    page.screenshot(path=str(artifacts / f"{front}-zh_CN-restart-dialog.png"))
    dialog.get_by_role("button", name="取消").click()
    dialog.wait_for(state="detached")

    report = cell.locator(".jp-GpuOom")
    report.get_by_role("button", name="释放显存（2 GiB 缓存）").click()
    dialog = page.locator(".jp-Dialog", has_text="释放显存？")
    dialog.wait_for(timeout=30_000)
    assert "您的变量会保留" in dialog.locator(".jp-Dialog-body").inner_text()
    assert dialog.get_by_role("button", name="释放", exact=True).is_visible()
    page.screenshot(path=str(artifacts / f"{front}-zh_CN-oom-dialog.png"))
    dialog.get_by_role("button", name="取消").click()
    dialog.wait_for(state="detached")
    own = [e for e in page.errors if "jupyter-gpu" in e or "jupyter_gpu" in e]
    assert not own, own
    app.shutdown_all_kernels()


def test_the_sidebar_status_bar_and_dialogs_speak_chinese(lab: Any, page: Any, artifacts: Path) -> None:
    lab.write_notebook(NOTEBOOK, [offers_cell()])
    sidebar = open_sidebar(lab, page)
    # JupyterLab itself is in Chinese (the language pack): the setting took
    page.locator(".jp-Dialog-button, .lm-MenuBar-itemLabel", has_text="文件").first.wait_for()

    assert sidebar.locator(".jp-GpuSidebar-title").text_content() == "GPU"
    assert sidebar.locator(".jp-GpuSidebar-compact").inner_text() == "紧凑"
    wait_until(lambda: sidebar.locator(".jp-GpuSidebar-free").inner_text() == "空闲：GPU 1, 2", what="空闲：GPU 1, 2")
    summary = sidebar.locator(".jp-GpuSidebar-summary").inner_text()
    assert "模拟" in summary and "闲置阈值" in summary and "更新于" in summary, summary
    # At 250 px the header line wraps between its parts, never inside one, in Chinese too
    assert page.evaluate(LINES_PER_PART) == [1] * len(summary.split(" · ")), summary
    busy = sidebar.locator('.jp-GpuCard[data-gpu-index="0"]')
    assert busy.locator(".jp-GpuCard-sectionTitle", has_text="其他进程").is_visible()
    assert busy.locator(".jp-GpuCard-inUse").inner_text() == "1 个进程"
    idle_card = sidebar.locator('.jp-GpuCard[data-gpu-index="2"]')
    assert idle_card.locator(".jp-GpuCard-inUse").inner_text() == "空闲"
    assert idle_card.locator(".jp-GpuCard-empty").inner_text() == "没有进程"
    assert "最近" in sidebar.locator(".jp-GpuHistory-window").first.inner_text()

    status = page.locator(".jp-GpuStatus")
    wait_until(lambda: re.fullmatch(r"1/3 个 GPU 使用中", status.inner_text()), what="the status bar in Chinese")
    title = status.get_attribute("title") or ""
    assert "3 个 GPU 中 1 个使用中" in title and "；" in title, title
    assert (status.get_attribute("aria-label") or "").endswith("。打开 GPU 监视器。")
    page.screenshot(path=str(artifacts / "lab-zh_CN-sidebar.png"))

    offers_speak_chinese(lab, page, artifacts)


def test_the_settings_editor_shows_the_gpu_monitors_settings_in_chinese(lab: Any, page: Any, artifacts: Path) -> None:
    """Settings → Settings Editor: the plugin's entry, its title and its fields' titles come from our
    catalog through JupyterLab's server (jupyter_gpu/server/lab_settings.py)."""
    lab.open(page)
    page.evaluate("() => window.jupyterapp.commands.execute('settingeditor:open', {query: 'GPU'})")
    editor = page.locator(".jp-SettingsPanel, .jp-SettingsEditor").first
    editor.wait_for(timeout=60_000)
    entry = page.locator(".jp-PluginList-entry", has_text="GPU 监视器").first
    entry.wait_for(timeout=30_000)
    entry.click()
    for title in ("刷新间隔（毫秒）", "历史（分钟）", "重启前询问", "紧凑视图"):
        page.get_by_text(title, exact=True).first.wait_for(timeout=30_000)
    page.screenshot(path=str(artifacts / "lab-zh_CN-settings-editor.png"))


def test_english_by_default(lab: Any, page: Any) -> None:
    """The language setting at its default (no choice saved): the same views in English."""
    lab.api("PUT", "lab/api/settings/@jupyterlab/translation-extension:plugin", {"raw": json.dumps({})})
    try:
        sidebar = open_sidebar(lab, page)
        assert sidebar.locator(".jp-GpuSidebar-title").text_content() == "GPUs"  # (CSS writes it in capitals)
        wait_until(lambda: sidebar.locator(".jp-GpuSidebar-free").inner_text() == "free: GPU 1, 2", what="English")
        status = page.locator(".jp-GpuStatus")
        wait_until(lambda: status.inner_text() == "1/3 GPUs in use", what="the status bar in English")
        cell = run_offers(lab, page)
        cell.locator(".jp-GpuRestart").get_by_role("button", name="Restart kernel and apply").click()
        dialog = page.locator(".jp-Dialog", has_text="Restart kernel and apply the GPU plan?")
        dialog.wait_for(timeout=30_000)
        dialog.get_by_role("button", name="Cancel").click()
        dialog.wait_for(state="detached")
        cell.locator(".jp-GpuOom").get_by_role("button", name="Free memory (2 GiB of cache)").click()
        dialog = page.locator(".jp-Dialog", has_text="Free GPU memory?")
        dialog.wait_for(timeout=30_000)
        dialog.get_by_role("button", name="Cancel").click()
    finally:
        lab.shutdown_all_kernels()
        lab.api(
            "PUT",
            "lab/api/settings/@jupyterlab/translation-extension:plugin",
            {"raw": json.dumps({"locale": "zh_CN"})},
        )


# -- Notebook 7 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notebook_zh(lab_factory: Callable[..., Any]) -> Any:
    """Notebook 7 (``jupyter notebook``) on the same GPUs, its language set to zh_CN as Settings →
    Language saves it (Notebook 7 reads JupyterLab's setting and translation server)."""
    pytest.importorskip("notebook", reason="Notebook 7 is not installed (pip install notebook)")
    scenario = simulate.plausible_gpus(3)
    scenario["gpus"][0]["processes"] = [{"pid": 4_000_001, "memory_mib": 20480, "user": "alice", "name": "python"}]
    return lab_factory(
        scenario, name="notebook7_i18n", app="notebook", settings={TRANSLATION_PLUGIN: {"locale": "zh_CN"}}
    )


def test_notebook_7_speaks_chinese(notebook_zh: Any, page: Any, artifacts: Path) -> None:
    """The top-area GPU item, the side panel it opens, and in a notebook the restart offer and the
    out-of-memory report with their questions: Chinese, as in JupyterLab."""
    app = notebook_zh
    app.write_notebook(NOTEBOOK, [offers_cell()])
    app.open(page, path="tree")
    item = page.locator(".jp-GpuStatus")
    item.wait_for()
    wait_until(lambda: item.inner_text() == "1/3 个 GPU 使用中", what="the GPU item in Chinese")
    assert "3 个 GPU 中 1 个使用中" in (item.get_attribute("title") or "")
    item.click()  # opens the left side panel on the GPU monitor
    sidebar = page.locator("#jupyter-gpu-sidebar")
    sidebar.wait_for(state="visible")
    sidebar.locator(".jp-GpuCard").first.wait_for()
    assert sidebar.locator(".jp-GpuSidebar-compact").inner_text() == "紧凑"
    wait_until(lambda: sidebar.locator(".jp-GpuSidebar-free").inner_text() == "空闲：GPU 1, 2", what="空闲：GPU 1, 2")
    assert sidebar.locator('.jp-GpuCard[data-gpu-index="2"] .jp-GpuCard-inUse').inner_text() == "空闲"
    assert sidebar.locator('.jp-GpuCard[data-gpu-index="0"] .jp-GpuCard-inUse').inner_text() == "1 个进程"
    page.screenshot(path=str(artifacts / "notebook7-zh_CN-sidebar.png"))

    offers_speak_chinese(app, page, artifacts)
