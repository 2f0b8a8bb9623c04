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
from collections.abc import Callable, Mapping, Sequence

from ..core import import_hooks as _import_hooks
from ..core.environ import environment_at_process_start
from ..core.i18n import _
from ..core.snapshot import Snapshot
from ..core.text import clauses, display_text
from ..core.units import format_bytes
from ..core.visibility import UNKNOWN, CudaEnv, Gpu, cuda_devices, cuda_start, cuda_start_call
from ..plan import GpuPlan, PlanError, current_plan, set_current_plan
from ..plan.carry import PLAN_VARIABLE, plan_environment
from .base import (
    DeviceMemory,
    Environment,
    Framework,
    State,
    actual_devices,
    cuda_started,
    expected_devices,
    fractions_differ,
    gpu_settings,
    known_gpus,
    note_cuda_start,
    plan_words,
    planned_devices,
    process_cuda_start,
    remember_gpus,
    selection_env_changed,
    visible_order,
    who_started,
)
from .jax import JAX
from .state import KERNEL, KernelGpuState
from .tensorflow import TENSORFLOW, forced_growth, keras_forcing_growth
from .torch import TORCH

__all__ = [
    "FRAMEWORKS",
    "KERNEL",
    "DeviceMemory",
    "Environment",
    "Framework",
    "KernelGpuState",
    "State",
    "actual_devices",
    "apply_plan",
    "check_after_cell",
    "cuda_start_call",
    "cuda_started",
    "cuda_status",
    "expected_devices",
    "follow_carried_plan",
    "framework_memory",
    "framework_statuses",
    "known_gpus",
    "note_cuda_start",
    "order_set_by_plan",
    "planned_devices",
    "process_cuda_start",
    "remember_gpus",
    "selection_env_changed",
    "too_late",
    "torch_caps_problem",
    "visible_order",
]

FRAMEWORKS: tuple[Framework, ...] = (TENSORFLOW, TORCH, JAX)
KERNEL.frameworks = FRAMEWORKS

COMMON_KEYS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")


def _managed_keys() -> tuple[str, ...]:
    return (*COMMON_KEYS, PLAN_VARIABLE, *(key for framework in FRAMEWORKS for key in framework.env_keys))


_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


def baseline() -> Mapping[str, str | None]:
    """The kernel-start values of every variable jupyter_gpu manages (captured before it writes one)."""
    for key in _managed_keys():
        if key not in KERNEL.baseline:
            KERNEL.baseline[key] = os.environ.get(key)
    return KERNEL.baseline


def plan_active() -> bool:
    """Whether a plan was applied in this kernel (by a magic or the configured defaults)."""
    return KERNEL.plan_active


def framework_env() -> dict[str, str | None]:
    """Every framework variable (``FRAMEWORKS``' ``env_keys``) as ``os.environ`` has it now."""
    return {key: os.environ.get(key) for framework in FRAMEWORKS for key in framework.env_keys}


def settings_set_by_code() -> dict[str, str | None]:
    """The framework variables code in the kernel changed since the last plan wrote them
    (``os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ...``, ``%env``, ``del os.environ[...]``): key → value now."""
    now = framework_env()
    return {key: value for key, value in now.items() if key in KERNEL.written_env and value != KERNEL.written_env[key]}


# -- watching: CUDA's start and changes of the selection variables --------------------------------


def start_watching(found: CudaEnv | None = None, fresh: bool = False) -> None:
    """Called when the extension loads (or, if no framework was imported then, when the first one
    is, ``fresh``: then the frameworks in ``sys.modules`` were imported just now, under watch):
    record the selection variables as the extension ``found`` them, watch every framework's
    CUDA start (now if imported, else when imported), and note a CUDA start that happened before."""
    if KERNEL.written is None:
        KERNEL.written = CudaEnv.now() if found is None else found
    for framework in FRAMEWORKS:
        module = sys.modules.get(framework.module_name)
        if module is not None:
            if not framework.observed and not fresh:
                KERNEL.unwatched.append(framework.name)
            framework.observe(module)
        elif not _hook_pending(framework):
            _import_hooks.when_imported(framework.module_name, framework.hook)
    process_cuda_start()


