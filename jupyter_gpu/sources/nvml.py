"""The one place in jupyter_gpu that talks to NVML.

:func:`snapshot` (also ``jupyter_gpu.snapshot``) reads every GPU once. Behind it an
:class:`NvmlReader` initialises NVML once per process, caches device handles and the values that
rarely change (name, UUID, power limit: read again every :data:`MIG_REFRESH_SECONDS`, since an
admin changes a power limit with ``nvidia-smi -pl`` and a simulated scenario may be edited), and is
safe to call from several threads at once.

Failures degrade the answer, never raise:

- NVML unusable (no driver library, driver not loaded, no permission, bindings newer than the
  driver, nvidia-ml-py missing, a bad ``JUPYTER_GPU_SIMULATE``): ``nvml_available`` is false and
  ``error`` says why in words a person can act on. The reader tries again at the next snapshot,
  so a driver that comes back is picked up.
- One GPU failing (e.g. "GPU is lost"): that GPU carries ``error``; the others are still read.
- A value the GPU does not support: that field is ``None``.

The number of NVML calls per GPU per snapshot is the floor for the contract: memory, utilization,
temperature, power, compute processes and graphics processes (a second call each only when
processes exist, NVML's two-call protocol). Fan speed, ECC errors and clocks (for ``jupyter-gpu
status --wide``) are read every :data:`EXTRAS_REFRESH_SECONDS` only, the PCI bus id once.

MIG (docs/mig.md): a GPU in MIG mode is read as a whole GPU without utilization (NVML has none in
MIG mode) plus one memory call per slice; its processes are read once on the parent, where NVML
gives each its GPU and compute instance ids, and attributed to their slice from those. The slices
themselves (MIG handles, UUIDs, names, instance ids) are enumerated when the GPU is opened and again
every :data:`MIG_REFRESH_SECONDS`, or at once when a process names an instance no known slice has,
or a slice cannot be read (slices are created and destroyed without a GPU reset).
"""

from __future__ import annotations

import functools
import operator
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

from .. import simulate
from ..core import messages
from ..core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from .gpu_processes import Entry, ProcessTable
from .processes import ProcessDirectory

__all__ = ["NvmlReader", "default_reader", "snapshot"]


MIG_REFRESH_SECONDS = 5.0
"""How old a GPU's list of MIG slices, and its name, UUID and power limit, may get before they are
read again."""

EXTRAS_REFRESH_SECONDS = 5.0
"""How old fan speed, ECC count and clocks (``jupyter-gpu status --wide``) may get: four NVML calls
per GPU read every 5 s rather than every sample, so the host's NVML calls barely grow with them."""

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of a process on a GPU not in MIG mode


@dataclass
class _Slice:
    index: int
    handle: Any
    uuid: str
    name: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass
class _Device:
    index: int
    handle: Any
    name: str
    uuid: str
    power_limit: float | None
    slices: list[_Slice] | None = None  # None: not in MIG mode
    slices_read_at: float = float("-inf")
    pci_bus_id: str | None = None
    extras: tuple[int | None, int | None, int | None, int | None] = (None, None, None, None)  # fan, ECC, clocks
    extras_read_at: float = float("-inf")
    unsupported: set[str] | None = None  # extras this GPU answered NOT_SUPPORTED for: not asked again


class NvmlUnavailable(Exception):
    """NVML cannot be used in this process at all; the message is for people."""


