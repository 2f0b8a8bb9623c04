"""What each framework sees: CUDA's devices as NVML GPUs, computed from facts only.

This is the one place that answers "which NVML GPU is TensorFlow's ``/GPU:k`` / PyTorch's
``cuda:k`` / JAX's ``cuda:k``". The plan printout (``%gpu_select``), ``%gpu_status`` and the check
after every cell all read it. It is pure: no IPython, no framework, no NVML call (the GPUs come in
as arguments).

The facts it uses (see ``docs/magics.md``, "How jupyter_gpu knows what a framework sees"):

- CUDA reads ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` **once per process**, in ``cuInit``.
  Whatever a framework does later, the devices every framework of the process can see are those
  the two variables named *at that moment* (:func:`record_cuda_start` keeps them).
- ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` numbers GPUs as NVML and ``nvidia-smi`` do. Without it CUDA
  numbers them fastest first; between GPUs of one model that is PCI bus order, but between models
  NVML cannot tell CUDA's order. So an index in ``CUDA_VISIBLE_DEVICES``, or the position of a
  device, is only mapped when the order is PCI bus order, when every GPU is of one model, or when
  the framework names its devices (one model after another, PCI bus order within a model).
- UUIDs (``GPU-…``) in ``CUDA_VISIBLE_DEVICES`` name GPUs whatever the order, and CUDA numbers
  them in the order given. An entry CUDA cannot use ends the list (CUDA ignores the rest).
- MIG (``docs/mig.md``): a MIG device is named by its UUID (``MIG-<uuid>``, or
  ``MIG-GPU-<uuid>/<gi>/<ci>`` on R450/R460 drivers), never by an index. A CUDA process
  enumerates at most one MIG device: the first MIG device the list names; or, when it names only
  whole GPUs (or is unset) and one of them is in MIG mode, that GPU's first MIG device, with the
  whole GPUs dropped. :attr:`DeviceMap.slices` then holds the MIG UUID of CUDA's device.

Where the mapping cannot be known, the answer says why (:attr:`DeviceMap.reason`) instead of
guessing; callers refuse with that reason and say what to do (restart the kernel).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from . import messages
from .i18n import _

__all__ = ["SELECTION_KEYS", "CudaEnv", "DeviceMap", "cuda_devices", "cuda_start", "record_cuda_start"]

SELECTION_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
_INDEX = re.compile(r"[0-9]+")  # ASCII digits only: CUDA does not read '²' or '٣' as numbers


class Gpu(Protocol):
    """What is needed of a GPU (``snapshots.GpuInfo`` and ``plan.PlannedGpu`` both fit).

    Read-only properties, not plain attributes: a Protocol attribute is writable, which frozen
    dataclasses (``GpuInfo``, ``PlannedGpu``) cannot satisfy.
    """

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class CudaEnv:
    """The two variables that decide which GPUs CUDA shows a process (None: unset)."""

    visible_devices: str | None = None
    device_order: str | None = None

    @classmethod
    def now(cls) -> CudaEnv:
        """The values in ``os.environ`` now (what CUDA would read if it started now)."""
        return cls(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))

    @property
    def pci_order(self) -> bool:
        return (self.device_order or "").strip() == "PCI_BUS_ID"

    def describe(self) -> str:
        """The two values, for a person (in their language: "unset" is a word, the values are not)."""
        visible = _("unset") if self.visible_devices is None else repr(self.visible_devices)
        order = self.device_order or _("unset (fastest first)")
        return _("CUDA_VISIBLE_DEVICES {visible}, CUDA_DEVICE_ORDER {order}").format(visible=visible, order=order)


@dataclass(frozen=True)
class DeviceMap:
    """CUDA's devices in CUDA's numbering: ``indices[k]`` is the NVML index of device k.

    ``indices`` is None when the mapping cannot be known from the facts; ``reason`` says why in
    one clause (it follows "cannot tell which GPU is which: "), in English: it is data (``jupyter-gpu
    doctor --json``); a face shows :attr:`shown_reason`, the same clause in the user's language
    (a :mod:`jupyter_gpu.core.messages` template).
    """

    indices: tuple[int, ...] | None
    reason: str = ""
    slices: tuple[str, ...] = ()  # MIG: the MIG UUID of CUDA's one device (its GPU in ``indices``)

    @property
    def known(self) -> bool:
        return self.indices is not None

    @property
    def shown_reason(self) -> str:
        """:attr:`reason` in the user's language."""
        return messages.shown(self.reason) or ""

    def describe(self) -> str:
        """The GPUs, for a person: "GPU 0, 1", "no GPU", "MIG slice … of GPU 0", "unknown GPUs"."""
        if self.indices is None:
            return _("unknown GPUs")
        if self.slices:
            return _("MIG slice {slice} of GPU {index}").format(slice=self.slices[0], index=self.indices[0])
        return _("no GPU") if not self.indices else "GPU " + ", ".join(map(str, self.indices))


