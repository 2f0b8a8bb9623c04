"""``%gpu_select``, ``%gpu_limit``, ``%gpu_status``, ``%gpu_threads`` and ``%gpu_free``: the kernel's GPU plan.

Load with ``%load_ext jupyter_gpu``. The magics configure TensorFlow/Keras, PyTorch and JAX
*before they first use a GPU* and never import them: a framework not imported yet is configured
the moment it is imported; one imported but not initialized is configured now; one that already
initialized the GPU cannot be changed, and the magic then changes nothing and warns
(:class:`jupyter_gpu.GPUAlreadyInitializedWarning`): restart the kernel.

Caps are cooperative: they bind each framework's allocator, not the driver. Code that ignores them
(another library, a raw CUDA call) is not stopped; hard isolation is MIG or one GPU per container.

Admins set defaults for every kernel with traitlets config (``ipython_config.py``, ``%config``) or
environment variables in the spawner (see :class:`GpuMagics`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Unicode, default, observe

from ..core.errors import GPUAlreadyInitializedWarning
from ..core.text import display_text
from ..core.units import format_bytes, format_duration

if TYPE_CHECKING:
    from ..plan import GpuPlan

# jupyter_gpu.plan and jupyter_gpu.frameworks are imported inside the functions that use them, so
# %load_ext jupyter_gpu stays cheap in a kernel that never runs a GPU magic.

__all__ = ["GpuMagics", "register", "unregister"]

_TRUE = {"1", "true", "yes", "on"}
_NAME_CHARS = 40
_COOPERATIVE = (
    "Caps are cooperative: they bind the framework's allocator, not the driver "
    "(MIG or one GPU per container for hard isolation)."
)


_CHILDREN = (
    "Programs this kernel starts (subprocess, multiprocessing with spawn) inherit the GPU selection, "
    "growth and JAX's share (environment variables), not the TensorFlow and PyTorch caps (calls made in "
    "this kernel): cap them in the program itself."
)

_nvml_started = False


def take_snapshot() -> Any:
    """The GPUs now (NVML is imported on first use, so loading the extension stays cheap)."""
    global _nvml_started
    from ..sources.nvml import snapshot

    taken = snapshot()
    _nvml_started = True
    return taken


def _current_user() -> str | None:
    from ..sources.processes import current_user

    return current_user()


def _loosens_admin_ceiling(requested: str) -> str | None:
    """Why ``requested`` may not replace the ceiling an administrator set in JUPYTER_GPU_MAX_LIMIT.

    From inside the kernel the ceiling may only be tightened: a value is refused when it is empty
    or larger than the administrator's on any GPU. None when it is acceptable.
    """
    from ..plan import PlanError, parse_size

    admin = _admin_ceiling()
    if not admin or requested == admin:
        return None
    why = f"the administrator's ceiling JUPYTER_GPU_MAX_LIMIT={admin} can only be tightened from the kernel"
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


def _admin_ceiling() -> str:
    """JUPYTER_GPU_MAX_LIMIT as the kernel process was started with it (code in the kernel that
    changes ``os.environ`` does not change it)."""
    plan = sys.modules.get("jupyter_gpu.plan")
    if plan is not None:  # the same function (tests replace it there)
        return plan.environment_at_process_start().get("JUPYTER_GPU_MAX_LIMIT", "").strip()
    from ..core.environ import environment_at_process_start

    return environment_at_process_start().get("JUPYTER_GPU_MAX_LIMIT", "").strip()


def parse(magic: Any, line: str) -> Any:
    """``parse_argstring`` with every malformed line (an unclosed quote too) as a one-line UsageError."""
    try:
        return parse_argstring(magic, line)
    except UsageError:
        raise
    except (ValueError, OverflowError) as error:
        raise UsageError(f"cannot read the arguments {line.strip()!r}: {error}") from None


def _shown(value: str | None, missing: str = "?") -> str:
    """A name from the driver or another user, as the magics print it (bidi-safe, at most 40 characters)."""
    return display_text(value, _NAME_CHARS, missing=missing)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


@magics_class
class GpuMagics(Magics):
    """The kernel's GPU plan as magics. Configurable (``c.GpuMagics.<name>`` or ``%config``).

    Each default can also come from an environment variable, so a JupyterHub spawner can set it:
    ``JUPYTER_GPU_DEFAULT_SELECT``, ``JUPYTER_GPU_GROWTH``, ``JUPYTER_GPU_DEFAULT_LIMIT``,
    ``JUPYTER_GPU_MAX_LIMIT``. The defaults are applied when the extension loads.
    """

    default_select = Unicode(
        help="Selection applied when the extension loads, as for %gpu_select (e.g. 'auto:1'); "
        "'' selects nothing. Env: JUPYTER_GPU_DEFAULT_SELECT.",
    ).tag(config=True)
    growth = Bool(
        help="Memory growth (allocate GPU memory on demand) by default. Env: JUPYTER_GPU_GROWTH=1.",
    ).tag(config=True)
    default_limit = Unicode(
        help="Memory limit applied when the extension loads, as for %gpu_limit (e.g. '8GiB' or '25%'). "
        "Cooperative: it binds the frameworks' allocators, not the driver. Env: JUPYTER_GPU_DEFAULT_LIMIT.",
    ).tag(config=True)
    max_limit = Unicode(
        help="Admin ceiling: the most GPU memory per GPU a user may ask for with %gpu_limit, and the limit "
        "when the user sets none (e.g. '16GiB' or '50%'). Cooperative, like every cap: hard isolation "
        "needs MIG or one GPU per container. Env: JUPYTER_GPU_MAX_LIMIT.",
    ).tag(config=True)

    explain_oom = Bool(
        True,
        help="After a cell fails with a GPU out-of-memory error (TensorFlow, PyTorch, JAX), print under the "
        "traceback which GPU ran out, who holds it and what to do next. False turns it off. "
        "Env: JUPYTER_GPU_EXPLAIN_OOM=0.",
    ).tag(config=True)

    claims = Bool(
        True,
        help="auto leaves a short-lived claim on the GPUs it chooses (a file in claims_dir) and counts other "
        "kernels' claims as load, so kernels started at once spread over idle GPUs. Never required: an "
        "unusable directory means auto works without claims. Env: JUPYTER_GPU_CLAIMS=0 turns them off.",
    ).tag(config=True)
    claims_dir = Unicode(
        help="Directory of the host-wide GPU claims: every user must be able to write it, and it must have "
        "the sticky bit when shared (default /tmp). Env: JUPYTER_GPU_CLAIMS_DIR.",
    ).tag(config=True)
    claim_ttl_s = Float(
        600.0,
        help="Seconds after which a claim no longer counts (it also stops counting once its process is gone or "
        "shows up in NVML on that GPU).",
    ).tag(config=True)

    @default("claims")
    def _claims_from_env(self) -> bool:
        return os.environ.get("JUPYTER_GPU_CLAIMS", "").strip().lower() not in {"0", "false", "no", "off"}

    @default("claims_dir")
    def _claims_dir_from_env(self) -> str:
        return os.environ.get("JUPYTER_GPU_CLAIMS_DIR", "").strip() or "/tmp"

    @default("explain_oom")
    def _explain_oom_from_env(self) -> bool:
        return os.environ.get("JUPYTER_GPU_EXPLAIN_OOM", "").strip().lower() not in {"0", "false", "no", "off"}

    @default("default_select")
    def _default_select_from_env(self) -> str:
        return os.environ.get("JUPYTER_GPU_DEFAULT_SELECT", "").strip()

    @default("growth")
    def _growth_from_env(self) -> bool:
        return _env_flag("JUPYTER_GPU_GROWTH")

    @default("default_limit")
    def _default_limit_from_env(self) -> str:
        return os.environ.get("JUPYTER_GPU_DEFAULT_LIMIT", "").strip()

    @default("max_limit")
    def _max_limit_from_env(self) -> str:
        return _admin_ceiling()

    @observe("max_limit")
    def _ceiling_changed(self, change: dict[str, Any]) -> None:
        refusal = _loosens_admin_ceiling(change["new"].strip())
        if refusal:
            print(f"jupyter_gpu: max_limit stays {change['old']!r}: {refusal}", file=sys.stderr)
            self.max_limit = change["old"]
            if self.shell is not None and "GpuMagics" in self.shell.config:
                self.shell.config.GpuMagics.max_limit = change["old"]  # a %reload_ext keeps the ceiling too
            return
        try:
            self._change("%config", max_limit=change["new"].strip() or None)
        except UsageError as error:
            print(f"jupyter_gpu: max_limit {change['new']!r} is not applied yet: {error}", file=sys.stderr)

    # -- applying changes (all-or-nothing)

    def enforce_admin_ceiling(self) -> None:
        """A configured ``max_limit`` looser than the admin's JUPYTER_GPU_MAX_LIMIT is replaced by it."""
        admin = _admin_ceiling()
        if admin and self.max_limit.strip() != admin and _loosens_admin_ceiling(self.max_limit.strip()):
            print(
                f"jupyter_gpu: max_limit {self.max_limit!r} is looser than JUPYTER_GPU_MAX_LIMIT={admin}, which "
                "the kernel was started with; the ceiling stays {admin}.".replace("{admin}", admin),
                file=sys.stderr,
            )
            with self.hold_trait_notifications():
                self.set_trait("max_limit", admin)

    def apply_defaults(self) -> None:
        """Apply the configured defaults (called when the extension loads); problems go to stderr.

        Only while the kernel has no plan: ``%reload_ext jupyter_gpu`` keeps the plan in force (the
        defaults were applied at the first load, or the user chose since) instead of replacing it."""
        if not (self.default_select or self.default_limit or self.growth or self.max_limit):
            return  # nothing configured: loading touches neither NVML nor the environment
        frameworks = sys.modules.get("jupyter_gpu.frameworks")
        if frameworks is not None and frameworks.plan_active():
            return  # %reload_ext: the kernel's plan (the defaults of the first load, or the user's own) stays
        from ..plan import current_plan

        changes: dict[str, Any] = {"growth": self.growth or current_plan().request.growth}
        if self.default_select:
            changes["selection"] = self.default_select
        if self.default_limit:
            changes["limits"] = tuple(self.default_limit.split())
        try:
            plan = self._change("%load_ext jupyter_gpu", **changes)
        except UsageError as error:
            print(f"jupyter_gpu: the configured defaults were not applied: {error}", file=sys.stderr)
            return
        if plan is not None:
            print(f"jupyter_gpu: {_summary(plan)}")

    def _change(self, magic: str, require_idle: bool = False, hints: bool = True, **changes: Any) -> GpuPlan | None:
        """Rebuild the plan with ``changes``; apply it, or warn and change nothing. Returns the new plan.

        An ``auto`` selection is chosen and claimed under the claims lock (:mod:`jupyter_gpu.sources.claims`),
        counting other kernels' claims as load."""
        auto = str(changes.get("selection") or "").strip().lower().startswith("auto")
        board = self._claim_board() if auto else None
        warm = None
        if board is not None and not _nvml_started:
            # NVML's start (tens of ms) happens before the claims lock, not while holding it
            warm = (take_snapshot(), _clock())
        with board.locked() if board is not None else contextlib.nullcontext(False):
            fresh = warm[0] if warm is not None and _clock() - warm[1] < 0.5 else None
            plan = self._change_locked(magic, board, require_idle, fresh, hints, **changes)
            if plan is not None and "selection" in changes:
                if board is not None:
                    self._claim(board, plan)
                elif self._board is not None:
                    self._board.release()  # a selection that is not auto (or claims off): no claim
        return plan

    def _change_locked(
        self, magic: str, board: Any, require_idle: bool, fresh: Any, hints: bool, **changes: Any
    ) -> GpuPlan | None:
        from .. import frameworks
        from ..plan import NoGpuFits, PlanError, build_plan, current_plan, kernel_start_fence

        old = current_plan()
        changes.setdefault("max_limit", self.max_limit.strip() or None)
        request = replace(old.request, **changes)
        snapshot = take_snapshot() if fresh is None else fresh
        self._last_snapshot = snapshot
        frameworks.remember_gpus(snapshot.gpus)
        changed = frameworks.selection_env_changed()
        if changed and "selection" not in changes and gpu_settings_change(old.request, request):
            raise UsageError(changed.replace("Run %gpu_select", f"{magic} changes nothing; run %gpu_select"))
        claims = board.load(snapshot.gpus) if board is not None and snapshot.nvml_available else {}
        self._last_claims = claims
        try:
            new = build_plan(
                request,
                snapshot,
                kernel_start_fence(),
                own_user=_current_user(),
                claims=claims,
                require_idle=require_idle,
            )
        except NoGpuFits as error:
            usage = UsageError(str(error) + (_fit_hints(snapshot, request) if hints else ""))
            usage.no_gpu_fits = True  # type: ignore[attr-defined]  # %gpu_select --wait waits on this one
            raise usage from None
        except PlanError as error:
            raise UsageError(str(error)) from None
        late = frameworks.too_late(old, new, snapshot)
        if late is not None:
            _warn_already_initialized(magic, *late)
            # Refused changes add up (select, then limit) into the plan a restart applies.
            self._pending_request = replace(self._pending_request or old.request, **changes)
            offer_restart(self._pending_request, f"{late[0]} already uses the GPU in this kernel")
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
            raise UsageError(str(error)) from None
        if replaced:
            print(f"jupyter_gpu: {magic} replaces {replaced} set by code in this kernel.", file=sys.stderr)
        if settings_replaced:
            print(f"jupyter_gpu: {magic} replaces {', '.join(settings_replaced)}: the plan needs it.", file=sys.stderr)
        from ..core.errors import GPUPlanMismatchWarning, warn

        for message in frameworks.env_conflict_messages():
            warn(message, GPUPlanMismatchWarning)
        if self._pending_request is not None:
            self._pending_request = replace(self._pending_request, **changes)
        return new

    _pending_request: Any = None  # the last plan refused as too late (what %gpu_restart applies)

    @line_magic
    def gpu_restart(self, line: str = "") -> None:
        """Restart the kernel and apply the GPU plan in the new kernel before anything else runs.

        In JupyterLab and Notebook 7 (with jupyter_gpu's extension) the frontend restarts the
        kernel through its own session API, runs the plan's magics silently in the new kernel and
        confirms in a notification; the variables of this kernel are lost, as with any restart.
        The plan is the last one refused as too late (after a ``GPUAlreadyInitializedWarning``),
        else the current one. Where the frontend cannot do it, the magic prints what to run after
        restarting by hand.

        Example::

            %gpu_select 1 --growth    # warns: PyTorch already initialized the GPU
            %gpu_restart              # new kernel on GPU 1 with growth
        """
        from ..plan import current_plan

        if line.strip():
            raise UsageError("%gpu_restart takes no arguments; it applies the last refused (or the current) plan")
        request = self._pending_request or current_plan().request
        offer_restart(request, "%gpu_restart", automatic=True)

    # -- claims: kernels choosing at once spread over the idle GPUs

    _board: Any = None
    _claims_note_shown = False
    _last_snapshot: Any = None
    _last_claims: dict[int | str, int] = {}

    def _claim_board(self) -> Any:
        """The claims board, or None when claims are off or their directory cannot be used (said once)."""
        if not self.claims:
            return None
        from ..sources.claims import ClaimBoard

        if (
            self._board is None
            or str(self._board.directory) != self.claims_dir
            or self._board.ttl_s != self.claim_ttl_s
        ):
            if self._board is not None:
                self._board.release()
            self._board = ClaimBoard(self.claims_dir, ttl_s=self.claim_ttl_s)
            import atexit

            atexit.register(self._board.release)
        if self._board.problem is not None:
            if not self._claims_note_shown:
                self._claims_note_shown = True
                print(
                    f"jupyter_gpu: GPU claims are not used: {self._board.problem}; auto chooses without them.",
                    file=sys.stderr,
                )
            return None
        return self._board

    def _claim(self, board: Any, plan: GpuPlan) -> None:
        """Claim the GPUs ``auto`` chose (replacing this kernel's earlier claims)."""
        uuids = [gpu.uuid for gpu in plan.gpus if gpu.index in plan.selected_indices and gpu.uuid]
        try:
            board.claim(uuids)
        except OSError as error:
            if not self._claims_note_shown:
                self._claims_note_shown = True
                print(
                    f"jupyter_gpu: GPU claims are not used: cannot write in {board.directory} ({error.strerror}); "
                    "auto chooses without them.",
                    file=sys.stderr,
                )

    # -- the magics

    @magic_arguments()
    @argument(
        "spec",
        nargs="?",
        help="GPUs: indices like 0 or 1,3 (as nvidia-smi numbers them), UUIDs "
        "(unique prefixes), a MIG slice (0:1 = GPU 0's MIG device 1, or its MIG-… UUID), auto, auto:N, "
        "all or none. Without SPEC: list the GPUs.",
    )
    @argument("--growth", action="store_true", help="allocate GPU memory on demand instead of up front")
    @argument("--no-growth", action="store_true", help="turn memory growth off again")
    @argument("--min-free", metavar="SIZE", help="with auto: only GPUs with at least SIZE free (e.g. 8GiB)")
    @argument(
        "--wait",
        metavar="DURATION",
        help="with auto: wait up to DURATION (90s, 30m, 2h; a plain number is "
        "seconds) until the GPUs fit, showing who holds them; interrupt to stop (nothing changes)",
    )
    @line_magic
    def gpu_select(self, line: str) -> None:
        """Choose the GPUs this kernel's TensorFlow/Keras, PyTorch and JAX will use.

        Run it before the framework first uses the GPU (before the first ``tf.constant``, model
        or ``torch.cuda`` call); importing the framework first is fine. GPUs are numbered as
        ``nvidia-smi`` and ``%gpu_monitor`` number them (PCI bus order): the magic sets
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``CUDA_VISIBLE_DEVICES`` and prints how each framework
        will name them (inside the kernel they are numbered from 0 in the order given).

        ``auto:N`` picks the N idlest GPUs: never one with less free memory than ``--min-free``;
        GPUs without other users' processes first; then the fewest claims of other kernels (kernels
        that chose a GPU and have not allocated yet); then most free memory, then lowest utilization.
        It leaves a short-lived claim on what it chose (see ``GpuMagics.claims``), so kernels
        started at once spread over the idle GPUs. When nothing fits it says what would (``GPU 2
        would fit if your idle kernel x.ipynb (22 GiB) were shut down``).

        ``--wait 30m`` waits until N GPUs fit: with ``--min-free``, N GPUs with that much free; without
        it, N GPUs without other users' work or claims. A progress line shows who holds the GPUs and
        how long it has waited; NVML is read at most once a second. Interrupt the kernel to stop
        waiting: nothing is changed. When the time is up, nothing is changed either.

        ``--growth`` allocates memory on demand: TensorFlow ``TF_FORCE_GPU_ALLOW_GROWTH=true``,
        JAX ``XLA_PYTHON_CLIENT_PREALLOCATE=false``, PyTorch ``expandable_segments:True``.

        MIG slices (A100/H100 split into isolated instances, listed by ``jupyter-gpu status`` and the
        monitors as ``0:0``, ``0:1``, …): ``%gpu_select 0:1`` or ``%gpu_select MIG-5e3d`` sets
        ``CUDA_VISIBLE_DEVICES`` to the slice's MIG UUID. CUDA shows a process at most one MIG device,
        so one slice is selected alone (several slices, or a slice with a GPU, are refused) and a GPU
        in MIG mode cannot be selected whole. A MIG UUID in the kernel's start ``CUDA_VISIBLE_DEVICES``
        (a spawner's slice) is the fence; when only slices can be selected, ``auto`` takes the idlest
        slice and ``all`` the assigned one. ``%gpu_limit`` percentages are then of the slice's memory.
        A slice's memory is isolated by the hardware; utilization is not measured per slice.

        Selecting 2+ GPUs does not parallelize anything by itself: use
        ``tf.distribute.MirroredStrategy()`` (Keras: build and compile the model in its scope),
        PyTorch ``DistributedDataParallel``, or JAX sharding.

        GPUs an admin assigned to the kernel (``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES``
        at kernel start) are a fence: GPUs outside it are refused. If a framework already
        initialized the GPU, nothing changes and a ``GPUAlreadyInitializedWarning`` says what is
        in effect: restart the kernel.

        If something already listed the GPUs (``tf.config.list_physical_devices``,
        ``torch.cuda.is_available()``), CUDA fixed the visible GPUs and their order then. The magic
        maps them from facts (the ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` of that moment,
        the device names TensorFlow reports), narrows TensorFlow, and says that PyTorch and JAX can
        no longer be narrowed; where the mapping cannot be known it refuses with the reason.
        Code that changes ``CUDA_VISIBLE_DEVICES`` after this magic gets a
        ``GPUPlanMismatchWarning``; running ``%gpu_select`` again replaces that value (and says so).

        Examples::

            %gpu_select               # list the GPUs and the current selection
            %gpu_select 1             # GPU 1 only
            %gpu_select 0,2 --growth  # GPUs 0 and 2, memory on demand
            %gpu_select GPU-8f3c      # by UUID prefix
            %gpu_select 0:1           # MIG slice 1 of GPU 0 (or its MIG UUID)
            %gpu_select auto:2 --min-free 8GiB
            %gpu_select auto:1 --min-free 20GiB --wait 30m
            %gpu_select all
            %gpu_select none          # CPU only
        """
        from ..plan import current_plan

        args = parse(self.gpu_select, line)
        if args.growth and args.no_growth:
            raise UsageError("--growth and --no-growth conflict; give one of them")
        changes: dict[str, Any] = {}
        if args.growth or args.no_growth:
            changes["growth"] = bool(args.growth)
        if args.min_free is not None and args.spec is None:
            raise UsageError("--min-free needs a SPEC of auto or auto:N, e.g. %gpu_select auto --min-free 8GiB")
        if args.spec is not None:
            changes["selection"] = args.spec
            changes["min_free"] = args.min_free
        if args.wait is not None and not (args.spec or "").strip().lower().startswith("auto"):
            raise UsageError("--wait needs a SPEC of auto or auto:N, e.g. %gpu_select auto:1 --wait 30m")
        if not changes:
            print(_gpu_listing(current_plan()))
            return
        if args.wait is not None:
            plan = self._wait_and_select(args.spec, parse_duration(args.wait), changes)
        else:
            plan = self._change("%gpu_select", **changes)
        if plan is not None:
            print(_selection_report(plan))

    def _wait_and_select(self, spec: str, wait_s: float, changes: dict[str, Any]) -> GpuPlan | None:
        """``%gpu_select auto:N --wait``: try once a second until the GPUs fit, the time is up, or an
        interrupt; a live line says who holds the GPUs. Nothing changes until the selection is made."""
        from ..plan import parse_size

        if changes.get("min_free"):  # a malformed size is reported before any waiting
            try:
                parse_size(changes["min_free"])
            except ValueError as error:
                raise UsageError(str(error)) from None
        started = _clock()
        handle = None
        while True:
            try:
                last = _clock() - started + POLL_INTERVAL_S >= wait_s  # the "would fit if" hints only then
                plan = self._change("%gpu_select", require_idle=not changes.get("min_free"), hints=last, **changes)
            except UsageError as error:
                if not getattr(error, "no_gpu_fits", False):
                    raise
                waited = _clock() - started
                if waited >= wait_s:
                    raise UsageError(
                        f"no GPUs fit after waiting {format_duration(waited)}: {error}; nothing was changed"
                    ) from None
                line = _waiting_line(
                    spec, changes.get("min_free"), self._last_snapshot, self._last_claims, waited, wait_s
                )
                handle = _show_progress(handle, line)
                try:
                    _sleep(POLL_INTERVAL_S)
                except KeyboardInterrupt:
                    raise UsageError(
                        f"stopped waiting for {spec} after {format_duration(_clock() - started)} "
                        "(interrupted); nothing was changed"
                    ) from None
                continue
            if handle is not None:
                waited = _clock() - started
                _show_progress(handle, f"Waited {format_duration(waited)} for {spec}: the GPUs fit now.")
            return plan

    @magic_arguments()
    @argument(
        "sizes",
        nargs="*",
        help="a size per selected GPU: 2048 (MiB), 2GiB, 1.5G or 30%% (of that GPU); "
        "several sizes split each GPU into that many logical GPUs; 'off' removes the limit",
    )
    @line_magic
    def gpu_limit(self, line: str) -> None:
        """Cap the GPU memory this kernel's frameworks may use on each selected GPU.

        ``SIZE`` is ``2048`` (MiB), ``512MiB``, ``2GiB``, ``1.5G`` (binary units, as nvidia-smi) or
        ``30%`` of that GPU's memory. Without a selection it caps every GPU the kernel may use.
        Several sizes split each GPU into that many logical GPUs in TensorFlow (develop multi-GPU
        code on one card); PyTorch and JAX get the sum.

        - TensorFlow: logical devices with ``memory_limit`` (with ``--growth`` too, via
          ``TF_FORCE_GPU_ALLOW_GROWTH``, so both really hold);
        - PyTorch: ``torch.cuda.set_per_process_memory_fraction`` queued for PyTorch's own lazy
          CUDA initialization (CUDA is never started early);
        - JAX: ``XLA_CLIENT_MEM_FRACTION`` (one share for all GPUs: the smallest).

        Caps are cooperative: they bind the framework's allocator, not the driver; memory beyond the
        cap raises out-of-memory in the framework. For hard isolation use MIG or one GPU per
        container. An admin ceiling (``max_limit``) cannot be exceeded nor switched off.

        Programs the kernel starts (``subprocess.run([sys.executable, "train.py"])``,
        ``multiprocessing`` with ``spawn``) inherit the environment: the selection, growth and JAX's
        share hold there, the TensorFlow and PyTorch caps (calls in this kernel) do not.

        Examples::

            %gpu_limit                # show the limit
            %gpu_limit 4GiB           # 4 GiB per selected GPU
            %gpu_limit 30%            # 30 % of each selected GPU
            %gpu_limit 2048 2048      # two logical GPUs of 2 GiB each (TensorFlow)
            %gpu_limit off
        """
        from ..plan import PlanError, current_plan, parse_size

        sizes = parse(self.gpu_limit, line).sizes
        if not sizes:
            print(_limit_report(current_plan()))
            return
        if any(size.lower() == "off" for size in sizes):
            if len(sizes) > 1:
                raise UsageError("'off' cannot be combined with sizes; give either sizes or off")
            sizes = []
        for size in sizes:  # the first malformed size is reported before any GPU is looked at
            try:
                parse_size(size)
            except PlanError as error:
                raise UsageError(str(error)) from None
        if sizes and current_plan().selected_indices == ():
            raise UsageError(
                "a memory limit needs GPUs, and the selection is none (CPU only); "
                "select GPUs first, e.g. %gpu_select auto"
            )
        plan = self._change("%gpu_limit", limits=tuple(sizes))
        if plan is not None:
            print(_limit_report(plan))

    @magic_arguments()
    @argument("--intra", type=int, metavar="N", help="threads inside one operation (0: framework default)")
    @argument("--inter", type=int, metavar="N", help="operations run in parallel (0: framework default)")
    @argument(
        "--soft-placement", choices=["on", "off"], help="TensorFlow: fall back to the CPU for ops without a GPU kernel"
    )
    @argument("--log-placement", choices=["on", "off"], help="TensorFlow: log the device of every op")
    @line_magic
    def gpu_threads(self, line: str) -> None:
        """CPU threads and TensorFlow device placement for this kernel.

        ``--intra``/``--inter`` set TensorFlow's ``TF_NUM_INTRAOP_THREADS``/``TF_NUM_INTEROP_THREADS``
        (read when TensorFlow initializes: after that the magic warns and changes nothing) and
        PyTorch's ``torch.set_num_threads``/``torch.set_num_interop_threads``. JAX has no setting
        for its CPU threads. ``--soft-placement`` and ``--log-placement`` call
        ``tf.config.set_soft_device_placement`` and ``tf.debugging.set_log_device_placement``
        (any time). Like the other magics, it never imports a framework.

        Examples::

            %gpu_threads                          # show the settings
            %gpu_threads --intra 4 --inter 2
            %gpu_threads --soft-placement on --log-placement on
        """
        from ..plan import current_plan

        args = parse(self.gpu_threads, line)
        changes: dict[str, Any] = {}
        for name, value in (("intra_op_threads", args.intra), ("inter_op_threads", args.inter)):
            if value is not None:
                if value < 0 or value > 4096:
                    raise UsageError(
                        f"a number of threads must be 0 to 4096, not {value}; give 1 or more, "
                        "or 0 for the framework's default"
                    )
                changes[name] = value or None
        if args.soft_placement is not None:
            changes["soft_placement"] = args.soft_placement == "on"
        if args.log_placement is not None:
            changes["log_device_placement"] = args.log_placement == "on"
        if changes:
            plan = self._change("%gpu_threads", **changes)
            if plan is None:
                return
        print(_threads_report(current_plan()))

    @magic_arguments()
    @argument(
        "names",
        nargs="*",
        help="your variables to delete as well (e.g. model optimizer); no other variable of yours is touched",
    )
    @argument("--dry-run", action="store_true", help="list what would be dropped and released; change nothing")
    @line_magic
    def gpu_free(self, line: str) -> None:
        """Give GPU memory back without restarting the kernel.

        Drops what keeps framework arrays alive after an error or a finished experiment, then
        measures what came back:

        1. IPython's output cache (``Out``, ``_``, ``__``, ``___``, ``_N``);
        2. the last error's traceback (``sys.last_traceback``/``last_value``): the frames of a
           failed cell keep every local, tensors included;
        3. the variables you name (``%gpu_free model optimizer``), and no other of yours;
        4. ``gc.collect()``, then each framework that is *already imported and initialized* gives
           its cache back: PyTorch ``torch.cuda.empty_cache()``, Keras ``clear_session()``, JAX
           ``jax.clear_caches()``. No framework is imported or initialized by this magic.

        It reports per GPU what NVML shows this kernel holding before and after ("GPU 1: this
        kernel 9.8 GiB → 1.2 GiB"), each framework's own counters, the arrays that were freed (and
        those still referenced elsewhere), and the process's resident memory (CPU arrays).

        What cannot come back is said: TensorFlow never returns its memory pool to the driver (with
        or without growth; only a restart does), and JAX keeps its preallocated pool.

        Examples::

            %gpu_free --dry-run       # what would be dropped, nothing changed
            %gpu_free                 # output cache, last traceback, caches
            %gpu_free model optimizer # and these two variables
        """
        from . import free

        args = parse(self.gpu_free, line)
        ns = self.shell.user_ns
        for name in args.names:
            if not name.isidentifier():
                raise UsageError(f"{name!r} is not a variable name; give names like: %gpu_free model optimizer")
            if name in self.shell.user_ns_hidden or name.startswith("_"):
                raise UsageError(
                    f"{name!r} belongs to IPython; %gpu_free drops the output cache by itself, "
                    "name only your own variables"
                )
            if name not in ns:
                raise UsageError(f"there is no variable {name!r}; nothing was changed")
        if len(set(args.names)) != len(args.names):
            raise UsageError("a name is given twice; list each variable once")
        displayhook = self.shell.displayhook
        cache = dict(ns.get("_oh") or {})
        recent = [ns.get(key) for key in ("_", "__", "___") if ns.get(key) not in (None, "")]
        error, tb = free.last_error()
        frames = free.traceback_frames(tb)
        named = [ns[name] for name in args.names]
        dropped = []
        if cache or recent:
            dropped.append(
                f"IPython's output cache (Out: {len(cache)} entr{'y' if len(cache) == 1 else 'ies'}, _, __, ___)"
            )
        if tb is not None:
            dropped.append(
                f"the last error's traceback ({type(error).__name__}, {len(frames)} frame"
                f"{'' if len(frames) == 1 else 's'} and their locals)"
            )
        if args.names:
            dropped.append("your variable" + ("s " if len(args.names) > 1 else " ") + ", ".join(args.names))
        tracked = free.track([*cache.values(), *recent, *free.frame_values(frames), *named])
        del cache, recent, named, frames, error
        if args.dry_run:
            lines = [f"Would drop: {'; '.join(dropped) if dropped else 'nothing (no output cache, no last error)'}."]
            reachable = tracked.by_device()
            if reachable:
                lines.append(
                    "Framework arrays reachable from them: "
                    + ", ".join(
                        f"{framework} {format_bytes(size)} on {device}"
                        for (framework, device), size in reachable.items()
                    )
                    + " (freed unless referenced elsewhere)."
                )
            initialized: list[str] = []
            if any(module in sys.modules for module in _FRAMEWORK_MODULES):
                from .. import frameworks as adapters

                initialized = [f.name for f in adapters.FRAMEWORKS if f.state() is adapters.State.INITIALIZED]
            lines.append(
                f"Then gc.collect() and the release of {', '.join(initialized)}."
                if initialized
                else "Then gc.collect(); no framework has initialized a GPU, so none has a cache to release."
            )
            lines.append("Nothing was changed (--dry-run).")
            print("\n".join(lines))
            return
        before = free.measure()
        if displayhook.do_full_cache:
            displayhook.flush()
        for space in (ns, self.shell.user_ns_hidden):  # flush() leaves these when '_' is also a builtin
            for key in ("_", "__", "___"):
                if key in space:
                    space[key] = ""
        free.drop_last_error()
        result = self.shell.last_execution_result
        if result is not None and result.error_in_exec is not None:
            result.error_in_exec = None  # the failed cell's result keeps the error, and so its frames
        del result, tb
        for name in args.names:
            del ns[name]
        collected, releases = free.release()
        after = free.measure()
        lines = [
            f"Dropped: {'; '.join(dropped) if dropped else 'nothing to drop (no output cache, no last error)'}.",
            f"gc.collect(): {collected} objects.",
        ]
        for framework, called, note in releases:
            lines.append(f"{framework}: {called}: {note}.")
        lines += free.describe_change(before, after, tracked)
        print("\n".join(lines))

    @line_magic
    def gpu_status(self, line: str = "") -> None:
        """Show the kernel's GPU plan, each framework's state and the GPUs with this kernel's usage.

        The plan, threads and placement; for each framework: not imported (waiting for its
        import), imported, GPUs listed, or initialized, and what is actually in effect. "plan
        applied" only when the framework sees (or will see) what the plan says; otherwise "does
        NOT follow the plan" and why. For each visible GPU: memory used and
        free, utilization, and the memory NVML sees this kernel's process (PID) holding.

        Example::

            %gpu_status
        """
        from .. import frameworks
        from ..plan import current_plan, kernel_start_fence

        plan = current_plan()
        lines = [f"Plan: {_summary(plan)}"]
        fence = kernel_start_fence()
        if fence.active:
            lines.append(f"GPUs the kernel was started with (by the admin, spawner or kernelspec): {fence.describe()}")
        lines.append(_threads_report(plan))
        snapshot = take_snapshot()
        frameworks.remember_gpus(snapshot.gpus)
        lines.append("Frameworks:")
        lines += [f"  {framework.name}: {text}" for framework, text in frameworks.framework_statuses(snapshot.gpus)]
        lines.append(_gpu_listing(plan, heading="GPUs:", snapshot=snapshot))
        print("\n".join(lines))