class NvmlReader:
    """Reads snapshots of every GPU through nvidia-ml-py. See the module docstring."""

    def __init__(self, processes: ProcessDirectory | None = None) -> None:
        self.processes = processes or ProcessDirectory()
        self._lock = threading.Lock()
        self._pynvml: Any = None
        self._devices: list[_Device | None] | None = None
        self._device_errors: dict[int, str] = {}
        self._driver_version: str | None = None
        self._memory_v2 = True
        self._process_calls: dict[str, Any] = {}
        self._raw_process_calls: dict[str, bool] = {}
        self._table = ProcessTable(self.processes)  # per GPU: the last sample's processes
        self._raw_reads: dict[tuple[str, int], _RawRead] = {}  # per (kind, GPU index): NVML's last array
        self._simulation: simulate.SimulatedNvmlLibrary | None = None

    # -- initialisation

    def _initialize(self) -> None:
        """Initialise NVML and cache the devices (under the lock); raise NvmlUnavailable."""
        try:
            simulate.install_from_environment()
        except simulate.ScenarioError as error:
            self._forget()
            raise NvmlUnavailable(messages.SIMULATION_FAILED.format(error=error)) from error
        if simulate.installed() is not self._simulation:  # another simulated world, or none now
            self._forget()
            self._simulation = simulate.installed()
        if self._devices is not None:
            return
        try:
            import pynvml
        except ImportError as error:
            raise NvmlUnavailable(messages.NVML_NOT_INSTALLED) from error
        self._pynvml = pynvml
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(explain_nvml_error(error)) from error
        except pynvml.NVMLLibraryMismatchError as error:
            raise NvmlUnavailable(_MISMATCH) from error
        devices: list[_Device | None] = []
        self._device_errors = {}
        for index in range(count):
            devices.append(self._open_device(index))
        self._process_calls = {
            "compute": pynvml.nvmlDeviceGetComputeRunningProcesses,
            "graphics": pynvml.nvmlDeviceGetGraphicsRunningProcesses,
        }
        self._memory_v2 = True
        self._devices = devices

    def _open_device(self, index: int) -> _Device | None:
        pynvml = self._pynvml
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return _Device(
                index=index,
                handle=handle,
                name=_text(pynvml.nvmlDeviceGetName(handle)),
                uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                power_limit=_optional(pynvml, lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000),
                pci_bus_id=_optional(pynvml, lambda: _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)),
            )
        except pynvml.NVMLError as error:
            self._device_errors[index] = explain_nvml_error(error)
            return None

    def _read_identity(self, device: _Device) -> None:
        """Read a GPU's name, UUID and power limit again (NVML errors propagate)."""
        pynvml = self._pynvml
        handle = device.handle
        device.name = _text(pynvml.nvmlDeviceGetName(handle))
        device.uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        device.power_limit = _optional(pynvml, lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000)

    def _enumerate_slices(self, device: _Device) -> None:
        """Read whether ``device`` is in MIG mode and, if so, its MIG devices (NVML errors propagate)."""
        pynvml = self._pynvml
        device.slices_read_at = time.monotonic()
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(device.handle)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, AttributeError):
            device.slices = None  # no MIG on this GPU, driver or bindings
            return
        if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
            device.slices = None
            return
        known = {s.uuid: s for s in device.slices or ()}
        slices: list[_Slice] = []
        for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device.handle)):
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device.handle, position)
            except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
                continue  # no MIG device at this index (indices may have gaps)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            old = known.get(uuid)
            if old is not None and old.index == position:
                old.handle = handle
                slices.append(old)
                continue
            name = _text(pynvml.nvmlDeviceGetName(handle))
            slices.append(
                _Slice(
                    index=position,
                    handle=handle,
                    uuid=uuid,
                    name=name,
                    profile=mig_profile(name),
                    gpu_instance_id=pynvml.nvmlDeviceGetGpuInstanceId(handle),
                    compute_instance_id=pynvml.nvmlDeviceGetComputeInstanceId(handle),
                )
            )
        device.slices = slices

    def reset(self) -> None:
        """Forget NVML state; the next snapshot initialises again."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        if self._devices is not None and self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except Exception:
                pass
        self._devices = None

    # -- snapshots

    def snapshot(self) -> Snapshot:
        """Every GPU now. Never raises; see the module docstring for how failures show."""
        timestamp = time.time()
        with self._lock:
            try:
                self._initialize()
            except NvmlUnavailable as error:
                simulated = simulate.installed() is not None or simulate.simulation_requested(
                    os.environ.get(simulate.ENV_VAR)
                )
                return Snapshot(
                    nvml_available=False,
                    timestamp=timestamp,
                    error=str(error),
                    simulated=simulated,
                    warnings=_warnings(),
                )
            simulated = simulate.installed() is not None
            opened = self._devices or []
            devices = list(opened)
            for index, device in enumerate(devices):
                if device is None:  # a GPU that failed to open: it may be back
                    devices[index] = opened[index] = self._open_device(index)
            driver_version = self._driver_version
        pynvml = self._pynvml
        gpus: list[GpuInfo] = []
        global_failure: str | None = None
        self._table.begin()  # one /proc listing for every GPU of this snapshot
        for index, device in enumerate(devices):
            if device is None:
                open_error = self._device_errors.get(index, messages.GPU_NOT_OPENED)
                gpus.append(GpuInfo(index=index, uuid="", name="", error=open_error))
                continue
            try:
                gpus.append(self._read(device))
            except pynvml.NVMLError as error:
                if error.value in _GLOBAL_ERRORS:
                    global_failure = explain_nvml_error(error)
                    break
                gpus.append(
                    GpuInfo(
                        index=index,
                        uuid=device.uuid,
                        name=device.name,
                        power_limit=device.power_limit,
                        error=explain_nvml_error(error),
                    )
                )
            except pynvml.NVMLLibraryMismatchError:
                gpus.append(GpuInfo(index=index, uuid=device.uuid, name=device.name, error=_MISMATCH))
        if global_failure is not None:
            self.reset()
            return Snapshot(
                nvml_available=False,
                timestamp=timestamp,
                error=global_failure,
                driver_version=driver_version,
                simulated=simulated,
                warnings=_warnings(),
            )
        self._table.end([gpu.processes for gpu in gpus])
        return Snapshot(
            nvml_available=True,
            timestamp=timestamp,
            gpus=tuple(gpus),
            driver_version=driver_version,
            simulated=simulated,
            warnings=_warnings(),
        )

    def _read(self, device: _Device) -> GpuInfo:
        pynvml = self._pynvml
        handle = device.handle
        if time.monotonic() - device.slices_read_at > MIG_REFRESH_SECONDS:
            if device.slices_read_at > float("-inf"):  # not at the first read: opening read them
                self._read_identity(device)
            self._enumerate_slices(device)
        total, used, free, reserved = self._memory(handle)
        if device.slices is not None:
            return self._read_mig(device, total, used, free, reserved)
        utilization = _optional(pynvml, lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        temperature = _optional(pynvml, lambda: pynvml.nvmlDeviceGetTemperature(handle, 0))
        power_mw = _optional(pynvml, lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
        return GpuInfo(
            index=device.index,
            uuid=device.uuid,
            name=device.name,
            memory_total=total,
            memory_used=used,
            memory_free=free,
            memory_reserved=reserved,
            utilization=utilization,
            temperature=temperature,
            power=None if power_mw is None else power_mw / 1000,
            power_limit=device.power_limit,
            processes=self._processes(handle, device.index),
            **_extras(self._pynvml, device),
        )

    def _read_mig(self, device: _Device, total: int, used: int, free: int, reserved: int | None) -> GpuInfo:
        """A GPU in MIG mode: the whole card's figures, then each slice's memory and processes."""
        pynvml = self._pynvml
        handle = device.handle
        temperature = _optional(pynvml, lambda: pynvml.nvmlDeviceGetTemperature(handle, 0))
        power_mw = _optional(pynvml, lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
        slices = device.slices or []
        by_instance = {(s.gpu_instance_id, s.compute_instance_id): s.uuid for s in slices}
        processes = self._processes(handle, device.index, by_instance)
        if any(p.slice is None for p in processes):  # a slice created since the last enumeration
            self._enumerate_slices(device)
            slices = device.slices or []
            by_instance = {(s.gpu_instance_id, s.compute_instance_id): s.uuid for s in slices}
            processes = self._processes(handle, device.index, by_instance)
        infos: list[MigSlice] = []
        stale = False
        for s in slices:
            members = tuple(p for p in processes if p.slice == s.uuid)
            try:
                s_total, s_used, s_free, _ = self._memory(s.handle)
            except pynvml.NVMLError as error:
                if error.value in _GLOBAL_ERRORS:
                    raise
                stale = True
                infos.append(
                    MigSlice(
                        index=s.index,
                        uuid=s.uuid,
                        name=s.name,
                        profile=s.profile,
                        gpu_instance_id=s.gpu_instance_id,
                        compute_instance_id=s.compute_instance_id,
                        error=explain_nvml_error(error),
                        processes=members,
                    )
                )
                continue
            infos.append(
                MigSlice(
                    index=s.index,
                    uuid=s.uuid,
                    name=s.name,
                    profile=s.profile,
                    gpu_instance_id=s.gpu_instance_id,
                    compute_instance_id=s.compute_instance_id,
                    memory_total=s_total,
                    memory_used=s_used,
                    memory_free=s_free,
                    processes=members,
                )
            )
        if stale:
            device.slices_read_at = float("-inf")  # enumerate again at the next snapshot
        return GpuInfo(
            index=device.index,
            uuid=device.uuid,
            name=device.name,
            memory_total=total,
            memory_used=used,
            memory_free=free,
            memory_reserved=reserved,
            utilization=None,
            temperature=temperature,
            power=None if power_mw is None else power_mw / 1000,
            power_limit=device.power_limit,
            processes=processes,
            mig_mode=True,
            slices=tuple(infos),
            **_extras(self._pynvml, device),
        )

    def _memory(self, handle: Any) -> tuple[int, int, int, int | None]:
        pynvml = self._pynvml
        if self._memory_v2:
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                return memory.total, memory.used, memory.free, memory.reserved
            except (
                pynvml.NVMLError_FunctionNotFound,
                pynvml.NVMLError_ArgumentVersionMismatch,
                pynvml.NVMLError_NotSupported,
            ):
                self._memory_v2 = False  # an older driver: v1 counts reserved memory as used
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return memory.total, memory.used, memory.free, None

    def _processes(
        self, handle: Any, index: int = -1, slices: dict[tuple[int, int], str] | None = None
    ) -> tuple[GpuProcess, ...]:
        """A GPU's processes; with ``slices`` ((GI id, CI id) -> MIG UUID) each carries its slice
        (:class:`jupyter_gpu.sources.gpu_processes.ProcessTable`: a steady GPU costs no look-up)."""
        compute = self._running_processes("compute", handle, index)
        graphics = self._running_processes("graphics", handle, index)
        return self._table.processes(index, compute, graphics, slices)

    def _running_processes(self, kind: str, handle: Any, index: int = -1) -> list[tuple[int, int | None, int, int]]:
        """(pid, bytes or None, GPU instance id, compute instance id) of one GPU's compute or graphics
        processes (the ids are 0xFFFFFFFF outside MIG mode and on drivers without them). The same
        list object as the last read of GPU ``index`` when NVML's array has the same bytes."""
        pynvml = self._pynvml
        if self._raw_process_calls.get(kind, True):
            try:
                read = _raw_processes(pynvml, _V3_SYMBOLS[kind], handle, self._raw_reads.get((kind, index)))
                self._raw_reads[(kind, index)] = read
                return read[1]
            except (AttributeError, TypeError, pynvml.NVMLError_FunctionNotFound):
                self._raw_process_calls[kind] = False  # bindings or driver differ: their own wrapper
            except pynvml.NVMLError_NotSupported:
                return []
        call = self._process_calls[kind]
        try:
            entries = call(handle)
        except pynvml.NVMLLibraryMismatchError:
            # The driver lacks the _v3 call (pynvml raises this, not an NVMLError): use _v2 from now on.
            older = {
                "compute": pynvml.nvmlDeviceGetComputeRunningProcesses_v2,
                "graphics": pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2,
            }[kind]
            self._process_calls[kind] = older
            entries = older(handle)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            return []
        return [
            (
                entry.pid,
                entry.usedGpuMemory,
                getattr(entry, "gpuInstanceId", NO_INSTANCE),
                getattr(entry, "computeInstanceId", NO_INSTANCE),
            )
            for entry in entries
        ]


