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
from ..core.availability import label as availability_label
from ..core.i18n import N_, _, pgettext
from ..core.messages import shown as shown_message
from ..core.text import clauses, display_text, listed, wrap
from ..core.units import GIB, format_bytes

if TYPE_CHECKING:
    from ..plan import GpuPlan

_NAME_CHARS = 40
_COOPERATIVE = N_(
    "Caps are cooperative: they bind the framework's allocator, not the driver "
    "(MIG or one GPU per container for hard isolation)."
)
_COOPERATIVE_AGAIN = N_("(Caps are cooperative, as said above; %gpu_limit? says more.)")


#: Marked, not translated: shown through ``_(ORDER_NOTE)``.
ORDER_NOTE = N_(
    "CUDA_DEVICE_ORDER=PCI_BUS_ID set by the plan: these GPUs are of several models, and PyTorch caps "
    "each GPU by CUDA's device number, so CUDA now numbers them as nvidia-smi does (PyTorch's cuda:k "
    "and TensorFlow's /GPU:k are GPU k)."
)

_CHILDREN = N_(
    "Python programs this kernel starts (!python, subprocess, spawn and DataLoader workers) inherit the GPU "
    "selection, growth and JAX's share, and, where their Python has jupyter_gpu installed (this kernel's has), "
    "the TensorFlow and PyTorch caps through JUPYTER_GPU_PLAN when they import the framework: a cap per "
    "process, not shared (two children capped at 4 GiB can take 8 GiB). Other programs get the variables only."
)


def gpus_text(indices: Sequence[int]) -> str:
    """``GPU 0, 2``: planned GPUs by index (the list stays in figures and commas)."""
    return _("GPU {indices}").format(indices=", ".join(map(str, indices)))


def shown(value: str | None, missing: str = "?") -> str:
    """A name from the driver or another user, as the magics print it (bidi-safe, at most 40 characters)."""
    return display_text(value, _NAME_CHARS, missing=missing)


def summary(plan: GpuPlan) -> str:
    """The plan in one line: selection, growth, limit, admin ceiling."""
    request = plan.request
    if plan.selected_indices is None:
        selection = _("no selection (the frameworks see every GPU the kernel may use)")
    elif not plan.selected_indices:
        selection = _("CPU only (no GPU)")
    elif plan.selected_slice is not None:
        selection = _("MIG slice {slice} of GPU {index}").format(
            slice=shown(plan.selected_slice), index=plan.selected_indices[0]
        )
    else:
        selection = gpus_text(plan.selected_indices)
    if plan.selected_indices and request.selection and request.selection.lower().startswith("auto"):
        selection = _("{selection} ({auto})").format(selection=selection, auto=request.selection)
    parts = [selection, _("growth on") if plan.growth else _("growth off")]
    limits = {index: plan.memory_limit_bytes(index) for index in plan.limits_bytes}
    if limits:
        each = ", ".join(
            _("GPU {index}: {size}").format(index=index, size=format_bytes(size))
            for index, size in limits.items()
            if size
        )
        parts.append(
            (_("limit {limits} (admin ceiling)") if plan.limit_from_ceiling else _("limit {limits}")).format(
                limits=each
            )
        )
    else:
        parts.append(_("no memory limit"))
    if request.max_limit:
        parts.append(_("admin ceiling {ceiling}").format(ceiling=request.max_limit))
    return clauses(parts)


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
                _(
                    "{framework} will NOT follow this: {problem}; restart the kernel (%gpu_restart) to apply "
                    "the plan to {framework}."
                ).format(framework=framework.name, problem=problem)
            )
            continue
        for index, label in framework.device_labels(plan, gpus).items():
            labels.setdefault(index, []).append(f"{framework.name} {label}")
    return {index: ", ".join(names) or _("no framework") for index, names in labels.items()}, notes


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
        lines = [_("No GPU selected: TensorFlow, PyTorch and JAX will run on the CPU only.")]
    elif plan.selected_indices is None:
        lines = [_("No selection: {summary}").format(summary=summary(plan))]
    else:
        labels, notes = _labels(plan, not_following)
        lines = []
        why = _auto_reasons(plan, reservations)
        for index in plan.selected_indices:
            gpu = plan.gpu(index)
            names = labels.get(index, _("no framework"))
            if gpu is None or gpu.memory_free is None:
                line = _("GPU {index} → {names}").format(index=index, names=names)
            else:
                line = _("GPU {index} ({name}, {free} free) → {names}").format(
                    index=index,
                    name=shown(gpu.name.removeprefix("NVIDIA ")),
                    free=format_bytes(gpu.memory_free),
                    names=names,
                )
            lines.append(line + why.get(index, ""))
        if len(plan.selected_indices) > 1:
            lines.append(
                _(
                    "{count} GPUs selected. Selecting does not parallelize: use "
                    "tf.distribute.MirroredStrategy() (build and compile Keras models in its scope()), "
                    "PyTorch DistributedDataParallel, or JAX sharding."
                ).format(count=len(plan.selected_indices))
            )
    lines += notes
    lines.append(_("Memory growth on: allocated on demand.") if plan.growth else _("Memory growth off."))
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
            reasons[index] = _("; as {auto} chose it before (%gpu_select {auto} chooses again)").format(
                auto=plan.request.selection
            )
            continue
        users = other_users(gpu, os.getpid(), current_user())
        others = [r for r in reservations if r.pid != os.getpid()]  # not this kernel's own new claim
        state = unit_availability(gpu, others, current_user(), own_pids={os.getpid()})
        who = _("used by {users}").format(users=listed(users)) if users else availability_label(state)
        free = format_bytes(gpu.memory_free)
        reasons[index] = (
            _("; chosen by auto: {who}, {free} free").format(who=who, free=free)
            if gpu.utilization is None
            else _("; chosen by auto: {who}, {free} free, {percent} % busy").format(
                who=who, free=free, percent=gpu.utilization
            )
        )
    return reasons


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
            return _("MIG slice {slice}").format(slice=shown(plan.selected_slice))
        return gpus_text(plan.selected_indices) if plan.selected_indices else _("no GPU")

    return _("{auto} chose again: {new} (it was {old}).").format(
        auto=new.request.selection, new=gpus(new), old=gpus(old)
    )


