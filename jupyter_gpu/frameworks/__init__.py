"""Apply a :class:`~jupyter_gpu.plan.GpuPlan` to TensorFlow/Keras, PyTorch and JAX before first use.

One module per framework (:mod:`.tensorflow`, :mod:`.torch`, :mod:`.jax`), each a
:class:`Framework` that can tell, without importing anything and without side effects, whether the
framework is not imported, imported (GPU untouched), or initialized; which environment variables
carry the plan; and which calls to make once it is imported.

:func:`apply_plan` is the one way a plan takes effect, and it is all-or-nothing:

1. :func:`too_late` looks for anything that makes the new plan impossible without a restart (a
   framework that initialized the GPU, or NVML showing this process holding GPU memory); then
   nothing is changed at all.
2. The environment variables of every framework are written (read by CUDA and the frameworks when
   they start the GPU, which is after the magic as long as the framework has not initialized).
3. Each imported framework receives its calls now; each framework not yet imported gets a
   post-import hook (:mod:`jupyter_gpu._import_hooks`) that applies the kernel's plan right after
   its ``import``, whatever path imports it (Keras first, ``tensorflow.compat.v1``, importlib).
   If a call fails, the environment and the previous plan are restored and the error is raised.

Every cap is cooperative: it binds the framework's allocator, not the driver.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import ModuleType

from .. import _import_hooks
from ..plan import GpuPlan, PlanError, current_plan, set_current_plan
from ..snapshots import Snapshot
from ..units import format_bytes

__all__ = ["FRAMEWORKS", "DeviceMemory", "Framework", "State", "apply_plan", "framework_memory", "framework_statuses",
           "too_late"]

Environment = dict[str, "str | None"]  # None: the variable is removed


class State(str, Enum):
    NOT_IMPORTED = "not imported"
    IMPORTED = "imported, GPU not initialized"
    DEVICES_LISTED = "imported, GPUs listed (CUDA started), not initialized"
    INITIALIZED = "initialized"


@dataclass(frozen=True)
class DeviceMemory:
    """A framework's own account of its memory on one GPU, in bytes."""

    in_use: int  # what its tensors and buffers occupy now
    peak: int  # the most in use since the framework started (or its peak counter was last reset)
    held: int | None = None  # what its caching allocator holds from the driver, where it tells


class Framework:
    """What jupyter_gpu knows about one framework. Subclasses fill in the framework's facts."""

    name = ""
    module_name = ""
    env_keys: tuple[str, ...] = ()

    def state(self) -> State:
        """Where the framework is now, from ``sys.modules`` only (never imports, never initializes)."""
        raise NotImplementedError

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        """The environment variables that carry ``plan`` (``baseline``: their kernel-start values)."""
        return {}

    def apply(self, module: ModuleType, plan: GpuPlan) -> None:
        """Make the calls ``plan`` needs on the imported, not yet initialized framework."""

    def in_effect(self) -> str:
        """What the framework uses now, in words (for the already-initialized warning and the status)."""
        return ""

    def memory_by_device(self) -> dict[str, DeviceMemory]:
        """The framework's own memory counters per GPU device, by the framework's device name.

        Empty until the framework has initialized its GPUs by itself: looking never imports or
        initializes anything. May raise whatever the framework raises; :func:`framework_memory`
        is the safe way to ask.
        """
        return {}

    def blocking_changes(self, old: GpuPlan, new: GpuPlan) -> list[str]:
        """What of the change from ``old`` to ``new`` this framework can no longer take."""
        if self.state() is State.INITIALIZED and gpu_settings(old) != gpu_settings(new):
            return ["the GPU selection, memory limit and growth"]
        return []

    def device_labels(self, plan: GpuPlan) -> dict[int, str]:
        """How the framework will name each planned GPU, by NVML index (e.g. ``{2: "cuda:0"}``)."""
        return {index: f"cuda:{position}" for position, index in enumerate(visible_order(plan))}

    def hook(self, module: ModuleType) -> None:
        """The post-import hook: apply the kernel's plan as it is when the import finishes."""
        self.apply(module, current_plan())
        _applied[self.name] = current_plan()


def gpu_settings(plan: GpuPlan) -> tuple[object, ...]:
    return (plan.selected_indices, dict(plan.limits_bytes), plan.growth)


def visible_order(plan: GpuPlan) -> tuple[int, ...]:
    """NVML indices of the GPUs the frameworks will see, in their order (the selection, else all)."""
    if plan.selected_indices is not None:
        return plan.selected_indices
    return tuple(gpu.index for gpu in plan.gpus)


def cuda_visible_at_start_of_cuda(plan: GpuPlan) -> tuple[int, ...]:
    """NVML indices CUDA made visible when it started: the ``CUDA_VISIBLE_DEVICES`` then in force.

    jupyter_gpu never changes ``CUDA_VISIBLE_DEVICES`` once CUDA has started, so its value now is
    the value CUDA read; unset means every GPU of the plan.
    """
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return tuple(gpu.index for gpu in plan.gpus)
    indices: list[int] = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit():
            indices.append(int(entry))
        else:
            match = next((gpu.index for gpu in plan.gpus if gpu.uuid and gpu.uuid.startswith(entry)), None)
            if match is None:
                break
            indices.append(match)
    return tuple(indices)


from .jax import JAX  # noqa: E402  (the adapters subclass Framework)
from .tensorflow import TENSORFLOW  # noqa: E402
from .torch import TORCH  # noqa: E402

FRAMEWORKS: tuple[Framework, ...] = (TENSORFLOW, TORCH, JAX)

COMMON_KEYS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")
_baseline: dict[str, str | None] = {}
_applied: dict[str, GpuPlan] = {}


