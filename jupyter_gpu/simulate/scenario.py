"""Simulated scenarios: the schema, its strict reader, and the built-in ones (``N`` GPUs, ``demo``).

A scenario is what ``JUPYTER_GPU_SIMULATE`` names (:class:`ScenarioSource`): a number of plausible
idle GPUs (1 to 64, :func:`plausible_gpus`), ``demo`` or ``demo-still`` (:func:`demo_scenario`; the
presets live in :mod:`jupyter_gpu.simulate.presets`), or the path of a JSON
file, re-read whenever it changes.

Scenario schema (every key optional; sizes in MiB, power in W)::

    {
      "driver_version": "550.54.15",
      "cuda_driver_version": 12040,
      "fault": null | "library_not_found" | "driver_not_loaded" | "no_permission",
      "latency_ms": 0,                 # added to every NVML call (a slow or hung driver)
      "missing_functions": [],         # C symbols the library lacks, e.g. an old driver without
                                       # "nvmlDeviceGetComputeRunningProcesses_v3"
      "motion_start": null,            # Unix time the motions count from; null: when this process
                                       # first read the scenario
      "gpus": [{
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-...",             # default: derived from the index
        "memory_total_mib": 81920,
        "memory_reserved_mib": 0,      # driver-reserved (v2 struct); v1 counts it as used
        "memory_used_mib": 1024,       # default: the sum of the processes' memory
        "utilization": 35, "memory_utilization": 20, "temperature": 41,
        "power_w": 180, "power_limit_w": 400,
        "fan_speed": 30,               # percent (may exceed 100, as NVML's may)
        "pci_bus_id": "00000000:17:00.0",   # default: derived from the index
        "ecc_uncorrected": 0,          # volatile uncorrected ECC errors (since the driver loaded)
        "clock_sm_mhz": 1410, "clock_memory_mhz": 1593,
        "unsupported": [],             # of "utilization", "temperature", "power", "power_limit",
                                       # "fan_speed" (a passively cooled card), "ecc" (ECC mode
                                       # off), "clocks", "mig" (a GPU that cannot do MIG; without
                                       # it MIG mode answers disabled): those calls answer NOT_SUPPORTED
        "fault": null | "lost",
        "motion": {                    # figures that move (see below); each key optional
          "loop_s": 900,               # repeat every 900 s (default: hold the last keyframe)
          "utilization": {"points": [[0, 5], [60, 95]], "jitter": 0.03},
          "memory_utilization": {...}, "temperature": {...}, "power_w": {...}},
        "processes": [{"pid": 12345, "memory_mib": 1000, "user": "alice", "name": "python",
                       "type": "compute" | "graphics",
                       "motion": {"loop_s": 900, "memory_mib": {"points": [[0, 2048], [120, 30000]]}}}],
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

MIG (see docs/mig.md for the driver facts this follows): on a GPU without ``mig_slices``,
``nvmlDeviceGetMigMode`` answers disabled (current and pending) and ``nvmlDeviceGetMaxMigDeviceCount``
0, as a real H100 with MIG off did (docs/real-gpu.md); NOT_SUPPORTED with ``"unsupported": ["mig"]``.
On a GPU with ``mig_slices``, ``nvmlDeviceGetMigMode`` answers enabled, ``nvmlDeviceGetMaxMigDeviceCount`` 7, and
``nvmlDeviceGetMigDeviceHandleByIndex`` a handle per slice (NOT_FOUND past the last one). A MIG
handle answers name, UUID, memory, processes (with their GPU/compute instance ids), its instance
ids and its parent handle; utilization, temperature and power on it answer NOT_SUPPORTED, and so
does utilization on the parent in MIG mode (nvidia-smi prints "N/A" there). The parent's processes
are every slice's, each with its instance ids; its used memory is the slices' sum unless given.

Motion (:mod:`jupyter_gpu.simulate.motion`): a ``motion`` track replaces the figure of the same
name with keyframes ``[[seconds, value], ...]`` (1 to 64, strictly increasing in time, each value
within the figure's range) joined by straight lines, and an optional ``jitter`` (a fraction of the
value, 0 to 1) that wobbles it smoothly. Time counts from ``motion_start``; the figures are
a pure function of the elapsed time at whole seconds, evaluated once per *sample* of NVML calls
(:data:`SAMPLE_GAP_S`: every call of one snapshot sees one world), and only the moving ones. A
process's memory may move only on a GPU not in MIG mode whose ``memory_used_mib`` is not given
(it then follows the processes), and the processes' peaks plus the reserved memory must fit the
GPU. ``demo`` moves this way (:func:`demo_scenario`); ``demo-still`` is the same server standing
still (the still figures, without the motion), for tests and stored notebook outputs.

A process's ``user`` and ``name`` stand in for the operating system's answer (NVML itself knows only
PIDs): they are used for PIDs that do not exist on this machine, and they override the real owner
of a PID that does (to simulate another user's process with a real PID).

The schema is strict (it drives every test and demo): unknown keys, wrong types, NaN/Infinity,
negative sizes, percentages above 100, more memory used than the total, more than 64 GPUs are
refused with one line naming the key and the rule (``gpus[0].memory_used_mib must be >= 0``). An
edit that is refused keeps the last good scenario, and snapshots carry the rejection in their
``warnings`` until a good edit arrives.

Whose file (docs/security.md): a scenario file is believed only if nobody else could have written
it. :class:`ScenarioSource` resolves the path once, at start (a relative path against the current
folder; links, which must be the user's or root's, followed once) and pins it (:attr:`ScenarioSource.pinned`);
at start and at every change of the file it refuses, with one line, a file not owned by the user or
root (checked on the opened descriptor, opened with ``O_NOFOLLOW``) or one in a folder, anywhere up
to ``/``, owned by another user or writable by others without the sticky bit
(:func:`jupyter_gpu.core.files.others_can_replace`).

A scenario file is untrusted input (``JUPYTER_GPU_SIMULATE`` may name a file another user wrote):
it is parsed by :func:`jupyter_gpu.core.wire.loads` (UTF-8, at most 64 MiB, nested at most 16 deep,
no NaN, Infinity, float beyond a double or duplicate key), and whatever it holds, reading it raises
:class:`ScenarioError` (a ``WireError``) only.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from stat import S_ISLNK, S_ISREG
from typing import Any

from ..core import messages
from ..core.environ import SIMULATE_ENV_VAR, SIMULATE_OFF_VALUES
from ..core.environ import simulation_requested as simulation_requested  # re-exported: simulate.simulation_requested
from ..core.errors import ScenarioError
from ..core.files import others_can_replace, owner_name
from ..core.wire import Fields, WireError, finite, loads
from .codes import GPU_FAULTS, WHOLE_NVML_FAULTS
from .motion import MAX_POINTS, MAX_SECONDS, Track
from .presets import DEMO_STILL, demo_scenario, plausible_gpus

ENV_VAR = SIMULATE_ENV_VAR

UNSUPPORTABLE_FIELDS = {"utilization", "temperature", "power", "power_limit", "fan_speed", "ecc", "clocks", "mig"}


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
MAX_SCENARIO_DEPTH = 16  # nesting of a scenario's JSON: the schema needs 7 (gpus, mig_slices, processes)
MAX_TEXT = 255  # characters of a name, user, UUID or driver version
MAX_MIB = float(2**44)  # 16 EiB expressed in MiB: beyond any GPU, and still exact in a float


@dataclass(frozen=True)
class SimulatedProcess:
    pid: int
    memory_mib: float | None
    user: str | None = None
    name: str | None = None
    type: str = "compute"
    memory_motion: Track | None = None

    def at(self, elapsed_s: float) -> SimulatedProcess:
        """This process ``elapsed_s`` seconds after the motion started."""
        if self.memory_motion is None:
            return self
        return replace(self, memory_mib=self.memory_motion.at(elapsed_s))


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
    fan_speed: int = 30
    pci_bus_id: str = "00000000:17:00.0"
    ecc_uncorrected: int = 0
    clock_sm_mhz: int = 1410
    clock_memory_mhz: int = 1593
    motion: tuple[tuple[str, Track], ...] = ()  # (field, track) of the figures that move
    memory_follows_processes: bool = False  # memory_used_mib was not given: the processes' sum

    @cached_property
    def moving_processes(self) -> tuple[int, ...]:
        """Positions in :attr:`processes` of those whose memory moves (found once per GPU)."""
        return tuple(i for i, p in enumerate(self.processes) if p.memory_motion is not None)

    @cached_property
    def moves(self) -> bool:
        return bool(self.motion) or bool(self.moving_processes)

    @cached_property
    def _still_memory_mib(self) -> float:
        """The memory of the processes that do not move (summed once per GPU)."""
        return sum(p.memory_mib or 0 for p in self.processes if p.memory_motion is None)

    def at(self, elapsed_s: float) -> SimulatedGpu:
        """This GPU ``elapsed_s`` seconds after the motion started (itself when nothing moves).

        Only the tracks are evaluated: the still processes are shared with this GPU (the tuple
        itself when no process moves), and the used memory is their sum (computed once) plus the
        moving ones'."""
        if not self.moves:
            return self
        changes: dict[str, Any] = {}
        for name, track in self.motion:
            value = track.at(elapsed_s)
            changes[name] = int(value) if track.whole else value
        processes = self.processes
        if self.moving_processes:
            moved = list(processes)
            for i in self.moving_processes:
                moved[i] = processes[i].at(elapsed_s)
            processes = tuple(moved)
            changes["processes"] = processes
        if self.memory_follows_processes:
            changes["memory_used_mib"] = self._still_memory_mib + sum(
                processes[i].memory_mib or 0 for i in self.moving_processes
            )
        return replace(self, **changes)

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

