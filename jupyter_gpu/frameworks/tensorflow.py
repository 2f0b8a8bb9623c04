"""TensorFlow (and Keras 3 on its TensorFlow backend, which imports TensorFlow).

- Selection: ``CUDA_VISIBLE_DEVICES`` (read by CUDA when TensorFlow first lists devices). Once it
  has listed them, ``tf.config.set_visible_devices`` narrows the listed GPUs instead.
- Growth: ``TF_FORCE_GPU_ALLOW_GROWTH=true``, read when the GPU allocator is created. It is the
  only way to have growth *and* a memory limit together (``set_memory_growth`` refuses, or is
  silently dropped, next to virtual devices).
- Limits: ``tf.config.set_logical_device_configuration(gpu, [LogicalDeviceConfiguration(memory_limit=MiB), ...])``,
  one logical GPU per size. Only called when a limit is planned (listing the GPUs starts CUDA).
- Threads: ``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS`` (read at context init) and
  ``tf.config.threading.set_intra_op/inter_op_parallelism_threads`` once imported.
- Placement: ``tf.config.set_soft_device_placement`` and ``tf.debugging.set_log_device_placement``
  (they change even a live context).

State comes from ``tensorflow.python.eager.context.context_safe()`` and the context's private
fields, read without calling anything that lists devices; a ``tf.compat.v1.Session`` creates its
devices without the eager context, so TensorFlow's own session counter
(``/tensorflow/api/python/session_create_counter``) counts as initialized too.
The moment CUDA starts is ``Context._initialize_physical_devices`` (every listing and every
``tf.config`` call goes through it) or a session's creation; :meth:`TensorFlow.observe` wraps both.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..core.units import MIB, format_bytes
from ..core.visibility import cuda_devices
from ..plan import GpuPlan, current_plan
from .base import (
    DeviceMemory,
    Environment,
    Framework,
    State,
    known_gpus,
    note_cuda_start,
    planned_devices,
    process_cuda_start,
    visible_order,
)

_CONTEXT_MODULE = "tensorflow.python.eager.context"
_SESSION_MODULE = "tensorflow.python.client.session"
_DEVICE_LIB_MODULE = "tensorflow.python.client.device_lib"
_WRAPPED = "_jupyter_gpu_wrapped"


class TensorFlow(Framework):
    name = "TensorFlow"
    module_name = "tensorflow"
    env_keys = ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
    can_narrow = True
    gpu_build_hint = (
        "this TensorFlow has no GPU support (tensorflow-cpu, or CUDA libraries missing): "
        "pip install 'tensorflow[and-cuda]' and restart the kernel"
    )

    def __init__(self) -> None:
        self._ours: dict[Any, list[int]] = {}  # logical configurations the magics set, by device
        self._our_visible: list[Any] | None = None  # the visible GPUs the magics set last

    def _context(self) -> Any:
        context_module = sys.modules.get(_CONTEXT_MODULE)
        return None if context_module is None else context_module.context_safe()

    def state(self) -> State:
        if self.module_name not in sys.modules:
            return State.NOT_IMPORTED
        context = self._context()
        if context is not None and getattr(context, "_context_handle", None) is not None:
            return State.INITIALIZED
        if self._sessions_created():
            return State.INITIALIZED
        if context is not None and getattr(context, "_physical_devices", None) is not None:
            return State.DEVICES_LISTED
        return State.IMPORTED

    def _sessions_created(self) -> int:
        session = sys.modules.get(_SESSION_MODULE)
        counter = getattr(session, "_python_session_create_counter", None)
        if counter is None:
            return 0
        try:
            return int(counter.get_cell().value())
        except Exception:
            return 0

    def built_with_gpu(self) -> bool | None:
        if self.module_name not in sys.modules:
            return None
        try:
            return bool(sys.modules["tensorflow"].test.is_built_with_cuda()) or bool(self.device_names())
        except Exception:
            return None

    def device_names(self) -> list[str] | None:
        context = self._context()
        if context is None or context._physical_devices is None:
            return None
        names = []
        for device in context._physical_devices:
            if device.device_type != "GPU":
                continue
            try:
                names.append(str(context.get_device_details(device).get("device_name", "")))
            except Exception:
                return None
        return names if all(names) else None

    def visible_positions(self) -> list[int] | None:
        context = self._context()
        if context is None or context._physical_devices is None:
            return None
        gpus = [device for device in context._physical_devices if device.device_type == "GPU"]
        return [position for position, device in enumerate(gpus) if device in context._visible_device_list]

    def observe(self, module: ModuleType) -> None:
        self.observed = True
        context_module = sys.modules.get(_CONTEXT_MODULE)
        if context_module is not None:
            cls = context_module.Context
            original = cls._initialize_physical_devices
            if not getattr(original, _WRAPPED, False):

                def _initialize_physical_devices(context: Any, *args: Any, **kwargs: Any) -> Any:
                    if context._physical_devices is None:
                        note_cuda_start(self.name, "tensorflow")
                    return original(context, *args, **kwargs)

                setattr(_initialize_physical_devices, _WRAPPED, True)
                cls._initialize_physical_devices = _initialize_physical_devices
            for name in ("set_logical_device_configuration", "set_visible_devices"):
                original_set = getattr(cls, name)
                if getattr(original_set, _WRAPPED, False):
                    continue

                def setter(context: Any, *args: Any, _original: Any = original_set, **kwargs: Any) -> Any:
                    result = _original(context, *args, **kwargs)
                    self.settings_touched = True  # the after-cell check compares TensorFlow with the plan again
                    return result

                setattr(setter, _WRAPPED, True)
                setattr(cls, name, setter)
        device_lib: Any = sys.modules.get(_DEVICE_LIB_MODULE)
        if device_lib is not None and not getattr(device_lib.list_local_devices, _WRAPPED, False):
            # tf.test.is_gpu_available() and the posts' device check: devices made by the C++ device
            # factories, outside the eager context, so the context shows nothing of it.
            original_list = device_lib.list_local_devices

            def list_local_devices(*args: Any, **kwargs: Any) -> Any:
                note_cuda_start(self.name, "tensorflow", "device_lib.list_local_devices()")
                return original_list(*args, **kwargs)

            setattr(list_local_devices, _WRAPPED, True)
            device_lib.list_local_devices = list_local_devices
        session_module = sys.modules.get(_SESSION_MODULE)
        if session_module is not None:
            cls = session_module.BaseSession
            original_init = cls.__init__
            if not getattr(original_init, _WRAPPED, False):

                def __init__(session: Any, *args: Any, **kwargs: Any) -> None:
                    note_cuda_start(self.name, "tensorflow", "tf.compat.v1.Session()")
                    original_init(session, *args, **kwargs)

                setattr(__init__, _WRAPPED, True)
                cls.__init__ = __init__

    def settings_divergence(self, plan: GpuPlan) -> list[str]:
        """The plan's memory limits that TensorFlow's config no longer holds: code called
        ``tf.config.set_logical_device_configuration`` after the magic (the last call wins)."""
        context = self._context()
        if context is None or context._physical_devices is None or plan != current_plan():
            return []
        problems = []
        for gpu, ours in self._ours.items():
            current = [c.memory_limit for c in context._virtual_device_map.get(gpu, [])]
            if gpu in context._visible_device_list and current != ours:
                problems.append(
                    f"{_names([gpu])} has logical devices of "
                    f"{' + '.join(f'{m} MiB' for m in current) or 'no limit'} (set by code), the plan "
                    f"{' + '.join(f'{m} MiB' for m in ours)}"
                )
        return problems

    def memory_by_device(self) -> dict[str, DeviceMemory]:
        """``current`` and ``peak`` bytes of each logical GPU, keyed by TensorFlow's device name."""
        if self.state() is not State.INITIALIZED:  # listing logical devices would initialize
            return {}
        config = sys.modules["tensorflow"].config
        devices = {}
        for device in config.list_logical_devices("GPU"):
            info = config.experimental.get_memory_info(device.name)
            devices[device.name] = DeviceMemory(in_use=int(info.get("current", 0)), peak=int(info.get("peak", 0)))
        return devices

    def release(self) -> tuple[str, str] | None:
        """Keras' ``clear_session()`` when Keras is imported; TensorFlow never returns its pool."""
        if self.state() is not State.INITIALIZED:
            return None
        keras = sys.modules.get("keras")
        called = "nothing to call (Keras not imported)"
        if keras is not None and hasattr(getattr(keras, "backend", None), "clear_session"):
            keras.backend.clear_session()
            called = "keras.backend.clear_session()"
        growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true"
        pool = (
            "with memory growth TensorFlow grew its pool on demand, and it never gives it back"
            if growth
            else "without memory growth TensorFlow took nearly the whole GPU at its start"
        )
        return called, (
            f"{pool}: freed tensors are reused by TensorFlow, the memory is not returned to the "
            "driver; only a restart of the kernel returns it"
        )

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        request = plan.request
        return {
            "TF_FORCE_GPU_ALLOW_GROWTH": "true" if request.growth else baseline.get("TF_FORCE_GPU_ALLOW_GROWTH"),
            "TF_NUM_INTRAOP_THREADS": _text(request.intra_op_threads, baseline.get("TF_NUM_INTRAOP_THREADS")),
            "TF_NUM_INTEROP_THREADS": _text(request.inter_op_threads, baseline.get("TF_NUM_INTEROP_THREADS")),
        }

    def env_conflicts(self, plan: GpuPlan, env: Mapping[str, str | None]) -> list[str]:
        value = env.get("TF_FORCE_GPU_ALLOW_GROWTH")
        if value is None and _growth_set_by_hand():
            return []  # unset: TensorFlow's own config decides, and code turned growth on for every GPU
        if plan.growth and value != "true":
            said = "unset" if value is None else repr(value)
            return [
                f"TF_FORCE_GPU_ALLOW_GROWTH is {said}, and TensorFlow grows memory only with exactly 'true' "
                "(the plan's growth)"
            ]
        return []

    def blocking_changes(self, old: GpuPlan, new: GpuPlan) -> list[str]:
        blocked = super().blocking_changes(old, new)
        if self.state() is State.INITIALIZED:
            threads = ("intra_op_threads", "inter_op_threads")
            if any(getattr(old.request, name) != getattr(new.request, name) for name in threads):
                blocked.append("the number of threads")
        return blocked

    def apply(self, module: ModuleType, plan: GpuPlan, old: GpuPlan | None = None) -> None:
        request = plan.request
        before = None if old is None else old.request
        if request.soft_placement is not None:
            module.config.set_soft_device_placement(request.soft_placement)
        if request.log_device_placement is not None:
            module.debugging.set_log_device_placement(request.log_device_placement)
        if self.state() is State.INITIALIZED:
            return  # only placement changes a live context; the rest was refused before
        # Threads: only what was asked for (0 would reset a value the user set by hand). The
        # environment variables do it too (read at context init); the setters make it visible to
        # tf.config.threading.get_*, and neither lists devices.
        threading = module.config.threading
        for name, setter in (
            ("intra_op_threads", threading.set_intra_op_parallelism_threads),
            ("inter_op_threads", threading.set_inter_op_parallelism_threads),
        ):
            value, previous = getattr(request, name), None if before is None else getattr(before, name)
            if value is not None or previous is not None:
                setter(value or 0)
        context = self._context()
        listed = context is not None and context._physical_devices is not None
        configured = context is not None and bool(context._virtual_device_map)
        if not (plan.limits_bytes or listed or configured or process_cuda_start() is not None):
            # CUDA_VISIBLE_DEVICES and TF_FORCE_GPU_ALLOW_GROWTH do it all; do not start CUDA now. Once
            # CUDA started (another framework, or a call no wrapper saw), they no longer do: TensorFlow
            # narrows what CUDA showed by listing (which starts nothing new) and set_visible_devices.
            return
        physical_gpus = module.config.list_physical_devices("GPU")  # starts CUDA if not yet (recorded)
        gpus = known_gpus() or plan.gpus
        start = process_cuda_start()
        mapping = cuda_devices(start[0], gpus, self.device_names()) if start else None
        order = mapping.indices if mapping is not None and mapping.indices is not None else visible_order(plan)
        by_index = dict(zip(order, physical_gpus, strict=False))
        wanted_indices = planned_devices(self, plan, gpus)[0].indices
        wanted_indices = order if wanted_indices is None else wanted_indices
        wanted = [by_index[index] for index in order if index in wanted_indices and index in by_index]
        context = self._context()
        visible_now = [device for device in context._visible_device_list if device.device_type == "GPU"]
        asked = plan.selected_indices is not None or (old is not None and old.selected_indices is not None)
        if asked and visible_now != wanted:
            listed_gpus = [device for device in context._physical_devices if device.device_type == "GPU"]
            if visible_now != (self._our_visible if self._our_visible is not None else listed_gpus):
                _say(
                    f"jupyter_gpu: replacing the visible GPUs set by hand ({_names(visible_now)}) with the plan's "
                    f"({_names(wanted)})."
                )
            module.config.set_visible_devices(wanted, "GPU")
            self._our_visible = wanted
        context = self._context()
        growth_by_hand: list[Any] = []
        for index, gpu in by_index.items():
            limits = [size // MIB for size in plan.logical_limits_bytes(index)] if gpu in wanted else []
            current = [c.memory_limit for c in context._virtual_device_map.get(gpu, [])]
            if current and current != self._ours.get(gpu) and current != limits:
                _say(
                    f"jupyter_gpu: replacing the logical devices set by hand on {gpu.name} "
                    f"({' + '.join(f'{m} MiB' for m in current)}) with the plan's "
                    f"({' + '.join(f'{m} MiB' for m in limits) or 'none'})."
                )
            if limits:
                if context._memory_growth_map.get(gpu) and not plan.growth:
                    growth_by_hand.append(gpu)
                if current != limits:
                    module.config.set_logical_device_configuration(
                        gpu, [module.config.LogicalDeviceConfiguration(memory_limit=size) for size in limits]
                    )
                self._ours[gpu] = limits
            elif gpu in context._virtual_device_map and (
                not current or current == self._ours.get(gpu) or gpu not in wanted
            ):
                # set_logical_device_configuration cannot clear a configuration; before initialization
                # the map is all there is to clear.
                del context._virtual_device_map[gpu]
                self._ours.pop(gpu, None)
        if growth_by_hand:
            _say(
                f"jupyter_gpu: the memory growth set by hand on {_names(growth_by_hand)} does not hold next to a "
                "memory limit in TensorFlow; use %gpu_select --growth (TF_FORCE_GPU_ALLOW_GROWTH keeps both)."
            )

    def in_effect(self) -> str:
        context = self._context()
        if context is None or context._physical_devices is None:
            return "nothing yet"
        visible = [
            device.name.rsplit(":", 1)[-1] for device in context._visible_device_list if device.device_type == "GPU"
        ]
        parts = [f"visible GPUs {', '.join(visible)}" if visible else "no visible GPU (CPU only)"]
        limits = {
            device.name.rsplit(":", 1)[-1]: [c.memory_limit for c in configs]
            for device, configs in context._virtual_device_map.items()
            if device.device_type == "GPU"
        }
        if limits:
            parts.append(
                "memory limits "
                + "; ".join(
                    f"GPU {gpu}: {' + '.join(format_bytes(m * MIB) for m in limit)}" for gpu, limit in limits.items()
                )
            )
        growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
        parts.append(f"TF_FORCE_GPU_ALLOW_GROWTH={growth}" if growth else "growth off")
        parts.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
        return ", ".join(parts)

    def device_labels(self, plan: GpuPlan, gpus: Any = ()) -> dict[int, str]:
        labels: dict[int, str] = {}
        number = 0
        devices = planned_devices(self, plan, gpus)[0].indices
        if devices is None and plan.selected_indices is None:
            return {}  # CUDA's own order, which cannot be told here: no label rather than a wrong one
        for index in visible_order(plan) if devices is None else devices:
            count = max(1, len(plan.logical_limits_bytes(index)))
            names = [f"/GPU:{n}" for n in range(number, number + count)]
            labels[index] = names[0] if count == 1 else f"{names[0]}…{names[-1]}"
            number += count
        return labels


def _names(devices: list[Any]) -> str:
    return ", ".join(device.name.removeprefix("/physical_device:") for device in devices) or "none"


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _text(value: int | None, default: str | None) -> str | None:
    return default if value is None else str(value)


def _growth_set_by_hand() -> bool:
    """Whether TensorFlow's config has memory growth on for every GPU it listed (no side effect)."""
    context_module = sys.modules.get("tensorflow.python.eager.context")
    ctx = None if context_module is None else context_module.context_safe()
    growth = getattr(ctx, "_memory_growth_map", None) or {}
    return bool(growth) and all(growth.values())


TENSORFLOW = TensorFlow()
