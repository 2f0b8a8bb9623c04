"""Text from other processes made safe to show: bidi controls neutralised, long text cut with "…".

GPU names, user names, program names and notebook paths come from the driver, the OS and other
users; every face shows them through :func:`display_text` (the sidebar has the TypeScript twin
``displayText`` in ``labextension/src/format.ts``, kept to the same rules):

- **Bidirectional controls** (U+202A-U+202E embeddings and overrides, U+2066-U+2069 isolates,
  U+200E/U+200F/U+061C marks) let a string reorder what follows it: ``evil\\u202egnp.ipynb`` reads
  as "evilbnypi.png", user ``a\\u202eevil`` as "alive" (the "Trojan Source" trick, CVE-2021-42574).
  They are replaced by U+FFFD "�", so the spoof is visible and reorders nothing. Right-to-left
  *letters* are left alone: a Hebrew or Arabic name is legitimate and shows as itself.
- **Other control characters** (C0 and C1, e.g. ESC, which would drive a terminal, or a newline,
  which would break a table row) are replaced the same way.
- **Length**: text longer than ``max_chars`` characters is cut and ends with "…". Faces that can
  show a tooltip put the full (neutralised) text there.

Pure: no IPython, no widgets.
"""

from __future__ import annotations

import unicodedata

REPLACEMENT = "\ufffd"
ELLIPSIS = "…"

#: Unicode's explicit bidirectional formatting characters (UAX #9, section 2).
BIDI_CONTROLS = frozenset(
    "\u061c"  # ARABIC LETTER MARK
    "\u200e\u200f"  # LEFT-TO-RIGHT / RIGHT-TO-LEFT MARK
    "\u202a\u202b\u202c\u202d\u202e"  # LRE, RLE, PDF, LRO, RLO
    "\u2066\u2067\u2068\u2069"  # LRI, RLI, FSI, PDI
)

_TRANSLATION = {ord(c): REPLACEMENT for c in BIDI_CONTROLS}
_TRANSLATION.update({code: REPLACEMENT for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))})


def neutralize(text: str) -> str:
    """``text`` with every bidi control and C0/C1 control character replaced by U+FFFD."""
    return text.translate(_TRANSLATION)


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, the last one "…" when it was cut.

    Never splits a base character from the combining marks that follow it.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, not {max_chars!r}")
    if len(text) <= max_chars:
        return text
    cut = max_chars - 1
    while cut > 0 and unicodedata.combining(text[cut]):
        cut -= 1
    return text[:cut] + ELLIPSIS


def display_text(value: object, max_chars: int | None = None, missing: str = "?") -> str:
    """What a face shows for a string from elsewhere: neutralised, then truncated to ``max_chars``.

    ``None`` shows as ``missing``; ``max_chars=None`` keeps the full length (tooltips).
    """
    text = missing if value is None else neutralize(str(value))
    return text if max_chars is None else truncate(text, max_chars)
