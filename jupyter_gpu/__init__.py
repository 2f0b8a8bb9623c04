"""jupyter_gpu: share GPUs sanely from Jupyter.

- ``jupyter_gpu.snapshot()`` — every GPU now (memory, utilization, temperature, power, processes);
  ``.to_dict()`` is the JSON contract the other faces serve.
- ``%load_ext jupyter_gpu`` — the kernel magics (``%gpu_select``, ``%gpu_limit``, ``%gpu_status``,
  ``%gpu_monitor``, ``%gpu_watch``) that configure TensorFlow/Keras, PyTorch and JAX before first use.
- ``jupyter_gpu.GPUMonitor`` — the live ipywidgets panel.
- A Jupyter Server extension (``jupyter-gpu/snapshot``, Prometheus gauges) and a JupyterLab sidebar.
- ``jupyter-gpu status`` — the same snapshot in a terminal.

Importing this package is cheap: it imports no IPython, ipywidgets, tornado, jupyter_server, NVML
binding or framework. Each face is imported when first used.
"""

from __future__ import annotations

from . import _moved
from .core.errors import GPUAlreadyInitializedWarning, GPUPlanMismatchWarning

_moved.install()  # the 0.1 module paths (jupyter_gpu.nvml, jupyter_gpu.widget, ...) for one release

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it as True)
if TYPE_CHECKING:
    from typing import Any

    from .core.snapshot import Snapshot
    from .panel.widget import GPUMonitor

__version__ = "0.1.0"
__all__ = ["GPUAlreadyInitializedWarning", "GPUMonitor", "GPUPlanMismatchWarning", "__version__", "snapshot"]


def snapshot() -> Snapshot:
    """A snapshot of every GPU on this machine (see ``jupyter_gpu.core.snapshot.Snapshot``)."""
    from .sources.nvml import snapshot as take

    return take()


def __getattr__(name: str) -> Any:
    if name == "GPUMonitor":
        from .panel.widget import GPUMonitor

        return GPUMonitor
    raise AttributeError(f"module 'jupyter_gpu' has no attribute {name!r}")


# -- entry points for IPython, Jupyter Server and JupyterLab (each imports its face lazily)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_gpu``: register the magics and apply the configured defaults."""
    from .kernel.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel.extension import unload_ipython_extension as unload

    unload(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_gpu.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-gpu"}]
