"""The golden table ``tests/golden/format.json`` against ``core.text`` and ``core.units``.

The same file is read by ``labextension/src/__tests__/golden.spec.ts`` (the sidebar's and the
console's twins), so every face shows sizes, durations and foreign text by one rule.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu.core.text import HIDDEN_RANGES, display_text, neutralize, truncate
from jupyter_gpu.core.units import format_bytes, format_duration

GOLDEN = json.loads((Path(__file__).parent / "golden" / "format.json").read_text(encoding="utf-8"))
_SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _number(value: Any) -> Any:
    return _SPECIAL[value] if isinstance(value, str) else value


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{n}:{row.get('why') or ascii(row['input'])[:40]}" for n, row in enumerate(rows)]


@pytest.mark.parametrize("row", GOLDEN["bytes"], ids=_ids(GOLDEN["bytes"]))
def test_bytes(row: dict[str, Any]) -> None:
    assert format_bytes(_number(row["input"])) == row["expected"]


@pytest.mark.parametrize("row", GOLDEN["duration"], ids=_ids(GOLDEN["duration"]))
def test_duration(row: dict[str, Any]) -> None:
    assert format_duration(_number(row["input"])) == row["expected"]


@pytest.mark.parametrize("row", GOLDEN["neutralize"], ids=_ids(GOLDEN["neutralize"]))
def test_neutralize(row: dict[str, Any]) -> None:
    assert neutralize(row["input"]) == row["expected"]


@pytest.mark.parametrize("row", GOLDEN["truncate"], ids=_ids(GOLDEN["truncate"]))
def test_truncate(row: dict[str, Any]) -> None:
    assert truncate(row["input"], row["max_chars"]) == row["expected"]


@pytest.mark.parametrize("row", GOLDEN["display"], ids=_ids(GOLDEN["display"]))
def test_display(row: dict[str, Any]) -> None:
    assert display_text(row["input"], row["max_chars"], row["missing"]) == row["expected"]


def test_the_golden_table_names_both_ends_of_every_hidden_range() -> None:
    """A range added to HIDDEN_RANGES without golden rows would leave the twins unchecked."""
    named = {ord(row["input"][1]) for row in GOLDEN["neutralize"] if len(row["input"]) == 3}
    missing = [f"U+{cp:04X}" for low, high in HIDDEN_RANGES for cp in (low, high) if cp not in named]
    assert not missing


def test_hidden_ranges_cover_the_running_pythons_unicode_tables() -> None:
    """Every Cc, Cf, Cs, Co, Zl and Zp code point this Python knows is in HIDDEN_RANGES.

    Fails when a newer Python brings a Unicode version with a new format character: add it to
    HIDDEN_RANGES, to both twins and to the golden table.
    """
    hidden = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}
    ranges = HIDDEN_RANGES
    uncovered = [
        f"U+{cp:04X} ({unicodedata.category(chr(cp))})"
        for cp in range(sys.maxunicode + 1)
        if unicodedata.category(chr(cp)) in hidden and not any(low <= cp <= high for low, high in ranges)
    ]
    assert not uncovered, f"Unicode {unicodedata.unidata_version}: {uncovered[:20]}"
    listed = [cp for low, high in ranges for cp in range(low, high + 1)]
    extra = [f"U+{cp:04X}" for cp in listed if unicodedata.category(chr(cp)) not in hidden | {"Cn"}]
    assert not extra, "HIDDEN_RANGES holds assigned characters of other categories"
