"""The out-of-memory explainer: which GPU ran out, who holds it, and what to do next.

When a cell fails with a GPU out-of-memory error of TensorFlow/Keras, PyTorch or JAX, the IPython
extension shows a short report under the traceback (the traceback itself is left as it is; the
report is displayed as text, with its next steps as buttons in JupyterLab: :mod:`.oom_offer`):

- the GPU (nvidia-smi number and name) and its memory: total / used / free;
- who holds it: this kernel (NVML, plus the framework's own in-use and reserved figures where it
  tells them, in its message or its counters), the user's other kernels by notebook name and idle
  time (from the server extension when it runs, else the kernels' own reports), other users by
  user name and memory only;
- this kernel's memory limit, when the limit and not the GPU is what ran out;
- next steps computed from those figures (another GPU with room, an idle kernel of the user's to
  shut down, the framework's cache ``%gpu_free`` can return, growth for TensorFlow).

This package is part of the pure core: it imports no IPython and never a framework. An error is
recognised from its class's name and module (``type(error).__mro__``) and its message, so
recognising costs nothing until an error happens, and the framework need not be importable:

- PyTorch: ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``), and
  ``RuntimeError: CUDA out of memory`` (PyTorch < 1.13);
- TensorFlow / Keras: ``tf.errors.ResourceExhaustedError``, messages with ``OOM when allocating`` or
  ``CUDA_ERROR_OUT_OF_MEMORY``;
- JAX: ``XlaRuntimeError`` (``jax.errors.JaxRuntimeError``) whose message says ``RESOURCE_EXHAUSTED``.

:func:`recognize` finds the error (also as the cause or context of another exception),
:func:`explain` turns facts into the report (pure), :func:`explain_error` gathers the facts
(NVML, the plan, the frameworks' counters, :mod:`jupyter_gpu.sources.peers`) and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The modules that hold the rest: recognize (which error), facts (what the report reads, who holds
# the GPU), explanation (the text and its next steps), gather (the facts, now). Names outside
# __all__ are re-exported with "as" (code and tests use them from here).
from .explanation import explain, next_actions
from .explanation import follows as follows
from .facts import Facts as Facts
from .facts import Holder
from .facts import holders as holders
from .gather import gather_facts  # looked up here by explain_error_report (tests replace it here)
from .gather import slice_views as slice_views
from .recognize import OutOfMemory, class_name, error_text, recognize

__all__ = [
    "Holder",
    "OutOfMemory",
    "Report",
    "class_name",
    "error_text",
    "explain",
    "explain_error",
    "explain_error_report",
    "next_actions",
    "recognize",
]


# -- the entry points (never raise) ---------------------------------------------------------------


def explain_error(error: BaseException | None, *, server_timeout_s: float = 1.0) -> str | None:
    """The report for ``error`` when it is a GPU out-of-memory error, else None. Never raises."""
    report = explain_error_report(error, server_timeout_s=server_timeout_s)
    return None if report is None else report.text


@dataclass(frozen=True)
class Report:
    """The out-of-memory report: its text, and the next steps a frontend may offer as buttons."""

    text: str
    actions: tuple[dict[str, Any], ...] = ()


def explain_error_report(error: BaseException | None, *, server_timeout_s: float = 1.0) -> Report | None:
    """:func:`explain_error` with :func:`next_actions`. Never raises."""
    oom = recognize(error)
    if oom is None:
        return None
    try:
        facts = gather_facts(oom, server_timeout_s=server_timeout_s)
        text = explain(oom, facts)
    except Exception as failure:  # the explainer must never add an error of its own
        from ...core.i18n import _

        return Report(
            _(
                "jupyter_gpu: {framework} ran out of GPU memory (the explanation failed: {error}); "
                "%gpu_status shows the GPUs."
            ).format(framework=oom.framework, error=f"{type(failure).__name__}: {failure}")
        )
    try:
        return Report(text, next_actions(oom, facts))
    except Exception:  # the buttons are extras: the text stands without them
        return Report(text)
