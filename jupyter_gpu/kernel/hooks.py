"""What the extension hooks into the kernel besides the magics: the frameworks' watch and the after-cell check.

- :func:`watch_frameworks`: from ``%load_ext`` on, each framework's CUDA start is watched (through
  an import hook while none is imported, so loading stays cheap);
- :func:`install` registers :func:`_after_cell` on ``post_run_cell`` (once per shell;
  :func:`uninstall` removes it): under a failed cell, the hint for a framework error that GPU
  configuration causes and the out-of-memory report (:mod:`jupyter_gpu.kernel.oom`); after every
  cell, the cheap check that nothing changed the GPU settings behind the magics' back.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from .plan_report import summary

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

    frameworks.start_watching(CudaEnv(*_found[0]) if _found else None)


# -- after every cell -----------------------------------------------------------------------------

# Framework errors that GPU configuration causes: (text in the message, what happened).
_HINTS = (
    (
        "Cannot set memory growth on device when virtual devices configured",
        "TensorFlow refuses set_memory_growth on a GPU that has a memory limit (logical devices), and the limit "
        "here comes from the kernel's GPU plan. Growth and the limit hold together through %gpu_select --growth "
        "(TF_FORCE_GPU_ALLOW_GROWTH): drop the set_memory_growth loop.",
    ),
    (
        "Physical devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_memory_growth/set_visible_devices can no longer change "
        "them. Restart the kernel and configure the GPUs before the first op with the magics (%gpu_select, "
        "%gpu_limit) or with tf.config calls.",
    ),
    (
        "Virtual devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_logical_device_configuration can no longer change "
        "them. Restart the kernel and set the limit first: %gpu_limit SIZE [SIZE ...].",
    ),
    (
        "Visible devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_visible_devices can no longer change them. Restart the "
        "kernel and choose the GPUs first: %gpu_select SPEC.",
    ),
    (
        "Memory growth cannot differ between GPU devices",
        "TensorFlow needs the same memory growth on every GPU it uses, and code set it on some of them only. "
        "Growth on all of the plan's GPUs: %gpu_select ... --growth (TF_FORCE_GPU_ALLOW_GROWTH); drop the "
        "set_memory_growth calls.",
    ),
    (
        "invalid device ordinal",
        "CUDA has no device with that index. Device indices (cuda:N, /GPU:N, set_per_process_memory_fraction's "
        "device) count the GPUs the plan selected, from 0 in the plan's order, not nvidia-smi's numbers.",
    ),
    (
        "Torch not compiled with CUDA enabled",
        "this PyTorch is a CPU-only build: the GPU plan cannot apply to it. Install a CUDA build of PyTorch and "
        "restart the kernel.",
    ),
)


def traceback_hint(error: BaseException | None) -> str | None:
    """The hint to show under a framework error that GPU configuration causes (None for any other)."""
    if error is None:
        return None
    try:
        text = str(error)
    except Exception:
        return None  # the user's exception cannot print itself: IPython says so, and nothing here may add to it
    for needle, hint in _HINTS:
        if needle in text:
            from ..plan import current_plan

            return f"jupyter_gpu: {hint} The kernel's GPU plan: {summary(current_plan())} (%gpu_status shows more)."
    return None


def error_notes(error: BaseException | None) -> list[str]:
    """What to print under a failed cell's traceback: the hint for a framework error that GPU
    configuration causes, and the out-of-memory report (:mod:`jupyter_gpu.kernel.oom`) unless turned off.
    Nothing is imported for a cell without an error."""
    if error is None:
        return []
    notes = []
    hint = traceback_hint(error)
    if hint:
        notes.append(hint)
    explain_oom = next(iter(_explain_oom.values()), None)
    if explain_oom is None or explain_oom():
        from .oom import explain_error

        report = explain_error(error)
        if report:
            notes.append(report)
    return notes


def _after_cell(result: Any = None) -> None:
    """``post_run_cell``: notes under a failed cell (:func:`error_notes`), and the cheap check that
    nothing changed behind the magics' back (see :func:`jupyter_gpu.frameworks.check_after_cell`)."""
    try:
        error = getattr(result, "error_in_exec", None)
        if error is not None:
            for note in error_notes(error):
                print(note, file=sys.stderr)
        frameworks = sys.modules.get("jupyter_gpu.frameworks")
        if frameworks is None:
            return  # no plan was ever made and no framework imported: nothing can diverge
        from ..core.errors import GPUPlanMismatchWarning, warn

        for message in frameworks.check_after_cell():
            warn(message, GPUPlanMismatchWarning)
    except Exception as error:  # a check must never break the kernel
        print(f"jupyter_gpu: the after-cell check failed: {type(error).__name__}: {error}", file=sys.stderr)


#: shell id -> whether to explain out-of-memory errors there (``GpuMagics.explain_oom``)
_explain_oom: dict[int, Callable[[], bool]] = {}


def install(ipython: Any, explain_oom: Callable[[], bool]) -> None:
    """Run :func:`_after_cell` after every cell of ``ipython``; ``explain_oom`` says whether to add the OOM report."""
    _explain_oom[id(ipython)] = explain_oom
    ipython.events.register("post_run_cell", _after_cell)


def uninstall(ipython: Any) -> None:
    """Stop the after-cell hook on ``ipython`` (nothing happens when it is not installed)."""
    _explain_oom.pop(id(ipython), None)
    try:
        ipython.events.unregister("post_run_cell", _after_cell)
    except ValueError:
        pass
