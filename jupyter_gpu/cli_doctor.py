"""``jupyter-gpu doctor``: check the GPU stack and the plan on this machine (docs/doctor.md).

Usage::

    jupyter-gpu doctor                                        # the plan in force: the admin's defaults
    jupyter-gpu doctor --plan "%gpu_select 1 --growth; %gpu_limit 2GiB"
    jupyter-gpu doctor --json                                 # the same report as JSON (docs/doctor.md)

Exit status: 0 all good, 1 a problem was found, 2 the doctor could not run (bad arguments, a plan
the magics refuse). Each framework is started in a child process; ``--timeout`` bounds them all.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from .core.i18n import _


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("expected a number of seconds, got {text}").format(text=repr(text))
        ) from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(
            _("the timeout must be more than 0 and at most 3600 seconds, got {text}").format(text=text)
        )
    return value


def add_doctor_parser(commands: Any) -> None:
    """The ``doctor`` subcommand on the CLI's subparsers."""
    doctor = commands.add_parser(
        "doctor",
        help=_("check the GPU stack and the plan: driver, GPUs, each framework's build, the plan for real"),
        description=_(
            "Check the GPU stack and the plan on this machine: the driver and GPUs, each installed "
            "framework's build, and the plan checked for real (each framework started in a child process with the "
            "plan). Exit status 0 all good, 1 a problem was found, 2 the doctor could not run."
        ),
    )
    doctor.add_argument(
        "--plan",
        metavar="MAGICS",
        default="",
        help=_(
            "the plan to check, as magics separated by ';' (e.g. \"%%gpu_select 1 --growth; %%gpu_limit 2GiB\"); "
            "default: the plan a new kernel gets (the admin's JUPYTER_GPU_DEFAULT_* settings)"
        ),
    )
    doctor.add_argument(
        "--framework",
        action="append",
        choices=("tensorflow", "torch", "jax"),
        default=[],
        help=_("check only this framework (repeatable; default: every installed one)"),
    )
    doctor.add_argument(
        "--json", action="store_true", help=_("print the report as JSON (a stable shape, docs/doctor.md)")
    )
    doctor.add_argument(
        "--timeout",
        type=_timeout,
        metavar="SECONDS",
        default=60.0,
        help=_("how long the frameworks may take to start, all together (default 60)"),
    )


def run_doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Build the plan from ``--plan``, run the doctor, print the report; the exit status."""
    from . import doctor
    from .kernel.magics.doctor import PlanTextError, plan_from_magics, report_for

    try:
        plan = plan_from_magics(args.plan)
    except PlanTextError as error:
        err.write("jupyter-gpu doctor: " + _("bad --plan: {error}").format(error=error) + "\n")
        return 2
    try:
        report = report_for(plan, args.timeout, only=tuple(args.framework))
    except Exception as error:  # the doctor itself broke: say so in one line, status 2
        err.write(
            "jupyter-gpu doctor: " + _("could not run: {error}").format(error=f"{type(error).__name__}: {error}") + "\n"
        )
        return 2
    out.write((json.dumps(report.to_dict(), indent=2) if args.json else doctor.render_text(report)) + "\n")
    out.flush()
    return int(report.exit_status)
