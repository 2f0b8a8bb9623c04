"""``jupyter-gpu``: the GPU snapshot in a terminal.

Usage::

    jupyter-gpu status                 # a compact table of every GPU and its processes
    jupyter-gpu status --json          # the JSON contract (see jupyter_gpu.core.snapshot)
    jupyter-gpu status --watch 2       # refresh in place every 2 seconds (Ctrl-C to stop)
    jupyter-gpu status --show-other-names   # admins: other users' program names too

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
from typing import TextIO

from . import __version__
from .core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from .core.text import display_text
from .core.units import format_bytes

NOT_ON_MIG = "n/a on MIG"


def _optional(value: float | None, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def format_table(snapshot: Snapshot) -> str:
    """The snapshot as a compact, aligned, plain-text table, its warnings first."""
    lines = [f"Warning: {warning}" for warning in snapshot.warnings]
    if not snapshot.nvml_available:
        return "\n".join([*lines, f"No GPUs can be read: {snapshot.error}"])
    header = f"Driver {snapshot.driver_version}"
    if snapshot.simulated:
        header += "  (simulated GPUs)"
    lines.append(header)
    if not snapshot.gpus:
        lines.append("NVML works, but this machine has no NVIDIA GPU.")
        return "\n".join(lines)
    rows = [("GPU", "Name", "Memory used / total", "Util", "Temp", "Power")]
    groups: list[tuple[tuple[GpuProcess, ...], int]] = []  # under each row: its processes, how many rows
    for gpu in snapshot.gpus:
        rows.append(_gpu_row(gpu))
        if gpu.mig_mode and not gpu.error:
            unplaced = tuple(p for p in gpu.processes if p.slice not in {s.uuid for s in gpu.slices})
            groups.append((unplaced, 1))
            for slice_ in gpu.slices:
                rows.append(_slice_row(gpu, slice_))
                groups.append((slice_.processes, 2))
        else:
            groups.append((gpu.processes, 1))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right_aligned = {0, 2, 3, 4, 5}

    def render(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(w) if i in right_aligned else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    lines.append(render(rows[0]))
    for (processes, depth), row in zip(groups, rows[1:], strict=True):
        lines.append(render(row))
        indent = " " * (widths[0] + 2 * depth)
        for process in sorted(processes, key=lambda p: -(p.memory or 0)):
            who = display_text(process.user, 16)
            what = display_text(process.name, 40)
            lines.append(f"{indent}└ {format_bytes(process.memory):>9}  pid {process.pid:<8} {who:<12} {what}")
    return "\n".join(lines)


def _slice_row(gpu: GpuInfo, slice_: MigSlice) -> tuple[str, str, str, str, str, str]:
    name = f"└ MIG {display_text(slice_.profile, 16)}  {display_text(slice_.uuid, 48)}"
    if slice_.error:
        return (f"{gpu.index}:{slice_.index}", name, f"error: {display_text(slice_.error)}", "", "", "")
    share = 100 * slice_.memory_used / slice_.memory_total if slice_.memory_total else 0
    memory = f"{format_bytes(slice_.memory_used)} / {format_bytes(slice_.memory_total)} ({share:.0f}%)"
    return (f"{gpu.index}:{slice_.index}", name, memory, NOT_ON_MIG, "n/a", "n/a")  # the card's are on its row


def _gpu_row(gpu: GpuInfo) -> tuple[str, str, str, str, str, str]:
    if gpu.error:
        return (str(gpu.index), display_text(gpu.name or None, 40), f"error: {display_text(gpu.error)}", "", "", "")
    share = 100 * gpu.memory_used / gpu.memory_total if gpu.memory_total else 0
    memory = f"{format_bytes(gpu.memory_used)} / {format_bytes(gpu.memory_total)} ({share:.0f}%)"
    if gpu.power is None:
        power = "-"
    elif gpu.power_limit is None:
        power = f"{gpu.power:.0f} W"
    else:
        power = f"{gpu.power:.0f} / {gpu.power_limit:.0f} W"
    utilization = NOT_ON_MIG if gpu.mig_mode and gpu.utilization is None else _optional(gpu.utilization, "%")
    return (str(gpu.index), display_text(gpu.name, 40), memory, utilization, _optional(gpu.temperature, "°C"), power)


def _status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .sources.nvml import NvmlReader
    from .sources.nvml import snapshot as take
    from .sources.processes import ProcessDirectory

    if args.show_other_names:
        take = NvmlReader(ProcessDirectory(show_other_names=True)).snapshot

    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    while True:
        snapshot = take()
        text = json.dumps(snapshot.to_dict(), indent=2) if args.json else format_table(snapshot)
        if args.watch:
            stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp))
            out.write(f"{clear}{text}\n-- {stamp}, every {args.watch:g} s, Ctrl-C to stop\n")
        else:
            out.write(text + "\n")
        out.flush()
        if args.json:  # the table says it itself; JSON readers get it on stderr too
            for warning in snapshot.warnings:
                err.write(f"jupyter-gpu: warning: {warning}\n")
            if not snapshot.nvml_available:
                err.write(f"jupyter-gpu: {snapshot.error}\n")
        if not args.watch:
            return 0 if snapshot.nvml_available else 1
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0 if snapshot.nvml_available else 1


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the interval must be positive, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter-gpu",
        description="See the GPUs of this machine and who uses them (NVML, through nvidia-ml-py).",
        epilog="Set JUPYTER_GPU_SIMULATE=demo (or a number, or a scenario file) to simulate GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"jupyter-gpu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    status = commands.add_parser(
        "status",
        help="show every GPU: memory, utilization, temperature, power, processes",
        description="Show every GPU: memory, utilization, temperature, power and processes. "
        "Exit status 0 when GPUs were read, 1 when NVML is unavailable.",
    )
    status.add_argument("--json", action="store_true", help="print the JSON snapshot instead of a table")
    status.add_argument(
        "--show-other-names",
        action="store_true",
        help="show the program names of other users' GPU processes (withheld by default, as "
        "in the server and the notebook; for admins; command lines are never shown)",
    )
    status.add_argument(
        "--watch", metavar="SECONDS", type=_positive_seconds, help="refresh in place every SECONDS until Ctrl-C"
    )
    from .cli_doctor import add_doctor_parser

    add_doctor_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The ``jupyter-gpu`` console command; returns the exit status."""
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.command == "doctor":
            from .cli_doctor import run_doctor

            return run_doctor(args, out, err)
        return _status(args, out, err)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
