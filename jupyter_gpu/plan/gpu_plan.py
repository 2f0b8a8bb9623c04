"""The plan itself: :class:`PlanRequest` (what was asked, as typed), :func:`build_plan` (checked
against the GPUs and the fence, under the admin ceiling) -> the immutable :class:`GpuPlan`, and
:func:`plan_magics` (the magic lines that make a request the plan of a fresh kernel)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..core.errors import PlanError
from ..core.i18n import _
from ..core.snapshot import Snapshot
from ..core.units import format_bytes
from .fence import Fence, kernel_start_fence
from .mig import _resolve_mig
from .selection import _resolve_selection, parse_selection
from .sizes import parse_size


@dataclass(frozen=True)
class PlanRequest:
    """What was asked for, as typed: a plan is rebuilt from it whenever anything changes."""

    selection: str | None = None  # None: no selection made (frameworks see the kernel's GPUs)
    min_free: str | None = None
    limits: tuple[str, ...] = ()  # one size per logical device on each GPU; () = no limit
    growth: bool = False
    max_limit: str | None = None  # the admin ceiling
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    soft_placement: bool | None = None
    log_device_placement: bool | None = None


@dataclass(frozen=True)
class PlannedGpu:
    """A GPU of the plan as it was when the plan was made."""

    index: int
    uuid: str
    name: str
    memory_total: int | None
    memory_free: int | None


@dataclass(frozen=True)
class GpuPlan:
    """The kernel's GPU plan: validated, immutable; :func:`build_plan` makes one.

    ``selected_indices`` are NVML indices in the order the frameworks will number them, or None
    when no selection was made. ``gpus`` describes every GPU the plan concerns (the selection, or
    the GPUs the kernel may use when no selection was made). ``limits_bytes[index]`` holds one cap
    per logical device on that GPU.
    """

    request: PlanRequest = field(default_factory=PlanRequest)
    selected_indices: tuple[int, ...] | None = None
    gpus: tuple[PlannedGpu, ...] = ()
    limits_bytes: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    limit_from_ceiling: bool = False
    selected_slice: str | None = None  # MIG: the MIG UUID selected (its GPU is selected_indices[0])
    auto_kept: bool = False  # ``auto`` was not run again: the GPUs are what it chose for an earlier plan

    @property
    def growth(self) -> bool:
        return self.request.growth

    def memory_limit_bytes(self, index: int) -> int | None:
        """The total cap on GPU ``index`` (the sum over its logical devices); None: no cap."""
        limits = self.limits_bytes.get(index)
        return sum(limits) if limits else None

    def logical_limits_bytes(self, index: int) -> tuple[int, ...]:
        """One cap per logical device on GPU ``index``; () when it is not capped."""
        return tuple(self.limits_bytes.get(index, ()))

    def gpu(self, index: int) -> PlannedGpu | None:
        return next((gpu for gpu in self.gpus if gpu.index == index), None)

    @property
    def cuda_visible_devices(self) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` this plan asks for (``"-1"``: none); None: leave it alone."""
        if self.selected_indices is None:
            return None
        if self.selected_slice is not None:
            return self.selected_slice
        return ",".join(map(str, self.selected_indices)) or "-1"

    @property
    def has_memory_settings(self) -> bool:
        return bool(self.limits_bytes) or self.growth

    def memory_fraction(self, index: int) -> float | None:
        """The cap on GPU ``index`` as a share of its total memory (for PyTorch and JAX)."""
        limit = self.memory_limit_bytes(index)
        gpu = self.gpu(index)
        if limit is None or gpu is None or not gpu.memory_total:
            return None
        return min(1.0, limit / gpu.memory_total)


