"""Fixtures for tests that drive a real JupyterLab in headless Chromium (mark them ``browser``).

- ``lab``: a real ``jupyter lab`` subprocess on 127.0.0.1 on simulated GPUs (a scenario file the
  test rewrites through ``lab.scenario``), with the jupyter_gpu server extension sampling fast and a
  short idle threshold. Module-scoped: one server per test module.
- ``lab_factory``: start more servers with other scenarios, arguments or settings.
- ``browser`` / ``page``: Debian's ``/usr/bin/chromium`` through Python Playwright's *sync* API
  (Playwright never downloads a browser here); ``lab.open(page)`` loads JupyterLab in a page.
- ``artifacts``: ``test-artifacts/`` (gitignored) for screenshots and server logs.

The servers load *this checkout's* build of the extension (``jupyter_gpu/labextension``, built by
``npm run build:prod`` in ``labextension/``) when there is one: a data directory first on
``JUPYTER_PATH`` links to it, and JupyterLab takes the first ``jupyter-gpu`` it finds, so a venv
whose installed copy is older (another checkout's) never hides the code under test.

These tests live in their own folder because pytest-jupyter's autouse event-loop fixtures and
Playwright's sync API fight over the event loop ("Cannot close a running event loop"); the two
no-op overrides below keep pytest-jupyter away even if a parent conftest loads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from live_processes import free_port
from support import UNDER_LOAD_S, ScenarioFile, wait_until

from jupyter_gpu import simulate

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("JUPYTER_GPU_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
LAB_START_TIMEOUT_S = UNDER_LOAD_S
BUILT_EXTENSION = REPO / "jupyter_gpu" / "labextension"

# Settings every test server starts with (JUPYTERLAB_SETTINGS_DIR): no "Jupyter news" toast over
# screenshots, a fast poll so tests wait for fractions of a second (not the 2 s default), and a
# one-minute history so a screenshot's chart is not a dot at the right edge.
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "jupyter-gpu/plugin": {"refreshIntervalMs": 300, "historyMinutes": 1},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip browser tests cleanly where no Chromium or Playwright is installed."""
    reason = None
    if not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set JUPYTER_GPU_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "Python playwright is not installed"
    if reason:
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def jp_asyncio_loop() -> None:
    """Overrides pytest-jupyter's autouse loop fixture: these tests own no asyncio loop."""
    return None


@pytest.fixture
def jp_server_cleanup() -> None:
    """Overrides pytest-jupyter's autouse cleanup, which needs its loop (see above)."""
    return None


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


