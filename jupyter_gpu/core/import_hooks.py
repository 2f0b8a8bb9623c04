"""Run code right after a module has been imported, without importing it.

Used to configure a framework the moment a kernel imports it (TensorFlow, PyTorch, JAX) and to put
the simulated NVML beneath ``pynvml``. A finder placed first on ``sys.meta_path`` asks the other
finders for the real spec and wraps its loader's ``exec_module``; once the module's own code has
run, the callbacks registered for it run, once each. Whatever way the module is imported
(``import x``, ``import x.sub``, ``importlib.import_module``, another package importing it first)
the top-level module's ``exec_module`` is the one place every path goes through.

A callback that raises is reported on stderr and never breaks the user's import.
"""

from __future__ import annotations

# This module runs at interpreter start-up (jupyter_gpu_simulate.pth) where little is imported yet:
# it sticks to modules that are already loaded then (_thread, sys) and imports the rest lazily.
import _thread
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it as True)

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery
    from collections.abc import Callable, Sequence
    from types import ModuleType

    Callback = Callable[[ModuleType], None]

_callbacks: dict[str, list[Callback]] = {}
_lock = _thread.RLock()
_finder: _PostImportFinder | None = None


class _PostImportFinder:
    """A ``sys.meta_path`` finder that finds nothing itself: it decorates the real loader of watched
    top-level modules."""

    def __init__(self) -> None:
        self._searching = _thread._local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _callbacks or getattr(self._searching, fullname, False):
            return None
        setattr(self._searching, fullname, True)  # our own find_spec call below must not recurse
        try:
            spec = _find_real_spec(self, fullname, path, target)
        finally:
            setattr(self._searching, fullname, False)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real_exec_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec_module(module)
            _run_callbacks(fullname, module)

        spec.loader = _LoaderProxy(loader, exec_module)
        return spec


if TYPE_CHECKING:
    # For type checkers the proxy is the Loader it stands in for (what ``spec.loader`` holds); at
    # run time it stays a plain object, so every attribute it lacks is the real loader's.
    from importlib.abc import Loader as _ProxiedLoader
else:
    _ProxiedLoader = object


class _LoaderProxy(_ProxiedLoader):
    """The real loader with ``exec_module`` replaced; everything else is delegated."""

    def __init__(self, loader: importlib.abc.Loader, exec_module: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._exec_module = exec_module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._exec_module(module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)


def _find_real_spec(
    finder: _PostImportFinder, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _run_callbacks(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _callbacks.pop(name, [])
    for callback in callbacks:
        try:
            callback(module)
        except Exception:
            _report_failure(name)


def _report_failure(name: str) -> None:
    import traceback

    print(f"jupyter_gpu: a post-import hook for {name!r} failed:", file=sys.stderr)
    traceback.print_exc()


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once, right after the top-level module ``name`` is imported.

    If the module is imported already, the callback runs now.
    """
    if "." in name:
        raise ValueError(f"only top-level modules can be watched, not {name!r}")
    global _finder
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _callbacks.setdefault(name, []).append(callback)
            if _finder is None or _finder not in sys.meta_path:
                _finder = _finder or _PostImportFinder()
                sys.meta_path.insert(0, _finder)
            return
    _run_callbacks_now(name, module, callback)


def _run_callbacks_now(name: str, module: ModuleType, callback: Callback) -> None:
    try:
        callback(module)
    except Exception:
        _report_failure(name)


def cancel(name: str, callback: Callback | None = None) -> None:
    """Forget the callbacks (or one callback) waiting for ``name`` to be imported."""
    with _lock:
        if callback is None:
            _callbacks.pop(name, None)
        elif callback in _callbacks.get(name, []):
            _callbacks[name].remove(callback)
            if not _callbacks[name]:
                del _callbacks[name]


def pending(name: str) -> list[Callback]:
    """The callbacks still waiting for ``name`` to be imported."""
    with _lock:
        return list(_callbacks.get(name, []))
