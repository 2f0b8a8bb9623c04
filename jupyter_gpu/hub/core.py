"""The console's data, joined and filtered without any I/O (pure: no tornado, no NVML).

Inputs: the host's device snapshot (one NVML sampler in the service), its history, and each user
server's latest report (pushed to the service with the server's own token, :mod:`.reports`, which
hands it here in the shape of the server's ``jupyter-gpu/snapshot``). Output: the JSON of
``GET /services/jupyter-gpu/api/console``::

    {"timestamp": float, "viewer": str, "admin": bool, "simulated": bool,
     "nvml_available": bool, "error": str|null, "warnings": [str],
     "gpus": [{"index", "uuid", "name", "memory_total", "memory_used", "utilization", "error",
               "availability": str|null,   (the one rule's words for this viewer; null in MIG mode)
               "history": {"t": [float], "utilization": [int|null], "memory": [float|null]}}],
     "users": [{"name": str, "server_url": str|null, "error": str|null, "warnings": [str],
                "gpu_memory": int, "memory_by_gpu": {"<index>": int},
                "runs": [str],   (the viewer's own `jupyter-gpu run`s, from their claims; else empty)
                "kernels": [{"kernel_id": str|null, "notebook": str|null, "execution_state": str|null,
                             "idle_s": float|null, "idle": bool, "cull_in_s": float|null,
                             "gpu_memory": int, "memory_by_gpu": {"<index>": int},
                             "memory_source": "nvml"|"report"|null}]}]}

**Attribution rule**: a user server's report is untrusted input (its user can run anything there). Memory
is attributed by what the service itself reads: NVML's PIDs and their owners. A user's row shows
what NVML says that user's account holds; a kernel's memory is that of the PIDs its server names
*and* NVML shows owned by the same account (never another account's PID, never the claimed bytes).
Strings are cut to one visible line (hidden characters replaced by ``core.text``'s rule), numbers
bounded, kernel ids checked, lists capped; a server whose answer cannot be read gets an ``error``
line.

**Privacy rule** (the same as every other face; :func:`private_row` is its one place): command
lines and program names never leave the service (they are not even copied from the user servers'
answers); a viewer who is not an admin gets other users' kernels without ``kernel_id`` and
``notebook`` (memory, state and idle time only). The viewer's own kernels keep theirs.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import gauges, wire
from ..core.availability import Reservation, run_description, unit_availability
from ..core.culling import cull_in_s, is_idle
from ..core.i18n import _, ngettext
from ..core.snapshot import Snapshot
from ..core.text import display_text

READ_SCOPE = "custom:jupyter-gpu:read"
ADMIN_SCOPE = "custom:jupyter-gpu:admin"
MAX_KERNELS_PER_USER = 1000
MAX_GPUS = 64  # GPUs read from one user server's answer
MAX_CLAIMS = 10_000  # GPU processes read per GPU from one user server's answer
MAX_TEXT = 1024  # characters of a notebook name or an error line
MAX_BYTES = 1 << 53  # no GPU holds more (and JavaScript numbers stay exact)
KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class UserServer:
    """One running user server and what it answered (``snapshot`` None: ``error`` says why)."""

    user: str
    server_url: str | None
    snapshot: dict[str, Any] | None = None
    error: str | None = None


def access(model: dict[str, Any] | None) -> str | None:
    """ "admin", "read" or None for a hub identity (the model HubAuth returns).

    Hub admins (``admin: true``) and holders of ``custom:jupyter-gpu:admin`` may act; holders of
    ``custom:jupyter-gpu:read`` may look (privacy-filtered); everybody else gets nothing.
    """
    if not model:
        return None
    scopes = set(model.get("scopes") or ())
    if (model.get("kind", "user") == "user" and model.get("admin") is True) or ADMIN_SCOPE in scopes:
        return "admin"
    if READ_SCOPE in scopes:
        return "read"
    return None


def devices_answer(snapshot: Snapshot) -> dict[str, Any]:
    """The device snapshot user servers take (``/api/devices``): names and command lines removed."""
    data = snapshot.to_dict()
    for gpu in data["gpus"]:
        for process in [*gpu["processes"], *(p for part in gpu.get("slices", []) for p in part["processes"])]:
            process["name"] = None
            process.pop("command", None)
    return data


def _finite(value: Any, low: float = 0.0) -> float | None:
    """A finite number raised to at least ``low``; None for anything else (10**400 included)."""
    number = wire.maybe(wire.number, value, "a number")
    return None if number is None else max(low, number)


def _bytes(value: Any, ceiling: int = MAX_BYTES) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return min(value, ceiling) if ok else 0


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    """A user server's string as one visible line of at most ``limit`` characters (None otherwise).

    Hidden characters are replaced and long text cut by ``core.text``'s rule, as in every face.
    """
    if not isinstance(value, str):
        return None
    return display_text(value[: limit * 4], limit)


def _kernel_id(value: Any) -> str | None:
    """A kernel id as Jupyter makes them (UUIDs; any short id of letters, digits, ``-``, ``_``)."""
    return value if isinstance(value, str) and KERNEL_ID.fullmatch(value) else None


def account_of(user: str, template: str = "{name}") -> str:
    """The system account that owns ``user``'s processes (``--system-user``, e.g. TLJH's
    ``jupyter-{name}``): the owner NVML's PIDs must have for the service to attribute them."""
    return template.replace("{name}", user)


