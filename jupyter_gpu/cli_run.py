"""``jupyter-gpu run``: start one command with the GPU plan a notebook's magics would make (docs/run.md).

Usage::

    jupyter-gpu run --select 1 -- python your_file.py        # CUDA_VISIBLE_DEVICES=1 python your_file.py
    jupyter-gpu run --select auto:1 --limit 8GiB -- python train.py
    jupyter-gpu run --select auto:2 --min-free 20GiB --wait 30m -- python train.py
    nohup jupyter-gpu run --select auto:1 --limit 8GiB -- python train.py &

Everything below this face is the magics': the SPEC and sizes (:mod:`jupyter_gpu.plan`), the plan
session (:mod:`jupyter_gpu.session.plan_session`: the snapshot, the admin fence and ceiling, the
claims board), the ``--wait`` loop and its progress line (:mod:`jupyter_gpu.session.wait`), the
printed mapping (:mod:`jupyter_gpu.session.report`), the admin's defaults
(:mod:`jupyter_gpu.session.defaults`) and the command's environment (:mod:`jupyter_gpu.session.child`).

The command is started as a child process (no shell), with stdin, stdout and stderr inherited, and
``run`` stays beside it: it holds the claim ``auto`` left for the command's whole life and removes it
on every way the command ends. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to ``run``
are forwarded to the command, which is then waited for (a Ctrl-C or Ctrl-\\ typed in the terminal
already reached the command, which shares ``run``'s process group: it is not sent twice). A signal
``run`` started ignoring (``nohup``'s SIGHUP) stays ignored, by both. ``run`` killed with SIGKILL
leaves its claim file behind; it counts for nothing, since a claim counts only while its process runs.

Exit status: the command's own; a command killed by signal N makes ``run`` end by the same signal
(re-raised on itself after clean-up, so a shell sees 128+N and a script's loop stops on Ctrl-C);
2 for a bad request (bad option, SPEC or size, no GPU fits without ``--wait``, the time of ``--wait``
up, COMMAND missing or not found), with one line on stderr, and COMMAND never started; 130 when
``--wait`` was interrupted (nothing started either).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .core.arguments import RawDescriptionHelpFormatter, translate_error
from .core.i18n import N_, _

if TYPE_CHECKING:
    from .plan import GpuPlan
    from .session.plan_session import PlanSession

BAD_REQUEST = 2
"""The exit status of a request refused before COMMAND starts (as argparse's own errors)."""
INTERRUPTED = 128 + signal.SIGINT
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""The signals ``run`` passes on to its command."""
FROM_THE_TERMINAL = (signal.SIGINT, signal.SIGQUIT)
"""Signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\\): the command has them."""
NAME = "jupyter-gpu run"
STOP_HINT = N_("Ctrl-C to stop; the command starts once the GPUs fit")

DESCRIPTION = N_("""\
Start COMMAND with the GPU plan a notebook's %gpu_select and %gpu_limit would make, the same rules,
defaults and claims: print the mapping on stderr (as %gpu_select does), set the environment
(CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES, growth, JAX's memory share) and run COMMAND
(no shell) until it ends, holding the GPUs' claim for its whole life so that notebooks' and other
runs' `auto` choose other GPUs.

What is capped: the selection, growth and JAX's share are environment variables and reach any
command and every process it starts. The TensorFlow and PyTorch caps of --limit are calls made
inside a Python process: they can reach a Python interpreter only (named python*, or a script whose
#! line names python) with jupyter_gpu installed, through the plan carried in its environment and
applied by jupyter_gpu's start-up hook when it imports the framework (run asks that interpreter
first; the printed mapping says whether they reach it); caps cannot be applied to a command that is
not (a shell script, a binary): it gets the environment part, and one line says so. Caps are
cooperative: they bind the framework's allocator, not the driver (MIG or one GPU per container for
hard isolation).

Defaults come from the environment as in a kernel: JUPYTER_GPU_DEFAULT_SELECT, JUPYTER_GPU_GROWTH,
JUPYTER_GPU_DEFAULT_LIMIT (the options replace them); the admin ceiling JUPYTER_GPU_MAX_LIMIT and a
CUDA_VISIBLE_DEVICES set when run starts (the GPUs assigned to you) bind as in a kernel.
""")

EPILOG = N_("""\
signals and exit status:
  SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 sent to run are forwarded to COMMAND, then run
  waits for it (Ctrl-C in the terminal reaches COMMAND directly, once). The claim is removed however
  COMMAND ends; run killed with SIGKILL leaves a claim nobody counts (its process is gone).
  Exit status: COMMAND's; killed by signal N: run ends by signal N too (a shell shows 128+N);
  2: a bad request (one line on stderr; COMMAND was not started); 130: --wait interrupted.

