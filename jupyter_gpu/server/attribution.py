"""Which of this server's kernels holds which GPU process (pure: no tornado, no jupyter_server, no I/O).

Inputs: the GPU processes of a sample (with their process keys and ancestors, read by the sampling
thread), the kernel table (the event loop's :class:`KernelInfo` records) and the kernels' own
reports. A GPU process belongs to a kernel when

1. its (PID, start time) is the kernel's process, or
2. one of its ancestors is (a kernel's child processes: DataLoader workers, subprocesses), or
3. the kernel's own report names its NVML PID (a container: NVML's PIDs are the host's).

A report counts only while the process that wrote it is the kernel's process now (never a kernel
that restarted, never a PID reused by another process). Output: per-kernel holdings, the kernel
summaries of the snapshot answer, and the note saying how attribution was done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.availability import Reservation, run_of
from ..core.culling import cull_in_s, cull_warning, is_idle
from ..core.snapshot import GpuProcess, Snapshot

if TYPE_CHECKING:
    from ..sources.kernel_reports import KernelReport
    from ..sources.processes import ProcessKey

CONTAINER_NOTE = (
    "NVML reports PIDs that do not exist in this server's PID namespace: the server runs in a "
    "container and NVML sees host PIDs, so GPU processes cannot be matched to kernels by PID."
)


@dataclass(frozen=True)
class KernelInfo:
    """One of this server's kernels, as the event loop knows it."""

    kernel_id: str
    name: str | None = None
    pid: int | None = None
    notebook: str | None = None
    execution_state: str | None = None
    last_activity: float | None = None  # epoch seconds of the last cell's start or end (see cell_activity)
    start: int | float | None = None  # processes.process_start(pid) when the kernel was first seen
    # Seconds the culler waits beyond cull_idle_after_s in this idle stretch ("Keep running")
    cull_postponed_s: float = 0.0
    # Websockets connected to the kernel (browser tabs, consoles) as jupyter_server counts them;
    # None when the kernel manager does not say (see kernel_table.kernel_connections)
    connections: int | None = None

    def idle_s(self, now: float) -> float | None:
        """Seconds since the kernel last ran a cell (0 while a cell runs), None when unknown."""
        if self.execution_state == "busy":
            return 0.0
        if self.last_activity is None:
            return None
        return max(0.0, now - self.last_activity)

    def cull_idle_s(self, idle_s: float | None) -> float | None:
        """The idle time the culler counts: ``idle_s`` less what "Keep running" postponed."""
        return None if idle_s is None else idle_s - self.cull_postponed_s

    @property
    def busy(self) -> bool:
        """Whether the kernel runs a cell now."""
        return self.execution_state == "busy"

    @property
    def key(self) -> ProcessKey | None:
        """(pid, start): the kernel's process, never a later process that reuses its PID."""
        return None if self.pid is None or self.start is None else (self.pid, self.start)


