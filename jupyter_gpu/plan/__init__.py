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

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..core.environ import environment_at_process_start
from ..core.errors import PlanError  # defined in core (frameworks raise it too); still plan.PlanError
from ..core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from ..core.units import MIB, format_bytes

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
]

_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() accepts '²', which int() refuses
_UNITS = {"": MIB, "K": 1024, "M": MIB, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(?P<number>[0-9]{0,30}\.?[0-9]{1,30})\s*(?P<unit>(?:[KMGT](?:I?B)?|B)?)\s*$", re.IGNORECASE)


class NoGpuFits(PlanError):
    """``auto:N`` found fewer than N GPUs that qualify now (``%gpu_select --wait`` waits on this one)."""


# -- sizes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    """A memory size as typed: an absolute number of bytes, or a percentage of a GPU's total."""

    text: str
    bytes: int | None = None
    percent: float | None = None

    def resolve(self, total_bytes: int | None) -> int:
        """Bytes on a GPU with ``total_bytes`` of memory (needed for percentages only)."""
        if self.bytes is not None:
            return self.bytes
        assert self.percent is not None
        if total_bytes is None:
            raise PlanError(
                f"{self.text!r} is a share of a GPU's memory, but NVML cannot tell the GPU's "
                "size here; give an absolute size such as 2GiB or 2048 (MiB)"
            )
        return int(total_bytes * self.percent / 100)

    def __str__(self) -> str:
        return self.text


def parse_size(text: str) -> Size:
    """``"2048"`` (MiB), ``"2GiB"``, ``"1.5G"``, ``"512MB"`` or ``"30%"``; raises :class:`PlanError`."""
    cleaned = text.strip()
    valid = "valid sizes: 2048 (MiB), 512MiB, 2GiB, 1.5G or 30% (of the GPU's memory)"
    if cleaned.endswith("%"):
        if not re.fullmatch(r"\s*[0-9]{0,30}\.?[0-9]{1,30}\s*", cleaned[:-1]):
            raise PlanError(f"malformed size {text!r}; {valid}")
        percent = float(cleaned[:-1])
        if not 0 < percent <= 100:
            raise PlanError(f"size {text!r} must be more than 0% and at most 100%; {valid}")
        return Size(text=cleaned, percent=percent)
    match = _SIZE.match(cleaned)
    if match is None:
        if cleaned.startswith("-"):
            raise PlanError(f"size {text!r} is negative; {valid}")
        raise PlanError(f"malformed size {text!r}; {valid}")
    unit = match["unit"].upper()
    multiplier = 1 if unit == "B" else _UNITS[unit[:1]]
    size_bytes = int(float(match["number"]) * multiplier)
    if size_bytes > 1024**5:
        raise PlanError(f"size {text!r} is more than 1 PiB, more than any GPU has; {valid}")
    if size_bytes < MIB:
        raise PlanError(f"size {text!r} is {'zero' if size_bytes == 0 else 'under 1 MiB'}; {valid}")
    return Size(text=cleaned, bytes=size_bytes)


# -- the admin fence ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """The GPUs an admin assigned to this kernel at start (raw entries of the environment)."""

    variables: Mapping[str, str]
    device_order: str | None = None  # the CUDA_DEVICE_ORDER the kernel started with

    @property
    def active(self) -> bool:
        return bool(self.variables)

    def unknown(self, gpus: Sequence[GpuInfo]) -> str | None:
        """Why the GPUs of the fence cannot be told (None when they can): an index in
        ``CUDA_VISIBLE_DEVICES`` counts CUDA's fastest-first order unless ``CUDA_DEVICE_ORDER`` is
        ``PCI_BUS_ID``, which NVML cannot reproduce between GPU models."""
        from ..core.visibility import CudaEnv, cuda_devices

        value = self.variables.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return None
        devices = cuda_devices(CudaEnv(value, self.device_order), gpus)
        if devices.known:
            return None
        return (
            f"the kernel was started with CUDA_VISIBLE_DEVICES={value!r}, and which GPUs that is cannot be "
            f"told: {devices.reason}; start the kernel with CUDA_DEVICE_ORDER=PCI_BUS_ID or GPU UUIDs"
        )

    def describe(self) -> str:
        parts = []
        for name, value in self.variables.items():
            if name == "NVIDIA_VISIBLE_DEVICES" and not value.strip().upper().startswith(("GPU-", "MIG-")):
                parts.append(
                    f"{name}={value!r} (applied by the container runtime: NVML here sees only those "
                    "GPUs, numbered from 0)"
                )
            else:
                parts.append(f"{name}={value!r}")
        return " and ".join(parts)

    def allowed_slice(self, gpus: Sequence[GpuInfo]) -> str | None:
        """The MIG UUID of the slice the fence assigns (CUDA shows one MIG device at most), or None."""
        value = self.variables.get("CUDA_VISIBLE_DEVICES")
        if value is None or self.unknown(gpus):
            return None
        from ..core.visibility import CudaEnv, cuda_devices

        devices = cuda_devices(CudaEnv(value, self.device_order), gpus)
        return devices.slices[0] if devices.slices else None

    def allowed(self, gpus: Sequence[GpuInfo]) -> tuple[int, ...]:
        """NVML indices inside the fence, in the admin's order (all GPUs when there is no fence)."""
        allowed: list[int] | None = None
        if self.unknown(gpus):
            return ()
        for name, value in self.variables.items():
            indices = _resolve_fence_entries(name, value, gpus, self.device_order)
            allowed = indices if allowed is None else [i for i in allowed if i in indices]
        return tuple(gpu.index for gpu in gpus) if allowed is None else tuple(allowed)


def _resolve_fence_entries(name: str, value: str, gpus: Sequence[GpuInfo], order: str | None = None) -> list[int]:
    value = value.strip()
    if name == "CUDA_VISIBLE_DEVICES":
        from ..core.visibility import CudaEnv, cuda_devices

        return list(cuda_devices(CudaEnv(value, order), gpus).indices or ())
    if name == "NVIDIA_VISIBLE_DEVICES":
        # The container runtime applied it already: NVML in the container sees only those GPUs,
        # numbered from 0, and an index in it is in the *host's* numbering. Only UUIDs still name
        # GPUs here; anything else means "the GPUs NVML sees".
        if value.lower() in {"", "none", "void"}:
            return []
        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        uuids = [entry for entry in entries if entry.upper().startswith(("GPU-", "MIG-"))]
        if not uuids or len(uuids) != len(entries):
            return [gpu.index for gpu in gpus]
        return [gpu.index for gpu in gpus if any(gpu.uuid and gpu.uuid.lower().startswith(u.lower()) for u in uuids)]
    raise ValueError(f"not a fence variable: {name}")


_started_with = environment_at_process_start()
_KERNEL_START_FENCE = Fence(
    {name: _started_with[name] for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES") if name in _started_with},
    _started_with.get("CUDA_DEVICE_ORDER"),
)


def kernel_start_fence() -> Fence:
    """The fence the kernel was started with (see :func:`environment_at_process_start`): code in the
    kernel that sets ``CUDA_VISIBLE_DEVICES`` itself does not widen it."""
    return _KERNEL_START_FENCE


# -- selections -----------------------------------------------------------------------------------


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
_SLICE_NOTATION = re.compile(r"([0-9]{1,6}):([0-9]{1,3})")
ONE_MIG_DEVICE = (
    "CUDA enumerates at most one MIG device per process (a second slice, or a slice next to a GPU, "
    "would be invisible to the frameworks)"
)


def parse_selection(text: str) -> SelectionSpec:
    """Parse a SPEC (see the module docstring) without looking at any GPU."""
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


def _others(gpu: GpuInfo, own_pid: int, own_user: str | None) -> list[GpuProcess]:
    """Other users' compute processes: a graphics-only process (the display server, Xorg) is not a job."""
    return [
        p
        for p in gpu.processes
        if p.pid != own_pid and (own_user is None or p.user != own_user) and p.type != "graphics"
    ]


def _other_users_processes(gpu: GpuInfo, own_pid: int, own_user: str | None) -> int:
    return len(_others(gpu, own_pid, own_user))


def other_users(gpu: GpuInfo, own_pid: int, own_user: str | None) -> list[str]:
    """The other users with compute work on ``gpu`` (as ``auto`` counts them), by name."""
    return sorted({p.user or f"PID {p.pid}" for p in _others(gpu, own_pid, own_user)})


def select_idlest(
    gpus: Sequence[GpuInfo],
    count: int,
    *,
    min_free_bytes: int = 0,
    own_pid: int | None = None,
    own_user: str | None = None,
    claims: Mapping[int | str, int] | None = None,
    require_idle: bool = False,
) -> tuple[int, ...]:
    """The policy behind ``auto:N``: the ``count`` idlest of ``gpus``, best first.

    1. GPUs with less free memory than ``min_free_bytes`` (``--min-free``) are never chosen; with
       ``require_idle`` (``--wait`` without ``--min-free``) neither are GPUs with other users'
       compute processes or other kernels' claims.
    2. GPUs without compute processes of *other* users come first (this kernel's and this user's
       own processes, and graphics-only processes such as the display server, do not count).
    3. Then the fewest claims other kernels left (``claims``: NVML index → count, see
       :mod:`jupyter_gpu.sources.claims`), then the most free memory, the lowest utilization, the lowest index.

    So a GPU another user works on is chosen only when not enough GPUs are free of others, and
    kernels choosing at the same moment spread over the idle GPUs.
    Raises :class:`PlanError` when fewer than ``count`` GPUs qualify.
    """
    own_pid = os.getpid() if own_pid is None else own_pid
    claims = claims or {}
    eligible = [gpu for gpu in gpus if gpu.error is None and gpu.memory_free >= min_free_bytes]
    if require_idle:
        eligible = [
            gpu for gpu in eligible if not _other_users_processes(gpu, own_pid, own_user) and not claims.get(gpu.index)
        ]
    ranked = sorted(
        eligible,
        key=lambda gpu: (
            _other_users_processes(gpu, own_pid, own_user) > 0,
            claims.get(gpu.index, 0),
            -gpu.memory_free,
            gpu.utilization or 0,
            gpu.index,
        ),
    )
    if len(ranked) < count:
        condition = f" with at least {format_bytes(min_free_bytes)} free" if min_free_bytes else ""
        if require_idle:
            condition += " and without other users' work"
        raise NoGpuFits(
            f"auto:{count} needs {count} GPU{'s' if count > 1 else ''}{condition}, but only "
            f"{len(ranked)} of the GPUs this kernel may use qualif{'ies' if len(ranked) == 1 else 'y'}"
            f" ({_listing(gpus)}); ask for fewer or lower --min-free"
        )
    return tuple(gpu.index for gpu in ranked[:count])


def fit_hints(
    gpus: Sequence[GpuInfo],
    min_free_bytes: int,
    own_pid: int,
    own_user: str | None,
    kernels: Mapping[int, str] | None = None,
    check: Callable[[GpuInfo], bool] | None = None,
) -> list[str]:
    """For each GPU that does not qualify only because of this user's own processes: what would
    make it fit, e.g. ``GPU 2 would fit if your idle kernel x.ipynb (22 GiB) were shut down``.

    ``kernels`` names this user's processes (PID → e.g. ``"idle kernel x.ipynb"``); others are named
    by PID. GPUs with other users' work are left out: only waiting helps there. ``check`` gets the
    GPU as it would be once those processes ended; a hint is given only when it says True (the
    caller runs the request through :func:`build_plan` on that world: the fence, MIG, the ceiling).
    """
    kernels = kernels or {}
    hints = []
    for gpu in gpus:
        if gpu.error is not None or _others(gpu, own_pid, own_user):
            continue
        mine = [
            p
            for p in gpu.processes
            if p.pid != own_pid and p.type != "graphics" and (own_user is None or p.user == own_user)
        ]
        if not mine or gpu.memory_free >= min_free_bytes:
            continue
        held = sum(p.memory or 0 for p in mine)
        if gpu.memory_free + held < min_free_bytes:
            continue
        after = replace(
            gpu, memory_free=gpu.memory_free + held, processes=tuple(p for p in gpu.processes if p not in mine)
        )
        if check is not None and not check(after):
            continue  # shutting them down would not make the request pass: no hint that cannot work
        names = ", ".join(f"{kernels.get(p.pid, f'process PID {p.pid}')} ({format_bytes(p.memory)})" for p in mine[:3])
        hints.append(f"GPU {gpu.index} would fit if your {names} {'were' if len(mine) == 1 else 'were all'} shut down")
    return hints


def _listing(gpus: Sequence[GpuInfo]) -> str:
    if not gpus:
        return "none"
    return ", ".join(f"{gpu.index}: {format_bytes(gpu.memory_free)} free" for gpu in gpus)


def _slice_listing(gpu: GpuInfo) -> str:
    return ", ".join(f"{gpu.index}:{s.index} ({s.profile})" for s in gpu.slices) or "none"


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
                raise PlanError(f"{spec.text!r}: this kernel may use only MIG slices and none exists now; select none")
            if spec.kind == "all":
                if len(candidates) > 1:
                    raise PlanError(
                        f"'all' would be {len(candidates)} MIG slices, and {ONE_MIG_DEVICE}; select one: "
                        + ", ".join(f"{g.index}:{s.index} ({s.profile})" for g, s in candidates)
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
                condition = (
                    f"at least {format_bytes(min_free_bytes)} free"
                    if min_free_bytes
                    else "no other users' work or claims"
                    if require_idle
                    else "that can be read"
                )
                raise NoGpuFits(
                    f"auto needs a MIG slice with {condition}, and none of the slices this kernel may use "
                    "has it ("
                    + ", ".join(f"{g.index}:{s.index}: {format_bytes(s.memory_free)} free" for g, s in candidates)
                    + ")"
                )
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
        raise PlanError(f"{spec.text!r}: this kernel may use only MIG slices, and {ONE_MIG_DEVICE}; use auto")
    picked: list[tuple[int, str]] = []
    for item in spec.items:
        notation = _SLICE_NOTATION.fullmatch(item)
        if notation is not None:
            gpu_index, position = int(notation[1]), int(notation[2])
            gpu = next((g for g in gpus if g.index == gpu_index), None)
            if gpu is None:
                raise PlanError(f"there is no GPU {gpu_index}; {_choices(gpus, allowed, fence)}")
            slice_ = next((s for s in gpu.slices if s.index == position), None)
            if slice_ is None:
                what = "is not in MIG mode" if not gpu.mig_mode else f"has no MIG slice {position}"
                raise PlanError(f"GPU {gpu_index} {what}; its slices: {_slice_listing(gpu)}")
            picked.append((gpu.index, slice_.uuid))
        elif item.upper().startswith("MIG-"):
            from ..core.visibility import _find_slice

            found = _find_slice(item, gpus)
            if found is None:
                known = "; ".join(f"{g.index}:{s.index} {s.uuid}" for g in gpus for s in g.slices) or "none"
                raise PlanError(
                    f"no MIG slice has a UUID starting with {item!r} (or it is not unique); MIG slices: {known}"
                )
            picked.append(found)
    if not picked:
        return None
    if len(spec.items) > 1:
        raise PlanError(f"{spec.text!r}: {ONE_MIG_DEVICE}; select one slice per kernel")
    index, uuid = picked[0]
    if fenced_slice is not None and uuid != fenced_slice:
        raise PlanError(
            f"slice {uuid} is outside the GPUs assigned to this kernel ({fence.describe()}); "
            f"the slice assigned is {fenced_slice}"
        )
    if fenced_slice is None and index not in allowed:
        raise PlanError(
            f"GPU {index} is outside the GPUs assigned to this kernel ({fence.describe()}); "
            f"{_choices(gpus, allowed, fence)}"
        )
    return index, uuid


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


# -- the plan -------------------------------------------------------------------------------------


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
) -> GpuPlan:
    """Validate ``request`` against the GPUs and the fence; raise :class:`PlanError` on any problem.

    ``claims`` (other kernels' claims per NVML index) and ``require_idle`` only shape ``auto``
    (see :func:`select_idlest`)."""
    fence = kernel_start_fence() if fence is None else fence
    min_free = None if request.min_free is None else parse_size(request.min_free)
    if min_free is not None and min_free.percent is not None:
        raise PlanError(f"--min-free {request.min_free!r} must be an absolute size such as 8GiB, not a share")
    if min_free is not None and (request.selection is None or not request.selection.lower().startswith("auto")):
        raise PlanError("--min-free only applies to auto or auto:N; drop it or select with auto")
    selected: tuple[int, ...] | None = None
    mig: tuple[int, str] | None = None
    if request.selection is not None:
        spec = parse_selection(request.selection)
        if spec.kind != "none" and snapshot.nvml_available and (why := fence.unknown(snapshot.gpus)):
            raise PlanError(f"{why}; until then select none")
        mig = _resolve_mig(spec, snapshot, fence, min_free, own_user, claims, require_idle)
        if mig is not None:
            selected = (mig[0],)
        else:
            selected = _resolve_selection(spec, snapshot, fence, min_free, own_user, claims, require_idle)
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
        raise PlanError(f"no GPU to limit: NVML sees none ({snapshot.error or 'no GPUs'}); select GPUs by index first")
    limits: dict[int, tuple[int, ...]] = {}
    for gpu in gpus:
        per_device = tuple(size.resolve(gpu.memory_total) for size in sizes)
        total = sum(per_device)
        if per_device and gpu.memory_total and total > gpu.memory_total:
            raise PlanError(
                f"the limit {' + '.join(map(str, sizes))} = {format_bytes(total)} is more than GPU "
                f"{gpu.index}'s memory ({format_bytes(gpu.memory_total)}); give at most "
                f"{format_bytes(gpu.memory_total)} in all"
            )
        if ceiling is not None:
            cap = ceiling.resolve(gpu.memory_total)
            if per_device and total > cap:
                raise PlanError(
                    f"the limit {format_bytes(total)} on GPU {gpu.index} is above the admin ceiling "
                    f"max_limit={ceiling} ({format_bytes(cap)}); give at most {format_bytes(cap)}"
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
    )


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


# -- the kernel's plan ----------------------------------------------------------------------------

_current = GpuPlan()


def current_plan() -> GpuPlan:
    """This kernel's GPU plan (an empty plan until ``%gpu_select``/``%gpu_limit`` or admin defaults)."""
    return _current


def set_current_plan(plan: GpuPlan) -> None:
    """Record ``plan`` as the kernel's plan (only after it has been applied)."""
    global _current
    _current = plan