examples:
  jupyter-gpu run --select 1 -- python your_file.py      (was: CUDA_VISIBLE_DEVICES=1 python your_file.py)
  jupyter-gpu run --select auto:1 --limit 8GiB --growth -- python train.py --epochs 10
  jupyter-gpu run --select auto:2 --min-free 20GiB --wait 30m -- python train.py
  nohup jupyter-gpu run --select auto:1 --limit 8GiB -- python train.py &

See docs/run.md.
""")


def add_run_parser(commands: Any) -> None:
    """The ``run`` subcommand on the CLI's subparsers."""
    run = commands.add_parser(
        "run",
        help=_("start a command with the GPU plan: idle-GPU choice, caps, growth, a claim for its life"),
        description=_(DESCRIPTION),
        epilog=_(EPILOG),
        formatter_class=RawDescriptionHelpFormatter,
        usage="jupyter-gpu run [--select SPEC] [--limit SIZE ...] [--growth | --no-growth] [--min-free SIZE] "
        "[--wait DURATION] -- COMMAND [ARGS...]",
    )
    run.error = _one_line_error  # a bad request is one line, status 2
    run.add_argument(
        "--select",
        metavar="SPEC",
        help=_(
            "the GPUs, as %%gpu_select takes them: 0 or 1,3 (nvidia-smi's numbers), a UUID prefix, a MIG slice "
            "(0:1), auto, auto:N (the N idlest), all, none (CPU only); default JUPYTER_GPU_DEFAULT_SELECT"
        ),
    )
    run.add_argument(
        "--limit",
        metavar="SIZE",
        action="append",
        help=_(
            "cap each selected GPU's memory, as %%gpu_limit: 2048 (MiB), 8GiB, 30%% (of that GPU); given twice, "
            "two logical GPUs (TensorFlow); 'off' drops JUPYTER_GPU_DEFAULT_LIMIT; never above the admin ceiling"
        ),
    )
    growth = run.add_mutually_exclusive_group()
    growth.add_argument(
        "--growth", dest="growth", action="store_true", default=None, help=_("allocate GPU memory on demand")
    )
    growth.add_argument("--no-growth", dest="growth", action="store_false", help=_("memory growth off"))
    run.add_argument("--min-free", metavar="SIZE", help=_("with auto: only GPUs with at least SIZE free (e.g. 8GiB)"))
    run.add_argument(
        "--wait",
        metavar="DURATION",
        help=_(
            "with auto: wait up to DURATION (90s, 30m, 2h) until the GPUs fit, a progress line on stderr; "
            "Ctrl-C stops waiting and nothing starts"
        ),
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]", help=_("what to run"))


class BadRequest(Exception):
    """A request refused before COMMAND starts: one line, exit status 2."""


def unrecognized(extra: Sequence[str]) -> NoReturn:
    """Options ``run`` does not know, before COMMAND (the main parser collects them): one line, status 2."""
    _one_line_error(_("unrecognized arguments: {arguments}").format(arguments=" ".join(extra)))


def _one_line_error(message: str) -> NoReturn:
    """argparse's error (or ours) as one translated line on stderr; exit status 2."""
    sys.stderr.write(
        f"{NAME}: " + _("{message} (see {help})").format(message=translate_error(message), help=f"{NAME} --help") + "\n"
    )
    sys.exit(BAD_REQUEST)


