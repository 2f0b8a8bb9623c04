"""``GET jupyter-gpu/history`` against a real Jupyter Server on simulated GPUs."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import asynctest, get_snapshot
from tornado.httpclient import HTTPClientError

from jupyter_gpu.server import GpuService

pytestmark = pytest.mark.usefixtures("stop_sampler_after_test")


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
        "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "wait_s": 1.0, "history_s": 2.0},
    }


@asynctest
async def test_history_fills_while_the_server_samples_and_is_bounded(jp_fetch, jp_serverapp, scenario):
    scenario.update(lambda s: s["gpus"][1].update(utilization=64, memory_used_mib=40960))
    await get_snapshot(jp_fetch)  # demand: the sampler runs from now on
    service: GpuService = jp_serverapp.web_app.settings[GpuService.SETTINGS_KEY]
    assert service.history.capacity == 20  # 2 s at 0.1 s

    deadline = time.monotonic() + 10
    while True:
        response = await jp_fetch("jupyter-gpu", "history")
        data = json.loads(response.body)
        if data["gpus"] and len(data["gpus"][1]["t"]) >= 15:
            break
        assert time.monotonic() < deadline, data
        await asyncio.sleep(0.1)
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Cache-Control"] == "no-store"
    assert [gpu["index"] for gpu in data["gpus"]] == [0, 1]
    gpu = data["gpus"][1]
    assert gpu["utilization"][-1] == 64
    assert gpu["memory"][-1] == pytest.approx(50.0, abs=0.1)  # 40 of 80 GiB
    assert gpu["t"] == sorted(gpu["t"])
    assert gpu["t"][-1] - gpu["t"][0] <= 2.0 + 1e-6  # never more than the window

    since = gpu["t"][-3]
    newer = json.loads((await jp_fetch("jupyter-gpu", "history", params={"since": str(since)})).body)
    assert all(t > since for t in newer["gpus"][1]["t"])
    assert 1 <= len(newer["gpus"][1]["t"]) <= 3 + 20


@asynctest
async def test_bad_since_is_a_clear_400(jp_fetch):
    for bad in ("yesterday", "nan", "inf"):
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("jupyter-gpu", "history", params={"since": bad})
        assert caught.value.code == 400
        assert "since must be a number" in json.loads(caught.value.response.body)["message"]


@asynctest
async def test_history_needs_authentication(jp_fetch, jp_serverapp):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("jupyter-gpu", "history", headers={"Authorization": ""})
    assert caught.value.code == 403
