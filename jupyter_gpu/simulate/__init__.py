"""Simulated GPUs beneath nvidia-ml-py, for tests, demos and machines without a GPU.

The simulation replaces the *C library* that nvidia-ml-py (module ``pynvml``) loads, not pynvml
itself: every ``pynvml`` function still runs its real code (struct layouts, the two-call process
protocol, error classes, version checks) and ends in a ctypes callback defined here. So
jupyter_gpu, nvitop, gpustat or any other NVML reader in the process sees the same simulated GPUs.

Select it with the environment variable ``JUPYTER_GPU_SIMULATE``:

``JUPYTER_GPU_SIMULATE=4``
    four plausible, idle GPUs (1 to 64).
``JUPYTER_GPU_SIMULATE=demo``
    a shared server: 4 GPUs of 2 models, other users' processes, one GPU busy.
``JUPYTER_GPU_SIMULATE=/path/to/scenario.json``
    a scenario file (schema below). It is re-read whenever it changes, so a test can change
    utilization, add or remove processes or inject faults while a kernel or server is running.

Unset, empty, ``0``, ``false``, ``off`` or ``no`` mean the real NVML. Anything else that is not a
number from 1 to 64, ``demo`` or an existing file is refused with one line (and the real NVML is
used by every other reader). Every simulated GPU's name ends with ``" [simulated]"``
(:data:`SIMULATED_MARKER`), so no reader can mistake it for a real card.

The package installs a ``jupyter_gpu_simulate.pth`` file that, when the variable is set, registers a
hook at interpreter start (:mod:`jupyter_gpu._startup`) which installs the simulation the moment
``pynvml`` is imported, so child processes (kernels, servers, workers) install it themselves.
jupyter_gpu's own NVML reader also calls :func:`install_from_environment` before it initialises
NVML.

Scenario schema (every key optional; sizes in MiB, power in W)::

    {
      "driver_version": "550.54.15",
      "cuda_driver_version": 12040,
      "fault": null | "library_not_found" | "driver_not_loaded" | "no_permission",
      "latency_ms": 0,                 # added to every NVML call (a slow or hung driver)
      "missing_functions": [],         # C symbols the library lacks, e.g. an old driver without
                                       # "nvmlDeviceGetComputeRunningProcesses_v3"
      "gpus": [{
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-...",             # default: derived from the index
        "memory_total_mib": 81920,
        "memory_reserved_mib": 0,      # driver-reserved (v2 struct); v1 counts it as used
        "memory_used_mib": 1024,       # default: the sum of the processes' memory
        "utilization": 35, "memory_utilization": 20, "temperature": 41,
        "power_w": 180, "power_limit_w": 400,
        "unsupported": [],             # of "utilization", "temperature", "power", "power_limit"
        "fault": null | "lost",
        "processes": [{"pid": 12345, "memory_mib": 1000, "user": "alice", "name": "python",
                       "type": "compute" | "graphics"}],
        "mig_slices": [{               # present (even empty) = MIG mode enabled on this GPU
          "profile": "3g.40gb",        # the MIG device's profile; its NVML name is "<GPU name> MIG <profile>"
          "uuid": "MIG-...",           # default: derived from the GPU and slice index (R470+ format)
          "gpu_instance_id": 2, "compute_instance_id": 0,   # default: 1 + slice index, 0
          "memory_total_mib": 40192,   # default: the profile's "<n>gb" in MiB
          "memory_used_mib": 0,        # default: the sum of the slice's processes' memory
          "processes": [...]           # as above; the GPU's own "processes" must then be empty
        }]
      }]
    }

MIG (see docs/mig.md for the driver facts this follows): on a GPU with ``mig_slices``,
``nvmlDeviceGetMigMode`` answers enabled, ``nvmlDeviceGetMaxMigDeviceCount`` 7, and
``nvmlDeviceGetMigDeviceHandleByIndex`` a handle per slice (NOT_FOUND past the last one). A MIG
handle answers name, UUID, memory, processes (with their GPU/compute instance ids), its instance
ids and its parent handle; utilization, temperature and power on it answer NOT_SUPPORTED, and so
does utilization on the parent in MIG mode (nvidia-smi prints "N/A" there). The parent's processes
are every slice's, each with its instance ids; its used memory is the slices' sum unless given.

A process's ``user`` and ``name`` stand in for the operating system's answer (NVML itself knows only
PIDs): they are used for PIDs that do not exist on this machine, and they override the real owner
of a PID that does (to simulate another user's process with a real PID).

The schema is strict (it drives every test and demo): unknown keys, wrong types, NaN/Infinity,
negative sizes, percentages above 100, more memory used than the total, more than 64 GPUs are
refused with one line naming the key and the rule (``gpus[0].memory_used_mib must be >= 0``). An
edit that is refused keeps the last good scenario, and snapshots carry the rejection in their
``warnings`` until a good edit arrives.

Counting calls: every simulated library counts its calls per symbol (:attr:`SimulatedNvmlLibrary.calls`,
this process only). With ``JUPYTER_GPU_SIMULATE_CALLS_DIR`` set to a directory, each process also
keeps its total in its own file there (``<pid>-<start>.nvml-calls``, 8 bytes, mmap'd, current at
every call), and :func:`calls_in` sums every process's: a JupyterHub's service, user servers and
kernels, even those of other users (make the directory mode 1777). Unset, nothing is counted in
files and the calls cost what they cost without it.

Symbols of the C library: the ones implemented here answer from the scenario; every other ``nvml*``
symbol answers ``NVML_ERROR_NOT_SUPPORTED``, as a real driver does for a feature a GPU lacks (so
unmodified readers such as ``nvitop -1`` show "N/A"); only the scenario's ``missing_functions``
are truly absent (``NVMLError_FunctionNotFound``, an old driver). Lookups are linear in the number
of processes (64 GPUs x 2,000 processes sample in well under a second).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import mmap
import os
import re
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from ctypes import POINTER, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from ..core.units import MIB

ENV_VAR = "JUPYTER_GPU_SIMULATE"
CALLS_DIR_VAR = "JUPYTER_GPU_SIMULATE_CALLS_DIR"
"""A directory where every process's simulated library counts its NVML calls (see :func:`calls_in`)."""

# NVML return codes (nvml.h); the simulation speaks the C ABI, so it does not borrow pynvml's names.
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_GPU_IS_LOST = 15
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_UNKNOWN = 999

WHOLE_NVML_FAULTS = {
    "library_not_found": ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": ERROR_DRIVER_NOT_LOADED,
    "no_permission": ERROR_NO_PERMISSION,
}
GPU_FAULTS = {"lost": ERROR_GPU_IS_LOST}
UNSUPPORTABLE_FIELDS = {"utilization", "temperature", "power", "power_limit"}