@dataclass
class Truth:
    """What the service itself knows of the GPUs' processes: NVML's PIDs, memory and owners."""

    by_pid: dict[int, list[tuple[int, str | None, int]]]  # pid -> [(gpu index, owner, bytes)]
    by_owner: dict[str, dict[str, int]]  # owner -> {"<gpu index>": bytes}
    total_memory: int  # the host's GPU memory (bounds a kernel's own report)

    @classmethod
    def of(cls, devices: Snapshot | None) -> Truth:
        """The index of ``devices``, built once per sample (every console request of that second
        shares it: 64 GPUs x 2,000 processes take about 0.1 s to index)."""
        cached = _TRUTH
        if cached is not None and cached[0] is devices:
            return cached[1]
        truth = cls._build(devices)
        globals()["_TRUTH"] = (devices, truth)
        return truth

    @classmethod
    def _build(cls, devices: Snapshot | None) -> Truth:
        by_pid: dict[int, list[tuple[int, str | None, int]]] = {}
        by_owner: dict[str, dict[str, int]] = {}
        total = 0
        for gpu in devices.gpus if devices is not None else ():
            total += gpu.memory_total or 0
            for process in gpu.processes:  # a MIG parent lists every slice's processes
                memory = process.memory or 0
                by_pid.setdefault(process.pid, []).append((gpu.index, process.user, memory))
                if process.user is not None:
                    per_gpu = by_owner.setdefault(process.user, {})
                    per_gpu[str(gpu.index)] = per_gpu.get(str(gpu.index), 0) + memory
        return cls(by_pid, by_owner, total)


_TRUTH: tuple[Snapshot | None, Truth] | None = None  # the latest sample's index (Truth.of)


def snapshot_problem(snapshot: Any) -> str | None:
    """Why ``snapshot`` is not a user server's ``jupyter-gpu/snapshot`` answer at all (None: it is)."""
    if not isinstance(snapshot, dict):
        return _("the answer is not a JSON object")
    if not isinstance(snapshot.get("gpus", []), list) or not isinstance(snapshot.get("kernels", []), list):
        return _("the answer is not a jupyter-gpu snapshot (gpus and kernels must be lists)")
    return None