_MEMORY = operator.itemgetter(1)


_V3_SYMBOLS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses_v3",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses_v3",
}


_RawRead = tuple[bytes, list[Entry]]


def _raw_processes(pynvml: Any, symbol: str, handle: Any, previous: _RawRead | None = None) -> _RawRead:
    """NVML's two-call process protocol as nvidia-ml-py's ``_v3`` wrapper does it, read in bulk:
    the array's bytes and its entries.

    nvidia-ml-py turns every entry into a "friendly object" (~7 us each: 0.9 s for 128,000
    processes); here the array it would fill (its own ``c_nvmlProcessInfo_v3_t``, so the layout is
    the bindings') is read with one ``struct`` pass, or not at all when its bytes are those of
    ``previous`` (the last read of this GPU), whose list is returned. Raises what the bindings raise.
    """
    from ctypes import byref, c_uint, sizeof

    entry = pynvml.c_nvmlProcessInfo_v3_t
    function = pynvml._nvmlGetFunctionPointer(symbol)
    count = c_uint(0)
    ret = function(handle, byref(count), None)
    if ret == pynvml.NVML_SUCCESS:
        return b"", []
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes started meanwhile, as nvidia-ml-py does
    array = (entry * count.value)()
    ret = function(handle, byref(count), array)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    layout = _layout(
        entry.pid.offset,
        entry.usedGpuMemory.offset,
        entry.gpuInstanceId.offset,
        entry.computeInstanceId.offset,
        sizeof(entry),
    )
    missing = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    data = bytes(memoryview(array).cast("B")[: count.value * sizeof(entry)])
    if previous is not None and previous[0] == data:
        return previous
    rows = list(layout.iter_unpack(data))  # (pid, memory, gi, ci) tuples, made in C
    if missing in map(_MEMORY, rows):  # rare (some drivers, some processes): write those as None
        rows = [(pid, None if memory == missing else memory, gi, ci) for pid, memory, gi, ci in rows]
    return data, rows


