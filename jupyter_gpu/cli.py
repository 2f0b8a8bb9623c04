"""``jupyter-gpu``: the GPU snapshot in a terminal.

Usage::

    jupyter-gpu status                 # every GPU and its processes, in 80 columns
    jupyter-gpu status --wide          # + fan, PCI bus id, ECC errors, clocks, UUIDs (longer lines)
    jupyter-gpu status --json          # the JSON contract (see jupyter_gpu.core.snapshot) + source, kernels,
                                       # and each GPU's "availability" (free, reserved by you, ...)
    jupyter-gpu status --watch 2       # refresh in place every 2 seconds (Ctrl-C to stop)
    jupyter-gpu status --show-other-names   # admins: other users' program names too
    jupyter-gpu status --source local  # NVML here (or: server, hub; default auto)
    jupyter-gpu run --select auto:1 -- python train.py   # a command with the GPU plan (docs/run.md)

The sample is the host's (:mod:`jupyter_gpu.sources.host`): this user's running Jupyter server's
(found through its runtime files; then this user's kernels show by notebook with their idle time,
and ``--json`` lists them under ``kernels``), else the hub service's (``$JUPYTER_GPU_SERVICE_URL``),
else NVML read here; the ``Sample:`` line (``source``, ``source_note`` in ``--json``) says which.
A server whose world differs from the one this command's environment asks for (another
``JUPYTER_GPU_SIMULATE``, or simulated vs. real) is not used, and the ``Sample:`` line says so;
``--source`` chooses one source and nothing else.
Processes carry nvitop's type letter: ``C`` compute, ``G`` graphics, ``C+G`` both.

Other users' processes show their PID, user and memory only (their program names are withheld,
as in the server's snapshot and the notebook; ``--show-other-names`` or
``JUPYTER_GPU_SHOW_OTHER_NAMES=1`` widens that; command lines are never shown).

A GPU in MIG mode is followed by one row per slice (``0:1`` is GPU 0's MIG device 1, the notation
``%gpu_select`` takes), with its processes under it; NVML measures no utilization in MIG mode and
no temperature or power per slice, which the table says ("n/a on MIG") instead of showing zeros.

Warnings (e.g. a simulated scenario edit that was refused) are printed above the table, and on
stderr with ``--json`` (where they are also in the JSON's ``warnings``).

Exit status: 0 when the GPUs were read, 1 when NVML is unavailable (the reason is printed on
stderr; with ``--json`` the JSON is printed all the same), 2 for bad arguments.
Set ``JUPYTER_GPU_SIMULATE=demo`` to see simulated GPUs on a machine without one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from . import __version__
from .core.arguments import ArgumentParser, columns, wrap_columns
from .core.availability import (
    CANNOT_BE_READ,
    FREE,
    IN_USE,
    IN_USE_BY_OTHERS,
    IN_USE_BY_YOU,
    RESERVED_BY_ANOTHER_USER,
    RESERVED_BY_YOU,
    Viewer,
    label,
)
from .core.i18n import N_, _
from .core.messages import shown
from .core.text import display_text, truncate
from .core.units import format_bytes, format_duration

if TYPE_CHECKING:
    from .core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
    from .sources.host import HostReading, KernelView
    from .sources.peers import KernelPeer

NOT_ON_MIG = N_("n/a on MIG")
WIDTH = 80
"""The table fits a classic terminal: every line at most this many columns (``--wide``: no limit)."""
TYPE_MARKS = {"compute": "C", "graphics": "G", "compute+graphics": "C+G"}
"""nvitop's process type letters: C compute, G graphics (a display server, a desktop), C+G both."""


