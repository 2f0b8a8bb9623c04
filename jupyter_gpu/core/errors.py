"""Warnings and errors of jupyter_gpu that users may want to filter or catch.

The base error types that more than one layer raises or catches live here, so a layer never imports
another layer's module just to name an exception. Each is re-exported from the module that defined
it before (``jupyter_gpu.plan.PlanError`` is this ``PlanError``), so existing imports and
``except`` clauses keep working. Errors raised and caught within one module stay in that module.
"""

from __future__ import annotations

import re

__all__ = [
    "GPUAlreadyInitializedWarning",
    "GPUPlanMismatchWarning",
    "PlanError",
    "ScenarioError",
    "WireError",
    "warn",
    "warning_text",
]


class PlanError(ValueError):
    """Bad input for a GPU plan; the message is one line naming the problem and the valid choices.

    Raised by :mod:`jupyter_gpu.plan` (a selection, size or limit that cannot be planned; its
    subclass ``plan.NoGpuFits`` when ``auto:N`` finds fewer than N GPUs that qualify now) and by
    :func:`jupyter_gpu.frameworks.apply_plan` ("<framework> refused the plan (<error>); nothing was
    changed"). The magics catch it and show the message as a ``UsageError``.
    """


class WireError(ValueError):
    """Untrusted data (a file, answer or report another party wrote) that cannot be used.

    Raised by :mod:`jupyter_gpu.core.wire` (``loads`` and the ``Fields`` reads), and by the readers
    built on it through their own subclasses (``ReportError``, ``BadAnswer``, ``PrometheusError``,
    :class:`ScenarioError`). The message is one line naming the field's path and the rule it
    breaks (``gpus[2].processes[0].pid must be a whole number in 1..4294967295``), or what is wrong
    with the whole text (``nested too deeply (more than 32 levels)``); a caller drops that one input
    with that line and goes on. Re-exported as ``jupyter_gpu.core.wire.WireError``.
    """


class ScenarioError(WireError):
    """The scenario (file, number or preset) cannot be used; the message says why, in one line.

    Raised by :mod:`jupyter_gpu.simulate` when a simulated-GPU scenario is read; caught by the
    NVML reader (:mod:`jupyter_gpu.sources.nvml`), which reports "simulated GPUs could not be set
    up: <message>" as NVML being unavailable. A :class:`WireError` (and so a ``ValueError``): a
    scenario file is untrusted JSON, read with :mod:`jupyter_gpu.core.wire`.
    """


class GPUAlreadyInitializedWarning(UserWarning):
    """A framework in this kernel already initialized the GPU, so a new GPU plan cannot take effect.

    The plan and the environment are left unchanged; restart the kernel to apply a new plan.
    """


class GPUPlanMismatchWarning(UserWarning):
    """A framework does not (or will not) use what the kernel's GPU plan says.

    Raised when code changed ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` behind the magics'
    back, or when a framework that just started CUDA sees other GPUs than the plan (for example a
    CPU-only build). The message names the cause and what to do.
    """


# The stand-in "file" of jupyter_gpu's warnings: the formatter knows them by it and shows no location
# (Python's default would print "jupyter_gpu:1:", a file and line that do not exist).
_SOURCE = "<jupyter_gpu>"
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)'\]]\.) +(?=[A-Z%(])")


def warning_text(message: str, category: type[Warning]) -> str:
    """A warning of jupyter_gpu as it is shown: its category (what a filter names), then the message
    one sentence per line, the lines after the first indented by 2, each wrapped to
    :data:`jupyter_gpu.core.text.WIDTH` columns (:func:`jupyter_gpu.core.text.wrap`: never inside a
    word, a path or a magic with its arguments) and continued indented by 4; no file:line. Pure."""
    from .text import wrap

    lines = [line.strip() for part in message.splitlines() for line in _SENTENCE_END.split(part) if line.strip()]
    first = wrap(f"{category.__name__}: {lines[0] if lines else ''}", indent="    ")  # as the others' go on
    return "\n".join([first, *(wrap(f"  {line}") for line in lines[1:])]) + "\n"


def warn(message: str, category: type[Warning], source: str = "jupyter_gpu") -> None:
    """Show ``message`` every time (not just the first time from one line), unless a filter ignores it.

    A real ``warnings`` warning of ``category`` (``warnings.filterwarnings("ignore", category=...)``,
    ``"error"``, ``pytest.warns`` and ``catch_warnings(record=True)`` work as for any warning), from
    module ``jupyter_gpu`` (``source`` is kept for callers that name one); shown as
    :func:`warning_text` writes it, without the fake file:line Python would print."""
    import warnings

    previous = warnings.formatwarning

    def shown(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
    ) -> str:
        if filename == _SOURCE:
            return warning_text(str(message), category)
        return previous(message, category, filename, lineno, line)

    warnings.formatwarning = shown  # for this one warning: every other one is shown as before
    try:
        warnings.warn_explicit(message, category, filename=_SOURCE, lineno=0, module="jupyter_gpu", registry={})
    finally:
        warnings.formatwarning = previous
