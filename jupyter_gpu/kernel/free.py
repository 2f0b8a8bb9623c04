"""``%gpu_free``'s core: what keeps framework memory alive, and measuring what dropping it returned.

After an error or a finished experiment, GPU memory stays taken by references nobody sees:
IPython's output cache (``Out``, ``_``, ``__``, ``___``), the frames of the failed cell's
traceback (``sys.last_traceback``: every local of every frame, tensors included), and each
framework's own cache. :func:`measure` takes what NVML and the frameworks say (and the process's
resident memory, for CPU tensors), :func:`track` follows the framework arrays reachable from what
is about to be dropped, and :func:`release` clears traceback frames and calls each *already
imported and initialized* framework's own release (:func:`jupyter_gpu.frameworks.release_memory`).

Nothing here imports a framework: arrays are recognised through the framework modules already in
``sys.modules``. What a framework cannot return to the driver is said, not hidden: TensorFlow keeps
its pool until the kernel restarts; JAX keeps a preallocated pool.
"""

from __future__ import annotations

import gc
import inspect
import os
import sys
import traceback
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from types import TracebackType
from typing import Any

from ..core.i18n import _, ngettext, pgettext
from ..core.messages import shown as shown_message
from ..core.text import display_text
from ..core.units import format_bytes

__all__ = ["Measure", "Tracked", "array_info", "free_memory", "measure", "release", "traceback_frames", "track"]

_CONTAINER_LIMIT = 10_000
_FRAMEWORK_MODULES = ("torch", "tensorflow", "jax")
_NAME_CHARS = 40  # a GPU name, as the magics show it


@dataclass(frozen=True)
class Measure:
    """The memory this kernel holds at one moment."""

    nvml: dict[int, int] = field(default_factory=dict)  # NVML index → bytes NVML shows this process holding
    gpu_names: dict[int, str] = field(default_factory=dict)
    counters: dict[str, dict[str, tuple[int, int | None]]] = field(default_factory=dict)  # framework → device
    rss: int | None = None  # resident memory of the process (CPU tensors live there)
    nvml_error: str | None = None
    # This user's `jupyter-gpu run`s: (NVML index, "train.py (jupyter-gpu run), 2 h") → bytes NVML shows
    runs: dict[tuple[int, str], int] = field(default_factory=dict)


def measure() -> Measure:
    """NVML's figure for this process per GPU, each initialized framework's counters, and the RSS."""
    from ..sources.nvml import snapshot

    snap = snapshot()
    nvml: dict[int, int] = {}
    names = {}
    for gpu, process in snap.processes_of(os.getpid()) if snap.nvml_available else ():
        nvml[gpu.index] = nvml.get(gpu.index, 0) + (process.memory or 0)
        names[gpu.index] = gpu.name
    counters = {}
    if any(name in sys.modules for name in _FRAMEWORK_MODULES):
        from ..frameworks import framework_memory

        counters = {
            framework: {device: (memory.in_use, memory.held) for device, memory in devices.items()}
            for framework, devices in framework_memory().items()
        }
    try:
        import psutil

        rss = int(psutil.Process().memory_info().rss)
    except Exception:
        rss = None
    return Measure(nvml, names, counters, rss, None if snap.nvml_available else snap.error, _runs(snap))


def _runs(snap: Any) -> dict[tuple[int, str], int]:
    """This user's runs' memory per GPU (from the runs' own claims); empty when claims are off or
    unreadable. Never raises: the report goes on without them."""
    if not snap.nvml_available:
        return {}
    try:
        from ..sources.claims import viewer
        from ..sources.processes import current_user

        runs = viewer(snap.gpus, current_user()).runs
    except Exception:
        return {}
    held: dict[tuple[int, str], int] = {}
    for gpu in snap.gpus:
        for process in gpu.processes:
            if process.pid in runs:
                key = (gpu.index, runs[process.pid])
                held[key] = held.get(key, 0) + (process.memory or 0)
    return held


