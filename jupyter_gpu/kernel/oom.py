"""The out-of-memory explainer: which GPU ran out, who holds it, and what to do next.

When a cell fails with a GPU out-of-memory error of TensorFlow/Keras, PyTorch or JAX, the IPython
extension shows a short report under the traceback (the traceback itself is left as it is; the
report is displayed as text, with its next steps as buttons in JupyterLab: :mod:`.oom_offer`):

- the GPU (nvidia-smi number and name) and its memory: total / used / free;
- who holds it: this kernel (NVML, plus the framework's own in-use and reserved figures where it
  tells them, in its message or its counters), the user's other kernels by notebook name and idle
  time (from the server extension when it runs, else the kernels' own reports), other users by
  user name and memory only;
- this kernel's memory limit, when the limit and not the GPU is what ran out;
- next steps computed from those figures (another GPU with room, an idle kernel of the user's to
  shut down, the framework's cache ``%gpu_free`` can return, growth for TensorFlow).

This module is part of the pure core: it imports no IPython and never a framework. An error is
recognised from its class's name and module (``type(error).__mro__``) and its message, so
recognising costs nothing until an error happens, and the framework need not be importable:

- PyTorch: ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``), and
  ``RuntimeError: CUDA out of memory`` (PyTorch < 1.13);
- TensorFlow / Keras: ``tf.errors.ResourceExhaustedError``, messages with ``OOM when allocating`` or
  ``CUDA_ERROR_OUT_OF_MEMORY``;
- JAX: ``XlaRuntimeError`` (``jax.errors.JaxRuntimeError``) whose message says ``RESOURCE_EXHAUSTED``.

:func:`recognize` finds the error (also as the cause or context of another exception),
:func:`explain` turns facts into the report (pure), :func:`explain_error` gathers the facts
(NVML, the plan, the frameworks' counters, :mod:`jupyter_gpu.sources.peers`) and never raises.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import FunctionType
from typing import TYPE_CHECKING, Any

from ..core.text import display_text
from ..core.units import GIB, MIB, format_bytes, format_duration

if TYPE_CHECKING:
    from ..sources.peers import KernelPeer

__all__ = [
    "Holder",
    "OutOfMemory",
    "Report",
    "class_name",
    "error_text",
    "explain",
    "explain_error",
    "explain_error_report",
    "next_actions",
    "recognize",
]

_MAX_TEXT = 20_000  # characters of an error message that are read (a message can be huge)
_NAME_CHARS = 40  # a name from the driver, a report or another user, as the report shows it (as the magics do)
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


def _size(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit.upper()])


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


def _parse(framework: str, module: str, text: str) -> OutOfMemory:
    device = requested = in_use = reserved = None
    if module == "torch":
        if match := _first(r"Tried to allocate " + _SIZE, text):
            requested = _size(*match.groups())
        if match := _first(r"\bGPU (\d+)\b", text):
            device = int(match[1])
        if (
            match := _first(r"memory " + _SIZE + r" is allocated by PyTorch", text)
            or _first(_SIZE + r" is allocated by PyTorch", text)
            or _first(_SIZE + r" already allocated", text)
        ):
            in_use = _size(*match.groups()[-2:])
        if match := _first(_SIZE + r" reserved in total by PyTorch", text):
            reserved = _size(*match.groups())
        elif in_use is not None and (match := _first(_SIZE + r" is reserved by PyTorch but unallocated", text)):
            reserved = in_use + _size(*match.groups())
    elif module == "tensorflow":
        if match := _first(r"device:GPU:(\d+)", text):
            device = int(match[1])
        if match := _first(r"shape\s*\[([0-9,\s]*)\]\s*and type (\w+)", text):
            dims = [int(d) for d in match[1].replace(" ", "").split(",") if d]
            if match[2].lower() in _DTYPE_BYTES and len(dims) <= 32:
                requested = math.prod(dims) * _DTYPE_BYTES[match[2].lower()]
        elif match := _first(r"\((\d+) bytes\)", text) or _first(r"allocate (\d+) bytes", text):
            requested = int(match[1])
    elif module == "jax":
        if match := _first(r"allocate (?:request for )?(\d+) bytes", text) or _first(r"\((\d+)B\)", text):
            requested = int(match[1])
        elif match := _first(r"allocate (?:request for )?" + _SIZE, text):
            requested = _size(*match.groups())
        if match := _first(r"device ordinal (\d+)", text) or _first(r"\bcuda:(\d+)", text):
            device = int(match[1])
    if requested is None and (match := _first(r"\((\d+) bytes\)", text) or _first(r"allocate (\d+) bytes", text)):
        requested = int(match[1])
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


# -- the report (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """Who holds memory on the GPU that ran out, as the report names them."""

    kind: str  # "self", "kernel" (another kernel of this user), "process" (this user's), "user" (other user)
    memory: int
    label: str  # the notebook, the process, or the user name
    pid: int | None = None
    idle_s: float | None = None
    idle: bool | None = None


@dataclass(frozen=True)
class Facts:
    """Everything :func:`explain` reads. ``gpus`` are :class:`~jupyter_gpu.core.snapshot.GpuInfo`."""

    gpus: Sequence[Any]
    own_pid: int
    own_user: str | None
    device_gpus: tuple[int, ...] | None = None  # NVML index of each framework device, when known
    logical_per_gpu: int = 1  # TensorFlow logical GPUs per physical GPU (several sizes in %gpu_limit)
    allowed: tuple[int, ...] | None = None  # GPUs this kernel may select (the admin fence)
    limits: Mapping[int, int] = field(default_factory=dict)  # this kernel's cap per NVML index
    limit_from_ceiling: bool = False
    admin_ceiling: str | None = None
    growth: bool = False
    counters: Mapping[int, tuple[int, int | None]] = field(default_factory=dict)  # index → (in use, held)
    peers: Mapping[int, KernelPeer] = field(default_factory=dict)  # pid → the user's other kernel (find_peers)
    peers_source: str = ""  # where the peers came from, in words
    own_notebook: str | None = None
    # To check each suggested magic with the planner before printing it (None: not checked)
    request: Any = None  # the kernel's PlanRequest (or the one a restart would apply)
    snapshot: Any = None  # the NVML snapshot (with MIG modes, not the slice views in ``gpus``)
    fence: Any = None  # the kernel's start fence


def _which_gpus(oom: OutOfMemory, facts: Facts) -> list[Any]:
    """The GPUs the error is about: the framework's device when it is named and mapped, else the
    GPUs where this kernel holds memory, else the framework's GPUs."""
    by_index = {gpu.index: gpu for gpu in facts.gpus if gpu.error is None}
    devices = facts.device_gpus
    if oom.device is not None and devices:
        position = oom.device // max(1, facts.logical_per_gpu) if oom.module == "tensorflow" else oom.device
        if position < len(devices) and devices[position] in by_index:
            return [by_index[devices[position]]]
    if devices and len(devices) == 1 and devices[0] in by_index:
        return [by_index[devices[0]]]
    mine = [gpu for gpu in by_index.values() if any(p.pid == facts.own_pid for p in gpu.processes)]
    if devices:
        narrowed = [gpu for gpu in mine if gpu.index in devices]
        mine = narrowed or mine
    if mine:
        return mine
    return [by_index[index] for index in devices or () if index in by_index]


