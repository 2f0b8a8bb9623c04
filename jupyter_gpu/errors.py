"""Warnings and errors of jupyter_gpu that users may want to filter or catch."""

from __future__ import annotations


class GPUAlreadyInitializedWarning(UserWarning):
    """A framework in this kernel already initialized the GPU, so a new GPU plan cannot take effect.

    The plan and the environment are left unchanged; restart the kernel to apply a new plan.
    """
