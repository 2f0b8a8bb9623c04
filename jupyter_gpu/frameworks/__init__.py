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
   post-import hook (:mod:`jupyter_gpu.core.import_hooks`) that applies the kernel's plan right after
   its ``import``, whatever path imports it (Keras first, ``tensorflow.compat.v1``, importlib).
   If a call fails, the environment and the previous plan are restored and the error is raised.

What each framework sees (or will see) is computed in one place,
:mod:`jupyter_gpu.core.visibility`, from the ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` in force
when CUDA started in this process (recorded by wrappers that :meth:`Framework.observe` puts around
the calls that start CUDA) and from the device names a framework reports. The plan printout,
``%gpu_status`` and :func:`check_after_cell` all read :func:`planned_devices` and
:func:`actual_devices`; where the mapping cannot be known, the plan is refused with the reason.

Every cap is cooperative: it binds the framework's allocator, not the driver.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import ModuleType

from ..core import import_hooks as _import_hooks
from ..core.snapshot import Snapshot
from ..core.units import format_bytes
from ..core.visibility import (
    UNKNOWN,
    CudaEnv,
    DeviceMap,
    Gpu,
    cuda_devices,
    cuda_driver_loaded,
    cuda_start,
    record_cuda_start,
)
from ..plan import GpuPlan, PlanError, current_plan, environment_at_process_start, set_current_plan

__all__ = [
    "FRAMEWORKS",
    "DeviceMemory",
    "Framework",
    "State",
    "actual_devices",
    "apply_plan",
    "check_after_cell",
    "framework_memory",
    "framework_statuses",
    "planned_devices",
    "too_late",
]

Environment = dict[str, "str | None"]  # None: the variable is removed


class State(str, Enum):
    NOT_IMPORTED = "not imported"
    IMPORTED = "imported, GPU not initialized"
    DEVICES_LISTED = "imported, GPUs listed (CUDA started), not initialized"
    CPU_ONLY = "initialized on the CPU only (no GPU backend)"
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
    can_narrow = False  # can it hide some of CUDA's devices after CUDA started (TensorFlow can)
    observed = False  # observe() ran: its CUDA start is recorded from then on
    gpu_build_hint = ""  # what to install when the build has no GPU support

    def state(self) -> State:
        """Where the framework is now, from ``sys.modules`` only (never imports, never initializes)."""
        raise NotImplementedError

    def cuda_started(self) -> bool:
        """Whether this framework started CUDA (then ``CUDA_VISIBLE_DEVICES`` is fixed for the process)."""
        return self.state() in (State.DEVICES_LISTED, State.INITIALIZED)

    def built_with_gpu(self) -> bool | None:
        """Whether the imported build can use a GPU at all (None: not imported or unknown)."""
        return None

    def device_names(self) -> list[str] | None:
        """The names of the GPUs the framework listed, in its order, where it tells without side effects."""
        return None

    def visible_positions(self) -> list[int] | None:
        """Positions (in CUDA's numbering) of the GPUs the framework uses now, where it narrowed them."""
        return None

    def observe(self, module: ModuleType) -> None:
        """Put wrappers around the calls that start CUDA, to record the variables CUDA reads then."""

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        """The environment variables that carry ``plan`` (``baseline``: their kernel-start values)."""
        return {}

    def apply(self, module: ModuleType, plan: GpuPlan, old: GpuPlan | None = None) -> None:
        """Make the calls ``plan`` needs on the imported, not yet initialized framework."""

    def cpu_only_reason(self) -> str:
        """Why the framework runs on the CPU only (state ``CPU_ONLY``): by default, its build."""
        return self.gpu_build_hint

    def settings_divergence(self, plan: GpuPlan) -> list[str]:
        """Once initialized: what the framework uses now that differs from ``plan`` beyond the GPUs
        (a memory cap code set by hand), one clause each. Never imports or initializes anything."""
        return []

    settings_touched = False  # code called one of the framework's own setters (a wrapper noted it)

    def env_conflicts(self, plan: GpuPlan, env: Mapping[str, str | None]) -> list[str]:
        """Why the framework, reading ``env`` (its variables as they are now) when it starts the
        GPU, would not do what ``plan`` says: one clause per problem, [] when it would."""
        return []

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

    def release(self) -> tuple[str, str] | None:
        """Give cached GPU memory back, if the framework is imported and initialized (``%gpu_free``).

        Returns ``(what was called, what it can and cannot return)``, or None when there is nothing
        to call (not imported, or never initialized: then it holds no GPU memory). Never imports
        anything; may raise whatever the framework raises (:func:`release_memory` is the safe way).
        """
        return None

    def blocking_changes(self, old: GpuPlan, new: GpuPlan) -> list[str]:
        """What of the change from ``old`` to ``new`` this framework can no longer take."""
        if self.state() is State.INITIALIZED and gpu_settings(old) != gpu_settings(new):
            return ["the GPU selection, memory limit and growth"]
        return []

    def device_labels(self, plan: GpuPlan, gpus: Sequence[Gpu] = ()) -> dict[int, str]:
        """How the framework will name each planned GPU, by NVML index (e.g. ``{2: "cuda:0"}``)."""
        devices = planned_devices(self, plan, gpus)[0].indices
        if devices is None and plan.selected_indices is None:
            return {}  # CUDA's own order, which cannot be told here: no label rather than a wrong one
        order = visible_order(plan) if devices is None else devices
        return {index: f"cuda:{position}" for position, index in enumerate(order)}

    def hook(self, module: ModuleType) -> None:
        """The post-import hook: watch CUDA's start, then apply the kernel's plan."""
        self.observe(module)
        changed = selection_env_changed()
        if changed:
            _warn_once(changed)  # and the plan's GPU calls are not made: nothing changes behind the warning
            if _plan_active:
                _missed.append(self)  # made once the variables are the plan's again (check_after_cell)
            return
        if _plan_active:
            self.apply(module, current_plan())
            _applied[self.name] = current_plan()


def gpu_settings(plan: GpuPlan) -> tuple[object, ...]:
    return (plan.selected_indices, dict(plan.limits_bytes), plan.growth)


def visible_order(plan: GpuPlan) -> tuple[int, ...]:
    """NVML indices of the GPUs the plan names, in its order (the selection, else all)."""
    if plan.selected_indices is not None:
        return plan.selected_indices
    return tuple(gpu.index for gpu in plan.gpus)


COMMON_KEYS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")
_baseline: dict[str, str | None] = {}
_applied: dict[str, GpuPlan] = {}
_plan_active = False  # a plan was applied: post-import hooks apply it
_gpus: tuple[Gpu, ...] = ()  # every GPU NVML saw at the last magic (for the after-cell check)
_written: CudaEnv | None = None  # the selection variables as jupyter_gpu last wrote or found them
_warned: set[str] = set()
_last_states: tuple[State, ...] = ()
_checked: set[tuple[str, State]] = set()
_unwatched: list[str] = []  # frameworks imported before jupyter_gpu watched them (CUDA may have started unseen)
_written_env: dict[str, str | None] = {}  # each framework variable as the last plan left it
_missed: list[Framework] = []  # imported while code had changed the selection variables: the plan's calls wait


def _managed_keys() -> tuple[str, ...]:
    return COMMON_KEYS + tuple(key for framework in FRAMEWORKS for key in framework.env_keys)


def baseline() -> Mapping[str, str | None]:
    """The kernel-start values of every variable jupyter_gpu manages (captured before it writes one)."""
    for key in _managed_keys():
        if key not in _baseline:
            _baseline[key] = os.environ.get(key)
    return _baseline


def plan_active() -> bool:
    """Whether a plan was applied in this kernel (by a magic or the configured defaults)."""
    return _plan_active


def framework_env() -> dict[str, str | None]:
    """Every framework variable (``FRAMEWORKS``' ``env_keys``) as ``os.environ`` has it now."""
    return {key: os.environ.get(key) for framework in FRAMEWORKS for key in framework.env_keys}


def settings_set_by_code() -> dict[str, str | None]:
    """The framework variables code in the kernel changed since the last plan wrote them
    (``os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ...``, ``%env``, ``del os.environ[...]``): key → value now."""
    now = framework_env()
    return {key: value for key, value in now.items() if key in _written_env and value != _written_env[key]}


def remember_gpus(gpus: Sequence[Gpu]) -> None:
    """Keep the GPUs of the last snapshot, so checks after a cell need no NVML call."""
    global _gpus
    if gpus:
        _gpus = tuple(gpus)


def known_gpus() -> tuple[Gpu, ...]:
    return _gpus


# -- watching: CUDA's start and changes of the selection variables --------------------------------


def start_watching(found: CudaEnv | None = None) -> None:
    """Called when the extension loads (or, if no framework was imported then, when the first one
    is): record the selection variables as the extension ``found`` them, watch every framework's
    CUDA start (now if imported, else when imported), and note a CUDA start that happened before."""
    global _written
    if _written is None:
        _written = CudaEnv.now() if found is None else found
    for framework in FRAMEWORKS:
        module = sys.modules.get(framework.module_name)
        if module is not None:
            if not framework.observed:
                _unwatched.append(framework.name)
            framework.observe(module)
        elif not _hook_pending(framework):
            _import_hooks.when_imported(framework.module_name, framework.hook)
    process_cuda_start()


def note_cuda_start(by: str) -> None:
    """Called by the wrappers right before a framework starts CUDA: CUDA reads the variables now."""
    record_cuda_start(CudaEnv.now(), by)


def process_cuda_start() -> tuple[CudaEnv, str] | None:
    """``(the variables CUDA read, who started it)`` for this process, or None if CUDA has not started.

    A start that happened before jupyter_gpu watched (a framework listed GPUs before
    ``%load_ext``) is recorded now: with the values in force now if they are still those the
    kernel started with (nothing changed them), else as unknown.
    """
    recorded = cuda_start()
    if recorded is not None:
        return recorded
    by = next((framework.name for framework in FRAMEWORKS if framework.cuda_started()), None)
    if by is None and _unwatched and cuda_driver_loaded():
        by = _unwatched[0]  # e.g. torch.cuda.is_available() before %load_ext: only the driver shows it
    if by is None:
        return None
    now = CudaEnv.now()
    start = environment_at_process_start()
    at_start = CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))
    record_cuda_start(now if now == at_start and (_written is None or _written == now) else UNKNOWN, by)
    return cuda_start()


def selection_env_changed() -> str | None:
    """A one-line warning when code changed ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` behind the
    magics' back before CUDA started (None when unchanged, or when CUDA already read them)."""
    if _written is None or not _plan_active:
        return None  # without a plan, the user's own CUDA_VISIBLE_DEVICES is simply the choice
    now = CudaEnv.now()
    if now == _written or cuda_start() is not None:
        return None
    if _gpus and (same := cuda_devices(now, _gpus)).known and same == cuda_devices(_written, _gpus):
        return None  # another spelling of the same GPUs in the same order (a UUID for an index)
    plan = current_plan()
    what = [
        f"{key}={new!r}" if new is not None else f"{key} unset"
        for key, old, new in (
            ("CUDA_VISIBLE_DEVICES", _written.visible_devices, now.visible_devices),
            ("CUDA_DEVICE_ORDER", _written.device_order, now.device_order),
        )
        if old != new
    ]
    seen = cuda_devices(now, _gpus) if _gpus else None
    sees = (
        f"the frameworks will see {seen.describe()}"
        if seen is not None and seen.known
        else "the frameworks will not see what the plan says"
    )
    source = f"the plan ({_plan_words(plan)})" if plan.selected_indices is not None else "the kernel's start"
    return (
        f"code in this kernel set {' and '.join(what)} after {source}: {sees}, not the plan. "
        "Run %gpu_select with the GPUs you want (it replaces the value), or remove that assignment."
    )


