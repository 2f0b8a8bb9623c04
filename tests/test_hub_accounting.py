"""Usage accounting's pure rules (jupyter_gpu.hub.accounting): what one interval counts, the answer
per user and notebook with the privacy rule, and a CSV that matches it and no spreadsheet runs."""

from __future__ import annotations

import csv
import io
from typing import Any

from hub_fake import scenario_of, user_snapshot

from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
from jupyter_gpu.hub import accounting, core
from jupyter_gpu.hub.accounting import Usage

GIB = 1 << 30


def kernel(notebook: str | None, memory_by_gpu: dict[str, int], idle: bool = False, **more: Any) -> dict[str, Any]:
    return {
        "kernel_id": "k-" + (notebook or "none"),
        "notebook": notebook,
        "idle": idle,
        "gpu_memory": sum(memory_by_gpu.values()),
        "memory_by_gpu": memory_by_gpu,
        "memory_source": "nvml" if memory_by_gpu else None,
        **more,
    }


def test_a_kernel_holding_two_gpus_counts_two_gpu_seconds_per_second_and_its_bytes() -> None:
    console = {
        "users": [
            {
                "name": "ann",
                "memory_by_gpu": {"0": GIB, "1": 2 * GIB},
                "kernels": [kernel("a.ipynb", {"0": GIB, "1": 2 * GIB})],
            }
        ]
    }
    assert accounting.interval_usage(console, 60) == [Usage("ann", "a.ipynb", 120.0, 3 * GIB * 60.0, 0.0)]


def test_idle_kernels_count_as_idle_and_kernels_without_memory_not_at_all() -> None:
    console = {
        "users": [
            {
                "name": "ann",
                "memory_by_gpu": {"0": GIB},
                "kernels": [kernel("idle.ipynb", {"0": GIB}, idle=True), kernel("cpu.ipynb", {})],
            }
        ]
    }
    assert accounting.interval_usage(console, 10) == [Usage("ann", "idle.ipynb", 10.0, GIB * 10.0, 10.0)]


def test_memory_of_the_account_outside_its_kernels_counts_outside_notebooks() -> None:
    """NVML shows ann's account holding 3 GiB on GPU 0 and 1 GiB on GPU 2; her kernel has 1 GiB on
    GPU 0: the rest (2 GiB on GPU 0, 1 GiB on GPU 2) is two GPUs held outside notebooks."""
    console = {
        "users": [
            {"name": "ann", "memory_by_gpu": {"0": 3 * GIB, "2": GIB}, "kernels": [kernel("a.ipynb", {"0": GIB})]}
        ]
    }
    assert accounting.interval_usage(console, 1) == [
        Usage("ann", "", 2.0, 3.0 * GIB, 0.0),
        Usage("ann", "a.ipynb", 1.0, 1.0 * GIB, 0.0),
    ]


def test_a_kernel_known_by_its_report_counts_as_one_gpu_and_a_nameless_kernel_by_its_id() -> None:
    console = {
        "users": [
            {
                "name": "ann",
                "memory_by_gpu": {},
                "kernels": [{**kernel(None, {}), "gpu_memory": GIB, "memory_source": "report", "kernel_id": "abc"}],
            }
        ]
    }
    assert accounting.interval_usage(console, 5) == [Usage("ann", "kernel abc", 5.0, 5.0 * GIB, 0.0)]
    assert accounting.interval_usage(console, 0) == []


def test_interval_usage_of_the_real_console_follows_the_attribution_rule() -> None:
    """From core.console's admin view of two users' servers: each kernel's NVML-checked memory."""
    snapshots = {"alice": user_snapshot("alice", 1, gpu=0), "bob": user_snapshot("bob", 2, gpu=1, mib=2048)}
    scenario = scenario_of(snapshots)
    gpus = tuple(
        GpuInfo(
            index,
            f"GPU-{index}",
            "sim",
            memory_total=80 * GIB,
            processes=tuple(
                GpuProcess(pid=p["pid"], memory=p["memory_mib"] << 20, user=p["user"]) for p in gpu.get("processes", [])
            ),
        )
        for index, gpu in enumerate(scenario["gpus"])
    )
    servers = [core.UserServer(user, f"/user/{user}/", snapshot) for user, snapshot in snapshots.items()]
    data = core.console(Snapshot(True, 1.0, gpus), {}, servers, "", "admin")
    assert accounting.interval_usage(data, 60) == [
        Usage("alice", "alice/secret-0.ipynb", 60.0, 60.0 * (1 << 30), 60.0),
        Usage("bob", "bob/secret-0.ipynb", 60.0, 60.0 * (2 << 30), 60.0),
        Usage("bob", "bob/secret-1.ipynb", 60.0, 60.0 * (2 << 30), 60.0),
    ]


