"""One way to show memory sizes across every face."""

from __future__ import annotations

from jupyter_gpu.core.units import GIB, MIB, format_bytes


def test_format_bytes() -> None:
    assert format_bytes(80 * GIB) == "80 GiB"
    assert format_bytes(int(74.2 * GIB)) == "74.2 GiB"
    assert format_bytes(int(1.5 * GIB)) == "1.5 GiB"
    assert format_bytes(512 * MIB) == "512 MiB"
    assert format_bytes(0) == "0 MiB"
    assert format_bytes(-2 * GIB) == "-2 GiB"
    assert format_bytes(None) == "—"