_ERROR_STRINGS = {
    SUCCESS: b"Success",
    ERROR_UNINITIALIZED: b"Uninitialized",
    ERROR_INVALID_ARGUMENT: b"Invalid Argument",
    ERROR_NOT_SUPPORTED: b"Not Supported",
    ERROR_NO_PERMISSION: b"Insufficient Permissions",
    ERROR_NOT_FOUND: b"Not Found",
    ERROR_INSUFFICIENT_SIZE: b"Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: b"Driver Not Loaded",
    ERROR_LIBRARY_NOT_FOUND: b"NVML Shared Library Not Found",
    ERROR_GPU_IS_LOST: b"GPU is lost",
    ERROR_ARGUMENT_VERSION_MISMATCH: b"Argument version mismatch",
    ERROR_UNKNOWN: b"Unknown Error",
}

# Symbols other readers (nvitop, gpustat, nvdashboard) ask for that a simulated GPU reports as
# "Not Supported", as many real GPUs do, rather than lacking them (which makes those tools log errors).
NOT_SUPPORTED_FUNCTIONS = (
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetMemoryBusWidth",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetPowerState",
    "nvmlDeviceGetAccountingMode",
    "nvmlDeviceGetNumGpuCores",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetNvLinkUtilizationCounter",
    "nvmlDeviceGetNvLinkCapability",
    "nvmlDeviceGetNvLinkVersion",  # jupyterlab-nvdashboard probes it at import and catches only NotSupported
)

MEMORY_V2_VERSION = 0x02000028  # sizeof(nvmlMemory_v2_t) | 2 << 24