ROWS = [
    Usage("ann", "a.ipynb", 7200.0, 7200.0 * GIB, 3600.0),
    Usage("ann", "b.ipynb", 3600.0, 2 * 3600.0 * GIB, 0.0),
    Usage("bob", '=HYPERLINK("http://x")', 36_000.0, 0.5 * 36_000 * GIB, 36_000.0),
]


def test_summary_for_an_admin_lists_everybody_most_gpu_hours_first_in_hours() -> None:
    answer = accounting.summary(ROWS, "week", 0.0, 1.0, "root", admin=True)
    assert [user["name"] for user in answer["users"]] == ["bob", "ann"]
    ann = answer["users"][1]
    assert (ann["gpu_hours"], ann["gib_hours"], ann["busy_hours"], ann["idle_hours"]) == (3.0, 4.0, 2.0, 1.0)
    assert [entry["notebook"] for entry in ann["notebooks"]] == ["a.ipynb", "b.ipynb"]
    assert ann["notebooks"][1] == {
        "notebook": "b.ipynb",
        "gpu_hours": 1.0,
        "gib_hours": 2.0,
        "busy_hours": 1.0,
        "idle_hours": 0.0,
    }


def test_summary_for_anybody_else_holds_only_their_own_usage() -> None:
    answer = accounting.summary(ROWS, "day", 0.0, 1.0, "ann", admin=False)
    assert [user["name"] for user in answer["users"]] == ["ann"]
    assert "bob" not in str(answer) and "HYPERLINK" not in str(answer)
    assert accounting.summary(ROWS, "day", 0.0, 1.0, "service:ann", admin=False)["users"] == []


def test_csv_has_a_header_the_summarys_numbers_and_no_formula() -> None:
    answer = accounting.summary(ROWS, "week", 0.0, 1.0, "root", admin=True)
    lines = list(csv.reader(io.StringIO(accounting.csv_text(answer))))
    assert lines[0] == list(accounting.CSV_HEADER)
    assert lines[1] == ["bob", '\'=HYPERLINK("http://x")', "10.00", "5.00", "0.00", "10.00"]
    assert lines[2:] == [
        ["ann", "a.ipynb", "2.00", "2.00", "1.00", "1.00"],
        ["ann", "b.ipynb", "1.00", "2.00", "1.00", "0.00"],
    ]
    for start in "=+-@":
        assert accounting._cell(start + "1") == "'" + start + "1"
    assert accounting._cell("plain") == "plain"


def test_csv_prefixes_a_formula_behind_whitespace_of_any_kind() -> None:
    """Every whitespace character (categories Zs, Zl, Zp, tab, newline, the other controls Python
    counts as space) and every invisible format character (Cf), alone or repeated, before a formula
    start: prefixed. The same text without the formula start is left alone."""
    import sys
    import unicodedata

    blanks = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace() or unicodedata.category(chr(c)) == "Cf"]
    assert {"\u00a0", "\u3000", "\t", "\n", "\u2028", "\u200b", "\ufeff"} <= set(blanks)
    for blank in blanks:
        for start in "=+-@\uff1d":
            for value in (blank + start + "1", blank * 3 + start + "1", blank + " \u200b" + start + "1"):
                assert accounting._cell(value) == "'" + value, ascii(value)
        assert accounting._cell(blank + "a.ipynb") == (
            "'" + blank + "a.ipynb" if blank in "\t\r" else blank + "a.ipynb"
        ), ascii(blank)


def test_a_server_inventing_notebooks_gets_fifty_and_the_rest_under_more_notebooks() -> None:
    kernels = [kernel(f"n{k:03d}.ipynb", {"0": (k + 1) << 20}) for k in range(80)]
    console = {
        "users": [{"name": "eve", "memory_by_gpu": {"0": sum(k["gpu_memory"] for k in kernels)}, "kernels": kernels}]
    }
    rows = accounting.interval_usage(console, 1)
    names = [row.notebook for row in rows]
    assert len(rows) == accounting.MAX_NOTEBOOKS_PER_USER + 1 and accounting.MORE_NOTEBOOKS in names
    assert "n079.ipynb" in names and "n029.ipynb" not in names  # the largest fifty kept
    more = next(row for row in rows if row.notebook == accounting.MORE_NOTEBOOKS)
    assert more.held_s == 30.0 and more.byte_s == sum(k + 1 for k in range(30)) * (1 << 20)
    assert sum(row.held_s for row in rows) == 80.0  # nothing lost
