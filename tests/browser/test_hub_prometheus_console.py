"""The console page in Prometheus mode, in headless Chromium: GPUs under a heading per host when there
are several, kernels' memory per "<host>:<index>", and a reader's view without other users' notebooks.
The service runs against a stand-in hub API and a stand-in Prometheus (two nodes); tokens ride on
the browser's Authorization header (the page and its API accept hub tokens as well as the login)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_page import open_console
from hub_fake import FakeHub
from hub_service import InThread
from prometheus_fake import StandInPrometheus, two_nodes

from jupyter_gpu.hub import core

pytestmark = pytest.mark.browser


@pytest.fixture
def console_url() -> Iterator[str]:
    stand_in = StandInPrometheus(two_nodes())
    hub = FakeHub()
    hub.add_user("root-admin", "admin-token", admin=True)
    hub.add_user("alice", "alice-token", scopes=[core.READ_SCOPE])
    running = InThread(hub.url, interval_s=0.5, prometheus_url=stand_in.url)
    try:
        yield running.url
    finally:
        running.stop()
        hub.stop()
        stand_in.stop()


def test_console_groups_gpus_by_host_and_names_gpus_with_their_host(browser: Any, console_url: str) -> None:
    page = open_console(browser, console_url, "admin-token", height=800)
    try:
        assert page.locator("#jg-gpus h3.jg-host").all_text_contents() == ["node-a", "node-b"]
        hosts = page.eval_on_selector_all("#jg-gpus > *", "nodes => nodes.map(n => n.dataset.host)")
        assert hosts == ["node-a", "node-a", "node-a", "node-b", "node-b", "node-b"]  # heading, then its GPUs
        assert "from Prometheus, 2 host(s)" in page.locator("#jg-status").text_content()
        rows = page.locator("#jg-users tbody tr").all_text_contents()
        assert any("alice/train.ipynb" in row and "GPU node-a:1: 3 GiB" in row for row in rows), rows
        assert any("bob/secret.ipynb" in row and "GPU node-b:0: 5 GiB" in row for row in rows), rows
        assert page.errors == []
    finally:
        page.context.close()


def test_reader_page_shows_no_other_users_notebooks(browser: Any, console_url: str) -> None:
    page = open_console(browser, console_url, "alice-token", height=800)
    try:
        text = page.locator("#jg-users").text_content()
        assert "alice/train.ipynb" in text and "bob/secret" not in text and "(hidden)" in text
        assert page.locator("#jg-users button").count() == 0  # no shutdown for a reader
    finally:
        page.context.close()
