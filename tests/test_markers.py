"""The quick loop's markers (``markers.py``): set by folder, file name and the helpers a test
reaches, so ``-m "not browser and not hub and not slow"`` leaves out what starts real processes
without a decorator on each test; and the ``neighbour`` account is one per test process, so
parallel workers never remove it under each other."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kernels
import markers
import pytest
from live_processes import LiveServer
from standin_site import child_env
from support import asynctest, start_session


def _uses_a_kernel() -> None:
    for _kernel in kernels.start():
        pass


def _imports_its_helper() -> None:
    from support import start_kernel

    start_kernel(Path("."))


def _module_helper() -> None:
    LiveServer(Path("."), "alice", "token", {})


def _through_a_helper_of_its_module() -> None:
    _module_helper()


def _runs_a_framework_child() -> None:
    subprocess.run([sys.executable, "-c", "import torch"], env=child_env(None, "demo"))


@asynctest
async def _opens_a_session_of_the_in_process_server(jp_fetch: Any) -> None:
    await start_session(jp_fetch)


def _only_reads() -> None:
    print(Path(".").exists())


@pytest.mark.parametrize(
    "function",
    [
        _uses_a_kernel,
        _imports_its_helper,
        _through_a_helper_of_its_module,
        _runs_a_framework_child,
        _opens_a_session_of_the_in_process_server,
    ],
    ids=lambda f: f.__name__,
)
def test_a_function_reaching_a_helper_that_starts_a_process_is_found(function: Any) -> None:
    assert markers.reaches(function, markers.helpers_that_start_processes())


def test_a_function_that_starts_nothing_is_not() -> None:
    assert not markers.reaches(_only_reads, markers.helpers_that_start_processes())


@dataclass
class _Definition:
    func: Any


@dataclass
class _Info:
    names_closure: list[str]
    name2fixturedefs: dict[str, tuple[_Definition, ...]]


@dataclass
class _Item:
    path: Path
    function: Any
    _fixtureinfo: _Info
    keywords: dict[str, Any] = field(default_factory=dict)

    def add_marker(self, mark: Any) -> None:
        self.keywords[mark.name] = mark


def _item(path: Path, function: Any = _only_reads, fixtures: dict[str, Any] | None = None, **keywords: Any) -> Any:
    fixtures = fixtures or {}
    info = _Info(list(fixtures), {name: (_Definition(func),) for name, func in fixtures.items()})
    return _Item(path, function, info, dict(keywords))


def test_markers_follow_the_folder_the_file_name_and_the_helpers() -> None:
    tests = markers.TESTS
    items = {
        "browser": _item(tests / "browser" / "test_new_page.py"),
        "hub": _item(tests / "test_hub_new.py"),
        "fixture": _item(tests / "test_new.py", fixtures={"kernel": _uses_a_kernel}),
        "frameworks": _item(tests / "test_new.py", frameworks=True),
        "quick": _item(tests / "test_new.py", fixtures={"tmp_path": _only_reads}),
    }
    markers.apply(items.values())  # type: ignore[arg-type]
    marked = {name: {m for m in ("browser", "hub", "slow") if m in item.keywords} for name, item in items.items()}
    assert marked == {
        "browser": {"browser"},
        "hub": {"hub"},
        "fixture": {"slow"},
        "frameworks": {"slow"},
        "quick": set(),
    }


def test_the_neighbour_account_belongs_to_this_test_process(neighbour: Any) -> None:
    assert neighbour.name.endswith(f"-{os.getpid()}")
