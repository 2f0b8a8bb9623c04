"""One way to show memory sizes across every face."""

from __future__ import annotations

from jupyter_gpu.core.units import GIB, MIB, format_bytes, format_duration


def test_format_bytes() -> None:
    assert format_bytes(80 * GIB) == "80 GiB"
    assert format_bytes(int(74.2 * GIB)) == "74.2 GiB"
    assert format_bytes(int(1.5 * GIB)) == "1.5 GiB"
    assert format_bytes(512 * MIB) == "512 MiB"
    assert format_bytes(0) == "0 MiB"
    assert format_bytes(-2 * GIB) == "-2 GiB"
    assert format_bytes(None) == "—"


def test_integers_beyond_any_float_are_formatted_not_raised() -> None:
    """JSON allows 10**400 and Python reads it as an int; ``math.isfinite`` would overflow on it.

    (Not a golden row: JavaScript reads the same JSON number as Infinity.)
    """
    assert format_bytes(10**400).endswith(" GiB")
    assert format_duration(10**400).endswith(" h")
    assert format_bytes(True) == format_duration(False) == "—"  # a bool is no number of bytes
