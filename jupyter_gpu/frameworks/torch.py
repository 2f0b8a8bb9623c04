"""PyTorch: CUDA starts lazily, so everything is set before it does.

- Selection: ``CUDA_VISIBLE_DEVICES`` (read when PyTorch first touches CUDA), and
  ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` so that ``torch.cuda.is_available()`` asks NVML instead of
  starting CUDA (which would fix the visible GPUs early while ``is_initialized()`` still says False).
- Growth: ``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` (read when the allocator starts),
  merged with the user's own settings: PyTorch (2.13, ``c10/cuda/CUDAAllocatorConfig.h``) parses
  ``PYTORCH_CUDA_ALLOC_CONF`` if it is set and only otherwise the newer ``PYTORCH_ALLOC_CONF``, so a
  user's ``PYTORCH_ALLOC_CONF`` is carried into the variable the plan writes; it accepts exactly
  ``True``/``False`` as the value.
- Limits: ``torch.cuda.set_per_process_memory_fraction(limit / total, device)`` for each GPU, queued
  with ``torch.cuda._lazy_call`` so it runs inside PyTorch's own lazy CUDA initialization, never
  earlier. Several sizes per GPU are summed (PyTorch has no logical GPUs). The ``device`` is CUDA's
  ordinal (``torch/cuda/memory.py`` ``set_per_process_memory_fraction`` → ``_get_device_index`` →
  ``torch._C._cuda_setMemoryFraction``), so each GPU's fraction goes to the position CUDA gives that
  GPU (:func:`~jupyter_gpu.frameworks.base.actual_devices`); where that cannot be told and the
  fractions differ, none is queued rather than one on the wrong GPU (the plan sets
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` first, or refuses: :func:`jupyter_gpu.frameworks.caps_order`).
- Threads: ``torch.set_num_threads`` / ``torch.set_num_interop_threads``.

CUDA starts in PyTorch at ``torch._C._cuda_getDeviceCount()`` (``torch.cuda.is_available()``,
``device_count()`` without NVML) or ``torch._C._cuda_init()`` (lazy init): :meth:`Torch.observe`
wraps both to record the variables CUDA reads then. ``is_available()`` leaves no other trace.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType

from ..core.i18n import N_, _
from ..plan import GpuPlan
from .base import DeviceMemory, Environment, Framework, State, fractions_differ, note_cuda_start, visible_order

_EXPANDABLE = "expandable_segments:True"


class Torch(Framework):
    name = "PyTorch"
    module_name = "torch"
    env_keys = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK", "PYTORCH_ALLOC_CONF")

    gpu_build_hint = N_(
        "this PyTorch is a CPU-only build: install a CUDA build (pip install torch --index-url "
        "https://download.pytorch.org/whl/cu126) and restart the kernel"
    )

    def __init__(self) -> None:
        self._queued: Callable[[], None] | None = None
        self._started = False

    def state(self) -> State:
        if self.module_name not in sys.modules:
            return State.NOT_IMPORTED
        cuda = sys.modules.get("torch.cuda")
        if cuda is not None and getattr(cuda, "_initialized", False):
            return State.INITIALIZED
        return State.DEVICES_LISTED if self._started else State.IMPORTED

    def built_with_gpu(self) -> bool | None:
        torch = sys.modules.get("torch")
        return None if torch is None else hasattr(torch._C, "_cuda_getDeviceCount")

    def device_names(self) -> list[str] | None:
        if self.state() is not State.INITIALIZED:
            return None  # asking would initialize CUDA
        cuda = sys.modules["torch"].cuda
        try:
            return [str(cuda.get_device_name(index)) for index in range(cuda.device_count())]
        except Exception:
            return None

    def observe(self, module: ModuleType) -> None:
        self.observed = True
        c_module = module._C
        for name in ("_cuda_getDeviceCount", "_cuda_init"):
            original = getattr(c_module, name, None)
            if original is None or getattr(original, "_jupyter_gpu_wrapped", False):
                continue

            def wrapper(*args: object, _original: Callable[..., object] = original) -> object:
                if not self._started:
                    note_cuda_start(self.name, "torch")
                    self._started = True
                return _original(*args)

            wrapper._jupyter_gpu_wrapped = True  # type: ignore[attr-defined]
            setattr(c_module, name, wrapper)
        setter = getattr(c_module, "_cuda_setMemoryFraction", None)  # set_per_process_memory_fraction's core
        if setter is not None and not getattr(setter, "_jupyter_gpu_wrapped", False):

            def set_fraction(*args: object, _original: Callable[..., object] = setter) -> object:
                result = _original(*args)
                self.settings_touched = True  # the after-cell check compares the caps with the plan again
                return result

            set_fraction._jupyter_gpu_wrapped = True  # type: ignore[attr-defined]
            c_module._cuda_setMemoryFraction = set_fraction

    def settings_divergence(self, plan: GpuPlan) -> list[str]:
        """The plan's memory caps that PyTorch does not have now: code called
        ``torch.cuda.set_per_process_memory_fraction`` itself (it runs after the plan's queued
        call, so the last caller wins)."""
        if self.state() is not State.INITIALIZED:
            return []
        c_module = sys.modules["torch"]._C
        problems = []
        queued = dict(self.queued_fractions())
        from .base import actual_devices, known_gpus

        gpus = known_gpus() or plan.gpus
        devices = actual_devices(self, gpus).indices if gpus else None
        # What each of CUDA's devices should have: the plan's fraction of the GPU it really is.
        wanted = (
            {position: plan.memory_fraction(index) for position, index in enumerate(devices)}
            if devices is not None
            else dict(queued)
        )
        for position, fraction in wanted.items():
            if fraction is None:
                continue
            actual = float(c_module._cuda_getMemoryFraction(position))
            if abs(actual - fraction) > 1e-6:
                device = f"cuda:{position} (GPU {devices[position]})" if devices is not None else f"cuda:{position}"
                how = (
                    _("set_per_process_memory_fraction by code")
                    if position in queued
                    else _("the plan's cap was not placed: CUDA's order could not be told when it was queued")
                )
                problems.append(
                    _("{device} may use {actual} of its memory ({how}), the plan {planned}").format(
                        device=device, actual=f"{actual:.1%}", how=how, planned=f"{fraction:.1%}"
                    )
                )
        return problems

    def memory_by_device(self) -> dict[str, DeviceMemory]:
        """Allocated (``in_use``), peak allocated and reserved (``held``) bytes per GPU, keyed by
        ``GPU-<uuid>`` where torch tells the UUID (NVML's name for the GPU), else ``cuda:N``."""
        if self.state() is not State.INITIALIZED:
            return {}
        cuda = sys.modules["torch"].cuda
        devices = {}
        for index in range(cuda.device_count()):
            uuid = getattr(cuda.get_device_properties(index), "uuid", None)
            devices[f"GPU-{uuid}" if uuid is not None else f"cuda:{index}"] = DeviceMemory(
                in_use=int(cuda.memory_allocated(index)),
                peak=int(cuda.max_memory_allocated(index)),
                held=int(cuda.memory_reserved(index)),
            )
        return devices

    def release(self) -> tuple[str, str] | None:
        """``torch.cuda.empty_cache()``: the caching allocator returns the blocks no tensor uses."""
        if self.state() is not State.INITIALIZED:
            return None
        sys.modules["torch"].cuda.empty_cache()
        return (
            "torch.cuda.empty_cache()",
            _("returns the cached blocks no live tensor uses to the driver; memory of tensors still referenced stays"),
        )

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        cuda_conf, generic = baseline.get("PYTORCH_CUDA_ALLOC_CONF"), baseline.get("PYTORCH_ALLOC_CONF")
        read = cuda_conf if cuda_conf is not None else generic  # PyTorch parses only one of the two
        alloc_conf = cuda_conf
        if plan.growth and not expandable(read):
            # The user's settings stay; an expandable_segments:False of theirs gives way to the plan's growth.
            kept = [
                entry for entry in alloc_conf_entries(read) if entry.partition(":")[0].strip() != "expandable_segments"
            ]
            alloc_conf = ",".join([*kept, _EXPANDABLE])
        nvml_check = "1" if plan.selected_indices is not None else baseline.get("PYTORCH_NVML_BASED_CUDA_CHECK")
        return {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf, "PYTORCH_NVML_BASED_CUDA_CHECK": nvml_check}

    def env_conflicts(self, plan: GpuPlan, env: Mapping[str, str | None]) -> list[str]:
        if not plan.growth:
            return []
        cuda_conf, generic = env.get("PYTORCH_CUDA_ALLOC_CONF"), env.get("PYTORCH_ALLOC_CONF")
        conflicts = []
        if (
            cuda_conf is not None
            and generic is not None
            and not set(alloc_conf_entries(generic)) <= set(alloc_conf_entries(cuda_conf))
        ):
            conflicts.append(
                _(
                    "PyTorch ignores PYTORCH_ALLOC_CONF={value} while PYTORCH_CUDA_ALLOC_CONF is set "
                    "(it reads only one, PYTORCH_CUDA_ALLOC_CONF first)"
                ).format(value=repr(generic))
            )
        read = cuda_conf if cuda_conf is not None else generic
        if not expandable(read):
            name = "PYTORCH_CUDA_ALLOC_CONF" if cuda_conf is not None else "PYTORCH_ALLOC_CONF"
            said = f"{name}={read!r}" if read is not None else _("PYTORCH_CUDA_ALLOC_CONF unset")
            conflicts.append(
                _("its allocator reads {setting}, without expandable_segments:True (the plan's growth)").format(
                    setting=said
                )
            )
        return conflicts

    def apply(self, module: ModuleType, plan: GpuPlan, old: GpuPlan | None = None) -> None:
        request = plan.request
        if request.intra_op_threads is not None:
            module.set_num_threads(request.intra_op_threads)
        if request.inter_op_threads is not None and module.get_num_interop_threads() != request.inter_op_threads:
            try:
                module.set_num_interop_threads(request.inter_op_threads)
            except RuntimeError as error:  # only possible before the first parallel work
                warnings.warn(
                    _("PyTorch kept {count} inter-op threads: {error}").format(
                        count=module.get_num_interop_threads(), error=error
                    ),
                    stacklevel=2,
                )
        cuda = module.cuda
        queued = cuda._queued_calls
        queued[:] = [entry for entry in queued if entry[0] is not self._queued]
        self._queued = None
        from .base import actual_devices, known_gpus

        # Only devices PyTorch will really have: what CUDA shows (or will show, from the variables
        # in force now, whoever set them), never the plan's wish.
        gpus = known_gpus() or plan.gpus
        devices = actual_devices(self, gpus).indices if gpus else None
        order = visible_order(plan) if devices is None else devices
        fractions = [(position, plan.memory_fraction(index)) for position, index in enumerate(order)]
        if devices is None and fractions_differ([fraction for _, fraction in fractions]):
            # CUDA's ordinal k is not known to be this GPU: a cap of another GPU's share would
            # land on it (an A6000 capped at a T400's share). None is placed; the printout says why.
            return
        fractions = [(position, fraction) for position, fraction in fractions if fraction is not None]
        if not fractions:
            return

        def cap_memory() -> None:
            for position, fraction in fractions:
                cuda.set_per_process_memory_fraction(fraction, position)

        cap_memory.fractions = fractions  # type: ignore[attr-defined]  # for %gpu_status and tests
        self._queued = cap_memory
        cuda._lazy_call(cap_memory)

    def queued_fractions(self) -> list[tuple[int, float]]:
        """``(cuda device, fraction)`` waiting for PyTorch's lazy CUDA init."""
        return list(getattr(self._queued, "fractions", []))

    def in_effect(self) -> str:
        cuda = sys.modules.get("torch.cuda")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", _("(unset)"))
        parts = [f"CUDA_VISIBLE_DEVICES={visible}"]
        if cuda is not None and getattr(cuda, "_initialized", False):
            parts.append(_("{count} CUDA device(s)").format(count=cuda.device_count()))
            for device in range(cuda.device_count()):
                fraction = (
                    cuda.get_per_process_memory_fraction(device)
                    if hasattr(cuda, "get_per_process_memory_fraction")
                    else None
                )
                if fraction is not None and fraction < 1:
                    parts.append(
                        _("cuda:{device} memory fraction {fraction}").format(device=device, fraction=f"{fraction:.2f}")
                    )
        return ", ".join(parts)


def alloc_conf_entries(conf: str | None) -> list[str]:
    """The ``key:value`` entries of an allocator setting, split at commas outside brackets
    (``roundup_power2_divisions:[64:8,256:4]`` is one entry)."""
    entries, depth, current = [], 0, ""
    for char in conf or "":
        depth += (char == "[") - (char == "]")
        if char == "," and depth <= 0:
            entries.append(current.strip())
            current = ""
        else:
            current += char
    entries.append(current.strip())
    return [entry for entry in entries if entry]


def expandable(conf: str | None) -> bool:
    """Whether PyTorch's allocator, reading ``conf``, turns expandable segments on: the last
    ``expandable_segments`` entry is ``True`` (PyTorch accepts exactly ``True``/``False``)."""
    values = [
        entry.partition(":")[2].strip()
        for entry in alloc_conf_entries(conf)
        if entry.partition(":")[0].strip() == "expandable_segments"
    ]
    return bool(values) and values[-1] == "True"


TORCH = Torch()
