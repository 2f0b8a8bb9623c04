"""Memory sizes as typed in ``%gpu_limit``, ``--min-free`` and the admin ceiling: ``2048`` (MiB),
``512MiB``, ``2GiB``, ``1.5G``, ``1T`` (binary multiples, as ``nvidia-smi`` counts) or ``30%`` of a GPU's
total memory (see :mod:`jupyter_gpu.plan`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import PlanError
from ..core.i18n import _
from ..core.units import MIB

_UNITS = {"": MIB, "K": 1024, "M": MIB, "G": 1024**3, "T": 1024**4}
_UNIT_ALONE = re.compile(r"^(?:[KMGT](?:I?B)?|B|%)$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(?P<number>[0-9]{0,30}\.?[0-9]{1,30})\s*(?P<unit>(?:[KMGT](?:I?B)?|B)?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Size:
    """A memory size as typed: an absolute number of bytes, or a percentage of a GPU's total."""

    text: str
    bytes: int | None = None
    percent: float | None = None

    def resolve(self, total_bytes: int | None) -> int:
        """Bytes on a GPU with ``total_bytes`` of memory (needed for percentages only)."""
        if self.bytes is not None:
            return self.bytes
        assert self.percent is not None
        if total_bytes is None:
            raise PlanError(
                _(
                    "{size} is a share of a GPU's memory, but NVML cannot tell the GPU's "
                    "size here; give an absolute size such as 2GiB or 2048 (MiB)"
                ).format(size=repr(self.text))
            )
        return int(total_bytes * self.percent / 100)

    def __str__(self) -> str:
        return self.text


def parse_size(text: str) -> Size:
    """``"2048"`` (MiB), ``"2GiB"``, ``"1.5G"``, ``"512MB"`` or ``"30%"``; raises :class:`PlanError`."""
    cleaned = text.strip()
    figures = {
        "size": repr(text),
        "valid": _("valid sizes: 2048 (MiB), 512MiB, 2GiB, 1.5G or 30% (of the GPU's memory)"),
    }
    if cleaned.endswith("%"):
        if not re.fullmatch(r"\s*[0-9]{0,30}\.?[0-9]{1,30}\s*", cleaned[:-1]):
            raise PlanError(_("malformed size {size}; {valid}").format(**figures))
        percent = float(cleaned[:-1])
        if not 0 < percent <= 100:
            raise PlanError(_("size {size} must be more than 0% and at most 100%; {valid}").format(**figures))
        return Size(text=cleaned, percent=percent)
    match = _SIZE.match(cleaned)
    if match is None:
        if cleaned.startswith("-"):
            raise PlanError(_("size {size} is negative; {valid}").format(**figures))
        raise PlanError(_("malformed size {size}; {valid}").format(**figures))
    unit = match["unit"].upper()
    multiplier = 1 if unit == "B" else _UNITS[unit[:1]]
    size_bytes = int(float(match["number"]) * multiplier)
    if size_bytes > 1024**5:
        raise PlanError(_("size {size} is more than 1 PiB, more than any GPU has; {valid}").format(**figures))
    if size_bytes < MIB:
        raise PlanError(
            (_("size {size} is zero; {valid}") if size_bytes == 0 else _("size {size} is under 1 MiB; {valid}")).format(
                **figures
            )
        )
    return Size(text=cleaned, bytes=size_bytes)


def split_sizes(text: str) -> tuple[str, ...]:
    """The sizes in a line as people type them: ``"4 GiB 30 %"`` is ``("4GiB", "30%")``.

    Words are split on whitespace, and a unit standing alone (``GiB``, ``G``, ``MB``, ``%``) joins the
    word before it, so ``%gpu_limit 4 GiB`` means ``%gpu_limit 4GiB``. Nothing is checked here
    (:func:`parse_size` does that): a unit with no word before it stays a word of its own."""
    sizes: list[str] = []
    for word in text.split():
        if sizes and _UNIT_ALONE.match(word) and not _UNIT_ALONE.match(sizes[-1]) and sizes[-1][-1] in "0123456789":
            sizes[-1] += word
        else:
            sizes.append(word)
    return tuple(sizes)