# -- waiting for GPUs ------------------------------------------------------------------------------

POLL_INTERVAL_S = 1.0  # %gpu_select --wait reads NVML at most once a second
_clock = __import__("time").monotonic
_sleep = __import__("time").sleep
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``90``/``90s``, ``30m``, ``1.5h`` as seconds; a one-line UsageError otherwise."""
    import re

    match = re.fullmatch(r"\s*([0-9]{1,7}(?:\.[0-9]{1,3})?)\s*(s|sec|m|min|h)?\s*", text, re.IGNORECASE)
    if match is None:
        raise UsageError(f"--wait {text!r} is not a duration; give e.g. 90s, 30m or 2h (a plain number is seconds)")
    seconds = float(match[1]) * _DURATION_UNITS[(match[2] or "").lower()]
    if not 0 < seconds <= 7 * 86400:
        raise UsageError(f"--wait {text!r} must be more than 0 and at most 7 days")
    return seconds


def _waiting_line(
    spec: str, min_free: str | None, snapshot: Any, claims: dict[int, int], waited: float, wait_s: float
) -> str:
    """One line: what is awaited, who holds each GPU now, how long it has waited."""
    want = f"{spec} with at least {min_free} free" if min_free else f"{spec} without other users' work"
    parts = []
    own = os.getpid()
    me = _current_user()
    for gpu in getattr(snapshot, "gpus", ()):
        holders: dict[str, int] = {}
        for process in gpu.processes:
            if process.pid == own or process.type == "graphics":
                continue
            who = "you" if me is not None and process.user == me else _shown(process.user, f"PID {process.pid}")
            holders[who] = holders.get(who, 0) + (process.memory or 0)
        who = ", ".join(f"{name} {format_bytes(size)}" for name, size in holders.items())
        claimed = f", {claims[gpu.index]} claim{'s' if claims[gpu.index] > 1 else ''}" if claims.get(gpu.index) else ""
        parts.append(f"GPU {gpu.index}: {format_bytes(gpu.memory_free)} free{'; ' + who if who else ''}{claimed}")
    gpus = " | ".join(parts) or "NVML shows no GPU"
    return (
        f"Waiting for {want} — {gpus} — waited {format_duration(waited)} of {format_duration(wait_s)} "
        "(interrupt the kernel to stop; nothing changes until the GPUs fit)"
    )


def _show_progress(handle: Any, text: str) -> Any:
    """Show ``text`` in one output line that is replaced at each update (printed again outside Jupyter)."""
    from IPython.display import Pretty, display

    if handle is None:
        return display(Pretty(text), display_id=True)
    handle.update(Pretty(text))
    return handle


# -- reports --------------------------------------------------------------------------------------


def _fit_hints(snapshot: Any, request: Any) -> str:
    """``"; GPU 2 would fit if your idle kernel x.ipynb (22 GiB) were shut down"`` where this
    user's own processes are all that keep a GPU from qualifying ("" when none)."""
    try:
        from ..plan import fit_hints, parse_size

        min_free = parse_size(request.min_free).resolve(None) if request.min_free else 0
        if not min_free or not snapshot.nvml_available:
            return ""
        from ..sources.peers import find_peers

        kernels = {}
        for pid, peer in find_peers().by_pid.items():
            if peer.notebook:
                idle = "idle " if peer.idle or (peer.idle_s or 0) >= 600 else ""
                kernels[pid] = f"{idle}kernel {_shown(peer.notebook)}"
        hints = fit_hints(snapshot.gpus, min_free, os.getpid(), _current_user(), kernels)
    except Exception:
        return ""
    return "".join(f"; {hint}" for hint in hints[:3])


