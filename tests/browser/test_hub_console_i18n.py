"""The console page in headless Chromium in Chinese and in English (docs/i18n.md): a browser whose
language is zh-CN gets the page, its tables, its pager, its GPU cards and the usage table in Chinese,
also after the script's next poll; ``?lang=en`` gives the same browser English. 60 users of the
stand-in hub (hub_fake), one kernel each, on simulated GPUs holding their kernels' processes."""

from __future__ import annotations

# ruff: noqa: RUF001  (Chinese text has full-width punctuation)
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_page import USAGE_ROWS, USERS_ROWS, open_console
from hub_service import crowd
from playwright.sync_api import expect

from jupyter_gpu.core import i18n

pytestmark = pytest.mark.browser
USERS = [f"user{n:02d}" for n in range(60)]


@pytest.fixture
def console_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv(i18n.ENV, raising=False)  # the browser's language decides (conftest forces English)
    with crowd(tmp_path, USERS, kernels=1, gpus=4) as url:
        yield url


def test_a_chinese_browser_gets_the_console_in_chinese(browser: Any, console_url: str) -> None:
    page = open_console(browser, console_url, "admin-token", wait_for=(USERS_ROWS, USAGE_ROWS), locale="zh-CN")
    try:
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        assert page.title() == "GPU 控制台 – jupyter-gpu"
        assert page.locator("h1").text_content() == "GPU 控制台"
        headers = page.locator("#jg-users th").all_text_contents()
        assert headers[:6] == ["用户", "笔记本", "状态", "显存", "闲置时长", "回收倒计时"]
        assert page.locator("#jg-users-pages").text_content() == "‹ 上一页第 1–50 位用户，共 60 位下一页 ›"
        first = page.locator("#jg-users tr.jg-user").first
        assert first.locator("td").nth(1).text_content() == "1 个内核"
        assert page.locator("#jg-users tr.jg-user + tr button").first.text_content() == "关闭"
        card = page.locator(".jg-gpu[data-index='0']")
        assert card.locator(".jg-holders").text_content().startswith("占用者：user56 ")
        assert card.locator(".jg-holders").text_content().endswith("，另有 10 人")
        assert "利用率" in card.locator(".jg-legend").text_content()
        assert page.locator("#jg-usage tr.jg-user").first.locator("td").nth(1).text_content() == "1 个笔记本"
        expect(page.locator("#jg-usage-status")).to_have_text(
            re.compile(r"^自 .*（用量文件中的小时数，每 10 min 采样一次）$")
        )
        # The script's next poll (api/console?lang=zh_CN) keeps the page's language.
        drawn = page.locator("body").get_attribute("data-rendered")
        expect(page.locator("body")).not_to_have_attribute("data-rendered", drawn or "", timeout=20_000)
        assert page.locator("#jg-status").text_content().startswith("管理员视图 · 模拟 GPU")
        assert page.errors == []
    finally:
        page.context.close()


def test_lang_en_gives_a_chinese_browser_english(browser: Any, console_url: str) -> None:
    page = open_console(browser, console_url + "?lang=en", "admin-token", wait_for=(USERS_ROWS,), locale="zh-CN")
    try:
        assert page.evaluate("document.documentElement.lang") == "en"
        assert page.locator("h1").text_content() == "GPU console"
        assert page.locator("#jg-users tr.jg-user").first.locator("td").nth(1).text_content() == "1 kernel"
        assert page.locator("#jg-users-pages").text_content() == "‹ previoususers 1–50 of 60next ›"
        assert page.locator("#jg-status").text_content().startswith("admin view · simulated GPUs")
        assert page.errors == []
    finally:
        page.context.close()