@functools.cache
def _layout(pid_offset: int, memory_offset: int, gi_offset: int, ci_offset: int, size: int) -> struct.Struct:
    """A struct format reading (pid, usedGpuMemory, gpuInstanceId, computeInstanceId) out of one
    process entry of ``size`` bytes."""
    if memory_offset < pid_offset + 4 or gi_offset < memory_offset + 8 or ci_offset < gi_offset + 4:
        raise TypeError("unexpected nvmlProcessInfo layout")
    return struct.Struct(
        f"={pid_offset}xI{memory_offset - pid_offset - 4}xQ{gi_offset - memory_offset - 8}xI"
        f"{ci_offset - gi_offset - 4}xI{size - ci_offset - 4}x"
    )


def _extras(pynvml: Any, device: _Device) -> dict[str, Any]:
    """Fan speed, volatile uncorrected ECC errors, SM and memory clocks: read at most every
    :data:`EXTRAS_REFRESH_SECONDS`; one a GPU answered NOT_SUPPORTED for is not asked again
    (no fan on a passively cooled card, ECC mode off, both last until a reboot)."""
    if time.monotonic() - device.extras_read_at >= EXTRAS_REFRESH_SECONDS:
        handle = device.handle
        unsupported = device.unsupported if device.unsupported is not None else set()
        device.unsupported = unsupported
        reads = {
            "fan_speed": lambda: pynvml.nvmlDeviceGetFanSpeed(handle),
            "ecc_errors": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
            ),
            "clock_sm": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "clock_memory": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        }
        values = []
        for name, read in reads.items():
            value = None if name in unsupported else _optional(pynvml, read)
            if value is None:
                unsupported.add(name)
            values.append(value)
        device.extras = (values[0], values[1], values[2], values[3])
        device.extras_read_at = time.monotonic()
    fan, ecc, sm, memory = device.extras
    return {
        "fan_speed": fan,
        "ecc_errors": ecc,
        "clock_sm": sm,
        "clock_memory": memory,
        "pci_bus_id": device.pci_bus_id,
    }


