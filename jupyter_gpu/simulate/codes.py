"""NVML's return codes as the simulated library answers them (nvml.h), and the faults a scenario names.

The simulation speaks the C ABI, so it does not borrow pynvml's names.
"""

from __future__ import annotations

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

#: scenario "fault" values that make the whole library fail, and the code NVML answers then
WHOLE_NVML_FAULTS = {
    "library_not_found": ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": ERROR_DRIVER_NOT_LOADED,
    "no_permission": ERROR_NO_PERMISSION,
}
#: a GPU's scenario "fault" values, and the code every call on that GPU answers
GPU_FAULTS = {"lost": ERROR_GPU_IS_LOST}

ERROR_STRINGS = {
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