def _managed_keys() -> tuple[str, ...]:
    return COMMON_KEYS + tuple(key for framework in FRAMEWORKS for key in framework.env_keys)


def baseline() -> Mapping[str, str | None]:
    """The kernel-start values of every variable jupyter_gpu manages (captured before it writes one)."""
    for key in _managed_keys():
        if key not in _baseline:
            _baseline[key] = os.environ.get(key)
    return _baseline


def cuda_started() -> bool:
    """Whether any framework started CUDA in this process (then ``CUDA_VISIBLE_DEVICES`` is fixed)."""
    return any(framework.state() in (State.DEVICES_LISTED, State.INITIALIZED) for framework in FRAMEWORKS)


def environment(plan: GpuPlan) -> Environment:
    """Every variable that carries ``plan``, for all frameworks."""
    start = baseline()
    env: Environment = {}
    if cuda_started():
        pass  # CUDA read CUDA_VISIBLE_DEVICES already; the frameworks narrow further with their own calls
    elif plan.selected_indices is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's default is fastest first, not nvidia-smi's order
        env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
    else:
        env["CUDA_DEVICE_ORDER"] = start.get("CUDA_DEVICE_ORDER")
        env["CUDA_VISIBLE_DEVICES"] = start.get("CUDA_VISIBLE_DEVICES")
    for framework in FRAMEWORKS:
        env.update(framework.environment(plan, start))
    return env


def too_late(old: GpuPlan, new: GpuPlan, snapshot: Snapshot | None) -> tuple[str, str] | None:
    """``(who, what is in effect)`` when ``new`` cannot take effect without a restart, else None."""
    for framework in FRAMEWORKS:
        blocked = framework.blocking_changes(old, new)
        if blocked:
            return framework.name, f"it cannot change {blocked[0]} any more; in effect: {framework.in_effect()}"
    if cuda_started() and new.selected_indices is not None:
        visible = cuda_visible_at_start_of_cuda(new)
        outside = [index for index in new.selected_indices if index not in visible]
        if outside:
            who = next(f.name for f in FRAMEWORKS if f.state() in (State.DEVICES_LISTED, State.INITIALIZED))
            shown = ", ".join(map(str, visible)) or "none"
            return who, (f"it listed the GPUs, which fixed CUDA_VISIBLE_DEVICES for this process to GPUs {shown}; "
                         f"GPU {outside[0]} cannot be added")
    if snapshot is not None and snapshot.nvml_available and gpu_settings(old) != gpu_settings(new):
        held = snapshot.processes_of(os.getpid())
        if held:
            where = ", ".join(f"{format_bytes(process.memory or 0)} on GPU {gpu.index}" for gpu, process in held)
            return "CUDA", f"NVML shows this kernel (PID {os.getpid()}) holding GPU memory: {where}"
    return None


def apply_plan(old: GpuPlan, new: GpuPlan) -> None:
    """Make ``new`` the kernel's plan: environment, calls on imported frameworks, post-import hooks.

    The caller has checked :func:`too_late`. On a failing call everything is restored and a
    :class:`~jupyter_gpu.plan.PlanError` is raised.
    """
    env = environment(new)
    before = {key: os.environ.get(key) for key in env}
    _write(env)
    done: list[Framework] = []
    try:
        for framework in FRAMEWORKS:
            module = sys.modules.get(framework.module_name)
            state = framework.state()
            if module is not None and state is not State.NOT_IMPORTED and (
                    state is not State.INITIALIZED or not framework.blocking_changes(old, new)):
                framework.apply(module, new)
                done.append(framework)
    except Exception as error:
        _write(before)
        for framework in done:
            try:
                framework.apply(sys.modules[framework.module_name], old)
            except Exception:
                pass
        raise PlanError(f"{framework.name} refused the plan ({type(error).__name__}: {error}); "
                        "nothing was changed") from error
    set_current_plan(new)
    for framework in FRAMEWORKS:
        if framework in done:
            _applied[framework.name] = new
        elif framework.state() is State.NOT_IMPORTED and not _hook_pending(framework):
            _import_hooks.when_imported(framework.module_name, framework.hook)


def _hook_pending(framework: Framework) -> bool:
    return framework.hook in _import_hooks.pending(framework.module_name)


def _write(env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def framework_memory() -> dict[str, dict[str, DeviceMemory]]:
    """Memory counters of every framework that has initialized its GPUs, by module name
    (``"torch"``, ``"tensorflow"``, ``"jax"``) and device. Never raises, imports or initializes."""
    result: dict[str, dict[str, DeviceMemory]] = {}
    for framework in FRAMEWORKS:
        try:
            devices = framework.memory_by_device()
        except Exception:  # a counter that fails is left out; measuring must never break a kernel
            continue
        if devices:
            result[framework.module_name] = devices
    return result


def framework_statuses() -> list[tuple[Framework, str]]:
    """Each framework with its state in words, for ``%gpu_status``."""
    plan = current_plan()
    result = []
    for framework in FRAMEWORKS:
        state = framework.state()
        if state is State.NOT_IMPORTED:
            waiting = _hook_pending(framework)
            text = "not imported; the plan is applied when it is imported" if waiting else "not imported"
        elif state is State.INITIALIZED:
            if framework.name in _applied and gpu_settings(_applied[framework.name]) == gpu_settings(plan):
                text = f"initialized with the plan applied; in effect: {framework.in_effect()}"
            else:
                text = f"initialized before the plan; in effect: {framework.in_effect()}"
        else:
            applied = framework.name in _applied and _applied[framework.name] == plan
            text = f"{state.value}; plan {'applied' if applied else 'not applied yet'}"
        result.append((framework, text))
    return result
