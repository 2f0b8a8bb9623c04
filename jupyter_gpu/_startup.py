"""Run by ``jupyter_gpu_simulate.pth`` at interpreter start, only when ``JUPYTER_GPU_SIMULATE`` is set.

It registers a post-import hook and nothing else: the simulation itself (:mod:`jupyter_gpu.simulate`)
is imported and installed the moment some library imports ``pynvml``, so a process that never
reads NVML pays a fraction of a millisecond.
"""

from __future__ import annotations

import sys
from types import ModuleType

from ._import_hooks import when_imported


def _install(_pynvml: ModuleType) -> None:
    try:
        from .simulate import install_from_environment

        install_from_environment()
    except Exception as error:  # interpreter start-up and the user's import must never fail because of us
        print(f"jupyter_gpu: simulated GPUs not installed: {error}", file=sys.stderr)


def install_simulation_when_pynvml_is_imported() -> None:
    when_imported("pynvml", _install)
