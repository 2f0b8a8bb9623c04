"""The report's text (:func:`explain`, pure) and its next steps: another GPU with room, checked
by the planner (:func:`follows`), an idle kernel to shut down, the framework's cache
(:func:`next_actions`, the ones a frontend offers as buttons)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...core.i18n import _
from ...core.units import GIB, format_bytes, format_duration
from .facts import Facts, Holder, _framework_figures, _freeable_cache, _shown, _which_gpus, holders
from .recognize import OutOfMemory


def follows(facts: Facts, steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the magics ``steps`` (each a change of the plan request, in order, as the session
    adds them up) all pass the planner, so that following the printed suggestion literally works.
    True when it cannot be checked here (no request or snapshot known)."""
    if facts.request is None or facts.snapshot is None:
        return True
    from ...plan import PlanError, build_plan

    request = facts.request
    try:
        for changes in steps:
            request = replace(request, **changes)
            build_plan(request, facts.snapshot, facts.fence, own_user=facts.own_user)
    except (PlanError, TypeError, ValueError):
        return False
    return True


def _round_up_gib(value: int) -> str:
    return f"{max(1, math.ceil(value / GIB))}GiB"


def explain(oom: OutOfMemory, facts: Facts) -> str:
    """The report under the traceback (several lines, plain text)."""
    where = f"{oom.framework} {oom.device_label}" if oom.device_label else oom.framework
    lines = [
        _("jupyter_gpu: {where} ran out of GPU memory; it tried to allocate {size}.").format(
            where=where, size=format_bytes(oom.requested_bytes)
        )
        if oom.requested_bytes
        else _("jupyter_gpu: {where} ran out of GPU memory.").format(where=where)
    ]
    gpus = _which_gpus(oom, facts)
    if not facts.gpus:
        lines.append("  " + _("NVML cannot be read here, so the GPUs and who holds them are unknown."))
    elif not gpus:
        lines.append("  " + _("Which GPU this was cannot be told (the framework's device is not mapped to a GPU)."))
    steps: list[str] = []
    largest = None if gpus else _over_every_limit(oom, facts)
    if largest is not None:
        lines.append(
            "  "
            + _(
                "This kernel's limit is {limit} per GPU, less than the {size} it asked for: the limit ran out, "
                "not the GPU."
            ).format(limit=format_bytes(largest), size=format_bytes(oom.requested_bytes))
        )
        size = _raised_limit(oom.requested_bytes or 0, facts)
        if size is not None:
            steps.append(_("raise this kernel's limit: `%gpu_limit {size}`, then `%gpu_restart`").format(size=size))
        else:
            steps.append(_("the limit cannot be raised here: use less memory (a smaller batch or model)"))
    for gpu in gpus[:4]:
        lines += _gpu_section(oom, gpu, facts, steps, several=len(gpus) > 1)
    steps += _elsewhere(oom, gpus, facts)
    biggest = _larger_than_any_gpu(oom, gpus, facts)
    if biggest is not None:
        # freeing, shutting down or moving cannot make room: only a smaller allocation helps
        steps = [
            _(
                "it asked for {size} in one allocation, more than the whole memory of any GPU this kernel "
                "may use (GPU {index}: {total}): freeing memory cannot make room for it; make that "
                "allocation smaller (a smaller batch, sequence or model, or split the tensor)"
            ).format(
                size=format_bytes(oom.requested_bytes), index=biggest.index, total=format_bytes(biggest.memory_total)
            )
        ]
    if not steps:
        steps.append(
            _(
                "no GPU this kernel may use has room for it now: use less memory (a smaller batch or "
                "model), or free memory on this GPU"
            )
        )
    lines.append(_("Next steps:"))
    lines += [f"  - {step}" for step in _unique(steps)]
    return "\n".join(lines)


