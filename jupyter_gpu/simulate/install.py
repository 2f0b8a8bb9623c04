"""Putting simulated GPUs beneath pynvml in this process, and writing scenario files for them.

The package installs a ``jupyter_gpu_simulate.pth`` file that, when ``JUPYTER_GPU_SIMULATE`` is set,
registers a hook at interpreter start (:mod:`jupyter_gpu._startup`) which calls
:func:`install_from_environment` the moment ``pynvml`` is imported, so child processes (kernels,
servers, workers) install it themselves. jupyter_gpu's own NVML reader also calls it before it
initialises NVML.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from ..core.files import replace_file
from .library import SimulatedNvmlLibrary
from .scenario import ENV_VAR, Scenario, ScenarioSource, simulation_requested


def write_scenario(path: str | os.PathLike[str], scenario: dict[str, Any]) -> None:
    """Write a scenario file atomically, so a running simulation never reads half of it.

    Through :func:`jupyter_gpu.core.files.replace_file` (an unpredictable temporary name created
    with ``O_EXCL``, then ``rename``): a link another user planted in a shared folder is never
    written through. Mode 0644: the processes that read it may run as other users (a JupyterHub's
    service, user servers and kernels); a scenario holds simulated GPUs, nothing private.
    """
    Scenario.from_dict(json.loads(json.dumps(scenario)))  # refuse to write what the simulation would reject
    replace_file(path, json.dumps(scenario, indent=1).encode(), mode=0o644)


_installed: SimulatedNvmlLibrary | None = None
_installed_from_environment = False
_install_lock = threading.Lock()


def install(spec: str) -> SimulatedNvmlLibrary:
    """Put simulated GPUs beneath pynvml in this process and return the simulated library.

    ``spec`` is what ``JUPYTER_GPU_SIMULATE`` would hold. Any NVML state pynvml had is dropped, so
    the next ``nvmlInit()`` initialises the simulation. Raises :class:`ScenarioError` on a bad spec.
    """
    global _installed, _installed_from_environment
    import pynvml

    library = SimulatedNvmlLibrary(ScenarioSource(spec))
    with _install_lock, pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
        _installed = library
        _installed_from_environment = False
    from ..sources import processes

    processes.simulated_identity = lambda pid: library.source.last.process_identity(pid)  # as of the last sample
    return library


def uninstall() -> None:
    """Remove the simulation: the next ``nvmlInit()`` loads the real NVML library again."""
    global _installed, _installed_from_environment
    if _installed is None:
        return
    import pynvml

    with _install_lock, pynvml.libLoadLock:
        if pynvml.nvmlLib is _installed:
            pynvml.nvmlLib = None
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        _installed = None
        _installed_from_environment = False
    from ..sources import processes

    processes.simulated_identity = None


def installed() -> SimulatedNvmlLibrary | None:
    """The simulated library beneath pynvml in this process, or None for real NVML."""
    return _installed


def install_from_environment() -> SimulatedNvmlLibrary | None:
    """Make the simulation follow ``JUPYTER_GPU_SIMULATE``: install it, switch scenario, or remove it.

    Idempotent and cheap. A simulation installed explicitly with :func:`install` is left alone when
    the variable is unset. Raises :class:`ScenarioError` when the variable holds a bad value, so the
    caller can report it (the NVML reader turns it into the snapshot's error). A scenario file's
    path is pinned: the variable is set to the file's absolute path with its links resolved
    (:attr:`ScenarioSource.pinned`), so every child process reads that same file.
    """
    global _installed_from_environment
    spec = os.environ.get(ENV_VAR, "").strip()
    if not simulation_requested(spec):
        if _installed_from_environment:  # the variable was removed: back to the real NVML
            uninstall()
        return None
    with _install_lock:
        if _installed is not None and spec in (_installed.source.spec, _installed.source.pinned):
            return _installed
    library = install(spec)
    _installed_from_environment = True
    # Pinned: children (kernels, servers, workers) read the same file, whatever their folder
    if os.environ.get(ENV_VAR) != library.source.pinned:
        os.environ[ENV_VAR] = library.source.pinned
    return library
