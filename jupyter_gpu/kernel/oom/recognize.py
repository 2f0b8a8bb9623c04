"""Recognising a GPU out-of-memory error of PyTorch, TensorFlow/Keras or JAX (or CUDA) from its
class's name and module and its message (see :mod:`jupyter_gpu.kernel.oom`): :func:`recognize`
-> :class:`OutOfMemory`, with what the message tells (device, requested, in use, reserved)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from ...core.units import GIB, MIB

_MAX_TEXT = 20_000  # characters of an error message that are read (a message can be huge)
_UNITS = {
    "B": 1,
    "BYTES": 1,
    "KIB": 1024,
    "KB": 1024,
    "K": 1024,
    "MIB": MIB,
    "MB": MIB,
    "M": MIB,
    "GIB": GIB,
    "GB": GIB,
    "G": GIB,
    "TIB": 1024 * GIB,
    "TB": 1024 * GIB,
    "T": 1024 * GIB,
}
# Every pattern matches in linear time: a number starts only where a run of digits starts (the
# lookbehind) and its digits are taken possessively, so "CUDA out of memory. 777…7" (no unit after
# the digits) is one failed attempt per run, not one per digit (that was quadratic: 73 s for 20k).
_SIZE = r"(?<![0-9.])([0-9]++(?:\.[0-9]++)?+)\s*+(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G|T)\b"
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "int": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}


@dataclass(frozen=True)
class OutOfMemory:
    """A recognised out-of-memory error, with what its message tells (None: not told)."""

    framework: str  # "PyTorch", "TensorFlow", "JAX" or "CUDA" (another library)
    module: str  # the framework's module name ("torch", "tensorflow", "jax"; "" for CUDA)
    device: int | None = None  # the framework's device number (cuda:N, TensorFlow's logical /GPU:N)
    requested_bytes: int | None = None  # what the failing allocation asked for
    in_use_bytes: int | None = None  # what the framework's tensors occupied (its own figure)
    reserved_bytes: int | None = None  # what the framework's allocator held from the driver
    summary: str = ""  # the first line of the message, shortened

    @property
    def device_label(self) -> str | None:
        if self.device is None:
            return None
        return f"/GPU:{self.device}" if self.module == "tensorflow" else f"cuda:{self.device}"


def _names(error: BaseException) -> list[tuple[str, str]]:
    """(module, name) of each class of ``error``'s MRO, read past anything a metaclass defines."""
    return [(_plain(_TYPE_MODULE.__get__(cls)), class_name(cls)) for cls in _TYPE_MRO.__get__(type(error))]


def class_name(cls: type) -> str:
    """``cls.__name__`` as ``type`` stores it (a metaclass's ``__name__`` property is the user's code)."""
    return _plain(_TYPE_NAME.__get__(cls))


def _plain(value: object) -> str:
    return value if type(value) is str else ""


# type's own fields (C descriptors), read past anything a metaclass defines in their place
_TYPE_NAME: Any = vars(type)["__name__"]
_TYPE_MODULE: Any = vars(type)["__module__"]
_TYPE_MRO: Any = vars(type)["__mro__"]


def _size(number: str, unit: str) -> int | None:
    """``number`` ``unit`` in bytes; None where that is infinite as a float (400 digits of GiB), which
    no integer is. :func:`_plausible` bounds the rest."""
    value = float(number) * _UNITS[unit.upper()]
    return int(value) if math.isfinite(value) else None


def _whole(digits: str) -> int | None:
    """A run of digits read from a message as a number (a device index, a byte count, a dimension);
    None where it has more digits than :data:`MAX_FIGURE_BYTES`: no such figure is real, and Python
    refuses to convert more than 4,300 digits, which would leave the whole error unrecognised."""
    return int(digits) if len(digits) <= _MAX_DIGITS else None


def _first(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text, re.IGNORECASE)


def _classify(error: BaseException, text: str) -> tuple[str, str] | None:
    names = _names(error)
    modules = {module.split(".")[0] for module, _ in names}
    if any(name == "OutOfMemoryError" and module.startswith("torch") for module, name in names):
        return "PyTorch", "torch"
    if any(name == "ResourceExhaustedError" and module.startswith("tensorflow") for module, name in names):
        return "TensorFlow", "tensorflow"
    if any(name in ("XlaRuntimeError", "JaxRuntimeError") for _, name in names) and "RESOURCE_EXHAUSTED" in text:
        return "JAX", "jax"
    if "CUDA out of memory" in text and ("torch" in modules or isinstance(error, RuntimeError)):
        return "PyTorch", "torch"
    if "OOM when allocating" in text:
        return "TensorFlow", "tensorflow"
    if "RESOURCE_EXHAUSTED" in text and ("Out of memory" in text or "allocate" in text) and modules & {"jax", "jaxlib"}:
        return "JAX", "jax"
    if "CUDA_ERROR_OUT_OF_MEMORY" in text:
        for module, framework in (
            ("tensorflow", "TensorFlow"),
            ("torch", "PyTorch"),
            ("jax", "JAX"),
            ("jaxlib", "JAX"),
        ):
            if module in modules:
                return framework, "jax" if module == "jaxlib" else module
        return "CUDA", ""
    return None


MAX_FIGURE_BYTES = 2**53
"""The largest size read from a message (8 PiB): more than any device holds, and the most every face
formats exactly (``core.units``). A message can say anything (a shape of 30 dimensions of 10**8, a
user's own exception): a figure above this is not shown as a 230-digit number but as unknown."""


