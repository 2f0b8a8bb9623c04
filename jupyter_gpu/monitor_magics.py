"""``%gpu_monitor`` and ``%gpu_watch``: the live GPU panel and the per-cell GPU memory report.

Registered by ``%load_ext jupyter_gpu`` (see :mod:`jupyter_gpu.ipython_extension`).
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, magics_class


@magics_class
class MonitorMagics(Magics):
    """The panel and per-cell report magics (filled in below)."""


def register(ipython: Any) -> None:
    """Register ``%gpu_monitor`` and ``%gpu_watch`` in ``ipython``."""
    ipython.register_magics(MonitorMagics)


def unregister(ipython: Any) -> None:
    """Undo :func:`register`: remove event hooks and close panels."""
