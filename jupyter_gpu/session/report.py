"""The GPU plan as the magics and ``jupyter-gpu run`` print it: the summary line, the selection, limit
and threads reports, and the GPU listing of ``%gpu_select`` and ``%gpu_status``.

Pure text from a :class:`jupyter_gpu.plan.GpuPlan`, the GPUs the frameworks were last told about
(:func:`jupyter_gpu.frameworks.known_gpus`) and, for the listing, an NVML snapshot. Names that come
from the driver or from other users are shown bidi-safe and at most 40 characters long.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.availability import Reservation, unit_availability
from ..core.text import display_text, wrap
from ..core.units import format_bytes

if TYPE_CHECKING:
    from ..plan import GpuPlan

_NAME_CHARS = 40
_COOPERATIVE = (
    "Caps are cooperative: they bind the framework's allocator, not the driver "
    "(MIG or one GPU per container for hard isolation)."
)
_COOPERATIVE_AGAIN = "(Caps are cooperative, as said above; %gpu_limit? says more.)"


ORDER_NOTE = (
    "CUDA_DEVICE_ORDER=PCI_BUS_ID set by the plan: these GPUs are of several models, and PyTorch caps "
    "each GPU by CUDA's device number, so CUDA now numbers them as nvidia-smi does (PyTorch's cuda:k "
    "and TensorFlow's /GPU:k are GPU k)."
)

_CHILDREN = (
    "Python programs this kernel starts (!python, subprocess, spawn and DataLoader workers) inherit the GPU "
    "selection, growth and JAX's share, and the TensorFlow and PyTorch caps through JUPYTER_GPU_PLAN when they "
    "import the framework: a cap per process, not shared (two children capped at 4 GiB can take 8 GiB). "
    "Other programs get the variables only."
)


def shown(value: str | None, missing: str = "?") -> str:
    """A name from the driver or another user, as the magics print it (bidi-safe, at most 40 characters)."""
    return display_text(value, _NAME_CHARS, missing=missing)


def summary(plan: GpuPlan) -> str:
    """The plan in one line: selection, growth, limit, admin ceiling."""
    request = plan.request
    if plan.selected_indices is None:
        selection = "no selection (the frameworks see every GPU the kernel may use)"
    elif not plan.selected_indices:
        selection = "CPU only (no GPU)"
    elif plan.selected_slice is not None:
        selection = f"MIG slice {shown(plan.selected_slice)} of GPU {plan.selected_indices[0]}"
    else:
        selection = "GPU " + ", ".join(map(str, plan.selected_indices))
    if plan.selected_indices and request.selection and request.selection.lower().startswith("auto"):
        selection += f" ({request.selection})"
    parts = [selection, f"growth {'on' if plan.growth else 'off'}"]
    limits = {index: plan.memory_limit_bytes(index) for index in plan.limits_bytes}
    if limits:
        how = " (admin ceiling)" if plan.limit_from_ceiling else ""
        parts.append(
            "limit " + ", ".join(f"GPU {index}: {format_bytes(size)}" for index, size in limits.items() if size) + how
        )
    else:
        parts.append("no memory limit")
    if request.max_limit:
        parts.append(f"admin ceiling {request.max_limit}")
    return "; ".join(parts)


def _labels(plan: GpuPlan, not_following: list[str]) -> tuple[dict[int, str], list[str]]:
    """How each framework will name each planned GPU (from :mod:`jupyter_gpu.core.visibility`), and a
    line for each framework that will not follow the plan (whose name is added to ``not_following``)."""
    from .. import frameworks

    gpus = frameworks.known_gpus()
    labels: dict[int, list[str]] = {index: [] for index in frameworks.visible_order(plan)}
    notes = []
    for framework in frameworks.FRAMEWORKS:
        problem = frameworks.planned_devices(framework, plan, gpus)[1]
        if problem is not None:
            not_following.append(framework.name)
            notes.append(
                f"{framework.name} will NOT follow this: {problem}; restart the kernel (%gpu_restart) to apply "
                f"the plan to {framework.name}."
            )
            continue
        for index, label in framework.device_labels(plan, gpus).items():
            labels.setdefault(index, []).append(f"{framework.name} {label}")
    return {index: ", ".join(names) or "no framework" for index, names in labels.items()}, notes


def selection_report(
    plan: GpuPlan, caveats: bool = True, children: str | None = None, reservations: Sequence[Reservation] = ()
) -> str:
    """What ``%gpu_select`` prints: each selected GPU and its name in every framework, growth, limit
    (``caveats``, ``children``: as :func:`limit_report`; ``reservations``: the host's other claims
    ``auto`` saw, so its reason says "reserved by another user" where that is so); lines wrapped to
    100 columns (:func:`core.text.wrap`)."""
    notes: list[str] = []
    not_following: list[str] = []
    if plan.selected_indices == ():
        lines = ["No GPU selected: TensorFlow, PyTorch and JAX will run on the CPU only."]
    elif plan.selected_indices is None:
        lines = [f"No selection: {summary(plan)}"]
    else:
        labels, notes = _labels(plan, not_following)
        lines = []
        why = _auto_reasons(plan, reservations)
        for index in plan.selected_indices:
            gpu = plan.gpu(index)
            about = (
                ""
                if gpu is None or gpu.memory_free is None
                else f" ({shown(gpu.name.removeprefix('NVIDIA '))}, {format_bytes(gpu.memory_free)} free)"
            )
            lines.append(f"GPU {index}{about} → {labels.get(index, 'no framework')}{why.get(index, '')}")
        if len(plan.selected_indices) > 1:
            lines.append(
                f"{len(plan.selected_indices)} GPUs selected. Selecting does not parallelize: use "
                "tf.distribute.MirroredStrategy() (build and compile Keras models in its scope()), "
                "PyTorch DistributedDataParallel, or JAX sharding."
            )
    lines += notes
    lines.append(f"Memory growth {'on: allocated on demand' if plan.growth else 'off'}.")
    if plan.limits_bytes:
        lines.append(limit_report(plan, caveats, children))
    lines.append(_where_applied(not_following))
    return wrap("\n".join(lines))


def _auto_reasons(plan: GpuPlan, reservations: Sequence[Reservation] = ()) -> dict[int, str]:
    """Why ``auto`` chose each GPU, e.g. ``"; chosen by auto: free, 46.8 GiB free, 3 % busy"``: the
    GPU's state in the words of the one rule (:func:`~jupyter_gpu.core.availability.unit_availability`:
    ``free``, ``reserved by another user``, ...), with the other users working there by name."""
    if not (plan.request.selection or "").lower().startswith("auto"):
        return {}
    from .. import frameworks
    from ..core.snapshot import GpuInfo
    from ..plan import other_users
    from ..sources.processes import current_user

    reasons: dict[int, str] = {}
    by_index = {gpu.index: gpu for gpu in frameworks.known_gpus()}
    for index in plan.selected_indices or ():
        gpu = by_index.get(index)
        if not isinstance(gpu, GpuInfo):  # NVML's GPUs (with processes), not a plan's
            continue
        if plan.auto_kept:
            reasons[index] = f"; {_KEPT.format(auto=plan.request.selection)}"
            continue
        users = other_users(gpu, os.getpid(), current_user())
        others = [r for r in reservations if r.pid != os.getpid()]  # not this kernel's own new claim
        state = unit_availability(gpu, others, current_user(), own_pids={os.getpid()})
        who = f"used by {', '.join(users)}" if users else state
        busy = "" if gpu.utilization is None else f", {gpu.utilization} % busy"
        reasons[index] = f"; chosen by auto: {who}, {format_bytes(gpu.memory_free)} free{busy}"
    return reasons


_KEPT = "as {auto} chose it before (%gpu_select {auto} chooses again)"


def auto_rechosen(old: GpuPlan, new: GpuPlan) -> str | None:
    """The line ``%gpu_select auto`` prints when it chose other GPUs than the ``auto`` of the plan in
    force (``old``): a new choice happens only when asked for, and says so. None when nothing moved."""
    if not (old.request.selection or "").strip().lower().startswith("auto") or not old.selected_indices:
        return None
    if not (new.request.selection or "").strip().lower().startswith("auto") or new.auto_kept:
        return None
    if (old.selected_indices, old.selected_slice) == (new.selected_indices, new.selected_slice):
        return None

    def gpus(plan: GpuPlan) -> str:
        if plan.selected_slice is not None:
            return f"MIG slice {shown(plan.selected_slice)}"
        return "GPU " + ", ".join(map(str, plan.selected_indices or ())) if plan.selected_indices else "no GPU"

    return f"{new.request.selection} chose again: {gpus(new)} (it was {gpus(old)})."


def limit_report(plan: GpuPlan, caveats: bool = True, children: str | None = None) -> str:
    """What ``%gpu_limit`` prints: the cap per GPU, what is free now, and that caps are cooperative.

    The two caveats (caps are cooperative; what programs the kernel starts inherit: a cap per
    process, docs/children.md) take two long lines: the magics print them once per kernel
    (``caveats``), and a one-line reminder after that (``%gpu_limit?`` keeps the whole text).
    ``children`` replaces the second caveat where the plan is for another program (``jupyter-gpu
    run``: what reaches its command). Lines wrapped to 100 columns (:func:`core.text.wrap`)."""
    from .. import frameworks

    if not plan.limits_bytes:
        if plan.selected_indices == () and plan.request.limits:
            return (
                f"No memory limit while the selection is none (CPU only); {' '.join(plan.request.limits)} per GPU "
                "applies again when GPUs are selected (%gpu_limit off drops it)."
            )
        return "No memory limit."
    labels = frameworks.TENSORFLOW.device_labels(plan, frameworks.known_gpus())
    lines = []
    jax_differs = jax_shares(plan) is not None
    for index, sizes in plan.limits_bytes.items():
        gpu = plan.gpu(index)
        of = f" of {format_bytes(gpu.memory_total)}" if gpu and gpu.memory_total else ""
        if len(sizes) > 1:
            where = f" → TensorFlow {labels[index]}" if index in labels else ""
            lines.append(
                f"GPU {index}: {len(sizes)} logical GPUs of {' + '.join(map(format_bytes, sizes))}{of}"
                f"{where} (PyTorch and JAX: {format_bytes(sum(sizes))} in all)"
            )
        else:
            whom = " (TensorFlow and PyTorch; JAX below)" if jax_differs else ""
            lines.append(f"GPU {index}: at most {format_bytes(sizes[0])}{of}{whom}")
        if gpu and gpu.memory_free is not None and sum(sizes) > gpu.memory_free:
            lines.append(
                f"  note: only {format_bytes(gpu.memory_free)} of GPU {index} is free now{_holders(index)}; "
                "the framework runs out of memory before it reaches the cap"
            )
    lines += jax_share(plan)
    torch_problem = frameworks.torch_caps_problem(plan, frameworks.known_gpus())
    if torch_problem is not None:
        lines.append(torch_problem + ".")
    if frameworks.order_set_by_plan(plan):
        lines.append(ORDER_NOTE)
    if plan.limit_from_ceiling:
        lines.append(f"(the admin ceiling max_limit={plan.request.max_limit} applies)")
    if plan.auto_kept:
        kept = ", ".join(map(str, plan.selected_indices or ()))
        lines.append(f"(GPU {kept} {_KEPT.format(auto=plan.request.selection)})")
    lines += [_COOPERATIVE, children or _CHILDREN] if caveats else [_COOPERATIVE_AGAIN]
    return wrap("Memory limit:\n  " + "\n  ".join(lines))


def jax_shares(plan: GpuPlan) -> list[tuple[int, int]] | None:
    """What JAX really gets on each planned GPU, ``[(index, bytes)]`` in the plan's order, when that
    differs from the plan's limits; None when JAX gets what the plan says.

    JAX takes one ``XLA_CLIENT_MEM_FRACTION`` for every GPU it sees (jaxlib ``xla_client.py``
    ``make_gpu_client`` passes one ``memory_fraction`` to the allocator of every local device), so
    the plan writes the smallest share (:meth:`jupyter_gpu.frameworks.jax.Jax.environment`)."""
    from .. import frameworks

    fraction_text = frameworks.JAX.environment(plan, {}).get("XLA_CLIENT_MEM_FRACTION")
    if fraction_text is None:
        return None
    fraction = float(fraction_text)
    shares = []
    for index in frameworks.visible_order(plan):
        gpu = plan.gpu(index)
        if gpu is None or not gpu.memory_total:
            return None
        shares.append((index, int(gpu.memory_total * fraction)))
    planned = {index: plan.memory_limit_bytes(index) or 0 for index, _ in shares}
    if all(abs(size - planned[index]) < 64 * 1024**2 for index, size in shares):
        return None  # within rounding: what the plan says
    return shares


def jax_share(plan: GpuPlan) -> list[str]:
    from .. import frameworks

    shares = jax_shares(plan)
    if shares is None:
        return []
    fraction = frameworks.JAX.environment(plan, {}).get("XLA_CLIENT_MEM_FRACTION")
    return [jax_share_line(shares, str(fraction))]


def jax_share_line(shares: list[tuple[int, int]], fraction: str) -> str:
    each = ", ".join(f"GPU {index} {format_bytes(size)}" for index, size in shares)
    return (
        f"JAX: one fraction {fraction} for all its GPUs: {each} (JAX cannot cap GPUs differently; "
        "XLA_CLIENT_MEM_FRACTION is one share of each GPU's memory)"
    )


def _holders(index: int) -> str:
    from .. import frameworks

    gpu = next((gpu for gpu in frameworks.known_gpus() if gpu.index == index), None)
    processes = getattr(gpu, "processes", ())
    held: dict[str, int] = {}
    for process in processes:
        who = "this kernel" if process.pid == os.getpid() else shown(process.user, f"PID {process.pid}")
        held[who] = held.get(who, 0) + (process.memory or 0)
    if not held:
        return ""
    return " (held by " + ", ".join(f"{who} {format_bytes(size)}" for who, size in held.items()) + ")"


def threads_report(plan: GpuPlan) -> str:
    """What ``%gpu_threads`` prints: the thread counts and TensorFlow's placement settings."""
    request = plan.request

    def setting(value: object) -> str:
        return (
            "framework default"
            if value is None
            else ("on" if value is True else "off" if value is False else str(value))
        )

    return (
        f"Threads: intra-op {setting(request.intra_op_threads)}, inter-op {setting(request.inter_op_threads)}; "
        f"TensorFlow soft placement {setting(request.soft_placement)}, "
        f"device-placement logging {setting(request.log_device_placement)}."
    )


