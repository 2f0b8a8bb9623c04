"""What a look at the GPUs returns: plain, immutable data with a stable JSON form.

``Snapshot.to_dict()`` is the contract every face (``jupyter-gpu status --json``, the notebook
panel, the server's REST endpoint, the JupyterLab sidebar) and any script relies on::

    {"nvml_available": bool, "error": str|null, "driver_version": str|null, "timestamp": float,
     "simulated": bool,
     "warnings": [str, ...],                                                  (always present)
     "gpus": [{"index": int, "uuid": str, "name": str,
               "memory_total": int, "memory_used": int, "memory_free": int,   (bytes)
               "memory_reserved": int|null,                                   (bytes, driver-reserved)
               "utilization": int|null, "temperature": int|null,              (percent, °C)
               "power": float|null, "power_limit": float|null,                (W)
               "error": str|null,
               "processes": [{"pid": int, "memory": int|null, "user": str|null, "name": str|null,
                              "type": "compute"|"graphics"|"compute+graphics",
                              "command": str,                                 (own processes only)
                              "slice": str}],                                 (MIG UUID; MIG mode only)
               "mig_mode": bool,                                              (always present)
               "slices": [{"index": int, "uuid": str, "name": str, "profile": str,   (MIG devices)
                           "gpu_instance_id": int, "compute_instance_id": int,
                           "memory_total": int, "memory_used": int, "memory_free": int,
                           "error": str|null,
                           "processes": [...]}],                              (as above)
               "fan_speed": int|null, "pci_bus_id": str|null,                 (percent; "00000000:17:00.0")
               "ecc_errors": int|null,                                        (volatile uncorrected)
               "clock_sm": int|null, "clock_memory": int|null}]}              (MHz)

The last five (``jupyter-gpu status --wide``, additive) are null where NVML does not have them: no
fan on a passively cooled card, no ECC count while ECC mode is off, none of them for a GPU that
could not be read. Fan, ECC and clocks are at most ``sources.nvml.EXTRAS_REFRESH_SECONDS`` old.

MIG (additive, see docs/mig.md): a GPU in MIG mode has ``mig_mode`` true and lists its MIG devices
("slices") under ``slices``, each with its MIG UUID (``MIG-<uuid>``, or ``MIG-GPU-<uuid>/<gi>/<ci>``
on R450/R460 drivers), profile (``"1g.10gb"``, from the name NVML gives the MIG device), its own
memory and its processes. The GPU's own figures stay the whole card's: its memory is every slice's
plus the driver's, its ``processes`` lists every slice's processes, each carrying the ``slice`` it
runs in. Utilization is null on a GPU in MIG mode and slices have no utilization, temperature or
power at all: NVML does not measure them per MIG device (faces say "n/a on MIG"). A GPU not in MIG
mode has ``mig_mode`` false and ``slices`` empty, so clients that ignore both keep working.

``memory_used`` excludes driver-reserved memory where the driver can tell it apart (NVML's v2
memory struct); on older drivers it includes it and ``memory_reserved`` is null. A GPU that could
not be read has its ``error`` set and zeros/nulls elsewhere. ``command`` appears only on processes
of the user running jupyter_gpu: other users' command lines are never collected.

Processes and GPUs are slotted dataclasses: a server with thousands of GPU processes keeps one
object per process per sample, not two (fewer objects for the cyclic garbage collector to walk).

``warnings`` lists problems that do not stop the GPUs from being read, one line each, for every
face to show (e.g. ``"simulated scenario rejected: gpus[0].memory_used_mib must be >= 0 (keeping
the last good scenario)"``). It is always present and usually empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU, as NVML and the operating system describe it."""

    pid: int
    memory: int | None
    user: str | None = None
    name: str | None = None
    type: str = "compute"
    command: str | None = None
    slice: str | None = None  # the MIG UUID of the slice it runs in (GPUs in MIG mode only)

    def to_dict(self) -> dict[str, Any]:
        data = {"pid": self.pid, "memory": self.memory, "user": self.user, "name": self.name, "type": self.type}
        if self.command is not None:
            data["command"] = self.command
        if self.slice is not None:
            data["slice"] = self.slice
        return data


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG device ("slice") of a GPU in MIG mode: a GPU instance's compute instance.

    ``index`` is NVML's MIG device index under its GPU (``nvmlDeviceGetMigDeviceHandleByIndex``);
    jupyter_gpu's short notation ``<gpu>:<index>`` (e.g. ``0:1``) names it.
    """

    index: int
    uuid: str
    name: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total: int = 0
    memory_used: int = 0
    memory_free: int = 0
    error: str | None = None
    processes: tuple[GpuProcess, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "processes"}
        data["processes"] = [process.to_dict() for process in self.processes]
        return data


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU at one moment. Index and numbering are NVML's (PCI bus order, as nvidia-smi)."""

    index: int
    uuid: str
    name: str
    memory_total: int = 0
    memory_used: int = 0
    memory_free: int = 0
    memory_reserved: int | None = None
    utilization: int | None = None
    temperature: int | None = None
    power: float | None = None
    power_limit: float | None = None
    error: str | None = None
    processes: tuple[GpuProcess, ...] = ()
    mig_mode: bool = False
    slices: tuple[MigSlice, ...] = ()
    fan_speed: int | None = None
    pci_bus_id: str | None = None
    ecc_errors: int | None = None
    clock_sm: int | None = None
    clock_memory: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name not in ("processes", "slices")}
        data["processes"] = [process.to_dict() for process in self.processes]
        data["slices"] = [slice_.to_dict() for slice_ in self.slices]
        return data

    def slice(self, key: int | str) -> MigSlice:
        """The slice with MIG device index ``key`` (int) or MIG UUID ``key`` (str); KeyError if none."""
        for slice_ in self.slices:
            if slice_.index == key or slice_.uuid == key:
                return slice_
        raise KeyError(f"GPU {self.index} has no MIG slice {key!r}")


@dataclass(frozen=True)
class Snapshot:
    """Every GPU of the machine at one moment, or why none could be read."""

    nvml_available: bool
    timestamp: float
    gpus: tuple[GpuInfo, ...] = ()
    error: str | None = None
    driver_version: str | None = None
    simulated: bool = False
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nvml_available": self.nvml_available,
            "error": self.error,
            "driver_version": self.driver_version,
            "timestamp": self.timestamp,
            "simulated": self.simulated,
            "warnings": list(self.warnings),
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            **self.extra,
        }

    def gpu(self, index: int) -> GpuInfo:
        """The GPU with NVML index ``index``; KeyError if there is none."""
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(f"no GPU with index {index}")

    def find_slice(self, uuid: str) -> tuple[GpuInfo, MigSlice] | None:
        """The (GPU, slice) whose MIG UUID is ``uuid``, or None."""
        for gpu in self.gpus:
            for slice_ in gpu.slices:
                if slice_.uuid == uuid:
                    return gpu, slice_
        return None

    def processes_of(self, pid: int) -> list[tuple[GpuInfo, GpuProcess]]:
        """Where the process ``pid`` holds GPU memory: (gpu, process entry) pairs."""
        return [(gpu, process) for gpu in self.gpus for process in gpu.processes if process.pid == pid]
