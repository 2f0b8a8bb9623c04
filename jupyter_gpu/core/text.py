# ruff: noqa: RUF001, RUF002, RUF003  (Chinese punctuation on purpose: the rules of CJK line breaking)
"""Text from other processes made safe to show: hidden characters replaced, long text cut with "…".

GPU names, user names, program names and notebook paths come from the driver, the OS and other
users; every face shows them through :func:`display_text` (or :func:`neutralize` and
:func:`truncate`). The twins, kept to these rules and pinned by the same golden table
(``tests/golden/format.json``), are ``neutralize``/``truncate``/``displayText`` in
``labextension/src/format.ts`` and the ``format`` namespace of ``jupyter_gpu/hub/static/console.js``.

**The hidden-character rule**: every code point in :data:`HIDDEN_RANGES` is replaced by U+FFFD "�",
so what was hidden becomes visible and changes nothing around it. The ranges are an explicit list
(not a lookup in the running Python's or browser's Unicode tables, whose versions differ); they are
exactly these Unicode categories as of Unicode 15.1:

- **Cc, control characters** (C0, DEL and C1): ESC would drive a terminal, a newline would break a
  table row.
- **Cf, format characters**, all of them: the bidirectional controls (U+202A-U+202E embeddings and
  overrides, U+2066-U+2069 isolates, U+200E/U+200F/U+061C marks) let a string reorder what follows
  it (``evil\\u202egnp.ipynb`` reads as "evilbnypi.png", user ``a\\u202eevil`` as "alive": the
  "Trojan Source" trick, CVE-2021-42574); the zero-width ones (U+200B-U+200D, U+2060-U+2064, the
  BOM U+FEFF, the soft hyphen U+00AD) and the tag characters (U+E0000 block) make two different
  names look alike or smuggle invisible text. The price: an emoji joined by U+200D shows as its
  parts with "�" between them, a tag-flag emoji with "�" after it.
- **Zl, Zp**: U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR break a line like a newline.
- **Cs**: lone surrogates (a file name read with ``surrogateescape``), which no terminal can print.
- **Co**: private-use characters, whose look depends on the font.

Right-to-left *letters* are left alone: a Hebrew or Arabic name is legitimate and shows as itself.
Unassigned code points are left alone too (which ones are unassigned depends on the Unicode
version). A Unicode release that adds a format character needs a line here, one in each twin and a
golden row; ``tests/test_golden_format.py`` checks the list covers the running Python's tables.

**Length**: text longer than ``max_chars`` code points is cut and ends with "…", never between a
character and the combining marks (category M) that follow it. Faces that can show a tooltip put
the full (neutralised) text there.

**Width**: :func:`wrap` lays out the kernel's own sentences (warnings, what the magics print) in
lines of at most :data:`WIDTH` columns, a column as a terminal counts it (:func:`columns`: an East
Asian wide or fullwidth character, 中 or ，, takes two). It breaks at spaces and, since a Chinese
sentence has none, between two CJK characters (never before a closing mark such as ，。）or after an
opening one such as （), and never inside a word, a path, a code span between backticks, a figure
and its unit (``4 GiB``) or a magic with its arguments (``%gpu_limit 16GiB``, ``%gpu_select 2
--growth``): a line longer than the width is left long rather than cut there. (Python only: the
pages lay out their own text.)

**Joining**: :func:`clauses` and :func:`listed` join a line's clauses and a clause's names as the
user's language does (``; `` / ``；``, ``, `` / ``、``), each part a whole piece of its own ``_()``.

Pure: no IPython, no widgets.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from .i18n import pgettext

REPLACEMENT = "\ufffd"
ELLIPSIS = "…"

#: Unicode's explicit bidirectional formatting characters (UAX #9, section 2), all in HIDDEN_RANGES.
BIDI_CONTROLS = frozenset(
    "\u061c"  # ARABIC LETTER MARK
    "\u200e\u200f"  # LEFT-TO-RIGHT / RIGHT-TO-LEFT MARK
    "\u202a\u202b\u202c\u202d\u202e"  # LRE, RLE, PDF, LRO, RLO
    "\u2066\u2067\u2068\u2069"  # LRI, RLI, FSI, PDI
)

#: The code points :func:`neutralize` replaces, as inclusive ranges (see the module's docstring).
HIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # Cc: C0 controls
    (0x007F, 0x009F),  # Cc: DEL and C1 controls
    (0x00AD, 0x00AD),  # Cf: SOFT HYPHEN
    (0x0600, 0x0605),  # Cf: Arabic number signs
    (0x061C, 0x061C),  # Cf: ARABIC LETTER MARK
    (0x06DD, 0x06DD),  # Cf: ARABIC END OF AYAH
    (0x070F, 0x070F),  # Cf: SYRIAC ABBREVIATION MARK
    (0x0890, 0x0891),  # Cf: Arabic pound/piastre mark above
    (0x08E2, 0x08E2),  # Cf: ARABIC DISPUTED END OF AYAH
    (0x180E, 0x180E),  # Cf: MONGOLIAN VOWEL SEPARATOR
    (0x200B, 0x200F),  # Cf: ZWSP, ZWNJ, ZWJ, LRM, RLM
    (0x2028, 0x2029),  # Zl, Zp: LINE SEPARATOR, PARAGRAPH SEPARATOR
    (0x202A, 0x202E),  # Cf: LRE, RLE, PDF, LRO, RLO
    (0x2060, 0x2064),  # Cf: WORD JOINER, invisible operators
    (0x2066, 0x206F),  # Cf: LRI, RLI, FSI, PDI, deprecated format characters
    (0xD800, 0xDFFF),  # Cs: surrogates (only lone ones exist in text)
    (0xE000, 0xF8FF),  # Co: private use
    (0xFEFF, 0xFEFF),  # Cf: ZERO WIDTH NO-BREAK SPACE (BOM)
    (0xFFF9, 0xFFFB),  # Cf: interlinear annotation
    (0x110BD, 0x110BD),  # Cf: KAITHI NUMBER SIGN
    (0x110CD, 0x110CD),  # Cf: KAITHI NUMBER SIGN ABOVE
    (0x13430, 0x1343F),  # Cf: Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # Cf: shorthand format controls
    (0x1D173, 0x1D17A),  # Cf: musical symbol format controls
    (0xE0001, 0xE0001),  # Cf: LANGUAGE TAG
    (0xE0020, 0xE007F),  # Cf: tag characters
    (0xF0000, 0xFFFFD),  # Co: supplementary private use area A
    (0x100000, 0x10FFFD),  # Co: supplementary private use area B
)

_HIDDEN = re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in HIDDEN_RANGES) + "]")


def neutralize(text: str) -> str:
    """``text`` with every code point of :data:`HIDDEN_RANGES` replaced by U+FFFD."""
    return _HIDDEN.sub(REPLACEMENT, text)


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` code points, the last one "…" when it was cut.

    Never splits a base character from the combining marks (category M) that follow it.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, not {max_chars!r}")
    if len(text) <= max_chars:
        return text
    cut = max_chars - 1
    while cut > 0 and _is_mark(text[cut]):
        cut -= 1
    return text[:cut] + ELLIPSIS


def clauses(parts: Sequence[str]) -> str:
    """Clauses of one line joined as the language joins them: ``"; "`` (Chinese: the full-width
    semicolon). Each part is a whole piece of its own ``_()``."""
    return pgettext("clause separator", "; ").join(parts)


def listed(names: Sequence[str]) -> str:
    """Names listed in one clause: ``"TensorFlow, PyTorch"`` (Chinese: the enumeration comma)."""
    return pgettext("list separator", ", ").join(names)


def display_text(value: object, max_chars: int | None = None, missing: str = "?") -> str:
    """What a face shows for a string from elsewhere: neutralised, then truncated to ``max_chars``.

    ``None`` shows as ``missing``; ``max_chars=None`` keeps the full length (tooltips).
    """
    text = missing if value is None else neutralize(str(value))
    return text if max_chars is None else truncate(text, max_chars)


#: The width :func:`wrap` lays text out to: readable in a notebook's output and a terminal.
WIDTH = 100

_KEEP = "\x00"  # a space no line may break at (never in the kernel's own text, nor after neutralize)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
# A magic may follow Chinese text with no space (运行%gpu_restart); Latin text never has such a prefix.
_MAGIC = re.compile(r"^[^\x00-\u2e7f]*[(\"']?%{1,2}[a-z_]\w*\??$")
_ARGUMENT = re.compile(r"^(?:--?[a-z][\w-]*(?:=\S*)?|\S*\d\S*|auto\S*|all|none|off|on|cpu)$", re.IGNORECASE)
_UNIT = re.compile(r"^(?:[KMGTP]i?B|B|%|ms|s|min|h|W|°C)(?:[.,;:)!?\"'…]+|[^\x00-\u2e7f].*)?$")
_CJK_TAIL = re.compile(r"[^\x00-\u2e7f].*$")
_CLOSED = re.compile(r"[.,;:)!?\"'，。；：）！？、」』]+$")
#: No line starts with these (closing marks, in Chinese and Latin text) ...
_NO_BREAK_BEFORE = frozenset("，。、；：！？）】》」』〉〕…‥·ー～%,.;:!?)]}\"'’”")
#: ... and none ends with these (opening marks).
_NO_BREAK_AFTER = frozenset("（【《「『〈〔([{‘“")
_WHITESPACE = re.compile(r"([\t\n\x0b\x0c\r ]+)")


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def columns(text: str) -> int:
    """The columns ``text`` takes in a terminal: an East Asian wide or fullwidth character (UAX #11:
    中, ，, ｇ) two, a combining mark none, any other one. ``columns("显存 4 GiB") == 10``."""
    return sum(0 if _is_mark(char) else 2 if _wide(char) else 1 for char in text)


def _keep_together(line: str) -> str:
    """``line`` with the spaces inside code spans and between a magic and its arguments made
    unbreakable (:data:`_KEEP`)."""
    line = _CODE_SPAN.sub(lambda match: match.group().replace(" ", _KEEP), line)
    words = line.split(" ")
    out = [words[0]]
    glued = bool(_MAGIC.match(words[0]))
    for word in words[1:]:
        if out[-1][-1:].isdigit() and _UNIT.match(word):  # "4 GiB", "30 %": a figure with its unit
            out[-1] += _KEEP + word
            continue
        head = _CJK_TAIL.sub("", word)  # "--growth，然后": the argument, then Chinese text
        if glued and head and _ARGUMENT.match(_CLOSED.sub("", head)):
            out[-1] += _KEEP + word
            glued = head == word and not _CLOSED.search(word)
            continue
        out.append(word)
        glued = bool(_MAGIC.match(word))
    return " ".join(out)


def _pieces(word: str) -> list[str]:
    """``word`` cut where a line may break inside it: between two characters one of which is wide
    (CJK), unless that starts a line with a closing mark, ends one with an opening mark, or cuts a
    code span or a kept space. Latin words come back whole."""
    if not any(_wide(char) for char in word):
        return [word]
    inside = [False] * (len(word) + 1)
    for match in _CODE_SPAN.finditer(word):
        for position in range(match.start() + 1, match.end()):
            inside[position] = True
    pieces, start = [], 0
    for i in range(1, len(word)):
        before, after = word[i - 1], word[i]
        if (
            (_wide(before) or _wide(after))
            and not inside[i]
            and _KEEP not in (before, after)
            and after not in _NO_BREAK_BEFORE
            and before not in _NO_BREAK_AFTER
            and not _is_mark(after)
        ):
            pieces.append(word[start:i])
            start = i
    pieces.append(word[start:])
    return pieces


def _fill(body: str, width: int, first: str, rest: str) -> list[str]:
    """Greedy lines of at most ``width`` columns from ``body``, as :func:`textwrap.wrap` fills them
    (spaces dropped where a line breaks, a piece too long for any line on a line of its own), with
    the CJK break points of :func:`_pieces` as well as the spaces."""
    chunks: list[tuple[str, bool]] = []  # (text, is a space)
    for part in _WHITESPACE.split(body.expandtabs()):
        if not part:
            continue
        if _WHITESPACE.fullmatch(part):
            chunks.append((" " * len(part), True))
        else:
            chunks.extend((piece, False) for piece in _pieces(part))
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        indent = rest if lines else first
        room = width - columns(indent)
        if lines and chunks[-1][1]:
            chunks.pop()
        line: list[tuple[str, bool]] = []
        used = 0
        while chunks and used + columns(chunks[-1][0]) <= room:
            used += columns(chunks[-1][0])
            line.append(chunks.pop())
        if chunks and not line and columns(chunks[-1][0]) > room:
            line.append(chunks.pop())  # too long for any line: whole, on its own
        if line and line[-1][1]:
            line.pop()
        if line:
            lines.append(indent + "".join(text for text, _space in line))
    return lines


def fill(paragraph: str, width: int, indent: str = "") -> list[str]:
    """One paragraph (its spaces and line breaks collapsed) in lines of at most ``width`` columns, the
    lines after the first starting with ``indent``: broken at spaces and, with the rules of
    :func:`wrap`, between CJK characters. What argparse's help and the terminal's notes use; unlike
    :func:`wrap`, no magic or figure is held together (help text names options, not magics)."""
    return _fill(" ".join(paragraph.split()), width, "", indent)


def wrap(text: str, width: int = WIDTH, indent: str = "  ") -> str:
    """``text`` with each line longer than ``width`` columns (:func:`columns`) broken at spaces, and
    between CJK characters, into lines of at most ``width``, each continued line indented as its
    first line plus ``indent``.

    Never breaks a word, a path, a code span between backticks, a figure and its unit (``4 GiB``)
    or a magic with its arguments (``%gpu_limit 16GiB``), nor puts a closing mark (，。）) at the
    start of a line; such a piece longer than the room on a line gets a line of its own, even a line
    longer than ``width``. Lines that fit are returned as they are. Idempotent: wrapping wrapped
    text changes nothing."""
    if _KEEP in text:  # not the kernel's own text: leave it as it is
        return text
    out: list[str] = []
    for line in text.split("\n"):
        if columns(line) <= width:
            out.append(line)
            continue
        body = line.lstrip(" ")
        lead = line[: len(line) - len(body)]
        wrapped = _fill(_keep_together(body), width, lead, lead + indent)
        out.extend(part.replace(_KEEP, " ") for part in wrapped or [line])
    return "\n".join(out)