def user_kernels(
    snapshot: dict[str, Any], truth: Truth | None = None, account: str | None = None, notes: list[str] | None = None
) -> list[dict[str, Any]]:
    """A user server's kernels with their GPU memory per GPU index (untrusted input, checked).

    The server says which of its kernels each GPU process belongs to (``gpus[].processes[].kernel_id``);
    the service believes only what it can check: a claimed PID counts for the kernel when the
    service's own NVML sample (``truth``) shows that PID with ``account`` as its owner, and then with
    the memory and GPU NVML gives, never the claimed ones. Claims the service cannot check or that
    name another account's PID are left out, and counted in ``notes``. A kernel without checked
    memory may show its own report (``reported_gpu_memory``: containers), marked
    ``memory_source: "report"`` and bounded by the host's GPU memory.
    """
    truth = truth or Truth({}, {}, 0)
    if snapshot_problem(snapshot) is not None:
        return []
    claimed: dict[str, list[int]] = {}
    seen: set[int] = set()
    malformed = 0
    gpus = snapshot.get("gpus")
    for gpu in (gpus if isinstance(gpus, list) else ())[:MAX_GPUS]:
        processes = gpu.get("processes") if isinstance(gpu, dict) else None
        for process in (processes if isinstance(processes, list) else ())[:MAX_CLAIMS]:
            if not isinstance(process, dict) or process.get("kernel_id") is None:
                malformed += not isinstance(process, dict)
                continue  # not one of this server's kernels
            kernel_id, pid = _kernel_id(process.get("kernel_id")), process.get("pid")
            if kernel_id is None or isinstance(pid, bool) or not isinstance(pid, int):
                malformed += 1
                continue
            if pid not in seen:  # a PID counts once, for the first kernel claiming it
                seen.add(pid)
                claimed.setdefault(kernel_id, []).append(pid)
    foreign = unknown = 0
    by_kernel: dict[str, dict[str, int]] = {}
    for kernel_id, pids in claimed.items():
        memory = by_kernel.setdefault(kernel_id, {})
        for pid in pids:
            entries = truth.by_pid.get(pid)
            if not entries:
                unknown += 1
                continue
            for index, owner, used in entries:
                if owner is not None and owner == account:
                    memory[str(index)] = memory.get(str(index), 0) + used
                elif owner is None:
                    unknown += 1
                else:
                    foreign += 1
    if notes is not None:
        if foreign:
            notes.append(
                ngettext(
                    "{count} GPU process this server claims for its kernels belongs to another "
                    "account (NVML's PID owner): not counted",
                    "{count} GPU processes this server claims for its kernels belong to another "
                    "account (NVML's PID owner): not counted",
                    foreign,
                ).format(count=foreign)
            )
        if unknown:
            notes.append(
                ngettext(
                    "{count} GPU process this server claims for its kernels is not on this "
                    "host's GPUs as the service sees them: not counted",
                    "{count} GPU processes this server claims for its kernels are not on this "
                    "host's GPUs as the service sees them: not counted",
                    unknown,
                ).format(count=unknown)
            )
    kernels: list[dict[str, Any]] = []
    reported_rules = "idle_threshold_s" in snapshot
    listed = snapshot.get("kernels")
    known: set[str] = set()
    for kernel in (listed if isinstance(listed, list) else ())[:MAX_KERNELS_PER_USER]:
        kernel_id = _kernel_id(kernel.get("kernel_id")) if isinstance(kernel, dict) else None
        if kernel_id is None or kernel_id in known:
            malformed += 1
            continue
        known.add(kernel_id)
        memory_by_gpu = {index: used for index, used in by_kernel.get(kernel_id, {}).items() if used}
        gpu_memory = sum(memory_by_gpu.values())
        source = "nvml" if gpu_memory else None
        reported = kernel.get("reported_gpu_memory")
        if not gpu_memory and isinstance(reported, dict):  # containers: the kernel's own report
            values = list(reported.values())[:MAX_GPUS]
            gpu_memory = min(sum(_bytes(v) for v in values), truth.total_memory or MAX_BYTES)
            source = "report" if gpu_memory else None
        idle_s = _finite(kernel.get("idle_s"))
        state = _text(kernel.get("execution_state"), 32)
        idle, cull = kernel.get("idle") is True, _finite(kernel.get("cull_in_s"))
        if reported_rules:  # a pushed report (hub.reports): the rule applied to the checked memory
            threshold = _finite(snapshot.get("idle_threshold_s"))
            idle = is_idle(idle_s, gpu_memory > 0, threshold if threshold is not None else 3600.0)
            cull_idle = (snapshot.get("cull_idle_s") or {}).get(kernel_id)
            cull = cull_in_s(
                cull_idle if wire.finite(cull_idle) else None,
                gpu_memory > 0,
                state == "busy",
                _finite(snapshot.get("cull_idle_after_s")) or 0.0,
            )
        kernels.append(
            {
                "kernel_id": kernel_id,
                "notebook": _text(kernel.get("notebook")),
                "execution_state": state,
                "idle_s": idle_s,
                "idle": idle,
                "cull_in_s": cull,
                "gpu_memory": gpu_memory,
                "memory_by_gpu": memory_by_gpu,
                "memory_source": source,
            }
        )
    if notes is not None and malformed:
        notes.append(
            ngettext(
                "{count} malformed or repeated entry in this server's answer: left out",
                "{count} malformed or repeated entries in this server's answer: left out",
                malformed,
            ).format(count=malformed)
        )
    kernels.sort(key=lambda k: (-k["gpu_memory"], k["notebook"] or "", k["kernel_id"]))
    return kernels


