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

``tf.compat.v1`` sessions: a session made with a ``ConfigProto`` of the user's (``Session(config=…)``,
``InteractiveSession``, which makes one of its own) gets only that config's GPU options, not the
eager context's. The wrapper around ``BaseSession.__init__`` therefore passes a copy of the user's
config with the plan (the eager context's visible GPUs, virtual devices with the plan's limits,
growth) filled into every GPU field the user left unset; a field the user set that contradicts the
plan (``per_process_gpu_memory_fraction`` or ``virtual_devices`` next to ``%gpu_limit``,
``device_count={'GPU': 0}``, a ``visible_device_list`` outside the selection) is kept and warned
once, and ``%gpu_status`` lists every open session with the GPUs, memory and growth it uses.
Growth is read from ``Context._memory_growth_map`` (``set_memory_growth``), never by listing.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..core.i18n import N_, _, ngettext, pgettext
from ..core.text import clauses, display_text, listed
from ..core.units import MIB, format_bytes
from ..core.visibility import cuda_devices
from ..plan import GpuPlan, current_plan
from .base import (
    DeviceMemory,
    Environment,
    Framework,
    State,
    expected_devices,
    known_gpus,
    note_cuda_start,
    plan_words,
    planned_devices,
    process_cuda_start,
    visible_order,
    warn_once,
)
from .state import KERNEL

_CONTEXT_MODULE = "tensorflow.python.eager.context"
_SESSION_MODULE = "tensorflow.python.client.session"
_DEVICE_LIB_MODULE = "tensorflow.python.client.device_lib"
_WRAPPED = "_jupyter_gpu_wrapped"


