"""Helpers shared by the test modules (importable as ``support``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu import simulate


class ScenarioFile:
    """A scenario file that JUPYTER_GPU_SIMULATE points at; rewrite it while kernels and servers run."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.write(data)

    def write(self, data: dict[str, Any]) -> None:
        self.data = copy.deepcopy(data)
        simulate.write_scenario(self.path, self.data)

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to a copy of the scenario and write it (atomically)."""
        data = copy.deepcopy(self.data)
        change(data)
        self.write(data)


def wait_until(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition",
               interval_s: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy and return that; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def spawn_at_pid(pid: int, argv: list[str], tries: int = 20) -> Any:
    """Start ``argv`` as process number ``pid`` (a recycled PID), through /proc/sys/kernel/ns_last_pid.

    Needs root in its PID namespace; the caller skips the test when it returns None.
    """
    import subprocess

    for _ in range(tries):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as file:
                file.write(str(pid - 1))
        except OSError:
            return None
        process = subprocess.Popen(argv)
        if process.pid == pid:
            return process
        process.kill()
        process.wait()
    return None


# -- tests against a real Jupyter Server (pytest-jupyter's fixtures are star-imported by those modules)


@pytest.fixture(autouse=True)
def stop_sampler_after_test(jp_serverapp: Any) -> Any:
    """Stop each test's sampler at once, so lingering threads never add NVML calls to the next test.
    (Autouse where a server test module imports it.)"""
    from jupyter_gpu.server import GpuService  # not for every test that imports this module

    yield
    service = jp_serverapp.web_app.settings.get(GpuService.SETTINGS_KEY)
    if service is not None:
        service.close()


def asynctest(body: Callable[..., Any]) -> Callable[..., Any]:
    """Run an async test body on pytest-jupyter's event loop (the one the server runs on)."""
    from jupyter_core.utils import ensure_event_loop

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return ensure_event_loop(prefer_selector_loop=True).run_until_complete(body(*args, **kwargs))

    return wrapper


async def get_snapshot(jp_fetch: Any) -> dict[str, Any]:
    """``GET jupyter-gpu/snapshot`` as JSON (asserting a 200 JSON answer)."""
    response = await jp_fetch("jupyter-gpu", "snapshot")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)