def _mig_slices(gpu: Gpu) -> tuple[object, ...]:
    """The MIG slices of ``gpu`` when it is in MIG mode (``GpuInfo`` carries them), else ()."""
    return tuple(getattr(gpu, "slices", ()) or ()) if getattr(gpu, "mig_mode", False) else ()


def _find_slice(entry: str, gpus: Sequence[Gpu]) -> tuple[int, str] | None:
    """(GPU index, MIG UUID) of the slice a ``MIG-…`` entry names (unique prefix or the R450 form)."""
    lowered = entry.lower()
    found = []
    for gpu in gpus:
        for slice_ in _mig_slices(gpu):
            uuid = str(getattr(slice_, "uuid", ""))
            old_form = (
                f"mig-{gpu.uuid.lower()}/{getattr(slice_, 'gpu_instance_id', '')}/"
                f"{getattr(slice_, 'compute_instance_id', '')}"
            )
            if uuid.lower().startswith(lowered) or lowered == old_form:
                found.append((gpu.index, uuid))
    return found[0] if len(found) == 1 else None


def _mig_rule(
    indices: Sequence[int], named_slices: Sequence[tuple[int, str]], by_index: dict[int, Gpu]
) -> DeviceMap | None:
    """CUDA's one-MIG-device rule (module docstring); None when no MIG device is involved."""
    if named_slices:
        index, uuid = named_slices[0]
        return DeviceMap((index,), slices=(uuid,))
    for index in indices:
        slices = _mig_slices(by_index[index])
        if slices:
            return DeviceMap((index,), slices=(str(getattr(slices[0], "uuid", "")),))
        if getattr(by_index[index], "mig_mode", False):
            continue  # MIG mode without a MIG device: CUDA cannot use it
    if any(getattr(by_index[index], "mig_mode", False) for index in indices):
        return DeviceMap(tuple(i for i in indices if not getattr(by_index[i], "mig_mode", False)))
    return None


def _order(env: CudaEnv, gpus: Sequence[Gpu], names: Sequence[str] | None) -> tuple[list[int] | None, str]:
    """CUDA's enumeration of every GPU (NVML indices), or None and why it cannot be known."""
    pci = [gpu.index for gpu in sorted(gpus, key=lambda gpu: gpu.index)]
    if env.pci_order:
        return pci, ""
    models = sorted({gpu.name for gpu in gpus})
    if len(models) <= 1:
        return pci, ""  # one model: fastest first is PCI bus order
    return None, messages.CUDA_FASTEST_FIRST.format(count=len(gpus), kinds=len(models), models=", ".join(models))


def same_model(nvml_name: str, framework_name: str) -> bool:
    """Whether NVML's name and a framework's device name are one model. Both come from the driver
    ("NVIDIA A100-SXM4-80GB"); case, an "NVIDIA " prefix and a suffix (a MIG profile) are tolerated."""
    a, b = (name.strip().lower().removeprefix("nvidia ") for name in (nvml_name, framework_name))
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


