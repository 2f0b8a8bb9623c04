"""The golden table ``tests/golden/availability.json`` against ``core.availability``: the one rule of
"free". The same file is read by ``labextension/src/__tests__/golden.spec.ts`` (``overview.ts``'s
twin), so the sidebar, the status bar, the panel, the terminal and ``auto`` say one thing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu.core.availability import (
    FREE,
    IN_USE,
    IN_USE_BY_OTHERS,
    IN_USE_BY_YOU,
    RESERVED_BY_ANOTHER_USER,
    RESERVED_BY_YOU,
    Reservation,
    availability,
    run_description,
    unit_availability,
)
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess

GOLDEN = json.loads((Path(__file__).parent / "golden" / "availability.json").read_text(encoding="utf-8"))
ROWS = GOLDEN["availability"]


@pytest.mark.parametrize("row", ROWS, ids=[f"{n}:{row.get('why') or row['expected']}" for n, row in enumerate(ROWS)])
def test_the_rule_follows_the_golden_table(row: dict[str, Any]) -> None:
    assert availability(**row["facts"]) == row["expected"]


def test_the_table_shows_every_word() -> None:
    words = {FREE, IN_USE, IN_USE_BY_OTHERS, IN_USE_BY_YOU, RESERVED_BY_ANOTHER_USER, RESERVED_BY_YOU}
    assert words <= {row["expected"] for row in ROWS}


def test_facts_of_a_gpu_graphics_is_no_job_and_a_holding_claim_no_reservation() -> None:
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="A100",
        memory_used=300 << 20,
        processes=(GpuProcess(1, 200 << 20, user="alice", type="graphics"),),
    )
    assert unit_availability(gpu, [], me="bob") == FREE
    held = Reservation("GPU-0", own=False, holding=True)
    assert unit_availability(gpu, [held], me="bob") == FREE  # its process is on the GPU: NVML says it
    assert unit_availability(gpu, [Reservation("GPU-0", own=False)], me="bob") == RESERVED_BY_ANOTHER_USER
    busy = GpuInfo(index=0, uuid="GPU-0", name="A100", processes=(GpuProcess(2, 1 << 30, user="bob"),))
    assert unit_availability(busy, [], me="bob") == IN_USE_BY_YOU
    assert unit_availability(busy, [], me="carol") == IN_USE_BY_OTHERS


@pytest.mark.parametrize(
    "row", GOLDEN["run"], ids=[f"{n}:{row.get('why') or row['expected']}" for n, row in enumerate(GOLDEN["run"])]
)
def test_a_run_is_described_by_the_golden_table(row: dict[str, Any]) -> None:
    run = Reservation("GPU-0", own=True, kind="run", since=row["since"], label=row["label"])
    assert run_description(run, row["now"]) == row["expected"]
