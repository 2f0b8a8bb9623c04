"""The simulated C library: :class:`SimulatedNvmlLibrary` stands in for ``libnvidia-ml.so.1``.

Every ``pynvml`` function still runs its real code (struct layouts, the two-call process protocol,
error classes, version checks) and ends in a ctypes callback defined here, answering from the
current :class:`~jupyter_gpu.simulate.scenario.Scenario`.

Symbols of the C library: the ones implemented here answer from the scenario; every other ``nvml*``
symbol answers ``NVML_ERROR_NOT_SUPPORTED``, as a real driver does for a feature a GPU lacks (so
unmodified readers such as ``nvitop -1`` show "N/A"); only the scenario's ``missing_functions``
are truly absent (``NVMLError_FunctionNotFound``, an old driver). Lookups are linear in the number
of processes (64 GPUs x 2,000 processes sample in well under a second).
"""

from __future__ import annotations

import ctypes
import os
import struct
import time
from collections import Counter
from collections.abc import Callable
from ctypes import POINTER, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from typing import Any

from ..core import messages
from ..core.units import MIB
from . import counters
from .codes import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_GPU_IS_LOST,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_STRINGS,
    ERROR_UNINITIALIZED,
    ERROR_UNKNOWN,
    GPU_FAULTS,
    SUCCESS,
    WHOLE_NVML_FAULTS,
)
from .counters import CALLS_DIR_VAR
from .scenario import MAX_MIG_SLICES, SIMULATED_MARKER, Scenario, ScenarioSource, SimulatedGpu, SimulatedSlice

# Symbols other readers (nvitop, gpustat, nvdashboard) ask for that a simulated GPU reports as
# "Not Supported", as many real GPUs do, rather than lacking them (which makes those tools log errors).
NOT_SUPPORTED_FUNCTIONS = (
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
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


class _PciInfo(ctypes.Structure):
    """nvmlPciInfo_t as ``nvmlDeviceGetPciInfo_v3`` fills it (nvml.h)."""

    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", ctypes.c_char * 32),
    ]


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


class _SimulatedDriver:
    """What every simulated symbol stands on: the scenario's faults and NVML's init count, the
    device handles (one ctypes cell per GPU and per MIG slice), and the guard that keeps Python
    exceptions from reaching C and counts each call. :class:`SimulatedNvmlLibrary` adds the symbols."""

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
        self._error_strings = {code: ctypes.create_string_buffer(text) for code, text in ERROR_STRINGS.items()}
        self._callbacks: dict[str, Any] = {}
        self._missing = source.current().missing_functions
        self.gpu_count: int | None = None  # fixed by the first nvmlInit: this process's GPUs

    def gpu_count_warning(self) -> str | None:
        """One line for a snapshot's ``warnings`` while the scenario's number of GPUs differs from
        the number this process's NVML started with (see :meth:`SimulatedNvmlLibrary._device_count`)."""
        fixed = self.gpu_count
        now = len(self.source.last.gpus)
        if fixed is None or now == fixed:
            return None
        if now > fixed:
            template = messages.SCENARIO_COUNT_MORE_ONE if now == 1 else messages.SCENARIO_COUNT_MORE
        else:
            template = messages.SCENARIO_COUNT_ONE if now == 1 else messages.SCENARIO_COUNT_FEWER
        return template.format(now=now, fixed=fixed)

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
            tick = counters.call_ticker(self.calls_directory)
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
        if index >= len(scenario.gpus):  # removed from the scenario since NVML started: lost
            return None, None, ERROR_GPU_IS_LOST if index < (self.gpu_count or 0) else ERROR_INVALID_ARGUMENT
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

    def _whole_gpu(self, handle: int) -> tuple[SimulatedGpu | None, int]:
        """A whole GPU for figures a MIG device does not have (NOT_SUPPORTED on a MIG handle)."""
        gpu, slice_, error = self._device(handle)
        if slice_ is not None:
            return None, ERROR_NOT_SUPPORTED
        return gpu, error


class _BoardFigures(_SimulatedDriver):
    """What ``jupyter-gpu status --wide`` and nvitop read besides the basics: fan, PCI address, ECC
    errors, clocks. Each answers NOT_SUPPORTED where a real driver does (docs/nvml.md)."""

    def _fan_speed(self, handle: int, out: int) -> int:
        """Percent of the fan's maximum; NOT_SUPPORTED on a card without a fan of its own (nvml.h:
        "for all discrete products with dedicated fans") and on a MIG device."""
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "fan_speed" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        self._write_uint(out, gpu.fan_speed)
        return SUCCESS

    def _pci_info(self, handle: int, out: int) -> int:
        """The PCI address ("for all products"); NOT_SUPPORTED on a MIG device here."""
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        domain, bus, rest = gpu.pci_bus_id.split(":")
        device = rest.split(".")[0]
        info = ctypes.cast(out, POINTER(_PciInfo))[0]
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device, 16)
        info.pciDeviceId, info.pciSubSystemId = 0x20B210DE, 0x147F10DE
        return SUCCESS

    def _ecc_errors(self, handle: int, error_type: int, counter_type: int, out: int) -> int:
        """Uncorrected (type 1) ECC errors, volatile or aggregate alike; corrected (0) are none.
        NOT_SUPPORTED when ECC mode is off (nvml.h: "requires ECC Mode to be enabled")."""
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "ecc" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        if error_type not in (0, 1) or counter_type not in (0, 1):
            return ERROR_INVALID_ARGUMENT
        ctypes.cast(out, POINTER(c_ulonglong))[0] = gpu.ecc_uncorrected if error_type == 1 else 0
        return SUCCESS

    def _clock_info(self, handle: int, clock_type: int, out: int) -> int:
        """Current clocks in MHz: graphics and SM (0, 1), memory (2), video (3, as SM here)."""
        gpu, error = self._whole_gpu(handle)
        if gpu is None:
            return error
        if "clocks" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        if clock_type not in (0, 1, 2, 3):
            return ERROR_INVALID_ARGUMENT
        self._write_uint(out, gpu.clock_memory_mhz if clock_type == 2 else gpu.clock_sm_mhz)
        return SUCCESS