def _by_names(candidates: Sequence[Gpu], names: Sequence[str]) -> list[int] | None:
    """Map the framework's device names (in its order) to ``candidates``: within a model, PCI order."""
    remaining = sorted(candidates, key=lambda gpu: gpu.index)
    result = []
    for name in names:
        match = next((gpu for gpu in remaining if same_model(gpu.name, name)), None)
        if match is None:
            return None
        remaining.remove(match)
        result.append(match.index)
    return result if not remaining else None


def cuda_devices(env: CudaEnv, gpus: Sequence[Gpu], names: Sequence[str] | None = None) -> DeviceMap:
    """The GPUs CUDA shows a process started with ``env``, in CUDA's numbering.

    ``gpus`` are all GPUs NVML sees. ``names`` are the device names a framework reports in its
    own order, where it reports them; they resolve CUDA's fastest-first order between models and
    are checked against the result (a mismatch makes the mapping unknown, never guessed).
    """
    order, why = _order(env, gpus, names)
    by_index = {gpu.index: gpu for gpu in gpus}
    value = env.visible_devices
    if value is None and order is not None and (mig := _mig_rule(order, (), by_index)) is not None:
        return mig
    if value is None:
        if order is None:
            if (
                names is not None
                and (mapped := _by_names(gpus, names)) is not None
                and _one_model_runs(mapped, by_index)
            ):
                return DeviceMap(tuple(mapped))
            return DeviceMap(None, why)
        return _checked(order, by_index, names)
    indices: list[int] = []
    named_slices: list[tuple[int, str]] = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.upper().startswith("MIG-"):
            found = _find_slice(entry, gpus)
            if found is None or found in named_slices:
                break
            named_slices.append(found)
        elif _INDEX.fullmatch(entry):
            if order is None:
                return DeviceMap(None, messages.CUDA_COUNTS_IN_ORDER.format(value=repr(value), why=why))
            digits = entry.lstrip("0") or "0"  # CUDA reads "01" as 1; int() refuses over 4300 digits
            position = int(digits) if len(digits) < 10 else len(order)
            if position >= len(order) or order[position] in indices:
                break  # CUDA stops at the first entry it cannot use
            indices.append(order[position])
        else:
            matches = [gpu.index for gpu in gpus if gpu.uuid and entry and gpu.uuid.lower().startswith(entry.lower())]
            if len(matches) != 1 or matches[0] in indices:
                break
            indices.append(matches[0])
    if (mig := _mig_rule(indices, named_slices, by_index)) is not None:
        if mig.slices and names is not None and len(names) != 1:
            return DeviceMap(None, messages.FRAMEWORK_NOT_ONE_MIG.format(count=len(names)))
        return mig if mig.slices else _checked(mig.indices or (), by_index, names)
    return _checked(indices, by_index, names)


def _one_model_runs(mapped: Sequence[int], by_index: dict[int, Gpu]) -> bool:
    """Fastest first keeps each model's GPUs together: the framework's names must show that."""
    seen: list[str] = []
    for index in mapped:
        name = by_index[index].name
        if seen and seen[-1] != name and name in seen:
            return False
        if not seen or seen[-1] != name:
            seen.append(name)
    return True


def _checked(indices: Sequence[int], by_index: dict[int, Gpu], names: Sequence[str] | None) -> DeviceMap:
    if names is not None and (
        len(names) != len(indices)
        or not all(same_model(by_index[index].name, name) for index, name in zip(indices, names, strict=True))
    ):
        if not names:
            return DeviceMap(None, messages.FRAMEWORK_LISTS_NONE.format(named=len(indices)))
        listed = ", ".join(names)
        return DeviceMap(
            None, messages.FRAMEWORK_LISTS_OTHER.format(count=len(names), listed=listed, named=len(indices))
        )
    return DeviceMap(tuple(indices))


# -- the moment CUDA started in this process ------------------------------------------------------