def mig_profile(name: str) -> str:
    """A MIG device's profile from the name NVML gives it: ``"NVIDIA A100-SXM4-80GB MIG 1g.10gb"``
    -> ``"1g.10gb"`` (a simulation marker after it is dropped); the whole name if it has no " MIG "."""
    _, found, profile = name.rpartition(" MIG ")
    if not found:
        return name
    return profile.removesuffix(simulate.SIMULATED_MARKER).strip()


# --------------------------------------------------------------------------------------------

_MISMATCH = messages.NVML_MISMATCH

# NVML error codes that mean "NVML as a whole is unusable", not "this GPU": see nvml.h.
_GLOBAL_ERRORS = {1, 4, 9, 12, 18}  # uninitialized, no permission, driver not loaded, no library, RM mismatch


def explain_nvml_error(error: Exception) -> str:
    """A sentence a person can act on, ending with NVML's own words."""
    code = getattr(error, "value", None)
    explanation = messages.NVML_EXPLANATIONS.get(code) if isinstance(code, int) else None
    return (explanation or messages.NVML_ERROR).format(error=error)


def _warnings() -> tuple[str, ...]:
    """What the snapshot should warn about: a refused edit of the simulated scenario, or one that
    changed the number of GPUs this process keeps."""
    library = simulate.installed()
    if library is None:
        return ()
    return tuple(line for line in (library.source.rejection(), library.gpu_count_warning()) if line)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _optional(pynvml: Any, read: Any) -> Any:
    """A value the GPU may not support: None when it does not."""
    try:
        return read()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None


