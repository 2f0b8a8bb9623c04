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

**Languages.** The page is built once per language (:func:`page`): the texts of ``console.html``
(:data:`PAGE_TEXTS`, every one of them) translated, ``<html lang>`` set, and the script's own
strings (its ``__("…")`` / ``_n(…)``, from ``console.po``) embedded as JSON in
``<script id="jg-i18n" type="application/json">`` (:func:`script_catalog`), made safe by
:func:`script_json` like the data (in English, which needs none, the element is left out). The
script and style are the same in every language, so the CSP is too. Which language a request
gets: :func:`request_language` (``?lang=``, the service's ``--language`` or ``JUPYTER_GPU_LANG``,
the browser's ``Accept-Language``, English).

Pure apart from reading the three files and the catalogs (again whenever one of them changes).
"""

from __future__ import annotations

import base64
import hashlib
import html as html_text
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import i18n
from ..core.i18n import N_

STATIC = Path(__file__).with_name("static")
#: The script whose marked strings the page embeds (their location in ``console.po``).
SCRIPT_SOURCE = "jupyter_gpu/hub/static/console.js"
#: The face whose ``.po`` holds the console's strings.
FACE = "console"
#: Every text of ``console.html`` (each one an element's whole text): :func:`build` translates
#: them and refuses a page with a text missing here, so none stays English by mistake.
PAGE_TEXTS = (
    N_("GPU console – jupyter-gpu"),  # noqa: RUF001 (the title's dash)
    N_("GPU console"),
    N_("loading…"),
    N_("filter by user"),
    N_("GPUs"),
    N_("Users"),
    N_("user"),
    N_("notebook"),
    N_("state"),
    N_("GPU memory"),
    N_("idle for"),
    N_("will be culled in"),
    N_("Usage"),
    N_("window"),
    N_("last day"),
    N_("last 7 days"),
    N_("last 30 days"),
    N_("CSV export"),
    N_("GPU-hours"),
    N_("GiB-hours"),
    N_("busy GPU-hours"),
    N_("idle GPU-hours"),
)
#: ``?lang=`` and ``Accept-Language`` are read up to this many characters (longer: cut).
MAX_LANGUAGE_CHARS = 256
_ACCEPT_ENTRIES = 16
_TEXT_NODE = re.compile(rb">([^<>]*)<")
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{1,8}(?:[-_][A-Za-z0-9]{1,8})*|\*")

_STYLE_LINK = b'<link rel="stylesheet" href="static/console.css">'
_SCRIPT_LINK = b'<script src="static/console.js"></script>'
_FIRST = b'<script id="jg-first" type="application/json">'
_CATALOG = b'<script id="jg-i18n" type="application/json"></script>'
_HTML_LANG = b'<html lang="en">'
_SCRIPT_UNSAFE = {c: f"\\u{ord(c):04x}" for c in ("<", ">", "&", "\u2028", "\u2029")}


def script_json(text: str) -> str:
    """JSON text made safe as the content of an HTML ``<script type="application/json">`` element:
    ``<``, ``>``, ``&`` (and U+2028/U+2029) written as JSON escapes, so no ``</script>``, ``<!--``
    or character reference can appear in it; ``JSON.parse`` reads back exactly the same value.

    One ``str.replace`` per character present (the first data at 200 users is ~130 KB, usually
    without any of them): ``str.translate`` looked up every character, ~9 ms per page on a loaded
    machine. No escape contains one of the five, so the order of the replacements does not matter."""
    for char, escaped in _SCRIPT_UNSAFE.items():
        if char in text:
            text = text.replace(char, escaped)
    return text


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


def accepted_languages(header: str | None) -> list[str]:
    """The languages of an ``Accept-Language`` header, most wanted first (``q=0`` and malformed
    entries left out; equal weights keep the header's order): ``"fr;q=0.5, zh-CN"`` → ``["zh-CN", "fr"]``.
    """
    weighted: list[tuple[float, int, str]] = []
    for position, entry in enumerate((header or "")[:MAX_LANGUAGE_CHARS].split(",")[:_ACCEPT_ENTRIES]):
        tag, _, parameters = entry.strip().partition(";")
        tag = tag.strip()
        if not _LANGUAGE_TAG.fullmatch(tag) or tag == "*":
            continue
        weight = 1.0
        name, _, value = parameters.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value.strip())
            except ValueError:
                continue
            if not 0 < weight <= 1:
                continue
        weighted.append((-weight, position, tag))
    return [tag for _, _, tag in sorted(weighted)]


def request_language(asked: str | None, configured: str | None, accept_language: str | None) -> str:
    """The language of one console request (a catalog's name or ``"en"``), first match wins: the
    page's ``?lang=`` (``asked``), the service's ``--language`` or ``JUPYTER_GPU_LANG``
    (``configured``), the browser's ``Accept-Language``, English. A value naming a language without a
    catalog (``fr``) passes to the next; one naming English (``en``) ends the search."""
    candidates = [
        value[:MAX_LANGUAGE_CHARS]
        for value in (asked, configured)
        if value and _LANGUAGE_TAG.fullmatch(value.strip()[:MAX_LANGUAGE_CHARS].split(".")[0])
    ]
    return i18n.choose([*candidates, *accepted_languages(accept_language)])


def script_catalog(language: str) -> dict[str, Any]:
    """What ``console.js`` reads from ``jg-i18n``: ``{"language": "zh_CN", "messages": {id: text or
    [plural forms]}}`` with the translations of the script's own marked strings (none for English;
    a context is ``context\\x04id``, as in JupyterLab's catalogs)."""
    catalog = i18n.normalize(language)
    messages: dict[str, Any] = {}
    path = i18n.LOCALE_DIR / (catalog or "") / "LC_MESSAGES" / f"{FACE}.po"
    if catalog is None or not path.is_file():
        return {"language": i18n.SOURCE_LANGUAGE, "messages": messages}
    from babel.messages.pofile import read_po

    with path.open("rb") as source:
        po = read_po(source, locale=catalog, domain=FACE)
    for message in po:
        if not message.id or message.fuzzy or all(where != SCRIPT_SOURCE for where, _ in message.locations):
            continue
        key = message.id[0] if isinstance(message.id, (list, tuple)) else message.id
        if message.context:
            key = f"{message.context}\x04{key}"
        strings = [str(s) for s in (message.string if isinstance(message.string, (list, tuple)) else [message.string])]
        if all(strings):
            messages[key] = strings if isinstance(message.id, (list, tuple)) else strings[0]
    return {"language": catalog, "messages": messages}


def translated_html(html: bytes, language: str) -> bytes:
    """``console.html`` in ``language``: each element's text translated, ``<html lang>`` set
    (ValueError: a text missing from :data:`PAGE_TEXTS`)."""
    translations = i18n.translator(language)
    known = set(PAGE_TEXTS)

    def translate(match: re.Match[bytes]) -> bytes:
        text = match.group(1).decode()
        if not text.strip():
            return match.group(0)
        if text not in known:
            raise ValueError(f"console.html's text {text!r} is not in page.PAGE_TEXTS (nothing would translate it)")
        return b">" + html_text.escape(translations.gettext(text), quote=False).encode() + b"<"

    head, style, rest = html.partition(_STYLE_LINK)
    title = _TEXT_NODE.sub(translate, head)  # the <title>
    body = _TEXT_NODE.sub(translate, rest)
    lang = (i18n.normalize(language) or i18n.SOURCE_LANGUAGE).replace("_", "-")
    return (title + style + body).replace(_HTML_LANG, f'<html lang="{lang}">'.encode())


def build(html: bytes, css: bytes, js: bytes, language: str = i18n.SOURCE_LANGUAGE) -> Page:
    """The page of ``html`` in ``language`` with ``css`` and ``js`` inline and the script's catalog
    (ValueError: a link, the catalog's or the first data's element missing, a text of the page with
    no entry in :data:`PAGE_TEXTS`, or a text that would end its element early)."""
    for name, text in (("css", css), ("js", js)):
        if any(bad in text.lower() for bad in (b"</style", b"</script", b"<!--")):
            raise ValueError(f"console.{name} cannot be inlined: it contains '</style', '</script' or '<!--'")
    for marker in (_STYLE_LINK, _SCRIPT_LINK, _FIRST, _CATALOG, _HTML_LANG):
        if html.count(marker) != 1:
            raise ValueError(f"console.html must have {marker.decode()!r} once")
    html = translated_html(html, language)
    catalog = script_catalog(language)
    embedded = script_json(json.dumps(catalog, ensure_ascii=False)).encode()
    # English needs no catalog (the script's own words are English): its element is left out.
    html = html.replace(_CATALOG, _CATALOG.replace(b"></", b">" + embedded + b"</") if catalog["messages"] else b"")
    html = html.replace(_STYLE_LINK, b"<style>" + css + b"</style>")
    html = html.replace(_SCRIPT_LINK, b"<script>" + js + b"</script>")
    before, _, after = html.partition(_FIRST)
    csp = f"default-src 'self'; style-src {_sha256(css)}; script-src {_sha256(js)}"
    return Page(before + _FIRST, after, csp)


_cached: dict[str, tuple[tuple[int, ...], Page]] = {}


def page(language: str = i18n.SOURCE_LANGUAGE) -> Page:
    """The console's page in ``language`` from ``static/`` and the catalogs (built again when a
    file changes)."""
    catalog = i18n.normalize(language) or i18n.SOURCE_LANGUAGE
    paths = [STATIC / name for name in ("console.html", "console.css", "console.js")]
    paths += i18n.catalog_files(catalog) if catalog != i18n.SOURCE_LANGUAGE else []
    stamp = tuple(n for path in paths for n in (path.stat().st_mtime_ns, path.stat().st_size))
    cached = _cached.get(catalog)
    if cached is None or cached[0] != stamp:
        html, css, js = (path.read_bytes() for path in paths[:3])
        cached = (stamp, build(html, css, js, language=catalog))
        _cached[catalog] = cached
    return cached[1]


def render(first_json: str, language: str = i18n.SOURCE_LANGUAGE) -> tuple[bytes, str]:
    """The page's bytes in ``language`` with ``first_json`` (``api/console``'s answer) as its first
    data, and its CSP."""
    built = page(language)
    return built.before + built.rest(first_json), built.csp