class Lab:
    """A running ``jupyter lab`` with a REST helper; ``open(page)`` loads it in the browser."""

    def __init__(
        self,
        process: subprocess.Popen,
        url: str,
        token: str,
        root: Path,
        scenario: ScenarioFile,
        log: Path,
        app: str = "jupyterlab",
    ) -> None:
        self.app = app
        self.process = process
        self.url = url  # ends with "/"
        self.token = token
        self.root = root
        self.scenario = scenario
        self.log = log

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10) -> Any:
        """Call the server's REST API (``path`` without the leading slash); JSON in, JSON out."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def forget_sidebar_settings(self) -> None:
        """Forget the sidebar's settings an earlier test of this module left (its compact/cards choice:
        the header button's saves go one at a time, so a test's last click may still be saving when
        the next test loads the page): the next page starts as a new user's would."""
        self.api("PUT", "lab/api/settings/jupyter-gpu:plugin", {"raw": "{}"})

    def snapshot(self) -> dict[str, Any]:
        return self.api("GET", "jupyter-gpu/snapshot")

    def saved_layout(self, workspace: str) -> dict[str, Any]:
        """The layout the server holds for ``workspace`` (``{}`` before the page first saved it)."""
        try:
            saved = self.api("GET", f"lab/api/workspaces/{workspace}")
        except urllib.error.HTTPError:
            return {}
        layout = ((saved or {}).get("data") or {}).get("layout-restorer:data")
        return layout if isinstance(layout, dict) else {}

    def wait_for_saved_sidebar(self, workspace: str, sidebar_id: str) -> None:
        """Wait until the server holds ``workspace``'s layout with ``sidebar_id`` the open tab of the
        left area: the layout restorer saves a change on a debounce, so a reload before that loads
        the layout before it. A workspace of its own per test (``lab/workspaces/NAME``) is the marker:
        no other page's late save can land in it."""
        wait_until(
            lambda: (self.saved_layout(workspace).get("left") or {}).get("current") == sidebar_id,
            what=f"workspace {workspace} saved with {sidebar_id} open",
            interval_s=0.1,
        )

    def write_notebook(self, path: str, sources: list[str]) -> None:
        """Create a notebook of code cells in the server's root directory (via the contents API)."""
        cells = [
            {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
            for src in sources
        ]
        content = {
            "cells": cells,
            "metadata": {
                "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        self.api("PUT", f"api/contents/{path}", {"type": "notebook", "format": "json", "content": content})

    def kernel_ids(self) -> set[str]:
        return {k["id"] for k in self.api("GET", "api/kernels")}

    def shutdown_all_kernels(self) -> None:
        for session in self.api("GET", "api/sessions"):
            self.api("DELETE", f"api/sessions/{session['id']}")
        for kernel_id in self.kernel_ids():
            self.api("DELETE", f"api/kernels/{kernel_id}")

    def open(self, page: Any, path: str = "lab", reset: bool = True) -> None:
        """Load JupyterLab (a fresh workspace unless ``reset=False``) and wait until it is ready."""
        query = f"token={self.token}" + ("&reset" if reset else "")
        if self.app == "notebook":  # Notebook 7: no dock panel, no splash; ready once the app is
            page.goto(f"{self.url}{'tree' if path == 'lab' else path}?token={self.token}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=60_000)
            page.wait_for_function("() => document.querySelector('#main-panel') !== null", timeout=60_000)
            return
        page.goto(f"{self.url}{path}?{query}")
        page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
        # Lab is interactive once the splash screen is gone and the status bar is populated.
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: the server shuts its kernels down
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_lab(
    base: Path,
    scenario: dict[str, Any],
    *,
    extra_args: tuple[str, ...] = (),
    settings: dict[str, dict[str, Any]] | None = None,
    name: str = "lab",
    app: str = "jupyterlab",
) -> Lab:
    """Start ``jupyter lab`` with its own root, settings, workspaces and runtime dirs under ``base``.

    ``app="notebook"`` starts Notebook 7 (``jupyter notebook``) instead, built on the same components.
    """
    root = base / "root"
    settings_dir = base / "settings"
    for folder in (root, settings_dir, base / "workspaces", base / "runtime", base / "config"):
        folder.mkdir(parents=True, exist_ok=True)
    for plugin, values in {**DEFAULT_SETTINGS, **(settings or {})}.items():
        package, _, plugin_name = plugin.rpartition("/")
        target = settings_dir / package / f"{plugin_name}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    scenario_file = ScenarioFile(base / "scenario.json", scenario)
    jupyter_path = os.environ.get("JUPYTER_PATH", "")
    if (BUILT_EXTENSION / "package.json").exists():
        data_dir = base / "data"
        target = data_dir / "labextensions" / "jupyter-gpu"
        target.mkdir(parents=True, exist_ok=True)
        for child in BUILT_EXTENSION.iterdir():  # linked, so a rebuild shows at the next page load
            if not (target / child.name).exists():
                (target / child.name).symlink_to(child)
        (target / "install.json").write_text((REPO / "labextension" / "install.json").read_text())
        jupyter_path = os.pathsep.join(filter(None, [str(data_dir), jupyter_path]))

    port = free_port()
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        simulate.ENV_VAR: str(scenario_file.path),
        "JUPYTERLAB_SETTINGS_DIR": str(settings_dir),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),  # no user config leaks in
        "JUPYTER_PATH": jupyter_path,
        "PYTHONUNBUFFERED": "1",
    }
    app_class = {"jupyterlab": "LabApp", "notebook": "JupyterNotebookApp"}[app]
    cmd = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        # The page exposes `window.jupyterapp`, so tests and benchmarks can reach the sidebar's model.
        f"--{app_class}.expose_app_in_browser=True",
        "--JupyterGpuServer.interval_s=0.25",
        "--JupyterGpuServer.idle_threshold_s=3",
        *extra_args,
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / f"{name}-server.log"
    with log.open("w") as log_file:
        process = subprocess.Popen(
            cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=root, start_new_session=True
        )
    lab = Lab(process, f"http://127.0.0.1:{port}/", token, root, scenario_file, log, app)
    deadline = time.monotonic() + LAB_START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}; see {log}")
        try:
            lab.api("GET", "api/status", timeout=2)
            return lab
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                lab.stop()
                raise RuntimeError(f"jupyter lab did not answer in {LAB_START_TIMEOUT_S} s; see {log}") from None
            time.sleep(0.3)


@pytest.fixture(scope="module")
def lab_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Lab]]:
    """``lab_factory(scenario, extra_args=(), settings=None, name="lab")`` starts a server; all
    servers it started stop when the module ends."""
    labs: list[Lab] = []

    def start(scenario: dict[str, Any], **kwargs: Any) -> Lab:
        lab = start_lab(tmp_path_factory.mktemp("lab"), scenario, **kwargs)
        labs.append(lab)
        return lab

    yield start
    for lab in labs:
        lab.stop()


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab], request: pytest.FixtureRequest) -> Lab:
    """A JupyterLab on three simulated A100s; GPU 0 runs another user's process, GPU 2 is idle."""
    scenario = simulate.plausible_gpus(3)
    scenario["gpus"][0]["processes"] = [{"pid": 4_000_001, "memory_mib": 20480, "user": "alice", "name": "python"}]
    scenario["gpus"][0].update(utilization=87, temperature=64, power_w=312)
    scenario["gpus"][1].update(utilization=23, temperature=45, power_w=121)
    return lab_factory(scenario, name=request.module.__name__.rpartition(".")[2])


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    # Package scope: Playwright's sync API runs an asyncio loop in the main thread while it is open,
    # which breaks pytest-jupyter's server tests collected after this folder; stop it on leaving.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, artifacts: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context and page (1280x800). Page errors are collected in ``page.errors``;
    a failing test leaves a screenshot ``test-artifacts/<test>-failure.png``."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(60_000)  # a wait on the page itself, generous for a loaded machine
    new_page = context.new_page()
    new_page.errors = []  # type: ignore[attr-defined]
    new_page.on("pageerror", lambda error: new_page.errors.append(str(error)))
    yield new_page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        new_page.screenshot(path=str(artifacts / f"{request.node.name}-failure.png"))
    # A route handler still running when the context closes (its route.fetch() answered "disposed")
    # would raise into the next test's set-up: drop every route first, and with it their errors.
    new_page.unroute_all(behavior="ignoreErrors")
    context.unroute_all(behavior="ignoreErrors")
    context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Remember each phase's report on the item, so ``page`` can screenshot failures."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def docs_screenshot() -> Callable[[Any, str], None]:
    """``docs_screenshot(locator_or_page, "sidebar.png")`` refreshes ``docs/<name>`` only when
    ``JUPYTER_GPU_UPDATE_DOCS=1``: committed images change on purpose, not on every test run."""

    def take(target: Any, name: str) -> None:
        if os.environ.get("JUPYTER_GPU_UPDATE_DOCS") == "1":
            target.screenshot(path=str(REPO / "docs" / name))

    return take