def array_info(value: Any) -> tuple[str, str, int, int] | None:
    """``(framework, device, bytes, identity)`` of a framework array, from the modules already imported."""
    module = type(value).__module__ or ""
    try:
        if module.startswith("torch") and "torch" in sys.modules and isinstance(value, sys.modules["torch"].Tensor):
            storage = value.untyped_storage()
            return "PyTorch", str(value.device), int(storage.nbytes()), int(storage.data_ptr()) or id(value)
        if (
            module.startswith(("jax", "jaxlib"))
            and "jax" in sys.modules
            and isinstance(value, sys.modules["jax"].Array)
        ):
            devices = sorted(str(device) for device in value.devices())
            return "JAX", ",".join(devices), int(value.nbytes), id(value)
        if module.startswith("tensorflow") and "tensorflow" in sys.modules:
            tf = sys.modules["tensorflow"]
            if isinstance(value, (tf.Tensor, tf.Variable)) and value.shape.num_elements() is not None:
                return (
                    "TensorFlow",
                    str(value.device) or "?",
                    int(value.shape.num_elements() * value.dtype.size),
                    id(value),
                )
    except Exception:
        return None
    return None


def _expand(value: Any) -> Iterable[Any]:
    """The value, and one level into containers and PyTorch modules (their parameters and buffers)."""
    yield value
    if isinstance(value, dict):
        yield from list(islice(value.values(), _CONTAINER_LIMIT))  # a huge container: its first items only
    elif isinstance(value, (list, tuple, set, frozenset)):
        yield from list(islice(value, _CONTAINER_LIMIT))
    elif "torch" in sys.modules and isinstance(value, sys.modules["torch"].nn.Module):
        yield from value.parameters()
        yield from value.buffers()


@dataclass
class Tracked:
    """Framework arrays reachable from what is dropped, followed by weak references."""

    arrays: list[tuple[str, str, int, Any]] = field(default_factory=list)  # framework, device, bytes, weakref

    def by_device(self, alive: bool | None = None) -> dict[tuple[str, str], int]:
        """Bytes per (framework, device): all tracked arrays, or only the alive / freed ones."""
        total: dict[tuple[str, str], int] = {}
        for framework, device, size, ref in self.arrays:
            if alive is None or (ref() is not None) == alive:
                total[(framework, device)] = total.get((framework, device), 0) + size
        return total


def track(values: Iterable[Any]) -> Tracked:
    """Follow the framework arrays among ``values`` (one level deep), each storage counted once."""
    tracked = Tracked()
    seen: set[int] = set()
    for value in values:
        for item in _expand(value):
            info = array_info(item)
            if info is None or info[3] in seen:
                continue
            seen.add(info[3])
            try:
                ref = weakref.ref(item)
            except TypeError:
                continue  # an array type without weak references cannot be followed
            tracked.arrays.append((info[0], info[1], info[2], ref))
    return tracked


def traceback_frames(tb: TracebackType | None) -> list[Any]:
    """The frames of a traceback (their locals keep a failed cell's tensors alive)."""
    frames: list[Any] = []
    while tb is not None and len(frames) < 1000:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def frame_values(frames: list[Any]) -> list[Any]:
    """The local values of ``frames`` (module-level frames are the user's namespace: left out)."""
    values = []
    for frame in frames:
        if not frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a module frame's locals are the user's namespace
            continue
        try:
            values.extend(frame.f_locals.values())
        except Exception:
            continue
    return values


def last_error() -> tuple[BaseException | None, TracebackType | None]:
    """``sys.last_value`` and ``sys.last_traceback`` (set by IPython for the last failed cell)."""
    return getattr(sys, "last_value", None), getattr(sys, "last_traceback", None)


def drop_last_error() -> None:
    """Clear the frames of the last traceback (their locals) and forget the last error."""
    value, tb = last_error()
    frames = traceback_frames(tb)
    if tb is not None:
        try:
            traceback.clear_frames(tb)
        except Exception:
            pass
    for frame in frames:  # a snapshot of a function's locals (f_locals) outlives frame.clear() on Python 3.11
        try:
            if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # never a module frame: its locals are the user's
                frame.f_locals.clear()
        except Exception:
            pass
    if value is not None:
        value.__traceback__ = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


