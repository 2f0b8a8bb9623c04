"""Issue 22 item 7: docs/jupyterhub.md's snippets add to an admin's jupyterhub_config.py instead
of replacing what it set, on a fresh config and after earlier settings; no placeholder user.

The real hub runs them too (tests/browser/test_hub_real.py, root only); this checks the merge with
JupyterHub's own classes, in a second."""

from __future__ import annotations

import re
from pathlib import Path

from traitlets.config import Config

DOC = Path(__file__).resolve().parents[1] / "docs" / "jupyterhub.md"


def snippet_under(heading: str) -> str:
    text = DOC.read_text()
    start = text.index("```python\n", text.index(heading)) + len("```python\n")
    return text[start : text.index("```", start)]


SNIPPETS = (
    snippet_under("### `jupyterhub_config.py` (copy-paste)"),
    snippet_under("### Trying it without GPUs"),
    snippet_under("## Environment of the single-user servers: PATH"),
)


def load(config: Config) -> tuple[object, object]:
    """The hub and a spawner configured by ``config``, as JupyterHub builds them."""
    from jupyterhub.app import JupyterHub
    from jupyterhub.spawner import LocalProcessSpawner

    return JupyterHub(config=config), LocalProcessSpawner(config=config, _deprecated_db_session=None)


def run_snippets(config: Config) -> None:
    """The snippets one after the other in one jupyterhub_config.py (one namespace)."""
    namespace = {"c": config, "get_config": lambda: config}
    for snippet in SNIPPETS:
        exec(compile(snippet, str(DOC), "exec"), namespace)


def test_the_snippets_work_on_a_config_that_set_nothing() -> None:
    config = Config()
    run_snippets(config)
    hub, spawner = load(config)
    [service] = hub.services
    assert service["name"] == "jupyter-gpu" and service["environment"] == {"JUPYTER_GPU_SIMULATE": "demo"}
    assert [role["name"] for role in hub.load_roles] == ["jupyter-gpu-readers"]  # the service needs no role
    assert set(hub.custom_scopes) == {"custom:jupyter-gpu:read", "custom:jupyter-gpu:admin"}
    assert spawner.environment["JUPYTER_GPU_SERVICE_URL"].endswith("/services/jupyter-gpu/")
    assert spawner.environment["JUPYTER_GPU_SIMULATE"] == "demo" and "PATH" in spawner.environment
    assert spawner.args == [
        "--JupyterGpuServer.source=hub-service",
        "--ServerApp.terminado_settings=shell_command=/bin/bash",
    ]


def test_the_snippets_keep_what_the_config_set_before() -> None:
    config = Config()
    config.JupyterHub.services = [{"name": "announcements", "url": "http://127.0.0.1:8888"}]
    config.JupyterHub.load_roles = [{"name": "teachers", "users": ["ada"], "scopes": ["admin-ui"]}]
    config.JupyterHub.custom_scopes = {"custom:course:grade": {"description": "grade"}}
    config.Spawner.environment = {"LANG": "C.UTF-8"}
    config.Spawner.args = ["--ServerApp.log_level=DEBUG"]
    run_snippets(config)
    hub, spawner = load(config)
    assert [s["name"] for s in hub.services] == ["announcements", "jupyter-gpu"]
    assert [r["name"] for r in hub.load_roles] == ["teachers", "jupyter-gpu-readers"]
    assert "custom:course:grade" in hub.custom_scopes and "custom:jupyter-gpu:read" in hub.custom_scopes
    assert spawner.environment["LANG"] == "C.UTF-8" and "JUPYTER_GPU_SERVICE_URL" in spawner.environment
    assert spawner.args[0] == "--ServerApp.log_level=DEBUG" and len(spawner.args) == 3


def test_no_snippet_assigns_a_setting_an_admin_may_have_set_or_names_a_placeholder_user() -> None:
    for snippet in SNIPPETS:
        assert not re.search(r"^c\.[\w.]+\s*=", snippet, re.MULTILINE), snippet  # add, never replace
    config = Config()
    run_snippets(config)
    hub, _spawner = load(config)
    assert all(not role.get("users") for role in hub.load_roles)  # every name listed becomes a hub user
