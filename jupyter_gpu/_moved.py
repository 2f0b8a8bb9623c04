"""Old module paths of the flat 0.1 layout, kept working for one release.

Until 0.1 every module sat at the package root (``jupyter_gpu.nvml``, ``jupyter_gpu.widget``,
``jupyter_gpu.kernel_report``, …). They now live in layers (see ``docs/architecture.md``). Code and
notes that import an old path still work: a meta-path finder, installed by ``import jupyter_gpu``,
answers an old name with the module that took its place, the *same* module object (so
``monkeypatch.setattr("jupyter_gpu.nvml.x", …)`` patches the real thing), and warns once with a
``DeprecationWarning`` naming the new path. Nothing is imported until an old name is asked for.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `import jupyter_gpu` stays ~1 ms
if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderBase
    from importlib.machinery import ModuleSpec
    from types import ModuleType
else:
    _LoaderBase = object

#: Old module (without the ``jupyter_gpu.`` prefix) -> the module that took its place.
MOVED = {
    "_environ": "core.environ",
    "_import_hooks": "core.import_hooks",
    "claims": "sources.claims",
    "errors": "core.errors",
    "free": "kernel.free",
    "gauges": "core.gauges",
    "history": "core.history",
    "ipython_extension": "kernel.extension",
    "kernel_report": "kernel.report",
    "magics": "kernel.magics",
    "monitor_magics": "kernel.monitor_magics",
    "nvml": "sources.nvml",
    "oom": "kernel.oom",
    "peers": "sources.peers",
    "processes": "sources.processes",
    "remote": "sources.remote",
    "sampler": "sources.sampler",
    "snapshots": "core.snapshot",
    "text": "core.text",
    "units": "core.units",
    "visibility": "core.visibility",
    "watch": "kernel.watch",
    "widget": "panel.widget",
}
_PREFIX = __name__.rpartition(".")[0] + "."
_IDENTITY = ("__spec__", "__loader__", "__package__", "__file__", "__cached__", "__path__", "__name__")


class _Alias(_LoaderBase):
    """A loader (duck-typed: ``importlib.abc`` costs 15 ms to import) that hands out the new module."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        import importlib
        import warnings

        warnings.warn(
            f"{spec.name} moved to {self.new_name}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new_name)
        # The import system writes the old name's spec into the module it gets back; the module
        # keeps its own (pickling, ``importlib.reload`` and tracebacks read them).
        self._own = {key: module.__dict__[key] for key in _IDENTITY if key in module.__dict__}
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module is the new one, already executed); give it back its identity."""
        module.__dict__.update(self._own)


class MovedModuleFinder:
    """Finds ``jupyter_gpu.<old>`` for every old name in :data:`MOVED`, and nothing else."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if not fullname.startswith(_PREFIX):
            return None
        new = MOVED.get(fullname[len(_PREFIX) :])
        if new is None:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _Alias(_PREFIX + new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