def console(
    devices: Snapshot | None,
    history: dict[str, Any],
    servers: list[UserServer],
    viewer: str,
    role: str,
    system_user: str = "{name}",
    warnings: list[str] | None = None,
    reserved: Mapping[str, Collection[str]] | None = None,
    runs: Mapping[str, Sequence[Reservation]] | None = None,
) -> dict[str, Any]:
    """The console's JSON for ``viewer`` with ``role`` ("admin" or "read"), privacy applied.

    Each GPU's ``availability`` is the one rule's words for this viewer
    (:func:`jupyter_gpu.core.availability.unit_availability`: ``free``, ``in use by you``,
    ``reserved by another user``, ...): ``reserved`` maps a GPU's UUID to the accounts whose kernel or
    run chose it and holds nothing there yet (:func:`jupyter_gpu.sources.claims.reserved_accounts`);
    a viewer learns only whether a reservation is theirs, never whose or what it is. ``runs`` maps an
    account to its ``jupyter-gpu run`` claims (:func:`jupyter_gpu.sources.claims.runs_by_account`):
    the viewer's own row lists them (``"runs": ["train.py (jupyter-gpu run), 2 h on GPU 1"]``);
    every other row's ``runs`` is empty, for admins too (a run's label is its owner's only).

    One row per user (a user's named servers are merged). A row's ``gpu_memory``/``memory_by_gpu``
    is what NVML shows the user's account holding (``system_user``, see :func:`account_of`), plus
    kernels known only by their own report: what the user's server answers cannot change it.
    ``warnings``: the service's own lines (the hub could not be asked, ...), added to the device ones.
    """
    admin = role == "admin"
    truth = Truth.of(devices)
    me = account_of(viewer, system_user) if viewer else None
    by_user: dict[str, list[UserServer]] = {}
    for server in servers:
        by_user.setdefault(server.user, []).append(server)
    users = []
    for name in sorted(by_user):
        row = user_row(name, by_user[name], truth, system_user)
        mine = name == viewer
        if not (admin or mine):
            row = private_row(row)
        if mine:
            row["runs"] = runs_text((runs or {}).get(account_of(name, system_user), ()), devices)
        users.append(row)
    return {
        **console_head(devices, viewer, admin, warnings),
        "gpus": gpu_entries(devices, history, reserved, me),
        "users": users,
    }


def console_head(
    devices: Snapshot | None, viewer: str, admin: bool, warnings: list[str] | None = None
) -> dict[str, Any]:
    """The answer's fields before ``gpus`` and ``users`` (:func:`console`), for ``viewer``."""
    return {
        "timestamp": devices.timestamp if devices is not None else None,
        "viewer": viewer,
        "admin": admin,
        "simulated": devices.simulated if devices is not None else False,
        "nvml_available": devices.nvml_available if devices is not None else False,
        "error": devices.error if devices is not None else _("no GPU sample yet"),
        "warnings": [*(devices.warnings if devices is not None else ()), *(warnings or ())],
    }


def gpu_entries(
    devices: Snapshot | None,
    history: dict[str, Any],
    reserved: Mapping[str, Collection[str]] | None,
    me: str | None,
) -> list[dict[str, Any]]:
    """The answer's ``gpus`` for the viewer whose account is ``me`` (the availability's words are
    the viewer's: "in use by you", "reserved by another user", ...)."""
    series = {gpu["uuid"]: gpu for gpu in history.get("gpus", [])}
    gpus = []
    for gpu in devices.gpus if devices is not None else ():
        past = series.get(gpu.uuid, {})
        held = [Reservation(gpu.uuid, own=account == me) for account in (reserved or {}).get(gpu.uuid, ())]
        gpus.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "memory_total": gpu.memory_total,
                "memory_used": gpu.memory_used,
                "utilization": gpu.utilization,
                "error": gpu.error,
                "availability": None if gpu.mig_mode else unit_availability(gpu, held, me),
                "history": {key: past.get(key, []) for key in ("t", "utilization", "memory")},
            }
        )
    return gpus


