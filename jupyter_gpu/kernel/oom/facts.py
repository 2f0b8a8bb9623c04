"""What the report reads (:class:`Facts`) and what it says first: which GPU ran out and who holds
it (:func:`holders`), with the framework's own figures; names from elsewhere shown safely."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.i18n import _
from ...core.text import display_text
from ...core.units import MIB
from .recognize import OutOfMemory

if TYPE_CHECKING:
    from ...sources.peers import KernelPeer

_NAME_CHARS = 40  # a name from the driver, a report or another user, as the report shows it (as the magics do)


@dataclass(frozen=True)
class Holder:
    """Who holds memory on the GPU that ran out, as the report names them."""

    kind: str  # "self", "kernel" (another kernel of this user), "process" (this user's), "user" (other user)
    memory: int
    label: str  # the notebook, the process, or the user name
    pid: int | None = None
    idle_s: float | None = None
    idle: bool | None = None


@dataclass(frozen=True)
class Facts:
    """Everything :func:`explain` reads. ``gpus`` are :class:`~jupyter_gpu.core.snapshot.GpuInfo`."""

    gpus: Sequence[Any]
    own_pid: int
    own_user: str | None
    device_gpus: tuple[int, ...] | None = None  # NVML index of each framework device, when known
    logical_per_gpu: int = 1  # TensorFlow logical GPUs per physical GPU (several sizes in %gpu_limit)
    allowed: tuple[int, ...] | None = None  # GPUs this kernel may select (the admin fence)
    limits: Mapping[int, int] = field(default_factory=dict)  # this kernel's cap per NVML index
    limit_from_ceiling: bool = False
    admin_ceiling: str | None = None
    growth: bool = False
    counters: Mapping[int, tuple[int, int | None]] = field(default_factory=dict)  # index → (in use, held)
    peers: Mapping[int, KernelPeer] = field(default_factory=dict)  # pid → the user's other kernel (find_peers)
    peers_source: str = ""  # where the peers came from, in words
    own_notebook: str | None = None
    # To check each suggested magic with the planner before printing it (None: not checked)
    request: Any = None  # the kernel's PlanRequest (or the one a restart would apply)
    snapshot: Any = None  # the NVML snapshot (with MIG modes, not the slice views in ``gpus``)
    fence: Any = None  # the kernel's start fence
    # This user's `jupyter-gpu run` processes: pid → "train.py (jupyter-gpu run), 2 h" (from the runs'
    # own claims, sources.claims.viewer; believed only for processes of this user)
    runs: Mapping[int, str] = field(default_factory=dict)


def _which_gpus(oom: OutOfMemory, facts: Facts) -> list[Any]:
    """The GPUs the error is about: the framework's device when it is named and mapped, else the
    GPUs where this kernel holds memory, else the framework's GPUs."""
    by_index = {gpu.index: gpu for gpu in facts.gpus if gpu.error is None}
    devices = facts.device_gpus
    if oom.device is not None and devices:
        position = oom.device // max(1, facts.logical_per_gpu) if oom.module == "tensorflow" else oom.device
        if position < len(devices) and devices[position] in by_index:
            return [by_index[devices[position]]]
    if devices and len(devices) == 1 and devices[0] in by_index:
        return [by_index[devices[0]]]
    mine = [gpu for gpu in by_index.values() if any(p.pid == facts.own_pid for p in gpu.processes)]
    if devices:
        narrowed = [gpu for gpu in mine if gpu.index in devices]
        mine = narrowed or mine
    if mine:
        return mine
    return [by_index[index] for index in devices or () if index in by_index]


def holders(gpu: Any, facts: Facts) -> list[Holder]:
    """Who holds memory on ``gpu``, this kernel first, then largest first."""
    found: dict[tuple[str, str], Holder] = {}
    for process in gpu.processes:
        memory = process.memory or 0
        if process.pid == facts.own_pid:
            key, holder = ("self", ""), Holder("self", memory, "this kernel", process.pid)
        elif process.pid in facts.peers and (process.user is None or process.user == facts.own_user):
            # a kernel's report (or the server) names PIDs; one the OS or NVML gives to another user
            # stays that user's, whatever a report claims: never name the wrong owner
            peer = facts.peers[process.pid]
            label = (
                _shown(peer.notebook)
                if peer.notebook
                else (
                    _("kernel {id}").format(id=_shown(peer.kernel_id[:8])) if peer.kernel_id else f"PID {process.pid}"
                )
            )
            key = ("kernel", peer.kernel_id or str(process.pid))
            holder = Holder("kernel", memory, label, process.pid, peer.idle_s, peer.idle)
        elif process.user is not None and process.user == facts.own_user:
            if process.type == "graphics":
                continue
            run = facts.runs.get(process.pid)
            key = ("process", f"run {run}" if run else str(process.pid))  # a run's processes add up
            name = f" ({run})" if run else (f" ({_shown(process.name)})" if process.name else "")
            holder = Holder("process", memory, f"PID {process.pid}{name}", process.pid)
        else:
            user = _shown(process.user) if process.user else _("unknown user (PID {pid})").format(pid=process.pid)
            key, holder = ("user", user), Holder("user", memory, user)
        if key in found:  # a kernel's child processes, or several processes of one user, add up
            old = found[key]
            holder = Holder(old.kind, old.memory + memory, old.label, old.pid, old.idle_s, old.idle)
        found[key] = holder
    order = {"self": 0, "kernel": 1, "process": 2, "user": 3}
    return sorted(found.values(), key=lambda h: (order[h.kind], -h.memory, h.label))


def _shown(value: str) -> str:
    """A notebook, process, user or GPU name from elsewhere (untrusted): bidi-safe, one line, short."""
    return display_text(value, _NAME_CHARS)


def _framework_figures(oom: OutOfMemory, gpu: Any, facts: Facts) -> tuple[int | None, int | None]:
    """(in use, reserved) of this kernel's framework on ``gpu``: from its message, else its counters."""
    in_use, reserved = oom.in_use_bytes, oom.reserved_bytes
    counters = facts.counters.get(gpu.index)
    if counters is not None and in_use is None:
        in_use, reserved = counters[0], counters[1] if reserved is None else reserved
    return in_use, reserved


def _freeable_cache(oom: OutOfMemory, in_use: int | None, reserved: int | None) -> int | None:
    """What ``%gpu_free`` may return: the framework's cache (reserved but not in use), when it is
    worth it (at least 64 MiB) and the framework has one to empty (PyTorch, JAX)."""
    cache = (reserved - in_use) if reserved is not None and in_use is not None else None
    return cache if cache and cache >= 64 * MIB and oom.module in ("torch", "jax") else None