def build_plan(
    request: PlanRequest,
    snapshot: Snapshot,
    fence: Fence | None = None,
    own_user: str | None = None,
    claims: Mapping[int | str, int] | None = None,
    require_idle: bool = False,
    kept: GpuPlan | None = None,
) -> GpuPlan:
    """Validate ``request`` against the GPUs and the fence; raise :class:`PlanError` on any problem.

    ``claims`` (other kernels' claims per NVML index) and ``require_idle`` only shape ``auto``
    (see :func:`select_idlest`). ``kept``: the plan in force, whose ``auto`` choice stands when
    ``request`` selects with the same ``auto`` (a ``%gpu_limit`` after ``%gpu_select auto`` keeps
    the GPUs; only a new ``%gpu_select`` chooses again). The kept GPUs are checked as if selected
    by index; the plan says so in :attr:`GpuPlan.auto_kept`."""
    fence = kernel_start_fence() if fence is None else fence
    min_free = None if request.min_free is None else parse_size(request.min_free)
    if min_free is not None and min_free.percent is not None:
        raise PlanError(
            _("--min-free {size} must be an absolute size such as 8GiB, not a share").format(
                size=repr(request.min_free)
            )
        )
    if min_free is not None and (request.selection is None or not request.selection.lower().startswith("auto")):
        raise PlanError(_("--min-free only applies to auto or auto:N; drop it or select with auto"))
    selected: tuple[int, ...] | None = None
    mig: tuple[int, str] | None = None
    auto_kept = False
    if request.selection is not None:
        spec = parse_selection(request.selection)
        if spec.kind != "none" and snapshot.nvml_available and (why := fence.unknown(snapshot.gpus)):
            raise PlanError(_("{why}; until then select none").format(why=why))
        if spec.kind == "auto" and (chosen := _auto_choice(kept, request)) is not None:
            spec, auto_kept = parse_selection(chosen), True
        try:
            mig = _resolve_mig(spec, snapshot, fence, min_free, own_user, claims, require_idle)
            if mig is not None:
                selected = (mig[0],)
            else:
                selected = _resolve_selection(spec, snapshot, fence, min_free, own_user, claims, require_idle)
        except PlanError as error:
            if not auto_kept:
                raise
            before = ", ".join(map(str, kept.selected_indices or ())) if kept is not None else "?"
            raise PlanError(
                _(
                    "GPU {before}, which {auto} chose before, cannot be kept: {error}; %gpu_select {auto} chooses again"
                ).format(before=before, auto=request.selection, error=error)
            ) from None
    if selected is None and snapshot.nvml_available and (fenced := fence.allowed_slice(snapshot.gpus)):
        found = snapshot.find_slice(fenced)
        mig = None if found is None else (found[0].index, fenced)  # the spawner's slice: limits are of it
    if selected is not None:
        concerned = selected
    elif snapshot.nvml_available:
        concerned = fence.allowed(snapshot.gpus)
    else:
        concerned = ()
    gpus = tuple(
        _planned(snapshot, index, mig[1] if mig is not None and index == mig[0] else None) for index in concerned
    )
    sizes = tuple(parse_size(text) for text in request.limits)
    ceiling = None if not request.max_limit else parse_size(request.max_limit)
    limit_from_ceiling = not sizes and ceiling is not None
    if selected == ():
        sizes, ceiling = (), None  # CPU only: nothing to cap (the sizes come back with a new selection)
    if sizes and not gpus:
        raise PlanError(
            _("no GPU to limit: NVML sees none ({error}); select GPUs by index first").format(
                error=snapshot.error or _("no GPUs")
            )
        )
    limits: dict[int, tuple[int, ...]] = {}
    for gpu in gpus:
        per_device = tuple(size.resolve(gpu.memory_total) for size in sizes)
        total = sum(per_device)
        if per_device and gpu.memory_total and total > gpu.memory_total:
            raise PlanError(
                _(
                    "the limit {sizes} = {total} is more than GPU {index}'s memory ({memory}); "
                    "give at most {memory} in all"
                ).format(
                    sizes=" + ".join(map(str, sizes)),
                    total=format_bytes(total),
                    index=gpu.index,
                    memory=format_bytes(gpu.memory_total),
                )
            )
        if ceiling is not None:
            cap = ceiling.resolve(gpu.memory_total)
            if per_device and total > cap:
                raise PlanError(
                    _(
                        "the limit {total} on GPU {index} is above the admin ceiling "
                        "max_limit={ceiling} ({cap}); give at most {cap}"
                    ).format(total=format_bytes(total), index=gpu.index, ceiling=ceiling, cap=format_bytes(cap))
                )
            if not per_device:
                per_device = (cap,)
        if per_device:
            limits[gpu.index] = per_device
    return GpuPlan(
        request=request,
        selected_indices=selected,
        gpus=gpus,
        limits_bytes=limits,
        limit_from_ceiling=limit_from_ceiling and bool(limits),
        selected_slice=None if mig is None else mig[1],
        auto_kept=auto_kept,
    )


