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
fields, read without calling anything that lists devices.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..plan import GpuPlan
from ..units import MIB, format_bytes
from . import DeviceMemory, Environment, Framework, State, cuda_visible_at_start_of_cuda, visible_order

_CONTEXT_MODULE = "tensorflow.python.eager.context"


class TensorFlow(Framework):
    name = "TensorFlow"
    module_name = "tensorflow"
    env_keys = ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")

    def _context(self) -> Any:
        context_module = sys.modules.get(_CONTEXT_MODULE)
        return None if context_module is None else context_module.context_safe()

    def state(self) -> State:
        if self.module_name not in sys.modules:
            return State.NOT_IMPORTED
        context = self._context()
        if context is None:
            return State.IMPORTED
        if getattr(context, "_context_handle", None) is not None:
            return State.INITIALIZED
        if getattr(context, "_physical_devices", None) is not None:
            return State.DEVICES_LISTED
        return State.IMPORTED

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

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        request = plan.request
        return {
            "TF_FORCE_GPU_ALLOW_GROWTH": "true" if request.growth else baseline.get("TF_FORCE_GPU_ALLOW_GROWTH"),
            "TF_NUM_INTRAOP_THREADS": _text(request.intra_op_threads, baseline.get("TF_NUM_INTRAOP_THREADS")),
            "TF_NUM_INTEROP_THREADS": _text(request.inter_op_threads, baseline.get("TF_NUM_INTEROP_THREADS")),
        }

    def blocking_changes(self, old: GpuPlan, new: GpuPlan) -> list[str]:
        blocked = super().blocking_changes(old, new)
        if self.state() is State.INITIALIZED:
            threads = ("intra_op_threads", "inter_op_threads")
            if any(getattr(old.request, name) != getattr(new.request, name) for name in threads):
                blocked.append("the number of threads")
        return blocked

    def apply(self, module: ModuleType, plan: GpuPlan) -> None:
        request = plan.request
        if request.soft_placement is not None:
            module.config.set_soft_device_placement(request.soft_placement)
        if request.log_device_placement is not None:
            module.debugging.set_log_device_placement(request.log_device_placement)
        if self.state() is State.INITIALIZED:
            return  # only placement changes a live context; the rest was refused before
        # The environment variables do it too (read at context init); the setters make it visible
        # to tf.config.threading.get_*, and neither lists devices.
        module.config.threading.set_intra_op_parallelism_threads(request.intra_op_threads or 0)
        module.config.threading.set_inter_op_parallelism_threads(request.inter_op_threads or 0)
        context = self._context()
        listed = context is not None and context._physical_devices is not None
        configured = context is not None and bool(context._virtual_device_map)
        if not (plan.limits_bytes or listed or configured):
            return  # CUDA_VISIBLE_DEVICES and TF_FORCE_GPU_ALLOW_GROWTH do it all; do not start CUDA now
        physical_gpus = module.config.list_physical_devices("GPU")
        by_index = dict(zip(cuda_visible_at_start_of_cuda(plan), physical_gpus, strict=False))
        wanted = [by_index[index] for index in visible_order(plan) if index in by_index]
        if plan.selected_indices is not None or listed:
            module.config.set_visible_devices(wanted, "GPU")
        context = self._context()
        for index, gpu in by_index.items():
            limits = plan.logical_limits_bytes(index) if gpu in wanted else ()
            if limits:
                module.config.set_logical_device_configuration(
                    gpu, [module.config.LogicalDeviceConfiguration(memory_limit=size // MIB) for size in limits])
            elif gpu in context._virtual_device_map:
                # set_logical_device_configuration cannot clear a configuration; before initialization
                # the map is all there is to clear.
                del context._virtual_device_map[gpu]

    def in_effect(self) -> str:
        context = self._context()
        if context is None or context._physical_devices is None:
            return "nothing yet"
        visible = [device.name.rsplit(":", 1)[-1] for device in context._visible_device_list
                   if device.device_type == "GPU"]
        parts = [f"visible GPUs {', '.join(visible)}" if visible else "no visible GPU (CPU only)"]
        limits = {device.name.rsplit(":", 1)[-1]: [c.memory_limit for c in configs]
                  for device, configs in context._virtual_device_map.items() if device.device_type == "GPU"}
        if limits:
            parts.append("memory limits " + "; ".join(
                f"GPU {gpu}: {' + '.join(format_bytes(m * MIB) for m in limit)}" for gpu, limit in limits.items()))
        growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
        parts.append(f"TF_FORCE_GPU_ALLOW_GROWTH={growth}" if growth else "growth off")
        parts.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
        return ", ".join(parts)

    def device_labels(self, plan: GpuPlan) -> dict[int, str]:
        labels: dict[int, str] = {}
        number = 0
        for index in visible_order(plan):
            count = max(1, len(plan.logical_limits_bytes(index)))
            names = [f"/GPU:{n}" for n in range(number, number + count)]
            labels[index] = names[0] if count == 1 else f"{names[0]}…{names[-1]}"
            number += count
        return labels


def _text(value: int | None, default: str | None) -> str | None:
    return default if value is None else str(value)


TENSORFLOW = TensorFlow()