def user_row(name: str, servers: Sequence[UserServer], truth: Truth, system_user: str = "{name}") -> dict[str, Any]:
    """One user's row as an admin or that user sees it: every kernel with its id and notebook, the
    server's URL, ``runs`` empty (only the viewer's own row lists runs, :func:`console`). The join
    of this user's servers (their reports) with the service's sample (``truth``); the same for
    every viewer, so it is built once per sample and report (:mod:`jupyter_gpu.hub.console_join`)
    and :func:`private_row` makes what anybody else sees of it."""
    account = account_of(name, system_user)
    kernels: list[dict[str, Any]] = []
    notes: list[str] = []
    errors = []
    for server in servers:
        problem = None if server.snapshot is None else snapshot_problem(server.snapshot)
        if problem is not None:
            errors.append(_("cannot read this server's GPU kernels: {problem}").format(problem=problem))
        elif server.snapshot is not None:
            kernels += user_kernels(server.snapshot, truth, account, notes)
        if server.error:
            errors.append(_text(server.error) or "")
    total = dict(truth.by_owner.get(account, {}))
    reported = sum(k["gpu_memory"] for k in kernels if k["memory_source"] == "report")
    urls = [s.server_url for s in servers if s.server_url]
    return {
        "name": name,
        "server_url": urls[0] if urls else None,
        "error": "; ".join(errors) or None,
        "warnings": notes,
        "gpu_memory": sum(total.values()) + reported,
        "memory_by_gpu": total,
        "kernels": kernels,
        "runs": [],
    }


def private_row(row: dict[str, Any]) -> dict[str, Any]:
    """**The privacy rule**, its one place: ``row`` (:func:`user_row`) as a viewer who is neither an
    admin nor that user sees it: no server URL, every kernel without ``kernel_id`` and ``notebook``
    (memory, state and idle time stay), no runs."""
    return {
        **row,
        "server_url": None,
        "kernels": [{**kernel, "kernel_id": None, "notebook": None} for kernel in row["kernels"]],
        "runs": [],
    }


def runs_text(runs: Sequence[Reservation], devices: Snapshot | None) -> list[str]:
    """One account's runs as its user reads them: ``train.py (jupyter-gpu run), 2 h on GPU 1, 2``."""
    now = devices.timestamp if devices is not None else 0.0
    index = {gpu.uuid: str(gpu.index) for gpu in devices.gpus} if devices is not None else {}
    index.update({s.uuid: f"{gpu.index}:{s.index}" for gpu in devices.gpus for s in gpu.slices} if devices else {})
    by_run: dict[tuple[int | None, float], list[Reservation]] = {}
    for run in runs:
        by_run.setdefault((run.pid, run.since), []).append(run)
    return [
        _("{run} on GPU {gpus}").format(
            run=run_description(found[0], now), gpus=", ".join(sorted(index.get(r.gpu_uuid, "?") for r in found))
        )
        for _key, found in sorted(by_run.items(), key=lambda item: item[0][1])
    ]


def kernel_rows(
    answer: dict[str, Any], uuids: dict[int, str]
) -> tuple[list[gauges.KernelMemoryRow], list[gauges.KernelRow], list[gauges.KernelRow]]:
    """The per-kernel series' rows (:func:`jupyter_gpu.core.gauges.kernel_families`) of every user
    in :func:`console`'s admin answer over the servers' reports, so the service exports what the
    user servers' own ``/metrics`` export, with the same names and labels.

    Only what the service checked is exported: memory per GPU that NVML shows held by the kernel's
    claimed PIDs *and* owned by the user's account (a lying report, a stale one, a claim on another
    account's process give no row; a container kernel's own ``reported_gpu_memory`` is not
    exported either). ``user`` is the hub user whose token sent the report, never a field of it;
    ``uuids``: GPU index -> UUID of the service's sample. Idle seconds go out for kernels holding
    checked memory, cull countdowns for kernels that have one, as the user servers export them."""
    memory: list[gauges.KernelMemoryRow] = []
    idle: list[gauges.KernelRow] = []
    cull: list[gauges.KernelRow] = []
    for row in answer["users"]:
        for kernel in row["kernels"]:
            labels = (kernel["kernel_id"], kernel["notebook"] or "", row["name"])
            for index, used in sorted(kernel["memory_by_gpu"].items()):
                memory.append((*labels, index, uuids.get(int(index), ""), used))
            if kernel["memory_by_gpu"] and kernel["idle_s"] is not None:
                idle.append((*labels, kernel["idle_s"]))
            if kernel["cull_in_s"] is not None:
                cull.append((*labels, kernel["cull_in_s"]))
    return memory, idle, cull
