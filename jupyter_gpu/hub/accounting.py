"""Usage accounting: who held which GPUs, how much memory, busy or idle (pure: no I/O, no tornado).

The hub service samples the console's data (:func:`jupyter_gpu.hub.core.console`, the admin view:
the attribution rule applied) once per accounting interval and turns it into :class:`Usage` rows
(:func:`interval_usage`); :mod:`jupyter_gpu.hub.store` adds them up per hour in an SQLite file;
:func:`summary` and :func:`csv_text` are the answers of ``api/usage`` and ``api/usage.csv``.

**What is counted** for one interval of ``seconds``:

- a kernel *holds* a GPU while the service's NVML sample shows a process of that kernel (the
  attribution rule: the PIDs its server names, owned by the user's account) with memory on it:
  ``held_s`` grows by ``seconds`` per GPU held (GPU-seconds: two GPUs for an hour are two GPU-hours),
  ``byte_s`` by the kernel's GPU memory times ``seconds`` (byte-seconds; GiB-hours once divided);
- of ``held_s``, ``idle_s`` is the part while the kernel's server flagged it idle (its culling rule,
  :mod:`jupyter_gpu.core.culling`); busy is the rest;
- memory NVML shows the user's account holding that no kernel accounts for (a terminal's process, a
  script) is counted under the notebook ``""`` (shown as "outside notebooks"), never idle: nothing
  says it is;
- a kernel known only by its own report (containers: ``memory_source: "report"``) counts as one GPU;
- at most :data:`MAX_NOTEBOOKS_PER_USER` notebooks per user and interval (those holding most memory);
  the rest of that user's use is counted under :data:`MORE_NOTEBOOKS`, so no user server (untrusted:
  it names the notebooks) can grow the usage file by inventing notebooks.

Hours in the answers are rounded to :data:`DECIMALS` decimals, once, here: the console shows them as
they are and the CSV writes the same numbers, so the two always agree.

**Privacy rule** (as the console's): an admin sees every user and notebook; anybody else only their
own usage (other users are not even named).
"""

from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

WINDOWS = {"day": 86_400, "week": 7 * 86_400, "30d": 30 * 86_400}  # api/usage?window=
OUTSIDE_NOTEBOOKS = ""  # the notebook of memory no kernel accounts for
MAX_NOTEBOOKS_PER_USER = 50  # per interval; the rest is counted under MORE_NOTEBOOKS
MORE_NOTEBOOKS = "(more notebooks)"
DECIMALS = 2
GIB = 1 << 30
CSV_HEADER = ("user", "notebook", "gpu_hours", "gib_hours", "busy_hours", "idle_hours")


@dataclass(frozen=True)
class Usage:
    """What one user's notebook held over some time (seconds; ``idle_s`` is a part of ``held_s``)."""

    user: str
    notebook: str
    held_s: float
    byte_s: float
    idle_s: float


def _notebook(kernel: dict[str, Any]) -> str:
    notebook = kernel.get("notebook")
    if isinstance(notebook, str) and notebook:
        return notebook
    kernel_id = kernel.get("kernel_id")
    return f"kernel {kernel_id}" if isinstance(kernel_id, str) else "(unnamed kernel)"


def interval_usage(console: dict[str, Any], seconds: float) -> list[Usage]:
    """The usage of one interval of ``seconds`` from the console's admin view (see the module doc)."""
    if not seconds > 0:
        return []
    usage: dict[tuple[str, str], list[float]] = {}

    def add(user: str, notebook: str, gpus: int, memory: int, idle: bool) -> None:
        row = usage.setdefault((user, notebook), [0.0, 0.0, 0.0])
        row[0] += gpus * seconds
        row[1] += memory * seconds
        row[2] += gpus * seconds if idle else 0.0

    for user in console.get("users", ()):
        name = user["name"]
        outside = dict(user.get("memory_by_gpu") or {})  # NVML's truth, per GPU index
        for kernel in user.get("kernels", ()):
            memory = kernel.get("gpu_memory") or 0
            if memory <= 0:
                continue
            by_gpu = kernel.get("memory_by_gpu") or {}
            for index, used in by_gpu.items():
                outside[index] = outside.get(index, 0) - used
            add(name, _notebook(kernel), max(1, len(by_gpu)), memory, kernel.get("idle") is True)
        for used in outside.values():
            if used > 0:
                add(name, OUTSIDE_NOTEBOOKS, 1, used, False)
    by_user: dict[str, list[tuple[str, list[float]]]] = {}
    for (user, notebook), row in usage.items():
        by_user.setdefault(user, []).append((notebook, row))
    rows: list[Usage] = []
    for user, notebooks in by_user.items():
        notebooks.sort(key=lambda entry: (-entry[1][1], entry[0]))  # most memory first
        kept, rest = notebooks[:MAX_NOTEBOOKS_PER_USER], notebooks[MAX_NOTEBOOKS_PER_USER:]
        rows += [Usage(user, notebook, *row) for notebook, row in kept]
        if rest:
            rows.append(Usage(user, MORE_NOTEBOOKS, *(sum(row[i] for _, row in rest) for i in range(3))))
    return sorted(rows, key=lambda row: (row.user, row.notebook))