def cuda_driver_loaded(maps: str = "/proc/self/maps") -> bool:
    """Whether the CUDA driver library (``libcuda.so``) is mapped into this process.

    Every path that starts CUDA loads it first, whoever calls ``cuInit`` (``torch.cuda.is_available()``,
    TensorFlow's ``device_lib``, a JAX backend, …), and a loaded library is never unloaded by them: it is
    the process-wide trace that CUDA may have read its variables. Reading ``/proc/self/maps`` costs
    about a millisecond in a TensorFlow process (1000 lines), so the answer is kept until the dynamic
    loader loads another object (glibc's ``dl_iterate_phdr`` load counter, under a microsecond).
    False where there is no ``/proc``.
    """
    global _driver_seen
    loads = _loaded_objects() if maps == _MAPS else None
    if loads is not None and _driver_seen is not None and _driver_seen[0] == loads:
        return _driver_seen[1]
    try:
        with open(maps, encoding="utf-8", errors="replace") as file:
            found = any("/libcuda.so" in line for line in file)
    except OSError:
        found = False
    if loads is not None:
        _driver_seen = (loads, found)
    return found


_MAPS = "/proc/self/maps"
_driver_seen: tuple[int, bool] | None = None  # (the loader's load count, the driver mapped then)
_counter: object = None  # the ctypes pieces of _loaded_objects, made at the first call (False: unavailable)


def _loaded_objects() -> int | None:
    """How many shared objects the dynamic loader has loaded in this process so far (``dlpi_adds``,
    glibc 2.4+), or None where that cannot be read. It only grows: any new library changes it."""
    global _counter
    if _counter is None:
        _counter = False
        try:
            import ctypes

            class _Info(ctypes.Structure):  # struct dl_phdr_info, up to dlpi_adds
                _fields_ = [
                    ("addr", ctypes.c_void_p),
                    ("name", ctypes.c_char_p),
                    ("phdr", ctypes.c_void_p),
                    ("phnum", ctypes.c_uint16),
                    ("adds", ctypes.c_ulonglong),
                ]

            result: list[int | None] = [None]

            def first(info: object, size: int, _data: object) -> int:
                if size >= ctypes.sizeof(_Info):
                    result[0] = int(info.contents.adds)  # type: ignore[attr-defined]
                return 1  # the first object tells the count: stop

            callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Info), ctypes.c_size_t, ctypes.c_void_p)
            callback = callback_type(first)
            iterate = ctypes.CDLL(None).dl_iterate_phdr
            iterate.argtypes = [callback_type, ctypes.c_void_p]
            _counter = (iterate, callback, result)
        except (OSError, AttributeError, ImportError):
            return None
    if not _counter:
        return None
    iterate, callback, result = _counter  # type: ignore[misc]
    result[0] = None
    iterate(callback, None)
    return result[0]


UNKNOWN = CudaEnv("?", "?")  # CUDA started, but the values it read are not known
_start: tuple[CudaEnv, str] | None = None
_call = ""  # the call that started it, where known ("torch.cuda.is_available()")


def record_cuda_start(env: CudaEnv, by: str, call: str = "") -> None:
    """Record that CUDA started in this process with ``env`` (the first record wins: CUDA reads
    the variables once). ``by`` names the framework, ``call`` the call that started it where known
    (``"torch.cuda.is_available()"``), for messages."""
    global _start, _call
    if _start is None:
        _start = (env, by)
        _call = call


def cuda_start_call() -> str:
    """The call that started CUDA in this process, where known ("" otherwise, or before a start)."""
    return _call if _start is not None else ""


def cuda_start() -> tuple[CudaEnv, str] | None:
    """``(the values CUDA read, who started it)``, or None when no start was recorded.

    The values are :data:`UNKNOWN` when CUDA started before jupyter_gpu could watch and the
    values cannot be told (code changed them since the kernel started)."""
    return _start


def forget_cuda_start() -> None:
    """For tests only: as if CUDA had not started."""
    global _start, _call, _driver_seen
    _start, _call, _driver_seen = None, "", None