@dataclass(frozen=True)
class KernelTable:
    """An immutable version of the kernel table; ``version`` grows with every change."""

    version: int = 0
    kernels: dict[str, KernelInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class AttributedSnapshot(Snapshot):
    """A snapshot plus what the sampling thread learnt for attribution (not part of ``to_dict()``)."""

    keys: dict[int, ProcessKey] = field(default_factory=dict, compare=False)
    ancestry: dict[int, tuple[ProcessKey, ...]] = field(default_factory=dict, compare=False)
    reports: dict[str, KernelReport] = field(default_factory=dict, compare=False)
    # The host's claims as faces show them (core.availability.Reservation): reserved GPUs, this user's runs
    reservations: tuple[Reservation, ...] = field(default=(), compare=False)


def current_reports(reports: Mapping[str, KernelReport], kernels: Mapping[str, KernelInfo]) -> dict[str, KernelReport]:
    """The reports that count: those whose writer (PID and start time) is their kernel's process now."""
    return {
        kernel_id: report
        for kernel_id, report in reports.items()
        if kernel_id in kernels and kernels[kernel_id].key is not None and report.key == kernels[kernel_id].key
    }


class KernelMatcher:
    """Finds the kernel a GPU process belongs to (rules 1-3 of this module, in that order)."""

    def __init__(
        self,
        kernels: Mapping[str, KernelInfo],
        keys: Mapping[int, ProcessKey],
        ancestry: Mapping[int, tuple[ProcessKey, ...]],
        reports: Mapping[str, KernelReport],
    ) -> None:
        """``keys``: pid -> its process key; ``ancestry``: pid -> its ancestors' keys (both read by
        the sampling thread); ``reports``: the :func:`current_reports`."""
        self.keys = keys
        self.ancestry = ancestry
        self.by_key = {info.key: info for info in kernels.values() if info.key is not None}
        self.by_reported_pid: dict[int, KernelInfo] = {}
        for kernel_id, report in reports.items():
            for pid in report.nvml_pids:
                self.by_reported_pid.setdefault(pid, kernels[kernel_id])

    def kernel_of(self, pid: int) -> KernelInfo | None:
        """The kernel holding GPU process ``pid``, None when it is nobody's kernel here."""
        by_key = self.by_key
        key = self.keys.get(pid) if self.keys else None
        info = by_key.get(key) if key is not None else None
        if info is None and by_key:
            info = next((by_key[a] for a in self.ancestry.get(pid, ()) if a in by_key), None)
        if info is None:
            info = self.by_reported_pid.get(pid)
        return info


@dataclass
class Holdings:
    """What this server's kernels hold, summed over the GPU processes matched to them."""

    matched: int = 0  # GPU processes matched to a kernel
    memory: dict[str, int] = field(default_factory=dict)  # kernel id -> bytes
    gpus: dict[str, set[int]] = field(default_factory=dict)  # kernel id -> GPU indexes
    slices: dict[str, set[str]] = field(default_factory=dict)  # kernel id -> MIG UUIDs
    by_label: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (kernel, notebook, gpu) -> bytes

    def add(self, kernel_id: str, notebook: str | None, gpu_index: int, process: GpuProcess) -> None:
        """Count ``process`` (on GPU ``gpu_index``) for the kernel ``kernel_id`` of ``notebook``."""
        self.matched += 1
        memory = process.memory or 0
        self.memory[kernel_id] = self.memory.get(kernel_id, 0) + memory
        self.gpus.setdefault(kernel_id, set()).add(gpu_index)
        if process.slice is not None:
            self.slices.setdefault(kernel_id, set()).add(process.slice)
        label = (kernel_id, notebook or "", str(gpu_index))
        self.by_label[label] = self.by_label.get(label, 0) + memory


@dataclass(frozen=True)
class CullPolicy:
    """The server's idle and culling settings (the extension's traits), as the rules take them."""

    idle_threshold_s: float
    cull_idle_after_s: float = 0.0
    cull_warn_s: float = 0.0


def run_fields(
    pid: int, ancestry: Mapping[int, tuple[ProcessKey, ...]], reservations: tuple[Reservation, ...]
) -> dict[str, Any] | None:
    """The fields a GPU process of this user carries when it is one of this user's ``jupyter-gpu run``
    processes (the run's claimant or child, or a descendant): ``own`` and ``run`` (its label and
    start, from the run's own claim); None when it is no run's. Call it for this user's processes
    only: a claim is believed about its owner's own processes, never another account's."""
    run = run_of(pid, (key[0] for key in ancestry.get(pid, ())), reservations)
    if run is None:
        return None
    return {"own": True, "run": {"label": run.label, "since": run.since}}


def notebook_of(info: KernelInfo, report: KernelReport | None) -> str | None:
    """The kernel's notebook: from the session manager, else as its own report names it."""
    return info.notebook or (report.session if report else None)


def process_fields(
    info: KernelInfo, notebook: str | None, idle_s: float | None, memory: int, policy: CullPolicy
) -> dict[str, Any]:
    """The fields a GPU process of kernel ``info`` carries in the answer (``memory``: its bytes)."""
    seconds = cull_in_s(info.cull_idle_s(idle_s), memory > 0, info.busy, policy.cull_idle_after_s)
    return {
        "kernel_id": info.kernel_id,
        "notebook": notebook,
        "own": True,
        "idle_s": idle_s,
        "idle": is_idle(idle_s, memory > 0, policy.idle_threshold_s),
        "cull_in_s": seconds,
        "cull_warning": cull_warning(seconds, policy.cull_warn_s),
    }


def kernel_summary(
    info: KernelInfo,
    holdings: Holdings,
    report: KernelReport | None,
    now: float,
    policy: CullPolicy,
    known_slices: set[str] | frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One entry of the answer's ``kernels``: what NVML attributes to the kernel, what it reports
    itself, and its idle time and culling countdown (``known_slices``: the sample's MIG UUIDs)."""
    kernel_id = info.kernel_id
    memory = holdings.memory.get(kernel_id)
    idle_s = info.idle_s(now)
    reported = dict(report.gpu_memory) if report is not None and report.gpu_memory else None
    # MIG slices the kernel uses: from NVML's processes (by PID), or, where PIDs cannot be
    # matched (a container), from the MIG UUIDs its own report names.
    slices = set(holdings.slices.get(kernel_id) or ())
    if reported:
        slices.update(key for key, used in reported.items() if used and key in known_slices)
    holds = bool(memory) or bool(reported and any(reported.values()))
    # GPU-aware culling: only an idle (not busy) kernel that holds GPU memory is ever a candidate.
    seconds = cull_in_s(info.cull_idle_s(idle_s), holds, info.busy, policy.cull_idle_after_s)
    return {
        "kernel_id": kernel_id,
        "name": info.name,
        "notebook": notebook_of(info, report),
        "pid": info.pid,
        "execution_state": info.execution_state,
        "idle_s": idle_s,
        "idle": is_idle(idle_s, holds, policy.idle_threshold_s),
        "gpu_memory": memory or 0,  # bytes NVML attributes to the kernel and its children
        "gpus": sorted(holdings.gpus.get(kernel_id) or ()),
        "slices": sorted(slices),  # MIG UUIDs of the slices it holds memory on (MIG only)
        "reported_gpu_memory": reported,  # bytes per GPU as the kernel itself reports (allocator)
        "report_age_s": None if report is None else round(max(0.0, now - report.timestamp), 3),
        "cull_in_s": seconds,  # seconds until the culler shuts it down; null: never (as things stand)
        "cull_warning": cull_warning(seconds, policy.cull_warn_s),
        "connections": info.connections,  # websockets connected to it now; null: unknown
    }


def attribution_note(
    snapshot: Snapshot, total: int, unknown: int, matched: int, reports: Mapping[str, KernelReport]
) -> tuple[str, str | None]:
    """The answer's ``attribution`` ("pid", "kernel-report" or "unavailable") and the note saying why.

    ``total``: GPU processes in the sample; ``unknown``: those whose PID does not exist here (another
    PID namespace); ``matched``: those matched to a kernel; ``reports``: the :func:`current_reports`.
    """
    if not snapshot.nvml_available:
        return "unavailable", f"NVML cannot be read: {snapshot.error}"
    if total == 0 or unknown == 0:
        return "pid", None
    reporting = [r for r in reports.values() if r.gpu_memory]
    if unknown < total:
        return "pid", (
            f"{unknown} of {total} GPU processes have PIDs that do not exist in this "
            "server's PID namespace (other containers, or host PIDs); they are not "
            "attributed to kernels."
        )
    if reporting:
        how = (
            f"{matched} matched by the NVML PIDs the kernels reported"
            if matched
            else "processes are not matched to kernels"
        )
        return "kernel-report", (
            f"{CONTAINER_NOTE} Each kernel's GPU memory comes from its own report "
            f"(kernels[].reported_gpu_memory, the framework's allocator, without "
            f"the CUDA context); {how}."
        )
    if matched:
        return "kernel-report", f"{CONTAINER_NOTE} {matched} matched by the NVML PIDs the kernels reported."
    return "unavailable", (
        f"{CONTAINER_NOTE} No kernel reported its GPU use: load the jupyter_gpu "
        "IPython extension in kernels (see the server extension's documentation)."
    )
