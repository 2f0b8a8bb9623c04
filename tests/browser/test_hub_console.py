"""The console page at 200 users x 2 kernels, in headless Chromium: paged users, filter by user,
sortable columns (aria-sort), a "held by" line per GPU, charts with a time axis and a legend, and the
usage table whose numbers are those of the CSV export. The service runs against the stand-in hub API
of hub_fake (200 user servers) on simulated GPUs holding their kernels' processes; tokens ride on
the browser's Authorization header."""

from __future__ import annotations

import csv
import io
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_page import USAGE_ROWS, USERS_ROWS, open_console
from hub_service import crowd
from support import wait_until

pytestmark = pytest.mark.browser
USERS = [f"user{n:03d}" for n in range(200)]


@pytest.fixture
def crowd_url(tmp_path: Path) -> Iterator[str]:
    with crowd(tmp_path, USERS, kernels=2, gpus=8) as url:
        yield url


def test_200_users_are_paged_filtered_and_sorted(browser: Any, crowd_url: str) -> None:
    page = open_console(browser, crowd_url, "admin-token", wait_for=(USERS_ROWS, USAGE_ROWS))
    try:
        users = page.locator("#jg-users tr.jg-user")
        assert users.count() == 50 and page.locator("#jg-users tbody tr").count() == 150  # 50 users, 2 kernels each
        assert page.locator("#jg-users-pages").text_content().count("users 1\u201350 of 200") == 1
        assert users.first.get_attribute("data-user") == "user000"
        # Every row is laid out on the header's columns, and a row far below the screen is not
        # drawn until it comes near (content-visibility: the first paint draws what can be seen).
        header = column_edges(page.locator("#jg-users thead tr"))
        assert column_edges(page.locator("#jg-users tbody tr").nth(1)) == header  # a kernel's row
        assert column_edges(users.first)[:4] == header[:4]  # a user's: its last cell spans three
        # a kernel's state: its execution state, then the mark of idle past the servers' threshold
        # (it read "idle · idle": the two words mean different things)
        state = page.locator("#jg-users tbody tr").nth(1).locator("td").nth(2)
        assert state.inner_text() == "idle · over the idle limit"
        far = users.nth(49).locator("td").first
        assert not drawn(far)
        users.nth(49).scroll_into_view_if_needed()
        wait_until(lambda: drawn(far), what="the 50th user's row drawn once scrolled to")
        assert far.inner_text() == "user049" and column_edges(page.locator("#jg-users tbody tr").nth(148)) == header
        page.locator("#jg-users-pages button", has_text="next").click()
        assert users.first.get_attribute("data-user") == "user050"
        header = page.locator("#jg-users th[data-sort='gpu_memory']")
        header.click()  # most GPU memory first: user199 holds 2 x 455 MiB
        assert header.get_attribute("aria-sort") == "descending"
        assert page.locator("#jg-users th[data-sort='name']").get_attribute("aria-sort") == "none"
        assert users.first.get_attribute("data-user") == "user199"
        header.press("Enter")
        assert header.get_attribute("aria-sort") == "ascending" and users.first.get_attribute("data-user") == "user000"
        page.fill("#jg-filter", "user12")  # user120-user129
        assert users.count() == 10 and page.locator("#jg-usage tr.jg-user").count() == 10
        assert page.locator("#jg-users-pages button").count() == 0
        assert page.errors == []
    finally:
        page.context.close()


def column_edges(row: Any) -> list[int]:
    """The left edges of a table row's cells, in CSS pixels."""
    return row.evaluate("row => Array.from(row.children, cell => Math.round(cell.getBoundingClientRect().left))")


def drawn(cell: Any) -> bool:
    """Whether the browser renders ``cell`` now: false while its row is skipped as off screen."""
    return cell.evaluate("cell => cell.checkVisibility({contentVisibilityAuto: true})")


def test_gpu_cards_say_who_holds_them_and_chart_with_a_time_axis_and_a_legend(browser: Any, crowd_url: str) -> None:
    page = open_console(browser, crowd_url, "admin-token", wait_for=(USERS_ROWS, USAGE_ROWS))
    try:
        card = page.locator(".jg-gpu[data-index='7']")
        holders = card.locator(".jg-holders").text_content()
        # GPU 7 holds user007, 015, ..., 199 (25 users): the five holding most, largest first.
        assert holders.startswith("held by user199 910 MiB, user191 894 MiB,") and holders.endswith(" and 20 more")
        # The one rule's words for this viewer, as every face says them (core/availability.py)
        assert card.locator(".jg-availability").text_content() == "in use by others"
        page.wait_for_function("document.querySelectorAll('.jg-gpu .jg-axis span').length >= 24", timeout=60_000)
        assert card.locator(".jg-axis span").count() == 3
        legend = card.locator(".jg-legend").text_content()
        assert "utilization" in legend and "memory" in legend and "%" in legend
        assert page.errors == []
    finally:
        page.context.close()


def test_the_usage_table_shows_the_numbers_of_the_csv_export(browser: Any, crowd_url: str) -> None:
    page = open_console(browser, crowd_url, "admin-token", wait_for=(USERS_ROWS, USAGE_ROWS))
    try:
        page.select_option("#jg-window", "day")
        page.wait_for_function("document.getElementById('jg-csv').href.includes('window=day')")
        href = page.locator("#jg-csv").get_attribute("href")
        request = urllib.request.Request(
            crowd_url + href.split("&_xsrf")[0], headers={"Authorization": "token admin-token"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            exported = list(csv.reader(io.StringIO(answer.read().decode())))
        assert exported[0] == ["user", "notebook", "gpu_hours", "gib_hours", "busy_hours", "idle_hours"]
        assert len(exported) == 1 + 400  # every user's two notebooks
        shown: list[list[str]] = []
        for _ in range(4):  # the four pages of 50 users
            for row in page.locator("#jg-usage tr.jg-notebook").all():
                user = row.get_attribute("data-user")
                cells = row.locator("td").all_text_contents()
                shown.append([user or "", *cells[1:]])
            following = page.locator("#jg-usage-pages button", has_text="next")
            if following.count() and following.is_enabled():
                following.click()
        assert sorted(shown) == sorted(exported[1:])
        assert ["user199", "user199/secret-0.ipynb", "0.17", "0.07", "0.00", "0.17"] in shown  # 10 min, 455 MiB
        assert page.errors == []
    finally:
        page.context.close()
