"""The quick loop's markers, set at collection (``tests/conftest.py``) rather than test by test, so
a new test written like its neighbours is marked without a decorator
(``scripts/test.sh -m "not browser and not hub and not slow"``, README: Development):

- ``browser``: every test under ``tests/browser/``;
- ``hub``: every test in a ``test_hub*.py`` module (the hub service, a real JupyterHub);
- ``slow``: every ``frameworks`` test, and every test that starts a real kernel (a session of the
  in-process server included), Jupyter server or Prometheus through the helpers of ``kernels``,
  ``support`` or ``live_processes``, or a program that imports a framework with the environment of
  ``standin_site.child_env`` (the doctor's probes, a child that imports PyTorch or TensorFlow): in
  its own code, the functions of its module it calls, or its fixtures' code (seconds each, more
  under load). The packaging tests are marked ``slow`` by hand (``test_labextension_build.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent

# Names only those helpers have, matched even where a function imports them itself (``from support
# import start_kernel`` in its body); ``start`` and ``attach`` only match as the helpers themselves.
DISTINCT_HELPER_NAMES = frozenset(
    {"start_kernel", "standin_kernel", "LiveServer", "start_prometheus", "child_env", "start_session"}
)


def helpers_that_start_processes() -> tuple[object, ...]:
    """What starts a real kernel, Jupyter server or Prometheus, or a child that imports a framework."""
    import kernels
    import live_processes
    import standin_site
    import support

    return (
        kernels,
        kernels.start,
        kernels.standin_kernel,
        kernels.attach,
        support.start_kernel,
        support.start_session,
        live_processes.LiveServer,
        live_processes.start_prometheus,
        standin_site.child_env,
    )


def reaches(function: Any, helpers: tuple[object, ...], seen: set[int] | None = None, depth: int = 3) -> bool:
    """Whether ``function``'s code names one of ``helpers`` (or :data:`DISTINCT_HELPER_NAMES`),
    directly, in a nested function, or through the functions of its own module it calls (``depth``
    levels)."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)  # the body of an ``@asynctest`` test, not its wrapper
    code = getattr(function, "__code__", None)
    if code is None or id(code) in seen or depth < 0:
        return False
    seen.add(id(code))
    module_globals = getattr(function, "__globals__", {})
    codes = [code]
    while codes:
        current = codes.pop()
        codes.extend(const for const in current.co_consts if hasattr(const, "co_names"))
        for name in current.co_names:
            if name in DISTINCT_HELPER_NAMES:  # imported inside the function: not a global
                return True
            value = module_globals.get(name)
            if value is None:
                continue
            if any(value is helper for helper in helpers):
                return True
            if getattr(value, "__module__", None) == module_globals.get("__name__") and reaches(
                value, helpers, seen, depth - 1
            ):
                return True
    return False


def starts_processes(item: pytest.Item, helpers: tuple[object, ...]) -> bool:
    """Whether the test or one of its fixtures reaches one of ``helpers`` (:func:`reaches`)."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for name in info.names_closure:
            functions.extend(definition.func for definition in info.name2fixturedefs.get(name, ()))
    seen: set[int] = set()
    return any(reaches(function, helpers, seen) for function in functions if function is not None)


def apply(items: Iterable[pytest.Item]) -> None:
    """Add ``browser``, ``hub`` and ``slow`` to the collected ``items`` (see the module docstring)."""
    helpers = helpers_that_start_processes()
    for item in items:
        path = Path(str(item.path))
        if TESTS / "browser" in path.parents:
            item.add_marker(pytest.mark.browser)
        if path.name.startswith("test_hub"):
            item.add_marker(pytest.mark.hub)
        if "slow" not in item.keywords and ("frameworks" in item.keywords or starts_processes(item, helpers)):
            item.add_marker(pytest.mark.slow)