def holders(gpu: Any, facts: Facts) -> list[Holder]:
    """Who holds memory on ``gpu``, this kernel first, then largest first."""
    found: dict[tuple[str, str], Holder] = {}
    for process in gpu.processes:
        memory = process.memory or 0
        if process.pid == facts.own_pid:
            key, holder = ("self", ""), Holder("self", memory, "this kernel", process.pid)
        elif process.pid in facts.peers and (process.user is None or process.user == facts.own_user):
            # a kernel's report (or the server) names PIDs; one the OS or NVML gives to another user
            # stays that user's, whatever a report claims: never name the wrong owner
            peer = facts.peers[process.pid]
            label = (
                _shown(peer.notebook)
                if peer.notebook
                else (f"kernel {_shown(peer.kernel_id[:8])}" if peer.kernel_id else f"PID {process.pid}")
            )
            key = ("kernel", peer.kernel_id or str(process.pid))
            holder = Holder("kernel", memory, label, process.pid, peer.idle_s, peer.idle)
        elif process.user is not None and process.user == facts.own_user:
            if process.type == "graphics":
                continue
            key = ("process", str(process.pid))
            name = f" ({_shown(process.name)})" if process.name else ""
            holder = Holder("process", memory, f"PID {process.pid}{name}", process.pid)
        else:
            user = _shown(process.user) if process.user else f"unknown user (PID {process.pid})"
            key, holder = ("user", user), Holder("user", memory, user)
        if key in found:  # a kernel's child processes, or several processes of one user, add up
            old = found[key]
            holder = Holder(old.kind, old.memory + memory, old.label, old.pid, old.idle_s, old.idle)
        found[key] = holder
    order = {"self": 0, "kernel": 1, "process": 2, "user": 3}
    return sorted(found.values(), key=lambda h: (order[h.kind], -h.memory, h.label))