def limit_report(plan: GpuPlan, caveats: bool = True, children: str | None = None) -> str:
    """What ``%gpu_limit`` prints: the cap per GPU, what is free now, and that caps are cooperative.

    The two caveats (caps are cooperative; what programs the kernel starts inherit: a cap per
    process, docs/children.md) take two long lines: the magics print them once per kernel
    (``caveats``), and a one-line reminder after that (``%gpu_limit?`` keeps the whole text).
    ``children`` replaces the second caveat where the plan is for another program (``jupyter-gpu
    run``: what reaches its command) or the kernel's Python lacks jupyter_gpu's start-up hook
    (:func:`jupyter_gpu.session.child.kernel_children_note`). Lines wrapped to 100 columns
    (:func:`core.text.wrap`)."""
    from .. import frameworks

    if not plan.limits_bytes:
        if plan.selected_indices == () and plan.request.limits:
            return _(
                "No memory limit while the selection is none (CPU only); {limits} per GPU "
                "applies again when GPUs are selected (%gpu_limit off drops it)."
            ).format(limits=" ".join(plan.request.limits))
        return _("No memory limit.")
    labels = frameworks.TENSORFLOW.device_labels(plan, frameworks.known_gpus())
    lines = []
    jax_differs = jax_shares(plan) is not None
    for index, sizes in plan.limits_bytes.items():
        gpu = plan.gpu(index)
        total = format_bytes(gpu.memory_total) if gpu and gpu.memory_total else None
        if len(sizes) > 1:
            figures = {
                "index": index,
                "count": len(sizes),
                "sizes": " + ".join(map(format_bytes, sizes)),
                "total": total,
                "where": f" → TensorFlow {labels[index]}" if index in labels else "",
                "sum": format_bytes(sum(sizes)),
            }
            lines.append(
                (
                    _("GPU {index}: {count} logical GPUs of {sizes} of {total}{where} (PyTorch and JAX: {sum} in all)")
                    if total
                    else _("GPU {index}: {count} logical GPUs of {sizes}{where} (PyTorch and JAX: {sum} in all)")
                ).format(**figures)
            )
        else:
            line = (_("GPU {index}: at most {size} of {total}") if total else _("GPU {index}: at most {size}")).format(
                index=index, size=format_bytes(sizes[0]), total=total
            )
            lines.append(line + (_(" (TensorFlow and PyTorch; JAX below)") if jax_differs else ""))
        if gpu and gpu.memory_free is not None and sum(sizes) > gpu.memory_free:
            holders = _holders(index)
            note = (
                _(
                    "note: only {free} of GPU {index} is free now (held by {holders}); "
                    "the framework runs out of memory before it reaches the cap"
                )
                if holders
                else _(
                    "note: only {free} of GPU {index} is free now; "
                    "the framework runs out of memory before it reaches the cap"
                )
            )
            lines.append("  " + note.format(free=format_bytes(gpu.memory_free), index=index, holders=holders))
    lines += jax_share(plan)
    torch_problem = frameworks.torch_caps_problem(plan, frameworks.known_gpus())
    if torch_problem is not None:
        lines.append(_("{problem}.").format(problem=torch_problem))
    if frameworks.order_set_by_plan(plan):
        lines.append(_(ORDER_NOTE))
    if plan.limit_from_ceiling:
        lines.append(_("(the admin ceiling max_limit={ceiling} applies)").format(ceiling=plan.request.max_limit))
    if plan.auto_kept:
        lines.append(
            _("(GPU {indices} as {auto} chose it before (%gpu_select {auto} chooses again))").format(
                indices=", ".join(map(str, plan.selected_indices or ())), auto=plan.request.selection
            )
        )
    lines += [_(_COOPERATIVE), children or _(_CHILDREN)] if caveats else [_(_COOPERATIVE_AGAIN)]
    return wrap(_("Memory limit:") + "\n  " + "\n  ".join(lines))


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
    return _(
        "JAX: one fraction {fraction} for all its GPUs: {each} (JAX cannot cap GPUs differently; "
        "XLA_CLIENT_MEM_FRACTION is one share of each GPU's memory)"
    ).format(fraction=fraction, each=each)


