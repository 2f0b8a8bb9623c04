"""The plan session: change this process's GPU plan all-or-nothing and say what happened.

:class:`PlanSession` is what every plan magic (``%gpu_select``, ``%gpu_limit``, ``%gpu_threads``,
``%config GpuMagics.max_limit``, the defaults at ``%load_ext``) and ``jupyter-gpu run`` run to
change the plan: take an NVML snapshot, build the new plan from the current request and the changes
(:func:`jupyter_gpu.plan.build_plan`, inside the process's start fence and under the admin ceiling),
apply it to the frameworks (:func:`jupyter_gpu.frameworks.apply_plan`: the environment a child
inherits, post-import hooks), and leave a claim on what ``auto`` chose
(:mod:`jupyter_gpu.sources.claims`). When a framework already uses the GPU nothing changes: a
:class:`jupyter_gpu.GPUAlreadyInitializedWarning` says so and :meth:`PlanSession.too_late` is told
(the kernel offers a restart). A refused change is one line, raised as :attr:`PlanSession.refused`
(:class:`~jupyter_gpu.plan.PlanError` here; the kernel's session raises IPython's ``UsageError``),
so a test or a command drives a session with plain settings.

The admin ceiling (``JUPYTER_GPU_MAX_LIMIT`` at kernel start) may only be tightened from the kernel:
:func:`loosens_admin_ceiling` is that one rule.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ..core.errors import GPUAlreadyInitializedWarning, PlanError, warn
from ..core.i18n import _
from .defaults import admin_ceiling as admin_ceiling  # the ceiling's one reading, imported from here too
from .report import shown

if TYPE_CHECKING:
    from ..core.snapshot import Snapshot
    from ..plan import GpuPlan, PlanRequest

# jupyter_gpu.plan and jupyter_gpu.frameworks are imported inside the functions that use them, so
# %load_ext jupyter_gpu stays cheap in a kernel that never runs a GPU magic.

_nvml_started = False


def take_snapshot(host_sample: bool = False) -> Snapshot:
    """The GPUs now (NVML is imported on first use, so loading the extension stays cheap).

    ``host_sample``: the host's sample (:mod:`jupyter_gpu.sources.host`: this kernel's server, the
    hub service, else NVML here), for loops that look again and again (``--wait``)."""
    global _nvml_started
    if host_sample:
        from ..sources.host import default_host_sample

        return default_host_sample()()
    from ..sources.nvml import snapshot

    taken = snapshot()
    _nvml_started = True
    return taken


def current_user() -> str | None:
    """This kernel's user, to tell the user's own GPU processes from other users'."""
    from ..sources import processes

    return processes.current_user()


def loosens_admin_ceiling(requested: str) -> str | None:
    """Why ``requested`` may not replace the ceiling an administrator set in JUPYTER_GPU_MAX_LIMIT.

    From inside the kernel the ceiling may only be tightened: a value is refused when it is empty
    or larger than the administrator's on any GPU. None when it is acceptable.
    """
    from ..plan import PlanError, parse_size

    admin = admin_ceiling()
    if not admin or requested == admin:
        return None
    why = _("the administrator's ceiling JUPYTER_GPU_MAX_LIMIT={admin} can only be tightened from the kernel").format(
        admin=admin
    )
    if not requested:
        return why
    try:
        size, ceiling = parse_size(requested), parse_size(admin)
        gpus = [gpu for gpu in take_snapshot().gpus if not gpu.error]
        if any(size.resolve(gpu.memory_total) > ceiling.resolve(gpu.memory_total) for gpu in gpus):
            return why
    except PlanError as error:
        return str(error)
    return None


def gpu_settings_change(old: PlanRequest, new: PlanRequest) -> bool:
    """Whether a request change touches the GPU settings (not only threads or placement)."""
    keys = ("selection", "min_free", "limits", "growth", "max_limit")
    return any(getattr(old, key) != getattr(new, key) for key in keys)


def _replaced_by_hand() -> str:
    from ..core.visibility import SELECTION_KEYS

    values = [
        f"{key}={os.environ[key]!r}" if key in os.environ else _("{variable} (unset)").format(variable=key)
        for key in SELECTION_KEYS
    ]
    return _(" and ").join(values)


