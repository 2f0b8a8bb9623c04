"""Which of this server's kernels the GPU-aware culler shuts down, and when it looks (pure).

The rule itself (idle, countdown, warning) is :mod:`jupyter_gpu.core.culling`; this module turns the
kernel summaries of an answer into the culler's work: the kernels due now, the last check before a
shutdown, how often to look, and the line that tells the administrator what was freed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple


class Due(NamedTuple):
    """A kernel due for culling when the answer was built."""

    kernel_id: str
    notebook: str
    idle_s: float
    memory: int  # bytes: NVML's, else what the kernel itself reported
    gpus: tuple[str, ...]  # where, as words: "GPU 0 (GPU-…)", or "<key> (the kernel's report)"


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