def _holders(index: int) -> str:
    from .. import frameworks

    gpu = next((gpu for gpu in frameworks.known_gpus() if gpu.index == index), None)
    processes = getattr(gpu, "processes", ())
    held: dict[str, int] = {}
    for process in processes:
        who = _("this kernel") if process.pid == os.getpid() else shown(process.user, f"PID {process.pid}")
        held[who] = held.get(who, 0) + (process.memory or 0)
    return listed([f"{who} {format_bytes(size)}" for who, size in held.items()])


def threads_report(plan: GpuPlan) -> str:
    """What ``%gpu_threads`` prints: the thread counts and TensorFlow's placement settings."""
    request = plan.request

    def setting(value: object) -> str:
        if value is None:
            return _("framework default")
        if value is True:
            return pgettext("setting", "on")
        return pgettext("setting", "off") if value is False else str(value)

    return _(
        "Threads: intra-op {intra}, inter-op {inter}; TensorFlow soft placement {soft}, device-placement logging {log}."
    ).format(
        intra=setting(request.intra_op_threads),
        inter=setting(request.inter_op_threads),
        soft=setting(request.soft_placement),
        log=setting(request.log_device_placement),
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
        parts.append(_("applied now to {frameworks}").format(frameworks=listed(now)))
    if later:
        parts.append(_("applied to {frameworks} when imported").format(frameworks=listed(later)))
    if not_following:
        parts.append(
            _("not applied to {frameworks} (above: restart the kernel)").format(frameworks=listed(not_following))
        )
    text = _("{clauses}.").format(clauses=clauses(parts))
    return text[0].upper() + text[1:]


CUDA_CONTEXT_ALLOWANCE = GIB
"""What NVML may show a capped kernel holding beyond its ``%gpu_limit`` without it being over: the
CUDA context and the libraries' workspaces, which no framework's cap binds. Measured on an H100
(driver 580.159.04, CUDA 13, docs/real-gpu.md): 0.52 GiB beside PyTorch's 3.5 GiB under a 4 GiB cap,
0.46 GiB beside JAX's 8 GiB pool under an 8 GiB cap, about 0.65 GiB with both frameworks in one
kernel."""


def over_limit(index: int, held: int, cap: int) -> str | None:
    """The line under a GPU on which NVML shows this kernel holding more than its ``%gpu_limit``
    plus :data:`CUDA_CONTEXT_ALLOWANCE`; None while it holds no more than that."""
    if held <= cap + CUDA_CONTEXT_ALLOWANCE:
        return None
    return "! " + _(
        "this kernel holds {held} on GPU {index}, more than its %gpu_limit of {cap} plus {context} for "
        "CUDA's own context: caps bind each framework's allocator, not a second framework or code that "
        "ignores them"
    ).format(held=format_bytes(held), index=index, cap=format_bytes(cap), context=format_bytes(CUDA_CONTEXT_ALLOWANCE))


def _usage(
    used: int | None,
    free: int | None,
    total: int | None,
    mine: int,
    others: Sequence[str],
    utilization: int | None = None,
) -> str:
    """``8 GiB used, 72 GiB free of 80 GiB, 3% busy; this kernel 2 GiB; used by ana``: a GPU's or
    slice's memory, its utilization, this kernel's share and who else uses it."""
    figures = {"used": format_bytes(used), "free": format_bytes(free), "total": format_bytes(total)}
    parts = [
        _("{used} used, {free} free of {total}").format(**figures)
        if utilization is None
        else _("{used} used, {free} free of {total}, {percent}% busy").format(percent=utilization, **figures)
    ]
    if mine:
        parts.append(_("this kernel {size}").format(size=format_bytes(mine)))
    if others:
        parts.append(_("used by {users}").format(users=listed(others)))
    return clauses(parts)


def gpu_listing(plan: GpuPlan, snapshot: Any, heading: str | None = None) -> str:
    """The GPUs the kernel may use (its start fence), the selected ones starred, with who uses them.

    ``heading``: the first line (translated already), by default "GPUs this kernel may use:"."""
    from ..plan import kernel_start_fence

    heading = heading or _("GPUs this kernel may use:")
    if not snapshot.nvml_available:
        return _("{heading} unknown: NVML is unavailable ({error})").format(
            heading=heading, error=shown_message(snapshot.error)
        )
    allowed = kernel_start_fence().allowed(snapshot.gpus)
    selected = plan.selected_indices
    own = os.getpid()
    lines = [heading]
    for gpu in snapshot.gpus:
        if gpu.index not in allowed:
            continue
        mark = "*" if selected is not None and gpu.index in selected and plan.selected_slice is None else " "
        if gpu.error:
            lines.append(
                f" {mark} "
                + _("GPU {index}: cannot be read ({error})").format(index=gpu.index, error=shown_message(gpu.error))
            )
            continue
        mine = sum(p.memory or 0 for p in gpu.processes if p.pid == own)
        others = sorted({shown(p.user) for p in gpu.processes if p.pid != own})
        usage = _usage(gpu.memory_used, gpu.memory_free, gpu.memory_total, mine, others, gpu.utilization)
        lines.append(f" {mark} GPU {gpu.index} {shown(gpu.name)} ({shown(gpu.uuid[:12])}…): {usage}")
        cap = plan.memory_limit_bytes(gpu.index)
        flagged = None if cap is None else over_limit(gpu.index, mine, cap)
        if flagged:
            lines.append(f"     {flagged}")
        fenced_slice = kernel_start_fence().allowed_slice(snapshot.gpus)
        for slice_ in gpu.slices:  # MIG mode: the slices are what can be selected
            if fenced_slice is not None and slice_.uuid != fenced_slice:
                continue
            mark = "*" if slice_.uuid == plan.selected_slice else " "
            mine = sum(p.memory or 0 for p in slice_.processes if p.pid == own)
            others = sorted({shown(p.user) for p in slice_.processes if p.pid != own})
            usage = _usage(slice_.memory_used, slice_.memory_free, slice_.memory_total, mine, others)
            lines.append(
                f" {mark}   {gpu.index}:{slice_.index} MIG {shown(slice_.profile)} ({shown(slice_.uuid)}): {usage}"
            )
    if len(lines) == 1:
        lines.append("  " + _("none"))
    if any(line.startswith(" *") for line in lines):
        lines.append("  " + _("(* selected)"))
    elif selected == ():
        lines.append("  " + _("(selection: none, CPU only)"))
    if getattr(snapshot, "simulated", False):
        lines.append(
            "  "
            + _(
                "(simulated GPUs, JUPYTER_GPU_SIMULATE: there is no nvidia-smi; "
                "!jupyter-gpu status shows the same GPUs)"
            )
        )
    return "\n".join(lines)
