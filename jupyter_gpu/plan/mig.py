"""MIG slices in a selection (docs/mig.md): ``0:1``, a MIG UUID, and ``auto``/``all`` when the
kernel may use only slices. CUDA enumerates at most one MIG device per process (:data:`ONE_MIG_DEVICE`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..core.errors import PlanError
from ..core.i18n import N_, _
from ..core.snapshot import MigSlice, Snapshot
from ..core.units import format_bytes
from .auto import NoGpuFits
from .fence import Fence
from .selection import SelectionSpec, _choices, _slice_listing
from .sizes import Size

_SLICE_NOTATION = re.compile(r"([0-9]{1,6}):([0-9]{1,3})")
#: Marked, not translated: shown through ``_(ONE_MIG_DEVICE)``.
ONE_MIG_DEVICE = N_(
    "CUDA enumerates at most one MIG device per process (a second slice, or a slice next to a GPU, "
    "would be invisible to the frameworks)"
)


def _resolve_mig(
    spec: SelectionSpec,
    snapshot: Snapshot,
    fence: Fence,
    min_free: Size | None,
    own_user: str | None,
    claims: Mapping[int | str, int] | None = None,
    require_idle: bool = False,
) -> tuple[int, str] | None:
    """The (GPU index, MIG UUID) a SPEC selects when it selects a slice; None when it selects whole
    GPUs. Raises :class:`PlanError` for what CUDA cannot do with slices (see :data:`ONE_MIG_DEVICE`)."""
    if spec.kind == "none" or not snapshot.nvml_available:
        return None
    gpus = snapshot.gpus
    fenced_slice = fence.allowed_slice(gpus)
    allowed = fence.allowed(gpus)
    candidates = [
        (gpu, s)
        for gpu in gpus
        if gpu.index in allowed and gpu.mig_mode
        for s in gpu.slices
        if fenced_slice is None or s.uuid == fenced_slice
    ]
    only_slices = fenced_slice is not None or (
        bool(allowed) and all(gpu.mig_mode for gpu in gpus if gpu.index in allowed)
    )
    if spec.kind in ("auto", "all"):
        if not only_slices:
            return None  # whole GPUs to choose from (GPUs in MIG mode are left out, see _resolve_selection)
        if spec.kind == "all" or spec.count == 1:
            if not candidates:
                raise PlanError(
                    _("{spec}: this kernel may use only MIG slices and none exists now; select none").format(
                        spec=repr(spec.text)
                    )
                )
            if spec.kind == "all":
                if len(candidates) > 1:
                    raise PlanError(
                        _("'all' would be {count} MIG slices, and {why}; select one: {slices}").format(
                            count=len(candidates),
                            why=_(ONE_MIG_DEVICE),
                            slices=", ".join(f"{g.index}:{s.index} ({s.profile})" for g, s in candidates),
                        )
                    )
                return candidates[0][0].index, candidates[0][1].uuid
            own_pid = os.getpid()
            min_free_bytes = 0 if min_free is None else min_free.resolve(None)
            claims = claims or {}

            def others(slice_: MigSlice) -> bool:
                return any(
                    p.pid != own_pid and (own_user is None or p.user != own_user) and p.type != "graphics"
                    for p in slice_.processes
                )

            eligible = [
                (g, s)
                for g, s in candidates
                if s.error is None
                and s.memory_free >= min_free_bytes
                and not (require_idle and (others(s) or claims.get(s.uuid)))
            ]
            if not eligible:
                if min_free_bytes:
                    need = _(
                        "auto needs a MIG slice with at least {size} free, and none of the slices this kernel "
                        "may use has it ({slices})"
                    )
                elif require_idle:
                    need = _(
                        "auto needs a MIG slice with no other users' work or claims, and none of the slices "
                        "this kernel may use has it ({slices})"
                    )
                else:
                    need = _(
                        "auto needs a MIG slice with that can be read, and none of the slices this kernel "
                        "may use has it ({slices})"
                    )
                slices = ", ".join(
                    _("{slice}: {free} free").format(slice=f"{g.index}:{s.index}", free=format_bytes(s.memory_free))
                    for g, s in candidates
                )
                raise NoGpuFits(need.format(size=format_bytes(min_free_bytes), slices=slices))
            # As for GPUs: slices without other users' work first, then the fewest claims of other
            # kernels (so kernels started at once spread over the slices), then the most free memory.
            best = min(
                eligible,
                key=lambda pair: (
                    others(pair[1]),
                    claims.get(pair[1].uuid, 0),
                    -pair[1].memory_free,
                    pair[0].index,
                    pair[1].index,
                ),
            )
            return best[0].index, best[1].uuid
        raise PlanError(
            _("{spec}: this kernel may use only MIG slices, and {why}; use auto").format(
                spec=repr(spec.text), why=_(ONE_MIG_DEVICE)
            )
        )
    picked: list[tuple[int, str]] = []
    for item in spec.items:
        notation = _SLICE_NOTATION.fullmatch(item)
        if notation is not None:
            gpu_index, position = int(notation[1]), int(notation[2])
            gpu = next((g for g in gpus if g.index == gpu_index), None)
            if gpu is None:
                raise PlanError(
                    _("there is no GPU {index}; {choices}").format(
                        index=gpu_index, choices=_choices(gpus, allowed, fence)
                    )
                )
            slice_ = next((s for s in gpu.slices if s.index == position), None)
            if slice_ is None:
                what = (
                    _("GPU {index} is not in MIG mode; its slices: {slices}")
                    if not gpu.mig_mode
                    else _("GPU {index} has no MIG slice {position}; its slices: {slices}")
                )
                raise PlanError(what.format(index=gpu_index, position=position, slices=_slice_listing(gpu)))
            picked.append((gpu.index, slice_.uuid))
        elif item.upper().startswith("MIG-"):
            from ..core.visibility import _find_slice

            found = _find_slice(item, gpus)
            if found is None:
                known = "; ".join(f"{g.index}:{s.index} {s.uuid}" for g in gpus for s in g.slices) or _("none")
                raise PlanError(
                    _(
                        "no MIG slice has a UUID starting with {item} (or it is not unique); MIG slices: {slices}"
                    ).format(item=repr(item), slices=known)
                )
            picked.append(found)
    if not picked:
        return None
    if len(spec.items) > 1:
        raise PlanError(
            _("{spec}: {why}; select one slice per kernel").format(spec=repr(spec.text), why=_(ONE_MIG_DEVICE))
        )
    index, uuid = picked[0]
    if fenced_slice is not None and uuid != fenced_slice:
        raise PlanError(
            _(
                "slice {uuid} is outside the GPUs assigned to this kernel ({fence}); the slice assigned is {assigned}"
            ).format(uuid=uuid, fence=fence.describe(), assigned=fenced_slice)
        )
    if fenced_slice is None and index not in allowed:
        raise PlanError(
            _("GPU {index} is outside the GPUs assigned to this kernel ({fence}); {choices}").format(
                index=index, fence=fence.describe(), choices=_choices(gpus, allowed, fence)
            )
        )
    return index, uuid