class SimulatedNvmlLibrary(_BoardFigures):
    """Stands in for ``CDLL("libnvidia-ml.so.1")``: one ctypes callback per exported C symbol.

    Attributes are only the symbols implemented (minus the scenario's ``missing_functions``), so a
    missing symbol behaves as on a real old driver. Exceptions inside a callback never reach C:
    they return NVML_ERROR_UNKNOWN and are kept in :attr:`callback_errors` for tests to inspect.
    :attr:`calls` counts calls per symbol in this process; with ``JUPYTER_GPU_SIMULATE_CALLS_DIR``
    set when the library is created (:attr:`calls_directory`), each call is also counted in this
    process's file there, for :func:`calls_in` to sum across processes.
    """

    def __init__(self, source: ScenarioSource) -> None:
        super().__init__(source)
        self._packed: dict[tuple[int, int, str, int], tuple[object, int, bytes]] = {}
        missing = self._missing
        symbols = self._symbols()
        for name in NOT_SUPPORTED_FUNCTIONS:
            symbols.setdefault(name, (c_int, (), self._not_supported))
        for name, (restype, argtypes, implementation) in symbols.items():
            if name in missing:
                continue
            callback = ctypes.CFUNCTYPE(restype, *argtypes)(self._guard(name, implementation, restype))
            self._callbacks[name] = callback  # keep the thunk alive as long as the library
            setattr(self, name, callback)

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
            "nvmlDeviceGetFanSpeed": (c_int, (p, p), self._fan_speed),
            "nvmlDeviceGetPciInfo_v3": (c_int, (p, p), self._pci_info),
            "nvmlDeviceGetTotalEccErrors": (c_int, (p, c_uint, c_uint, p), self._ecc_errors),
            "nvmlDeviceGetClockInfo": (c_int, (p, c_uint, p), self._clock_info),
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

    # -- system

    def _init(self, flags: int) -> int:
        scenario = self.source.current()
        if scenario.fault is not None:
            return WHOLE_NVML_FAULTS[scenario.fault]
        self._initialized += 1
        if self.gpu_count is None:
            self.gpu_count = len(scenario.gpus)
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
        """The number of GPUs as of this library's first ``nvmlInit``, whatever later scenario edits
        say: the simulation stands for a machine whose GPUs do not come and go under running
        processes (jupyter_gpu's reader opens its GPUs once, as CUDA enumerates its devices once, at
        ``cuInit``). A GPU removed from the scenario then answers "GPU is lost";
        :meth:`gpu_count_warning` says what happened."""
        scenario, error = self._ready()
        if not error:
            self._write_uint(out, len(scenario.gpus) if self.gpu_count is None else self.gpu_count)
        return error

    def _handle_by_index(self, index: int, out: int) -> int:
        scenario, error = self._ready()
        if error:
            return error
        if index >= len(scenario.gpus):
            return ERROR_GPU_IS_LOST if index < (self.gpu_count or 0) else ERROR_INVALID_ARGUMENT
        fault = scenario.gpus[index].fault
        if fault is not None:
            return GPU_FAULTS[fault]
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
        # The GPU's processes (or slices) as parsed: the same object while only other figures move
        # (SimulatedGpu.at keeps it), so a moving utilization does not repack its processes.
        listed = gpu.processes if gpu.mig_slices is None else gpu.mig_slices
        cached = self._packed.get(key)
        if cached is not None and cached[0] is listed:
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
        self._packed[key] = (listed, len(chunks), packed)
        return len(chunks), packed

    # -- MIG

    def _mig_mode(self, handle: int, current: int, pending: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None or "mig" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED  # a MIG device, or a GPU that cannot do MIG
        # MIG off: (0, 0), NVML_DEVICE_MIG_DISABLE, as an H100 with MIG off answered (driver
        # 580.159.04, docs/real-gpu.md); on: NVML_DEVICE_MIG_ENABLE twice
        enabled = int(gpu.mig_slices is not None)
        self._write_uint(current, enabled)
        self._write_uint(pending, enabled)
        return SUCCESS

    def _max_mig_count(self, handle: int, out: int) -> int:
        gpu, slice_, error = self._device(handle)
        if gpu is None:
            return error
        if slice_ is not None or "mig" in gpu.unsupported:
            return ERROR_NOT_SUPPORTED
        # zero when MIG is off, as the H100 answered (docs/real-gpu.md)
        self._write_uint(out, 0 if gpu.mig_slices is None else MAX_MIG_SLICES)
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
                # a whole GPU is no GPU/compute instance: driver 580.159.04 answers INVALID_ARGUMENT
                # for an H100 with MIG off (docs/real-gpu.md)
                return ERROR_INVALID_ARGUMENT
            self._write_uint(out, getattr(slice_, field_name))
            return SUCCESS

        return implementation


_PACK_V1 = struct.Struct("=I4xQ")  # nvmlProcessInfo_v1_t: pid, (padding), usedGpuMemory
_PACK_V2 = struct.Struct("=I4xQII")  # nvmlProcessInfo_t (_v2/_v3): ..., gpuInstanceId, computeInstanceId