def release() -> tuple[int, list[tuple[str, str, str]]]:
    """``gc.collect()``, then each imported and initialized framework's own release."""
    collected = gc.collect()
    if not any(name in sys.modules for name in _FRAMEWORK_MODULES):
        return collected, []
    from ..frameworks import release_memory

    return collected, release_memory()


def describe_change(before: Measure, after: Measure, tracked: Tracked) -> list[str]:
    """Per GPU and per framework: before → after, and the arrays that are gone."""
    lines = []
    for index in sorted(set(before.nvml) | set(after.nvml)):
        name = (before.gpu_names.get(index) or after.gpu_names.get(index) or "").removeprefix("NVIDIA ")
        name = display_text(name, _NAME_CHARS) if name else ""  # the driver's text, as the magics show it
        gpu = _("GPU {index} ({name})").format(index=index, name=name) if name else _("GPU {index}").format(index=index)
        lines.append(
            _("{gpu}: this kernel {before} → {after} (NVML)").format(
                gpu=gpu, before=format_bytes(before.nvml.get(index, 0)), after=format_bytes(after.nvml.get(index, 0))
            )
        )
    if not before.nvml and not after.nvml:
        lines.append(
            _("NVML: this kernel holds no GPU memory")
            if before.nvml_error is None
            else _("NVML unavailable ({error})").format(error=shown_message(before.nvml_error))
        )
    for framework in sorted(set(before.counters) | set(after.counters)):
        devices = {**before.counters.get(framework, {}), **after.counters.get(framework, {})}
        for device in devices:
            old = before.counters.get(framework, {}).get(device)
            new = after.counters.get(framework, {}).get(device)
            if old is None or new is None:
                continue
            shown = {"torch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}.get(framework, framework)
            figures = {
                "framework": shown,
                "device": device,
                "before": format_bytes(old[0]),
                "after": format_bytes(new[0]),
            }
            if old[1] is not None and new[1] is not None:
                line = _(
                    "{framework} {device}: in use {before} → {after}, reserved {reserved_before} → {reserved_after}"
                ).format(**figures, reserved_before=format_bytes(old[1]), reserved_after=format_bytes(new[1]))
            else:
                line = _("{framework} {device}: in use {before} → {after}").format(**figures)
            lines.append(line)
    freed = tracked.by_device(alive=False)
    kept = tracked.by_device(alive=True)
    for (framework, device), size in sorted(freed.items()):
        lines.append(
            _("{framework} arrays freed on {device}: {size}").format(
                framework=framework, device=device, size=format_bytes(size)
            )
        )
    for (framework, device), size in sorted(kept.items()):
        lines.append(
            _("{framework} arrays still referenced elsewhere on {device}: {size} (name them: %gpu_free NAME …)").format(
                framework=framework, device=device, size=format_bytes(size)
            )
        )
    for (index, run), size in sorted(after.runs.items()):
        lines.append(
            _(
                "GPU {index}: yours: {run} holds {size} (a process of its own: "
                "%gpu_free frees this kernel's memory only; end the run to free it)"
            ).format(index=index, run=run, size=format_bytes(size))
        )
    if before.rss is not None and after.rss is not None:
        lines.append(
            _("process memory (RSS, CPU arrays): {before} → {after}").format(
                before=format_bytes(before.rss), after=format_bytes(after.rss)
            )
        )
    return lines


# -- %gpu_free as a whole: check the names, drop, release, report -----------------------------------


def free_memory(shell: Any, names: list[str], dry_run: bool = False) -> str:
    """What ``%gpu_free`` does in ``shell`` and the report it prints: drop the output cache, the last
    error's traceback and the variables ``names``, collect, release each initialized framework's cache,
    and say what came back. ``dry_run``: say what would be dropped and change nothing at all.

    A bad name is a one-line ``UsageError`` before anything is touched."""
    check_names(shell, names)
    cache = OutputCache.of(shell)
    dropped, tracked = _what_is_dropped(shell, cache, names)
    if dry_run:
        return _dry_run_report(dropped, tracked)
    before = measure()
    _drop(shell, cache, names)
    collected, releases = release()
    after = measure()
    lines = [
        _("Dropped: {what}.").format(what=pgettext("between the parts of a list", "; ").join(dropped))
        if dropped
        else _("Dropped: nothing to drop (no output cache, no last error)."),
        ngettext("gc.collect(): {count} object.", "gc.collect(): {count} objects.", collected).format(count=collected),
    ]
    for framework, called, note in releases:
        lines.append(_("{framework}: {call}: {note}.").format(framework=framework, call=called, note=note))
    lines += describe_change(before, after, tracked)
    return "\n".join(lines)


_UNDERS = ("_", "__", "___")
_SHOWN_NAMES = 8  # cache names listed in the report, the rest counted


@dataclass(frozen=True)
class OutputCache:
    """IPython's output cache as ``%gpu_free`` drops it: the ``Out`` dict, and the names IPython
    itself put in the user's namespace that still hold what IPython put there.

    A name is IPython's when its value is the very object IPython's bookkeeping holds for it (the
    rule IPython's displayhook uses to tell whether the user assigned ``_``): ``_N`` when it is
    ``Out[N]`` (or IPython's hidden copy), ``_``/``__``/``___`` when it is the displayhook's own
    ``_``/``__``/``___`` (or the hidden copy). A ``_2 = …`` or ``_ = …`` of the user's is theirs and
    stays (IPython's ``displayhook.flush()`` deleted every ``_1``…``_N`` and reset ``_``: not used).
    Only identities are compared: no ``==`` or ``bool()`` of the user's values.
    """

    out: dict[Any, Any] | None  # IPython's Out (``_oh``), when the namespace has it
    numbered: tuple[str, ...]  # the _N names to delete
    unders: tuple[str, ...]  # which of _, __, ___ to reset to ''

    @classmethod
    def of(cls, shell: Any) -> OutputCache:
        ns, hidden, hook = shell.user_ns, shell.user_ns_hidden, shell.displayhook
        out = ns.get("_oh")
        out = out if type(out) is dict else None
        numbered = []
        for number, value in list(out.items()) if out is not None else ():
            key = f"_{number}" if type(number) is int else None
            if key is not None and key in ns and (ns[key] is value or ns[key] is hidden.get(key, _ABSENT)):
                numbered.append(key)
        unders = []
        for key in _UNDERS:
            value = ns.get(key, _ABSENT)
            if value is _ABSENT or value is None or (type(value) is str and not value):
                continue  # nothing held
            if value is getattr(hook, key, _ABSENT) or value is hidden.get(key, _ABSENT):
                unders.append(key)
        return cls(out, tuple(numbered), tuple(unders))

    def values(self) -> list[Any]:
        """What the cache holds (to follow the framework arrays in it)."""
        return list(self.out.values()) if self.out else []

    def words(self) -> str | None:
        """What is dropped, in words (None: nothing)."""
        entries = len(self.out) if self.out else 0
        names = [*self.numbered, *self.unders]
        if not entries and not names:
            return None
        more = len(names) - _SHOWN_NAMES
        shown = ", ".join(names[:_SHOWN_NAMES])
        if more > 0:
            shown = _("{names} and {more} more").format(names=shown, more=more)
        if names:
            return ngettext(
                "IPython's output cache (Out: {count} entry; names {names})",
                "IPython's output cache (Out: {count} entries; names {names})",
                entries,
            ).format(count=entries, names=shown)
        return ngettext(
            "IPython's output cache (Out: {count} entry; no name of it left in your namespace)",
            "IPython's output cache (Out: {count} entries; no name of it left in your namespace)",
            entries,
        ).format(count=entries)

    def drop(self, shell: Any) -> None:
        """Empty ``Out``, delete the ``_N`` names and reset ``_``/``__``/``___`` found IPython's, and
        the displayhook's own references (so IPython goes on updating ``_`` as before)."""
        ns, hidden, hook = shell.user_ns, shell.user_ns_hidden, shell.displayhook
        for key in self.numbered:
            ns.pop(key, None)
            hidden.pop(key, None)
        for key in self.unders:
            ns[key] = ""
            if key in hidden:
                hidden[key] = ""
        for key in _UNDERS:
            if hasattr(hook, key):
                setattr(hook, key, "")
        if self.out is not None:
            self.out.clear()


_ABSENT: Any = object()


def check_names(shell: Any, names: list[str]) -> None:
    """Refuse (UsageError) a name that is not one of the user's own variables, or one given twice."""
    from IPython.core.error import UsageError

    for name in names:
        if not name.isidentifier():
            raise UsageError(
                _("{name} is not a variable name; give names like: %gpu_free model optimizer").format(name=repr(name))
            )
        if name in shell.user_ns_hidden or name.startswith("_"):
            raise UsageError(
                _(
                    "{name} belongs to IPython; %gpu_free drops the output cache by itself, "
                    "name only your own variables"
                ).format(name=repr(name))
            )
        if name not in shell.user_ns:
            raise UsageError(_("there is no variable {name}; nothing was changed").format(name=repr(name)))
    if len(set(names)) != len(names):
        raise UsageError(_("a name is given twice; list each variable once"))


def _what_is_dropped(shell: Any, cache: OutputCache, names: list[str]) -> tuple[list[str], Tracked]:
    """What will be dropped, in words, and the framework arrays reachable from it (followed weakly:
    nothing here keeps them alive once this returns). Reads only: the dry run shows this."""
    from .oom import class_name

    ns = shell.user_ns
    error, tb = last_error()
    frames = traceback_frames(tb)
    named = [ns[name] for name in names]
    dropped = []
    words = cache.words()
    if words:
        dropped.append(words)
    if tb is not None:
        dropped.append(
            ngettext(
                "the last error's traceback ({error}, {count} frame and its locals)",
                "the last error's traceback ({error}, {count} frames and their locals)",
                len(frames),
            ).format(error=display_text(class_name(type(error)), 60), count=len(frames))
        )
    if names:
        dropped.append(
            ngettext("your variable {names}", "your variables {names}", len(names)).format(names=", ".join(names))
        )
    unders = [ns[key] for key in cache.unders]
    return dropped, track([*cache.values(), *unders, *frame_values(frames), *named])


def _dry_run_report(dropped: list[str], tracked: Tracked) -> str:
    lines = [
        _("Would drop: {what}.").format(what=pgettext("between the parts of a list", "; ").join(dropped))
        if dropped
        else _("Would drop: nothing (no output cache, no last error).")
    ]
    reachable = tracked.by_device()
    if reachable:
        arrays = ", ".join(
            _("{framework} {size} on {device}").format(framework=framework, size=format_bytes(size), device=device)
            for (framework, device), size in reachable.items()
        )
        lines.append(
            _("Framework arrays reachable from them: {arrays} (freed unless referenced elsewhere).").format(
                arrays=arrays
            )
        )
    initialized: list[str] = []
    if any(module in sys.modules for module in _FRAMEWORK_MODULES):
        from .. import frameworks as adapters

        initialized = [f.name for f in adapters.FRAMEWORKS if f.state() is adapters.State.INITIALIZED]
    lines.append(
        _("Then gc.collect() and the release of {frameworks}.").format(frameworks=", ".join(initialized))
        if initialized
        else _("Then gc.collect(); no framework has initialized a GPU, so none has a cache to release.")
    )
    lines.append(_("Nothing was changed (--dry-run)."))
    return "\n".join(lines)


def _drop(shell: Any, cache: OutputCache, names: list[str]) -> None:
    """Empty the output cache, forget the last error (and the failed cell's result), delete ``names``."""
    ns = shell.user_ns
    cache.drop(shell)
    drop_last_error()
    result = shell.last_execution_result
    if result is not None and result.error_in_exec is not None:
        result.error_in_exec = None  # the failed cell's result keeps the error, and so its frames
    del result
    for name in names:
        del ns[name]
