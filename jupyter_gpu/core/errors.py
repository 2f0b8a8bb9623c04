"""Warnings and errors of jupyter_gpu that users may want to filter or catch."""

from __future__ import annotations


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


def warn(message: str, category: type[Warning], source: str = "jupyter_gpu") -> None:
    """Show ``message`` every time (not just the first time from one line), unless a filter ignores it."""
    import warnings

    warnings.warn_explicit(message, category, filename=source, lineno=1, module="jupyter_gpu", registry={})