class _Memory(ctypes.Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class _MemoryV2(ctypes.Structure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class _ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t as the _v2 and _v3 process calls fill it (24 bytes)."""

    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class ScenarioError(ValueError):
    """The scenario (file, number or preset) cannot be used; the message says why, in one line."""


# --------------------------------------------------------------------------------------------
# Scenarios

SIMULATED_MARKER = " [simulated]"
"""Appended to every simulated GPU's name as NVML reports it, so no reader (jupyter_gpu, nvitop,
gpustat, a training script) can mistake a simulated GPU for a real one."""
NAME_BUFFER_BYTES = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE: what nvidia-ml-py hands nvmlDeviceGetName
MAX_NAME_BYTES = NAME_BUFFER_BYTES - 1 - len(SIMULATED_MARKER.encode())  # the marker and the NUL fit too

MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 100_000
MAX_SCENARIO_BYTES = 64 * 1024 * 1024
MAX_TEXT = 255  # characters of a name, user, UUID or driver version
MAX_MIB = float(2**44)  # 16 EiB expressed in MiB: beyond any GPU, and still exact in a float


@dataclass(frozen=True)
class SimulatedProcess:
    pid: int
    memory_mib: float | None
    user: str | None = None
    name: str | None = None
    type: str = "compute"


@dataclass(frozen=True)
class SimulatedGpu:
    index: int
    name: str
    uuid: str
    memory_total_mib: float
    memory_reserved_mib: float
    memory_used_mib: float
    utilization: int
    memory_utilization: int
    temperature: int
    power_w: float
    power_limit_w: float
    unsupported: frozenset[str]
    fault: str | None
    processes: tuple[SimulatedProcess, ...]
    mig_slices: tuple[SimulatedSlice, ...] | None = None  # None: MIG mode disabled

    @property
    def all_processes(self) -> tuple[SimulatedProcess, ...]:
        """The processes NVML lists on this GPU's own handle: in MIG mode, every slice's."""
        if self.mig_slices is None:
            return self.processes
        return tuple(p for s in self.mig_slices for p in s.processes)


@dataclass(frozen=True)
class SimulatedSlice:
    """One MIG device (a GPU instance's compute instance) of a simulated GPU."""

    index: int
    profile: str
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_mib: float
    memory_used_mib: float
    processes: tuple[SimulatedProcess, ...]


MAX_MIG_SLICES = 7  # what nvmlDeviceGetMaxMigDeviceCount answers on an A100/H100
_PROFILE_MEMORY = re.compile(r"(\d+)gb$")

_TOP_KEYS = {"driver_version", "cuda_driver_version", "fault", "latency_ms", "missing_functions", "gpus"}
_GPU_KEYS = {
    "name",
    "uuid",
    "memory_total_mib",
    "memory_reserved_mib",
    "memory_used_mib",
    "utilization",
    "memory_utilization",
    "temperature",
    "power_w",
    "power_limit_w",
    "unsupported",
    "fault",
    "processes",
    "mig_slices",
}
_SLICE_KEYS = {
    "profile",
    "uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "memory_total_mib",
    "memory_used_mib",
    "processes",
}
_PROCESS_KEYS = {"pid", "memory_mib", "user", "name", "type"}
_PROCESS_TYPES = ("compute", "graphics")


class _Reader:
    """Typed reads of one JSON object, each failure a one-line :class:`ScenarioError` naming the key."""

    def __init__(self, data: Any, where: str, known: set[str]) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(f"{where or 'the scenario'} must be a JSON object")
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            prefix = f"{where}." if where else ""
            raise ScenarioError(f"{prefix}{unknown[0]} is not a scenario key; known keys: {', '.join(sorted(known))}")
        self.data = data
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def number(self, key: str, default: float, low: float, high: float) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{self.name(key)} must be a number, not {_kind(value)}")
        if not math.isfinite(value):
            raise ScenarioError(f"{self.name(key)} must be a finite number")
        if value < low:
            raise ScenarioError(f"{self.name(key)} must be >= {low:g}")
        if value > high:
            raise ScenarioError(f"{self.name(key)} must be <= {high:g}")
        return float(value)

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.data.get(key, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{self.name(key)} must be a whole number, not {_kind(value)}")
        if value < low:
            raise ScenarioError(f"{self.name(key)} must be >= {low}")
        if value > high:
            raise ScenarioError(f"{self.name(key)} must be <= {high}")
        return value

    def text(self, key: str, default: str | None, optional: bool = False, max_bytes: int | None = None) -> str | None:
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise ScenarioError(f"{self.name(key)} must be a string, not {_kind(value)}")
        if len(value) > MAX_TEXT:
            raise ScenarioError(f"{self.name(key)} must be at most {MAX_TEXT} characters")
        if "\0" in value:
            raise ScenarioError(f"{self.name(key)} must not contain NUL characters")
        if max_bytes is not None and len(value.encode()) > max_bytes:
            raise ScenarioError(
                f"{self.name(key)} must be at most {max_bytes} bytes in UTF-8 "
                f"(NVML's {NAME_BUFFER_BYTES}-byte name, {SIMULATED_MARKER.strip()!r} included)"
            )
        return value

    def choice(self, key: str, choices: Any) -> str | None:
        value = self.data.get(key)
        if value is not None and value not in choices:
            raise ScenarioError(f"{self.name(key)}: unknown fault {value!r}; choose one of {sorted(choices)} or null")
        return value

    def strings(self, key: str, allowed: set[str] | None = None, what: str = "") -> frozenset[str]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ScenarioError(f"{self.name(key)} must be a list of strings")
        if allowed is not None and set(value) - allowed:
            raise ScenarioError(
                f"{self.name(key)}: cannot mark {sorted(set(value) - allowed)} {what}; choose from {sorted(allowed)}"
            )
        return frozenset(value)

    def items(self, key: str, limit: int) -> list[Any]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise ScenarioError(f"{self.name(key)} must be a list, not {_kind(value)}")
        if len(value) > limit:
            raise ScenarioError(f"{self.name(key)} must have at most {limit} entries")
        return value


def _kind(value: Any) -> str:
    return {bool: "true/false", type(None): "null", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True)
class Scenario:
    """One state of the simulated world, as parsed from JSON (see the module docstring).

    :meth:`from_dict` checks every key's type and range (the scenario drives every test and demo,
    so it must be strict): a bad value raises :class:`ScenarioError` with one line naming the key
    and the rule, e.g. ``gpus[0].memory_used_mib must be >= 0``.
    """

    gpus: tuple[SimulatedGpu, ...]
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    fault: str | None = None
    latency_ms: float = 0.0
    missing_functions: frozenset[str] = field(default_factory=frozenset)
    identities: dict[int, tuple[str | None, str | None]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        top = _Reader(data, "", _TOP_KEYS)
        fault = top.choice("fault", WHOLE_NVML_FAULTS)
        gpus = tuple(_parse_gpu(i, g) for i, g in enumerate(top.items("gpus", MAX_GPUS)))
        identities: dict[int, tuple[str | None, str | None]] = {}
        for gpu in gpus:  # one pass: a PID's identity is a dictionary look-up, whatever the scale
            for process in gpu.all_processes:
                if (process.user or process.name) and process.pid not in identities:
                    identities[process.pid] = (process.user, process.name)
        return cls(
            gpus=gpus,
            driver_version=top.text("driver_version", "550.54.15") or "",
            cuda_driver_version=top.integer("cuda_driver_version", 12040, 0, 2**31 - 1),
            fault=fault,
            latency_ms=top.number("latency_ms", 0.0, 0, 600_000),
            missing_functions=top.strings("missing_functions"),
            identities=identities,
        )

    def process_identity(self, pid: int) -> tuple[str | None, str | None] | None:
        """The (user, name) the scenario gives a PID, or None when it gives neither."""
        return self.identities.get(pid)


def _parse_gpu(index: int, data: Any) -> SimulatedGpu:
    where = f"gpus[{index}]"
    gpu = _Reader(data, where, _GPU_KEYS)
    fault = gpu.choice("fault", GPU_FAULTS)
    unsupported = gpu.strings("unsupported", UNSUPPORTABLE_FIELDS, "unsupported")
    processes = tuple(
        _parse_process(f"{where}.processes[{i}]", p)
        for i, p in enumerate(gpu.items("processes", MAX_PROCESSES_PER_GPU))
    )
    total = gpu.number("memory_total_mib", 81920, 1, MAX_MIB)
    reserved = gpu.number("memory_reserved_mib", 0, 0, total)
    slices = None
    if data.get("mig_slices") is not None:
        if processes:
            raise ScenarioError(
                f"{where}.processes must be empty when mig_slices is given: on a GPU in MIG "
                "mode every process runs in a slice (list it under its slice)"
            )
        slices = _parse_slices(index, where, gpu.items("mig_slices", MAX_MIG_SLICES), total - reserved)
    if "memory_used_mib" in data:
        used = gpu.number("memory_used_mib", 0, 0, MAX_MIB)
    elif slices is not None:
        used = sum(s.memory_used_mib for s in slices)
    else:
        used = sum(p.memory_mib or 0 for p in processes)
    if used + reserved > total:
        raise ScenarioError(
            f"{where}.memory_used_mib ({used:g}) plus memory_reserved_mib ({reserved:g}) "
            f"exceeds memory_total_mib ({total:g})"
        )
    digest = hashlib.sha1(f"jupyter-gpu-sim-{index}".encode()).hexdigest()
    default_uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    power_limit = gpu.number("power_limit_w", 400, 0, 100_000)
    name = gpu.text("name", "NVIDIA A100-SXM4-80GB", max_bytes=MAX_NAME_BYTES) or ""
    for s in slices or ():
        if len(f"{name} MIG {s.profile}".encode()) > MAX_NAME_BYTES:
            raise ScenarioError(
                f"{where}.mig_slices[{s.index}].profile: the MIG device's name "
                f'"{name} MIG {s.profile}" does not fit NVML\'s {NAME_BUFFER_BYTES}-byte name'
            )
    return SimulatedGpu(
        index=index,
        name=name,
        uuid=gpu.text("uuid", default_uuid) or "",
        memory_total_mib=total,
        memory_reserved_mib=reserved,
        memory_used_mib=used,
        utilization=gpu.integer("utilization", 0, 0, 100),
        memory_utilization=gpu.integer("memory_utilization", 0, 0, 100),
        temperature=gpu.integer("temperature", 35, 0, 200),
        power_w=gpu.number("power_w", 60, 0, 100_000),
        power_limit_w=power_limit,
        unsupported=unsupported,
        fault=fault,
        processes=processes,
        mig_slices=slices,
    )


def _parse_slices(gpu_index: int, where: str, items: list[Any], room_mib: float) -> tuple[SimulatedSlice, ...]:
    """A GPU's MIG slices: unique UUIDs and instance-id pairs, memory that fits the GPU."""
    slices: list[SimulatedSlice] = []
    for i, data in enumerate(items):
        at = f"{where}.mig_slices[{i}]"
        reader = _Reader(data, at, _SLICE_KEYS)
        if "profile" not in data:
            raise ScenarioError(f'{at}.profile is required (e.g. "1g.10gb")')
        profile = reader.text("profile", "") or ""
        if not profile.strip() or len(profile) > 32:
            raise ScenarioError(f'{at}.profile must be a profile name such as "1g.10gb" (1 to 32 characters)')
        processes = tuple(
            _parse_process(f"{at}.processes[{j}]", p)
            for j, p in enumerate(reader.items("processes", MAX_PROCESSES_PER_GPU))
        )
        match = _PROFILE_MEMORY.search(profile)
        if "memory_total_mib" not in data and match is None:
            raise ScenarioError(f'{at}.memory_total_mib is required when the profile does not end in "<n>gb"')
        default_total = int(match.group(1)) * 1024 if match else 1
        total = reader.number("memory_total_mib", default_total, 1, MAX_MIB)
        if "memory_used_mib" in data:
            used = reader.number("memory_used_mib", 0, 0, total)
        else:
            used = sum(p.memory_mib or 0 for p in processes)
            if used > total:
                raise ScenarioError(f"{at}: its processes' memory ({used:g} MiB) exceeds memory_total_mib ({total:g})")
        digest = hashlib.sha1(f"jupyter-gpu-sim-{gpu_index}-mig-{i}".encode()).hexdigest()
        default_uuid = f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        uuid = reader.text("uuid", default_uuid) or ""
        if not uuid.startswith("MIG-") or len(uuid) > 80 or any(c.isspace() or c == "," for c in uuid):
            raise ScenarioError(
                f'{at}.uuid must start with "MIG-" and hold no spaces or commas '
                "(at most 80 characters, NVML's UUID buffer)"
            )
        slices.append(
            SimulatedSlice(
                index=i,
                profile=profile,
                uuid=uuid,
                gpu_instance_id=reader.integer("gpu_instance_id", i + 1, 0, 2**32 - 2),
                compute_instance_id=reader.integer("compute_instance_id", 0, 0, 2**32 - 2),
                memory_total_mib=total,
                memory_used_mib=used,
                processes=processes,
            )
        )
    seen_uuids: set[str] = set()
    seen_ids: set[tuple[int, int]] = set()
    for s in slices:
        ids = (s.gpu_instance_id, s.compute_instance_id)
        if s.uuid in seen_uuids:
            raise ScenarioError(f"{where}.mig_slices[{s.index}].uuid {s.uuid!r} is used by another slice")
        if ids in seen_ids:
            raise ScenarioError(
                f"{where}.mig_slices[{s.index}]: gpu_instance_id {ids[0]} with compute_instance_id "
                f"{ids[1]} is used by another slice"
            )
        seen_uuids.add(s.uuid)
        seen_ids.add(ids)
    # Compute instances of one GPU instance share its memory: count each GPU instance once.
    per_instance: dict[int, float] = {}
    for s in slices:
        per_instance[s.gpu_instance_id] = max(per_instance.get(s.gpu_instance_id, 0), s.memory_total_mib)
    if sum(per_instance.values()) > room_mib:
        raise ScenarioError(
            f"{where}.mig_slices: the GPU instances' memory ({sum(per_instance.values()):g} MiB) "
            f"exceeds the GPU's memory_total_mib less memory_reserved_mib ({room_mib:g})"
        )
    return tuple(slices)


def _parse_process(where: str, data: Any) -> SimulatedProcess:
    process = _Reader(data, where, _PROCESS_KEYS)
    if "pid" not in data:
        raise ScenarioError(f"{where}.pid is required")
    memory = None if data.get("memory_mib") is None else process.number("memory_mib", 0, 0, MAX_MIB)
    kind = data.get("type", "compute")
    if kind not in _PROCESS_TYPES:
        raise ScenarioError(f"{where}.type must be one of {list(_PROCESS_TYPES)}, not {kind!r}")
    return SimulatedProcess(
        pid=process.integer("pid", 0, 1, 2**32 - 1),
        memory_mib=memory,
        user=process.text("user", None, optional=True),
        name=process.text("name", None, optional=True),
        type=kind,
    )


def plausible_gpus(count: int) -> dict[str, Any]:
    """A scenario of ``count`` idle A100 80GB GPUs with nothing running."""
    if count < 0:
        raise ScenarioError("the number of simulated GPUs cannot be negative")
    return {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 0,
                "temperature": 32 + i,
                "power_w": 58 + i,
                "power_limit_w": 400,
            }
            for i in range(count)
        ]
    }


def demo_scenario() -> dict[str, Any]:
    """A shared server: 4 GPUs of 2 models, other users' processes, one busy GPU."""
    return {
        "driver_version": "550.54.15",
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 97,
                "memory_utilization": 61,
                "temperature": 71,
                "power_w": 372,
                "power_limit_w": 400,
                "processes": [{"pid": 910001, "memory_mib": 76000, "user": "bob", "name": "python"}],
            },
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 12,
                "memory_utilization": 5,
                "temperature": 44,
                "power_w": 96,
                "power_limit_w": 400,
                "processes": [
                    {"pid": 910002, "memory_mib": 18432, "user": "carol", "name": "python"},
                    {"pid": 910003, "memory_mib": 2048, "user": "carol", "name": "python"},
                ],
            },
            {
                "name": "NVIDIA RTX A6000",
                "memory_total_mib": 49140,
                "memory_reserved_mib": 300,
                "utilization": 0,
                "temperature": 33,
                "power_w": 22,
                "power_limit_w": 300,
            },
            {
                "name": "NVIDIA RTX A6000",
                "memory_total_mib": 49140,
                "memory_reserved_mib": 300,
                "utilization": 3,
                "temperature": 36,
                "power_w": 31,
                "power_limit_w": 300,
                "processes": [{"pid": 910004, "memory_mib": 1200, "user": "dave", "name": "Xorg", "type": "graphics"}],
            },
        ],
    }