_default_reader: NvmlReader | None = None
_default_lock = threading.Lock()


def default_reader() -> NvmlReader:
    """This process's shared reader (NVML is initialised once per process)."""
    global _default_reader
    if _default_reader is None:
        with _default_lock:
            if _default_reader is None:
                _default_reader = NvmlReader()
    return _default_reader


def snapshot() -> Snapshot:
    """A snapshot of every GPU on this machine, through this process's shared reader."""
    return default_reader().snapshot()


@dataclass(frozen=True)
class DriverFacts:
    """What ``jupyter-gpu doctor`` reads beside a snapshot: versions (None: not said). PCI bus ids
    are in the snapshot itself (``GpuInfo.pci_bus_id``)."""

    nvml_version: str | None = None
    cuda_driver_version: str | None = None  # "12.4": the newest CUDA the driver supports


def driver_facts(reader: NvmlReader | None = None) -> DriverFacts:
    """NVML's version and the CUDA version the driver supports, through
    ``reader`` (this process's shared one by default) after a snapshot opened NVML; every value
    NVML cannot give is None, and nothing raises."""
    reader = reader or default_reader()
    pynvml = reader._pynvml
    if pynvml is None or reader._devices is None:
        return DriverFacts()
    failures = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, AttributeError)
    try:
        nvml_version: str | None = _text(pynvml.nvmlSystemGetNVMLVersion())
    except failures:
        nvml_version = None
    try:
        code = int(pynvml.nvmlSystemGetCudaDriverVersion())  # 12040 -> 12.4
        cuda: str | None = f"{code // 1000}.{code % 1000 // 10}"
    except failures:
        cuda = None
    return DriverFacts(nvml_version, cuda)
