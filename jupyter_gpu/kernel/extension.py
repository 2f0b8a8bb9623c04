"""``%load_ext jupyter_gpu``: registers every magic family of the package in one kernel.

Each family lives in its own module with ``register(ipython)`` / ``unregister(ipython)``:

- :mod:`jupyter_gpu.kernel.magics` — ``%gpu_select``, ``%gpu_limit``, ``%gpu_status`` … (the GPU plan)
- :mod:`jupyter_gpu.kernel.magics.doctor` — ``%gpu_doctor`` (the doctor's report for this kernel)
- :mod:`jupyter_gpu.kernel.monitor_magics` — ``%gpu_monitor``, ``%gpu_watch`` (the live panel, per-cell report)
- :mod:`jupyter_gpu.kernel.report` — writes this kernel's self-report for the server extension
  (attribution inside containers, where NVML's PIDs match no kernel)
"""

from __future__ import annotations

import importlib
from typing import Any

FACES = (
    "jupyter_gpu.kernel.magics",
    "jupyter_gpu.kernel.magics.doctor",
    "jupyter_gpu.kernel.monitor_magics",
    "jupyter_gpu.kernel.report",
)


def load_ipython_extension(ipython: Any) -> None:
    for name in FACES:
        importlib.import_module(name).register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    for name in reversed(FACES):
        importlib.import_module(name).unregister(ipython)
