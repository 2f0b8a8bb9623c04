"""``%gpu_doctor``: the doctor's report (``jupyter-gpu doctor``) for this kernel's plan and environment.

Also :func:`plan_from_magics`, which turns ``jupyter-gpu doctor --plan "%gpu_select 1; %gpu_limit 2GiB"``
into a plan by running those very magics in a private IPython shell (one parser, the magics' own).
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ...core.i18n import _
from .arguments import help_pages_in_language, parse

if TYPE_CHECKING:  # loading the extension imports no plan (the plan module is the magics' own business)
    from ...plan import GpuPlan

PLAN_MAGICS = ("gpu_select", "gpu_limit", "gpu_threads")


class PlanTextError(ValueError):
    """A ``--plan`` text that is not a plan; the message is one line."""


def plan_lines(text: str) -> list[tuple[str, str]]:
    """``"%gpu_select 1 --growth; %gpu_limit 2GiB"`` -> ``[("gpu_select", "1 --growth"), ("gpu_limit", "2GiB")]``."""
    lines = []
    for part in text.replace("\n", ";").split(";"):
        part = part.strip()
        if not part or part == "%load_ext jupyter_gpu":
            continue
        name, _sep, rest = part.lstrip("%").partition(" ")
        if name not in PLAN_MAGICS:
            raise PlanTextError(
                _("{part} is not a plan magic: give %gpu_select, %gpu_limit or %gpu_threads lines").format(
                    part=repr(part)
                )
            )
        if "--wait" in rest.split():
            raise PlanTextError(
                _("{part}: the doctor does not wait for GPUs; leave --wait out").format(part=repr(part))
            )
        lines.append((name, rest.strip()))
    return lines


def plan_from_magics(text: str) -> GpuPlan:
    """Run the plan magics of ``text`` (after the configured defaults, as ``%load_ext`` applies
    them) in a private shell of this process and return the plan; :class:`PlanTextError` with the
    magic's own one-line message when one refuses. This process's environment takes the plan's
    variables (the doctor's children start from the environment it was started with)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from ...plan import current_plan
    from .. import magics

    lines = plan_lines(text)
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        magics.register(shell)
        for name, rest in lines:
            try:
                shell.run_line_magic(name, rest)
            except UsageError as error:
                raise PlanTextError(f"%{name} {rest}: {error}".replace("\n", " ")) from None
    return current_plan()


def doctor_magics(plan: GpuPlan) -> tuple[str, ...]:
    """The magic lines that make ``plan`` (its GPUs as chosen) in a fresh kernel."""
    from ... import doctor
    from ...plan import plan_magics

    return tuple(line for line in plan_magics(doctor.resolved_request(plan)) if not line.startswith("%load_ext"))


def report_for(plan: GpuPlan, timeout_s: float, start_env: Any = None, only: tuple[str, ...] = ()) -> Any:
    """The doctor's :class:`~jupyter_gpu.doctor.report.Report` for ``plan``."""
    from ... import doctor
    from ...core.environ import environment_at_process_start
    from ...session.report import summary

    start = environment_at_process_start() if start_env is None else start_env
    return doctor.run(plan, summary(plan), doctor_magics(plan), start, timeout_s=timeout_s, only=only)


@help_pages_in_language
@magics_class
class GpuDoctorMagics(Magics):
    """``%gpu_doctor``: check the GPU stack and this kernel's plan, changing nothing."""

    @magic_arguments()
    @argument(
        "--framework",
        action="append",
        choices=("tensorflow", "torch", "jax"),
        default=[],
        help=_("check only this framework (repeatable; default: every installed one)"),
    )
    @argument("--json", action="store_true", help=_("print the report's JSON (docs/doctor.md) instead of text"))
    @argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=_("how long the frameworks may take to start, all together (default 60)"),
    )
    @line_magic
    def gpu_doctor(self, line: str = "") -> None:
        """Check the GPU stack and this kernel's plan: ``jupyter-gpu doctor`` for this kernel.

        One page: the machine (driver, NVML and CUDA versions, the GPUs, what NVML may see, the
        CUDA variables, the kernel's fence and the admin's settings, the server extension and the
        hub service); each installed framework (version, GPU build or CPU-only and what to install
        for a GPU, the CUDA it was built for); and the plan checked for real: each framework is
        started in a child process with this kernel's plan applied as in a fresh kernel, lists its
        GPUs, and is compared with the plan: "follows the plan", "DIFFERS: …" with the cause, or
        "cannot verify: …". This kernel is not touched: no framework is imported here, no GPU
        memory is taken, and the children keep none once they exit.

        Examples::

            %gpu_doctor
            %gpu_doctor --json
            %gpu_doctor --timeout 20
            %gpu_doctor --framework torch
        """
        from ... import doctor
        from ...plan import current_plan

        args = parse(self.gpu_doctor, line)
        timeout = doctor.DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
        if not 0 < timeout <= 3600:
            raise UsageError(
                _("--timeout must be more than 0 and at most 3600 seconds, not {seconds}").format(
                    seconds=f"{args.timeout:g}"
                )
            )
        try:
            report = report_for(current_plan(), timeout, only=tuple(args.framework))
        except Exception as error:  # a doctor that fails must not take the kernel with it
            print(_("%gpu_doctor could not run: {error}").format(error=f"{type(error).__name__}: {error}"))
            return
        print(json.dumps(report.to_dict(), indent=2) if args.json else doctor.render_text(report))


_registered: dict[int, Magics] = {}


def register(ipython: Any) -> None:
    if id(ipython) in _registered:
        return
    magics = GpuDoctorMagics(shell=ipython)
    ipython.register_magics(magics)
    _registered[id(ipython)] = magics


def unregister(ipython: Any) -> None:
    magics = _registered.pop(id(ipython), None)
    if magics is None:
        return
    ipython.magics_manager.magics["line"].pop("gpu_doctor", None)
    if magics in getattr(ipython, "configurables", []):
        ipython.configurables.remove(magics)