def would_fit_hints(
    snapshot: Snapshot,
    request: PlanRequest,
    claims: dict[int | str, int] | None = None,
    require_idle: bool = False,
) -> str:
    """``"; GPU 2 would fit if your idle kernel x.ipynb (22 GiB) were shut down"`` where this
    user's own processes are all that keep a GPU from qualifying ("" when none). Each hint is
    checked: the same request passes the planner on the GPUs as they would be after the shutdown."""
    try:
        from dataclasses import replace as _replace

        from ..plan import PlanError, build_plan, fit_hints, kernel_start_fence, parse_size

        def check(after: Any) -> bool:
            world = _replace(snapshot, gpus=tuple(after if gpu.index == after.index else gpu for gpu in snapshot.gpus))
            try:
                build_plan(
                    request,
                    world,
                    kernel_start_fence(),
                    own_user=current_user(),
                    claims=claims,
                    require_idle=require_idle,
                )
            except PlanError:
                return False
            return True

        min_free = parse_size(request.min_free).resolve(None) if request.min_free else 0
        if not min_free or not snapshot.nvml_available:
            return ""
        from ..sources.peers import find_peers

        kernels = {}
        for pid, peer in find_peers().by_pid.items():
            if peer.notebook:
                idle = peer.idle or (peer.idle_s or 0) >= 600
                kernels[pid] = (_("idle kernel {notebook}") if idle else _("kernel {notebook}")).format(
                    notebook=shown(peer.notebook)
                )
        hints = fit_hints(snapshot.gpus, min_free, os.getpid(), current_user(), kernels, check=check)
    except Exception:
        return ""
    return "".join(_("; {hint}").format(hint=hint) for hint in hints[:3])


def warn_already_initialized(magic: str, who: str, detail: str) -> None:
    """Warn that ``magic`` changed nothing because ``who`` already uses the GPU (``detail``: what is in effect)."""
    from .. import frameworks

    state = next((f.state() for f in frameworks.FRAMEWORKS if f.name == who), None)
    call = None
    if who == "CUDA":
        opening = _("This kernel already uses the GPU, so {magic} cannot take effect:")
    elif state is frameworks.State.INITIALIZED:
        opening = _("{who} already initialized the GPU in this kernel, so {magic} cannot take effect:")
    else:
        call = frameworks.cuda_start_call()
        opening = (
            _("{who} already started CUDA in this kernel (at {call}), so {magic} cannot take effect:")
            if call
            else _("{who} already started CUDA in this kernel (it listed the GPUs), so {magic} cannot take effect:")
        )
    message = (
        opening.format(who=who, magic=magic, call=call)
        + "\n"
        + _("{detail}.").format(detail=detail)
        + "\n"
        + _(
            "The GPU plan and the environment are unchanged. To apply a new plan, restart the kernel "
            "(%gpu_restart) and run the magic before the first GPU use."
        )
    )
    warn(message, GPUAlreadyInitializedWarning)  # every time (unless a filter ignores it), as its own lines


class NoGpuFitsError(Exception):
    """No GPU fits the request now: what ``%gpu_select auto --wait`` waits out (:meth:`PlanSession.change_if_fits`).

    Not a ``UsageError`` subclass on purpose: IPython shows only an exact ``UsageError`` as one line,
    so :meth:`PlanSession.change` turns this into :attr:`PlanSession.refused`."""


class SessionSettings(Protocol):
    """What a session reads from its configuration (:class:`jupyter_gpu.kernel.magics.GpuMagics` in a kernel)."""

    max_limit: str
    claims: bool
    claims_dir: str
    claim_ttl_s: float


@dataclass
class Settings:
    """Plain settings for a session without a shell (tests, scripts); the kernel's come from ``GpuMagics``."""

    max_limit: str = ""
    claims: bool = False
    claims_dir: str = "/tmp"
    claim_ttl_s: float = 600.0


