"""Which of this server's kernels the GPU-aware culler shuts down, and when it looks (pure).

The rule itself (idle, countdown, warning) is :mod:`jupyter_gpu.core.culling`; this module turns the
kernel summaries of an answer into the culler's work: the kernels due now, the last check before a
shutdown, how often to look, and the line that tells the administrator what was freed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from ..core.i18n import N_
from .attribution import KernelInfo


class Due(NamedTuple):
    """A kernel due for culling when the answer was built."""

    kernel_id: str
    notebook: str
    idle_s: float
    memory: int  # bytes: NVML's, else what the kernel itself reported
    gpus: tuple[str, ...]  # where, as words: "GPU 0 (GPU-…)", or "<key> (the kernel's report)"
    gpu_indices: tuple[int, ...] = ()  # the NVML indices of the GPUs NVML attributes to it


def due_kernels(summaries: Iterable[Mapping[str, Any]], uuids: Mapping[int, str]) -> tuple[Due, ...]:
    """The kernels whose countdown reached 0 (``summaries``: the answer's ``kernels``; ``uuids``:
    GPU index -> UUID, to name the GPUs in the log line)."""
    due = []
    for k in summaries:
        if k["cull_in_s"] != 0:
            continue
        reported = k["reported_gpu_memory"] or {}
        due.append(
            Due(
                k["kernel_id"],
                k["notebook"] or "",
                k["idle_s"],
                k["gpu_memory"] or sum(reported.values()),
                tuple(f"GPU {index} ({uuids.get(index, '?')})" for index in k["gpus"])
                or tuple(f"{key} (the kernel's report)" for key in reported),
                tuple(k["gpus"]),
            )
        )
    return tuple(due)


def ran_since(execution_state: str | None, last_activity: float | None, now: float, cull_after_s: float) -> bool:
    """Whether a due kernel ran something since the answer was built (busy now, or active within
    ``cull_after_s``): the culler spares it. Checked against the kernel manager right before the
    shutdown."""
    return execution_state == "busy" or (last_activity is not None and now - last_activity < cull_after_s)


def cull_every_s(interval_s: float, cull_after_s: float) -> float:
    """How often the culler looks: a tenth of the idle limit, at most 30 s, at least ``interval_s``."""
    return max(interval_s, min(30.0, cull_after_s / 10))


def culled_message(kernel: Due, user: str, cull_after_s: float) -> str:
    """The warning logged for each culled kernel: whose, which notebook, how idle, what was freed where."""
    return (
        f"jupyter_gpu: culled idle GPU kernel {kernel.kernel_id} of user {user or '?'}, notebook "
        f"{kernel.notebook or '(no notebook)'}: idle {kernel.idle_s:.0f} s (cull_idle_after_s = "
        f"{cull_after_s:g}), {kernel.memory:d} bytes ({kernel.memory / 2**20:.1f} MiB) of GPU memory freed "
        f"on {', '.join(kernel.gpus) or 'GPUs unknown'}"
    )


def cull_record(kernel: Due, at: float) -> dict[str, Any]:
    """What ``GET jupyter-gpu/culls`` says of a culled kernel: the sidebar's lasting notification
    ("cull_a.ipynb shut down after 2 h idle, 6 GiB freed on GPU 1") is made of it."""
    return {
        "kernel_id": kernel.kernel_id,
        "notebook": kernel.notebook or None,
        "idle_s": round(kernel.idle_s, 3),
        "memory": kernel.memory,
        "gpus": list(kernel.gpu_indices),
        "culled_at": round(at, 3),
    }


def kept_message(kernel_id: str, notebook: str | None, user: str, postponed_s: float) -> str:
    """The line logged when a user keeps a kernel from being culled ("Keep running")."""
    return (
        f"jupyter_gpu: user {user or '?'} kept idle GPU kernel {kernel_id} (notebook "
        f"{notebook or '(no notebook)'}) running: its cull is postponed by {postponed_s:g} s"
    )


class Postponements:
    """ "Keep running": the culls users postponed, each by one ``cull_idle_after_s`` per request.

    A postponement belongs to one idle stretch of its kernel: it ends when the kernel runs
    something (its last activity changes, and its countdown starts again anyway) or goes away.
    """

    def __init__(self) -> None:
        # kernel id -> (its last activity when kept, seconds postponed in that idle stretch)
        self._kept: dict[str, tuple[float | None, float]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, kernels: Mapping[str, KernelInfo], kernel_id: str, after_s: float) -> KernelInfo:
        """Postpone the cull of ``kernels[kernel_id]`` by ``after_s`` (``cull_idle_after_s``) more;
        its new entry for the kernel table. KeyError: not in ``kernels``; ValueError: culling is off."""
        if after_s <= 0:
            raise ValueError(N_("culling is off on this server (cull_idle_after_s = 0): nothing to postpone"))
        info = kernels[kernel_id]
        postponed_s = info.cull_postponed_s + after_s
        self._kept[info.kernel_id] = (info.last_activity, postponed_s)
        return replace(info, cull_postponed_s=postponed_s)

    def apply(self, kernels: dict[str, KernelInfo]) -> dict[str, KernelInfo]:
        """``kernels`` (a fresh kernel table) with the postponements that still hold."""
        for kernel_id, (kept_activity, postponed_s) in list(self._kept.items()):
            info = kernels.get(kernel_id)
            if info is None or info.last_activity != kept_activity:
                del self._kept[kernel_id]
            else:
                kernels[kernel_id] = replace(info, cull_postponed_s=postponed_s)
        return kernels