def _where_applied(not_following: Sequence[str] = ()) -> str:
    """Where the plan takes effect: now (imported frameworks), at import, and not at all for the
    frameworks in ``not_following`` (those the report already said will NOT follow it)."""
    from .. import frameworks

    now: list[str] = []
    later: list[str] = []
    for framework in frameworks.FRAMEWORKS:
        if framework.name in not_following:
            continue
        (later if framework.state() is frameworks.State.NOT_IMPORTED else now).append(framework.name)
    parts = []
    if now:
        parts.append(f"Applied now to {', '.join(now)}")
    if later:
        parts.append(f"applied to {', '.join(later)} when imported")
    if not_following:
        parts.append(f"not applied to {', '.join(not_following)} (above: restart the kernel)")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def over_limit(index: int, held: int, cap: int) -> str:
    """The line under a GPU on which NVML shows this kernel holding more than its ``%gpu_limit``."""
    return (
        f"! this kernel holds {format_bytes(held)} on GPU {index}, more than its %gpu_limit of "
        f"{format_bytes(cap)}: caps bind each framework's allocator, not CUDA's own context, a second "
        "framework or code that ignores them"
    )


def gpu_listing(plan: GpuPlan, snapshot: Any, heading: str = "GPUs this kernel may use:") -> str:
    """The GPUs the kernel may use (its start fence), the selected ones starred, with who uses them."""
    from ..plan import kernel_start_fence

    if not snapshot.nvml_available:
        return f"{heading} unknown: NVML is unavailable ({snapshot.error})"
    allowed = kernel_start_fence().allowed(snapshot.gpus)
    selected = plan.selected_indices
    own = os.getpid()
    lines = [heading]
    for gpu in snapshot.gpus:
        if gpu.index not in allowed:
            continue
        mark = "*" if selected is not None and gpu.index in selected and plan.selected_slice is None else " "
        if gpu.error:
            lines.append(f" {mark} GPU {gpu.index}: cannot be read ({gpu.error})")
            continue
        mine = sum(p.memory or 0 for p in gpu.processes if p.pid == own)
        others = sorted({shown(p.user) for p in gpu.processes if p.pid != own})
        util = "" if gpu.utilization is None else f", {gpu.utilization}% busy"
        lines.append(
            f" {mark} GPU {gpu.index} {shown(gpu.name)} ({shown(gpu.uuid[:12])}…): "
            f"{format_bytes(gpu.memory_used)} used, "
            f"{format_bytes(gpu.memory_free)} free of {format_bytes(gpu.memory_total)}{util}"
            f"{f'; this kernel {format_bytes(mine)}' if mine else ''}"
            f"{'; used by ' + ', '.join(others) if others else ''}"
        )
        cap = plan.memory_limit_bytes(gpu.index)
        if cap is not None and mine > cap:
            lines.append(f"     {over_limit(gpu.index, mine, cap)}")
        fenced_slice = kernel_start_fence().allowed_slice(snapshot.gpus)
        for slice_ in gpu.slices:  # MIG mode: the slices are what can be selected
            if fenced_slice is not None and slice_.uuid != fenced_slice:
                continue
            mark = "*" if slice_.uuid == plan.selected_slice else " "
            mine = sum(p.memory or 0 for p in slice_.processes if p.pid == own)
            others = sorted({shown(p.user) for p in slice_.processes if p.pid != own})
            lines.append(
                f" {mark}   {gpu.index}:{slice_.index} MIG {shown(slice_.profile)} ({shown(slice_.uuid)}): "
                f"{format_bytes(slice_.memory_used)} used, {format_bytes(slice_.memory_free)} free of "
                f"{format_bytes(slice_.memory_total)}"
                f"{f'; this kernel {format_bytes(mine)}' if mine else ''}"
                f"{'; used by ' + ', '.join(others) if others else ''}"
            )
    if len(lines) == 1:
        lines.append("  none")
    if any(line.startswith(" *") for line in lines):
        lines.append("  (* selected)")
    elif selected == ():
        lines.append("  (selection: none, CPU only)")
    if getattr(snapshot, "simulated", False):
        lines.append(
            "  (simulated GPUs, JUPYTER_GPU_SIMULATE: there is no nvidia-smi; !jupyter-gpu status shows the same GPUs)"
        )
    return "\n".join(lines)
