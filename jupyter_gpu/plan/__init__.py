"""The kernel's GPU plan: which GPUs it uses, how much of their memory, and how it may grow.

This is the pure core behind ``%gpu_select`` and ``%gpu_limit``: it parses what a person typed,
checks it against the GPUs NVML sees and the fence an admin set, and returns an immutable
:class:`GpuPlan`. It imports no IPython and no framework, and changes nothing: applying a plan to
TensorFlow, PyTorch and JAX is :mod:`jupyter_gpu.frameworks`' job.

Selections (``SPEC``), always in NVML's numbering (PCI bus order, as ``nvidia-smi`` and the monitor):

``0`` / ``1,3``
    GPU indices; the order given is the order the frameworks number them in (``3,1`` makes GPU 3
    TensorFlow's ``/GPU:0`` and PyTorch's ``cuda:0``).
``GPU-8f3c`` …
    GPU UUIDs; any prefix that matches exactly one GPU.
``auto`` / ``auto:N``
    the N idlest GPUs (N = 1 for ``auto``), chosen by :func:`select_idlest`.
``all``
    every GPU the kernel may use (the whole fence, or every GPU when there is none).
``none``
    no GPU: CPU only.
``0:1`` / ``MIG-5e3d`` …
    a MIG slice (docs/mig.md): GPU 0's MIG device 1 (the numbering ``jupyter-gpu status``, the
    panel and the sidebar show), or a MIG UUID (a unique prefix, or ``MIG-GPU-<uuid>/<gi>/<ci>``).
    CUDA enumerates at most one MIG device per process, so a slice is selected alone; a GPU in MIG
    mode cannot be selected whole. When the kernel may use only slices (its fence names slices, or
    every GPU it may use is in MIG mode) ``auto`` chooses the idlest slice and ``all`` the one slice
    of the fence. ``%gpu_limit`` percentages are of the slice's memory.

Sizes: ``2048`` (MiB), ``512MiB``, ``2GiB``, ``1.5G``, ``1T`` (K, M, G, T with or without ``B``/``iB``
are all binary multiples, as ``nvidia-smi`` counts), or ``30%`` of that GPU's total memory.

The admin fence: a ``CUDA_VISIBLE_DEVICES`` the kernel was *started* with is an assignment (GPU
indices or UUIDs, or a MIG UUID: the usual way a spawner hands out a slice). GPUs
outside it are refused and ``all`` means the fence; the fence is never widened. An
``NVIDIA_VISIBLE_DEVICES`` was already applied by the container runtime (NVML inside sees only those
GPUs, numbered from 0; its indices are the host's): only UUIDs in it narrow anything.
The admin ceiling (``max_limit``) caps every GPU's memory limit and is the limit when the
user sets none.

Every problem is a :class:`PlanError` whose message is one line naming the problem and the valid
choices.
"""

from __future__ import annotations

# The package's names, from the modules that hold them: sizes (parse_size), fence (the admin's),
# selection and mig (SPEC), auto (the idlest GPUs), gpu_plan (the plan itself). Names outside
# __all__ are re-exported with "as" (code imports them from here too); session.defaults'
# admin_ceiling calls plan.environment_at_process_start (tests replace it here).
from ..core.environ import environment_at_process_start as environment_at_process_start
from ..core.errors import PlanError  # defined in core (frameworks raise it too); still plan.PlanError
from ..core.units import MIB as MIB  # importable from here before the split (tests do)
from .auto import NoGpuFits, fit_hints, select_idlest
from .auto import other_users as other_users
from .fence import Fence, kernel_start_fence
from .gpu_plan import GpuPlan, PlannedGpu, PlanRequest, build_plan, plan_magics
from .gpu_plan import with_request as with_request
from .mig import ONE_MIG_DEVICE as ONE_MIG_DEVICE
from .selection import SELECT_CHOICES as SELECT_CHOICES
from .selection import SelectionSpec as SelectionSpec
from .selection import parse_selection
from .sizes import Size, parse_size, split_sizes

__all__ = [
    "Fence",
    "GpuPlan",
    "NoGpuFits",
    "PlanError",
    "PlanRequest",
    "PlannedGpu",
    "Size",
    "build_plan",
    "current_plan",
    "fit_hints",
    "kernel_start_fence",
    "parse_selection",
    "parse_size",
    "plan_magics",
    "select_idlest",
    "set_current_plan",
    "split_sizes",
]

# -- the kernel's plan ----------------------------------------------------------------------------

_current = GpuPlan()


def current_plan() -> GpuPlan:
    """This kernel's GPU plan (an empty plan until ``%gpu_select``/``%gpu_limit`` or admin defaults)."""
    return _current


def set_current_plan(plan: GpuPlan) -> None:
    """Record ``plan`` as the kernel's plan (only after it has been applied)."""
    global _current
    _current = plan
