"""The hub console in the asker's language (docs/i18n.md): the page's ``?lang=``, then the service's
``--language`` or ``JUPYTER_GPU_LANG``, then the browser's ``Accept-Language``, then English. The
page's texts, the script's catalog, the console's messages and the refusals of its API are
translated; field names, numbers, units, ``/metrics`` and the service's log stay as they are."""

# ruff: noqa: RUF001  (Chinese text has full-width punctuation, and the page's title an en dash)

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import threading
from typing import Any

import pytest
from hub_service import people, start
from support import ScenarioFile
from tornado.httpclient import AsyncHTTPClient

from jupyter_gpu import simulate
from jupyter_gpu.core import i18n, i18n_catalogs
from jupyter_gpu.hub import __main__ as hub_main
from jupyter_gpu.hub import core, page

pytestmark = pytest.mark.usefixtures("stop_started")

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def no_forced_language(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here chooses its language itself (conftest forces English through the variable)."""
    monkeypatch.delenv(i18n.ENV, raising=False)


@pytest.fixture
def hub_gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(2))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", ["zh-CN", "zh", "en"]),
        ("fr;q=0.5, zh-CN", ["zh-CN", "fr"]),
        ("en;q=0, zh", ["zh"]),  # q=0: not acceptable
        ("*, de;q=x, <script>, zh-TW;q=0.3", ["zh-TW"]),  # a wildcard, a bad weight, a bad tag: skipped
        ("", []),
        (None, []),
    ],
)
def test_accept_language_is_read_most_wanted_first(header: str | None, wanted: list[str]) -> None:
    assert page.accepted_languages(header) == wanted


@pytest.mark.parametrize(
    ("asked", "configured", "accept", "language"),
    [
        (None, None, None, "en"),
        (None, None, "zh-CN,zh;q=0.9", "zh_CN"),
        (None, None, "fr, zh;q=0.5", "zh_CN"),  # French has no catalog: the next one wanted
        (None, None, "en-US,zh-CN;q=0.8", "en"),  # English asked first ends the search
        (None, "zh_CN", "en-US", "zh_CN"),  # --language / JUPYTER_GPU_LANG before the browser's
        (None, "en", "zh-CN", "en"),
        ("zh-CN", "en", "en-US", "zh_CN"),  # the page's ?lang= before everything
        ("en", "zh_CN", "zh-CN", "en"),
        ("fr", None, "zh-CN", "zh_CN"),
        ("<b>", None, None, "en"),  # not a language name: ignored
    ],
)
def test_the_request_language_is_chosen_in_the_documented_order(
    asked: str | None, configured: str | None, accept: str | None, language: str
) -> None:
    assert page.request_language(asked, configured, accept) == language


def test_every_text_of_the_page_is_translated_and_an_unlisted_one_is_refused() -> None:
    html, css, js = (page.STATIC / "console.html").read_bytes(), b"body {}", b"1;"
    built = page.build(html, css, js, language="zh_CN")
    text = built.before.decode()
    assert '<html lang="zh-CN">' in text and "<title>GPU 控制台 – jupyter-gpu</title>" in text
    nodes = [n.strip() for n in re.findall(r">([^<>]*)<", text.split("<style>")[0] + text.split("</style>")[1])]
    assert all(not n or CJK.search(n) or n in ("GPU", "CSV") for n in nodes), nodes
    with pytest.raises(ValueError, match=r"not in page\.PAGE_TEXTS"):
        page.build(html.replace(b"<h2>Usage</h2>", b"<h2>Usage</h2><p>new words</p>"), css, js, language="en")


def test_the_scripts_catalog_holds_exactly_its_marked_strings_translated() -> None:
    marked = [item for item in i18n_catalogs.extract(page.STATIC / "console.js")]
    keys = {
        (f"{item.context}\x04" if item.context else "") + (item.id if isinstance(item.id, str) else item.id[0])
        for item in marked
    }
    catalog = page.script_catalog("zh-CN")
    assert catalog["language"] == "zh_CN"
    assert set(catalog["messages"]) == keys
    assert catalog["messages"]["held by {holders}"] == "占用者：{holders}"
    assert catalog["messages"]["{count} kernel"] == ["{count} 个内核"]
    assert catalog["messages"]["kernel state\x04busy"] == "忙碌"
    assert page.script_catalog("en") == {"language": "en", "messages": {}}


def test_the_english_page_has_no_catalog_and_the_chinese_one_the_same_script_and_csp() -> None:
    english, english_csp = page.render("null")
    chinese, chinese_csp = page.render("null", "zh_CN")
    assert b'id="jg-i18n"' not in english
    assert english_csp == chinese_csp  # the same inline script and style in every language
    found = re.search(rb'<script id="jg-i18n" type="application/json">(.*?)</script>', chinese, re.S)
    assert found and json.loads(found.group(1)) == page.script_catalog("zh_CN")
    assert not set(found.group(1).decode()) & {"<", ">", "&"}  # script_json: nothing can end the element


def test_the_consoles_messages_are_in_the_forced_language() -> None:
    with i18n.language_forced("zh_CN"):
        chinese = core.console(None, {}, [], "alice", "read")
        assert core.snapshot_problem([]) == "应答不是 JSON 对象"
    english = core.console(None, {}, [], "alice", "read")
    assert chinese["error"] == "还没有 GPU 采样" and english["error"] == "no GPU sample yet"
    assert chinese.keys() == english.keys()


def test_a_forced_language_is_its_threads_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request answered in Chinese does not turn the sampler's thread (or another request) Chinese."""
    monkeypatch.setenv(i18n.ENV, "en")
    inside, seen = threading.Event(), []

    def elsewhere() -> None:
        inside.wait(10)
        seen.append(core.console(None, {}, [], "alice", "read")["error"])

    thread = threading.Thread(target=elsewhere)
    thread.start()
    with i18n.language_forced("zh_CN"):
        inside.set()
        thread.join(10)
        assert core.console(None, {}, [], "alice", "read")["error"] == "还没有 GPU 采样"
    assert seen == ["no GPU sample yet"]


async def fetch(url: str, token: str, **headers: str) -> Any:
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(
            url, headers={"Authorization": f"token {token}", **headers}, raise_error=False, follow_redirects=False
        )
    finally:
        client.close()


def first_data(html: bytes) -> Any:
    found = re.search(rb'<script id="jg-first" type="application/json">(.*?)</script>', html, re.S)
    assert found
    return json.loads(found.group(1))


def keys_of(value: Any) -> Any:
    """The structure of a JSON value without its texts: the field names at every level."""
    if isinstance(value, dict):
        return {key: keys_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [keys_of(item) for item in value[:1]]
    return type(value).__name__


def test_the_page_follows_accept_language_then_lang_and_the_service_setting(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()
        chinese = await fetch(run.url, "admin-token", **{"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"})
        english = await fetch(run.url, "admin-token")
        asked = await fetch(run.url + "?lang=en", "admin-token", **{"Accept-Language": "zh-CN"})
        assert chinese.code == english.code == asked.code == 200
        assert b'<html lang="zh-CN">' in chinese.body and "<h1>GPU 控制台</h1>".encode() in chinese.body
        assert b'<html lang="en">' in english.body and b"<h1>GPU console</h1>" in english.body
        assert b"<h1>GPU console</h1>" in asked.body
        assert chinese.headers["Content-Security-Policy"] == english.headers["Content-Security-Policy"]
        assert keys_of(first_data(chinese.body)) == keys_of(first_data(english.body))  # fields as they are
        run.service.language = "zh_CN"  # --language zh_CN: before the browser's English
        configured = await fetch(run.url, "admin-token", **{"Accept-Language": "en-US"})
        assert "<h1>GPU 控制台</h1>".encode() in configured.body
        overridden = await fetch(run.url + "?lang=en", "admin-token")
        assert b"<h1>GPU console</h1>" in overridden.body

    asyncio.run(body())


def test_jupyter_gpu_lang_chooses_the_console_language(hub_gpus: ScenarioFile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(i18n.ENV, "zh_CN")

    async def body() -> None:
        run = await start()
        people(run.hub)
        answer = await fetch(run.url, "admin-token", **{"Accept-Language": "en"})
        assert "<h1>GPU 控制台</h1>".encode() in answer.body

    asyncio.run(body())


def test_api_refusals_are_said_in_the_language_and_logged_in_english(
    hub_gpus: ScenarioFile, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub)
        with caplog.at_level(logging.WARNING):
            off = await fetch(run.url + "api/usage?lang=zh_CN", "alice-token")
            window = await fetch(run.url + "api/usage?window=year", "alice-token", **{"Accept-Language": "zh-CN"})
            plain = await fetch(run.url + "api/usage", "alice-token")
        assert off.code == plain.code == 404 and window.code == 400
        assert json.loads(off.body) == {"message": "本服务未开启用量统计（没有 --usage-db）"}
        assert json.loads(plain.body) == {"message": "usage accounting is off in this service (no --usage-db)"}
        assert json.loads(window.body)["message"].startswith("时间范围必须是 day, week, 30d 之一")
        logged = "\n".join(record.getMessage() for record in caplog.records)
        assert "usage accounting is off in this service" in logged and not CJK.search(logged)

    asyncio.run(body())


def test_a_readers_refusal_of_the_console_is_in_chinese(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub)
        answer = await fetch(run.url + "api/console?lang=zh-CN", "bob-token")
        assert answer.code == 403, answer.body
        assert (
            json.loads(answer.body)["message"]
            == f"GPU 控制台仅供 JupyterHub 管理员和拥有 {core.READ_SCOPE} 权限的用户使用"
        )

    asyncio.run(body())


def test_metrics_and_the_console_api_fields_do_not_change_with_the_language(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start()
        people(run.hub, hub_gpus)
        run.reported()
        metrics = await fetch(run.url + "metrics?lang=zh_CN", "bob-token", **{"Accept-Language": "zh-CN"})
        assert metrics.code == 200 and not CJK.search(metrics.body.decode())
        chinese = await fetch(run.url + "api/console?lang=zh_CN", "admin-token")
        english = await fetch(run.url + "api/console", "admin-token")
        assert keys_of(json.loads(chinese.body)) == keys_of(json.loads(english.body))

    asyncio.run(body())


def test_the_services_help_is_in_chinese_with_language_or_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        hub_main.main(["--language", "zh_CN", "--help"])
    text = capsys.readouterr().out
    assert "两次 NVML 采样之间的秒数" in text and "--language LANG" in text
    assert i18n.language() == "en"  # nothing left forced after the call
    env = {**os.environ, i18n.ENV: "zh_CN"}
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.hub", "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and "jupyter-gpu 的 JupyterHub 服务" in done.stdout
    english = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.hub", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, i18n.ENV: "en"},
        timeout=120,
    )
    assert "seconds between two NVML samples" in english.stdout and not CJK.search(english.stdout)


def test_a_bad_option_is_one_chinese_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert hub_main.main(["--language=zh_CN", "--idle-after", "0"]) == 2
    assert capsys.readouterr().err == "python -m jupyter_gpu.hub: --idle-after 必须为正数\n"


def test_prometheus_modes_errors_are_said_in_the_language_and_logged_in_english(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from test_hub_prometheus import start_service

    async def body() -> None:
        hub, _service, port = await start_service("http://127.0.0.1:9", None)
        url = f"http://127.0.0.1:{port}/services/jupyter-gpu/api/console"
        with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
            chinese = json.loads((await fetch(url + "?lang=zh_CN", "admin-token")).body)
            english = json.loads((await fetch(url, "admin-token", **{"Accept-Language": "en"})).body)
        hub.stop()
        assert chinese["error"].startswith("无法读取 http://127.0.0.1:9 上的 Prometheus：")
        assert english["error"].startswith("cannot read Prometheus at http://127.0.0.1:9: ")
        assert keys_of(chinese) == keys_of(english)
        logged = [r.getMessage() for r in caplog.records if "Prometheus" in r.getMessage()]
        assert logged and not any(CJK.search(line) for line in logged)

    asyncio.run(body())


def test_an_unusable_prometheus_answer_is_said_in_the_forced_language() -> None:
    from jupyter_gpu.hub import prometheus as prom

    with i18n.language_forced("zh_CN"):
        assert prom.console("<html>", "root", "admin")["error"] == "Prometheus 的应答不是 JSON 对象"
    assert prom.console("<html>", "root", "admin")["error"] == "Prometheus answered something that is not a JSON object"