def gpu_settings_change(old: Any, new: Any) -> bool:
    """Whether a request change touches the GPU settings (not only threads or placement)."""
    keys = ("selection", "min_free", "limits", "growth", "max_limit")
    return any(getattr(old, key) != getattr(new, key) for key in keys)


def _replaced_by_hand() -> str:
    from ..core.visibility import SELECTION_KEYS

    values = [f"{key}={os.environ[key]!r}" if key in os.environ else f"{key} (unset)" for key in SELECTION_KEYS]
    return " and ".join(values)


def _summary(plan: GpuPlan) -> str:
    request = plan.request
    if plan.selected_indices is None:
        selection = "no selection (the frameworks see every GPU the kernel may use)"
    elif not plan.selected_indices:
        selection = "CPU only (no GPU)"
    elif plan.selected_slice is not None:
        selection = f"MIG slice {_shown(plan.selected_slice)} of GPU {plan.selected_indices[0]}"
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


def _labels(plan: GpuPlan) -> tuple[dict[int, str], list[str]]:
    """How each framework will name each planned GPU (from :mod:`jupyter_gpu.core.visibility`), and a
    line for each framework that will not follow the plan."""
    from .. import frameworks

    gpus = frameworks.known_gpus()
    labels: dict[int, list[str]] = {index: [] for index in frameworks.visible_order(plan)}
    notes = []
    for framework in frameworks.FRAMEWORKS:
        problem = frameworks.planned_devices(framework, plan, gpus)[1]
        if problem is not None:
            notes.append(
                f"{framework.name} will NOT follow this: {problem}; restart the kernel to apply the plan "
                f"to {framework.name}."
            )
            continue
        for index, label in framework.device_labels(plan, gpus).items():
            labels.setdefault(index, []).append(f"{framework.name} {label}")
    return {index: ", ".join(names) or "no framework" for index, names in labels.items()}, notes