_TOP_KEYS = {
    "driver_version",
    "cuda_driver_version",
    "fault",
    "latency_ms",
    "missing_functions",
    "motion_start",
    "gpus",
}
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
    "motion",
    "fan_speed",
    "pci_bus_id",
    "ecc_uncorrected",
    "clock_sm_mhz",
    "clock_memory_mhz",
}
_PCI_BUS_ID = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_SLICE_KEYS = {
    "profile",
    "uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "memory_total_mib",
    "memory_used_mib",
    "processes",
}
_PROCESS_KEYS = {"pid", "memory_mib", "user", "name", "type", "motion"}
_GPU_MOTION = {  # field: (low, high, whole number), the same ranges as the still figures
    "utilization": (0.0, 100.0, True),
    "memory_utilization": (0.0, 100.0, True),
    "temperature": (0.0, 200.0, True),
    "power_w": (0.0, 100_000.0, False),
}
_PROCESS_MOTION = {"memory_mib": (0.0, MAX_MIB, False)}
_PROCESS_TYPES = ("compute", "graphics")


class _Reader:
    """Typed reads of one JSON object, each failure a one-line :class:`ScenarioError` naming the key.

    Built on :class:`jupyter_gpu.core.wire.Fields` (the object check, the key's path, defaults) and
    :func:`~jupyter_gpu.core.wire.finite` (an integer of any size is compared exactly, never through
    ``float()``). The scenario's own rules stay here: unknown keys are refused, a whole number may
    be written ``2.0``, names hold no NUL and fit NVML's byte buffer, and the messages say the rule
    as the module docstring shows (``gpus[0].memory_used_mib must be >= 0``).
    """

    def __init__(self, data: Any, where: str, known: set[str]) -> None:
        try:
            self.fields = Fields(data, where)
        except WireError:
            raise ScenarioError(messages.FIELD_NOT_OBJECT.format(field=where or "the scenario")) from None
        unknown = sorted(str(key) for key in self.fields.data if key not in known)
        if unknown:
            shown = unknown[0][:80] if unknown[0].isprintable() else repr(unknown[0][:80])  # one line
            raise ScenarioError(
                messages.FIELD_UNKNOWN_KEY.format(field=self.fields.path(shown), keys=", ".join(sorted(known)))
            )
        self.data = self.fields.data

    def name(self, key: str) -> str:
        return self.fields.path(key)

    def refusal(self, template: str, key: str, **fields: object) -> ScenarioError:
        """The error of ``key`` breaking the rule ``template`` says (a :mod:`~jupyter_gpu.core.messages` template)."""
        return ScenarioError(template.format(field=self.name(key), **fields))

    def number(self, key: str, default: float, low: float, high: float) -> float:
        value = self.fields.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refusal(messages.FIELD_NOT_NUMBER, key, kind=_kind(value))
        if not finite(value):
            raise self.refusal(messages.FIELD_NOT_FINITE, key)
        if value < low:  # int against float: exact, whatever the int's size
            raise self.refusal(messages.FIELD_AT_LEAST, key, low=f"{low:g}")
        if value > high:
            raise self.refusal(messages.FIELD_AT_MOST, key, high=f"{high:g}")
        return float(value)  # within finite bounds, so within a double's range

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.fields.raw(key, default)
        if isinstance(value, float) and value.is_integer():  # "2.0": a whole number all the same
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refusal(messages.FIELD_NOT_WHOLE, key, kind=_kind(value))
        if value < low:
            raise self.refusal(messages.FIELD_AT_LEAST, key, low=low)
        if value > high:
            raise self.refusal(messages.FIELD_AT_MOST, key, high=high)
        return value

    def text(self, key: str, default: str | None, optional: bool = False, max_bytes: int | None = None) -> str | None:
        value = self.fields.raw(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.refusal(messages.FIELD_NOT_STRING, key, kind=_kind(value))
        if len(value) > MAX_TEXT:
            raise self.refusal(messages.FIELD_TOO_LONG, key, most=MAX_TEXT)
        if "\0" in value:
            raise self.refusal(messages.FIELD_NUL, key)
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # "\ud800" is a valid JSON escape, but no UTF-8 holds it
            raise self.refusal(messages.FIELD_SURROGATES, key) from None
        if max_bytes is not None and size > max_bytes:
            marker = repr(SIMULATED_MARKER.strip())
            raise self.refusal(messages.FIELD_NAME_BYTES, key, most=max_bytes, buffer=NAME_BUFFER_BYTES, marker=marker)
        return value

    def choice(self, key: str, choices: Any) -> str | None:
        value = self.fields.raw(key, None)
        if value is not None and (not isinstance(value, str) or value not in choices):
            shown = repr(value[:80]) if isinstance(value, str) else _kind(value)
            raise self.refusal(messages.FIELD_UNKNOWN_FAULT, key, value=shown, choices=sorted(choices))
        return value

    def strings(self, key: str, allowed: set[str] | None = None, what: str = "") -> frozenset[str]:
        value = self.fields.raw(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.refusal(messages.FIELD_NOT_STRINGS, key)
        if allowed is not None and set(value) - allowed:
            refused = sorted(item[:80] for item in set(value) - allowed)[:8]
            raise self.refusal(messages.FIELD_CANNOT_MARK, key, refused=refused, what=what, allowed=sorted(allowed))
        return frozenset(value)

    def items(self, key: str, limit: int) -> list[Any]:
        value = self.fields.raw(key, [])
        if not isinstance(value, list):
            raise self.refusal(messages.FIELD_NOT_LIST, key, kind=_kind(value))
        if len(value) > limit:
            raise self.refusal(messages.FIELD_TOO_MANY, key, limit=limit)
        return value


def _kind(value: Any) -> str:
    """What a JSON value is, in a message's words (:data:`jupyter_gpu.core.messages.KINDS`)."""
    return messages.KINDS.get(type(value), type(value).__name__)


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
    motion_start: float | None = None  # Unix time; None: when this process first read the scenario

    @cached_property
    def moving_gpus(self) -> tuple[int, ...]:
        """Positions in :attr:`gpus` of the GPUs with a figure that moves (found once per scenario)."""
        return tuple(i for i, gpu in enumerate(self.gpus) if gpu.moves)

    @property
    def moves(self) -> bool:
        """Whether any figure has a ``motion`` (else :meth:`at` is the scenario itself)."""
        return bool(self.moving_gpus)

    def at(self, elapsed_s: float) -> Scenario:
        """The scenario ``elapsed_s`` seconds after its motion started: a pure function of the time.

        Only the moving GPUs are evaluated (each only its tracks); the still ones are shared."""
        if not self.moving_gpus:
            return self
        gpus = list(self.gpus)
        for i in self.moving_gpus:
            gpus[i] = gpus[i].at(elapsed_s)
        moved = replace(self, gpus=tuple(gpus))
        moved.__dict__["moving_gpus"] = self.moving_gpus  # the same GPUs move: not searched again
        return moved

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
            motion_start=None if data.get("motion_start") is None else top.number("motion_start", 0, 0, 2**40),
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
            raise ScenarioError(messages.SCENARIO_PROCESSES_WITH_MIG.format(field=f"{where}.processes"))
        slices = _parse_slices(index, where, gpu.items("mig_slices", MAX_MIG_SLICES), total - reserved)
    moving_memory = any(p.memory_motion is not None for p in processes)
    if "memory_used_mib" in data:
        if moving_memory:
            raise ScenarioError(messages.SCENARIO_USED_WITH_MOTION.format(field=f"{where}.memory_used_mib"))
        used = gpu.number("memory_used_mib", 0, 0, MAX_MIB)
    elif slices is not None:
        used = sum(s.memory_used_mib for s in slices)
    else:
        used = sum(p.memory_mib or 0 for p in processes)
    if used + reserved > total:
        raise ScenarioError(
            messages.SCENARIO_USED_PLUS_RESERVED.format(
                field=f"{where}.memory_used_mib", used=f"{used:g}", reserved=f"{reserved:g}", total=f"{total:g}"
            )
        )
    if moving_memory:
        peak = sum(p.memory_motion.peak if p.memory_motion else p.memory_mib or 0 for p in processes)
        if peak + reserved > total:
            figures = {"peak": f"{peak:g}", "reserved": f"{reserved:g}", "total": f"{total:g}"}
            raise ScenarioError(messages.SCENARIO_PEAKS_EXCEED.format(field=where, **figures))
    digest = hashlib.sha1(f"jupyter-gpu-sim-{index}".encode()).hexdigest()
    default_uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    power_limit = gpu.number("power_limit_w", 400, 0, 100_000)
    name = gpu.text("name", "NVIDIA A100-SXM4-80GB", max_bytes=MAX_NAME_BYTES) or ""
    for s in slices or ():
        if len(f"{name} MIG {s.profile}".encode()) > MAX_NAME_BYTES:
            at, device = f"{where}.mig_slices[{s.index}].profile", f"{name} MIG {s.profile}"
            raise ScenarioError(
                messages.SCENARIO_MIG_NAME_TOO_LONG.format(field=at, name=device, buffer=NAME_BUFFER_BYTES)
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
        motion=tuple(_parse_motion(f"{where}.motion", data["motion"], _GPU_MOTION).items())
        if data.get("motion") is not None
        else (),
        memory_follows_processes=slices is None and "memory_used_mib" not in data,
        fan_speed=gpu.integer("fan_speed", 30, 0, 255),
        pci_bus_id=_pci_bus_id(gpu, index),
        ecc_uncorrected=gpu.integer("ecc_uncorrected", 0, 0, 2**63 - 1),
        clock_sm_mhz=gpu.integer("clock_sm_mhz", 1410, 0, 100_000),
        clock_memory_mhz=gpu.integer("clock_memory_mhz", 1593, 0, 100_000),
    )


def _parse_motion(where: str, data: Any, fields: dict[str, tuple[float, float, bool]]) -> dict[str, Track]:
    """A ``motion`` object: ``loop_s`` and one track per moving field (see the module docstring)."""
    motion = _Reader(data, where, {"loop_s", *fields})
    loop = None if data.get("loop_s") is None else motion.number("loop_s", 0, 1, MAX_SECONDS)
    tracks: dict[str, Track] = {}
    for name, (low, high, whole) in fields.items():
        if name not in data:
            continue
        at = motion.name(name)
        track = _Reader(data[name], at, {"points", "jitter"})
        items = track.items("points", MAX_POINTS)
        if not items:
            raise ScenarioError(messages.SCENARIO_NO_POINTS.format(field=f"{at}.points"))
        points: list[tuple[float, float]] = []
        for i, item in enumerate(items):
            if not isinstance(item, list) or len(item) != 2:
                raise ScenarioError(messages.SCENARIO_NOT_PAIR.format(field=f"{at}.points[{i}]", kind=_kind(item)))
            pair = _Reader({"seconds": item[0], "value": item[1]}, f"{at}.points[{i}]", {"seconds", "value"})
            seconds = pair.number("seconds", 0, 0, MAX_SECONDS)
            if points and seconds <= points[-1][0]:
                raise ScenarioError(messages.SCENARIO_NOT_LATER.format(field=f"{at}.points[{i}].seconds"))
            points.append((seconds, pair.number("value", 0, low, high)))
        if loop is not None and points[-1][0] > loop:
            raise ScenarioError(
                messages.SCENARIO_LOOP_SHORT.format(field=f"{where}.loop_s", loop=f"{loop:g}", name=name)
            )
        tracks[name] = Track(
            points=tuple(points),
            low=low,
            high=high,
            loop_s=loop,
            jitter=track.number("jitter", 0, 0, 1),
            whole=whole,
            seed=at,
        )
    return tracks


def _pci_bus_id(gpu: _Reader, index: int) -> str:
    """``domain:bus:device.function`` as NVML writes it (``00000000:17:00.0``); default from the index."""
    bus_id = gpu.text("pci_bus_id", f"00000000:{0x17 + index:02X}:00.0") or ""
    if not _PCI_BUS_ID.fullmatch(bus_id):
        raise ScenarioError(messages.SCENARIO_BUS_ID.format(field=gpu.name("pci_bus_id")))
    return bus_id.upper()


def _parse_slices(gpu_index: int, where: str, items: list[Any], room_mib: float) -> tuple[SimulatedSlice, ...]:
    """A GPU's MIG slices: unique UUIDs and instance-id pairs, memory that fits the GPU."""
    slices: list[SimulatedSlice] = []
    for i, data in enumerate(items):
        at = f"{where}.mig_slices[{i}]"
        reader = _Reader(data, at, _SLICE_KEYS)
        if "profile" not in data:
            raise ScenarioError(messages.SCENARIO_PROFILE_REQUIRED.format(field=f"{at}.profile"))
        profile = reader.text("profile", "") or ""
        if not profile.strip() or len(profile) > 32:
            raise ScenarioError(messages.SCENARIO_PROFILE_NAME.format(field=f"{at}.profile"))
        processes = tuple(
            _parse_process(f"{at}.processes[{j}]", p)
            for j, p in enumerate(reader.items("processes", MAX_PROCESSES_PER_GPU))
        )
        if any(p.memory_motion is not None for p in processes):
            raise ScenarioError(messages.SCENARIO_MIG_NO_MOTION.format(field=f"{at}.processes"))
        match = _PROFILE_MEMORY.search(profile)
        if "memory_total_mib" not in data and match is None:
            raise ScenarioError(messages.SCENARIO_MIG_TOTAL_REQUIRED.format(field=f"{at}.memory_total_mib"))
        default_total = int(match.group(1)) * 1024 if match else 1
        total = reader.number("memory_total_mib", default_total, 1, MAX_MIB)
        if "memory_used_mib" in data:
            used = reader.number("memory_used_mib", 0, 0, total)
        else:
            used = sum(p.memory_mib or 0 for p in processes)
            if used > total:
                raise ScenarioError(
                    messages.SCENARIO_SLICE_EXCEEDS.format(field=at, used=f"{used:g}", total=f"{total:g}")
                )
        digest = hashlib.sha1(f"jupyter-gpu-sim-{gpu_index}-mig-{i}".encode()).hexdigest()
        default_uuid = f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        uuid = reader.text("uuid", default_uuid) or ""
        if not uuid.startswith("MIG-") or len(uuid) > 80 or any(c.isspace() or c == "," for c in uuid):
            raise ScenarioError(messages.SCENARIO_MIG_UUID.format(field=f"{at}.uuid"))
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
            raise ScenarioError(
                messages.SCENARIO_UUID_TAKEN.format(field=f"{where}.mig_slices[{s.index}].uuid", uuid=repr(s.uuid))
            )
        if ids in seen_ids:
            raise ScenarioError(
                messages.SCENARIO_IDS_TAKEN.format(
                    field=f"{where}.mig_slices[{s.index}]", gpu_instance=ids[0], compute_instance=ids[1]
                )
            )
        seen_uuids.add(s.uuid)
        seen_ids.add(ids)
    # Compute instances of one GPU instance share its memory: count each GPU instance once.
    per_instance: dict[int, float] = {}
    for s in slices:
        per_instance[s.gpu_instance_id] = max(per_instance.get(s.gpu_instance_id, 0), s.memory_total_mib)
    if sum(per_instance.values()) > room_mib:
        raise ScenarioError(
            messages.SCENARIO_INSTANCES_EXCEED.format(
                field=f"{where}.mig_slices", used=f"{sum(per_instance.values()):g}", room=f"{room_mib:g}"
            )
        )
    return tuple(slices)


def _parse_process(where: str, data: Any) -> SimulatedProcess:
    process = _Reader(data, where, _PROCESS_KEYS)
    if "pid" not in data:
        raise ScenarioError(messages.FIELD_REQUIRED.format(field=f"{where}.pid"))
    memory = None if data.get("memory_mib") is None else process.number("memory_mib", 0, 0, MAX_MIB)
    kind = data.get("type", "compute")
    if kind not in _PROCESS_TYPES:
        shown = repr(kind[:80]) if isinstance(kind, str) else _kind(kind)
        raise ScenarioError(
            messages.FIELD_NOT_ONE_OF.format(field=f"{where}.type", choices=list(_PROCESS_TYPES), value=shown)
        )
    motion = None
    if data.get("motion") is not None:
        motion = _parse_motion(f"{where}.motion", data["motion"], _PROCESS_MOTION).get("memory_mib")
    return SimulatedProcess(
        pid=process.integer("pid", 0, 1, 2**32 - 1),
        memory_mib=memory if motion is None else motion.at(0),
        user=process.text("user", None, optional=True),
        name=process.text("name", None, optional=True),
        type=kind,
        memory_motion=motion,
    )


SAMPLE_GAP_S = 0.2
"""A *sample* of a moving scenario: the burst of NVML calls that begins with the first call after
a pause of at least this long (or after the scenario changed) and goes on while calls follow each
other more closely, for at most :data:`SAMPLE_MAX_S`. Every call of one sample sees one world,
evaluated once, at the whole second of elapsed time its first call fell in; so a snapshot (dozens
to thousands of calls in a row) never mixes two seconds of motion, and the tracks cost once per
sample, never once per call. A reader polling without pauses sees the world move every
:data:`SAMPLE_MAX_S` seconds at least."""
SAMPLE_MAX_S = 5.0
"""The longest one sample lasts (see :data:`SAMPLE_GAP_S`): longer than any snapshot takes."""


# The rule lives in core.environ: readers that must not import the simulation (jupyter-gpu status
# beside a server) ask it too.
OFF_VALUES = SIMULATE_OFF_VALUES


class ScenarioSource:
    """Where the current scenario comes from: a fixed preset, or a file re-read when it changes.

    ``spec`` is what ``JUPYTER_GPU_SIMULATE`` holds: a number of GPUs (1 to 64), ``demo``, ``demo-still``, or the
    path of a scenario file; anything else raises :class:`ScenarioError` with one line.

    A file edit that cannot be used (unreadable, half-written, not JSON, or breaking a rule of the
    schema) keeps the last good scenario; the reason is kept in :attr:`last_error` until a good
    edit arrives, and snapshots carry it as a warning. Each bad edit is parsed once, not at every
    NVML call. Write scenario files atomically (:func:`write_scenario`) in tests.
    """

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.pinned = spec.strip()  # what children get in JUPYTER_GPU_SIMULATE: a file's absolute path
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._began = time.time()  # when a motion without motion_start starts
        self._last_call = -math.inf  # time.time() of the latest current() of a moving scenario
        self._sample: tuple[float, Scenario, int, Scenario] | None = None  # began, scenario, second, world
        spec = spec.strip()
        if spec.isdigit():
            count = int(spec)
            if not 1 <= count <= MAX_GPUS:
                raise ScenarioError(
                    messages.SCENARIO_COUNT_RANGE.format(variable=ENV_VAR, value=repr(spec), most=MAX_GPUS)
                )
            self._scenario = Scenario.from_dict(plausible_gpus(count))
        elif spec in ("demo", DEMO_STILL):
            self._scenario = Scenario.from_dict(demo_scenario(moving=spec == "demo"))
        else:
            given = os.path.abspath(os.path.expanduser(spec)) if spec and "\0" not in spec else ""
            if not given or not os.path.isfile(given):
                raise ScenarioError(
                    messages.SCENARIO_NO_FILE.format(
                        variable=ENV_VAR, value=repr(spec[:200]), most=MAX_GPUS, still=DEMO_STILL
                    )
                )
            refusal = _unsafe_links(given)
            # Pinned: the file the links lead to now, by its absolute path, for every later read and
            # for children (install_from_environment exports it): neither the current folder nor a
            # link replaced later changes which file this process believes.
            self._path = Path(os.path.realpath(given))
            self.pinned = str(self._path)
            try:
                if refusal is not None:
                    raise ScenarioError(refusal)
                self._scenario = self._load()
            except ScenarioError as error:
                raise ScenarioError(
                    messages.SCENARIO_SETTING.format(
                        variable=ENV_VAR, value=repr(spec[:200]), error=_without_path(str(error), self._path)
                    )
                ) from None

    def _load(self) -> Scenario:
        """Parse the file; remembers its stamp even when it is refused, so it is parsed once."""
        assert self._path is not None
        try:
            stat = os.lstat(self._path)
            self._stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if stat.st_size > MAX_SCENARIO_BYTES:
                raise ScenarioError(messages.SCENARIO_TOO_LARGE.format(mib=MAX_SCENARIO_BYTES // 2**20))
            # Once per change of the file: who else could have put it there (docs/security.md)
            refusal = others_can_replace(str(self._path))
            if refusal is not None:
                raise ScenarioError(_at(self._path, messages.SCENARIO_REFUSED.format(reason=refusal)))
            # Non-blocking: a FIFO put in the file's place must not hang every NVML call; never
            # through a link put in the pinned file's place
            flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
            with open(os.open(self._path, flags), "rb") as file:
                opened = os.fstat(file.fileno())
                if not S_ISREG(opened.st_mode):
                    raise ScenarioError(_at(self._path, messages.SCENARIO_NOT_REGULAR))
                if opened.st_uid not in (os.geteuid(), 0):  # what was opened, whatever changed since the check
                    raise ScenarioError(
                        _at(self._path, messages.SCENARIO_OWNED.format(owner=owner_name(opened.st_uid)))
                    )
                raw = file.read(MAX_SCENARIO_BYTES + 1)  # loads refuses a file that grew since
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise ScenarioError(_at(self._path, messages.SCENARIO_REPLACED)) from None
            raise ScenarioError(_unreadable(self._path, error)) from error
        try:
            data = loads(raw, max_bytes=MAX_SCENARIO_BYTES, max_depth=MAX_SCENARIO_DEPTH)
        except WireError as error:
            raise ScenarioError(_at(self._path, _json_reason(str(error)))) from None
        return Scenario.from_dict(data)

    def current(self) -> Scenario:
        """The scenario now, for one NVML call: O(1) whatever the scenario's size.

        For a file, one ``lstat``: re-read only when its stamp changed. A scenario without motion is
        returned as parsed. One with ``motion`` is the world of the current *sample*
        (:data:`SAMPLE_GAP_S`): the tracks are evaluated once per sample, at the whole second its
        first call fell in (:meth:`Scenario.at`), and every call of the sample sees that world."""
        scenario = self._read()
        if not scenario.moving_gpus:
            return scenario
        now = time.time()
        last, self._last_call = self._last_call, now
        sample = self._sample
        if (
            sample is not None
            and sample[1] is scenario
            and 0 <= now - last < SAMPLE_GAP_S
            and 0 <= now - sample[0] < SAMPLE_MAX_S
        ):
            return sample[3]  # a call of the running sample: the same world
        start = self._began if scenario.motion_start is None else scenario.motion_start
        second = math.floor(now - start)
        if sample is not None and sample[1] is scenario and sample[2] == second:
            world = sample[3]  # a new sample in the same second: the same world, not evaluated again
        else:
            world = scenario.at(second)
        self._sample = (now, scenario, second, world)
        return world

    def _read(self) -> Scenario:
        if self._path is None:
            return self._scenario
        try:
            stat = os.lstat(self._path)
        except OSError as error:
            self.last_error = _unreadable(self._path, error)
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
        return messages.SCENARIO_REJECTED.format(error=_without_path(error, self._path))


def _at(path: Path, error: str) -> str:
    """A scenario file's refusal: its path, then why (one of :mod:`jupyter_gpu.core.messages`')."""
    return messages.SCENARIO_AT_PATH.format(path=path, error=error)


def _unreadable(path: Path, error: OSError) -> str:
    return _at(path, messages.SCENARIO_UNREADABLE.format(reason=error.strerror or error))


def _unsafe_links(given: str) -> str | None:
    """Why a link on the way to ``given`` (absolute, as the user wrote it) is not to be followed:
    one owned by another user (who then chose the file). Links are followed once, at start."""
    trusted = (os.geteuid(), 0)
    parts = given.split(os.sep)
    for end in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:end]) or os.sep
        try:
            info = os.lstat(prefix)
        except OSError:
            return None  # isfile() found it: a link that changed since is caught when the file is read
        if S_ISLNK(info.st_mode) and info.st_uid not in trusted:
            return messages.SCENARIO_REFUSED_LINK.format(link=prefix, owner=owner_name(info.st_uid))
    return None


def _json_reason(reason: str) -> str:
    """What :func:`jupyter_gpu.core.wire.loads` refused, as the scenario's messages have said it."""
    if reason.startswith("nested too deeply"):
        return f"JSON {reason}"
    if reason.startswith(("larger than", "not UTF-8")):
        return f"the file is {reason}"
    for said in ("not JSON (", "not usable JSON ("):
        if reason.startswith(said) and reason.endswith(")"):
            reason = reason[len(said) : -1]
    return messages.SCENARIO_NOT_JSON.format(reason=reason)


def _without_path(error: str, path: Path | None) -> str:
    prefix = f"{path}: "
    return error[len(prefix) :] if path is not None and error.startswith(prefix) else error
