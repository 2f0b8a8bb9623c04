"""What the extension hooks into the kernel besides the magics: the frameworks' watch and the after-cell check.

- :func:`watch_frameworks`: from ``%load_ext`` on, each framework's CUDA start is watched (through
  an import hook while none is imported, so loading stays cheap);
- :func:`install` registers :func:`_after_cell` on ``post_run_cell`` (once per shell;
  :func:`uninstall` removes it): under a failed cell, the hint for a framework error that GPU
  configuration causes (stderr) and the out-of-memory report (:mod:`jupyter_gpu.kernel.oom`,
  displayed with its buttons' bundle: :mod:`jupyter_gpu.kernel.oom_offer`); after every
  cell, the cheap check that nothing changed the GPU settings behind the magics' back;
- :func:`on_cell_event` / :func:`off_cell_event`: the one way the package hooks a cell event
  (``pre_run_cell``, ``post_run_cell``), each callback through :func:`guarded`.

**The guard.** A cell hook runs on whatever the user's cell left behind: an exception whose
``__str__`` raises ``SystemExit``, a ``BaseException`` subclass, a property that loops, a
``sys.stderr`` that raises. IPython catches ``Exception`` and ``KeyboardInterrupt`` from a callback
but not ``SystemExit``, and an ipykernel that sees ``SystemExit`` exits: every variable is lost.
So every callback jupyter_gpu registers goes through :func:`guarded`, and nothing leaves it:

- any ``BaseException`` (``SystemExit``, ``GeneratorExit``, ``MemoryError``, the user's own) ends
  the hook; one line on stderr names the hook and the exception's class (never its text: calling
  ``str()`` on it may raise again), and the cell's result and the user's variables are untouched;
- ``KeyboardInterrupt`` (the user's interrupt arriving while a hook runs, after the cell itself
  finished) ends the hook at once and is not raised on: there is nothing left to interrupt, and
  raised on, IPython would print a traceback of jupyter_gpu's hook. The line says it was interrupted.

Hooks read the user's data within a bound: an exception's message through
:func:`jupyter_gpu.kernel.oom.error_text` (its start only, without ``str()`` of the user's
arguments), so a 1 MB message or a huge ``args`` costs microseconds. Code the user wrote
(an exception class's own ``__str__``) runs as long as it runs: that is the user's cell, not data.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from ..core.i18n import N_, _, ngettext
from ..session.report import summary

__all__ = [
    "error_notes",
    "guarded",
    "install",
    "off_cell_event",
    "on_cell_event",
    "tf_device_hint",
    "traceback_hint",
    "uninstall",
    "watch_frameworks",
]

_FRAMEWORK_MODULES = ("tensorflow", "torch", "jax")


def watch_frameworks() -> None:
    """Watch the frameworks' CUDA start from now on. Cheap while none is imported: the adapters
    (:mod:`jupyter_gpu.frameworks`) are imported only when a framework is."""
    if "jupyter_gpu.frameworks" in sys.modules or any(name in sys.modules for name in _FRAMEWORK_MODULES):
        from .. import frameworks

        frameworks.start_watching()
        return
    from ..core import import_hooks as _import_hooks

    found = (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
    for name in _FRAMEWORK_MODULES:
        if _on_import not in _import_hooks.pending(name):
            _import_hooks.when_imported(name, _on_import)
    _found.append(found)


_found: list[Any] = []  # the selection variables as the extension found them (before any plan)


def _on_import(_module: Any) -> None:
    from .. import frameworks
    from ..core.visibility import CudaEnv

    frameworks.start_watching(CudaEnv(*_found[0]) if _found else None, fresh=True)


# -- after every cell -----------------------------------------------------------------------------

# Framework errors that GPU configuration causes: (text in the message, what happened, its first sentence
# alone where a device map replaces the rest). Marked here, translated where shown.
_HINTS: tuple[tuple[str, str, str | None], ...] = (
    (
        "Cannot set memory growth on device when virtual devices configured",
        N_(
            "TensorFlow refuses set_memory_growth on a GPU that has a memory limit (logical devices), and the limit "
            "here comes from the kernel's GPU plan. Growth and the limit hold together through %gpu_select --growth "
            "(TF_FORCE_GPU_ALLOW_GROWTH): drop the set_memory_growth loop."
        ),
        None,
    ),
    (
        "Physical devices cannot be modified after being initialized",
        N_(
            "TensorFlow already initialized its GPUs, so set_memory_growth/set_visible_devices can no longer change "
            "them. Restart the kernel and configure the GPUs before the first op with the magics (%gpu_select, "
            "%gpu_limit) or with tf.config calls."
        ),
        None,
    ),
    (
        "Virtual devices cannot be modified after being initialized",
        N_(
            "TensorFlow already initialized its GPUs, so set_logical_device_configuration can no longer change "
            "them. Restart the kernel and set the limit first: %gpu_limit SIZE [SIZE ...]."
        ),
        None,
    ),
    (
        "Visible devices cannot be modified after being initialized",
        N_(
            "TensorFlow already initialized its GPUs, so set_visible_devices can no longer change them. Restart the "
            "kernel and choose the GPUs first: %gpu_select SPEC."
        ),
        None,
    ),
    (
        "Memory growth cannot differ between GPU devices",
        N_(
            "TensorFlow needs the same memory growth on every GPU it uses, and code set it on some of them only. "
            "Growth on all of the plan's GPUs: %gpu_select ... --growth (TF_FORCE_GPU_ALLOW_GROWTH); drop the "
            "set_memory_growth calls."
        ),
        None,
    ),
    (
        "invalid device ordinal",
        N_(
            "CUDA has no device with that index. Device indices (cuda:N, /GPU:N, set_per_process_memory_fraction's "
            "device) count the GPUs the plan selected, from 0 in the plan's order, not nvidia-smi's numbers."
        ),
        N_("CUDA has no device with that index."),
    ),
    (
        "Invalid device id",
        N_(
            "PyTorch has no CUDA device with that index (get_device_name, get_device_properties). Device indices "
            "count the GPUs the plan selected, from 0 in the plan's order, not nvidia-smi's numbers."
        ),
        N_("PyTorch has no CUDA device with that index (get_device_name, get_device_properties)."),
    ),
    (
        "Torch not compiled with CUDA enabled",
        N_(
            "this PyTorch is a CPU-only build: the GPU plan cannot apply to it. Install a CUDA build of PyTorch and "
            "restart the kernel."
        ),
        None,
    ),
)


def traceback_hint(error: BaseException | None) -> str | None:
    """The hint to show under a framework error that GPU configuration causes (None for any other)."""
    if error is None:
        return None
    from .oom import error_text

    text = error_text(error)  # "" for an error that cannot print itself: IPython says so, nothing is added here
    for needle, full, first in _HINTS:
        if needle in text:
            from ..plan import current_plan

            plan = current_plan()
            mapping, selected = torch_device_map(plan) if first is not None else (None, False)
            if mapping and not selected and first is not None:
                # CUDA does not show the plan's selection: "count the GPUs the plan selected" is not true here
                hint = _("{hint} {mapping}").format(hint=_(first), mapping=mapping)
            elif mapping:
                hint = _("{hint} {mapping}").format(hint=_(full), mapping=mapping)
            else:
                hint = _(full)
            return _("jupyter_gpu: {hint} The kernel's GPU plan: {plan} (%gpu_status shows more).").format(
                hint=hint, plan=summary(plan)
            )
    return None


def torch_device_map(plan: Any) -> tuple[str | None, bool]:
    """Which GPU each of PyTorch's ``cuda:N`` is, e.g. "After %gpu_select 1,2, PyTorch's cuda:0 is
    GPU 1 and cuda:1 is GPU 2 (nvidia-smi's numbers): use cuda:1 for GPU 2.", and whether CUDA shows
    the plan's selection (False: "In this kernel, …"). From the GPUs CUDA shows PyTorch
    (:func:`jupyter_gpu.frameworks.base.actual_devices`: once CUDA started, what it read then); None
    while PyTorch is not imported or CUDA's numbering cannot be told."""
    if "torch" not in sys.modules or "jupyter_gpu.frameworks" not in sys.modules:
        return None, False
    from ..frameworks.base import actual_devices, known_gpus
    from ..frameworks.torch import TORCH

    gpus = known_gpus() or plan.gpus
    devices = actual_devices(TORCH, gpus).indices if gpus else None
    if not devices:
        return None, False
    pairs = [
        _("cuda:{position} is GPU {index}").format(position=position, index=index)
        for position, index in enumerate(devices)
    ]
    said = _joined([", ".join(pairs[:-1]), pairs[-1]], N_("{first} and {last}")) if len(pairs) > 1 else pairs[0]
    selected = plan.selected_indices
    shown = selected is not None and tuple(selected) == tuple(devices)
    moved = [(position, index) for position, index in enumerate(devices) if position != index]
    figures = {"devices": said, "missing": len(devices)}
    if moved:
        figures.update(use=moved[-1][0], gpu=moved[-1][1])
    if shown:
        selection = ",".join(str(index) for index in selected)
        text = (
            _(
                "After %gpu_select {selection}, PyTorch's {devices} (nvidia-smi's numbers): use cuda:{use} for "
                "GPU {gpu}; there is no cuda:{missing}."
            )
            if moved
            else _(
                "After %gpu_select {selection}, PyTorch's {devices} (nvidia-smi's numbers); there is no cuda:{missing}."
            )
        ).format(selection=selection, **figures)
    else:
        text = (
            _(
                "In this kernel, PyTorch's {devices} (nvidia-smi's numbers): use cuda:{use} for GPU {gpu}; "
                "there is no cuda:{missing}."
            )
            if moved
            else _("In this kernel, PyTorch's {devices} (nvidia-smi's numbers); there is no cuda:{missing}.")
        ).format(**figures)
    return text, shown


def error_notes(error: BaseException | None) -> list[str]:
    """What to show under a failed cell's traceback: the hint for a framework error that GPU
    configuration causes, and the out-of-memory report (:mod:`jupyter_gpu.kernel.oom`) unless turned off.
    Nothing is imported for a cell without an error."""
    return [note if isinstance(note, str) else note.text for note in _error_outputs(error)]


def _error_outputs(error: BaseException | None) -> list[Any]:
    """:func:`error_notes` as shown: lines for stderr, and the out-of-memory :class:`~.oom.Report`
    (displayed with its buttons' bundle: :mod:`jupyter_gpu.kernel.oom_offer`)."""
    if error is None:
        return []
    notes: list[Any] = []
    hint = traceback_hint(error)
    if hint:
        notes.append(hint)
    explain_oom = next(iter(_explain_oom.values()), None)
    if explain_oom is None or explain_oom():
        from .oom import explain_error_report

        report = explain_error_report(error)
        if report:
            notes.append(report)
    return notes


# A TensorFlow GPU named in a string of the cell: '/GPU:3', "/device:GPU:3", '/job:localhost/.../gpu:3', 'GPU:3'.
_TF_GPU = re.compile(r"""["'](?:/job:[\w-]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?gpu:(\d+)["']""", re.I)
_TF_UNSATISFIED = re.compile(r"Could not satisfy (?:explicit )?device specification '[^']*device:GPU:(\d+)'")
_SOURCE_CHARS = 100_000  # a longer cell is read up to here: the check stays cheap


def tf_device_hint(source: str | None, error: BaseException | None = None) -> str | None:
    """The hint after a cell that names a TensorFlow GPU the plan does not give it (``tf.device('/GPU:3')``,
    ``MirroredStrategy(devices=[..., '/gpu:3'])`` after ``%gpu_select 1,2``), None for any other cell.

    TensorFlow 2 places ops with soft placement on (its default): a device that does not exist is
    replaced, without a word, by the best device of any type (``EagerContext::SelectDevice`` and the
    graph placer's ``ColocationGraph`` clear the device's type and number and take the first match:
    ``/GPU:0`` on a GPU build); with soft placement off the op fails with "Could not satisfy device
    specification". Read from the cell's text (and that error's text) only: nothing is imported or
    asked of TensorFlow, and nothing runs unless TensorFlow is imported."""
    if "tensorflow" not in sys.modules or "jupyter_gpu.frameworks" not in sys.modules:
        return None
    text = source[:_SOURCE_CHARS] if isinstance(source, str) else ""
    named = {int(number) for number in _TF_GPU.findall(text)}
    if error is not None:
        from .oom import error_text

        named.update(int(number) for number in _TF_UNSATISFIED.findall(error_text(error)))
    if not named:
        return None
    from .. import frameworks
    from ..plan import current_plan

    plan = current_plan()
    if frameworks.selection_env_changed():
        return None  # the variables are not the plan's: the warning about that is the one to read
    gpus = frameworks.known_gpus()
    logical = frameworks.TENSORFLOW.logical_gpus(plan, gpus)
    if logical is None:
        return None  # no selection (CUDA's own numbering) or TensorFlow does not follow the plan
    missing = sorted(number for number in named if number >= len(logical))
    if not missing:
        return None
    names_of: dict[int, list[str]] = {}
    for number, index in enumerate(logical):
        names_of.setdefault(index, []).append(f"/GPU:{number}")
    mapping = _joined(
        [
            ngettext("{names} is GPU {index}", "{names} are GPU {index}", len(names)).format(
                names=_joined(names, N_("{first} and {last}")), index=index
            )
            for index, names in names_of.items()
        ],
        N_("{first} and {last}"),
    )
    select = f"%gpu_select {plan.request.selection}" if plan.request.selection else _("the plan")
    if plan.request.limits and len(logical) > len(names_of):
        select = _("{select} and %gpu_limit {limits}").format(select=select, limits=" ".join(plan.request.limits))
    names = ", ".join(f"/GPU:{number}" for number in missing)
    has = _("TensorFlow's {mapping}").format(mapping=mapping) if logical else _("TensorFlow has no GPU")
    if not logical:
        use = "/CPU:0"
    elif len(logical) < 4:
        use = _joined([f"/GPU:{number}" for number in range(len(logical))], N_("{first} or {last}"))
    else:
        use = f"/GPU:0 … /GPU:{len(logical) - 1}"
    first = _("the first GPU, /GPU:0, for ops it has a GPU kernel for, else the CPU") if logical else _("the CPU")
    absent = ngettext(
        "{names} does not exist in this kernel", "{names} do not exist in this kernel", len(missing)
    ).format(names=names)
    return _(
        "jupyter_gpu: after {select}, {has}; {absent}. With soft placement (TensorFlow's default) such ops run "
        "on another device without a word ({first}); with it off they fail ('Could not satisfy device "
        "specification'). Use {use}, or %gpu_select the GPUs you mean."
    ).format(select=select, has=has, absent=absent, first=first, use=use)


def _joined(items: list[str], pattern: str) -> str:
    """``items`` joined two by two through ``pattern`` (``N_("{first} and {last}")``, translated here):
    ``a and b and c``, in the user's language."""
    text = items[0]
    for item in items[1:]:
        text = _(pattern).format(first=text, last=item)
    return text


def _nvml_gpus() -> Any:
    """Every GPU NVML sees now, for the after-cell check (the frameworks package reads no NVML itself)."""
    from ..sources.nvml import snapshot

    return snapshot().gpus


def _after_cell(result: Any = None) -> None:
    """``post_run_cell``: notes under a failed cell (:func:`error_notes`), and the cheap check that
    nothing changed behind the magics' back (see :func:`jupyter_gpu.frameworks.check_after_cell`).
    Registered through :func:`guarded`: a failure here is one line, never the kernel's end."""
    error = getattr(result, "error_in_exec", None)
    if error is not None:
        for note in _error_outputs(error):
            if isinstance(note, str):
                print(note, file=sys.stderr)
            else:
                from .oom_offer import show_report

                show_report(note)
    device_hint = tf_device_hint(getattr(getattr(result, "info", None), "raw_cell", None), error)
    if device_hint:
        print(device_hint, file=sys.stderr)
    frameworks = sys.modules.get("jupyter_gpu.frameworks")
    if frameworks is None:
        return  # no plan was ever made and no framework imported: nothing can diverge
    from ..core.errors import GPUPlanMismatchWarning, warn

    for message in frameworks.check_after_cell(read_gpus=_nvml_gpus):
        warn(message, GPUPlanMismatchWarning)


#: shell id -> whether to explain out-of-memory errors there (``GpuMagics.explain_oom``)
_explain_oom: dict[int, Callable[[], bool]] = {}


def install(ipython: Any, explain_oom: Callable[[], bool]) -> None:
    """Run :func:`_after_cell` after every cell of ``ipython``; ``explain_oom`` says whether to add the OOM report."""
    _explain_oom[id(ipython)] = explain_oom
    on_cell_event(ipython, "post_run_cell", _after_cell, N_("the after-cell check"))


def uninstall(ipython: Any) -> None:
    """Stop the after-cell hook on ``ipython`` (nothing happens when it is not installed)."""
    _explain_oom.pop(id(ipython), None)
    off_cell_event(ipython, "post_run_cell", _after_cell)


# -- the one guard every cell callback goes through (see the module's docstring) -------------------


def guarded(callback: Callable[..., Any], what: str) -> Callable[..., None]:
    """``callback`` made safe to run after (or before) a user's cell: nothing it raises leaves it,
    ``BaseException`` and ``KeyboardInterrupt`` included; a failure is one line on stderr naming
    ``what`` (e.g. "the after-cell check") and the exception's class. The wrapper's
    ``__wrapped__`` is ``callback``."""

    def guard(*args: Any, **kwargs: Any) -> None:
        try:
            callback(*args, **kwargs)
        except KeyboardInterrupt:
            _say(
                _guard_line(N_("jupyter_gpu: {what} was interrupted; the cell and its variables are unaffected."), what)
            )
        except BaseException as error:  # SystemExit from user data must not end the kernel
            _say(
                _guard_line(
                    N_("jupyter_gpu: {what} failed ({error}); the cell and its variables are unaffected."),
                    what,
                    _class_name(error),
                )
            )

    guard.__wrapped__ = callback  # type: ignore[attr-defined]
    guard.__name__ = getattr(callback, "__name__", "guard")
    guard.__qualname__ = f"guarded({guard.__name__})"
    return guard


def _guard_line(line: str, what: str, error: str = "") -> str:
    """One of the guard's lines in the user's language (``what`` marked with ``N_`` where it is given);
    in English when translating fails: nothing leaves the guard."""
    try:
        return _(line).format(what=_(what), error=error)
    except BaseException:
        return line.format(what=what, error=error)


def _class_name(error: BaseException) -> str:
    """The exception's class name, read without running the user's code (a metaclass may define
    ``__name__``), sanitized and short: it is the user's text."""
    from ..core.text import display_text
    from .oom import class_name

    try:
        return display_text(class_name(type(error)), 60)
    except BaseException:  # nothing leaves the guard
        return "?"


def _say(line: str) -> None:
    """Print ``line`` on the real stderr; a ``sys.stderr`` the user replaced may raise: then nothing."""
    try:
        print(line, file=sys.stderr)
    except BaseException:  # nothing leaves the guard
        pass


def on_cell_event(ipython: Any, event: str, callback: Callable[..., Any], what: str) -> None:
    """Register ``callback`` on ``ipython``'s cell ``event`` through :func:`guarded` (the one way
    jupyter_gpu hooks a cell event; ``tests/test_hook_guard.py`` checks no other); again: no effect."""
    if registered(ipython, event, callback) is None:
        ipython.events.register(event, guarded(callback, what))


def off_cell_event(ipython: Any, event: str, callback: Callable[..., Any]) -> None:
    """Undo :func:`on_cell_event` (nothing happens when ``callback`` is not registered)."""
    wrapper = registered(ipython, event, callback)
    if wrapper is not None:
        try:
            ipython.events.unregister(event, wrapper)
        except ValueError:
            pass


def registered(ipython: Any, event: str, callback: Callable[..., Any]) -> Callable[..., None] | None:
    """The guard :func:`on_cell_event` registered for ``callback`` on ``event``, else None."""
    for function in list(ipython.events.callbacks.get(event, ())):
        if getattr(function, "__wrapped__", None) == callback:  # bound methods: equal, not identical
            return function
    return None