def _selection_report(plan: GpuPlan) -> str:
    notes: list[str] = []
    if plan.selected_indices == ():
        lines = ["No GPU selected: TensorFlow, PyTorch and JAX will run on the CPU only."]
    elif plan.selected_indices is None:
        lines = [f"No selection: {_summary(plan)}"]
    else:
        labels, notes = _labels(plan)
        lines = []
        why = _auto_reasons(plan)
        for index in plan.selected_indices:
            gpu = plan.gpu(index)
            about = (
                ""
                if gpu is None or gpu.memory_free is None
                else f" ({_shown(gpu.name.removeprefix('NVIDIA '))}, {format_bytes(gpu.memory_free)} free)"
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
        lines.append(_limit_report(plan))
    lines.append(_where_applied())
    return "\n".join(lines)


def _auto_reasons(plan: GpuPlan) -> dict[int, str]:
    """Why ``auto`` chose each GPU, e.g. ``": no other users, 46.8 GiB free, 3 % busy"``."""
    if not (plan.request.selection or "").lower().startswith("auto"):
        return {}
    from .. import frameworks
    from ..plan import other_users

    reasons = {}
    by_index = {gpu.index: gpu for gpu in frameworks.known_gpus()}
    for index in plan.selected_indices or ():
        gpu = by_index.get(index)
        if gpu is None or not hasattr(gpu, "processes"):
            continue
        users = other_users(gpu, os.getpid(), _current_user())
        who = f"used by {', '.join(users)}" if users else "no other users"
        busy = "" if gpu.utilization is None else f", {gpu.utilization} % busy"
        reasons[index] = f"; chosen by auto: {who}, {format_bytes(gpu.memory_free)} free{busy}"
    return reasons


def _limit_report(plan: GpuPlan) -> str:
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
            lines.append(f"GPU {index}: at most {format_bytes(sizes[0])}{of}")
        if gpu and gpu.memory_free is not None and sum(sizes) > gpu.memory_free:
            lines.append(
                f"  note: only {format_bytes(gpu.memory_free)} of GPU {index} is free now{_holders(index)}; "
                "the framework runs out of memory before it reaches the cap"
            )
    if plan.limit_from_ceiling:
        lines.append(f"(the admin ceiling max_limit={plan.request.max_limit} applies)")
    lines.append(_COOPERATIVE)
    lines.append(_CHILDREN)
    return "Memory limit:\n  " + "\n  ".join(lines)


def _holders(index: int) -> str:
    from .. import frameworks

    gpu = next((gpu for gpu in frameworks.known_gpus() if gpu.index == index), None)
    processes = getattr(gpu, "processes", ())
    held: dict[str, int] = {}
    for process in processes:
        who = "this kernel" if process.pid == os.getpid() else _shown(process.user, f"PID {process.pid}")
        held[who] = held.get(who, 0) + (process.memory or 0)
    if not held:
        return ""
    return " (held by " + ", ".join(f"{who} {format_bytes(size)}" for who, size in held.items()) + ")"


def _threads_report(plan: GpuPlan) -> str:
    request = plan.request

    def shown(value: object) -> str:
        return (
            "framework default"
            if value is None
            else ("on" if value is True else "off" if value is False else str(value))
        )

    return (
        f"Threads: intra-op {shown(request.intra_op_threads)}, inter-op {shown(request.inter_op_threads)}; "
        f"TensorFlow soft placement {shown(request.soft_placement)}, "
        f"device-placement logging {shown(request.log_device_placement)}."
    )


def _where_applied() -> str:
    from .. import frameworks

    now, later = [], []
    for framework in frameworks.FRAMEWORKS:
        (later if framework.state() is frameworks.State.NOT_IMPORTED else now).append(framework.name)
    parts = []
    if now:
        parts.append(f"Applied now to {', '.join(now)}")
    if later:
        parts.append(f"applied to {', '.join(later)} when imported")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _gpu_listing(plan: GpuPlan, heading: str = "GPUs this kernel may use:", snapshot: Any = None) -> str:
    from ..plan import kernel_start_fence

    snapshot = take_snapshot() if snapshot is None else snapshot
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
        others = sorted({_shown(p.user) for p in gpu.processes if p.pid != own})
        util = "" if gpu.utilization is None else f", {gpu.utilization}% busy"
        lines.append(
            f" {mark} GPU {gpu.index} {_shown(gpu.name)} ({_shown(gpu.uuid[:12])}…): "
            f"{format_bytes(gpu.memory_used)} used, "
            f"{format_bytes(gpu.memory_free)} free of {format_bytes(gpu.memory_total)}{util}"
            f"{f'; this kernel {format_bytes(mine)}' if mine else ''}"
            f"{'; used by ' + ', '.join(others) if others else ''}"
        )
        fenced_slice = kernel_start_fence().allowed_slice(snapshot.gpus)
        for slice_ in gpu.slices:  # MIG mode: the slices are what can be selected
            if fenced_slice is not None and slice_.uuid != fenced_slice:
                continue
            mark = "*" if slice_.uuid == plan.selected_slice else " "
            mine = sum(p.memory or 0 for p in slice_.processes if p.pid == own)
            others = sorted({_shown(p.user) for p in slice_.processes if p.pid != own})
            lines.append(
                f" {mark}   {gpu.index}:{slice_.index} MIG {_shown(slice_.profile)} ({_shown(slice_.uuid)}): "
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


def _warn_already_initialized(magic: str, who: str, detail: str) -> None:
    from .. import frameworks

    state = next((f.state() for f in frameworks.FRAMEWORKS if f.name == who), None)
    if who == "CUDA":
        opening = "This kernel already uses the GPU"
    elif state is frameworks.State.INITIALIZED:
        opening = f"{who} already initialized the GPU in this kernel"
    else:
        opening = f"{who} already started CUDA in this kernel (it listed the GPUs)"
    message = (
        f"{opening}, so {magic} cannot take effect: {detail}. The GPU plan and the environment are "
        "unchanged; restart the kernel to apply a new plan (run the magic before the first GPU use)."
    )
    # warn_explicit with a fresh registry: the warning shows every time (unless a filter ignores it),
    # not just the first time from this line.
    warnings.warn_explicit(
        message, GPUAlreadyInitializedWarning, filename=magic, lineno=1, module="jupyter_gpu.kernel.magics", registry={}
    )


RESTART_MIME = "application/vnd.jupyter-gpu.restart+json"


def offer_restart(request: Any, reason: str, automatic: bool = False) -> None:
    """Show "Restart kernel and apply": a MIME bundle the JupyterLab extension renders as a button
    (``automatic``: it restarts at once, for ``%gpu_restart``), plain text everywhere else."""
    import uuid

    from IPython.display import display

    from ..plan import plan_magics
    from ..sources.kernel_reports import kernel_identity

    lines = plan_magics(request)
    text = (
        "To apply this GPU plan, restart the kernel and run first: "
        + "; ".join(lines[1:] or lines)
        + (
            " (JupyterLab with jupyter_gpu's extension does it for you: %gpu_restart)"
            if not automatic
            else " (this frontend cannot restart the kernel from code: restart it yourself)"
        )
    )
    data = {
        "version": 1,
        "lines": lines,
        "reason": reason,
        "automatic": automatic,
        "kernel_id": kernel_identity()[0],
        "id": uuid.uuid4().hex,
    }
    display({RESTART_MIME: data, "text/plain": text}, raw=True)


# -- registration ---------------------------------------------------------------------------------

_registered: dict[int, GpuMagics] = {}


def register(ipython: Any) -> None:
    """Register the magics on ``ipython``, watch the frameworks, apply the configured defaults
    (``%load_ext jupyter_gpu``)."""
    if id(ipython) in _registered:
        return
    magics = GpuMagics(shell=ipython)
    ipython.register_magics(magics)
    _registered[id(ipython)] = magics
    magics.enforce_admin_ceiling()
    _watch()
    ipython.events.register("post_run_cell", _after_cell)
    magics.apply_defaults()


def unregister(ipython: Any) -> None:
    """Remove the magics. The plan stays in effect (environment and pending import hooks)."""
    magics = _registered.pop(id(ipython), None)
    if magics is None:
        return
    line_magics = ipython.magics_manager.magics["line"]
    for name in ("gpu_select", "gpu_limit", "gpu_status", "gpu_threads", "gpu_free", "gpu_restart"):
        line_magics.pop(name, None)
    if magics in getattr(ipython, "configurables", []):
        ipython.configurables.remove(magics)
    try:
        ipython.events.unregister("post_run_cell", _after_cell)
    except ValueError:
        pass


# -- watching the frameworks ---------------------------------------------------------------------

_FRAMEWORK_MODULES = ("tensorflow", "torch", "jax")


def _watch() -> None:
    """Watch the frameworks' CUDA start from now on. Cheap while none is imported: the adapters
    (:mod:`jupyter_gpu.frameworks`) are imported only when a framework is."""
    if "jupyter_gpu.frameworks" in sys.modules or any(name in sys.modules for name in _FRAMEWORK_MODULES):
        from .. import frameworks

        frameworks.start_watching()
        return
    from ..core import import_hooks as _import_hooks

    found = (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
    for name in _FRAMEWORK_MODULES:
        if _on_import not in _import_hooks.pending(name):
            _import_hooks.when_imported(name, _on_import)
    _found.append(found)


_found: list[Any] = []  # the selection variables as the extension found them (before any plan)


def _on_import(_module: Any) -> None:
    from .. import frameworks
    from ..core.visibility import CudaEnv

    frameworks.start_watching(CudaEnv(*_found[0]) if _found else None)


# -- after every cell -----------------------------------------------------------------------------

# Framework errors that GPU configuration causes: (text in the message, what happened).
_HINTS = (
    (
        "Cannot set memory growth on device when virtual devices configured",
        "TensorFlow refuses set_memory_growth on a GPU that has a memory limit (logical devices), and the limit "
        "here comes from the kernel's GPU plan. Growth and the limit hold together through %gpu_select --growth "
        "(TF_FORCE_GPU_ALLOW_GROWTH): drop the set_memory_growth loop.",
    ),
    (
        "Physical devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_memory_growth/set_visible_devices can no longer change "
        "them. Restart the kernel and configure the GPUs before the first op with the magics (%gpu_select, "
        "%gpu_limit) or with tf.config calls.",
    ),
    (
        "Virtual devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_logical_device_configuration can no longer change "
        "them. Restart the kernel and set the limit first: %gpu_limit SIZE [SIZE ...].",
    ),
    (
        "Visible devices cannot be modified after being initialized",
        "TensorFlow already initialized its GPUs, so set_visible_devices can no longer change them. Restart the "
        "kernel and choose the GPUs first: %gpu_select SPEC.",
    ),
    (
        "Memory growth cannot differ between GPU devices",
        "TensorFlow needs the same memory growth on every GPU it uses, and code set it on some of them only. "
        "Growth on all of the plan's GPUs: %gpu_select ... --growth (TF_FORCE_GPU_ALLOW_GROWTH); drop the "
        "set_memory_growth calls.",
    ),
    (
        "invalid device ordinal",
        "CUDA has no device with that index. Device indices (cuda:N, /GPU:N, set_per_process_memory_fraction's "
        "device) count the GPUs the plan selected, from 0 in the plan's order, not nvidia-smi's numbers.",
    ),
    (
        "Torch not compiled with CUDA enabled",
        "this PyTorch is a CPU-only build: the GPU plan cannot apply to it. Install a CUDA build of PyTorch and "
        "restart the kernel.",
    ),
)


def traceback_hint(error: BaseException | None) -> str | None:
    """The hint to show under a framework error that GPU configuration causes (None for any other)."""
    if error is None:
        return None
    try:
        text = str(error)
    except Exception:
        return None  # the user's exception cannot print itself: IPython says so, and nothing here may add to it
    for needle, hint in _HINTS:
        if needle in text:
            from ..plan import current_plan

            return f"jupyter_gpu: {hint} The kernel's GPU plan: {_summary(current_plan())} (%gpu_status shows more)."
    return None


def error_notes(error: BaseException | None) -> list[str]:
    """What to print under a failed cell's traceback: the hint for a framework error that GPU
    configuration causes, and the out-of-memory report (:mod:`jupyter_gpu.kernel.oom`) unless turned off.
    Nothing is imported for a cell without an error."""
    if error is None:
        return []
    notes = []
    hint = traceback_hint(error)
    if hint:
        notes.append(hint)
    magics = next(iter(_registered.values()), None)
    if magics is None or magics.explain_oom:
        from .oom import explain_error

        report = explain_error(error)
        if report:
            notes.append(report)
    return notes


def _after_cell(result: Any = None) -> None:
    """``post_run_cell``: notes under a failed cell (:func:`error_notes`), and the cheap check that
    nothing changed behind the magics' back (see :func:`jupyter_gpu.frameworks.check_after_cell`)."""
    try:
        error = getattr(result, "error_in_exec", None)
        if error is not None:
            for note in error_notes(error):
                print(note, file=sys.stderr)
        frameworks = sys.modules.get("jupyter_gpu.frameworks")
        if frameworks is None:
            return  # no plan was ever made and no framework imported: nothing can diverge
        from ..core.errors import GPUPlanMismatchWarning, warn

        for message in frameworks.check_after_cell():
            warn(message, GPUPlanMismatchWarning)
    except Exception as error:  # a check must never break the kernel
        print(f"jupyter_gpu: the after-cell check failed: {type(error).__name__}: {error}", file=sys.stderr)