def set_by_code() -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` now differ from what the plan wrote
    (or, before any plan, from what the kernel started with): code in the kernel set them."""
    if KERNEL.plan_active and KERNEL.written is not None:
        return CudaEnv.now() != KERNEL.written
    start = environment_at_process_start()
    return CudaEnv.now() != CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))


def environment(plan: GpuPlan) -> Environment:
    """Every variable that carries ``plan``, for all frameworks.

    A framework variable code set since the last plan is the user's setting: it replaces the
    kernel-start value as what the plan builds on (merged, as ``PYTORCH_CUDA_ALLOC_CONF``, or kept
    where the plan needs nothing of it), instead of being reset behind the user's back."""
    # Checked before anything is recorded: a refused plan leaves the kernel exactly as it was.
    seen = {key: KERNEL.baseline[key] if key in KERNEL.baseline else os.environ.get(key) for key in COMMON_KEYS}
    order = caps_order(plan, KERNEL.gpus or plan.gpus, seen)
    start = baseline()
    KERNEL.baseline.update(settings_set_by_code())
    if keras_forcing_growth() and start.get(_GROWTH) == "true":
        # Keras set it at import, for its own backend: not the user's setting; the plan decides TensorFlow's growth
        KERNEL.baseline[_GROWTH] = environment_at_process_start().get(_GROWTH)
    env: Environment = {}
    if cuda_started():
        pass  # CUDA read CUDA_VISIBLE_DEVICES already; the frameworks narrow further with their own calls
    elif plan.selected_indices is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's default is fastest first, not nvidia-smi's order
        env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
    else:
        env["CUDA_DEVICE_ORDER"] = start.get("CUDA_DEVICE_ORDER")
        env["CUDA_VISIBLE_DEVICES"] = start.get("CUDA_VISIBLE_DEVICES")
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    for framework in FRAMEWORKS:
        env.update(framework.environment(plan, start))
    # The caps that are calls (TensorFlow's limit, PyTorch's fraction), for Python children
    # (docs/children.md): only where a child will see the plan's selection, else it would refuse them.
    selection_written = plan.selected_indices is None or env.get("CUDA_VISIBLE_DEVICES") == plan.cuda_visible_devices
    carried = plan_environment(plan, KERNEL.gpus) if selection_written else {}
    env[PLAN_VARIABLE] = carried.get(PLAN_VARIABLE)
    return env


def follow_carried_plan(plan: GpuPlan, gpus: Sequence[Gpu]) -> None:
    """Make ``plan`` this process's plan without writing a variable: a Python child started with a
    kernel's (or ``jupyter-gpu run``'s) ``JUPYTER_GPU_PLAN`` (:mod:`jupyter_gpu.plan.carry`), which
    inherited the selection, growth and JAX's share as variables already. Each framework's
    :meth:`Framework.hook`, called when it is imported, then makes the plan's calls as in a kernel.
    ``gpus``: the GPUs the plan was made with (CUDA's numbering)."""
    remember_gpus(gpus)
    set_current_plan(plan)
    KERNEL.plan_active = True
    if KERNEL.written is None:
        KERNEL.written = CudaEnv.now()  # what the child started with is the plan's (checked by the caller)
    KERNEL.written_env.update(framework_env())


def _caps_differ(plan: GpuPlan) -> bool:
    """Whether the plan's memory fractions differ between its GPUs (an uncapped GPU counts as 1):
    then it matters which of CUDA's devices is which GPU (PyTorch caps by CUDA's device number)."""
    return bool(plan.limits_bytes) and fractions_differ([plan.memory_fraction(index) for index in visible_order(plan)])


def _share_advice(plan: GpuPlan) -> str:
    """``"give the limit as a share, the same on every GPU (%gpu_limit 6%)"``: the smallest of the
    plan's shares, rounded down, so it is at most every limit the planner accepted (the admin
    ceiling included) and passes again; "" when that is under 1 %."""
    fractions = [fraction for index in visible_order(plan) if (fraction := plan.memory_fraction(index)) is not None]
    percent = int(min(fractions, default=0) * 100)
    return (
        _("give the limit as a share, the same on every GPU (%gpu_limit {percent}%), or ").format(percent=percent)
        if percent >= 1
        else ""
    )


def caps_order(plan: GpuPlan, gpus: Sequence[Gpu], start: Mapping[str, str | None]) -> str | None:
    """``"PCI_BUS_ID"`` when the plan must set ``CUDA_DEVICE_ORDER`` so that each GPU's cap reaches
    that GPU, else None; raises :class:`PlanError` when it cannot be made to.

    ``torch.cuda.set_per_process_memory_fraction(f, device=k)`` takes CUDA's ordinal k. Without a
    selection the plan keeps the kernel's ``CUDA_DEVICE_ORDER``; on GPUs of several models without
    ``PCI_BUS_ID`` CUDA numbers them fastest first, which NVML cannot tell, so caps of different
    fractions would land on the wrong GPUs (the A6000 capped at a T400's share). Before CUDA starts
    the plan sets ``PCI_BUS_ID`` (unless the kernel was started with another order: then it refuses);
    after, the caps are placed only when the framework's device names tell which GPU is which.
    """
    if not gpus or not _caps_differ(plan) or plan.selected_indices is not None:
        return None  # a selection writes PCI_BUS_ID itself (or, once CUDA started, the printout says)
    if cuda_started():
        return None  # CUDA read its order already; PyTorch is capped only where it can be told (torch_caps_problem)
    env = CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))
    if cuda_devices(env, gpus).known:
        return None
    if env.device_order is None:
        return "PCI_BUS_ID"
    raise PlanError(
        _(
            "the kernel was started with CUDA_DEVICE_ORDER={order}: CUDA numbers these GPUs of "
            "several models fastest first, which NVML cannot tell, and PyTorch caps each GPU by CUDA's number; "
            "{advice}select the GPUs (%gpu_select all numbers them as nvidia-smi does)"
        ).format(order=repr(env.device_order), advice=_share_advice(plan))
    )


def torch_caps_problem(plan: GpuPlan, gpus: Sequence[Gpu]) -> str | None:
    """Why PyTorch will not get the plan's caps (None when it will, or has no caps to get): CUDA
    started before the plan in an order that cannot be told, and the GPUs' fractions differ, so
    :meth:`~jupyter_gpu.frameworks.torch.Torch.apply` places none rather than one on the wrong GPU."""
    if not gpus or not _caps_differ(plan) or not cuda_started() or TORCH.state() is State.INITIALIZED:
        return None
    seen = actual_devices(TORCH, gpus)
    if seen.known:
        return None
    return _(
        "PyTorch gets no memory cap: it caps each GPU by CUDA's device number, and which GPU is which cannot "
        "be told ({reason}); {advice}restart the kernel and run %gpu_limit before anything "
        "lists the GPUs"
    ).format(reason=seen.shown_reason, advice=_share_advice(plan))


def order_set_by_plan(plan: GpuPlan) -> bool:
    """Whether the plan (without a selection) set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for its caps."""
    start = KERNEL.baseline
    return (
        plan.selected_indices is None
        and start.get("CUDA_DEVICE_ORDER") is None
        and os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
        and KERNEL.written is not None
        and KERNEL.written.device_order == "PCI_BUS_ID"
    )


def too_late(old: GpuPlan, new: GpuPlan, snapshot: Snapshot | None) -> tuple[str, str] | None:
    """``(who, why)`` when ``new`` cannot take effect without a restart, else None."""
    for framework in FRAMEWORKS:
        blocked = framework.blocking_changes(old, new)
        if blocked:
            return framework.name, _("it cannot change {what} any more; in effect: {in_effect}").format(
                what=blocked[0], in_effect=_in_effect(framework)
            )
    gpus = snapshot.gpus if snapshot is not None and snapshot.nvml_available else KERNEL.gpus
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
            where = ", ".join(
                _("{size} on GPU {index}").format(size=format_bytes(process.memory or 0), index=gpu.index)
                for gpu, process in held
            )
            return "CUDA", _("NVML shows this kernel (PID {pid}) holding GPU memory: {where}").format(
                pid=os.getpid(), where=where
            )
    return None


def apply_plan(old: GpuPlan, new: GpuPlan) -> list[str]:
    """Make ``new`` the kernel's plan: environment, calls on imported frameworks, post-import hooks.

    The caller has checked :func:`too_late`. On a failing call everything is restored and a
    :class:`~jupyter_gpu.plan.PlanError` is raised. Returns the framework settings (set by code, or
    there before the first plan) that the plan replaces (``"XLA_PYTHON_CLIENT_PREALLOCATE='true'
    (now 'false')"``), for the magic to say so.
    """
    # What the plan may replace: values code set since the last plan, or (first plan) whatever was there.
    by_code = (
        settings_set_by_code()
        if KERNEL.written_env
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
            _("{framework} refused the plan ({error}); nothing was changed").format(
                framework=framework.name, error=f"{type(error).__name__}: {error}"
            )
        ) from error
    set_current_plan(new)
    KERNEL.plan_active = True
    if process_cuda_start() is None:
        KERNEL.written = CudaEnv.now()
        KERNEL.selection_changed = False
    KERNEL.written_env.clear()
    KERNEL.written_env.update(framework_env())
    KERNEL.missed[:] = [name for name in KERNEL.missed if name not in {framework.name for framework in done}]
    for framework in FRAMEWORKS:
        if framework in done:
            KERNEL.applied[framework.name] = new
        elif framework.state() is State.NOT_IMPORTED and not _hook_pending(framework):
            _import_hooks.when_imported(framework.module_name, framework.hook)
    written = KERNEL.written_env
    return [
        (
            _("{setting} (now unset)").format(setting=f"{key}={value!r}")
            if written[key] is None
            else _("{setting} (now {value})").format(setting=f"{key}={value!r}", value=repr(written[key]))
        )
        if value is not None
        else _("the removal of {variable}").format(variable=key)
        for key, value in by_code.items()
        if written.get(key) != value and not (value and written.get(key) and value in str(written[key]))
    ]


_READ = (State.INITIALIZED, State.CPU_ONLY)  # the framework has read its variables (GPU or CPU backend made)


def env_conflicts(framework: Framework, plan: GpuPlan | None = None) -> list[str]:
    """Why ``framework`` will not follow the plan because of its variables as they are now ([] when
    it will, or when it already read them: then changing them no longer matters)."""
    if not KERNEL.plan_active or framework.state() in _READ:
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
                _("{framework} will not follow the GPU plan ({plan}): {conflicts}.").format(
                    framework=framework.name,
                    plan=plan_words(plan) + _memory_words(plan),
                    conflicts=clauses(conflicts),
                )
            )
    return messages


def _memory_words(plan: GpuPlan) -> str:
    parts = [_("growth on")] if plan.growth else []
    if plan.limits_bytes:
        each = ", ".join(
            _("GPU {index}: {size}").format(index=index, size=format_bytes(plan.memory_limit_bytes(index) or 0))
            for index in plan.limits_bytes
        )
        parts.append(_("limit {limits}").format(limits=each))
    return clauses(["", *parts]) if parts else ""


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
            done.append((framework.name, _("release failed"), f"{type(error).__name__}: {error}"))
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
        return clauses(conflicts)
    if state is State.NOT_IMPORTED:
        return None if process_cuda_start() is None else planned_devices(framework, plan, gpus)[1]
    wanted = expected_devices(plan, gpus)
    if state is State.CPU_ONLY:
        if wanted.indices:
            return _("it runs on the CPU only: {reason}").format(reason=framework.cpu_only_reason())
        return None
    if state in (State.DEVICES_LISTED, State.INITIALIZED) and framework.built_with_gpu() is False and wanted.indices:
        return _("it sees no GPU: {hint}").format(hint=_(framework.gpu_build_hint))
    changed = selection_env_changed()
    if changed and framework.cuda_started() is False:
        return _("CUDA_VISIBLE_DEVICES/CUDA_DEVICE_ORDER were changed by code after the plan")
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
        return _("cannot tell which GPUs it uses: {reason}").format(reason=actual.shown_reason)
    if wanted.known and set(actual.indices or ()) != set(wanted.indices or ()):
        started = process_cuda_start()
        if started and started[0] is not UNKNOWN:
            return _("it uses {actual}, the plan says {wanted} (CUDA started with {start})").format(
                actual=actual.describe(), wanted=wanted.describe(), start=started[0].describe()
            )
        return _("it uses {actual}, the plan says {wanted}").format(actual=actual.describe(), wanted=wanted.describe())
    if state in (State.DEVICES_LISTED, State.INITIALIZED):
        try:
            settings = framework.settings_divergence(plan)
        except Exception:  # asking must never break a check
            settings = []
        if settings:
            return clauses(settings)
    return None


def check_after_cell(read_gpus: Callable[[], Sequence[Gpu]] | None = None) -> list[str]:
    """The check after every cell: warnings for what changed behind the magics' back.

    Cheap when nothing happened (the selection and framework variables in ``os.environ``, JAX's
    device flag, and each framework's state from ``sys.modules``: about 10 µs); compares a framework
    with the plan when it starts CUDA or initializes, when code changed one of its variables before
    it read them, and when code called one of its own setters that the plan also uses
    (``set_per_process_memory_fraction``, ``set_logical_device_configuration``,
    ``set_visible_devices``, ``jax_cuda_visible_devices``).
    """
    messages: list[str] = []
    if KERNEL.written is not None and (
        os.environ.get("CUDA_VISIBLE_DEVICES") != KERNEL.written.visible_devices
        or os.environ.get("CUDA_DEVICE_ORDER") != KERNEL.written.device_order
    ):
        KERNEL.selection_changed = True  # an unwatched CUDA start may have read these values
        changed = selection_env_changed()
        if changed and changed not in KERNEL.warned:
            KERNEL.warned.add(changed)
            messages.append(changed)
    late = _set_after_cuda_start()
    if late and late not in KERNEL.warned:
        KERNEL.warned.add(late)
        messages.append(late)
    if KERNEL.missed and cuda_start() is not None:
        KERNEL.missed.clear()  # CUDA read the variables code set: the plan's calls would now be wrong
    elif KERNEL.missed and KERNEL.written is not None and selection_env_changed() is None:
        messages.extend(_apply_missed())
    states = (TENSORFLOW.state(), TORCH.state(), JAX.state())
    if KERNEL.plan_active and settings_set_by_code():
        # Code changed a framework variable after the plan: a framework that had not read its
        # variables before this cell reads the new value (now, or when it starts the GPU).
        plan = current_plan()
        before = KERNEL.last_states or (State.NOT_IMPORTED,) * len(FRAMEWORKS)
        for framework, state in zip(FRAMEWORKS, before, strict=True):
            if state in _READ:
                continue
            conflicts = framework.env_conflicts(plan, framework_env())
            backend = keras_forcing_growth() if framework is TENSORFLOW else None
            if backend and forced_growth(plan, os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")):
                message = keras_growth_message(backend, plan)
            else:
                message = _(
                    "code in this kernel changed {framework}'s settings after the GPU plan "
                    "({plan}): {conflicts}. Run the magic "
                    "again (e.g. %gpu_limit) to build the plan on your value, or remove that assignment."
                ).format(
                    framework=framework.name, plan=plan_words(plan) + _memory_words(plan), conflicts=clauses(conflicts)
                )
            if conflicts and message not in KERNEL.warned:
                KERNEL.warned.add(message)
                messages.append(message)
    touched = [framework for framework in FRAMEWORKS if framework.settings_touched]
    for framework in touched:  # a setter called by code (e.g. set_per_process_memory_fraction): compare again
        framework.settings_touched = False
        if KERNEL.plan_active and framework.state() not in (State.NOT_IMPORTED, State.CPU_ONLY):
            problem = divergence(framework, current_plan(), KERNEL.gpus_or_read(read_gpus))
            message = _("{framework} does not follow the GPU plan ({plan}): {problem}.").format(
                framework=framework.name, plan=plan_words(current_plan()), problem=problem
            )
            if problem and message not in KERNEL.warned:
                KERNEL.warned.add(message)
                messages.append(message)
    if states == KERNEL.last_states and not touched:
        return messages
    KERNEL.last_states = states
    plan = current_plan()
    for framework, state in zip(FRAMEWORKS, states, strict=True):
        if state in (State.NOT_IMPORTED, State.IMPORTED) or (framework.name, state) in KERNEL.checked:
            continue
        KERNEL.checked.add((framework.name, state))
        if not KERNEL.plan_active:
            continue
        gpus = KERNEL.gpus_or_read(read_gpus)
        problem = divergence(framework, plan, gpus)
        if problem:
            words = plan_words(plan) if plan.selected_indices is not None else _("no selection")
            message = _("{framework} does not follow the GPU plan ({plan}): {problem}.").format(
                framework=framework.name, plan=words, problem=problem
            )
            if message not in KERNEL.warned:
                KERNEL.warned.add(message)
                messages.append(message)
    return messages


def _set_after_cuda_start() -> str | None:
    """A note when code set ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` after CUDA read them: the
    value has no effect on any framework of this process (None when unchanged or the same GPUs)."""
    start = cuda_start()
    if start is None or KERNEL.written is None:
        return None
    env, by = start
    now = CudaEnv.now()
    if env is UNKNOWN or now == env:
        return None
    if KERNEL.gpus and (same := cuda_devices(now, KERNEL.gpus)).known and same == cuda_devices(env, KERNEL.gpus):
        return None
    what = [
        f"{key}={new!r}" if new is not None else _("{variable} unset").format(variable=key)
        for key, old, new in (
            ("CUDA_VISIBLE_DEVICES", env.visible_devices, now.visible_devices),
            ("CUDA_DEVICE_ORDER", env.device_order, now.device_order),
        )
        if old != new
    ]
    return _(
        "code in this kernel set {what} after CUDA started ({by} started it with "
        "{values}): CUDA reads them once per process, so this has no effect on TensorFlow, PyTorch "
        "or JAX here. To use other GPUs, restart the kernel and run %gpu_select first."
    ).format(what=_(" and ").join(what), by=by, values=env.describe())


def _apply_missed() -> list[str]:
    """The selection variables are the plan's again: give the frameworks imported meanwhile the
    plan's calls they missed (caps, TensorFlow's devices), unless they already started their GPU."""
    notes = []
    plan = current_plan()
    by_name = {framework.name: framework for framework in FRAMEWORKS}
    for name in list(KERNEL.missed):  # in the order they were imported
        KERNEL.missed.remove(name)
        framework = by_name[name]
        module = sys.modules.get(framework.module_name)
        if module is None or framework.state() in (State.INITIALIZED, State.CPU_ONLY) or not KERNEL.plan_active:
            continue
        try:
            framework.apply(module, plan)
        except Exception as error:  # a check must never break the kernel; say what did not happen
            notes.append(
                _("{framework} did not take the plan's calls ({error}).").format(
                    framework=framework.name, error=f"{type(error).__name__}: {error}"
                )
            )
            continue
        KERNEL.applied[framework.name] = plan
    return notes


def _in_effect(framework: Framework) -> str:
    try:
        return framework.in_effect()
    except Exception as error:  # a status must never fail because a framework's query does
        return _("unknown ({error})").format(error=f"{type(error).__name__}: {error}")


def framework_statuses(gpus: Sequence[Gpu] = ()) -> list[tuple[Framework, str]]:
    """Each framework with its state in words, for ``%gpu_status`` ("plan applied" only when it is)."""
    plan = current_plan()
    gpus = gpus or KERNEL.gpus
    result = []
    for framework in FRAMEWORKS:
        state = framework.state()
        problem = divergence(framework, plan, gpus) if KERNEL.plan_active else None
        if KERNEL.plan_active and not problem and state is State.INITIALIZED:
            problem = clauses(framework.known_divergence(plan)) or None
        if state is State.NOT_IMPORTED:
            # Once CUDA started, a framework that cannot follow will not get the plan at its import either.
            waiting = _hook_pending(framework) and KERNEL.plan_active and not (problem and cuda_started())
            text = _("not imported; the plan is applied when it is imported") if waiting else _("not imported")
        elif state is State.INITIALIZED:
            applied_plan = KERNEL.applied.get(framework.name)
            if applied_plan is not None and gpu_settings(applied_plan) == gpu_settings(plan) and not problem:
                text = _("initialized with the plan applied; in effect: {in_effect}")
            elif applied_plan is not None and gpu_settings(applied_plan) == gpu_settings(plan):
                text = _("initialized; in effect: {in_effect}")
            else:
                text = _("initialized before the plan; in effect: {in_effect}")
            text = text.format(in_effect=_in_effect(framework))
        elif state is State.CPU_ONLY:
            text = _("{state}; in effect: {in_effect}").format(state=_(state.value), in_effect=_in_effect(framework))
        else:
            applied = framework.name in KERNEL.applied and KERNEL.applied[framework.name] == plan
            verdict = (
                _("{state}; plan NOT applied")
                if problem
                else _("{state}; plan applied")
                if applied
                else _("{state}; plan not applied yet")
            )
            text = verdict.format(state=_(state.value))
        if problem:
            text = _("{status} — does NOT follow the plan: {problem}").format(status=text, problem=problem)
        result.append((framework, text))
    return result


def cuda_status() -> str | None:
    """One line for ``%gpu_status`` once CUDA started in this process: who started it, with which
    variables, and that a new selection needs a restart (None before CUDA started)."""
    start = process_cuda_start()
    if start is None:
        return None
    env = start[0]
    values = _("values that cannot be told any more") if env is UNKNOWN else env.describe()
    return _(
        "started in this kernel by {who}, with {values}: CUDA read them once, for every "
        "framework of this process; another selection takes effect after a restart (%gpu_restart)"
    ).format(who=who_started(start), values=values)


_KERAS_BACKENDS = {"tensorflow": "TensorFlow", "torch": "PyTorch", "jax": "JAX"}


def keras_status() -> str | None:
    """One line for ``%gpu_status`` once Keras 3 is imported: its backend and which framework's line
    above says what it uses (Keras has no GPU settings of its own). None before ``import keras``.

    Read without side effects: ``keras.src.backend.config._BACKEND``, which Keras sets once at import
    from ``keras.json`` and then ``KERAS_BACKEND`` (what ``keras.config.backend()`` returns)."""
    config = sys.modules.get("keras.src.backend.config")
    if config is None:
        return None
    backend = getattr(config, "_BACKEND", None)
    if not isinstance(backend, str):
        return _("imported; its backend cannot be told")
    framework = _KERAS_BACKENDS.get(backend)
    shown = display_text(backend, 40)
    if framework is None:
        return _(
            "backend {backend}: not one jupyter_gpu configures (TensorFlow, PyTorch, JAX): the plan does not reach it"
        ).format(backend=shown)
    if forced_growth(current_plan(), os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")) and keras_forcing_growth():
        return _(
            "backend {backend}: Keras has no GPU settings of its own; it uses what {framework} above says; "
            "at import it set TF_FORCE_GPU_ALLOW_GROWTH=true (what that does: TensorFlow above)"
        ).format(backend=shown, framework=framework)
    return _("backend {backend}: Keras has no GPU settings of its own; it uses what {framework} above says").format(
        backend=shown, framework=framework
    )


def keras_growth_message(backend: str, plan: GpuPlan) -> str:
    """The warning when importing Keras (``backend`` not TensorFlow) turned TensorFlow's growth on."""
    return _(
        "importing Keras (backend {backend}) set TF_FORCE_GPU_ALLOW_GROWTH=true, so "
        "TensorFlow, if used as well (tf.data, tf.image), grows its GPU memory although the plan "
        "({plan}) says growth off. %gpu_select --growth makes growth "
        "the plan (sensible next to JAX or PyTorch); %gpu_select --no-growth turns it off again."
    ).format(backend=display_text(backend, 40), plan=plan_words(plan) + _memory_words(plan))


def reset_for_tests() -> None:
    """Forget every observation (plan applied, CUDA start, warnings): for tests in one process only."""
    KERNEL.reset()
