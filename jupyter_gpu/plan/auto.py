"""``auto``: the idlest GPUs (:func:`select_idlest`), who else works on a GPU (:func:`other_users`),
and what would make a GPU fit (:func:`fit_hints`); :class:`NoGpuFits` when too few qualify."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from ..core.errors import PlanError
from ..core.i18n import _, ngettext, pgettext
from ..core.snapshot import GpuInfo, GpuProcess
from ..core.units import format_bytes


class NoGpuFits(PlanError):
    """``auto:N`` found fewer than N GPUs that qualify now (``%gpu_select --wait`` waits on this one)."""


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
        figures = {
            "count": count,
            "size": format_bytes(min_free_bytes),
            "found": len(ranked),
            "gpus": _listing(gpus),
        }
        if min_free_bytes and require_idle:
            need = ngettext(
                "auto:{count} needs {count} GPU with at least {size} free and without other users' work",
                "auto:{count} needs {count} GPUs with at least {size} free and without other users' work",
                count,
            )
        elif min_free_bytes:
            need = ngettext(
                "auto:{count} needs {count} GPU with at least {size} free",
                "auto:{count} needs {count} GPUs with at least {size} free",
                count,
            )
        elif require_idle:
            need = ngettext(
                "auto:{count} needs {count} GPU without other users' work",
                "auto:{count} needs {count} GPUs without other users' work",
                count,
            )
        else:
            need = ngettext("auto:{count} needs {count} GPU", "auto:{count} needs {count} GPUs", count)
        found = ngettext(
            "{need}, but only {found} of the GPUs this kernel may use qualifies ({gpus}); "
            "ask for fewer or lower --min-free",
            "{need}, but only {found} of the GPUs this kernel may use qualify ({gpus}); "
            "ask for fewer or lower --min-free",
            len(ranked),
        )
        raise NoGpuFits(found.format(need=need.format(**figures), **figures))
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
    caller runs the request through :func:`~jupyter_gpu.plan.build_plan` on that world: the fence,
    MIG, the ceiling).
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
        names = pgettext("list separator", ", ").join(
            "{name} ({size})".format(
                name=kernels.get(p.pid) or _("process PID {pid}").format(pid=p.pid), size=format_bytes(p.memory)
            )
            for p in mine[:3]
        )
        hints.append(
            ngettext(
                "GPU {index} would fit if your {names} were shut down",
                "GPU {index} would fit if your {names} were all shut down",
                len(mine),
            ).format(index=gpu.index, names=names)
        )
    return hints


def _listing(gpus: Sequence[GpuInfo]) -> str:
    if not gpus:
        return _("none")
    return ", ".join(
        _("{index}: {free} free").format(index=gpu.index, free=format_bytes(gpu.memory_free)) for gpu in gpus
    )
