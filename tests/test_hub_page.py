"""The console's page as one response (issue 27's first paint): its style, script and first data
inline (``jupyter_gpu.hub.page``), the data exactly ``api/console``'s answer for that viewer and never
markup, the CSP naming the inline script and style by hash and nothing else."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from typing import Any

import pytest
from hub_service import people, start
from support import ScenarioFile
from tornado.httpclient import AsyncHTTPClient

from jupyter_gpu import simulate
from jupyter_gpu.hub import page

pytestmark = pytest.mark.usefixtures("stop_started")

HOSTILE = ["</script><script>alert(1)</script>", "<!--<script>", "</SCRIPT >", "a & b &amp; <b>", "\u2028\u2029"]


@pytest.fixture
def hub_gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


@pytest.mark.parametrize("text", HOSTILE)
def test_script_json_reads_back_the_same_and_cannot_end_its_element(text: str) -> None:
    for dumped in (json.dumps({"notebook": text}), json.dumps({"notebook": text}, ensure_ascii=False)):
        safe = page.script_json(dumped)
        assert json.loads(safe) == {"notebook": text}
        assert not set(safe) & {"<", ">", "&", "\u2028", "\u2029"}


def sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_inlines_its_style_and_script_and_the_csp_allows_those_alone() -> None:
    html, csp = page.render("null")
    text = html.decode()
    style = re.search(r"<style>(.*?)</style>", text, re.S)
    script = re.search(r"<script>(.*?)</script>", text, re.S)
    assert style and script
    assert style.group(1) == (page.STATIC / "console.css").read_text()
    assert script.group(1) == (page.STATIC / "console.js").read_text()
    assert csp == f"default-src 'self'; style-src {sha256(style.group(1))}; script-src {sha256(script.group(1))}"
    assert "static/" not in text and " src=" not in text  # nothing for the first paint to wait for


@pytest.mark.parametrize("bad", ["</script>", "</STYLE", "<!--"])
def test_a_static_file_that_would_end_its_element_is_refused(bad: str) -> None:
    html = (page.STATIC / "console.html").read_bytes()
    with pytest.raises(ValueError, match="cannot be inlined"):
        page.build(html, b"body {}" + bad.encode(), b"1;")
    with pytest.raises(ValueError, match="cannot be inlined"):
        page.build(html, b"body {}", b"1;" + bad.encode())
    with pytest.raises(ValueError, match="must have"):
        page.build(html.replace(b'id="jg-first"', b""), b"", b"")


async def get(url: str, token: str) -> Any:
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, headers={"Authorization": f"token {token}"}, raise_error=False)
    finally:
        client.close()


def first_data(html: bytes) -> Any:
    found = re.search(rb'<script id="jg-first" type="application/json">(.*?)</script>', html, re.S)
    assert found, "no first data in the page"
    return json.loads(found.group(1))


@pytest.mark.parametrize(("token", "role"), [("admin-token", "admin"), ("alice-token", "read")])
def test_the_first_data_is_the_viewers_console_answer_as_text(hub_gpus: ScenarioFile, token: str, role: str) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.hub.snapshots["bob"]["kernels"][0]["notebook"] = HOSTILE[0] + ".ipynb"
        run.reported()
        response = await get(run.url, token)
        assert response.code == 200
        assert response.headers["Content-Security-Policy"] == page.page().csp
        assert response.headers["Cache-Control"] == "no-store"
        first = first_data(response.body)
        code, raw = await run.call("api/console", token)
        assert code == 200
        polled = json.loads(raw)
        for data in (first, polled):
            data.pop("timestamp")
            for gpu in data["gpus"]:
                gpu["history"] = None  # a sample may have landed between the two requests
        assert first == polled and first["admin"] is (role == "admin")
        bob = next(user for user in first["users"] if user["name"] == "bob")
        notebooks = [kernel["notebook"] for kernel in bob["kernels"]]
        if role == "admin":
            assert any(name and name.startswith("</script><script>alert(1)") for name in notebooks)
        else:
            assert notebooks == [None, None]  # the privacy rule holds inline as in api/console
        assert response.body.count(b"<script") == 2 and b"alert(1)</script>" not in response.body

    asyncio.run(body())


def test_the_pages_head_goes_out_before_the_data_is_joined(
    hub_gpus: ScenarioFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu.hub import handlers

    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        head_arrived = asyncio.Event()
        chunks: list[bytes] = []

        async def joined_once_the_head_arrived(handler: Any, role: str) -> str:
            await asyncio.wait_for(head_arrived.wait(), 30)  # without the early head: a timeout here
            return json.dumps({"joined": "after the head"})

        monkeypatch.setattr(handlers, "console_body", joined_once_the_head_arrived)

        def received(chunk: bytes) -> None:
            chunks.append(chunk)
            if b"</header>" in b"".join(chunks):
                head_arrived.set()

        client = AsyncHTTPClient(force_instance=True)
        try:
            response = await client.fetch(
                run.url, headers={"Authorization": "token admin-token"}, streaming_callback=received, request_timeout=60
            )
        finally:
            client.close()
        assert response.code == 200
        page_bytes = b"".join(chunks)
        assert first_data(page_bytes) == {"joined": "after the head"}
        assert page_bytes.index(b"<style>") < page_bytes.index(b"</header>") < page_bytes.index(b"after the head")

    asyncio.run(body())