def _command(args: argparse.Namespace) -> tuple[list[str], str]:
    """COMMAND as given (after ``--``) and the executable it names (PATH looked up here, as a shell would)."""
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise BadRequest(_("no COMMAND given: jupyter-gpu run [options] -- COMMAND [ARGS...]"))
    executable = shutil.which(command[0])
    if executable is None or os.path.isdir(executable):
        raise BadRequest(_("{command}: command not found (or not executable)").format(command=command[0]))
    return command, executable


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    """The plan request: the options over the user's defaults (``JUPYTER_GPU_DEFAULT_*``); every size
    and the selection's form checked before any GPU is looked at."""
    from .session import defaults

    selection = args.select.strip() if args.select is not None else defaults.default_select()
    limits = _sizes(args.limit if args.limit is not None else [defaults.default_limit()])
    if any(size.lower() == "off" for size in limits):
        if len(limits) > 1:
            raise BadRequest(_("--limit off cannot be combined with sizes; give either sizes or off"))
        limits = ()
    auto = selection.lower().startswith("auto")
    if args.min_free is not None and not auto:
        raise BadRequest(_("--min-free needs --select auto or auto:N, e.g. --select auto --min-free 8GiB"))
    if args.wait is not None and not auto:
        raise BadRequest(_("--wait needs --select auto or auto:N, e.g. --select auto:1 --wait 30m"))
    min_free = "".join(_sizes([args.min_free])) or None if args.min_free is not None else None
    if limits or min_free:
        from .plan import PlanError, parse_size

        try:
            for size in (*limits, *([min_free] if min_free else [])):
                parse_size(size)
        except PlanError as error:
            raise BadRequest(str(error)) from None
    if limits and selection.lower() == "none":
        raise BadRequest(_("a memory limit needs GPUs, and the selection is none (CPU only)"))
    growth = defaults.default_growth() if args.growth is None else args.growth
    changes: dict[str, Any] = {"growth": growth, "limits": limits}
    if selection:
        changes["selection"] = selection
        changes["min_free"] = min_free
    return changes


def _sizes(texts: Sequence[str]) -> tuple[str, ...]:
    """The sizes in ``texts`` as people type them (``8 GiB`` is ``8GiB``: :func:`jupyter_gpu.plan.split_sizes`);
    the planner is imported only when there are any."""
    if not any(text.strip() for text in texts):
        return ()
    from .plan import split_sizes

    return tuple(size for text in texts for size in split_sizes(text))


NOTHING_ASKED = N_(
    "no GPU plan asked for (no --select, --limit or --growth, no JUPYTER_GPU_DEFAULT_SELECT, _LIMIT or _GROWTH, "
    "no admin ceiling): the command sees the GPUs as it would without jupyter-gpu"
)


def _nothing_asked(changes: dict[str, Any]) -> bool:
    """Whether the request is empty: no selection, limit, growth, and no admin ceiling to apply."""
    from .session.defaults import admin_ceiling

    return not (changes.get("selection") or changes["limits"] or changes["growth"] or admin_ceiling())


def _session(changes: dict[str, Any], command: Sequence[str]) -> PlanSession:
    """A plan session with the kernel's settings from the environment. A selection is claimed for
    the command's life as a run's claim (:func:`jupyter_gpu.session.child.run_label` names it), so
    every face shows its GPU as reserved until the command uses it, and the user's faces show the
    command's processes as theirs; the claims board is imported only when there is a selection."""
    from .session import defaults
    from .session.child import run_label
    from .session.plan_session import PlanSession, Settings

    settings = Settings(max_limit=defaults.admin_ceiling(), claims=defaults.claims_on())
    if changes.get("selection"):
        from .sources.claims import claims_directory

        settings.claims_dir = claims_directory()
    session = PlanSession(settings)
    session.claim_fields = {"kind": "run", "label": run_label(command)}
    return session


class _Progress:
    """The ``--wait`` line on stderr: rewritten in place on a terminal; elsewhere (a log file under
    ``nohup``) the first line and then one a minute."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.tty = err.isatty()
        self.shown = 0

    def __call__(self, handle: Any, text: str) -> Any:
        from .core.text import truncate
        from .session.wait import FinalLine

        final = isinstance(text, FinalLine)  # the loop's last line: "Waited 3 s for auto:1: the GPUs fit now."
        if self.tty:
            width = max(20, shutil.get_terminal_size().columns - 1)
            self.err.write("\r\x1b[K" + (text if final else truncate(text, width)) + ("\n" if final else ""))
        elif final or self.shown % 60 == 0:
            self.err.write(f"{NAME}: {text}\n")
        self.shown += 1
        self.err.flush()
        return self

    def end(self) -> None:
        """Leave the terminal's line (the wait ended without the GPUs fitting)."""
        if self.tty and self.shown:
            self.err.write("\n")
            self.err.flush()


