# ruff: noqa: RUF001  (Chinese sentences use full-width punctuation: docs/i18n.md)
"""JupyterLab's Settings editor in Chinese: the jupyter-gpu settings schema as JupyterLab's server
answers it (``GET lab/api/settings/jupyter-gpu:plugin``), translated with our catalog when Settings →
Language is 中文 and the zh-CN language pack is installed (jupyter_gpu/server/lab_settings.py).

The server loads JupyterLab and jupyter_gpu as a user's does; the schema it reads is this
checkout's source (``labextension/schema``, first on the labextensions path), so no build is needed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import asynctest

from jupyter_gpu.core import i18n, i18n_catalogs

pytest.importorskip("jupyterlab_server")
pytest.importorskip("jupyterlab_language_pack_zh_CN", reason="the zh-CN language pack (the test extras)")

SCHEMAS = i18n_catalogs.ROOT / "labextension" / "schema"
PLUGIN = ("lab", "api", "settings", "jupyter-gpu:plugin")


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    """JupyterLab and jupyter_gpu, with this checkout's settings schema where Lab looks first."""
    extension = tmp_path / "labextensions" / "jupyter-gpu"
    shutil.copytree(SCHEMAS, extension / "schemas" / "jupyter-gpu")
    return {
        "ServerApp": {"jpserver_extensions": {"jupyterlab": True, "jupyter_gpu": True}},
        "LabApp": {"extra_labextensions_path": [str(tmp_path / "labextensions")]},
        "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "wait_s": 1.0, "history_s": 2.0},
    }


def choose_in_lab(language: str) -> None:
    """What Settings → Language saves, in this test's settings folder (tests/conftest.py)."""
    path = i18n.lab_settings_dir() / i18n.LAB_SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"locale": language}), encoding="utf-8")


async def schema(jp_fetch: Any) -> dict[str, Any]:
    response = await jp_fetch(*PLUGIN)
    assert response.code == 200
    return dict(json.loads(response.body)["schema"])


@pytest.mark.usefixtures("stop_sampler_after_test")
@asynctest
async def test_the_settings_schema_follows_the_language_chosen_in_jupyterlab(jp_fetch: Any) -> None:
    english = await schema(jp_fetch)
    assert english["title"] == "GPU monitor"
    assert english["properties"]["compactView"]["title"] == "Compact view"

    choose_in_lab("zh_CN")  # read at each settings request, as JupyterLab does: no restart
    chinese = await schema(jp_fetch)
    assert chinese["title"] == "GPU 监视器"
    assert chinese["description"] == "jupyter_gpu 侧边栏和状态栏项的设置。"
    assert chinese["jupyter.lab.setting-icon-label"] == "GPU 监视器"
    properties = chinese["properties"]
    assert properties["refreshIntervalMs"]["title"] == "刷新间隔（毫秒）"
    assert properties["historyMinutes"]["title"] == "历史（分钟）"
    assert properties["confirmRestart"]["title"] == "重启前询问"
    assert "“不再询问”" in properties["confirmRestart"]["description"]
    assert properties["compactView"]["title"] == "紧凑视图"
    assert properties["compactView"]["enum"] == ["auto", "compact", "cards"]  # values are data: unchanged
    assert properties["compactView"]["default"] == "auto"
    # every string Lab translates in it reads Chinese (the catalog check makes sure each has one)
    for path, _context, text in i18n_catalogs.schema_strings(chinese):
        assert any("\u4e00" <= character <= "\u9fff" for character in text), (path, text)

    choose_in_lab("default")  # "default": the standard variables decide, English in the tests
    assert await schema(jp_fetch) == english


def test_every_schema_names_our_domain() -> None:
    """Without ``jupyter.lab.internationalization.domain`` Lab looks the strings up in its own
    ``jupyterlab`` domain, and they stay English."""
    schemas = sorted(SCHEMAS.glob("*.json"))
    assert schemas
    for path in schemas:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data[i18n_catalogs.SCHEMA_I18N]["domain"] == i18n.DOMAIN, path.name


def test_the_catalog_check_reads_what_jupyterlab_translates() -> None:
    """The check's selectors are jupyterlab_server's own, so every string Lab translates must have a
    translation (``scripts/i18n.py check``) and none it leaves alone is asked for."""
    from jupyterlab_server.translation_utils import DEFAULT_SCHEMA_SELECTORS

    assert i18n_catalogs.SCHEMA_SELECTORS == DEFAULT_SCHEMA_SELECTORS
    extracted = {(item.context, item.id) for item in i18n_catalogs.marked("lab") if ".json:" in item.where}
    assert ("settings", "Compact view") in extracted and ("schema", "GPU monitor") in extracted
    assert not any(text in ("auto", "compact", "cards") for _context, text in extracted)


def test_a_schemas_own_selector_is_read_in_the_schema_context() -> None:
    schema = {
        i18n_catalogs.SCHEMA_I18N: {"selectors": ["properties/.*/enumLabels\\[\\d+\\]/label"], "domain": "x"},
        "properties": {"a": {"title": "A", "enumLabels": [{"label": "One"}, {"value": "1"}]}},
    }
    assert list(i18n_catalogs.schema_strings(schema)) == [
        ("/properties/a/title", "settings", "A"),
        ("/properties/a/enumLabels[0]/label", "schema", "One"),
    ]
