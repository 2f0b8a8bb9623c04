"""Selections (``SPEC``, see :mod:`jupyter_gpu.plan`): :func:`parse_selection` reads what was typed,
:func:`_resolve_selection` checks whole GPUs against the snapshot and the fence (a MIG slice is
:mod:`.mig`'s), and the one-line listings of valid choices the errors name."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.errors import PlanError
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


SELECT_CHOICES = (
    "GPU indices like 0 or 1,3, UUIDs (unique prefixes), a MIG slice like 0:1 or its MIG UUID, "
    "auto, auto:N, all or none"
)


def parse_selection(text: str) -> SelectionSpec:
    """Parse a SPEC (see :mod:`jupyter_gpu.plan`) without looking at any GPU."""
    cleaned = text.strip()
    lowered = cleaned.lower()
    if not cleaned:
        raise PlanError(f"no GPUs given; valid choices: {SELECT_CHOICES}")
    if lowered in {"all", "none"}:
        return SelectionSpec(text=cleaned, kind=lowered)
    if lowered == "auto" or lowered.startswith("auto:"):
        count_text = lowered.partition(":")[2] or "1"
        if not _DIGITS.fullmatch(count_text) or len(count_text) > 4 or int(count_text) < 1:
            raise PlanError(
                f"{cleaned!r}: auto:N needs a whole number N of at least 1; valid choices: {SELECT_CHOICES}"
            )
        return SelectionSpec(text=cleaned, kind="auto", count=int(count_text))
    items = tuple(item.strip() for item in cleaned.split(","))
    if any(not item for item in items):
        raise PlanError(f"{cleaned!r} has an empty entry; valid choices: {SELECT_CHOICES}")
    for item in items:
        if item.lower() in {"all", "none"} or item.lower().startswith("auto"):
            raise PlanError(f"{cleaned!r} mixes {item!r} with other entries; use it alone")
        if item.startswith("-"):
            raise PlanError(f"{item!r} is not a GPU index; valid choices: {SELECT_CHOICES}")
    seen: set[str] = set()
    for item in items:
        if item.lower() in seen:
            raise PlanError(f"GPU {item!r} is given twice in {cleaned!r}; list each GPU once")
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
        raise PlanError(f"{why}; until then select none")
    allowed = fence.allowed(gpus) if snapshot.nvml_available else ()
    if snapshot.nvml_available and fence.allowed_slice(gpus) is None:
        allowed = tuple(i for i in allowed if not _in_mig_mode(snapshot, i))  # usable by slice only
    fenced = [gpu for gpu in gpus if gpu.index in allowed]
    if spec.kind == "none":
        return ()
    if not snapshot.nvml_available:
        if spec.kind == "auto":
            raise PlanError(
                f"{spec.text!r} needs NVML to see how busy the GPUs are, and NVML is unavailable "
                f"({snapshot.error}); select GPUs by index, or none"
            )
        if spec.kind == "all":
            raise PlanError(
                f"'all' needs NVML to count the GPUs, and NVML is unavailable ({snapshot.error}); "
                "select GPUs by index, or none"
            )
        if not all(_DIGITS.fullmatch(item) for item in spec.items):
            raise PlanError(f"UUIDs cannot be checked without NVML ({snapshot.error}); select GPUs by index")
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
                raise PlanError(f"there is no GPU {item if len(item) < 10 else item[:9] + '…'}; {choices}")
        else:
            matches = [gpu.index for gpu in gpus if gpu.uuid and gpu.uuid.lower().startswith(item.lower())]
            if not matches:
                raise PlanError(f"no GPU has a UUID starting with {item!r}; {choices}")
            if len(matches) > 1:
                raise PlanError(
                    f"{item!r} matches the UUIDs of GPUs {', '.join(map(str, matches))}; give more of the UUID"
                )
            index = matches[0]
        if _in_mig_mode(snapshot, index):
            fenced_slice = fence.allowed_slice(gpus)
            gpu = snapshot.gpu(index)
            listing = (
                _slice_listing(gpu)
                if fenced_slice is None
                else ", ".join(f"{gpu.index}:{s.index} ({s.profile})" for s in gpu.slices if s.uuid == fenced_slice)
                or "none assigned"
            )
            raise PlanError(
                f"GPU {index} is in MIG mode: CUDA cannot use it whole; select one of its slices: {listing}"
            )
        if index not in allowed:
            raise PlanError(f"GPU {index} is outside the GPUs assigned to this kernel ({fence.describe()}); {choices}")
        if index in indices:
            raise PlanError(f"GPU {index} is given twice in {spec.text!r}; list each GPU once")
        indices.append(index)
    return tuple(indices)


def _in_mig_mode(snapshot: Snapshot, index: int) -> bool:
    return any(gpu.index == index and gpu.mig_mode for gpu in snapshot.gpus)


def _choices(gpus: Sequence[GpuInfo], allowed: Sequence[int], fence: Fence) -> str:
    usable = [gpu for gpu in gpus if gpu.index in allowed]
    if not usable:
        where = f" ({fence.describe()})" if fence.active else ""
        return f"this kernel may use no GPU{where}: choose none"
    names = ", ".join(f"{gpu.index} ({gpu.uuid[:12]}…)" if gpu.uuid else str(gpu.index) for gpu in usable)
    assigned = " assigned to this kernel" if fence.active else ""
    return f"valid GPUs{assigned}: {names}, or auto, all, none"


def _slice_listing(gpu: GpuInfo) -> str:
    return ", ".join(f"{gpu.index}:{s.index} ({s.profile})" for s in gpu.slices) or "none"