OFF_VALUES = ("", "0", "false", "off", "no")
"""``JUPYTER_GPU_SIMULATE`` values that mean "no simulation" (case-insensitive): the real NVML."""


def simulation_requested(value: str | None) -> bool:
    """Whether a ``JUPYTER_GPU_SIMULATE`` value asks for simulated GPUs (see :data:`OFF_VALUES`)."""
    return value is not None and value.strip().lower() not in OFF_VALUES


class ScenarioSource:
    """Where the current scenario comes from: a fixed preset, or a file re-read when it changes.

    ``spec`` is what ``JUPYTER_GPU_SIMULATE`` holds: a number of GPUs (1 to 64), ``demo``, or the
    path of a scenario file; anything else raises :class:`ScenarioError` with one line.

    A file edit that cannot be used (unreadable, half-written, not JSON, or breaking a rule of the
    schema) keeps the last good scenario; the reason is kept in :attr:`last_error` until a good
    edit arrives, and snapshots carry it as a warning. Each bad edit is parsed once, not at every
    NVML call. Write scenario files atomically (:func:`write_scenario`) in tests.
    """

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._stamp: tuple[int, int, int] | None = None
        spec = spec.strip()
        if spec.isdigit():
            count = int(spec)
            if not 1 <= count <= MAX_GPUS:
                raise ScenarioError(
                    f"{ENV_VAR}={spec!r}: the number of simulated GPUs must be 1 to {MAX_GPUS} "
                    "(unset the variable, or set it to 0, to read the real GPUs)"
                )
            self._scenario = Scenario.from_dict(plausible_gpus(count))
        elif spec == "demo":
            self._scenario = Scenario.from_dict(demo_scenario())
        else:
            self._path = Path(spec).expanduser()
            if not spec or "\0" in spec or not self._path.is_file():
                raise ScenarioError(
                    f"{ENV_VAR}={spec[:200]!r}: expected a number of GPUs (1 to {MAX_GPUS}), 'demo', or the "
                    "path of a JSON scenario file, and no such file exists (unset it, or set it to 0, for "
                    "the real GPUs)"
                )
            try:
                self._scenario = self._load()
            except ScenarioError as error:
                raise ScenarioError(f"{ENV_VAR}={spec[:200]!r}: {_without_path(str(error), self._path)}") from None

    def _load(self) -> Scenario:
        """Parse the file; remembers its stamp even when it is refused, so it is parsed once."""
        assert self._path is not None
        try:
            stat = self._path.stat()
            self._stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if stat.st_size > MAX_SCENARIO_BYTES:
                raise ScenarioError(f"the file is larger than {MAX_SCENARIO_BYTES // 2**20} MiB")
            text = self._path.read_text(encoding="utf-8")
        except OSError as error:
            raise ScenarioError(f"{self._path}: cannot be read ({error.strerror or error})") from error
        except UnicodeDecodeError as error:
            raise ScenarioError(f"{self._path}: not UTF-8 text") from error
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise ScenarioError(f"{self._path}: JSON nested too deeply") from None
        except ValueError as error:
            raise ScenarioError(f"{self._path}: not valid JSON ({error})") from error
        try:
            return Scenario.from_dict(data)
        except RecursionError:
            raise ScenarioError(f"{self._path}: JSON nested too deeply") from None

    def current(self) -> Scenario:
        """The scenario now: for a file, re-read if its modification stamp changed."""
        if self._path is None:
            return self._scenario
        try:
            stat = self._path.stat()
        except OSError as error:
            self.last_error = f"{self._path}: cannot be read ({error.strerror or error})"
            return self._scenario
        if (stat.st_mtime_ns, stat.st_size, stat.st_ino) != self._stamp:
            with self._lock:
                if (stat.st_mtime_ns, stat.st_size, stat.st_ino) != self._stamp:
                    try:
                        self._scenario = self._load()
                        self.last_error = None
                    except ScenarioError as error:
                        self.last_error = str(error)
        return self._scenario

    @property
    def last(self) -> Scenario:
        """The scenario as of the latest :meth:`current` call, without looking at the file again."""
        return self._scenario

    def rejection(self) -> str | None:
        """One line for a snapshot's ``warnings`` while the newest edit is refused, else None."""
        error = self.last_error
        if error is None:
            return None
        return f"simulated scenario rejected: {_without_path(error, self._path)} (keeping the last good scenario)"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a scenario may hold")


