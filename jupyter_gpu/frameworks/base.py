"""What every framework adapter builds on: the :class:`Framework` interface, and what CUDA shows it.

:class:`Framework` is one framework's facts (its state from ``sys.modules``, its variables, its
calls) and its post-import hook. What a framework sees (or will see) is computed here, in one place,
from :mod:`jupyter_gpu.core.visibility`: the ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` in force
when CUDA started in this process (recorded by the wrappers :meth:`Framework.observe` puts around
the calls that start CUDA, through :func:`note_cuda_start`) and the device names a framework
reports (:func:`planned_devices`, :func:`actual_devices`). The kernel's memory of all this is
:data:`~jupyter_gpu.frameworks.state.KERNEL`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import ModuleType

from ..core.environ import environment_at_process_start
from ..core.i18n import N_, _
from ..core.visibility import (
    UNKNOWN,
    CudaEnv,
    DeviceMap,
    Gpu,
    cuda_devices,
    cuda_driver_loaded,
    cuda_start,
    cuda_start_call,
    record_cuda_start,
)
from ..plan import GpuPlan, current_plan
from .state import KERNEL

Environment = dict[str, "str | None"]  # None: the variable is removed


class State(str, Enum):
    """Where a framework is in this process, as :meth:`Framework.state` tells from ``sys.modules``.
    The values are marked text (``_(state.value)`` shows one in the user's language)."""

    NOT_IMPORTED = N_("not imported")
    IMPORTED = N_("imported, GPU not initialized")
    DEVICES_LISTED = N_("imported, GPUs listed (CUDA started), not initialized")
    CPU_ONLY = N_("initialized on the CPU only (no GPU backend)")
    INITIALIZED = N_("initialized")


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
        """Why the framework runs on the CPU only (state ``CPU_ONLY``): by default, its build
        (``gpu_build_hint``, marked text, in the user's language)."""
        return _(self.gpu_build_hint)

    def settings_divergence(self, plan: GpuPlan) -> list[str]:
        """Once initialized: what the framework uses now that differs from ``plan`` beyond the GPUs
        (a memory cap code set by hand), one clause each. Never imports or initializes anything."""
        return []

    def known_divergence(self, plan: GpuPlan) -> list[str]:
        """What differs from ``plan`` that was warned when it happened (a ``tf.compat.v1`` session's own
        config): ``%gpu_status`` says it, the check after the cell does not warn again."""
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
            return [_("the GPU selection, memory limit and growth")]
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
            warn_once(changed)  # and the plan's GPU calls are not made: nothing changes behind the warning
            if KERNEL.plan_active:
                KERNEL.missed.append(self.name)  # made once the variables are the plan's again (check_after_cell)
            return
        if KERNEL.plan_active:
            self.apply(module, current_plan())
            KERNEL.applied[self.name] = current_plan()


def gpu_settings(plan: GpuPlan) -> tuple[object, ...]:
    """What of ``plan`` an initialized framework can no longer change: selection, limits, growth."""
    return (plan.selected_indices, dict(plan.limits_bytes), plan.growth)


def fractions_differ(fractions: Sequence[float | None]) -> bool:
    """Whether memory shares differ between GPUs (None, uncapped, counts as 1): then which of CUDA's
    devices is which GPU matters. A percentage gives equal shares up to the bytes' rounding."""
    values = [1.0 if fraction is None else fraction for fraction in fractions]
    return bool(values) and max(values) - min(values) > 1e-4


def visible_order(plan: GpuPlan) -> tuple[int, ...]:
    """NVML indices of the GPUs the plan names, in its order (the selection, else all)."""
    if plan.selected_indices is not None:
        return plan.selected_indices
    return tuple(gpu.index for gpu in plan.gpus)


def remember_gpus(gpus: Sequence[Gpu]) -> None:
    """Keep the GPUs of the last snapshot, so checks after a cell need no NVML call."""
    KERNEL.remember_gpus(gpus)


def known_gpus() -> tuple[Gpu, ...]:
    """The GPUs of the last snapshot a magic took (empty before the first)."""
    return KERNEL.gpus


def note_cuda_start(by: str, module: str = "", call: str = "") -> None:
    """Called by the wrappers right before a framework starts CUDA: CUDA reads the variables now.
    ``module`` (``"torch"``) lets the record name the user's call that started it (from the stack),
    else ``call`` (the wrapped function itself, called from outside the framework)."""
    record_cuda_start(CudaEnv.now(), by, (starting_call(module) if module else "") or call)


# Public names of the calls that start CUDA, for a module path the stack shows.
_PUBLIC = {
    "tensorflow.python.framework.test_util.": "tf.test.",
    "tensorflow.python.framework.config.": "tf.config.",
    "tensorflow.python.client.device_lib.": "device_lib.",
    "tensorflow.python.client.session.": "tf.compat.v1.Session.",
    "jax._src.xla_bridge.": "jax.",
}


# The frameworks' own wrappers around public functions (deprecation notices, traceback filters).
_DECORATORS = ("util.deprecation", "util.traceback_utils", "util.tf_decorator", "util.dispatch", "_src.traceback_util")


def starting_call(module: str) -> str:
    """The outermost call into ``module`` on the current stack (the user's call, e.g.
    ``"torch.cuda.is_available()"``), or "" when the stack shows none. Run once per process."""
    frame = sys._getframe(1)
    outermost = None
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name == module or name.startswith(module + "."):
            if not name.endswith(_DECORATORS):
                outermost = frame
        elif outermost is not None:
            break
        frame = frame.f_back  # type: ignore[assignment]
    if outermost is None:
        return ""
    function = outermost.f_code.co_name
    path = f"{outermost.f_globals.get('__name__', module)}.{function}"
    for prefix, public in _PUBLIC.items():
        if path.startswith(prefix):
            path = public + path.removeprefix(prefix)
            break
    path = path.removesuffix(".__init__")
    if function.startswith("_") and function != "__init__":
        return _("its first GPU use ({path})").format(path=path)
    return f"{path}()"


def who_started(start: tuple[CudaEnv, str]) -> str:
    """``"PyTorch, at torch.cuda.is_available()"``: who started CUDA, and by which call where known."""
    call = cuda_start_call()
    return _("{who}, at {call}").format(who=start[1], call=call) if call else start[1]


def process_cuda_start() -> tuple[CudaEnv, str] | None:
    """``(the variables CUDA read, who started it)`` for this process, or None if CUDA has not started.

    A start no wrapper saw (a framework listed GPUs before ``%load_ext``, or a path jupyter_gpu does
    not wrap) is recorded now, from the one trace every path leaves, the CUDA driver mapped into the
    process (:func:`~jupyter_gpu.core.visibility.cuda_driver_loaded`, asked only while a framework is
    imported and no start is known; cached until the loader loads another library): with the values
    in force now if they are still those the kernel started with or the plan wrote (nothing changed
    them), else as unknown.
    """
    recorded = cuda_start()
    if recorded is not None:
        return recorded
    by = next((framework.name for framework in KERNEL.frameworks if framework.cuda_started()), None)
    if by is None:
        imported = [framework.name for framework in KERNEL.frameworks if framework.module_name in sys.modules]
        if not imported or not cuda_driver_loaded():
            return None
        unwatched = [name for name in KERNEL.unwatched if name in imported]
        by = unwatched[0] if unwatched else " or ".join(imported)
    else:
        unwatched = []
    now = CudaEnv.now()
    start = environment_at_process_start()
    at_start = CudaEnv(start.get("CUDA_VISIBLE_DEVICES"), start.get("CUDA_DEVICE_ORDER"))
    if KERNEL.unwatched or KERNEL.written is None:  # it may have started before jupyter_gpu watched
        unchanged = now == at_start and (KERNEL.written is None or KERNEL.written == now)
    else:  # since the extension loaded: what it wrote or found, unless code changed it meanwhile
        unchanged = now == KERNEL.written and not KERNEL.selection_changed
    unseen = _("a call jupyter_gpu does not watch (the CUDA driver is loaded)")
    call = "" if unwatched or by in KERNEL.unwatched else unseen
    record_cuda_start(now if unchanged else UNKNOWN, by, call)
    return cuda_start()


def selection_env_changed(magic: str | None = None) -> str | None:
    """A one-line warning when code changed ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` behind the
    magics' back before CUDA started (None when unchanged, or when CUDA already read them); with
    ``magic``, the refusal of that magic (which changes nothing then)."""
    if KERNEL.written is None or not KERNEL.plan_active:
        return None  # without a plan, the user's own CUDA_VISIBLE_DEVICES is simply the choice
    now = CudaEnv.now()
    if now == KERNEL.written or cuda_start() is not None:
        return None
    gpus = KERNEL.gpus
    if gpus and (same := cuda_devices(now, gpus)).known and same == cuda_devices(KERNEL.written, gpus):
        return None  # another spelling of the same GPUs in the same order (a UUID for an index)
    plan = current_plan()
    what = [
        f"{key}={new!r}" if new is not None else _("{variable} unset").format(variable=key)
        for key, old, new in (
            ("CUDA_VISIBLE_DEVICES", KERNEL.written.visible_devices, now.visible_devices),
            ("CUDA_DEVICE_ORDER", KERNEL.written.device_order, now.device_order),
        )
        if old != new
    ]
    seen = cuda_devices(now, KERNEL.gpus) if KERNEL.gpus else None
    sees = (
        _("the frameworks will see {gpus}").format(gpus=seen.describe())
        if seen is not None and seen.known
        else _("the frameworks will not see what the plan says")
    )
    source = (
        _("the plan ({plan})").format(plan=plan_words(plan))
        if plan.selected_indices is not None
        else _("the kernel's start")
    )
    what_changed = _("code in this kernel set {what} after {source}: {sees}, not the plan.").format(
        what=_(" and ").join(what), source=source, sees=sees
    )
    if magic is None:
        advice = _("Run %gpu_select with the GPUs you want (it replaces the value), or remove that assignment.")
    else:
        advice = _(
            "{magic} changes nothing; run %gpu_select with the GPUs you want (it replaces the value), "
            "or remove that assignment."
        ).format(magic=magic)
    return f"{what_changed} {advice}"


def plan_words(plan: GpuPlan) -> str:
    if plan.selected_indices is None:
        return _("no selection")
    if plan.selected_indices == ():
        return _("CPU only")
    return _("GPU {indices}").format(indices=",".join(map(str, plan.selected_indices or ())))


def warn_once(message: str) -> None:
    if message in KERNEL.warned:
        return
    KERNEL.warned.add(message)
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
            _(
                "{who} started CUDA before jupyter_gpu watched, and the CUDA variables were "
                "changed since the kernel started"
            ).format(who=by),
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
    shown = cuda.indices
    started = process_cuda_start()
    if shown is None:
        return cuda, _("cannot tell which GPU is which: {reason}").format(reason=cuda.shown_reason)
    figures = {"who": who_started(started) if started else "", "gpus": cuda.describe(), "framework": framework.name}
    wanted = expected.indices if expected.indices is not None else shown
    if framework.can_narrow:
        missing = [index for index in wanted if index not in shown]
        narrowed = tuple(index for index in shown if index in wanted)
        if missing:
            problem = (
                _("CUDA already started in this kernel (by {who}) showing {gpus} only, so GPU {index} cannot be added")
                if started
                else _("CUDA started showing {gpus} only, so GPU {index} cannot be added")
            )
            return DeviceMap(narrowed), problem.format(index=missing[0], **figures)
        return DeviceMap(narrowed), None
    if set(shown) != set(wanted):
        problem = (
            _("CUDA already started in this kernel (by {who}) showing {gpus}, and {framework} cannot narrow that")
            if started
            else _("CUDA started showing {gpus}, and {framework} cannot narrow that")
        )
        return cuda, problem.format(**figures)
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