class PlanSession:
    """One process's changes of the GPU plan, with what they leave behind: the plan a restart would apply
    (:attr:`pending_request`), the snapshot and claims of the last attempt, this process's claim.

    A face adapts it with three class-level choices: :attr:`refused` (the one-line error type),
    :meth:`too_late` (what else to do when a framework already uses the GPU) and :meth:`at_exit`
    (how the claim is released however the process ends)."""

    #: the exception a refused change is raised as (one line); the kernel's session uses ``UsageError``
    refused: type[Exception] = PlanError

    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        #: the last plan refused as too late (what %gpu_restart applies); None when none was refused
        self.pending_request: PlanRequest | None = None
        self.last_snapshot: Snapshot | None = None
        self.last_claims: dict[int | str, int] = {}
        self.last_reservations: list[Any] = []  # core.availability.Reservation: why auto chose a GPU
        self._board: Any = None
        self._claims_note_shown = False
        #: what the claim says beyond its GPUs (:meth:`jupyter_gpu.sources.claims.ClaimBoard.claim`'s
        #: keyword arguments; a face sets them, e.g. what holds the claim)
        self.claim_fields: dict[str, Any] = {}

    def change(self, magic: str, require_idle: bool = False, hints: bool = True, **changes: Any) -> GpuPlan | None:
        """Rebuild the plan with ``changes``; apply it, or warn and change nothing. Returns the new plan
        (None when a framework already uses the GPU). A refused change is one line: :attr:`refused`."""
        try:
            return self.change_if_fits(magic, require_idle, hints, **changes)
        except NoGpuFitsError as error:
            raise self.refused(str(error)) from None

    def change_if_fits(
        self, magic: str, require_idle: bool = False, hints: bool = True, host_sample: bool = False, **changes: Any
    ) -> GpuPlan | None:
        """:meth:`change`, but :class:`NoGpuFitsError` when no GPU fits the request now.
        ``host_sample``: look at the host's sample (:func:`take_snapshot`), as ``--wait`` does.

        An ``auto`` selection is chosen and claimed under the claims lock (:mod:`jupyter_gpu.sources.claims`),
        counting other kernels' claims as load."""
        auto = str(changes.get("selection") or "").strip().lower().startswith("auto")
        board = self._claim_board() if auto else None
        warm = None
        if board is not None and not _nvml_started:
            # NVML's start (tens of ms) happens before the claims lock, not while holding it
            warm = (take_snapshot(), time.monotonic())
        with board.locked() if board is not None else contextlib.nullcontext(False):
            fresh = warm[0] if warm is not None and time.monotonic() - warm[1] < 0.5 else None
            plan = self._change_locked(magic, board, require_idle, fresh, hints, host_sample, **changes)
            if plan is not None and "selection" in changes:
                # Every selection of GPUs is claimed, `%gpu_select 2` too: the GPU shows as reserved
                # (to this user and, as "reserved by another user", to the others) until it is used.
                chosen = board if board is not None else self._claim_board()
                if chosen is not None:
                    self._claim(chosen, plan)
                elif self._board is not None:
                    self._board.release()  # claims turned off since: no claim
        # Whose claims auto saw, for its reasons ("reserved by another user"): read after the lock
        snapshot = self.last_snapshot
        self.last_reservations = []
        if board is not None and snapshot is not None and self.last_claims:
            self.last_reservations = board.reservations(snapshot.gpus)
        return plan

    def _change_locked(
        self, magic: str, board: Any, require_idle: bool, fresh: Any, hints: bool, host_sample: bool, **changes: Any
    ) -> GpuPlan | None:
        from .. import frameworks
        from ..plan import NoGpuFits, PlanError, build_plan, current_plan, kernel_start_fence

        old = current_plan()
        changes.setdefault("max_limit", self.settings.max_limit.strip() or None)
        request = replace(old.request, **changes)
        if self.pending_request is not None and gpu_settings_change(old.request, request):
            # A framework already uses the GPU and earlier changes were refused as too late: they add
            # up into the plan a restart applies, so this one is checked on top of them (%gpu_limit
            # 40GiB then %gpu_select 2 is valid on a 48 GiB GPU 2 even if the running plan has 50 GiB).
            request = replace(self.pending_request, **changes)
        snapshot = take_snapshot(host_sample) if fresh is None else fresh
        self.last_snapshot = snapshot
        frameworks.remember_gpus(snapshot.gpus)
        changed = frameworks.selection_env_changed(magic)
        if changed and "selection" not in changes and gpu_settings_change(old.request, request):
            raise self.refused(changed)
        claims = board.load(snapshot.gpus) if board is not None and snapshot.nvml_available else {}
        self.last_claims = claims
        try:
            new = build_plan(
                request,
                snapshot,
                kernel_start_fence(),
                own_user=current_user(),
                claims=claims,
                require_idle=require_idle,
                kept=None if "selection" in changes else old,  # a new choice only when asked for
            )
        except NoGpuFits as error:
            hint = would_fit_hints(snapshot, request, claims, require_idle) if hints else ""
            raise NoGpuFitsError(str(error) + hint) from None
        except PlanError as error:
            raise self.refused(str(error)) from None
        late = frameworks.too_late(old, new, snapshot)
        if late is not None:
            warn_already_initialized(magic, *late)
            # Refused changes add up (select, then limit) into the plan a restart applies.
            self.pending_request = replace(self.pending_request or old.request, **changes)
            self.too_late(self.pending_request, f"{late[0]} already uses the GPU in this kernel")
            return None
        replaced = (
            _replaced_by_hand()
            if "selection" in changes
            and new.selected_indices is not None
            and frameworks.set_by_code()
            and frameworks.process_cuda_start() is None
            else ""
        )
        try:
            settings_replaced = frameworks.apply_plan(old, new)
        except PlanError as error:
            raise self.refused(str(error)) from None
        if replaced:
            print(
                "jupyter_gpu: "
                + _("{magic} replaces {replaced} set by code in this kernel.").format(magic=magic, replaced=replaced),
                file=sys.stderr,
            )
        if settings_replaced:
            print(
                "jupyter_gpu: "
                + _("{magic} replaces {settings}: the plan needs it.").format(
                    magic=magic, settings=", ".join(settings_replaced)
                ),
                file=sys.stderr,
            )
        from ..core.errors import GPUPlanMismatchWarning, warn

        for message in frameworks.env_conflict_messages():
            warn(message, GPUPlanMismatchWarning)
        if self.pending_request is not None:
            self.pending_request = replace(self.pending_request, **changes)
        return new

    def too_late(self, pending: PlanRequest, why: str) -> None:
        """Called when a change was refused because ``why`` (a framework already uses the GPU);
        ``pending`` is the plan a restart would apply. Here: nothing more (the warning said it)."""

    def at_exit(self, release: Any) -> None:
        """Have ``release`` (the claims' removal) called however this process ends. Here: at a normal
        exit (:mod:`atexit`); the kernel's session also on SIGTERM, SIGHUP and its parent's death."""
        import atexit

        atexit.register(release)

    # -- claims: kernels choosing at once spread over the idle GPUs

    def release_claims(self) -> None:
        """Remove this process's claims now (``jupyter-gpu run`` when its command has ended)."""
        if self._board is not None:
            self._board.release()

    def _claim_board(self) -> Any:
        """The claims board, or None when claims are off or their directory cannot be used (said once)."""
        if not self.settings.claims:
            return None
        from ..sources.claims import ClaimBoard

        if (
            self._board is None
            or str(self._board.directory) != self.settings.claims_dir
            or self._board.ttl_s != self.settings.claim_ttl_s
        ):
            if self._board is not None:
                self._board.release()
            try:
                self._board = ClaimBoard(self.settings.claims_dir, ttl_s=self.settings.claim_ttl_s)
            except Exception as error:  # claims are never required
                self._claims_note(str(error))
                return None
            self.at_exit(self._board.release)
        if self._board.problem is not None:
            self._claims_note(self._board.problem)
            return None
        return self._board

    def _claim(self, board: Any, plan: GpuPlan) -> None:
        """Claim the GPUs the selection chose (replacing this kernel's earlier claims; none: released)."""
        uuids = [gpu.uuid for gpu in plan.gpus if gpu.index in (plan.selected_indices or ()) and gpu.uuid]
        try:
            board.claim(uuids, **self.claim_fields)
        except Exception as error:  # claims are never required: the plan stands, without a claim
            why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            self._claims_note(_("cannot write in {directory} ({why})").format(directory=board.directory, why=why))

    def _claims_note(self, why: str) -> None:
        """Say once per session that claims are not used, and why (``auto`` chooses without them)."""
        if not self._claims_note_shown:
            self._claims_note_shown = True
            print(
                "jupyter_gpu: " + _("GPU claims are not used: {why}; auto chooses without them.").format(why=why),
                file=sys.stderr,
            )
