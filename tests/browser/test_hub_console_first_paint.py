"""The console's first paint in headless Chromium (issue 27): the page's first data comes inline, so
its users are drawn with ``api/console`` unreachable; hostile notebook names in that data stay text
(no element made, no script run); the times of day the first render leaves out are written once the
browser is idle."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_page import USERS_ROWS
from hub_fake import FakeHub, report_of, scenario_of, user_snapshot
from hub_service import InThread
from support import ScenarioFile

from jupyter_gpu import simulate
from jupyter_gpu.hub.app import HubService

pytestmark = pytest.mark.browser
EVIL = [
    '<img src=x onerror="window.__jupyterGpuXss=1">.ipynb',
    "</script><script>window.__jupyterGpuXss=2</script>.ipynb",
]


@pytest.fixture
def service_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    hub = FakeHub()
    hub.add_user("root-admin", "admin-token", admin=True)
    for n, name in enumerate(("alice", "bob", "carol")):
        hub.add_user(name, f"{name}-token")
        hub.snapshots[name] = user_snapshot(name, 2, gpu=n % 2)
    for kernel, notebook in zip(hub.snapshots["bob"]["kernels"], EVIL, strict=True):
        kernel["notebook"] = notebook
    scenario = ScenarioFile(tmp_path / "gpus.json", scenario_of(hub.snapshots, gpus=2))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))

    async def reported(service: HubService) -> None:
        for name, snapshot in hub.snapshots.items():
            service.board.receive(name, report_of(snapshot), time.time())

    running = InThread(hub.url, prepare=reported, ready_s=60, interval_s=0.5, report_interval_s=3600)
    try:
        yield running.url
    finally:
        running.stop()
        hub.stop()


def test_the_first_paint_needs_no_request_and_its_data_stays_text(browser: Any, service_url: str) -> None:
    context = browser.new_context(extra_http_headers={"Authorization": "token admin-token"})
    asked: list[str] = []
    context.route("**/api/console", lambda route: (asked.append(route.request.url), route.abort()))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(service_url)
        page.locator(USERS_ROWS).nth(2).wait_for(timeout=60_000)  # root-admin has no server: 3 users
        assert asked == []  # drawn from the page's own data; the first poll comes 2 s later
        notebooks = page.locator("#jg-users tr:not(.jg-user)[data-user='bob'] td:nth-child(2)")
        assert sorted(notebooks.all_text_contents()) == sorted(EVIL)
        assert page.locator("#jg-users img").count() == 0
        assert page.evaluate("window.__jupyterGpuXss") is None
        # The times of day, left out of the first render, follow once the browser is idle.
        page.locator("#jg-status", has_text=":").wait_for(timeout=60_000)
        assert page.locator(".jg-gpu .jg-axis span").count() in (0, 6)  # one sample: no axis yet
        assert errors == []
    finally:
        context.close()


def test_without_its_first_data_the_page_asks_for_it(browser: Any, service_url: str) -> None:
    """A page without the inline data (an older service's, or one a proxy rewrote) polls as before."""
    context = browser.new_context(extra_http_headers={"Authorization": "token admin-token"})

    def without_first_data(route: Any) -> None:
        response = route.fetch()
        body = response.text()
        start = body.index('<script id="jg-first" type="application/json">') + len(
            '<script id="jg-first" type="application/json">'
        )
        route.fulfill(response=response, body=body[:start] + body[body.index("</script>", start) :])

    context.route(service_url, without_first_data)
    try:
        page = context.new_page()
        page.goto(service_url)
        page.locator(USERS_ROWS).nth(2).wait_for(timeout=60_000)
        assert page.locator(USERS_ROWS).count() == 3
    finally:
        context.close()