def set_by_code() -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` now differ from what the plan wrote
    (or, before any plan, from what the kernel started with): code in the kernel set them."""
    if _plan_active and _written is not None:
        return CudaEnv.now() != _written
    start = environment_at_process_start()
    return CudaEnv.now() != CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))


def _plan_words(plan: GpuPlan) -> str:
    if plan.selected_indices is None:
        return "no selection"
    if plan.selected_indices == ():
        return "CPU only"
    return "GPU " + ",".join(map(str, plan.selected_indices or ()))


def _warn_once(message: str) -> None:
    if message in _warned:
        return
    _warned.add(message)
    from ..core.errors import GPUPlanMismatchWarning, warn

    warn(message, GPUPlanMismatchWarning)


# -- what each framework sees ---------------------------------------------------------------------


def expected_devices(plan: GpuPlan, gpus: Sequence[Gpu]) -> DeviceMap:
    """What the plan means: the selection, or (no selection) what the kernel started with."""
    if plan.selected_indices is not None:
        return DeviceMap(plan.selected_indices)
    start = environment_at_process_start()
    return cuda_devices(CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER")), gpus)


def _cuda_map(framework: Framework, gpus: Sequence[Gpu]) -> DeviceMap | None:
    """CUDA's devices for the process once CUDA started (None: not started)."""
    start = process_cuda_start()
    if start is None:
        return None
    env, by = start
    if env is UNKNOWN:
        return DeviceMap(
            None,
            f"{by} started CUDA before jupyter_gpu watched, and the CUDA variables were "
            "changed since the kernel started",
        )
    return cuda_devices(env, gpus, framework.device_names())


def planned_devices(framework: Framework, plan: GpuPlan, gpus: Sequence[Gpu]) -> tuple[DeviceMap, str | None]:
    """The GPUs ``framework`` will have (NVML index per device position) once ``plan`` is applied,
    and why that is not the plan (None when it is)."""
    expected = expected_devices(plan, gpus)
    cuda = _cuda_map(framework, gpus)
    if cuda is None:  # CUDA reads the variables the plan writes
        if plan.selected_indices is None and expected.known:
            return expected, None
        return DeviceMap(plan.selected_indices if plan.selected_indices is not None else None), None
    if not cuda.known:
        return cuda, f"cannot tell which GPU is which: {cuda.reason}"
    wanted = expected.indices if expected.indices is not None else cuda.indices
    if framework.can_narrow:
        missing = [index for index in wanted if index not in cuda.indices]
        narrowed = tuple(index for index in cuda.indices if index in wanted)
        if missing:
            return DeviceMap(narrowed), (
                f"CUDA started showing {cuda.describe()} only, so GPU {missing[0]} cannot be added"
            )
        return DeviceMap(narrowed), None
    if set(cuda.indices) != set(wanted):
        return cuda, f"CUDA started showing {cuda.describe()}, and {framework.name} cannot narrow that"
    return cuda, None


def actual_devices(framework: Framework, gpus: Sequence[Gpu]) -> DeviceMap:
    """The GPUs ``framework`` uses now (once CUDA started) or will use (from the variables now)."""
    cuda = _cuda_map(framework, gpus)
    positions = framework.visible_positions()
    if cuda is None:
        cuda = cuda_devices(CudaEnv.now(), gpus)
        if cuda.indices is None or positions is None:
            return cuda
        return DeviceMap(tuple(cuda.indices[p] for p in positions if p < len(cuda.indices)))
    if cuda.indices is None or positions is None:
        return cuda
    return DeviceMap(tuple(cuda.indices[p] for p in positions if p < len(cuda.indices)))


def cuda_started() -> bool:
    """Whether CUDA started in this process (then ``CUDA_VISIBLE_DEVICES`` is fixed)."""
    return process_cuda_start() is not None


def environment(plan: GpuPlan) -> Environment:
    """Every variable that carries ``plan``, for all frameworks.

    A framework variable code set since the last plan is the user's setting: it replaces the
    kernel-start value as what the plan builds on (merged, as ``PYTORCH_CUDA_ALLOC_CONF``, or kept
    where the plan needs nothing of it), instead of being reset behind the user's back."""
    start = baseline()
    _baseline.update(settings_set_by_code())
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
    """``(who, why)`` when ``new`` cannot take effect without a restart, else None."""
    for framework in FRAMEWORKS:
        blocked = framework.blocking_changes(old, new)
        if blocked:
            return framework.name, f"it cannot change {blocked[0]} any more; in effect: {_in_effect(framework)}"
    gpus = snapshot.gpus if snapshot is not None and snapshot.nvml_available else _gpus
    start = process_cuda_start()
    if start is not None and gpu_settings(old) != gpu_settings(new):
        # Only a framework that can still narrow CUDA's devices (TensorFlow) can follow a new
        # selection; PyTorch and JAX keep what CUDA showed, which the plan printout says.
        for framework in FRAMEWORKS:
            if framework.can_narrow:
                problem = planned_devices(framework, new, gpus)[1]
                if problem is not None:
                    return start[1], problem
    if snapshot is not None and snapshot.nvml_available and gpu_settings(old) != gpu_settings(new):
        held = snapshot.processes_of(os.getpid())
        if held:
            where = ", ".join(f"{format_bytes(process.memory or 0)} on GPU {gpu.index}" for gpu, process in held)
            return "CUDA", f"NVML shows this kernel (PID {os.getpid()}) holding GPU memory: {where}"
    return None


def apply_plan(old: GpuPlan, new: GpuPlan) -> list[str]:
    """Make ``new`` the kernel's plan: environment, calls on imported frameworks, post-import hooks.

    The caller has checked :func:`too_late`. On a failing call everything is restored and a
    :class:`~jupyter_gpu.plan.PlanError` is raised. Returns the framework settings (set by code, or
    there before the first plan) that the plan replaces (``"XLA_PYTHON_CLIENT_PREALLOCATE='true'
    (now 'false')"``), for the magic to say so.
    """
    global _plan_active, _written
    # What the plan may replace: values code set since the last plan, or (first plan) whatever was there.
    by_code = (
        settings_set_by_code()
        if _written_env
        else {key: value for key, value in framework_env().items() if value is not None}
    )
    env = environment(new)
    before = {key: os.environ.get(key) for key in env}
    _write(env)
    done: list[Framework] = []
    try:
        for framework in FRAMEWORKS:
            module = sys.modules.get(framework.module_name)
            state = framework.state()
            if (
                module is not None
                and state is not State.NOT_IMPORTED
                and (state is not State.INITIALIZED or not framework.blocking_changes(old, new))
            ):
                framework.apply(module, new, old)
                done.append(framework)
    except Exception as error:
        _write(before)
        for framework in done:
            try:
                framework.apply(sys.modules[framework.module_name], old, new)
            except Exception:
                pass
        raise PlanError(
            f"{framework.name} refused the plan ({type(error).__name__}: {error}); nothing was changed"
        ) from error
    set_current_plan(new)
    _plan_active = True
    if process_cuda_start() is None:
        _written = CudaEnv.now()
    _written_env.clear()
    _written_env.update(framework_env())
    _missed[:] = [framework for framework in _missed if framework not in done]
    for framework in FRAMEWORKS:
        if framework in done:
            _applied[framework.name] = new
        elif framework.state() is State.NOT_IMPORTED and not _hook_pending(framework):
            _import_hooks.when_imported(framework.module_name, framework.hook)
    return [
        f"{key}={value!r} (now {'unset' if _written_env[key] is None else repr(_written_env[key])})"
        if value is not None
        else f"the removal of {key}"
        for key, value in by_code.items()
        if _written_env.get(key) != value and not (value and _written_env.get(key) and value in str(_written_env[key]))
    ]


_READ = (State.INITIALIZED, State.CPU_ONLY)  # the framework has read its variables (GPU or CPU backend made)


def env_conflicts(framework: Framework, plan: GpuPlan | None = None) -> list[str]:
    """Why ``framework`` will not follow the plan because of its variables as they are now ([] when
    it will, or when it already read them: then changing them no longer matters)."""
    if not _plan_active or framework.state() in _READ:
        return []
    return framework.env_conflicts(current_plan() if plan is None else plan, framework_env())


def env_conflict_messages() -> list[str]:
    """One warning per framework whose variables, as they are now, contradict the plan."""
    plan = current_plan()
    messages = []
    for framework in FRAMEWORKS:
        conflicts = env_conflicts(framework, plan)
        if conflicts:
            messages.append(
                f"{framework.name} will not follow the GPU plan ({_plan_words(plan)}"
                f"{_memory_words(plan)}): {'; '.join(conflicts)}."
            )
    return messages


def _memory_words(plan: GpuPlan) -> str:
    parts = ["growth on"] if plan.growth else []
    if plan.limits_bytes:
        parts.append(
            "limit "
            + ", ".join(
                f"GPU {index}: {format_bytes(plan.memory_limit_bytes(index) or 0)}" for index in plan.limits_bytes
            )
        )
    return "".join(f"; {part}" for part in parts)


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


def release_memory() -> list[tuple[str, str, str]]:
    """Each imported, initialized framework's own release (``%gpu_free``), in order:
    ``(framework, what was called, what it can return)``. A failing release is reported, not raised."""
    done = []
    for framework in FRAMEWORKS:
        try:
            released = framework.release()
        except Exception as error:
            done.append((framework.name, "release failed", f"{type(error).__name__}: {error}"))
            continue
        if released is not None:
            done.append((framework.name, *released))
    return done


# -- comparing what a framework does with the plan ------------------------------------------------


def divergence(framework: Framework, plan: GpuPlan, gpus: Sequence[Gpu]) -> str | None:
    """Why ``framework`` does not (or will not) use what ``plan`` says, in one clause; None if it does."""
    state = framework.state()
    conflicts = env_conflicts(framework, plan)
    if conflicts:
        return "; ".join(conflicts)
    if state is State.NOT_IMPORTED:
        return None if process_cuda_start() is None else planned_devices(framework, plan, gpus)[1]
    wanted = expected_devices(plan, gpus)
    if state is State.CPU_ONLY:
        if wanted.indices:
            return f"it runs on the CPU only: {framework.cpu_only_reason()}"
        return None
    if state in (State.DEVICES_LISTED, State.INITIALIZED) and framework.built_with_gpu() is False and wanted.indices:
        return f"it sees no GPU: {framework.gpu_build_hint}"
    changed = selection_env_changed()
    if changed and framework.cuda_started() is False:
        return "CUDA_VISIBLE_DEVICES/CUDA_DEVICE_ORDER were changed by code after the plan"
    start = environment_at_process_start()
    if (
        plan.selected_indices is None
        and process_cuda_start() is None
        and framework.visible_positions() is None
        and CudaEnv.now() == CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))
    ):
        return None  # no selection, nothing changed: it will see the kernel's GPUs, whatever CUDA's order
    actual = actual_devices(framework, gpus)
    if not actual.known:
        return f"cannot tell which GPUs it uses: {actual.reason}"
    if wanted.known and set(actual.indices or ()) != set(wanted.indices or ()):
        start = process_cuda_start()
        cause = f" (CUDA started with {start[0].describe()})" if start and start[0] is not UNKNOWN else ""
        return f"it uses {actual.describe()}, the plan says {wanted.describe()}{cause}"
    if state in (State.DEVICES_LISTED, State.INITIALIZED):
        try:
            settings = framework.settings_divergence(plan)
        except Exception:  # asking must never break a check
            settings = []
        if settings:
            return "; ".join(settings)
    return None


def check_after_cell() -> list[str]:
    """The check after every cell: warnings for what changed behind the magics' back.

    Cheap when nothing happened (the selection and framework variables in ``os.environ``, JAX's
    device flag, and each framework's state from ``sys.modules``: about 10 µs); compares a framework
    with the plan when it starts CUDA or initializes, when code changed one of its variables before
    it read them, and when code called one of its own setters that the plan also uses
    (``set_per_process_memory_fraction``, ``set_logical_device_configuration``,
    ``set_visible_devices``, ``jax_cuda_visible_devices``).
    """
    global _last_states
    messages: list[str] = []
    if _written is not None and (
        os.environ.get("CUDA_VISIBLE_DEVICES") != _written.visible_devices
        or os.environ.get("CUDA_DEVICE_ORDER") != _written.device_order
    ):
        changed = selection_env_changed()
        if changed and changed not in _warned:
            _warned.add(changed)
            messages.append(changed)
    late = _set_after_cuda_start()
    if late and late not in _warned:
        _warned.add(late)
        messages.append(late)
    if _missed and cuda_start() is not None:
        _missed.clear()  # CUDA read the variables code set: the plan's calls would now be wrong
    elif _missed and _written is not None and selection_env_changed() is None:
        messages.extend(_apply_missed())
    states = (TENSORFLOW.state(), TORCH.state(), JAX.state())
    if _plan_active and settings_set_by_code():
        # Code changed a framework variable after the plan: a framework that had not read its
        # variables before this cell reads the new value (now, or when it starts the GPU).
        plan = current_plan()
        before = _last_states or (State.NOT_IMPORTED,) * len(FRAMEWORKS)
        for framework, state in zip(FRAMEWORKS, before, strict=True):
            if state in _READ:
                continue
            conflicts = framework.env_conflicts(plan, framework_env())
            message = (
                f"code in this kernel changed {framework.name}'s settings after the GPU plan "
                f"({_plan_words(plan)}{_memory_words(plan)}): {'; '.join(conflicts)}. Run the magic "
                "again (e.g. %gpu_limit) to build the plan on your value, or remove that assignment."
            )
            if conflicts and message not in _warned:
                _warned.add(message)
                messages.append(message)
    touched = [framework for framework in FRAMEWORKS if framework.settings_touched]
    for framework in touched:  # a setter called by code (e.g. set_per_process_memory_fraction): compare again
        framework.settings_touched = False
        if _plan_active and framework.state() not in (State.NOT_IMPORTED, State.CPU_ONLY):
            problem = divergence(framework, current_plan(), _gpus or _snapshot_gpus())
            message = f"{framework.name} does not follow the GPU plan ({_plan_words(current_plan())}): {problem}."
            if problem and message not in _warned:
                _warned.add(message)
                messages.append(message)
    if states == _last_states and not touched:
        return messages
    _last_states = states
    plan = current_plan()
    for framework, state in zip(FRAMEWORKS, states, strict=True):
        if state in (State.NOT_IMPORTED, State.IMPORTED) or (framework.name, state) in _checked:
            continue
        _checked.add((framework.name, state))
        if not _plan_active:
            continue
        gpus = _gpus or _snapshot_gpus()
        problem = divergence(framework, plan, gpus)
        if problem:
            words = _plan_words(plan) if plan.selected_indices is not None else "no selection"
            message = f"{framework.name} does not follow the GPU plan ({words}): {problem}."
            if message not in _warned:
                _warned.add(message)
                messages.append(message)
    return messages


def _set_after_cuda_start() -> str | None:
    """A note when code set ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` after CUDA read them: the
    value has no effect on any framework of this process (None when unchanged or the same GPUs)."""
    start = cuda_start()
    if start is None or _written is None:
        return None
    env, by = start
    now = CudaEnv.now()
    if env is UNKNOWN or now == env:
        return None
    if _gpus and (same := cuda_devices(now, _gpus)).known and same == cuda_devices(env, _gpus):
        return None
    what = [
        f"{key}={new!r}" if new is not None else f"{key} unset"
        for key, old, new in (
            ("CUDA_VISIBLE_DEVICES", env.visible_devices, now.visible_devices),
            ("CUDA_DEVICE_ORDER", env.device_order, now.device_order),
        )
        if old != new
    ]
    return (
        f"code in this kernel set {' and '.join(what)} after CUDA started ({by} started it with "
        f"{env.describe()}): CUDA reads them once per process, so this has no effect on TensorFlow, PyTorch "
        "or JAX here. To use other GPUs, restart the kernel and run %gpu_select first."
    )


def _apply_missed() -> list[str]:
    """The selection variables are the plan's again: give the frameworks imported meanwhile the
    plan's calls they missed (caps, TensorFlow's devices), unless they already started their GPU."""
    notes = []
    plan = current_plan()
    for framework in list(_missed):
        _missed.remove(framework)
        module = sys.modules.get(framework.module_name)
        if module is None or framework.state() in (State.INITIALIZED, State.CPU_ONLY) or not _plan_active:
            continue
        try:
            framework.apply(module, plan)
        except Exception as error:  # a check must never break the kernel; say what did not happen
            notes.append(f"{framework.name} did not take the plan's calls ({type(error).__name__}: {error}).")
            continue
        _applied[framework.name] = plan
    return notes


def _snapshot_gpus() -> tuple[Gpu, ...]:
    from ..sources.nvml import snapshot

    remember_gpus(snapshot().gpus)
    return _gpus


def _in_effect(framework: Framework) -> str:
    try:
        return framework.in_effect()
    except Exception as error:  # a status must never fail because a framework's query does
        return f"unknown ({type(error).__name__}: {error})"


def framework_statuses(gpus: Sequence[Gpu] = ()) -> list[tuple[Framework, str]]:
    """Each framework with its state in words, for ``%gpu_status`` ("plan applied" only when it is)."""
    plan = current_plan()
    gpus = gpus or _gpus
    result = []
    for framework in FRAMEWORKS:
        state = framework.state()
        problem = divergence(framework, plan, gpus) if _plan_active else None
        if state is State.NOT_IMPORTED:
            waiting = _hook_pending(framework) and _plan_active
            text = "not imported; the plan is applied when it is imported" if waiting else "not imported"
        elif state is State.INITIALIZED:
            if (
                framework.name in _applied
                and gpu_settings(_applied[framework.name]) == gpu_settings(plan)
                and not problem
            ):
                text = f"initialized with the plan applied; in effect: {_in_effect(framework)}"
            elif framework.name in _applied and gpu_settings(_applied[framework.name]) == gpu_settings(plan):
                text = f"initialized; in effect: {_in_effect(framework)}"
            else:
                text = f"initialized before the plan; in effect: {_in_effect(framework)}"
        elif state is State.CPU_ONLY:
            text = f"{state.value}; in effect: {_in_effect(framework)}"
        else:
            applied = framework.name in _applied and _applied[framework.name] == plan
            verdict = "NOT applied" if problem else "applied" if applied else "not applied yet"
            text = f"{state.value}; plan {verdict}"
        if problem:
            text += f" — does NOT follow the plan: {problem}"
        result.append((framework, text))
    return result


from .jax import JAX  # noqa: E402  (the adapters use this module)
from .tensorflow import TENSORFLOW  # noqa: E402
from .torch import TORCH  # noqa: E402

FRAMEWORKS: tuple[Framework, ...] = (TENSORFLOW, TORCH, JAX)


def reset_for_tests() -> None:
    """Forget every observation (plan applied, CUDA start, warnings): for tests in one process only."""
    global _plan_active, _written, _last_states, _gpus
    from ..core.visibility import forget_cuda_start

    _baseline.clear()
    _applied.clear()
    _warned.clear()
    _checked.clear()
    _plan_active, _written, _last_states, _gpus = False, None, (), ()
    _unwatched.clear()
    _written_env.clear()
    _missed.clear()
    forget_cuda_start()
    for framework in FRAMEWORKS:
        _import_hooks.cancel(framework.module_name, framework.hook)