_MAX_DIGITS = len(str(MAX_FIGURE_BYTES))


def _plausible(figure: int | None) -> int | None:
    return figure if figure is None or figure <= MAX_FIGURE_BYTES else None


def _parse(framework: str, module: str, text: str) -> OutOfMemory:
    device = requested = in_use = reserved = None
    if module == "torch":
        if match := _first(r"Tried to allocate " + _SIZE, text):
            requested = _size(*match.groups())
        if match := _first(r"\bGPU (\d+)\b", text):
            device = _whole(match[1])
        if (
            match := _first(r"memory " + _SIZE + r" is allocated by PyTorch", text)
            or _first(_SIZE + r" is allocated by PyTorch", text)
            or _first(_SIZE + r" already allocated", text)
        ):
            in_use = _size(*match.groups()[-2:])
        if match := _first(_SIZE + r" reserved in total by PyTorch", text):
            reserved = _size(*match.groups())
        elif in_use is not None and (match := _first(_SIZE + r" is reserved by PyTorch but unallocated", text)):
            unallocated = _size(*match.groups())
            reserved = None if unallocated is None else in_use + unallocated
    elif module == "tensorflow":
        if match := _first(r"device:GPU:(\d+)", text):
            device = _whole(match[1])
        if match := _first(r"shape\s*\[([0-9,\s]*)\]\s*and type (\w+)", text):
            digits = [d for d in match[1].replace(" ", "").split(",") if d]
            dims = [dim for dim in map(_whole, digits) if dim is not None]
            if match[2].lower() in _DTYPE_BYTES and len(dims) == len(digits) <= 32:
                requested = math.prod(dims) * _DTYPE_BYTES[match[2].lower()]
        elif match := _first(r"\((\d+) bytes\)", text) or _first(r"allocate (\d+) bytes", text):
            requested = _whole(match[1])
    elif module == "jax":
        if match := _first(r"allocate (?:request for )?(\d+) bytes", text) or _first(r"\((\d+)B\)", text):
            requested = _whole(match[1])
        elif match := _first(r"allocate (?:request for )?" + _SIZE, text):
            requested = _size(*match.groups())
        # JAX 0.11 on a real GPU: "... allocate 186.26GiB with allocator GPU_0_bfc on device 0."
        # (docs/real-gpu.md); older: "device ordinal 0", "cuda:0"
        if (
            match := _first(r"device ordinal (\d+)", text)
            or _first(r"\bcuda:(\d+)", text)
            or _first(r"\bon device (\d+)\b", text)
            or _first(r"\bGPU_(\d+)_bfc\b", text)
        ):
            device = _whole(match[1])
    if requested is None and (match := _first(r"\((\d+) bytes\)", text) or _first(r"allocate (\d+) bytes", text)):
        requested = _whole(match[1])
    requested, in_use, reserved = (_plausible(figure) for figure in (requested, in_use, reserved))
    first = text.strip().splitlines()[0] if text.strip() else ""
    summary = first if len(first) <= 160 else first[:157] + "…"
    return OutOfMemory(framework, module, device, requested, in_use, reserved, summary)


def error_text(error: BaseException, limit: int = _MAX_TEXT) -> str:
    """The first ``limit`` characters of ``error``'s message, in time bounded by ``limit`` whatever
    the exception holds (a plain ``str``, never a subclass with methods of its own).

    An exception class that defines ``__str__`` in Python (TensorFlow's ``OpError``, a user's class)
    is asked with ``str()``: that is code, and it may raise (the caller's guard holds). Any other
    exception's message is its string arguments, read directly: ``str()`` of a huge or recursive
    ``args`` (a list of ten million items) would format all of it, and no framework's out-of-memory
    error carries anything but one string.
    """
    if isinstance(type(error).__str__, FunctionType):
        try:
            text = str(error)
        except KeyboardInterrupt:
            raise
        except BaseException:  # SystemExit from a __str__ included: an error that cannot print itself says nothing
            return ""
    else:
        args = _ARGS.__get__(error)  # the C field, whatever a subclass defines as ``args``
        text = "\n".join(arg for arg in args[:4] if issubclass(type(arg), str))
    return str.__getitem__(text, slice(0, limit))


def _linked(error: BaseException) -> BaseException | None:
    """The exception ``error`` was raised from (``__cause__``), else the one it happened in
    (``__context__``): the C fields, which hold only exceptions, whatever a subclass defines."""
    cause = _CAUSE.__get__(error)
    return cause if cause is not None else _CONTEXT.__get__(error)


# BaseException's own fields (C descriptors), read past anything a subclass defines in their place
_ARGS: Any = vars(BaseException)["args"]
_CAUSE: Any = vars(BaseException)["__cause__"]
_CONTEXT: Any = vars(BaseException)["__context__"]


def recognize(error: BaseException | None) -> OutOfMemory | None:
    """The GPU out-of-memory error in ``error`` (or in its cause/context chain, 8 links at most,
    cycles included), else None.

    Looks at class names and the start of the message only (:func:`error_text`): never imports a
    framework, and its time is linear in ``_MAX_TEXT`` whatever the message holds. Never raises but
    ``KeyboardInterrupt`` (the after-cell hook's guard, :func:`jupyter_gpu.kernel.hooks.guarded`,
    holds that).
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 8:
        seen.add(id(error))
        try:
            text = error_text(error)
            found = _classify(error, text)
            if found is not None:
                return _parse(*found, text)
            error = _linked(error)
        except Exception:
            return None
    return None