def _plan(args: argparse.Namespace, session: PlanSession, changes: dict[str, Any], err: TextIO) -> GpuPlan:
    """The plan applied (claimed when ``auto``), waiting first with ``--wait``; BadRequest when refused."""
    from .core.errors import PlanError
    from .session import wait

    try:
        if args.wait is None:
            plan = session.change(NAME, **changes)
        else:
            progress = _Progress(err)
            try:
                plan = wait.wait_and_select(
                    session, changes["selection"], wait.parse_duration(args.wait), changes, progress, NAME, _(STOP_HINT)
                )
            except BaseException:  # refused, interrupted (while waiting: "stopped waiting ..."), or worse
                progress.end()
                raise
    except PlanError as error:
        if isinstance(error.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt(str(error)) from None
        raise BadRequest(str(error)) from None
    if plan is None:  # a framework already uses the GPU in this process: cannot happen in a fresh `run`
        raise BadRequest(_("the plan could not be applied"))
    return plan


def run_command(args: argparse.Namespace, err: TextIO) -> int:
    """``jupyter-gpu run``: plan, start COMMAND, hold the claim while it runs; the exit status."""
    from .session.child import child_environment

    session = None
    try:
        command, executable = _command(args)
        changes = _changes(args)
        if _nothing_asked(changes):  # as a kernel with nothing configured: no NVML, no variable touched
            env = child_environment(None)
            err.write(f"{NAME}: {_(NOTHING_ASKED)}\n")
        else:
            from .session.child import PLAN_VARIABLE, caps_note, is_python_command, plan_hook_in
            from .session.report import selection_report

            session = _session(changes, command)
            plan = _plan(args, session, changes, err)
            env = child_environment(plan)
            python = is_python_command(executable)
            # Only a cap needs the interpreter's start-up hook: asked then, and only then (one short start).
            hook = plan_hook_in(command, executable, env) if python and PLAN_VARIABLE in env else None
            note = caps_note(plan, command, python, env, hook)
            err.write(
                selection_report(plan, caveats=True, children=note, reservations=session.last_reservations) + "\n"
            )
        err.flush()
        returncode = _supervise(command, executable, env)
    except BadRequest as error:
        err.write(f"{NAME}: {_one_line(str(error))}\n")
        return BAD_REQUEST
    except KeyboardInterrupt as interrupt:
        err.write(f"{NAME}: {_one_line(str(interrupt) or _('interrupted'))}\n")
        return INTERRUPTED
    finally:
        if session is not None:
            session.release_claims()  # every way COMMAND ends (run's SIGKILL aside: that claim counts for nothing)
    if returncode < 0:
        _end_by_signal(-returncode)
        return 128 - returncode
    return returncode


def _one_line(text: str) -> str:
    from .core.text import display_text

    return display_text(" ".join(text.split()), 2000)


def _supervise(command: Sequence[str], executable: str, env: dict[str, str]) -> int:
    """Run COMMAND to its end, forwarding :data:`FORWARDED` signals; its return code (-N: killed by N)."""
    import subprocess

    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        if child is None:
            pending.append(signum)  # between the handler and the start: passed on once it runs
        elif child.returncode is None and not (signum in FROM_THE_TERMINAL and _terminal_sent_it()):
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

    before = {signum: signal.getsignal(signum) for signum in FORWARDED}
    for signum, handler in before.items():
        if handler != signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: still ignored
            signal.signal(signum, forward)
    try:
        try:
            child = subprocess.Popen(list(command), executable=executable, env=env)
        except OSError as error:
            raise BadRequest(
                _("{command}: cannot be started ({error})").format(command=command[0], error=error.strerror or error)
            ) from None
        for early in pending:
            forward(early, None)
        return child.wait()  # each forwarded signal interrupts the wait, which goes on (PEP 475)
    finally:
        # Handed back once COMMAND has ended: ``cli.main(["run", ...])`` called from Python (a test, a
        # script) would otherwise leave a handler that swallows its caller's SIGINT and SIGTERM for good.
        for signum, handler in before.items():
            if handler is not None:  # None: set outside Python, cannot be put back from here
                signal.signal(signum, handler)


def _terminal_sent_it() -> bool:
    """Whether this process is in its terminal's foreground process group: a Ctrl-C (Ctrl-\\) typed there
    went to the whole group, COMMAND included (it shares ``run``'s group), so it is not sent again."""
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        try:
            if stream is not None and stream.isatty():
                return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
        except (OSError, ValueError):
            continue
    return False


def _end_by_signal(signum: int) -> None:
    """End this process by ``signum``, as COMMAND ended, so a shell sees the same status (128+N); returns
    only if the signal does not end it."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        signal.signal(signum, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL's cannot be set (nor caught): it is the default already
    try:
        os.kill(os.getpid(), signum)
    except OSError:
        return
