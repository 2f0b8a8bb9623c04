"""Memory sizes as jupyter_gpu shows them everywhere: binary units (GiB, MiB), as nvidia-smi counts."""

from __future__ import annotations

MIB = 1024**2
GIB = 1024**3


def format_bytes(value: float | None) -> str:
    """``80 GiB``, ``74.2 GiB``, ``512 MiB``; ``—`` when unknown.

    One decimal from 1 GiB up, dropped when it is zero, so a limit typed as ``8GiB`` reads back as
    ``8 GiB``; whole MiB below.
    """
    if value is None:
        return "—"
    if abs(value) >= GIB:
        return f"{value / GIB:.1f}".removesuffix(".0") + " GiB"
    return f"{value / MIB:.0f} MiB"
