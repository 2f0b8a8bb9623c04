"""The console page in Prometheus mode, in headless Chromium: GPUs under a heading per host when there
are several, kernels' memory per "<host>:<index>", and a reader's view without other users' notebooks.
The service runs against a stand-in hub API and a stand-in Prometheus (two nodes); tokens ride on
the browser's Authorization header (the page and its API accept hub tokens as well as the login)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from console_page import open_console
from hub_fake import SERVICE_TOKEN, FakeHub
from jupyterhub.services.auth import HubOAuth
from prometheus_fake import StandInPrometheus, two_nodes
from tornado import netutil
from tornado.httpserver import HTTPServer

from jupyter_gpu.hub import core
from jupyter_gpu.hub.app import HubService, make_app

pytestmark = pytest.mark.browser


@pytest.fixture
def console_url() -> Iterator[str]:
    stand_in = StandInPrometheus(two_nodes())
    hub = FakeHub()
    hub.add_user("root-admin", "admin-token", admin=True)
    hub.add_user("alice", "alice-token", scopes=[core.READ_SCOPE])
    loop = asyncio.new_event_loop()
    sockets = netutil.bind_sockets(0, "127.0.0.1")
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            service = HubService(
                hub.url + "/hub/api", SERVICE_TOKEN, hub.url, interval_s=0.5, prometheus_url=stand_in.url
            )
            auth = HubOAuth(
                api_url=hub.url + "/hub/api",
                api_token=SERVICE_TOKEN,
                oauth_client_id="service-jupyter-gpu",
                access_scopes={"access:services!service=jupyter-gpu"},
                cache_max_age=60,
            )
            HTTPServer(make_app(service, "/services/jupyter-gpu/", hub_auth=auth)).add_sockets(sockets)
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{sockets[0].getsockname()[1]}/services/jupyter-gpu/"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
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