def _optional(value: float | None, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _fit(line: str, wide: bool) -> str:
    """A table line cut to the terminal's width (``wide``: left whole), a wide (CJK) character
    counting two columns."""
    return line if wide else _fit_cell(line, WIDTH)


def _fit_cell(cell: str, width: int) -> str:
    """A table cell cut to ``width`` columns, "…" ending what was cut."""
    cut = width
    while cut > 1 and columns(truncate(cell, cut)) > width:
        cut -= 1
    return truncate(cell, cut) if cell else cell


def _pad(cell: str, width: int, right: bool) -> str:
    """``cell`` padded to ``width`` columns (a wide character counts two)."""
    room = " " * max(0, width - columns(cell))
    return room + cell if right else cell + room


def _wrap(text: str, wide: bool, indent: str = "  ") -> list[str]:
    """A sentence that must be read whole (a warning, an error, where the sample came from) as lines
    of at most 80 columns, continued with ``indent`` (``wide``: one line)."""
    if wide:
        return [text]
    return wrap_columns(text, WIDTH, indent) or [text]


def format_table(
    snapshot: Snapshot, reading: HostReading | None = None, wide: bool = False, viewer: Viewer | None = None
) -> str:
    """The snapshot as an aligned, plain-text table of at most 80 columns (``wide``: more columns,
    no limit), its warnings first; with ``reading`` (the host sample it came from), where it came
    from and, from a Jupyter server, this user's kernels by notebook with their idle time; with
    ``viewer`` (:func:`jupyter_gpu.sources.claims.viewer`), this user's runs by name and the
    ``Availability:`` line (the one rule's words: free, reserved by you, ...)."""
    view = viewer if viewer is not None else Viewer()
    lines = [
        line
        for warning in snapshot.warnings
        for line in _wrap(_("Warning: {warning}").format(warning=display_text(shown(warning))), wide)
    ]
    if not snapshot.nvml_available:
        return "\n".join([*lines, _("No GPUs can be read: {error}").format(error=display_text(shown(snapshot.error)))])
    header = _("Driver {version}").format(version=snapshot.driver_version)
    if snapshot.simulated:
        header += "  " + _("(simulated GPUs)")
    lines.append(header)
    if reading is not None:
        lines.extend(
            _wrap(
                _("Sample: {source}").format(source=display_text(reading.shown_note or reading.note or reading.source)),
                wide,
            )
        )
    if not snapshot.gpus:
        lines.append(_("NVML works, but this machine has no NVIDIA GPU."))
        return "\n".join(lines)
    heads = ["GPU", _("Name"), _("Memory used / total"), _("Util"), _("Temp"), _("Power")]
    if wide:
        heads.extend(_(head) for head in WIDE_HEADS)
    rows: list[list[str]] = []
    groups: list[tuple[tuple[GpuProcess, ...], int]] = []  # under each row: its processes, how deep
    errors: dict[int, str] = {}  # row -> its error, printed across the figures' columns (wrapped)
    for gpu in snapshot.gpus:
        if gpu.error:
            errors[len(rows)] = gpu.error
        rows.append([*_gpu_row(gpu), *(_wide_cells(gpu) if wide else [])])
        if gpu.mig_mode and not gpu.error:
            unplaced = tuple(p for p in gpu.processes if p.slice not in {s.uuid for s in gpu.slices})
            groups.append((unplaced, 1))
            for slice_ in gpu.slices:
                if slice_.error:
                    errors[len(rows)] = slice_.error
                blank = [""] * (len(WIDE_HEADS) - 1)
                rows.append([*_slice_row(gpu, slice_), *([*blank, display_text(slice_.uuid, 64)] if wide else [])])
                groups.append((slice_.processes, 2))
        else:
            groups.append((gpu.processes, 1))
    widths = [max(columns(row[i]) for row in [heads, *rows] if i < 2 or row[2] != "") for i in range(len(heads))]
    if not wide:  # the name gives way: everything else must be readable
        others = sum(widths) - widths[1] + 2 * (len(widths) - 1)
        widths[1] = max(8, min(widths[1], WIDTH - others))
    right_aligned = {0, 2, 3, 4, 5, 6, 8, 9, 10}

    def render(row: Sequence[str]) -> str:
        cells = [
            _pad(_fit_cell(cell, w), w, i in right_aligned) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return _fit("  ".join(cells).rstrip(), wide)

    by_pid = reading.by_pid if reading is not None else {}
    lines.append(render(heads))
    for position, ((processes, depth), row) in enumerate(zip(groups, rows, strict=True)):
        if position in errors:
            start = _pad(render(row[:2] + [""] * (len(row) - 2)), widths[0] + widths[1] + 4, right=False)
            error = start + _("error: {error}").format(error=display_text(shown(errors[position])))
            lines.extend(_wrap(error, wide, " " * (widths[0] + widths[1] + 4)))
        else:
            lines.append(render(row))
        indent = " " * (widths[0] + 2 * depth)
        for process in sorted(processes, key=lambda p: -(p.memory or 0)):
            lines.append(
                _fit(_process_line(indent, process, by_pid.get(process.pid), view.runs.get(process.pid)), wide)
            )
    if viewer is not None:
        lines.extend(_wrap(_availability_line(snapshot.gpus, viewer), wide))
    from .sources.host import SOURCE_SERVER

    if reading is not None and reading.source == SOURCE_SERVER:
        lines.extend(_fit(line, wide) for line in _kernel_lines(reading.kernels))
    return "\n".join(lines)


def _availability_line(gpus: Sequence[GpuInfo], viewer: Viewer) -> str:
    """``Availability: free: GPU 0, 3; reserved by another user: GPU 2; in use by you: GPU 1`` (MIG
    slices by their ``0:1`` names; a GPU in MIG mode by its slices)."""
    by_state: dict[str, list[str]] = {}
    for gpu in gpus:
        if gpu.mig_mode and not gpu.error:
            for slice_ in gpu.slices:
                by_state.setdefault(viewer.state(slice_), []).append(f"MIG {gpu.index}:{slice_.index}")
        else:
            by_state.setdefault(viewer.state(gpu), []).append(f"GPU {gpu.index}")
    order = [FREE, RESERVED_BY_YOU, RESERVED_BY_ANOTHER_USER, IN_USE_BY_YOU, IN_USE_BY_OTHERS, IN_USE, CANNOT_BE_READ]
    parts = [
        _("{state}: {units}").format(state=label(state), units=", ".join(by_state[state]))
        for state in order
        if state in by_state
    ]
    return _("Availability: {states}").format(states=_("; ").join(parts))


def _process_line(indent: str, process: GpuProcess, kernel: KernelPeer | None, run: str | None = None) -> str:
    """``└ C   9.5 GiB  pid 4100001 alice      train.ipynb, idle 12 min``: type, memory, PID,
    user, and what it is (this user's kernel: its notebook and idle time; this user's run:
    ``yours: train.py (jupyter-gpu run), 2 h``; else its program)."""
    mark = TYPE_MARKS.get(process.type, "?")
    who = display_text(process.user, 10)
    if run is not None:  # "yours: train.py (jupyter-gpu run), 2 h", the user column saying "yours:"
        who, what = _("yours:"), run
    elif kernel is not None:
        what = _("{notebook}, {idle}").format(
            notebook=display_text(kernel.notebook or kernel.kernel_id, 48), idle=_idle_text(kernel.idle_s, kernel.idle)
        )
    else:
        what = display_text(process.name, 40)
    return f"{indent}└ {mark:<3} {format_bytes(process.memory):>9}  pid {process.pid:<7} {_pad(who, 10, False)} {what}"


def _idle_text(idle_s: float | None, idle: bool | None) -> str:
    if idle_s is None:
        return _("idle time unknown")
    if idle or idle_s >= 1:
        return _("idle {duration}").format(duration=format_duration(idle_s))
    return _("busy")


def _kernel_lines(kernels: Sequence[KernelView]) -> list[str]:
    """This user's kernels on the server the sample came from, by notebook."""
    if not kernels:
        return [_("Your kernels: none running on that server.")]
    lines = [_("Your kernels:")]
    for kernel in sorted(kernels, key=lambda k: (-(k.gpu_memory or 0), k.notebook or "")):
        state = _("busy") if kernel.execution_state == "busy" else _idle_text(kernel.idle_s, kernel.idle)
        memory = (
            _("GPU {size}").format(size=format_bytes(kernel.gpu_memory)) if kernel.gpu_memory else _("no GPU memory")
        )
        name = display_text(kernel.notebook or _("kernel {kernel_id}").format(kernel_id=kernel.kernel_id), 44)
        lines.append(f"  {_pad(name, 44, False)} {_pad(state, 16, False)} {memory}")
    return lines


WIDE_HEADS = (N_("Fan"), N_("Bus-Id"), "ECC", N_("SM clock"), N_("Mem clock"), "UUID")
"""``--wide``: what nvitop users look for first, where NVML has it ("-" where it does not: no fan on
a passively cooled card, no ECC count with ECC off). ECC: volatile uncorrected errors; clocks in MHz."""


def _wide_cells(gpu: GpuInfo) -> list[str]:
    if gpu.error:
        return ["", "", "", "", "", display_text(gpu.uuid or None, 64)]
    return [
        _optional(gpu.fan_speed, "%"),
        display_text(gpu.pci_bus_id or None, 32, missing="-"),
        _optional(gpu.ecc_errors, ""),
        _optional(gpu.clock_sm, " MHz"),
        _optional(gpu.clock_memory, " MHz"),
        display_text(gpu.uuid, 64),
    ]


def _slice_row(gpu: GpuInfo, slice_: MigSlice) -> tuple[str, str, str, str, str, str]:
    name = f"└ MIG {display_text(slice_.profile, 16)}"
    if slice_.error:
        return (f"{gpu.index}:{slice_.index}", name, "", "", "", "")  # its error is printed across
    share = 100 * slice_.memory_used / slice_.memory_total if slice_.memory_total else 0
    memory = f"{format_bytes(slice_.memory_used)} / {format_bytes(slice_.memory_total)} ({share:.0f}%)"
    return (f"{gpu.index}:{slice_.index}", name, memory, _(NOT_ON_MIG), _("n/a"), _("n/a"))  # the card's are on its row


def _gpu_row(gpu: GpuInfo) -> tuple[str, str, str, str, str, str]:
    if gpu.error:
        return (str(gpu.index), display_text(gpu.name or None, 40), "", "", "", "")  # its error is printed across
    share = 100 * gpu.memory_used / gpu.memory_total if gpu.memory_total else 0
    memory = f"{format_bytes(gpu.memory_used)} / {format_bytes(gpu.memory_total)} ({share:.0f}%)"
    if gpu.power is None:
        power = "-"
    elif gpu.power_limit is None:
        power = f"{gpu.power:.0f} W"
    else:
        power = f"{gpu.power:.0f} / {gpu.power_limit:.0f} W"
    utilization = _(NOT_ON_MIG) if gpu.mig_mode and gpu.utilization is None else _optional(gpu.utilization, "%")
    return (str(gpu.index), display_text(gpu.name, 40), memory, utilization, _optional(gpu.temperature, "°C"), power)


def status_json(reading: HostReading, viewer: Viewer | None = None) -> dict[str, object]:
    """``--json``: the snapshot contract plus ``source``, ``source_note`` and ``kernels`` (this
    user's kernels when the sample came from their Jupyter server, else empty; see the docstring);
    with ``viewer``, each GPU's and slice's ``availability`` (the one rule's words for this user)."""
    data = reading.snapshot.to_dict()
    if viewer is not None:
        for gpu, entry in zip(reading.snapshot.gpus, data["gpus"], strict=True):
            entry["availability"] = None if gpu.mig_mode else viewer.state(gpu)
            for slice_, part in zip(gpu.slices, entry["slices"], strict=True):
                part["availability"] = viewer.state(slice_)
    data["source"] = reading.source
    data["source_note"] = reading.note
    data["kernels"] = [kernel.to_dict() for kernel in reading.kernels]
    return data


def _viewer(snapshot: Snapshot) -> Viewer:
    """This user's view of the host's claims for ``snapshot`` (reservations, runs)."""
    from .sources.claims import viewer
    from .sources.processes import current_user

    return viewer(snapshot.gpus, current_user(), now=snapshot.timestamp) if snapshot.nvml_available else Viewer()


def _status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .sources.host import HostSample

    host = HostSample(kernel=False, show_other_names=True if args.show_other_names else None, source=args.source)
    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    shown_code = None  # the exit status of the last status shown
    try:
        while True:
            shown_code = _show_status(args, host.read(), out, err, clear)
            if not args.watch:
                return shown_code
            time.sleep(args.watch)
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends, wherever it lands (the sleep, or reading NVML): the last status's
        # code; before any status was shown, interrupted (130).
        if shown_code is None:
            raise
        return shown_code


def _show_status(args: argparse.Namespace, reading: HostReading, out: TextIO, err: TextIO, clear: str) -> int:
    """Write one status (the table or JSON; with --watch, the screen cleared and the footer); its exit
    status: 0, or 1 when NVML does not answer."""
    snapshot = reading.snapshot
    if args.json:
        text = json.dumps(status_json(reading, _viewer(snapshot)), indent=2)
    else:
        text = format_table(snapshot, reading, wide=args.wide, viewer=_viewer(snapshot))
    if args.watch:
        stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp))
        footer = _("-- {time}, every {seconds} s, Ctrl-C to stop").format(time=stamp, seconds=f"{args.watch:g}")
        out.write(f"{clear}{text}\n{footer}\n")
    else:
        out.write(text + "\n")
    out.flush()
    if args.json:  # the table says it itself; JSON readers get it on stderr too
        for warning in snapshot.warnings:
            err.write("jupyter-gpu: " + _("warning: {warning}").format(warning=display_text(shown(warning))) + "\n")
        if not snapshot.nvml_available:
            err.write(f"jupyter-gpu: {display_text(shown(snapshot.error))}\n")
    return 0 if snapshot.nvml_available else 1


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("expected a number of seconds, got {text}").format(text=repr(text))
        ) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(_("the interval must be positive, got {text}").format(text=text))
    return value