def _hours(seconds: float) -> float:
    return round(seconds / 3600, DECIMALS)


def _figures(held_s: float, byte_s: float, idle_s: float) -> dict[str, float]:
    return {
        "gpu_hours": _hours(held_s),
        "gib_hours": _hours(byte_s / GIB),
        "busy_hours": _hours(held_s - idle_s),
        "idle_hours": _hours(idle_s),
    }


def summary(rows: Iterable[Usage], window: str, since: float, until: float, viewer: str, admin: bool) -> dict[str, Any]:
    """The JSON of ``api/usage``: per user (most GPU-hours first) and per notebook, privacy applied.

    ::

        {"window": "week", "since": float, "until": float, "viewer": str, "admin": bool,
         "users": [{"name": str, "gpu_hours": float, "gib_hours": float, "busy_hours": float,
                    "idle_hours": float, "notebooks": [{"notebook": str, ...the same four}]}]}
    """
    per_user: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if not admin and row.user != viewer:
            continue
        sums = per_user.setdefault(row.user, {}).setdefault(row.notebook, [0.0, 0.0, 0.0])
        sums[0] += row.held_s
        sums[1] += row.byte_s
        sums[2] += row.idle_s
    users: list[dict[str, Any]] = []
    for name, notebooks in per_user.items():
        total = [sum(column) for column in zip(*notebooks.values(), strict=True)]
        entries: list[dict[str, Any]] = [
            {"notebook": notebook, **_figures(*sums)} for notebook, sums in notebooks.items()
        ]
        entries.sort(key=lambda entry: (-entry["gpu_hours"], entry["notebook"]))
        users.append({"name": name, **_figures(*total), "notebooks": entries})
    users.sort(key=lambda user: (-user["gpu_hours"], user["name"]))
    return {"window": window, "since": since, "until": until, "viewer": viewer, "admin": admin, "users": users}


FORMULA_STARTS = frozenset("=+-@\uff1d\uff0b\uff0d\uff20")  # and their fullwidth forms


def _cell(value: str) -> str:
    """A text cell a spreadsheet will not run as a formula: prefixed with ``'`` when it starts with a
    tab or CR, or when its first character after any whitespace (tab, newline, no-break or
    ideographic space, every ``str.isspace`` character) and invisible format characters (Unicode
    category Cf: zero-width space, BOM, bidi controls) is ``=``, ``+``, ``-`` or ``@`` (or a
    fullwidth one): spreadsheets trim what comes before it and run the rest as a formula."""
    stripped = value.lstrip()
    while stripped and unicodedata.category(stripped[0]) == "Cf":
        stripped = stripped[1:].lstrip()
    if value[:1] in ("\t", "\r") or stripped[:1] in FORMULA_STARTS:
        return "'" + value
    return value


def csv_text(answer: dict[str, Any]) -> str:
    """The CSV of ``api/usage.csv``: one line per user and notebook, the numbers of :func:`summary`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    for user in answer["users"]:
        for entry in user["notebooks"]:
            writer.writerow(
                [
                    _cell(user["name"]),
                    _cell(entry["notebook"]),
                    *(f"{entry[key]:.{DECIMALS}f}" for key in CSV_HEADER[2:]),
                ]
            )
    return out.getvalue()