def _shown(value: str) -> str:
    """A notebook, process, user or GPU name from elsewhere (untrusted): bidi-safe, one line, short."""
    return display_text(value, _NAME_CHARS)


def follows(facts: Facts, steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the magics ``steps`` (each a change of the plan request, in order, as the session
    adds them up) all pass the planner, so that following the printed suggestion literally works.
    True when it cannot be checked here (no request or snapshot known)."""
    if facts.request is None or facts.snapshot is None:
        return True
    from ..plan import PlanError, build_plan

    request = facts.request
    try:
        for changes in steps:
            request = replace(request, **changes)
            build_plan(request, facts.snapshot, facts.fence, own_user=facts.own_user)
    except (PlanError, TypeError, ValueError):
        return False
    return True


def _round_up_gib(value: int) -> str:
    return f"{max(1, math.ceil(value / GIB))}GiB"


def explain(oom: OutOfMemory, facts: Facts) -> str:
    """The report under the traceback (several lines, plain text)."""
    where = f"{oom.framework} {oom.device_label}" if oom.device_label else oom.framework
    asked = f"; it tried to allocate {format_bytes(oom.requested_bytes)}" if oom.requested_bytes else ""
    lines = [f"jupyter_gpu: {where} ran out of GPU memory{asked}."]
    gpus = _which_gpus(oom, facts)
    if not facts.gpus:
        lines.append("  NVML cannot be read here, so the GPUs and who holds them are unknown.")
    elif not gpus:
        lines.append("  Which GPU this was cannot be told (the framework's device is not mapped to a GPU).")
    steps: list[str] = []
    for gpu in gpus[:4]:
        lines += _gpu_section(oom, gpu, facts, steps, several=len(gpus) > 1)
    steps += _elsewhere(oom, gpus, facts)
    if not steps:
        steps.append(
            "no GPU this kernel may use has room for it now: use less memory (a smaller batch or "
            "model), or free memory on this GPU"
        )
    lines.append("Next steps:")
    lines += [f"  - {step}" for step in _unique(steps)]
    return "\n".join(lines)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _gpu_section(oom: OutOfMemory, gpu: Any, facts: Facts, steps: list[str], several: bool) -> list[str]:
    name = _shown(gpu.name.removeprefix("NVIDIA "))
    label = f" ({oom.framework} {oom.device_label})" if oom.device_label and not several else ""
    lines = [
        f"GPU {gpu.index} {name}{label}: {format_bytes(gpu.memory_total)} total, "
        f"{format_bytes(gpu.memory_used)} used, {format_bytes(gpu.memory_free)} free."
    ]
    held = holders(gpu, facts)
    own_nvml = sum(h.memory for h in held if h.kind == "self")
    in_use, reserved = _framework_figures(oom, gpu, facts)
    lines.append("  Who holds it:")
    if not any(h.kind == "self" for h in held) and (in_use or reserved):
        held.insert(0, Holder("self", 0, "this kernel", facts.own_pid))
    for holder in held:
        lines.append(f"    {_holder_text(holder, oom, in_use, reserved, facts)}")
    if len(lines) == 2:
        lines.append("    nobody NVML can see")
    limit = facts.limits.get(gpu.index)
    limit_hit = False
    if limit:
        footprint = max(own_nvml, reserved or 0, in_use or 0)
        need = footprint + (oom.requested_bytes or 0)
        fits_gpu = oom.requested_bytes is not None and gpu.memory_free >= oom.requested_bytes
        limit_hit = (
            need > limit
            or (fits_gpu and footprint >= limit * 0.8)
            or (oom.requested_bytes is None and footprint >= limit * 0.9)
        )
        whose = (
            f"the admin ceiling {facts.admin_ceiling}"
            if facts.limit_from_ceiling and facts.admin_ceiling
            else "%gpu_limit"
        )
        if limit_hit:
            lines.append(
                f"  This kernel's limit on GPU {gpu.index} is {format_bytes(limit)} ({whose}), and it ran "
                f"out, not the GPU ({format_bytes(gpu.memory_free)} free)."
            )
            ceiling_words = ""
            if facts.limit_from_ceiling and facts.admin_ceiling:
                ceiling_words = f" (the admin ceiling {facts.admin_ceiling} does not allow more)"
                steps.append(
                    f"the limit is the admin's ceiling{ceiling_words}: use less memory (a smaller batch or model)"
                )
            elif need <= limit + gpu.memory_free and follows(facts, [{"limits": (_round_up_gib(need),)}]):
                steps.append(
                    f"raise this kernel's limit: `%gpu_limit {_round_up_gib(need)}`, then `%gpu_restart` "
                    f"(GPU {gpu.index} has {format_bytes(gpu.memory_free)} free besides it)"
                )
        else:
            lines.append(
                f"  This kernel's limit on GPU {gpu.index}: {format_bytes(limit)} ({whose}); the GPU ran "
                "out before the limit."
            )
    cache = _freeable_cache(oom, in_use, reserved)
    if cache:
        steps.append(
            f"`%gpu_free` may return {format_bytes(cache)} held by this kernel's cache "
            f"({oom.framework} reserved {format_bytes(reserved)}, in use {format_bytes(in_use)})"
        )
    if (
        oom.module == "tensorflow"
        and not facts.growth
        and own_nvml > 0
        and follows(facts, [{"selection": str(gpu.index), "growth": True}])
    ):
        steps.append(
            "TensorFlow without memory growth keeps its whole pool until the kernel restarts: "
            f"`%gpu_select {gpu.index} --growth`, then `%gpu_restart`, and it takes only what the model "
            "needs"
        )
    for holder in held:
        if holder.kind == "kernel" and holder.memory > 0:
            state = "idle " if holder.idle or (holder.idle_s or 0) >= 600 else ""
            since = f", idle for {format_duration(holder.idle_s)}" if holder.idle_s else ""
            if holder.idle_s == 0:
                since, state = " (busy now)", ""
            steps.append(
                f"your {state}kernel `{holder.label}` holds {format_bytes(holder.memory)} on GPU "
                f"{gpu.index}{since}: shut it down from the GPU sidebar if you no longer need it"
            )
        elif holder.kind == "process" and holder.memory > 0:
            steps.append(
                f"your process {holder.label} holds {format_bytes(holder.memory)} on GPU {gpu.index}: "
                "end it if you no longer need it"
            )
    return lines


def _framework_figures(oom: OutOfMemory, gpu: Any, facts: Facts) -> tuple[int | None, int | None]:
    """(in use, reserved) of this kernel's framework on ``gpu``: from its message, else its counters."""
    in_use, reserved = oom.in_use_bytes, oom.reserved_bytes
    counters = facts.counters.get(gpu.index)
    if counters is not None and in_use is None:
        in_use, reserved = counters[0], counters[1] if reserved is None else reserved
    return in_use, reserved


def _freeable_cache(oom: OutOfMemory, in_use: int | None, reserved: int | None) -> int | None:
    """What ``%gpu_free`` may return: the framework's cache (reserved but not in use), when it is
    worth it (at least 64 MiB) and the framework has one to empty (PyTorch, JAX)."""
    cache = (reserved - in_use) if reserved is not None and in_use is not None else None
    return cache if cache and cache >= 64 * MIB and oom.module in ("torch", "jax") else None


def _holder_text(holder: Holder, oom: OutOfMemory, in_use: int | None, reserved: int | None, facts: Facts) -> str:
    if holder.kind == "self":
        nb = f" ({_shown(facts.own_notebook)})" if facts.own_notebook else ""
        own = [
            f"in use {format_bytes(in_use)}" if in_use is not None else "",
            f"reserved {format_bytes(reserved)}" if reserved is not None else "",
        ]
        told = ", ".join(part for part in own if part)
        framework = f" ({oom.framework}: {told})" if told else ""
        nvml = format_bytes(holder.memory) if holder.memory else "no memory NVML can see"
        return f"this kernel{nb}: {nvml}{framework}"
    if holder.kind == "kernel":
        if holder.idle_s == 0:
            idle = ", busy now"
        elif holder.idle_s is not None:
            idle = f", idle for {format_duration(holder.idle_s)}"
        else:
            idle = f", idle time unknown{_source_note(facts)}"
        return f"your kernel {holder.label}: {format_bytes(holder.memory)}{idle}"
    if holder.kind == "process":
        return f"your process {holder.label}: {format_bytes(holder.memory)}"
    return f"{holder.label}: {format_bytes(holder.memory)}"


def _source_note(facts: Facts) -> str:
    return " (the server extension was not reachable)" if facts.peers_source == "kernel reports" else ""


def _elsewhere(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> list[str]:
    """Other GPUs this kernel may use with room for what it holds plus what it asked for."""
    steps = []
    for busy, gpu, need in _roomier_gpus(oom, gpus, facts):
        magics = _select_magics(gpu, need, facts)
        if magics is None:
            continue  # no way there that the planner accepts: no suggestion rather than one that fails
        who = " (other users work on it)" if busy else ""
        steps.append(
            f"GPU {gpu.index} has {format_bytes(gpu.memory_free)} free{who}: {magics}, "
            "then `%gpu_restart` (restarts the kernel with it)"
        )
        if len(steps) == 2:
            break
    return steps


def _roomier_gpus(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> list[tuple[bool, Any, int]]:
    """(others work on it, GPU, bytes needed) of the other GPUs this kernel may use with room for
    what it holds plus what it asked for: idle ones first, then by free memory."""
    here = {gpu.index for gpu in gpus}
    own = max([sum(p.memory or 0 for p in gpu.processes if p.pid == facts.own_pid) for gpu in gpus] or [0])
    need = own + (oom.requested_bytes or 0)
    candidates = []
    for gpu in facts.gpus:
        if gpu.index in here or gpu.error is not None or (facts.allowed is not None and gpu.index not in facts.allowed):
            continue
        others = [
            p
            for p in gpu.processes
            if p.pid != facts.own_pid and p.type != "graphics" and (facts.own_user is None or p.user != facts.own_user)
        ]
        best_here = max([g.memory_free for g in gpus] or [0])
        if gpu.memory_free >= max(need, 1) and gpu.memory_free > best_here:
            candidates.append((bool(others), -gpu.memory_free, gpu.index, gpu))
    return [(busy, gpu, need) for busy, _, _, gpu in sorted(candidates)]


def _select_magics(gpu: Any, need: int, facts: Facts) -> str | None:
    """The magics that move this kernel's plan to ``gpu``, checked by the planner: ``%gpu_select N``,
    or, when the kernel's limit is more than that GPU has, a limit that fits first (the largest whole
    GiB of its free memory, at least what the kernel needs); None when neither passes."""
    select = {"selection": str(gpu.index)}
    if follows(facts, [select]):
        return f"`%gpu_select {gpu.index}`"
    if not facts.limits:
        return None
    fitting = int(min(gpu.memory_free, gpu.memory_total) // GIB)
    if fitting < 1 or fitting * GIB < need:
        return None
    limit = {"limits": (f"{fitting}GiB",)}
    for first, second in ((limit, select), (select, limit)):
        if follows(facts, [first, second]):
            magic = {id(limit): f"`%gpu_limit {fitting}GiB`", id(select): f"`%gpu_select {gpu.index}`"}
            return f"{magic[id(first)]}, {magic[id(second)]}"
    return None


def next_actions(oom: OutOfMemory, facts: Facts) -> tuple[dict[str, Any], ...]:
    """The next steps of :func:`explain` that a frontend can offer as buttons (JupyterLab's
    extension does; the text says them all):

    - ``{"kind": "shutdown", "kernel_id", "label", "memory", "gpu", "idle_s"}``: the user's other
      kernel holding memory on a GPU that ran out (known by its kernel id: the server, or its report);
    - ``{"kind": "restart", "gpu", "request"}``: a new kernel on a roomier GPU with memory growth,
      when the planner accepts that plan (``request``: the :class:`~jupyter_gpu.plan.PlanRequest`);
    - ``{"kind": "free", "memory"}``: ``%gpu_free``, when the framework's cache is worth returning.
    """
    actions: list[dict[str, Any]] = []
    gpus = _which_gpus(oom, facts)
    cache = 0
    for gpu in gpus[:4]:
        cache += _freeable_cache(oom, *_framework_figures(oom, gpu, facts)) or 0
        for holder in holders(gpu, facts):
            peer = facts.peers.get(holder.pid) if holder.pid is not None else None
            if holder.kind == "kernel" and holder.memory > 0 and peer is not None and peer.kernel_id:
                actions.append(
                    {
                        "kind": "shutdown",
                        "kernel_id": peer.kernel_id,
                        "label": holder.label,
                        "memory": holder.memory,
                        "gpu": gpu.index,
                        "idle_s": holder.idle_s,
                    }
                )
    if facts.request is not None:
        for _, gpu, _ in _roomier_gpus(oom, gpus, facts)[:2]:
            changes = {"selection": str(gpu.index), "growth": True}
            if follows(facts, [changes]):
                actions.append({"kind": "restart", "gpu": gpu.index, "request": replace(facts.request, **changes)})
    if cache:
        actions.append({"kind": "free", "memory": cache})
    return tuple(actions)


# -- gathering the facts (never raises) -----------------------------------------------------------


def explain_error(error: BaseException | None, *, server_timeout_s: float = 1.0) -> str | None:
    """The report for ``error`` when it is a GPU out-of-memory error, else None. Never raises."""
    report = explain_error_report(error, server_timeout_s=server_timeout_s)
    return None if report is None else report.text


@dataclass(frozen=True)
class Report:
    """The out-of-memory report: its text, and the next steps a frontend may offer as buttons."""

    text: str
    actions: tuple[dict[str, Any], ...] = ()


def explain_error_report(error: BaseException | None, *, server_timeout_s: float = 1.0) -> Report | None:
    """:func:`explain_error` with :func:`next_actions`. Never raises."""
    oom = recognize(error)
    if oom is None:
        return None
    try:
        facts = gather_facts(oom, server_timeout_s=server_timeout_s)
        text = explain(oom, facts)
    except Exception as failure:  # the explainer must never add an error of its own
        return Report(
            f"jupyter_gpu: {oom.framework} ran out of GPU memory (the explanation failed: "
            f"{type(failure).__name__}: {failure}); %gpu_status shows the GPUs."
        )
    try:
        return Report(text, next_actions(oom, facts))
    except Exception:  # the buttons are extras: the text stands without them
        return Report(text)


def slice_views(gpus: Sequence[Any], slice_uuid: str | None) -> tuple[Any, ...]:
    """MIG (docs/mig.md): the kernel's slice stands in for its GPU, since the memory that ran out is
    the slice's (its total, use, free and processes, its MIG UUID and name); other GPUs in MIG mode
    are left out, as they cannot be selected whole. GPUs not in MIG mode are kept as they are."""
    views = []
    for gpu in gpus:
        if not getattr(gpu, "mig_mode", False):
            views.append(gpu)
            continue
        slice_ = next((s for s in gpu.slices if s.uuid == slice_uuid), None)
        if slice_ is not None:
            views.append(
                replace(
                    gpu,
                    uuid=slice_.uuid,
                    name=slice_.name,
                    memory_total=slice_.memory_total,
                    memory_used=slice_.memory_used,
                    memory_free=slice_.memory_free,
                    memory_reserved=None,
                    processes=slice_.processes,
                    mig_mode=False,
                    slices=(),
                )
            )
    return tuple(views)


def gather_facts(oom: OutOfMemory, *, server_timeout_s: float = 1.0) -> Facts:
    """NVML, the kernel's plan, the framework's counters and the user's other kernels, now."""
    from .. import frameworks
    from ..plan import current_plan, kernel_start_fence
    from ..sources.nvml import snapshot
    from ..sources.peers import find_peers
    from ..sources.processes import current_user

    snap = snapshot()
    gpus = snap.gpus if snap.nvml_available else ()
    if gpus:
        frameworks.remember_gpus(gpus)
    plan = current_plan()
    adapter = next((f for f in frameworks.FRAMEWORKS if f.module_name == oom.module), None)
    device_gpus = None
    seen = frameworks.actual_devices(adapter, gpus) if adapter is not None and gpus else None
    if seen is not None:
        device_gpus = seen.indices
    if gpus and any(gpu.mig_mode for gpu in gpus):  # the slice this kernel uses stands in for its GPU
        slice_uuid = (
            (seen.slices[0] if seen is not None and seen.slices else None)
            or plan.selected_slice
            or kernel_start_fence().allowed_slice(gpus)
        )
        gpus = slice_views(gpus, slice_uuid)
    logical = max((len(sizes) for sizes in plan.limits_bytes.values()), default=1)
    counters: dict[int, tuple[int, int | None]] = {}
    for key, memory in frameworks.framework_memory().get(oom.module, {}).items():
        index = _counter_gpu(key, gpus, device_gpus, logical)
        if index is not None:
            in_use, held = counters.get(index, (0, None))
            counters[index] = (in_use + memory.in_use, held if memory.held is None else (held or 0) + memory.held)
    peers = find_peers(timeout_s=server_timeout_s) if gpus else None
    return Facts(
        gpus=gpus,
        own_pid=os.getpid(),
        own_user=current_user(),
        device_gpus=device_gpus,
        logical_per_gpu=logical,
        allowed=kernel_start_fence().allowed(gpus) if gpus else None,
        limits={index: plan.memory_limit_bytes(index) or 0 for index in plan.limits_bytes},
        limit_from_ceiling=plan.limit_from_ceiling,
        admin_ceiling=plan.request.max_limit,
        growth=plan.growth,
        counters=counters,
        peers={} if peers is None else peers.by_pid,
        peers_source="" if peers is None else peers.source,
        own_notebook=os.path.basename(os.environ.get("JPY_SESSION_NAME", "")) or None,
        request=_pending_request() or plan.request,
        snapshot=snap if snap.nvml_available else None,
        fence=kernel_start_fence(),
    )


def _pending_request() -> Any:
    """The plan a restart would apply, when a change was refused as too late (the magics' session):
    the suggestions add up on it, as the session does."""
    import sys

    magics = sys.modules.get("jupyter_gpu.kernel.magics")
    for family in getattr(magics, "_registered", {}).values():  # the shell's magics (one per kernel)
        pending = getattr(getattr(family[0], "session", None), "pending_request", None)
        if pending is not None:
            return pending
    return None


def _counter_gpu(key: str, gpus: Sequence[Any], device_gpus: tuple[int, ...] | None, logical: int) -> int | None:
    """The NVML index of a framework counter's device key (``GPU-<uuid>``, ``cuda:N``, ``/device:GPU:N``)."""
    if key.startswith(("GPU-", "MIG-")):  # a MIG slice's view carries its MIG UUID
        return next((gpu.index for gpu in gpus if gpu.uuid.lower() == key.lower()), None)
    match = re.search(r"(?:cuda:|GPU:)(\d+)$", key)
    if match is None or not device_gpus:
        return None
    position = int(match[1]) // (logical if "GPU:" in key else 1)
    return device_gpus[position] if position < len(device_gpus) else None
