"""The admin's defaults, from the environment a spawner (or a shell) sets: one reading for every face.

A kernel reads them into :class:`jupyter_gpu.kernel.magics.GpuMagics`' traits (where traitlets
config may replace them); ``jupyter-gpu run`` reads them as they are, and its options replace the
user's defaults, never the admin's ceiling:

``JUPYTER_GPU_DEFAULT_SELECT``  the selection (``auto:1``); unset or empty: no selection
``JUPYTER_GPU_GROWTH``          memory growth by default (``1``, ``true``, ``yes``, ``on``)
``JUPYTER_GPU_DEFAULT_LIMIT``   the memory limit (``8GiB``, ``25%``, several sizes split a GPU)
``JUPYTER_GPU_MAX_LIMIT``       the admin ceiling, as the process *started* with it
``JUPYTER_GPU_CLAIMS``          ``0``/``false``/``no``/``off`` turns the claims off
``JUPYTER_GPU_CLAIMS_DIR``      the claims directory (default ``/tmp``)
"""

from __future__ import annotations

import os
import sys

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_flag(name: str) -> bool:
    """Whether the variable ``name`` is set to a true word (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(name, "").strip().lower() in _TRUE


def env_not_off(name: str) -> bool:
    """Whether the variable ``name`` is unset or anything but a false word (an on-by-default setting)."""
    return os.environ.get(name, "").strip().lower() not in _FALSE


def default_select() -> str:
    """``JUPYTER_GPU_DEFAULT_SELECT``: the selection applied when nothing else is asked for ('' none)."""
    return os.environ.get("JUPYTER_GPU_DEFAULT_SELECT", "").strip()


def default_growth() -> bool:
    """``JUPYTER_GPU_GROWTH``: memory growth by default."""
    return env_flag("JUPYTER_GPU_GROWTH")


def default_limit() -> str:
    """``JUPYTER_GPU_DEFAULT_LIMIT``: the memory limit applied by default ('' none)."""
    return os.environ.get("JUPYTER_GPU_DEFAULT_LIMIT", "").strip()


def claims_on() -> bool:
    """``JUPYTER_GPU_CLAIMS``: claims are on unless turned off (the board's own rule,
    :func:`jupyter_gpu.sources.claims.claims_enabled`, imported only when asked)."""
    from ..sources.claims import claims_enabled

    return claims_enabled()


def admin_ceiling() -> str:
    """JUPYTER_GPU_MAX_LIMIT as this process was started with it (code in a kernel that changes
    ``os.environ`` does not change it)."""
    plan = sys.modules.get("jupyter_gpu.plan")
    if plan is not None:  # the same function (tests replace it there)
        return str(plan.environment_at_process_start().get("JUPYTER_GPU_MAX_LIMIT", "")).strip()
    from ..core.environ import environment_at_process_start

    return environment_at_process_start().get("JUPYTER_GPU_MAX_LIMIT", "").strip()
