"""Simulated GPUs beneath nvidia-ml-py, for tests, demos and machines without a GPU.

The simulation replaces the *C library* that nvidia-ml-py (module ``pynvml``) loads, not pynvml
itself: every ``pynvml`` function still runs its real code (struct layouts, the two-call process
protocol, error classes, version checks) and ends in a ctypes callback defined here. So
jupyter_gpu, nvitop, gpustat or any other NVML reader in the process sees the same simulated GPUs.

Select it with the environment variable ``JUPYTER_GPU_SIMULATE``:

``JUPYTER_GPU_SIMULATE=4``
    four plausible, idle GPUs (1 to 64).
``JUPYTER_GPU_SIMULATE=demo``
    a shared server: 4 GPUs of 2 models, other users' processes, one GPU busy; its figures move
    over a 15-minute loop (a training job ramps up and ends, a kernel goes idle holding memory).
``JUPYTER_GPU_SIMULATE=demo-still``
    the same server standing still (what tests and the stored notebook outputs use).
``JUPYTER_GPU_SIMULATE=/path/to/scenario.json``
    a scenario file (schema below). It is re-read whenever it changes, so a test can change
    utilization, add or remove processes or inject faults while a kernel or server is running.

Unset, empty, ``0``, ``false``, ``off`` or ``no`` mean the real NVML. Anything else that is not a
number from 1 to 64, ``demo``, ``demo-still`` or an existing file is refused with one line (and the real NVML is
used by every other reader). Every simulated GPU's name ends with ``" [simulated]"``
(:data:`SIMULATED_MARKER`), so no reader can mistake it for a real card.

The package installs a ``jupyter_gpu_simulate.pth`` file that, when the variable is set, registers a
hook at interpreter start (:mod:`jupyter_gpu._startup`) which installs the simulation the moment
``pynvml`` is imported, so child processes (kernels, servers, workers) install it themselves.
jupyter_gpu's own NVML reader also calls :func:`install_from_environment` before it initialises
NVML.

The parts, each a module of its own:

- :mod:`.scenario`: the schema, its strict reader, :class:`ScenarioSource`.
- :mod:`.presets`: the built-in scenarios (``N`` GPUs, ``demo``, ``demo-still``).
- :mod:`.motion`: figures that move, as pure functions of the elapsed time (:class:`Track`).
- :mod:`.library`: :class:`SimulatedNvmlLibrary`, the ctypes stand-in for ``libnvidia-ml.so.1``.
- :mod:`.install`: :func:`install`, :func:`uninstall`, :func:`installed`,
  :func:`install_from_environment`, :func:`write_scenario`.
- :mod:`.counters`: NVML calls counted across processes (:func:`calls_in`, :func:`calls_by_process`).
- :mod:`.codes`: NVML's return codes as the simulation answers them.
"""

from __future__ import annotations

from .codes import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_LIBRARY_NOT_FOUND,
    ERROR_NO_PERMISSION,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_UNINITIALIZED,
    ERROR_UNKNOWN,
    GPU_FAULTS,
    SUCCESS,
    WHOLE_NVML_FAULTS,
)
from .counters import CALLS_DIR_VAR, CALLS_SUFFIX, calls_by_process, calls_in
from .install import install, install_from_environment, installed, uninstall, write_scenario
from .library import MEMORY_V2_VERSION, NOT_SUPPORTED_FUNCTIONS, SimulatedNvmlLibrary
from .presets import DEMO_LOOP_S, DEMO_STILL, demo_scenario, plausible_gpus
from .scenario import (
    ENV_VAR,
    MAX_GPUS,
    MAX_MIB,
    MAX_MIG_SLICES,
    MAX_NAME_BYTES,
    MAX_PROCESSES_PER_GPU,
    MAX_SCENARIO_BYTES,
    MAX_TEXT,
    NAME_BUFFER_BYTES,
    OFF_VALUES,
    SIMULATED_MARKER,
    UNSUPPORTABLE_FIELDS,
    Scenario,
    ScenarioError,
    ScenarioSource,
    SimulatedGpu,
    SimulatedProcess,
    SimulatedSlice,
    simulation_requested,
)

__all__ = [
    "CALLS_DIR_VAR",
    "CALLS_SUFFIX",
    "DEMO_LOOP_S",
    "DEMO_STILL",
    "ENV_VAR",
    "ERROR_ARGUMENT_VERSION_MISMATCH",
    "ERROR_DRIVER_NOT_LOADED",
    "ERROR_GPU_IS_LOST",
    "ERROR_INSUFFICIENT_SIZE",
    "ERROR_INVALID_ARGUMENT",
    "ERROR_LIBRARY_NOT_FOUND",
    "ERROR_NOT_FOUND",
    "ERROR_NOT_SUPPORTED",
    "ERROR_NO_PERMISSION",
    "ERROR_UNINITIALIZED",
    "ERROR_UNKNOWN",
    "GPU_FAULTS",
    "MAX_GPUS",
    "MAX_MIB",
    "MAX_MIG_SLICES",
    "MAX_NAME_BYTES",
    "MAX_PROCESSES_PER_GPU",
    "MAX_SCENARIO_BYTES",
    "MAX_TEXT",
    "MEMORY_V2_VERSION",
    "NAME_BUFFER_BYTES",
    "NOT_SUPPORTED_FUNCTIONS",
    "OFF_VALUES",
    "SIMULATED_MARKER",
    "SUCCESS",
    "UNSUPPORTABLE_FIELDS",
    "WHOLE_NVML_FAULTS",
    "Scenario",
    "ScenarioError",
    "ScenarioSource",
    "SimulatedGpu",
    "SimulatedNvmlLibrary",
    "SimulatedProcess",
    "SimulatedSlice",
    "calls_by_process",
    "calls_in",
    "demo_scenario",
    "install",
    "install_from_environment",
    "installed",
    "plausible_gpus",
    "simulation_requested",
    "uninstall",
    "write_scenario",
]