# -- contrast (WCAG 2.x): every visible text against the background it is drawn on -----------------

WCAG_AA = 4.5

# Runs in the page: for every element under `roots` with visible text of its own, its computed text
# colour and the colour under it (ancestors' backgrounds, walked up to the first opaque one and
# alpha-blended, white below all), and the WCAG contrast ratio of the two. The text's colour is
# faded by its own and its ancestors' `opacity` (a dimmed card's text is drawn that faint). Colours are read through
# a 1x1 canvas, so any CSS colour syntax the browser computes (rgb(), color(srgb ...)) works.
CONTRAST_JS = """
roots => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 1;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const rgba = css => {
    ctx.clearRect(0, 0, 1, 1);
    ctx.fillStyle = 'rgba(0, 0, 0, 0)';
    ctx.fillStyle = css;
    ctx.fillRect(0, 0, 1, 1);
    const d = ctx.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2], d[3] / 255];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const backgroundOf = node => {
    const layers = [];
    for (let n = node; n; n = n.parentElement) {
      const color = rgba(getComputedStyle(n).backgroundColor);
      if (color[3] > 0) {
        layers.push(color);
        if (color[3] >= 1) break;
      }
    }
    return layers.reverse().reduce((under, layer) => over(layer, under), [255, 255, 255, 1]);
  };
  const channel = c => { c /= 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const luminance = c => 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2]);
  const hex = c => '#' + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, '0')).join('');
  const out = [];
  for (const root of roots.flatMap(s => Array.from(document.querySelectorAll(s)))) {
    for (const node of [root, ...root.querySelectorAll('*')]) {
      const own = Array.from(node.childNodes).filter(c => c.nodeType === 3).map(c => c.textContent).join('').trim();
      if (!own || !node.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
      const box = node.getBoundingClientRect();
      if (box.width === 0 || box.height === 0) continue;
      const background = backgroundOf(node);
      const text = rgba(getComputedStyle(node).color);
      for (let n = node; n; n = n.parentElement) text[3] *= parseFloat(getComputedStyle(n).opacity);
      const color = over(text, background);
      const [a, b] = [luminance(color), luminance(background)];
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      out.push({text: own.slice(0, 60), cls: node.className && node.className.baseVal === undefined
        ? node.className : node.tagName, ratio: Math.round(ratio * 100) / 100, color: hex(color),
        background: hex(background)});
    }
  }
  return out;
}
"""