def _without_path(error: str, path: Path | None) -> str:
    prefix = f"{path}: "
    return error[len(prefix) :] if path is not None and error.startswith(prefix) else error


def write_scenario(path: str | os.PathLike[str], scenario: dict[str, Any]) -> None:
    """Write a scenario file atomically, so a running simulation never reads half of it."""
    path = Path(path)
    Scenario.from_dict(json.loads(json.dumps(scenario)))  # refuse to write what the simulation would reject
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(scenario, indent=1))
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# The simulated C library


class SimulatedNvmlLibrary:
    """Stands in for ``CDLL("libnvidia-ml.so.1")``: one ctypes callback per exported C symbol.

    Attributes are only the symbols implemented (minus the scenario's ``missing_functions``), so a
    missing symbol behaves as on a real old driver. Exceptions inside a callback never reach C:
    they return NVML_ERROR_UNKNOWN and are kept in :attr:`callback_errors` for tests to inspect.
    :attr:`calls` counts calls per symbol in this process; with ``JUPYTER_GPU_SIMULATE_CALLS_DIR``
    set when the library is created (:attr:`calls_directory`), each call is also counted in this
    process's file there, for :func:`calls_in` to sum across processes.
    """

    def __init__(self, source: ScenarioSource) -> None:
        self.source = source
        self.calls: Counter[str] = Counter()
        self.calls_directory: str | None = os.environ.get(CALLS_DIR_VAR) or None
        self.callback_errors: list[str] = []
        self._initialized = 0
        self._handle_cells = [ctypes.c_int(i) for i in range(64)]
        self._handle_to_index = {ctypes.addressof(cell): i for i, cell in enumerate(self._handle_cells)}
        self._mig_cells = [ctypes.c_int(i) for i in range(64 * MAX_MIG_SLICES)]
        self._handle_to_slice = {
            ctypes.addressof(cell): divmod(i, MAX_MIG_SLICES) for i, cell in enumerate(self._mig_cells)
        }
        self._error_strings = {code: ctypes.create_string_buffer(text) for code, text in _ERROR_STRINGS.items()}
        self._callbacks: dict[str, Any] = {}
        self._packed: dict[tuple[int, int, str, int], tuple[SimulatedGpu, int, bytes]] = {}
        self._missing = missing = source.current().missing_functions
        symbols = self._symbols()
        for name in NOT_SUPPORTED_FUNCTIONS:
            symbols.setdefault(name, (c_int, (), self._not_supported))
        for name, (restype, argtypes, implementation) in symbols.items():
            if name in missing:
                continue
            callback = ctypes.CFUNCTYPE(restype, *argtypes)(self._guard(name, implementation, restype))
            self._callbacks[name] = callback  # keep the thunk alive as long as the library
            setattr(self, name, callback)

    def __getattr__(self, name: str) -> Any:
        """Every other NVML symbol answers NVML_ERROR_NOT_SUPPORTED, as a real driver does for a
        feature the GPU lacks (so unmodified readers such as ``nvitop`` show "N/A", never a
        traceback). Only the scenario's ``missing_functions`` are truly absent (FunctionNotFound)."""
        if not name.startswith("nvml") or name in self.__dict__.get("_missing", ()):
            raise AttributeError(name)
        callback = ctypes.CFUNCTYPE(c_int)(self._guard(name, self._not_supported, c_int))
        self._callbacks[name] = callback
        setattr(self, name, callback)
        return callback

    # -- plumbing

    def _guard(self, name: str, implementation: Callable[..., int], restype: Any) -> Callable[..., Any]:
        if self.calls_directory is not None:  # opt-in: also count in a file other processes can read
            tick = _call_ticker(self.calls_directory)
            inner = self._guard_uncounted(name, implementation, restype)

            def counted(*args: Any) -> Any:
                tick()
                return inner(*args)

            return counted
        return self._guard_uncounted(name, implementation, restype)

    def _guard_uncounted(self, name: str, implementation: Callable[..., int], restype: Any) -> Callable[..., Any]:
        calls = self.calls
        errors = self.callback_errors
        source = self.source
        is_error_string = restype is c_void_p

        def callback(*args: Any) -> Any:
            calls[name] += 1
            try:
                latency_ms = source.current().latency_ms
                if latency_ms:
                    time.sleep(latency_ms / 1000)
                return implementation(*args)
            except BaseException as error:  # a raise inside a ctypes callback would be lost
                errors.append(f"{name}: {type(error).__name__}: {error}")
                return ctypes.addressof(self._error_strings[ERROR_UNKNOWN]) if is_error_string else ERROR_UNKNOWN

        return callback

    def _symbols(self) -> dict[str, tuple[Any, tuple[Any, ...], Callable[..., Any]]]:
        p = c_void_p
        return {
            "nvmlInit_v2": (c_int, (), lambda: self._init(0)),
            "nvmlInitWithFlags": (c_int, (c_uint,), self._init),
            "nvmlShutdown": (c_int, (), self._shutdown),
            "nvmlErrorString": (c_void_p, (c_int,), self._error_string),
            "nvmlSystemGetDriverVersion": (c_int, (p, c_uint), self._driver_version),
            "nvmlSystemGetNVMLVersion": (c_int, (p, c_uint), self._nvml_version),
            "nvmlSystemGetCudaDriverVersion": (c_int, (p,), self._cuda_driver_version),
            "nvmlSystemGetCudaDriverVersion_v2": (c_int, (p,), self._cuda_driver_version),
            "nvmlSystemGetProcessName": (c_int, (c_uint, p, c_uint), self._process_name),
            "nvmlDeviceGetCount_v2": (c_int, (p,), self._device_count),
            "nvmlDeviceGetCount": (c_int, (p,), self._device_count),
            "nvmlDeviceGetHandleByIndex_v2": (c_int, (c_uint, p), self._handle_by_index),
            "nvmlDeviceGetHandleByIndex": (c_int, (c_uint, p), self._handle_by_index),
            "nvmlDeviceGetHandleByUUID": (c_int, (c_char_p, p), self._handle_by_uuid),
            "nvmlDeviceGetIndex": (c_int, (p, p), self._device_index),
            "nvmlDeviceGetName": (c_int, (p, p, c_uint), self._device_name),
            "nvmlDeviceGetUUID": (c_int, (p, p, c_uint), self._device_uuid),
            "nvmlDeviceGetMemoryInfo": (c_int, (p, p), self._memory_v1),
            "nvmlDeviceGetMemoryInfo_v2": (c_int, (p, p), self._memory_v2),
            "nvmlDeviceGetUtilizationRates": (c_int, (p, p), self._utilization),
            "nvmlDeviceGetTemperature": (c_int, (p, c_uint, p), self._temperature),
            "nvmlDeviceGetPowerUsage": (c_int, (p, p), self._power_usage),
            "nvmlDeviceGetEnforcedPowerLimit": (c_int, (p, p), self._power_limit),
            "nvmlDeviceGetPowerManagementLimit": (c_int, (p, p), self._power_limit),
            "nvmlDeviceGetComputeRunningProcesses_v3": (c_int, (p, p, p), self._processes("compute", 3)),
            "nvmlDeviceGetComputeRunningProcesses_v2": (c_int, (p, p, p), self._processes("compute", 2)),
            "nvmlDeviceGetComputeRunningProcesses": (c_int, (p, p, p), self._processes("compute", 1)),
            "nvmlDeviceGetGraphicsRunningProcesses_v3": (c_int, (p, p, p), self._processes("graphics", 3)),
            "nvmlDeviceGetGraphicsRunningProcesses_v2": (c_int, (p, p, p), self._processes("graphics", 2)),
            "nvmlDeviceGetGraphicsRunningProcesses": (c_int, (p, p, p), self._processes("graphics", 1)),
            "nvmlDeviceGetMigMode": (c_int, (p, p, p), self._mig_mode),
            "nvmlDeviceGetMaxMigDeviceCount": (c_int, (p, p), self._max_mig_count),
            "nvmlDeviceGetMigDeviceHandleByIndex": (c_int, (p, c_uint, p), self._mig_handle_by_index),
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": (c_int, (p, p), self._parent_handle),
            "nvmlDeviceIsMigDeviceHandle": (c_int, (p, p), self._is_mig_handle),
            "nvmlDeviceGetGpuInstanceId": (c_int, (p, p), self._instance_id("gpu_instance_id")),
            "nvmlDeviceGetComputeInstanceId": (c_int, (p, p), self._instance_id("compute_instance_id")),
        }

    @staticmethod
    def _write_string(text: str, buffer: int, length: int) -> int:
        data = text.encode() + b"\0"
        if len(data) > length:
            return ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buffer, data, len(data))
        return SUCCESS

    @staticmethod
    def _write_uint(pointer: int, value: int) -> None:
        ctypes.cast(pointer, POINTER(c_uint))[0] = value

    def _ready(self) -> tuple[Scenario, int]:
        """The scenario, and the error every call returns now (SUCCESS when none)."""
        scenario = self.source.current()
        if scenario.fault is not None:
            return scenario, WHOLE_NVML_FAULTS[scenario.fault]
        if not self._initialized:
            return scenario, ERROR_UNINITIALIZED
        return scenario, SUCCESS

    def _gpu(self, handle: int | None) -> tuple[SimulatedGpu | None, int]:
        """The GPU of a whole-GPU handle (a MIG handle here is an invalid argument)."""
        gpu, slice_, error = self._device(handle)
        if slice_ is not None:
            return None, ERROR_INVALID_ARGUMENT
        return gpu, error

    def _device(self, handle: int | None) -> tuple[SimulatedGpu | None, SimulatedSlice | None, int]:
        """(GPU, MIG slice or None, error) of a whole-GPU or MIG device handle."""
        scenario, error = self._ready()
        if error:
            return None, None, error
        index = self._handle_to_index.get(handle or 0)
        position = None
        if index is None:
            found = self._handle_to_slice.get(handle or 0)
            if found is None:
                return None, None, ERROR_INVALID_ARGUMENT
            index, position = found
        if index >= len(scenario.gpus):
            return None, None, ERROR_INVALID_ARGUMENT
        gpu = scenario.gpus[index]
        if gpu.fault is not None:
            return None, None, GPU_FAULTS[gpu.fault]
        if position is None:
            return gpu, None, SUCCESS
        if gpu.mig_slices is None or position >= len(gpu.mig_slices):
            return None, None, ERROR_INVALID_ARGUMENT  # the slice was destroyed: its handle is stale
        return gpu, gpu.mig_slices[position], SUCCESS

    def _not_supported(self, *_args: Any) -> int:
        return self._ready()[1] or ERROR_NOT_SUPPORTED

    # -- system

    def _init(self, flags: int) -> int:
        scenario = self.source.current()
        if scenario.fault is not None:
            return WHOLE_NVML_FAULTS[scenario.fault]
        self._initialized += 1
        return SUCCESS

    def _shutdown(self) -> int:
        if not self._initialized:
            return ERROR_UNINITIALIZED
        self._initialized -= 1
        return SUCCESS

    def _error_string(self, code: int) -> int:
        buffer = self._error_strings.get(code, self._error_strings[ERROR_UNKNOWN])
        return ctypes.addressof(buffer)

    def _driver_version(self, buffer: int, length: int) -> int:
        scenario, error = self._ready()
        return error or self._write_string(scenario.driver_version, buffer, length)

    def _nvml_version(self, buffer: int, length: int) -> int:
        scenario, error = self._ready()
        return error or self._write_string("12." + scenario.driver_version, buffer, length)

    def _cuda_driver_version(self, out: int) -> int:
        scenario, error = self._ready()
        if not error:
            ctypes.cast(out, POINTER(c_int))[0] = scenario.cuda_driver_version
        return error

    def _process_name(self, pid: int, buffer: int, length: int) -> int:
        scenario, error = self._ready()
        if error:
            return error
        identity = scenario.process_identity(pid)
        if identity is None or identity[1] is None:
            return ERROR_NOT_FOUND
        return self._write_string(identity[1], buffer, length)

    # -- devices

    def _device_count(self, out: int) -> int:
        scenario, error = self._ready()
        if not error:
            self._write_uint(out, len(scenario.gpus))
        return error

    def _handle_by_index(self, index: int, out: int) -> int:
        scenario, error = self._ready()
        if error:
            return error
        if index >= len(scenario.gpus):
            return ERROR_INVALID_ARGUMENT
        if scenario.gpus[index].fault is not None:
            return GPU_FAULTS[scenario.gpus[index].fault]
        ctypes.cast(out, POINTER(c_void_p))[0] = ctypes.addressof(self._handle_cells[index])
        return SUCCESS

    def _handle_by_uuid(self, uuid: bytes, out: int) -> int:
        scenario, error = self._ready()
        if error:
            return error
        for gpu in scenario.gpus:
            if gpu.uuid.encode() == uuid:
                return self._handle_by_index(gpu.index, out)
            for slice_ in gpu.mig_slices or ():
                if slice_.uuid.encode() == uuid:
                    return self._mig_handle_by_index(ctypes.addressof(self._handle_cells[gpu.index]), slice_.index, out)
        return ERROR_NOT_FOUND

    def _device_index(self, handle: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None:
            return ERROR_NOT_SUPPORTED  # a MIG device has no NVML index of its own
        self._write_uint(out, gpu.index)
        return SUCCESS

    def _device_name(self, handle: int, buffer: int, length: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        name = gpu.name if slice_ is None else f"{gpu.name} MIG {slice_.profile}"
        return self._write_string(name + SIMULATED_MARKER, buffer, length)

    def _device_uuid(self, handle: int, buffer: int, length: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        return self._write_string(gpu.uuid if slice_ is None else slice_.uuid, buffer, length)

    def _memory_figures(self, handle: int) -> tuple[tuple[float, float, float] | None, int]:
        """(total, reserved, used) MiB of a GPU or MIG device."""
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return None, error
        if slice_ is not None:
            return (slice_.memory_total_mib, 0.0, slice_.memory_used_mib), SUCCESS
        return (gpu.memory_total_mib, gpu.memory_reserved_mib, gpu.memory_used_mib), SUCCESS

    def _memory_v1(self, handle: int, out: int) -> int:
        figures, error = self._memory_figures(handle)
        if figures is None:
            return error
        total_mib, reserved_mib, used_mib = figures
        memory = ctypes.cast(out, POINTER(_Memory))[0]
        used = int((used_mib + reserved_mib) * MIB)
        memory.total = int(total_mib * MIB)
        memory.used = used
        memory.free = memory.total - used
        return SUCCESS

    def _memory_v2(self, handle: int, out: int) -> int:
        figures, error = self._memory_figures(handle)
        if figures is None:
            return error
        total_mib, reserved_mib, used_mib = figures
        memory = ctypes.cast(out, POINTER(_MemoryV2))[0]
        if memory.version != MEMORY_V2_VERSION:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        memory.total = int(total_mib * MIB)
        memory.reserved = int(reserved_mib * MIB)
        memory.used = int(used_mib * MIB)
        memory.free = memory.total - memory.reserved - memory.used
        return SUCCESS

    def _whole_gpu(self, handle: int) -> tuple[SimulatedGpu | None, int]:
        """A whole GPU for figures a MIG device does not have (NOT_SUPPORTED on a MIG handle)."""
        gpu, slice_, error = self._device(handle)
        if slice_ is not None:
            return None, ERROR_NOT_SUPPORTED
        return gpu, error

    def _utilization(self, handle: int, out: int) -> int:
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "utilization" in gpu.unsupported or gpu.mig_slices is not None:
            return ERROR_NOT_SUPPORTED
        rates = ctypes.cast(out, POINTER(_Utilization))[0]
        rates.gpu = gpu.utilization
        rates.memory = gpu.memory_utilization
        return SUCCESS

    def _temperature(self, handle: int, sensor: int, out: int) -> int:
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "temperature" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        if sensor != 0:  # NVML_TEMPERATURE_GPU is the only sensor
            return ERROR_INVALID_ARGUMENT
        self._write_uint(out, gpu.temperature)
        return SUCCESS

    def _power_usage(self, handle: int, out: int) -> int:
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "power" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        self._write_uint(out, round(gpu.power_w * 1000))  # milliwatts
        return SUCCESS

    def _power_limit(self, handle: int, out: int) -> int:
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "power_limit" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        self._write_uint(out, round(gpu.power_limit_w * 1000))
        return SUCCESS

    def _processes(self, kind: str, version: int) -> Callable[[int, int, int], int]:
        size = ctypes.sizeof(_ProcessInfoV1 if version == 1 else _ProcessInfo)

        def implementation(handle: int, count_pointer: int, infos: int | None) -> int:
            gpu, slice_, error = self._device(handle)
            if gpu is None:
                return error
            count, packed = self._packed_processes(gpu, slice_, kind, version)
            counter = ctypes.cast(count_pointer, POINTER(c_uint))
            capacity = counter[0]
            counter[0] = count
            if not count:
                return SUCCESS
            if capacity < count or not infos:
                return ERROR_INSUFFICIENT_SIZE
            ctypes.memmove(infos, packed, count * size)
            return SUCCESS

        return implementation

    def _packed_processes(
        self, gpu: SimulatedGpu, slice_: SimulatedSlice | None, kind: str, version: int
    ) -> tuple[int, bytes]:
        """A GPU's (or MIG device's) process entries as the C structs, packed once per scenario
        (linear in processes). In MIG mode each entry carries its slice's instance ids; a whole
        GPU's carry 0xFFFFFFFF, as real drivers report."""
        key = (gpu.index, -1 if slice_ is None else slice_.index, kind, version)
        cached = self._packed.get(key)
        if cached is not None and cached[0] is gpu:
            return cached[1], cached[2]
        layout = _PACK_V1 if version == 1 else _PACK_V2
        if gpu.mig_slices is None:
            groups = [(0xFFFFFFFF, 0xFFFFFFFF, gpu.processes)]
        else:
            groups = [
                (s.gpu_instance_id, s.compute_instance_id, s.processes)
                for s in (gpu.mig_slices if slice_ is None else (slice_,))
            ]
        chunks = []
        for gi, ci, processes in groups:
            for process in processes:
                if process.type != kind:
                    continue
                memory = 2**64 - 1 if process.memory_mib is None else int(process.memory_mib * MIB)
                chunks.append(
                    layout.pack(process.pid, memory) if version == 1 else layout.pack(process.pid, memory, gi, ci)
                )
        packed = b"".join(chunks)
        self._packed[key] = (gpu, len(chunks), packed)
        return len(chunks), packed

    # -- MIG

    def _mig_mode(self, handle: int, current: int, pending: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None or gpu.mig_slices is None:
            return ERROR_NOT_SUPPORTED  # a GPU without mig_slices stands for one that cannot do MIG
        self._write_uint(current, 1)  # NVML_DEVICE_MIG_ENABLE
        self._write_uint(pending, 1)
        return SUCCESS

    def _max_mig_count(self, handle: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None:
            return ERROR_NOT_SUPPORTED
        self._write_uint(out, 0 if gpu.mig_slices is None else MAX_MIG_SLICES)  # zero when MIG is off
        return SUCCESS

    def _mig_handle_by_index(self, handle: int, index: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None or gpu.mig_slices is None:
            return ERROR_NOT_SUPPORTED if slice_ is None else ERROR_INVALID_ARGUMENT
        if index >= MAX_MIG_SLICES:
            return ERROR_INVALID_ARGUMENT
        if index >= len(gpu.mig_slices):
            return ERROR_NOT_FOUND
        ctypes.cast(out, POINTER(c_void_p))[0] = ctypes.addressof(self._mig_cells[gpu.index * MAX_MIG_SLICES + index])
        return SUCCESS

    def _parent_handle(self, handle: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is None:
            return ERROR_INVALID_ARGUMENT  # not a MIG device handle
        ctypes.cast(out, POINTER(c_void_p))[0] = ctypes.addressof(self._handle_cells[gpu.index])
        return SUCCESS

    def _is_mig_handle(self, handle: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        self._write_uint(out, 0 if slice_ is None else 1)
        return SUCCESS

    def _instance_id(self, field_name: str) -> Callable[[int, int], int]:
        def implementation(handle: int, out: int) -> int:
            gpu, slice_, error = self._device(handle)
            if gpu is None:
                return error
            if slice_ is None:
                return ERROR_NOT_SUPPORTED  # a whole GPU is no GPU/compute instance
            self._write_uint(out, getattr(slice_, field_name))
            return SUCCESS

        return implementation


_PACK_V1 = struct.Struct("=I4xQ")  # nvmlProcessInfo_v1_t: pid, (padding), usedGpuMemory
_PACK_V2 = struct.Struct("=I4xQII")  # nvmlProcessInfo_t (_v2/_v3): ..., gpuInstanceId, computeInstanceId


# --------------------------------------------------------------------------------------------
# Installing beneath pynvml

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
    caller can report it (the NVML reader turns it into the snapshot's error).
    """
    global _installed_from_environment
    spec = os.environ.get(ENV_VAR, "").strip()
    if not simulation_requested(spec):
        if _installed_from_environment:  # the variable was removed: back to the real NVML
            uninstall()
        return None
    with _install_lock:
        if _installed is not None and _installed.source.spec == spec:
            return _installed
    library = install(spec)
    _installed_from_environment = True
    return library


# --------------------------------------------------------------------------------------------
# Counting NVML calls across processes (opt-in: JUPYTER_GPU_SIMULATE_CALLS_DIR)
#
# A JupyterHub runs its service, user servers and kernels as separate processes, several of them
# as other system users; ``SimulatedNvmlLibrary.calls`` sees one process only. With the variable
# set, every process whose simulated library is created keeps one file in that directory,
# ``<pid>-<start>.nvml-calls``: 8 bytes, an unsigned count in native byte order, mmap'd shared and
# incremented on every call, so it is current while the process runs and stays after it exits.
# PID + start time (clock ticks since boot) name a process uniquely even after its PID is reused.

CALLS_SUFFIX = ".nvml-calls"
_CALLS_NAME = re.compile(r"([0-9]{1,10})-([0-9]{1,20})" + re.escape(CALLS_SUFFIX))
_COUNTER_BYTES = 8


class _ProcessCallCounter:
    """This process's count in its mmap'd file; ``add`` is a lock and an 8-byte store."""

    def __init__(self, mapping: mmap.mmap | None, path: str) -> None:
        self.path = path
        self._mapping = mapping  # kept alive as long as the cell that points into it
        self._cell = ctypes.c_uint64.from_buffer(mapping) if mapping is not None else None
        self._lock = threading.Lock()

    def add(self) -> None:
        cell = self._cell
        if cell is not None:
            with self._lock:  # threads of one process (the sampler, HTTP handlers) share the cell
                cell.value += 1


_process_counters: dict[str, _ProcessCallCounter] = {}
_process_counters_lock = threading.Lock()


def _forget_process_counters() -> None:
    """In a forked child: its calls go to a file of its own, not its parent's (PID + start differ)."""
    global _process_counters_lock
    _process_counters.clear()
    _process_counters_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_process_counters)


def _process_start() -> int:
    """This process's start time as :func:`jupyter_gpu.sources.processes.process_start` reads it (clock
    ticks since boot on Linux; elsewhere psutil's creation time, here in microseconds): with the
    PID, a name no later process can take."""
    from ..sources.processes import process_start

    start = process_start(os.getpid())
    return round(start * 1_000_000) if isinstance(start, float) else start or 0


def _call_ticker(directory: str) -> Callable[[], None]:
    """The function a counted callback runs first: add one to this process's file in ``directory``."""

    def tick() -> None:
        counter = _process_counters.get(directory)
        if counter is None:
            counter = _open_process_counter(directory)
        counter.add()

    return tick


def _open_process_counter(directory: str) -> _ProcessCallCounter:
    """Create (or, after an ``exec``, reopen) this process's counter file; on failure say so once
    on stderr and count nothing (NVML itself keeps working)."""
    with _process_counters_lock:
        counter = _process_counters.get(directory)
        if counter is not None:
            return counter
        name = f"{os.getpid()}-{_process_start()}{CALLS_SUFFIX}"
        path = os.path.join(directory, name)
        try:
            mapping = _map_counter_file(directory, name)
        except OSError as error:
            print(
                f"jupyter_gpu: NVML calls not counted in {CALLS_DIR_VAR}={directory!r}: "
                f"{name}: {error.strerror or error}",
                file=sys.stderr,
                flush=True,
            )
            mapping = None
        counter = _ProcessCallCounter(mapping, path)
        _process_counters[directory] = counter
        return counter


def _map_counter_file(directory: str, name: str) -> mmap.mmap:
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=directory_fd)
            try:
                os.fchmod(fd, 0o644)  # readable by the one who sums, whatever this process's umask
                os.ftruncate(fd, _COUNTER_BYTES)
            except OSError:
                os.close(fd)
                raise
        except FileExistsError:
            # Our own file from before an exec (same PID and start time), or a trap another user
            # set in a shared directory: only a regular 8-byte file of our own is used.
            fd = os.open(name, flags, dir_fd=directory_fd)  # O_NOFOLLOW: a symlink fails (ELOOP)
            info = os.fstat(fd)
            if not S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size != _COUNTER_BYTES:
                os.close(fd)
                raise OSError(f"exists and is not this process's own {_COUNTER_BYTES}-byte file") from None
    finally:
        os.close(directory_fd)
    try:
        return mmap.mmap(fd, _COUNTER_BYTES)  # MAP_SHARED: the count is in the file at once
    finally:
        os.close(fd)


def calls_by_process(directory: str | os.PathLike[str]) -> dict[tuple[int, int], int]:
    """NVML calls counted in ``directory`` (see :data:`CALLS_DIR_VAR`), per (PID, start time).

    The files are other processes' (other users'), so they are read as untrusted input: only names
    ``<pid>-<start>.nvml-calls``, only regular files of exactly 8 bytes, opened without following
    symlinks and without blocking (a FIFO cannot hang the reader), each inode once (a hard link
    does not count twice); anything else is skipped. Processes that exited keep their count.
    Raises OSError when the directory itself cannot be read.
    """
    counts: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in os.listdir(directory_fd):
            match = _CALLS_NAME.fullmatch(name)
            if match is None:
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
            except OSError:  # a symlink (ELOOP), gone since the listing, not readable
                continue
            try:
                info = os.fstat(fd)
                if not S_ISREG(info.st_mode) or info.st_size != _COUNTER_BYTES or (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                data = os.pread(fd, _COUNTER_BYTES, 0)
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(data) == _COUNTER_BYTES:
                counts[(int(match[1]), int(match[2]))] = int.from_bytes(data, sys.byteorder)
    finally:
        os.close(directory_fd)
    return counts


def calls_in(directory: str | os.PathLike[str]) -> int:
    """The NVML calls every process counted in ``directory`` so far, summed (see
    :func:`calls_by_process`). Take it before and after a window; the difference is the window's
    calls, including processes that started or exited in between."""
    return sum(calls_by_process(directory).values())
