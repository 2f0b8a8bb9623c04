"""``%gpu_select``, ``%gpu_limit``, ``%gpu_threads``: the magics that change the kernel's GPU plan.

:class:`GpuMagics` also carries the extension's configuration (``c.GpuMagics.<name>``, ``%config``,
environment variables a spawner sets) and applies the configured defaults when the extension loads.
Each magic parses its line and hands the change to the kernel's :class:`~jupyter_gpu.kernel.session.PlanSession`;
what it prints comes from :mod:`jupyter_gpu.session.report`.
"""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Float, Unicode, default, observe

from ...core.i18n import _, set_language
from ...session import defaults
from ...session.child import kernel_children_note
from ...session.report import auto_rechosen, gpu_listing, limit_report, selection_report, summary, threads_report
from ..session import PlanSession, admin_ceiling, loosens_admin_ceiling, take_snapshot
from ..wait import parse_duration, wait_and_select
from .arguments import help_pages_in_language, parse


@help_pages_in_language
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
        help="%gpu_select leaves a short-lived claim on the GPUs it chooses (a file in claims_dir; auto counts "
        "other kernels' and runs' claims as load, so kernels started at once spread over idle GPUs, and every "
        "face shows a claimed GPU as reserved until it is used). Never required: an "
        "unusable directory means auto works without claims. Env: JUPYTER_GPU_CLAIMS=0 turns them off.",
    ).tag(config=True)
    claims_dir = Unicode(
        help="Directory of the host-wide GPU claims: every user must be able to write it, and it must have "
        "the sticky bit when shared (default /tmp). Env: JUPYTER_GPU_CLAIMS_DIR.",
    ).tag(config=True)
    language = Unicode(
        help="The language of what the magics, the panel and the out-of-memory report print: 'zh_CN' "
        "(中文), 'en'; '' chooses from JUPYTER_GPU_LANG, then JupyterLab's Settings → Language when the "
        "kernel started, then LANGUAGE, LC_ALL, LC_MESSAGES, LANG (docs/i18n.md).",
    ).tag(config=True)

    claim_ttl_s = Float(
        600.0,
        help="Seconds after which a claim no longer counts (it also stops counting once its process is gone or "
        "shows up in NVML on that GPU).",
    ).tag(config=True)

    @default("claims")
    def _claims_from_env(self) -> bool:
        return defaults.claims_on()

    @default("claims_dir")
    def _claims_dir_from_env(self) -> str:
        from ...sources.claims import claims_directory

        return claims_directory()

    @default("explain_oom")
    def _explain_oom_from_env(self) -> bool:
        return defaults.env_not_off("JUPYTER_GPU_EXPLAIN_OOM")

    @default("default_select")
    def _default_select_from_env(self) -> str:
        return defaults.default_select()

    @default("growth")
    def _growth_from_env(self) -> bool:
        return defaults.default_growth()

    @default("default_limit")
    def _default_limit_from_env(self) -> str:
        return defaults.default_limit()

    @default("max_limit")
    def _max_limit_from_env(self) -> str:
        return admin_ceiling()

    @observe("language")
    def _language_changed(self, change: dict[str, Any]) -> None:
        set_language(change["new"].strip() or None)

    @observe("max_limit")
    def _ceiling_changed(self, change: dict[str, Any]) -> None:
        refusal = loosens_admin_ceiling(change["new"].strip())
        if refusal:
            _note(_("max_limit stays {old}: {refusal}").format(old=repr(change["old"]), refusal=refusal))
            self.max_limit = change["old"]
            if self.shell is not None and "GpuMagics" in self.shell.config:
                self.shell.config.GpuMagics.max_limit = change["old"]  # a %reload_ext keeps the ceiling too
            return
        try:
            self.session.change("%config", max_limit=change["new"].strip() or None)
        except UsageError as error:
            _note(_("max_limit {value} is not applied yet: {error}").format(value=repr(change["new"]), error=error))

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        # before the traits load their configuration: a configured max_limit already changes the plan
        self.session = PlanSession(self)
        self._caveats_shown = False  # the limit report's caveats: once per kernel, then one line
        super().__init__(shell=shell, **kwargs)

    def _caveats_once(self, plan: Any) -> bool:
        """Whether this report of ``plan`` shows the limit's caveats in full (the first with a limit)."""
        if not plan.limits_bytes or self._caveats_shown:
            return not self._caveats_shown
        self._caveats_shown = True
        return True

    # -- the configured defaults and the admin ceiling

    def enforce_admin_ceiling(self) -> None:
        """A configured ``max_limit`` looser than the admin's JUPYTER_GPU_MAX_LIMIT is replaced by it."""
        admin = admin_ceiling()
        if admin and self.max_limit.strip() != admin and loosens_admin_ceiling(self.max_limit.strip()):
            _note(
                _(
                    "max_limit {value} is looser than JUPYTER_GPU_MAX_LIMIT={admin}, which "
                    "the kernel was started with; the ceiling stays {admin}."
                ).format(value=repr(self.max_limit), admin=admin)
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
        from ...plan import current_plan

        changes: dict[str, Any] = {"growth": self.growth or current_plan().request.growth}
        if self.default_select:
            changes["selection"] = self.default_select
        if self.default_limit:
            from ...plan import split_sizes

            changes["limits"] = split_sizes(self.default_limit)
        try:
            plan = self.session.change("%load_ext jupyter_gpu", **changes)
        except UsageError as error:
            _note(_("the configured defaults were not applied: {error}").format(error=error))
            return
        if plan is not None:
            print(f"jupyter_gpu: {summary(plan)}")  # the summary is translated

    # -- the magics

    @magic_arguments()
    @argument(
        "spec",
        nargs="?",
        help=_(
            "GPUs: indices like 0 or 1,3 (as nvidia-smi numbers them), UUIDs "
            "(unique prefixes), a MIG slice (0:1 = GPU 0's MIG device 1, or its MIG-… UUID), auto, auto:N, "
            "all or none. Without SPEC: list the GPUs."
        ),
    )
    @argument("--growth", action="store_true", help=_("allocate GPU memory on demand instead of up front"))
    @argument("--no-growth", action="store_true", help=_("turn memory growth off again"))
    @argument("--min-free", metavar="SIZE", help=_("with auto: only GPUs with at least SIZE free (e.g. 8GiB)"))
    @argument(
        "--wait",
        metavar="DURATION",
        help=_(
            "with auto: wait up to DURATION (90s, 30m, 2h; a plain number is "
            "seconds) until the GPUs fit, showing who holds them; interrupt to stop (nothing changes)"
        ),
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
        What ``auto`` chose stays: a later ``%gpu_limit``, ``%gpu_select --growth`` or ``%gpu_threads``
        keeps those GPUs (and says so); only ``%gpu_select auto`` again chooses anew, and says when
        the choice moved.

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
            %gpu_select auto:2 --min-free 8GiB   # (8 GiB, with a space, too)
            %gpu_select auto:1 --min-free 20GiB --wait 30m
            %gpu_select all
            %gpu_select none          # CPU only
        """
        from ...plan import current_plan

        args = parse(self.gpu_select, _joined_min_free(line))
        if args.growth and args.no_growth:
            raise UsageError(_("--growth and --no-growth conflict; give one of them"))
        changes: dict[str, Any] = {}
        if args.growth or args.no_growth:
            changes["growth"] = bool(args.growth)
        if args.min_free is not None and args.spec is None:
            raise UsageError(_("--min-free needs a SPEC of auto or auto:N, e.g. %gpu_select auto --min-free 8GiB"))
        if args.spec is not None:
            changes["selection"] = args.spec
            changes["min_free"] = args.min_free
        if args.wait is not None and not (args.spec or "").strip().lower().startswith("auto"):
            raise UsageError(_("--wait needs a SPEC of auto or auto:N, e.g. %gpu_select auto:1 --wait 30m"))
        if not changes:
            print(gpu_listing(current_plan(), take_snapshot()))
            return
        before = current_plan()
        if args.wait is not None:
            plan = wait_and_select(self.session, args.spec, parse_duration(args.wait), changes)
        else:
            plan = self.session.change("%gpu_select", **changes)
        if plan is not None:
            moved = auto_rechosen(before, plan)
            caveats, children = self._caveats_once(plan), kernel_children_note()
            report = selection_report(plan, caveats, children, self.session.last_reservations)
            print((f"{moved}\n" if moved else "") + report)

    @magic_arguments()
    @argument(
        "sizes",
        nargs="*",
        help=_(
            "a size per selected GPU: 2048 (MiB), 2GiB, 1.5G or 30%% (of that GPU); "
            "several sizes split each GPU into that many logical GPUs; 'off' removes the limit"
        ),
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

        Python programs the kernel starts (``!python train.py``,
        ``subprocess.run([sys.executable, "train.py"])``, ``multiprocessing`` spawn and DataLoader
        workers) inherit the environment: the selection, growth and JAX's share hold there, and the
        limit sets ``JUPYTER_GPU_PLAN``, which jupyter_gpu's start-up hook reads in a child whose
        Python has jupyter_gpu installed: its TensorFlow and PyTorch get the same caps when it imports
        them. Each child has its own cap, not a share of the kernel's: two children capped at 4 GiB
        can take 8 GiB. A child that sets its own ``CUDA_VISIBLE_DEVICES`` gets no cap (one line says
        so); ``!JUPYTER_GPU_PLAN= python train.py`` runs one without. Other programs, and a
        ``%gpu_limit`` on a MIG slice, pass on the variables only. See docs/children.md.

        The report prints these two caveats with the kernel's first memory limit, and a one-line
        reminder after that.

        Examples::

            %gpu_limit                # show the limit
            %gpu_limit 4GiB           # 4 GiB per selected GPU (4 GiB, with a space, too)
            %gpu_limit 30%            # 30 % of each selected GPU
            %gpu_limit 2048 2048      # two logical GPUs of 2 GiB each (TensorFlow)
            %gpu_limit off
        """
        from ...plan import PlanError, current_plan, parse_size, split_sizes

        sizes = list(split_sizes(" ".join(parse(self.gpu_limit, line).sizes)))  # "4 GiB" is 4GiB
        if not sizes:
            print(limit_report(current_plan(), self._caveats_once(current_plan()), kernel_children_note()))
            return
        if any(size.lower() == "off" for size in sizes):
            if len(sizes) > 1:
                raise UsageError(_("'off' cannot be combined with sizes; give either sizes or off"))
            sizes = []
        for size in sizes:  # the first malformed size is reported before any GPU is looked at
            try:
                parse_size(size)
            except PlanError as error:
                raise UsageError(str(error)) from None
        if sizes and current_plan().selected_indices == ():
            raise UsageError(
                _(
                    "a memory limit needs GPUs, and the selection is none (CPU only); "
                    "select GPUs first, e.g. %gpu_select auto"
                )
            )
        plan = self.session.change("%gpu_limit", limits=tuple(sizes))
        if plan is not None:
            print(limit_report(plan, self._caveats_once(plan), kernel_children_note()))

    @magic_arguments()
    @argument("--intra", type=int, metavar="N", help=_("threads inside one operation (0: framework default)"))
    @argument("--inter", type=int, metavar="N", help=_("operations run in parallel (0: framework default)"))
    @argument(
        "--soft-placement",
        choices=["on", "off"],
        help=_("TensorFlow: fall back to the CPU for ops without a GPU kernel"),
    )
    @argument("--log-placement", choices=["on", "off"], help=_("TensorFlow: log the device of every op"))
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
        from ...plan import current_plan

        args = parse(self.gpu_threads, line)
        changes: dict[str, Any] = {}
        for name, value in (("intra_op_threads", args.intra), ("inter_op_threads", args.inter)):
            if value is not None:
                if value < 0 or value > 4096:
                    raise UsageError(
                        _(
                            "a number of threads must be 0 to 4096, not {value}; give 1 or more, "
                            "or 0 for the framework's default"
                        ).format(value=value)
                    )
                changes[name] = value or None
        if args.soft_placement is not None:
            changes["soft_placement"] = args.soft_placement == "on"
        if args.log_placement is not None:
            changes["log_device_placement"] = args.log_placement == "on"
        if changes:
            plan = self.session.change("%gpu_threads", **changes)
            if plan is None:
                return
        print(threads_report(current_plan()))


def _note(text: str) -> None:
    """A problem with the configuration, on stderr: ``jupyter_gpu: <text>``."""
    print(f"jupyter_gpu: {text}", file=sys.stderr)


def _joined_min_free(line: str) -> str:
    """``line`` with the size after ``--min-free`` typed as people type it joined to its unit:
    ``auto --min-free 8 GiB`` reads as ``auto --min-free 8GiB``, as ``%gpu_limit 4 GiB`` does
    (:func:`jupyter_gpu.plan.split_sizes`). Other words stay as they are."""
    from ...plan import split_sizes

    words = line.split()
    for i, word in enumerate(words):
        if word == "--min-free" and i + 2 < len(words):
            joined = split_sizes(f"{words[i + 1]} {words[i + 2]}")
            if len(joined) == 1:
                return " ".join([*words[: i + 1], joined[0], *words[i + 3 :]])
        elif word.startswith("--min-free=") and i + 1 < len(words):
            joined = split_sizes(f"{word} {words[i + 1]}")
            if len(joined) == 1:
                return " ".join([*words[:i], joined[0], *words[i + 2 :]])
    return line