def _auto_choice(kept: GpuPlan | None, request: PlanRequest) -> str | None:
    """What ``auto`` chose for ``kept``, as a SPEC (indices, or the MIG UUID), when ``request``
    selects with the same ``auto`` and ``--min-free``; None: choose again."""
    if kept is None or not kept.selected_indices or kept.request.selection is None:
        return None
    if (kept.request.selection.strip().lower(), kept.request.min_free) != (
        (request.selection or "").strip().lower(),
        request.min_free,
    ):
        return None
    if kept.selected_slice is not None:
        return kept.selected_slice
    uuids = [next((gpu.uuid for gpu in kept.gpus if gpu.index == index), "") for index in kept.selected_indices]
    if all(uuids):  # by UUID: the same GPUs even if NVML numbered them anew
        return ",".join(uuids)
    return ",".join(map(str, kept.selected_indices))


def _planned(snapshot: Snapshot, index: int, slice_uuid: str | None = None) -> PlannedGpu:
    """The GPU as planned; a selected MIG slice stands in for its GPU (its UUID, name and memory:
    what the frameworks will see as the device, so limits in percent are of the slice)."""
    try:
        gpu = snapshot.gpu(index)
    except KeyError:
        return PlannedGpu(index=index, uuid="", name=f"GPU {index}", memory_total=None, memory_free=None)
    if slice_uuid is not None:
        slice_ = gpu.slice(slice_uuid)
        return PlannedGpu(
            index=gpu.index,
            uuid=slice_.uuid,
            name=slice_.name,
            memory_total=slice_.memory_total or None,
            memory_free=slice_.memory_free,
        )
    return PlannedGpu(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        memory_total=gpu.memory_total or None,
        memory_free=gpu.memory_free,
    )


def plan_magics(request: PlanRequest) -> list[str]:
    """The magic lines that make ``request`` the plan of a fresh kernel (for "restart and apply").

    Only ``%load_ext jupyter_gpu`` and jupyter_gpu's own magics, with values that passed this
    module's parsing; the JupyterLab renderer refuses anything else. The admin's ceiling is not
    repeated (the new kernel gets it from its environment).
    """
    lines = ["%load_ext jupyter_gpu"]
    select = []
    if request.selection is not None:
        select.append(request.selection.strip())
        if request.min_free:
            select.append(f"--min-free {request.min_free.strip()}")
    if request.growth:
        select.append("--growth")
    if select:
        lines.append("%gpu_select " + " ".join(select))
    if request.limits:
        lines.append("%gpu_limit " + " ".join(size.strip() for size in request.limits))
    threads = []
    if request.intra_op_threads is not None:
        threads.append(f"--intra {request.intra_op_threads}")
    if request.inter_op_threads is not None:
        threads.append(f"--inter {request.inter_op_threads}")
    if request.soft_placement is not None:
        threads.append(f"--soft-placement {'on' if request.soft_placement else 'off'}")
    if request.log_device_placement is not None:
        threads.append(f"--log-placement {'on' if request.log_device_placement else 'off'}")
    if threads:
        lines.append("%gpu_threads " + " ".join(threads))
    return lines


def with_request(plan: GpuPlan, **changes: object) -> PlanRequest:
    """The plan's request with ``changes`` (keyword names of :class:`PlanRequest`)."""
    # ``changes`` are any PlanRequest fields, so mypy cannot check them; replace() refuses unknown names.
    return replace(plan.request, **changes)  # type: ignore[arg-type]
