"""A GPU plan's caps carried to Python child processes in one environment variable.

The selection, growth and JAX's share already travel as ordinary variables (``CUDA_VISIBLE_DEVICES``,
``TF_FORCE_GPU_ALLOW_GROWTH``, ``PYTORCH_CUDA_ALLOC_CONF``, ``XLA_CLIENT_MEM_FRACTION``, ...), which a
child inherits. TensorFlow's memory limit (logical devices) and PyTorch's memory fraction are calls
made in a process once the framework is imported: no variable carries them. :func:`plan_environment`
writes what those calls need as ``JUPYTER_GPU_PLAN``; the start-up hook (``jupyter_gpu_plan.pth`` →
:mod:`jupyter_gpu._startup`) reads it back with :func:`plan_from_environment` in every Python
interpreter that starts with it, and the same post-import hooks as a kernel's
(:meth:`jupyter_gpu.frameworks.Framework.hook`) make the calls when the child imports the framework.

The value is compact JSON with a version::

    {"v": 1, "growth": bool, "selected": [int] | null,
     "gpus": [{"index": int, "uuid": str, "name": str, "total": int | null}],
     "limits": {"<index>": [bytes per logical device]}}

``gpus`` are the GPUs the sender knew (every GPU NVML showed, where the caller passes them), for
CUDA's numbering; ``limits`` the plan's caps per NVML index.

What it does and does not do:

- **A cap per process.** Each child applies the cap to its own allocator. Caps are cooperative and
  not shared: two children with a 4 GiB cap can take 8 GiB together, and so can a kernel and its
  child. N DataLoader workers that use CUDA may each take the cap.
- **Python children only**, and only those whose interpreter has jupyter_gpu installed (the
  ``.pth`` file lives in its ``site-packages``). Another program gets the environment part alone.
- **Only while the selection is the plan's.** A child whose ``CUDA_VISIBLE_DEVICES`` (or order)
  differs from the plan's selection (``CUDA_VISIBLE_DEVICES=0 python x.py``) gets nothing: its own
  choice stands, and one line says so.
- **Nothing when there is no cap**: a plan without a memory limit, or one on a MIG slice (a slice
  is a hard partition already), gives no variable (:func:`plan_environment` returns ``{}``).

The reader is strict (:mod:`jupyter_gpu.core.wire`): a malformed value raises :class:`WireError`
with one line; the hook prints it and applies nothing. Pure: no I/O; the caller reads ``os.environ``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.visibility import CudaEnv, Gpu
from ..core.wire import Fields, WireError, integer, loads
from .gpu_plan import GpuPlan, PlannedGpu, PlanRequest

__all__ = ["PLAN_VARIABLE", "ChildPlan", "WireError", "plan_environment", "plan_from_environment"]

PLAN_VARIABLE = "JUPYTER_GPU_PLAN"
VERSION = 1
MAX_BYTES = 64 * 1024
MAX_GPUS = 64
MAX_INDEX = 1023
MAX_DEVICES_PER_GPU = 16  # logical GPUs of one GPU (TensorFlow)
MAX_BYTES_PER_GPU = 2**50  # 1 PiB: beyond any GPU
MIN_CAP = 1  # bytes: a share of a small GPU can be less than a MiB


def plan_environment(plan: GpuPlan, gpus: Sequence[Gpu] | None = None) -> dict[str, str]:
    """``{"JUPYTER_GPU_PLAN": value}``: what a Python child needs to apply ``plan``'s caps, or ``{}``
    when the plan has none to carry (no memory limit, or a MIG slice).

    ``gpus``: every GPU NVML shows (a snapshot's, or the kernel's last), so the child can tell which
    of CUDA's devices is which GPU; by default the plan's own GPUs (enough for a selection, whose
    ``CUDA_VISIBLE_DEVICES`` counts in PCI bus order)."""
    if not plan.limits_bytes or plan.selected_slice is not None:
        return {}
    known = {gpu.index: gpu for gpu in (gpus or ())}
    for gpu in plan.gpus:
        known.setdefault(gpu.index, gpu)
    totals = {gpu.index: gpu.memory_total for gpu in plan.gpus}
    data = {
        "v": VERSION,
        "growth": plan.growth,
        "selected": None if plan.selected_indices is None else list(plan.selected_indices),
        "gpus": [
            {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "total": totals.get(gpu.index)}
            for gpu in sorted(known.values(), key=lambda gpu: gpu.index)
        ],
        "limits": {str(index): list(sizes) for index, sizes in plan.limits_bytes.items()},
    }
    return {PLAN_VARIABLE: json.dumps(data, separators=(",", ":"))}


@dataclass(frozen=True)
class ChildPlan:
    """A plan read back from ``JUPYTER_GPU_PLAN``: the :class:`GpuPlan` a child applies (its GPUs,
    limits, growth; no threads or placement) and every GPU the sender knew (for CUDA's numbering)."""

    plan: GpuPlan
    gpus: tuple[PlannedGpu, ...]

    def mismatch(self, env: CudaEnv) -> str | None:
        """Why the plan must not be applied in a process whose CUDA variables are ``env`` (None: it
        may): a selection is applied only where CUDA will show exactly the selected GPUs, in the order
        the plan wrote them (``CUDA_DEVICE_ORDER=PCI_BUS_ID``); otherwise the child's own choice stands."""
        wanted = self.plan.cuda_visible_devices
        if wanted is None:
            return None  # no selection: each cap goes to the GPU CUDA shows, where that can be told
        if env.visible_devices != wanted or not env.pci_order:
            from ..core.i18n import _  # only when there is something to say: a child's start stays light

            return _(
                "this process has {cuda}, and the plan selected GPU {indices} (CUDA_VISIBLE_DEVICES "
                "{wanted}, CUDA_DEVICE_ORDER PCI_BUS_ID)"
            ).format(
                cuda=env.describe(),
                indices=", ".join(map(str, self.plan.selected_indices or ())),
                wanted=repr(wanted),
            )
        return None

    def known_gpus(self) -> tuple[PlannedGpu, ...]:
        """The GPUs for CUDA's numbering: those carried, and a nameless stand-in for each index below
        the highest that was not (``CUDA_VISIBLE_DEVICES=2`` in PCI bus order is NVML's GPU 2 whatever
        GPUs 0 and 1 are; in fastest-first order a nameless GPU keeps the mapping unknown, never wrong)."""
        by_index = {gpu.index: gpu for gpu in self.gpus}
        top = max(by_index, default=-1)
        return tuple(
            by_index.get(index, PlannedGpu(index=index, uuid="", name="", memory_total=None, memory_free=None))
            for index in range(top + 1)
        )


def plan_from_environment(value: str) -> ChildPlan:
    """The plan in ``value`` (``JUPYTER_GPU_PLAN``); raises :class:`WireError` with one line naming
    what is wrong (size, nesting, version, a field's type or range) on anything malformed."""
    data = Fields(loads(value, max_bytes=MAX_BYTES, max_depth=4))
    version = data.integer("v", 0, 2**31)
    if version != VERSION:
        raise WireError(f"v must be {VERSION}, not {version} (a jupyter_gpu of another version wrote it)")
    growth = data.boolean("growth")
    selected_raw = data.raw("selected")
    selected: tuple[int, ...] | None = None
    if selected_raw is not None:
        entries = data.items("selected", MAX_GPUS)
        selected = tuple(_index(entry, f"selected[{i}]") for i, entry in enumerate(entries))
        if len(set(selected)) != len(selected):
            raise WireError("selected names a GPU twice")
    gpus: dict[int, PlannedGpu] = {}
    for gpu in data.objects("gpus", MAX_GPUS):
        index = _index(gpu.raw("index"), gpu.path("index"))
        if index in gpus:
            raise WireError(f"{gpu.path('index')} names GPU {index} twice")
        gpus[index] = PlannedGpu(
            index=index,
            uuid=gpu.text("uuid", 128, min_chars=0),
            name=gpu.text("name", 256, min_chars=0),
            memory_total=gpu.optional_integer("total", 1, MAX_BYTES_PER_GPU),
            memory_free=None,
        )
    limits: dict[int, tuple[int, ...]] = {}
    raw_limits = data.mapping("limits", MAX_GPUS, max_key_chars=4)
    for key in raw_limits:
        where = f"limits.{key}"
        if not key.isascii() or not key.isdigit() or int(key) not in gpus:
            raise WireError(f"{where}: the key must be the index of a GPU in gpus")
        sizes = Fields(raw_limits).items(key, MAX_DEVICES_PER_GPU)
        if not sizes:
            raise WireError(f"{where} must list at least one size")
        limits[int(key)] = tuple(
            integer(size, f"{where}[{i}]", MIN_CAP, MAX_BYTES_PER_GPU) for i, size in enumerate(sizes)
        )
    if not limits:
        raise WireError("limits is empty: a plan without a cap is not carried")
    if selected is not None and not set(selected) <= set(gpus):
        raise WireError("selected names a GPU that gpus does not describe")
    concerned = selected if selected is not None else tuple(sorted(limits))
    if not set(limits) <= set(concerned):
        raise WireError("limits caps a GPU outside the selection")
    plan = GpuPlan(
        request=PlanRequest(growth=growth),
        selected_indices=selected,
        gpus=tuple(gpus[index] for index in concerned),
        limits_bytes=limits,
    )
    return ChildPlan(plan=plan, gpus=tuple(gpus.values()))


def _index(value: object, where: str) -> int:
    return integer(value, where, 0, MAX_INDEX)
