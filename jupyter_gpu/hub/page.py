"""The console's page (``/services/jupyter-gpu/``) as one response: its style, its script and its
first data inline, so its first paint waits for no request of its own (issue 27).

``static/console.html`` links ``static/console.css`` and ``static/console.js`` and has an empty
``<script id="jg-first" type="application/json">`` (the file works as it is, served statically);
:func:`render` puts the two files' text in their place and the first ``api/console`` answer in
``jg-first``. The service sends :attr:`Page.before` (the style included) as soon as the viewer is
known, then the data once it is joined (:meth:`Page.rest`), so the browser parses the head while
the service works. The Content-Security-Policy (:attr:`Page.csp`) still allows no script or style but
these two, named by their SHA-256, and nothing from elsewhere; the data is never markup:
``console.js`` reads ``jg-first`` with ``JSON.parse`` and writes every text with ``textContent``.
:func:`script_json` makes sure no text in the data can end the element.

Pure apart from reading the three files (again whenever one of them changes).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

STATIC = Path(__file__).with_name("static")

_STYLE_LINK = b'<link rel="stylesheet" href="static/console.css">'
_SCRIPT_LINK = b'<script src="static/console.js"></script>'
_FIRST = b'<script id="jg-first" type="application/json">'
_SCRIPT_UNSAFE = {c: f"\\u{c:04x}" for c in (ord("<"), ord(">"), ord("&"), 0x2028, 0x2029)}


def script_json(text: str) -> str:
    """JSON text made safe as the content of an HTML ``<script type="application/json">`` element:
    ``<``, ``>``, ``&`` (and U+2028/U+2029) written as JSON escapes, so no ``</script>``, ``<!--``
    or character reference can appear in it; ``JSON.parse`` reads back exactly the same value."""
    return text.translate(_SCRIPT_UNSAFE)


def _sha256(text: bytes) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text).digest()).decode() + "'"


@dataclass(frozen=True)
class Page:
    """The page around its first data: ``before + first + after``, and the policy it is sent with."""

    before: bytes
    after: bytes
    csp: str

    def rest(self, first_json: str) -> bytes:
        """What follows :attr:`before`: ``first_json`` (``api/console``'s answer) made safe, then the
        page's end."""
        return script_json(first_json).encode() + self.after


def build(html: bytes, css: bytes, js: bytes) -> Page:
    """The page of ``html`` with ``css`` and ``js`` inline (ValueError: a link or the first-data
    element missing, or a text that would end its element early)."""
    for name, text in (("css", css), ("js", js)):
        if any(bad in text.lower() for bad in (b"</style", b"</script", b"<!--")):
            raise ValueError(f"console.{name} cannot be inlined: it contains '</style', '</script' or '<!--'")
    for marker in (_STYLE_LINK, _SCRIPT_LINK, _FIRST):
        if html.count(marker) != 1:
            raise ValueError(f"console.html must have {marker.decode()!r} once")
    html = html.replace(_STYLE_LINK, b"<style>" + css + b"</style>")
    html = html.replace(_SCRIPT_LINK, b"<script>" + js + b"</script>")
    before, _, after = html.partition(_FIRST)
    csp = f"default-src 'self'; style-src {_sha256(css)}; script-src {_sha256(js)}"
    return Page(before + _FIRST, after, csp)


_cached: tuple[tuple[int, ...], Page] | None = None


def page() -> Page:
    """The console's page from ``static/`` (built again when a file changes)."""
    global _cached
    paths = [STATIC / name for name in ("console.html", "console.css", "console.js")]
    stamp = tuple(n for path in paths for n in (path.stat().st_mtime_ns, path.stat().st_size))
    if _cached is None or _cached[0] != stamp:
        _cached = (stamp, build(*(path.read_bytes() for path in paths)))
    return _cached[1]


def render(first_json: str) -> tuple[bytes, str]:
    """The page's bytes with ``first_json`` (``api/console``'s answer) as its first data, and its CSP."""
    built = page()
    return built.before + built.rest(first_json), built.csp