def _source(text: str) -> str:
    """``--source``: one of :data:`jupyter_gpu.sources.host.SOURCE_CHOICES` (imported only when given)."""
    from .sources.host import SOURCE_CHOICES

    if text not in SOURCE_CHOICES:
        raise argparse.ArgumentTypeError(
            _("expected one of {choices}, got {text}").format(choices=", ".join(SOURCE_CHOICES), text=repr(text))
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    """The ``jupyter-gpu`` parser, its subcommands and their help in the user's language."""
    parser = ArgumentParser(
        prog="jupyter-gpu",
        description=_("See the GPUs of this machine and who uses them (NVML, through nvidia-ml-py)."),
        epilog=_("Set JUPYTER_GPU_SIMULATE=demo (or a number, or a scenario file) to simulate GPUs."),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"jupyter-gpu {__version__}",
        help=_("show the program's version number and exit"),
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    status = commands.add_parser(
        "status",
        help=_("show every GPU: memory, utilization, temperature, power, processes"),
        description=_(
            "Show every GPU: memory, utilization, temperature, power and processes. "
            "Exit status 0 when GPUs were read, 1 when NVML is unavailable."
        ),
    )
    status.add_argument("--json", action="store_true", help=_("print the JSON snapshot instead of a table"))
    status.add_argument(
        "--show-other-names",
        action="store_true",
        help=_(
            "show the program names of other users' GPU processes (withheld by default, as "
            "in the server and the notebook; for admins; command lines are never shown)"
        ),
    )
    status.add_argument(
        "--wide",
        action="store_true",
        help=_(
            "more columns, lines longer than 80: fan, PCI bus id, uncorrected ECC errors, SM and memory "
            "clocks (where NVML has them), UUIDs"
        ),
    )
    status.add_argument(
        "--source",
        type=_source,
        default="auto",
        metavar="auto|server|hub|local",
        help=_(
            "where the sample comes from: auto (this user's Jupyter server of the same world, else the hub "
            "service, else NVML here), server, hub or local (NVML in this process); a chosen source that does "
            "not answer is an error (exit status 1), nothing else is read in its place"
        ),
    )
    status.add_argument(
        "--watch", metavar="SECONDS", type=_positive_seconds, help=_("refresh in place every SECONDS until Ctrl-C")
    )
    from .cli_doctor import add_doctor_parser
    from .cli_run import add_run_parser

    add_doctor_parser(commands)
    add_run_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The ``jupyter-gpu`` console command; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command == "run":
            from .cli_run import unrecognized

            unrecognized(extra)
        parser.error(_("unrecognized arguments: {arguments}").format(arguments=" ".join(extra)))
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.command == "doctor":
            from .cli_doctor import run_doctor

            return run_doctor(args, out, err)
        if args.command == "run":
            from .cli_run import run_command

            return run_command(args, err)
        return _status(args, out, err)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