def _larger_than_any_gpu(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> Any | None:
    """The largest GPU this kernel may use, when one allocation asked for more than its whole memory
    (a real PyTorch error on an 80 GiB H100 asked for 119.5 GiB: docs/real-gpu.md); else None."""
    if not oom.requested_bytes or not gpus:
        return None
    usable = [
        gpu
        for gpu in facts.gpus
        if gpu.error is None and gpu.memory_total and (facts.allowed is None or gpu.index in facts.allowed)
    ]
    biggest = max(usable + list(gpus), key=lambda gpu: gpu.memory_total or 0)
    return biggest if biggest.memory_total and oom.requested_bytes > biggest.memory_total else None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _gpu_section(oom: OutOfMemory, gpu: Any, facts: Facts, steps: list[str], several: bool) -> list[str]:
    name = _shown(gpu.name.removeprefix("NVIDIA "))
    figures = {
        "index": gpu.index,
        "name": name,
        "total": format_bytes(gpu.memory_total),
        "used": format_bytes(gpu.memory_used),
        "free": format_bytes(gpu.memory_free),
    }
    if oom.device_label and not several:
        head = _("GPU {index} {name} ({device}): {total} total, {used} used, {free} free.").format(
            **figures, device=f"{oom.framework} {oom.device_label}"
        )
    else:
        head = _("GPU {index} {name}: {total} total, {used} used, {free} free.").format(**figures)
    lines = [head]
    held = holders(gpu, facts)
    own_nvml = sum(h.memory for h in held if h.kind == "self")
    in_use, reserved = _framework_figures(oom, gpu, facts)
    lines.append("  " + _("Who holds it:"))
    if not any(h.kind == "self" for h in held) and (in_use or reserved):
        held.insert(0, Holder("self", 0, "this kernel", facts.own_pid))
    for holder in held:
        lines.append(f"    {_holder_text(holder, oom, in_use, reserved, facts)}")
    if len(lines) == 2:
        lines.append("    " + _("nobody NVML can see"))
    limit = facts.limits.get(gpu.index)
    limit_hit = False
    if limit:
        need = _limit_need(oom, gpu, facts)
        limit_hit = need is not None
        need = need or 0
        whose = (
            _("the admin ceiling {ceiling}").format(ceiling=facts.admin_ceiling)
            if facts.limit_from_ceiling and facts.admin_ceiling
            else "%gpu_limit"
        )
        figures = {
            "index": gpu.index,
            "limit": format_bytes(limit),
            "whose": whose,
            "free": format_bytes(gpu.memory_free),
        }
        if limit_hit:
            lines.append(
                "  "
                + _(
                    "This kernel's limit on GPU {index} is {limit} ({whose}), and it ran out, "
                    "not the GPU ({free} free)."
                ).format(**figures)
            )
            if facts.limit_from_ceiling and facts.admin_ceiling:
                steps.append(
                    _(
                        "the limit is the admin's ceiling (the admin ceiling {ceiling} does not allow more): use "
                        "less memory (a smaller batch or model)"
                    ).format(ceiling=facts.admin_ceiling)
                )
            elif need <= limit + gpu.memory_free and _raised_limit(need, facts) is not None:
                steps.append(
                    _(
                        "raise this kernel's limit: `%gpu_limit {size}`, then `%gpu_restart` "
                        "(GPU {index} has {free} free besides it)"
                    ).format(size=_round_up_gib(need), index=gpu.index, free=format_bytes(gpu.memory_free))
                )
        else:
            lines.append(
                "  "
                + _("This kernel's limit on GPU {index}: {limit} ({whose}); the GPU ran out before the limit.").format(
                    **figures
                )
            )
    cache = _freeable_cache(oom, in_use, reserved)
    if cache:
        steps.append(
            _(
                "`%gpu_free` may return {size} held by this kernel's cache "
                "({framework} reserved {reserved}, in use {in_use})"
            ).format(
                size=format_bytes(cache),
                framework=oom.framework,
                reserved=format_bytes(reserved),
                in_use=format_bytes(in_use),
            )
        )
    if (
        oom.module == "tensorflow"
        and not limit_hit  # the cap ran out: growth would not make room under it
        and not facts.growth
        and own_nvml > 0
        and follows(facts, [{"selection": str(gpu.index), "growth": True}])
    ):
        steps.append(
            _(
                "TensorFlow without memory growth keeps its whole pool until the kernel restarts: "
                "`%gpu_select {index} --growth`, then `%gpu_restart`, and it takes only what the model needs"
            ).format(index=gpu.index)
        )
    for holder in held:
        if holder.kind == "kernel" and holder.memory > 0:
            figures = {"label": holder.label, "size": format_bytes(holder.memory), "index": gpu.index}
            idle = holder.idle or (holder.idle_s or 0) >= 600
            if holder.idle_s == 0:
                step = _(
                    "your kernel `{label}` holds {size} on GPU {index} (busy now): shut it down from the GPU "
                    "sidebar if you no longer need it"
                )
            elif holder.idle_s:
                figures["idle"] = format_duration(holder.idle_s)
                step = (
                    _(
                        "your idle kernel `{label}` holds {size} on GPU {index}, idle for {idle}: shut it down "
                        "from the GPU sidebar if you no longer need it"
                    )
                    if idle
                    else _(
                        "your kernel `{label}` holds {size} on GPU {index}, idle for {idle}: shut it down from "
                        "the GPU sidebar if you no longer need it"
                    )
                )
            else:
                step = (
                    _(
                        "your idle kernel `{label}` holds {size} on GPU {index}: shut it down from the GPU "
                        "sidebar if you no longer need it"
                    )
                    if idle
                    else _(
                        "your kernel `{label}` holds {size} on GPU {index}: shut it down from the GPU sidebar "
                        "if you no longer need it"
                    )
                )
            steps.append(step.format(**figures))
        elif holder.kind == "process" and holder.memory > 0:
            steps.append(
                _("your process {label} holds {size} on GPU {index}: end it if you no longer need it").format(
                    label=holder.label, size=format_bytes(holder.memory), index=gpu.index
                )
            )
    return lines


def _limit_need(oom: OutOfMemory, gpu: Any, facts: Facts) -> int | None:
    """What this kernel needed on ``gpu`` when its own limit is what ran out (what it holds plus what
    it asked for); None when it has no limit there, or the GPU ran out before the limit."""
    limit = facts.limits.get(gpu.index)
    if not limit:
        return None
    in_use, reserved = _framework_figures(oom, gpu, facts)
    own_nvml = sum(h.memory for h in holders(gpu, facts) if h.kind == "self")
    footprint = max(own_nvml, reserved or 0, in_use or 0)
    need = footprint + (oom.requested_bytes or 0)
    fits_gpu = oom.requested_bytes is not None and gpu.memory_free >= oom.requested_bytes
    hit = (
        need > limit
        or (fits_gpu and footprint >= limit * 0.8)
        or (oom.requested_bytes is None and footprint >= limit * 0.9)
    )
    return need if hit else None


def _over_every_limit(oom: OutOfMemory, facts: Facts) -> int | None:
    """The largest limit, when one allocation asked for more than it (it fits under no cap of this
    kernel, whichever GPU it was); None otherwise."""
    if not facts.limits or oom.requested_bytes is None:
        return None
    largest = max(facts.limits.values())
    return largest if oom.requested_bytes > largest else None


def _raised_limit(need: int, facts: Facts) -> str | None:
    """``%gpu_limit``'s size that makes room for ``need`` (whole GiB, rounded up), when the planner
    accepts it; None for the admin's ceiling (it cannot be raised) or a size it refuses."""
    if facts.limit_from_ceiling and facts.admin_ceiling:
        return None
    size = _round_up_gib(need)
    return size if follows(facts, [{"limits": (size,)}]) else None


def _holder_text(holder: Holder, oom: OutOfMemory, in_use: int | None, reserved: int | None, facts: Facts) -> str:
    if holder.kind == "self":
        nvml = format_bytes(holder.memory) if holder.memory else _("no memory NVML can see")
        if in_use is not None and reserved is not None:
            told = _("{framework}: in use {in_use}, reserved {reserved}").format(
                framework=oom.framework, in_use=format_bytes(in_use), reserved=format_bytes(reserved)
            )
        elif in_use is not None:
            told = _("{framework}: in use {size}").format(framework=oom.framework, size=format_bytes(in_use))
        elif reserved is not None:
            told = _("{framework}: reserved {size}").format(framework=oom.framework, size=format_bytes(reserved))
        else:
            told = ""
        whose = (
            _("this kernel ({notebook})").format(notebook=_shown(facts.own_notebook))
            if facts.own_notebook
            else _("this kernel")
        )
        if told:
            return _("{holder}: {memory} ({figures})").format(holder=whose, memory=nvml, figures=told)
        return _("{holder}: {memory}").format(holder=whose, memory=nvml)
    if holder.kind == "kernel":
        figures = {"label": holder.label, "size": format_bytes(holder.memory)}
        if holder.idle_s == 0:
            return _("your kernel {label}: {size}, busy now").format(**figures)
        if holder.idle_s is not None:
            return _("your kernel {label}: {size}, idle for {idle}").format(
                **figures, idle=format_duration(holder.idle_s)
            )
        if facts.peers_source == "kernel reports":
            return _("your kernel {label}: {size}, idle time unknown (the server extension was not reachable)").format(
                **figures
            )
        return _("your kernel {label}: {size}, idle time unknown").format(**figures)
    if holder.kind == "process":
        return _("your process {label}: {size}").format(label=holder.label, size=format_bytes(holder.memory))
    return _("{user}: {size}").format(user=holder.label, size=format_bytes(holder.memory))


def _elsewhere(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> list[str]:
    """Other GPUs this kernel may use with room for what it holds plus what it asked for (none when
    its own limit ran out: the same cap would hold there)."""
    steps: list[str] = []
    if _capped(oom, gpus, facts):
        return steps
    for busy, gpu, need in _roomier_gpus(oom, gpus, facts):
        magics = _select_magics(gpu, need, facts)
        if magics is None:
            continue  # no way there that the planner accepts: no suggestion rather than one that fails
        step = (
            _(
                "GPU {index} has {free} free (other users work on it): {magics}, then `%gpu_restart` "
                "(restarts the kernel with it)"
            )
            if busy
            else _("GPU {index} has {free} free: {magics}, then `%gpu_restart` (restarts the kernel with it)")
        )
        steps.append(step.format(index=gpu.index, free=format_bytes(gpu.memory_free), magics=magics))
        if len(steps) == 2:
            break
    return steps


def _roomier_gpus(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> list[tuple[bool, Any, int]]:
    """(others work on it, GPU, bytes needed) of the other GPUs this kernel may use with room for
    what it holds plus what it asked for: idle ones first, then by free memory."""
    here = {gpu.index for gpu in gpus} | set(facts.device_gpus or ())  # never the GPU it is on
    own = max([sum(p.memory or 0 for p in gpu.processes if p.pid == facts.own_pid) for gpu in gpus] or [0])
    need = own + (oom.requested_bytes or 0)
    candidates = []
    for gpu in facts.gpus:
        if gpu.index in here or gpu.error is not None or (facts.allowed is not None and gpu.index not in facts.allowed):
            continue
        others = [
            p
            for p in gpu.processes
            if p.pid != facts.own_pid and p.type != "graphics" and (facts.own_user is None or p.user != facts.own_user)
        ]
        best_here = max([g.memory_free for g in gpus] or [0])
        if gpu.memory_free >= max(need, 1) and gpu.memory_free > best_here:
            candidates.append((bool(others), -gpu.memory_free, gpu.index, gpu))
    return [(busy, gpu, need) for busy, _, _, gpu in sorted(candidates)]


def _select_magics(gpu: Any, need: int, facts: Facts) -> str | None:
    """The magics that move this kernel's plan to ``gpu``, checked by the planner: ``%gpu_select N``,
    or, when the kernel's limit is more than that GPU has, a limit that fits first (the largest whole
    GiB of its free memory, at least what the kernel needs); None when neither passes."""
    select = {"selection": str(gpu.index)}
    if follows(facts, [select]):
        return f"`%gpu_select {gpu.index}`"
    if not facts.limits:
        return None
    fitting = int(min(gpu.memory_free, gpu.memory_total) // GIB)
    if fitting < 1 or fitting * GIB < need:
        return None
    limit = {"limits": (f"{fitting}GiB",)}
    for first, second in ((limit, select), (select, limit)):
        if follows(facts, [first, second]):
            magic = {id(limit): f"`%gpu_limit {fitting}GiB`", id(select): f"`%gpu_select {gpu.index}`"}
            return f"{magic[id(first)]}, {magic[id(second)]}"
    return None


def next_actions(oom: OutOfMemory, facts: Facts) -> tuple[dict[str, Any], ...]:
    """The next steps of :func:`explain` that a frontend can offer as buttons (JupyterLab's
    extension does; the text says them all):

    - ``{"kind": "shutdown", "kernel_id", "label", "memory", "gpu", "idle_s"}``: the user's other
      kernel holding memory on a GPU that ran out (known by its kernel id: the server, or its report);
    - ``{"kind": "restart", "gpu", "request"}``: a new kernel on a roomier GPU with memory growth,
      when the planner accepts that plan (``request``: the :class:`~jupyter_gpu.plan.PlanRequest`);
    - ``{"kind": "raise_limit", "gpu", "limit", "request"}``: a new kernel with a higher
      ``%gpu_limit`` (``limit``, e.g. ``"17GiB"``) when this kernel's own limit is what ran out
      (``gpu``: where, or None when that cannot be told); then no "restart on a roomier GPU", whose
      plan would carry the same cap;
    - ``{"kind": "free", "memory"}``: ``%gpu_free``, when the framework's cache is worth returning.
    """
    actions: list[dict[str, Any]] = []
    gpus = _which_gpus(oom, facts)
    if _larger_than_any_gpu(oom, gpus, facts) is not None:
        return ()  # no button makes room for an allocation larger than every GPU
    cache = 0
    for gpu in gpus[:4]:
        cache += _freeable_cache(oom, *_framework_figures(oom, gpu, facts)) or 0
        for holder in holders(gpu, facts):
            peer = facts.peers.get(holder.pid) if holder.pid is not None else None
            if holder.kind == "kernel" and holder.memory > 0 and peer is not None and peer.kernel_id:
                actions.append(
                    {
                        "kind": "shutdown",
                        "kernel_id": peer.kernel_id,
                        "label": holder.label,
                        "memory": holder.memory,
                        "gpu": gpu.index,
                        "idle_s": holder.idle_s,
                    }
                )
    raise_to = _raise_action(oom, gpus, facts)
    if raise_to is not None:
        actions.append(raise_to)
    if facts.request is not None and not _capped(oom, gpus, facts):
        for _, gpu, _ in _roomier_gpus(oom, gpus, facts)[:2]:
            changes = {"selection": str(gpu.index), "growth": True}
            if follows(facts, [changes]):
                actions.append({"kind": "restart", "gpu": gpu.index, "request": replace(facts.request, **changes)})
    if cache:
        actions.append({"kind": "free", "memory": cache})
    return tuple(actions)


def _capped(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> bool:
    """Whether this kernel's own limit is what ran out (on the GPU it ran out on, or on every GPU)."""
    if not gpus:
        return _over_every_limit(oom, facts) is not None
    return any(_limit_need(oom, gpu, facts) is not None for gpu in gpus)


def _raise_action(oom: OutOfMemory, gpus: list[Any], facts: Facts) -> dict[str, Any] | None:
    """The "raise the limit" next step as an action (see :func:`next_actions`), when the planner accepts it."""
    if facts.request is None:
        return None
    need: int = 0
    where: int | None = None
    if not gpus:
        need = (oom.requested_bytes or 0) if _over_every_limit(oom, facts) else 0
    else:
        found = [(hit, gpu) for gpu in gpus if (hit := _limit_need(oom, gpu, facts)) is not None]
        if found:
            need, gpu = max(found, key=lambda pair: pair[0])
            where = gpu.index
            if need > facts.limits.get(gpu.index, 0) + gpu.memory_free:
                return None  # more than the GPU has besides the cap: a higher limit would not help
    size = _raised_limit(need, facts) if need else None
    if size is None:
        return None
    return {"kind": "raise_limit", "gpu": where, "limit": size, "request": replace(facts.request, limits=(size,))}
