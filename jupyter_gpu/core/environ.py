"""The environment the process was started with (cheap to import: the extension loads it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SIMULATE_ENV_VAR", "SIMULATE_OFF_VALUES", "environment_at_process_start", "simulation_requested"]

SIMULATE_ENV_VAR = "JUPYTER_GPU_SIMULATE"
"""Simulated GPUs beneath nvidia-ml-py (see :mod:`jupyter_gpu.simulate`)."""

SIMULATE_OFF_VALUES = ("", "0", "false", "off", "no")
"""``JUPYTER_GPU_SIMULATE`` values that mean "no simulation" (case-insensitive): the real NVML."""


def simulation_requested(value: str | None) -> bool:
    """Whether a ``JUPYTER_GPU_SIMULATE`` value asks for simulated GPUs (see :data:`SIMULATE_OFF_VALUES`).

    Here, not in :mod:`jupyter_gpu.simulate`, so asking costs no import of the simulation."""
    return value is not None and value.strip().lower() not in SIMULATE_OFF_VALUES


def environment_at_process_start() -> Mapping[str, str]:
    """The environment this process was started with, whatever its code changed since.

    On Linux that is ``/proc/self/environ`` (the environment block the process was executed with;
    assignments to ``os.environ`` do not change it). Elsewhere, ``os.environ`` as it is now.
    """
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    environment = {}
    for entry in raw.split(b"\0"):
        name, separator, value = entry.partition(b"=")
        if separator:
            environment[os.fsdecode(name)] = os.fsdecode(value)
    return environment
