"""Selections (``SPEC``, see :mod:`jupyter_gpu.plan`): :func:`parse_selection` reads what was typed,
:func:`_resolve_selection` checks whole GPUs against the snapshot and the fence (a MIG slice is
:mod:`.mig`'s), and the one-line listings of valid choices the errors name."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.errors import PlanError
from ..core.i18n import N_, _
from ..core.snapshot import GpuInfo, Snapshot
from .auto import select_idlest
from .fence import Fence
from .sizes import Size

_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() accepts '²', which int() refuses


@dataclass(frozen=True)
class SelectionSpec:
    """A parsed SPEC: ``kind`` is ``"gpus"`` (indices/UUIDs in ``items``), ``"auto"``, ``"all"`` or ``"none"``."""

    text: str
    kind: str
    items: tuple[str, ...] = ()
    count: int = 0


#: Marked, not translated: shown through ``_(SELECT_CHOICES)``.
SELECT_CHOICES = N_(
    "GPU indices like 0 or 1,3, UUIDs (unique prefixes), a MIG slice like 0:1 or its MIG UUID, "
    "auto, auto:N, all or none"
)


def parse_selection(text: str) -> SelectionSpec:
    """Parse a SPEC (see :mod:`jupyter_gpu.plan`) without looking at any GPU."""
    cleaned = text.strip()
    lowered = cleaned.lower()
    if not cleaned:
        raise PlanError(_("no GPUs given; valid choices: {choices}").format(choices=_(SELECT_CHOICES)))
    if lowered in {"all", "none"}:
        return SelectionSpec(text=cleaned, kind=lowered)
    if lowered == "auto" or lowered.startswith("auto:"):
        count_text = lowered.partition(":")[2] or "1"
        if not _DIGITS.fullmatch(count_text) or len(count_text) > 4 or int(count_text) < 1:
            raise PlanError(
                _("{spec}: auto:N needs a whole number N of at least 1; valid choices: {choices}").format(
                    spec=repr(cleaned), choices=_(SELECT_CHOICES)
                )
            )
        return SelectionSpec(text=cleaned, kind="auto", count=int(count_text))
    items = tuple(item.strip() for item in cleaned.split(","))
    if any(not item for item in items):
        raise PlanError(
            _("{spec} has an empty entry; valid choices: {choices}").format(
                spec=repr(cleaned), choices=_(SELECT_CHOICES)
            )
        )
    for item in items:
        if item.lower() in {"all", "none"} or item.lower().startswith("auto"):
            raise PlanError(
                _("{spec} mixes {item} with other entries; use it alone").format(spec=repr(cleaned), item=repr(item))
            )
        if item.startswith("-"):
            raise PlanError(
                _("{item} is not a GPU index; valid choices: {choices}").format(
                    item=repr(item), choices=_(SELECT_CHOICES)
                )
            )
    seen: set[str] = set()
    for item in items:
        if item.lower() in seen:
            raise PlanError(
                _("GPU {item} is given twice in {spec}; list each GPU once").format(item=repr(item), spec=repr(cleaned))
            )
        seen.add(item.lower())
    return SelectionSpec(text=cleaned, kind="gpus", items=items)


def _resolve_selection(
    spec: SelectionSpec,
    snapshot: Snapshot,
    fence: Fence,
    min_free: Size | None,
    own_user: str | None,
    claims: Mapping[int | str, int] | None = None,
    require_idle: bool = False,
) -> tuple[int, ...]:
    gpus = snapshot.gpus
    if spec.kind != "none" and snapshot.nvml_available and (why := fence.unknown(gpus)):
        raise PlanError(_("{why}; until then select none").format(why=why))
    allowed = fence.allowed(gpus) if snapshot.nvml_available else ()
    if snapshot.nvml_available and fence.allowed_slice(gpus) is None:
        allowed = tuple(i for i in allowed if not _in_mig_mode(snapshot, i))  # usable by slice only
    fenced = [gpu for gpu in gpus if gpu.index in allowed]
    if spec.kind == "none":
        return ()
    if not snapshot.nvml_available:
        if spec.kind == "auto":
            raise PlanError(
                _(
                    "{spec} needs NVML to see how busy the GPUs are, and NVML is unavailable "
                    "({error}); select GPUs by index, or none"
                ).format(spec=repr(spec.text), error=snapshot.error)
            )
        if spec.kind == "all":
            raise PlanError(
                _(
                    "'all' needs NVML to count the GPUs, and NVML is unavailable ({error}); "
                    "select GPUs by index, or none"
                ).format(error=snapshot.error)
            )
        if not all(_DIGITS.fullmatch(item) for item in spec.items):
            raise PlanError(
                _("UUIDs cannot be checked without NVML ({error}); select GPUs by index").format(error=snapshot.error)
            )
        return tuple(int(item) for item in spec.items)
    if spec.kind == "all":
        return tuple(allowed)
    if spec.kind == "auto":
        min_free_bytes = 0 if min_free is None else min_free.resolve(None)
        return select_idlest(
            fenced,
            spec.count,
            min_free_bytes=min_free_bytes,
            own_user=own_user,
            claims=claims,
            require_idle=require_idle,
        )
    choices = _choices(gpus, allowed, fence)
    indices: list[int] = []
    for item in spec.items:
        if _DIGITS.fullmatch(item):
            index = int(item) if len(item) < 10 else -1
            if not any(gpu.index == index for gpu in gpus):
                raise PlanError(
                    _("there is no GPU {index}; {choices}").format(
                        index=item if len(item) < 10 else item[:9] + "…", choices=choices
                    )
                )
        else:
            matches = [gpu.index for gpu in gpus if gpu.uuid and gpu.uuid.lower().startswith(item.lower())]
            if not matches:
                raise PlanError(
                    _("no GPU has a UUID starting with {item}; {choices}").format(item=repr(item), choices=choices)
                )
            if len(matches) > 1:
                raise PlanError(
                    _("{item} matches the UUIDs of GPUs {indices}; give more of the UUID").format(
                        item=repr(item), indices=", ".join(map(str, matches))
                    )
                )
            index = matches[0]
        if _in_mig_mode(snapshot, index):
            fenced_slice = fence.allowed_slice(gpus)
            gpu = snapshot.gpu(index)
            listing = (
                _slice_listing(gpu)
                if fenced_slice is None
                else ", ".join(f"{gpu.index}:{s.index} ({s.profile})" for s in gpu.slices if s.uuid == fenced_slice)
                or _("none assigned")
            )
            raise PlanError(
                _("GPU {index} is in MIG mode: CUDA cannot use it whole; select one of its slices: {slices}").format(
                    index=index, slices=listing
                )
            )
        if index not in allowed:
            raise PlanError(
                _("GPU {index} is outside the GPUs assigned to this kernel ({fence}); {choices}").format(
                    index=index, fence=fence.describe(), choices=choices
                )
            )
        if index in indices:
            raise PlanError(
                _("GPU {item} is given twice in {spec}; list each GPU once").format(item=index, spec=repr(spec.text))
            )
        indices.append(index)
    return tuple(indices)


def _in_mig_mode(snapshot: Snapshot, index: int) -> bool:
    return any(gpu.index == index and gpu.mig_mode for gpu in snapshot.gpus)


def _choices(gpus: Sequence[GpuInfo], allowed: Sequence[int], fence: Fence) -> str:
    usable = [gpu for gpu in gpus if gpu.index in allowed]
    if not usable:
        if fence.active:
            return _("this kernel may use no GPU ({fence}): choose none").format(fence=fence.describe())
        return _("this kernel may use no GPU: choose none")
    names = ", ".join(f"{gpu.index} ({gpu.uuid[:12]}…)" if gpu.uuid else str(gpu.index) for gpu in usable)
    if fence.active:
        return _("valid GPUs assigned to this kernel: {gpus}, or auto, all, none").format(gpus=names)
    return _("valid GPUs: {gpus}, or auto, all, none").format(gpus=names)


def _slice_listing(gpu: GpuInfo) -> str:
    return ", ".join(f"{gpu.index}:{s.index} ({s.profile})" for s in gpu.slices) or _("none")