class TensorFlow(Framework):
    name = "TensorFlow"
    module_name = "tensorflow"
    env_keys = ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
    can_narrow = True
    gpu_build_hint = N_(
        "this TensorFlow has no GPU support (tensorflow-cpu, or CUDA libraries missing): "
        "pip install 'tensorflow[and-cuda]' and restart the kernel"
    )

    def __init__(self) -> None:
        self._ours: dict[Any, list[int]] = {}  # logical configurations the magics set, by device
        self._our_visible: list[Any] | None = None  # the visible GPUs the magics set last
        self.sessions = _Sessions(self)  # the tf.compat.v1 sessions made while jupyter_gpu watched

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

                def __init__(session: Any, target: Any = "", graph: Any = None, config: Any = None) -> None:
                    if getattr(session, _WRAPPED, False):
                        # an inner copy of this wrapper: another library wrapped ours and we wrapped it again
                        original_init(session, target, graph, config)
                        return
                    setattr(session, _WRAPPED, True)
                    note_cuda_start(self.name, "tensorflow", "tf.compat.v1.Session()")
                    given = config
                    config = self.sessions.config(config)
                    original_init(session, target, graph, config)
                    self.sessions.note(session, given)

                setattr(__init__, _WRAPPED, True)
                cls.__init__ = __init__

    def known_divergence(self, plan: GpuPlan) -> list[str]:
        """Each open ``tf.compat.v1`` session's fields that contradict the plan (warned when it was made)."""
        return self.sessions.known_divergence(plan)

    def settings_divergence(self, plan: GpuPlan) -> list[str]:
        """The plan's memory limits that TensorFlow's config no longer holds: code called
        ``tf.config.set_logical_device_configuration`` after the magic (the last call wins); and
        growth forced on behind a plan without growth (:func:`forced_growth`)."""
        context = self._context()
        if context is None or context._physical_devices is None or plan != current_plan():
            return []
        growth = forced_growth(plan, os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"))
        problems = [growth] if growth else []
        for gpu, ours in self._ours.items():
            current = [c.memory_limit for c in context._virtual_device_map.get(gpu, [])]
            if gpu in context._visible_device_list and current != ours:
                problems.append(
                    _("{gpu} has logical devices of {sizes} (set by code), the plan {planned}").format(
                        gpu=_names([gpu]), sizes=_mib(current) or _("no limit"), planned=_mib(ours)
                    )
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
        called = _("nothing to call (Keras not imported)")
        if keras is not None and hasattr(getattr(keras, "backend", None), "clear_session"):
            keras.backend.clear_session()
            called = "keras.backend.clear_session()"
        if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true":
            return called, _(
                "with memory growth TensorFlow grew its pool on demand, and it never gives it back: freed "
                "tensors are reused by TensorFlow, the memory is not returned to the driver; only a restart "
                "of the kernel returns it"
            )
        return called, _(
            "without memory growth TensorFlow took nearly the whole GPU at its start: freed tensors are "
            "reused by TensorFlow, the memory is not returned to the driver; only a restart of the kernel "
            "returns it"
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
            if value is None:
                return [
                    _(
                        "TF_FORCE_GPU_ALLOW_GROWTH is unset, and TensorFlow grows memory only with exactly "
                        "'true' (the plan's growth)"
                    )
                ]
            return [
                _(
                    "TF_FORCE_GPU_ALLOW_GROWTH is {value}, and TensorFlow grows memory only with exactly "
                    "'true' (the plan's growth)"
                ).format(value=repr(value))
            ]
        growth = forced_growth(plan, value)
        return [growth] if growth else []

    def blocking_changes(self, old: GpuPlan, new: GpuPlan) -> list[str]:
        blocked = super().blocking_changes(old, new)
        if self.state() is State.INITIALIZED:
            threads = ("intra_op_threads", "inter_op_threads")
            if any(getattr(old.request, name) != getattr(new.request, name) for name in threads):
                blocked.append(_("the number of threads"))
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
        devices_listed = context is not None and context._physical_devices is not None
        configured = context is not None and bool(context._virtual_device_map)
        if not (plan.limits_bytes or devices_listed or configured or process_cuda_start() is not None):
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
                    _(
                        "jupyter_gpu: replacing the visible GPUs set by hand ({by_hand}) with the plan's ({planned})."
                    ).format(by_hand=_names(visible_now), planned=_names(wanted))
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
                    _(
                        "jupyter_gpu: replacing the logical devices set by hand on {gpu} ({by_hand}) with the "
                        "plan's ({planned})."
                    ).format(gpu=gpu.name, by_hand=_mib(current), planned=_mib(limits) or _("none"))
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
                _(
                    "jupyter_gpu: the memory growth set by hand on {gpus} does not hold next to a memory limit "
                    "in TensorFlow; use %gpu_select --growth (TF_FORCE_GPU_ALLOW_GROWTH keeps both)."
                ).format(gpus=_names(growth_by_hand))
            )

    def in_effect(self) -> str:
        """What TensorFlow uses now: the eager context's visible GPUs, memory limits and growth (read
        from its fields, nothing listed), then each open ``tf.compat.v1`` session's own."""
        context = self._context()
        sessions = self.sessions.words()
        if context is None or context._physical_devices is None:
            return clauses(sessions) if sessions else _("nothing yet")
        physical = [device for device in context._physical_devices if device.device_type == "GPU"]
        cuda = self.cuda_order()
        labels, number = {}, 0  # TensorFlow's logical /GPU:k over the visible GPUs, a split GPU once per part
        for device in context._visible_device_list:
            if device.device_type == "GPU" and device in physical:
                count = max(1, len(context._virtual_device_map.get(device, ())))
                labels[device] = tf_device_label(number, count, _nvml_of(physical.index(device), cuda))
                number += count
        visible = list(labels.values())
        devices = _("visible GPUs {gpus}").format(gpus=listed(visible)) if visible else _("no visible GPU (CPU only)")
        if sessions:  # the sessions below have their own devices and caps
            devices = _("eager: {devices}").format(devices=devices)
        parts = [devices]

        def limited(device: Any) -> str:
            if device in labels:
                return labels[device]
            nvml = _nvml_of(physical.index(device), cuda) if device in physical else None
            name = device.name.removeprefix("/physical_device:")
            return _("{device}, not visible").format(device=name if nvml is None else f"{name} (GPU {nvml})")

        limits = {
            limited(device): [c.memory_limit for c in configs]
            for device, configs in context._virtual_device_map.items()
            if device.device_type == "GPU"
        }
        if limits:
            each = [_sized(gpu, " + ".join(format_bytes(m * MIB) for m in limit)) for gpu, limit in limits.items()]
            parts.append(_("memory limits {limits}").format(limits=clauses(each)))
        parts.append(_growth_words(context))
        parts.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', _('(unset)'))}")
        return clauses([pgettext("clause comma", ", ").join(parts), *sessions])

    def cuda_order(self) -> tuple[int, ...] | None:
        """The NVML index of each CUDA device TensorFlow lists (its ``/physical_device:GPU:k`` is entry
        k), from the variables CUDA read when it started; None before CUDA started or when unknown."""
        start = process_cuda_start()
        gpus = known_gpus()
        mapping = cuda_devices(start[0], gpus, self.device_names()) if start and gpus else None
        return None if mapping is None else mapping.indices

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

    def logical_gpus(self, plan: GpuPlan, gpus: Any = ()) -> list[int] | None:
        """The NVML index behind each of TensorFlow's logical GPUs once ``plan`` is applied, in
        TensorFlow's order (``/GPU:k`` is entry k; a GPU split by ``%gpu_limit A B`` appears once per
        logical GPU); None when that cannot be told (no selection: CUDA's own order; or TensorFlow
        will not follow the plan)."""
        devices, problem = planned_devices(self, plan, gpus)
        if problem is not None or plan.selected_indices is None:
            return None
        order = visible_order(plan) if devices.indices is None else devices.indices
        return [index for index in order for _ in range(max(1, len(plan.logical_limits_bytes(index))))]


class _Sessions:
    """The ``tf.compat.v1`` sessions of the kernel: the plan merged into their configs, what each uses."""

    def __init__(self, owner: TensorFlow) -> None:
        self.owner = owner
        self.records: list[_Session] = []  # every session made while jupyter_gpu watched

    # -- tf.compat.v1 sessions -------------------------------------------------------------------
    #
    # ``BaseSession.__init__`` (tensorflow/python/client/session.py) takes ``config`` as given and
    # only falls back to ``context.context().config`` (the eager context's devices, virtual devices
    # and growth: what the plan configured) when it is None. ``InteractiveSession`` replaces a
    # missing config with ``ConfigProto(gpu_options=GPUOptions(allow_growth=True))`` before that.
    # So a session with a config of the user's gets none of the plan unless it is merged in here.

    def config(self, config: Any) -> Any:
        """The config a session is made with: a copy of the user's ``config`` with the plan filled into
        every GPU field the user left unset (visible GPUs, virtual devices with the plan's memory
        limits, growth), as ``context.context().config`` would have them. The user's object is not
        changed; on any failure the user's config is used as it is and one line says so."""
        if config is None or not KERNEL.plan_active or not hasattr(config, "gpu_options"):
            return config  # not a ConfigProto: TensorFlow's own TypeError says so
        try:
            return _merged(config, self.owner._context())
        except Exception as error:  # a session must be made whatever happens here
            _say(
                _(
                    "jupyter_gpu: could not merge the GPU plan into this session's ConfigProto ({error}); the "
                    "session uses your config as it is."
                ).format(error=f"{type(error).__name__}: {error}")
            )
            return config

    def note(self, session: Any, given: Any) -> None:
        """Remember what ``session`` uses (from the config it was made with), and warn once if a field
        the user set contradicts the plan."""
        try:
            config = getattr(session, "_config", None)
            if config is None:
                return
            number = len(self.records) + 1
            forced = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
            conflicts = self.use(config, given, forced)[1]
            record = _Session(weakref.ref(session), number, type(session).__name__, config, forced, conflicts)
            self.records.append(record)
        except Exception:  # describing must never break the user's session
            return
        if conflicts:
            warn_once(
                _(
                    "TensorFlow {session} does not follow the GPU plan ({plan}): {conflicts}. Leave that field "
                    "unset in the ConfigProto to get the plan's value (jupyter_gpu fills in every GPU field you "
                    "leave unset), or change the plan with the magics."
                ).format(
                    session=f"{record.kind} {number}",
                    plan=_plan_and_limit(current_plan()),
                    conflicts=clauses(conflicts),
                )
            )

    def use(self, config: Any, given: Any, forced: str | None) -> tuple[str, list[str]]:
        """What a session made with ``config`` (``TF_FORCE_GPU_ALLOW_GROWTH`` was ``forced`` then)
        uses, in words, and the fields of the user's own config (``given``) that contradict the plan
        (one clause each; none without a plan or ``given``)."""
        options = config.gpu_options
        gpus = known_gpus()
        cuda = self.owner.cuda_order()
        in_list = [int(p) for p in options.visible_device_list.split(",") if p.strip().isdigit()]
        hidden = "GPU" in config.device_count and config.device_count["GPU"] == 0
        positions: list[int] | None = [] if hidden else in_list or (list(range(len(cuda))) if cuda else None)
        used = None if positions is None or cuda is None else [cuda[p] for p in positions if p < len(cuda)]

        virtual = list(options.experimental.virtual_devices)
        labels, number = {}, 0  # the session's own /GPU:k: its listed GPUs in order, a split GPU once per part
        for at, position in enumerate(positions or ()):
            count = max(1, len(virtual[at].memory_limit_mb)) if at < len(virtual) else 1
            labels[position] = tf_device_label(number, count, _nvml_of(position, cuda))
            number += count

        def gpu(position: int) -> str:
            return labels.get(position) or _("CUDA device {position}").format(position=position)

        if positions is None:
            where = _("every GPU CUDA shows")
        elif not positions:
            where = _("no GPU ({setting})").format(setting=_HIDDEN) if hidden else _("no GPU")
        else:
            where = listed([gpu(p) for p in positions])
        sized = [
            _sized(gpu(p), " + ".join(format_bytes(int(m * MIB)) for m in v.memory_limit_mb))
            for p, v in zip(positions or (), virtual, strict=False)
            if v.memory_limit_mb
        ]
        if virtual and positions and sized:
            memory = _("limit {limits}").format(limits=listed(sized))
        elif options.per_process_gpu_memory_fraction and positions != [] and not (virtual and positions):
            memory = _("{share} of each GPU (per_process_gpu_memory_fraction)").format(
                share=f"{options.per_process_gpu_memory_fraction:.0%}"
            )
        else:
            memory = _("no limit")
        setting = f"TF_FORCE_GPU_ALLOW_GROWTH={forced}"
        if forced == "true":
            growth = _("growth on ({setting})").format(setting=setting)
        elif forced == "false":
            growth = _("growth off ({setting})").format(setting=setting)
        else:
            growth = _("growth on (allow_growth in its ConfigProto)") if options.allow_growth else _("growth off")
        uses = clauses([where, memory, growth]) if positions != [] else where
        if not KERNEL.plan_active or given is None:
            return uses, []
        plan = current_plan()
        theirs = given.gpu_options
        wanted = _expected(plan, gpus)
        conflicts = []
        if hidden and wanted:
            conflicts.append(
                _("{setting} in your ConfigProto: this session uses no GPU, the plan {gpus}").format(
                    setting=_HIDDEN, gpus=_gpus(wanted)
                )
            )
        elif theirs.visible_device_list and used is not None and wanted is not None:
            outside = [index for index in used if index not in wanted]
            if outside:
                conflicts.append(
                    _("{setting} in your ConfigProto: this session uses {used}, outside the plan's {gpus}").format(
                        setting=f"visible_device_list={theirs.visible_device_list!r}",
                        used=_gpus(used),
                        gpus=_gpus(wanted),
                    )
                )
        if plan.limits_bytes and not hidden:
            if theirs.per_process_gpu_memory_fraction:
                conflicts.append(
                    _("{setting} in your ConfigProto overrides %gpu_limit {limit} for this session").format(
                        setting=f"per_process_gpu_memory_fraction={theirs.per_process_gpu_memory_fraction:g}",
                        limit=_limit_sizes(plan),
                    )
                )
            elif theirs.experimental.virtual_devices and [
                list(v.memory_limit_mb) for v in theirs.experimental.virtual_devices
            ] != _plan_virtual(plan, positions, cuda):
                conflicts.append(
                    _("{setting} in your ConfigProto ({memory}) overrides %gpu_limit {limit} for this session").format(
                        setting="gpu_options.experimental.virtual_devices", memory=memory, limit=_limit_sizes(plan)
                    )
                )
        return uses, conflicts

    def live(self) -> list[_Session]:
        """The sessions made while jupyter_gpu watched that are still open."""
        live = []
        for record in self.records:
            session = record.ref()
            if session is not None and not getattr(session, "_closed", False):
                live.append(record)
        return live

    def known_divergence(self, plan: GpuPlan) -> list[str]:
        """Each open session's fields that contradict the plan (warned when the session was made)."""
        if plan != current_plan():
            return []
        return [_sized(f"{r.kind} {r.number}", clauses(r.conflicts)) for r in self.live() if r.conflicts]

    def words(self) -> list[str]:
        words = [_sized(f"{r.kind} {r.number}", self.use(r.config, None, r.forced)[0]) for r in self.live()]
        unseen = self.owner._sessions_created() - len(self.records)
        if unseen > 0:
            words.append(
                ngettext(
                    "{count} session made before jupyter_gpu watched (its devices and caps are not known)",
                    "{count} sessions made before jupyter_gpu watched (its devices and caps are not known)",
                    unseen,
                ).format(count=unseen)
            )
        return words


@dataclass(frozen=True)
class _Session:
    """A ``tf.compat.v1`` session jupyter_gpu saw made: what it uses and what of it contradicts the plan."""

    ref: weakref.ref[Any]
    number: int
    kind: str  # Session, InteractiveSession
    config: Any  # the ConfigProto it was made with (the plan merged in)
    forced: str | None  # TF_FORCE_GPU_ALLOW_GROWTH then
    conflicts: list[str]


def _merged(config: Any, context: Any) -> Any:
    """A copy of ``config`` with the eager context's GPU configuration (what the plan's calls set:
    visible GPUs, virtual devices, growth) in every field ``config`` leaves unset, as
    ``Context._compute_gpu_options`` (tensorflow/python/eager/context.py) builds them for
    ``Session()``: ``visible_device_list`` are TensorFlow's physical GPU numbers (CUDA's), one
    ``VirtualDevices`` entry per visible GPU (an empty one: the whole GPU), growth only without
    virtual devices. ``per_process_gpu_memory_fraction`` set by the user keeps the plan's virtual
    devices out (TensorFlow reads the fraction only without them: the user's choice wins, and is warned)."""
    merged = type(config)()
    merged.CopyFrom(config)
    if context is None or context._physical_devices is None:
        return merged  # the context holds nothing: CUDA_VISIBLE_DEVICES and TF_FORCE_GPU_ALLOW_GROWTH carry the plan
    options = merged.gpu_options
    physical = [device for device in context._physical_devices if device.device_type == "GPU"]
    visible = [position for position, device in enumerate(physical) if device in context._visible_device_list]
    if not options.visible_device_list and visible != list(range(len(physical))):
        options.visible_device_list = ",".join(map(str, visible))
    positions = [int(p) for p in options.visible_device_list.split(",") if p.strip().isdigit()]
    positions = positions or list(range(len(physical)))
    limits = [
        [c.memory_limit for c in context._virtual_device_map.get(physical[p], [])] if p < len(physical) else []
        for p in positions
    ]
    if not options.experimental.virtual_devices and not options.per_process_gpu_memory_fraction and any(limits):
        options.visible_device_list = ",".join(map(str, positions))  # one VirtualDevices entry per listed GPU
        for sizes in limits:
            options.experimental.virtual_devices.add().memory_limit_mb.extend(float(m) for m in sizes)
    growth = [context._memory_growth_map.get(physical[p]) for p in positions if p < len(physical)]
    if not options.allow_growth and not options.experimental.virtual_devices and growth and all(growth):
        options.allow_growth = True
    return merged


def keras_forcing_growth() -> str | None:
    """The Keras backend that set ``TF_FORCE_GPU_ALLOW_GROWTH=true`` (``"jax"``, ``"torch"``), or None.

    Keras 3 does it at import for every backend but TensorFlow (``keras/src/backend/config.py``:
    ``if _BACKEND != "tensorflow": os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"``), whatever the
    variable held. Read from ``sys.modules`` only: nothing is imported."""
    config = sys.modules.get("keras.src.backend.config")
    backend = getattr(config, "_BACKEND", None)
    if not isinstance(backend, str) or backend == "tensorflow":
        return None
    return backend if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" else None


def forced_growth(plan: GpuPlan, value: str | None) -> str | None:
    """Why TensorFlow grows its memory although ``plan`` says growth off: ``TF_FORCE_GPU_ALLOW_GROWTH``
    is ``true`` and the plan did not leave it so (Keras with another backend, or code, set it since).
    None when it is not so (a value the kernel started with is the plan's baseline, not a change)."""
    if plan.growth or value != "true" or KERNEL.written_env.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true":
        return None
    backend = keras_forcing_growth()
    if backend:
        return _(
            "TF_FORCE_GPU_ALLOW_GROWTH=true (set by Keras at import: its backend is {backend}) makes it grow its "
            "memory, and the plan says growth off"
        ).format(backend=display_text(backend, 40))
    return _("TF_FORCE_GPU_ALLOW_GROWTH=true makes it grow its memory, and the plan says growth off")


def tf_device_label(number: int, count: int = 1, nvml: int | None = None) -> str:
    """TensorFlow's name for a GPU with nvidia-smi's number beside it: ``/GPU:0 (GPU 3)``, or
    ``/GPU:0…/GPU:1 (GPU 3)`` for a GPU split into ``count`` logical GPUs (``nvml`` None: not known)."""
    names = f"/GPU:{number}" if count == 1 else f"/GPU:{number}…/GPU:{number + count - 1}"
    return names if nvml is None else f"{names} (GPU {nvml})"


def _nvml_of(position: int, cuda: tuple[int, ...] | None) -> int | None:
    """The NVML index of CUDA device ``position`` (None when the order is not known)."""
    return cuda[position] if cuda is not None and 0 <= position < len(cuda) else None


#: The ConfigProto field that hides every GPU from a session (code: shown as it is written).
_HIDDEN = "device_count={'GPU': 0}"


def _limit_sizes(plan: GpuPlan) -> str:
    """``"4 GiB"`` (the same on every GPU) or ``"GPU 2: 4 GiB, GPU 3: 2 GiB + 2 GiB"``; ``""`` without limits."""
    each = {index: " + ".join(format_bytes(size) for size in sizes) for index, sizes in plan.limits_bytes.items()}
    if len(set(each.values())) == 1:
        return next(iter(each.values()))
    return listed([_("GPU {index}: {size}").format(index=index, size=words) for index, words in each.items()])


def _plan_and_limit(plan: GpuPlan) -> str:
    """``"GPU 1; limit 4 GiB"``: the plan's selection and, when it has one, its memory limit."""
    if not plan.limits_bytes:
        return plan_words(plan)
    return clauses([plan_words(plan), _("limit {limits}").format(limits=_limit_sizes(plan))])


def _sized(what: str, value: str) -> str:
    """``"/GPU:0 (GPU 3): 4 GiB"``, ``"Session 1: …"``: a thing and what it has (a full-width colon in Chinese)."""
    return _("{what}: {value}").format(what=what, value=value)


def _gpus(indices: Any) -> str:
    """``"GPU 1, GPU 2"``."""
    return listed([_("GPU {index}").format(index=index) for index in indices])


def _mib(sizes: list[int]) -> str:
    """TensorFlow's logical device sizes as it takes them: ``"2048 MiB + 2048 MiB"`` (``""``: none)."""
    return " + ".join(f"{size} MiB" for size in sizes)


def _plan_virtual(plan: GpuPlan, positions: list[int] | None, cuda: tuple[int, ...] | None) -> list[list[float]]:
    """The ``memory_limit_mb`` lists the plan gives the GPUs at ``positions`` (CUDA's numbers)."""
    if positions is None or cuda is None:
        return []
    return [[float(size // MIB) for size in plan.logical_limits_bytes(cuda[p])] for p in positions if p < len(cuda)]


def _expected(plan: GpuPlan, gpus: Any) -> tuple[int, ...] | None:
    return expected_devices(plan, gpus).indices


def _names(devices: list[Any]) -> str:
    return listed([device.name.removeprefix("/physical_device:") for device in devices]) or _("none")


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _text(value: int | None, default: str | None) -> str | None:
    return default if value is None else str(value)


def _growth_words(context: Any) -> str:
    """TensorFlow's real memory growth for the eager context's visible GPUs, in words.

    ``TF_FORCE_GPU_ALLOW_GROWTH`` (exactly ``true``/``false``) overrides the config when the GPU
    allocator is made. Otherwise the config's ``allow_growth`` decides, which
    ``Context._compute_device_options`` (tensorflow/python/eager/context.py) takes from
    ``Context._memory_growth_map`` (one entry per physical device, set by
    ``tf.config.experimental.set_memory_growth``), and only when no visible GPU has virtual devices.
    Read from the fields: nothing is listed or initialized."""
    forced = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if forced in ("true", "false"):
        return f"TF_FORCE_GPU_ALLOW_GROWTH={forced}"
    gpus = [device for device in context._visible_device_list if device.device_type == "GPU"]
    if not gpus or any(device in context._virtual_device_map for device in gpus):
        return _("growth off")
    growth_map = getattr(context, "_memory_growth_map", None) or {}
    on = [device for device in gpus if growth_map.get(device)]
    if not on:
        return _("growth off")
    if len(on) == len(gpus):
        return _("growth on (set by your code: tf.config.experimental.set_memory_growth)")
    return _(
        "growth on {gpus} only (set by your code): TensorFlow refuses different growth on its GPUs at its first op"
    ).format(gpus=_names(on))


def _growth_set_by_hand() -> bool:
    """Whether TensorFlow's config has memory growth on for every GPU it listed (no side effect)."""
    context_module = sys.modules.get("tensorflow.python.eager.context")
    ctx = None if context_module is None else context_module.context_safe()
    growth = getattr(ctx, "_memory_growth_map", None) or {}
    return bool(growth) and all(growth.values())


TENSORFLOW = TensorFlow()