def contrast_report(page: Any, *roots: str) -> list[dict[str, Any]]:
    """Every visible text under the CSS selectors ``roots``: its text, class, colour, background and
    WCAG contrast ratio (see ``CONTRAST_JS``)."""
    return page.evaluate(CONTRAST_JS, list(roots))


def assert_contrast(page: Any, *roots: str, must_include: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Fail when a visible text under ``roots`` has a contrast below WCAG AA (4.5:1), or when no text
    with one of the classes ``must_include`` was checked (so a check cannot pass by seeing nothing)."""
    report = contrast_report(page, *roots)
    low = [entry for entry in report if entry["ratio"] < WCAG_AA]
    assert not low, f"texts below {WCAG_AA}:1: {low}"
    seen = " ".join(entry["cls"] for entry in report)
    missing = [cls for cls in must_include if cls not in seen]
    assert not missing, f"no visible text with the classes {missing} was checked"
    return report


def use_theme(page: Any, dark: bool) -> None:
    """Switch JupyterLab (or Notebook 7) to its Dark or Light theme and wait until it is applied."""
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    page.wait_for_selector(f"body[data-jp-theme-light='{'false' if dark else 'true'}']", state="attached")
    page.wait_for_selector("#jupyterlab-splash", state="detached")


@pytest.fixture
def contrast() -> Callable[..., list[dict[str, Any]]]:
    """``contrast(page, "#jupyter-gpu-sidebar", must_include=("jp-GpuProc-idleBadge",))``: see
    ``assert_contrast``."""
    return assert_contrast


@pytest.fixture
def theme() -> Callable[[Any, bool], None]:
    """``theme(page, dark=True)``: see ``use_theme``."""
    return use_theme


TOAST_COUNTER_JS = """
(text) => {
  const key = `__toasts:${text}`;
  if (window[key]) { return; }
  const seen = new Set();
  const look = () => {
    for (const toast of document.querySelectorAll('.Toastify__toast')) {
      if ((toast.textContent || '').includes(text)) { seen.add(toast); }
    }
  };
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true, characterData: true});
  look();
  window[key] = seen;
}
"""


class ToastCounter:
    """How many notifications (JupyterLab's toasts) containing ``text`` a page has shown since this
    counter was made, the ones that closed again included.

    A toast closes itself after its ``autoClose`` (10 s for "Kernel restarted; GPU plan applied"), so
    counting the toasts on screen races the test's own steps: on a loaded machine the first one is
    gone before the second comes, and ``count() >= 2`` never holds (CI's stop-35 failure). The page
    keeps each matching toast element it ever saw in a set; ``count()`` reads its size.
    """

    def __init__(self, page: Any, text: str) -> None:
        self.page = page
        self.text = text
        page.evaluate(TOAST_COUNTER_JS, text)

    def count(self) -> int:
        return int(self.page.evaluate("(text) => window[`__toasts:${text}`].size", self.text))

    def wait_for(self, at_least: int, timeout_s: float = 60) -> int:
        """Wait until ``at_least`` matching toasts have been shown; return how many."""
        return wait_until(
            lambda: (seen := self.count()) >= at_least and seen,
            timeout_s=timeout_s,
            what=f"{at_least} notification(s) with {self.text!r}",
        )


@pytest.fixture
def toasts() -> Callable[[Any, str], ToastCounter]:
    """``applied = toasts(page, "Kernel restarted"); …; applied.wait_for(2)``: see ``ToastCounter``."""
    return ToastCounter
