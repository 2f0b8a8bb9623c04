"""``%gpu_select``, ``%gpu_limit``, ``%gpu_status``, ``%gpu_threads``, ``%gpu_free``, ``%gpu_restart``: the GPU plan.

Load with ``%load_ext jupyter_gpu``. The magics configure TensorFlow/Keras, PyTorch and JAX
*before they first use a GPU* and never import them: a framework not imported yet is configured
the moment it is imported; one imported but not initialized is configured now; one that already
initialized the GPU cannot be changed, and the magic then changes nothing and warns
(:class:`jupyter_gpu.GPUAlreadyInitializedWarning`): restart the kernel.

Caps are cooperative: they bind each framework's allocator, not the driver. Code that ignores them
(another library, a raw CUDA call) is not stopped; hard isolation is MIG or one GPU per container.

Admins set defaults for every kernel with traitlets config (``ipython_config.py``, ``%config``) or
environment variables in the spawner (see :class:`GpuMagics`).

One ``Magics`` class per topic, as in IPython's own ``IPython.core.magics``:

- :mod:`.plan_magics` — :class:`GpuMagics`: ``%gpu_select``, ``%gpu_limit``, ``%gpu_threads`` and the
  configuration; the changes themselves are :mod:`jupyter_gpu.kernel.session`'s (the kernel's face of
  :mod:`jupyter_gpu.session.plan_session`, which ``jupyter-gpu run`` shares), the ``--wait`` loop
  :mod:`jupyter_gpu.session.wait`'s, the printed text :mod:`jupyter_gpu.session.report`'s;
- :mod:`.status` — ``%gpu_status``;
- :mod:`.memory` — ``%gpu_free`` (the work is :mod:`jupyter_gpu.kernel.free`'s);
- :mod:`.restart` — ``%gpu_restart`` (the offer is :mod:`jupyter_gpu.kernel.restart_offer`'s).

:func:`register` also starts the hooks of :mod:`jupyter_gpu.kernel.hooks` (the frameworks' watch,
the after-cell check); :func:`unregister` removes the magics and the after-cell check.
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics

from ...core.errors import GPUAlreadyInitializedWarning
from .. import hooks
from ..hooks import _after_cell, error_notes, traceback_hint
from ..restart_offer import RESTART_MIME, offer_restart
from ..session import gpu_settings_change, take_snapshot
from ..session import warn_already_initialized as _warn_already_initialized
from ..session import would_fit_hints as _fit_hints
from ..wait import POLL_INTERVAL_S, parse_duration
from .arguments import parse
from .memory import GpuMemoryMagics
from .plan_magics import GpuMagics
from .restart import GpuRestartMagics
from .status import GpuStatusMagics

__all__ = ["GpuMagics", "register", "unregister"]

# Names older code and the tests import from here (their homes are the modules named above).
_REEXPORTED = (
    GPUAlreadyInitializedWarning,
    POLL_INTERVAL_S,
    RESTART_MIME,
    _after_cell,
    _fit_hints,
    _warn_already_initialized,
    error_notes,
    gpu_settings_change,
    offer_restart,
    parse,
    parse_duration,
    take_snapshot,
    traceback_hint,
)

#: The magics :func:`unregister` removes.
MAGIC_NAMES = ("gpu_select", "gpu_limit", "gpu_status", "gpu_threads", "gpu_free", "gpu_restart")

_registered: dict[int, tuple[Magics, ...]] = {}


def register(ipython: Any) -> None:
    """Register the magics on ``ipython``, watch the frameworks, apply the configured defaults
    (``%load_ext jupyter_gpu``). A second call on the same shell does nothing."""
    if id(ipython) in _registered:
        return
    magics = GpuMagics(shell=ipython)
    family = (
        magics,
        GpuStatusMagics(shell=ipython),
        GpuMemoryMagics(shell=ipython),
        GpuRestartMagics(ipython, magics.session),
    )
    ipython.register_magics(*family)
    _registered[id(ipython)] = family
    magics.enforce_admin_ceiling()
    hooks.watch_frameworks()
    hooks.install(ipython, explain_oom=lambda: magics.explain_oom)
    magics.apply_defaults()


def unregister(ipython: Any) -> None:
    """Remove the magics. The plan stays in effect (environment and pending import hooks)."""
    family = _registered.pop(id(ipython), None)
    if family is None:
        return
    line_magics = ipython.magics_manager.magics["line"]
    for name in MAGIC_NAMES:
        line_magics.pop(name, None)
    for magics in family:
        if magics in getattr(ipython, "configurables", []):
            ipython.configurables.remove(magics)
    hooks.uninstall(ipython)
