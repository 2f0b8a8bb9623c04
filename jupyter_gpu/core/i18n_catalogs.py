"""The translation catalogs kept in step with the code: which source files feed which ``.po`` file.

Used by ``scripts/i18n.py`` (``update``: add what was marked, drop what is gone) and by
``tests/test_i18n.py`` (every marked string translated, placeholders kept). Not imported at run time.

Each face has one ``.po`` file per language; :data:`FACES` maps it to the files whose marked strings
it holds. The same English may sit in two faces' files; it must then read the same in both.
Markers: Python ``_``, ``N_``, ``ngettext``, ``pgettext`` (:mod:`jupyter_gpu.core.i18n`); TypeScript
JupyterLab's ``trans.__``, ``trans._n``, ``trans._p``; the console's JavaScript ``__``, ``_n``. A
JupyterLab settings schema (``labextension/schema/*.json``) has no markers: the strings JupyterLab's
server translates in it (:data:`SCHEMA_SELECTORS`, and the schema's own
``jupyter.lab.internationalization`` selectors) are its messages, each with the context Lab looks it
up in (``schema``, ``settings``). A magic's docstring (a method decorated with ``@line_magic`` or
``@cell_magic``: the manual ``%gpu_select?`` shows) is a message too, :func:`inspect.cleandoc`-ed, in
the context :data:`jupyter_gpu.core.i18n.HELP_PAGE` (:func:`magic_manuals`).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_gpu.core.i18n import HELP_PAGE, LOCALE_DIR, placeholders

ROOT = LOCALE_DIR.parent.parent

#: face -> the files (globs relative to the repository) whose strings its ``.po`` holds; first match wins.
FACES: dict[str, tuple[str, ...]] = {
    "lab": ("labextension/src/*.ts", "labextension/src/components/*.ts", "labextension/schema/*.json"),
    "console": ("jupyter_gpu/hub/*.py", "jupyter_gpu/hub/static/*.js"),
    "magics": (
        "jupyter_gpu/kernel/magics/*.py",
        "jupyter_gpu/session/*.py",
        "jupyter_gpu/plan/*.py",
        "jupyter_gpu/frameworks/*.py",
    ),
    "notebook": (
        "jupyter_gpu/kernel/*.py",
        "jupyter_gpu/kernel/oom/*.py",
        "jupyter_gpu/panel/*.py",
        "jupyter_gpu/server/*.py",
    ),
    "terminal": (
        "jupyter_gpu/cli*.py",
        "jupyter_gpu/doctor/*.py",
        "jupyter_gpu/core/*.py",
        "jupyter_gpu/sources/*.py",
        "jupyter_gpu/simulate/*.py",
        "jupyter_gpu/*.py",
    ),
}

PYTHON_KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2), "pgettext": ((1, "c"), 2)}
#: The decorators that make a method a magic: its docstring is the magic's manual.
MAGIC_DECORATORS = frozenset({"line_magic", "cell_magic", "line_cell_magic"})
SCRIPT_KEYWORDS = {"__": None, "_n": (1, 2), "_p": ((1, "c"), 2)}
#: Written into every header, so an update changes a file only where its messages changed.
CATALOG_DATE = datetime(2026, 11, 27, tzinfo=timezone.utc)
#: What jupyterlab_server translates in a settings schema, and in which context: its
#: ``DEFAULT_SCHEMA_SELECTORS`` (``tests/test_i18n_lab.py`` keeps the two equal). A path is the schema's
#: keys joined by ``/`` (a list's element ``key[i]``); a selector matches a whole path.
SCHEMA_SELECTORS: dict[str, str] = {
    "properties/.*/title": "settings",
    "properties/.*/description": "settings",
    "definitions/.*/properties/.*/title": "settings",
    "definitions/.*/properties/.*/description": "settings",
    "title": "schema",
    "description": "schema",
    r"jupyter\.lab\.setting-icon-label": "settings",
    r"jupyter\.lab\.menus/.*/label": "menu",
    r"jupyter\.lab\.toolbars/.*/label": "toolbar",
}
#: The schema key that names its gettext domain and its own selectors (context ``schema``).
SCHEMA_I18N = "jupyter.lab.internationalization"
NOT_SOURCES = ("jupyter_gpu/core/i18n.py", "jupyter_gpu/core/i18n_catalogs.py")


@dataclass(frozen=True)
class Marked:
    """One marked string: its id (a tuple for plurals), context, and where it was found."""

    id: str | tuple[str, str]
    context: str | None
    where: str


def face_files(face: str) -> list[Path]:
    """The source files of one face (a file matched by an earlier face is not repeated)."""
    claimed: set[Path] = set()
    for other, patterns in FACES.items():
        files = sorted({path for pattern in patterns for path in ROOT.glob(pattern)} - claimed)
        files = [path for path in files if path.relative_to(ROOT).as_posix() not in NOT_SOURCES]
        if other == face:
            return files
        claimed.update(files)
    raise KeyError(face)


def schema_strings(schema: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """``(path, context, text)`` of every string JupyterLab's server translates in a settings schema,
    walked as ``jupyterlab_server.translation_utils.translator.translate_schema`` walks it."""
    own = schema.get(SCHEMA_I18N, {}).get("selectors", []) if isinstance(schema.get(SCHEMA_I18N), dict) else []
    patterns = [(re.compile(f"^/{selector}$"), context) for selector, context in SCHEMA_SELECTORS.items()]
    patterns += [(re.compile(f"^/{selector}$"), "schema") for selector in own]
    contexts: dict[str, str] = {}
    for pattern, context in patterns:  # as Lab merges them: a schema's selector equal to a default wins
        contexts[pattern.pattern] = context
    compiled = [(re.compile(pattern), context) for pattern, context in contexts.items()]

    def walk(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, str]]:
        for key, value in node.items():
            path = f"{prefix}/{key}"
            if isinstance(value, str):
                context = next((context for pattern, context in compiled if pattern.fullmatch(path)), None)
                if context is not None:
                    yield path, context, value
            elif isinstance(value, dict):
                yield from walk(value, path)
            elif isinstance(value, list):
                for index, element in enumerate(value):
                    if isinstance(element, dict):
                        yield from walk(element, f"{path}[{index}]")

    yield from walk(schema, "")


def magic_manuals(source: str) -> Iterator[tuple[int, str]]:
    """``(line, manual)`` of every magic in a Python module: the :func:`inspect.cleandoc`-ed docstring of
    each function decorated with one of :data:`MAGIC_DECORATORS` (``@line_magic``, ``@magics.line_magic``),
    the text ``kernel.magics.arguments.help_pages_in_language`` looks up."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = {
            decorator.id if isinstance(decorator, ast.Name) else getattr(decorator, "attr", None)
            for decorator in node.decorator_list
        }
        docstring = ast.get_docstring(node, clean=False)
        if names & MAGIC_DECORATORS and docstring:
            yield node.lineno, inspect.cleandoc(docstring)


def extract(path: Path) -> Iterator[Marked]:
    """The marked strings of one source file (a settings schema's translated strings, :func:`schema_strings`)."""
    from babel.messages.extract import extract as babel_extract

    if path.suffix == ".json":
        schema = json.loads(path.read_text(encoding="utf-8"))
        for pointer, selected, text in schema_strings(schema):
            yield Marked(text, selected, f"{path.relative_to(ROOT).as_posix()}:{pointer}")
        return
    python = path.suffix == ".py"
    with path.open("rb") as source:
        for line, message, _comments, context in babel_extract(
            "python" if python else "javascript",
            source,
            keywords=PYTHON_KEYWORDS if python else SCRIPT_KEYWORDS,
            options={} if python else {"jsx": "false", "template_string": "true"},
        ):
            if isinstance(message, tuple):
                message = (message[0], message[1])
            yield Marked(message, context, f"{path.relative_to(ROOT).as_posix()}:{line}")
    if python:
        for line, manual in magic_manuals(path.read_text(encoding="utf-8")):
            yield Marked(manual, HELP_PAGE, f"{path.relative_to(ROOT).as_posix()}:{line}")


def marked(face: str) -> list[Marked]:
    """Every marked string of one face, in the order of its files."""
    return [item for path in face_files(face) for item in extract(path)]


def po_path(language: str, face: str) -> Path:
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{face}.po"


def problems(language: str) -> list[str]:
    """What keeps a language's catalogs from matching the code (empty when complete)."""
    from babel.messages.pofile import read_po

    found: list[str] = []
    translations: dict[tuple[str | None, str], str] = {}
    for face in FACES:
        path = po_path(language, face)
        if not path.is_file():
            found.append(f"{path.relative_to(ROOT)}: missing (scripts/i18n.py update)")
            continue
        with path.open("rb") as source:
            catalog = read_po(source, locale=language)
        wanted = {(item.context, item.id if isinstance(item.id, str) else item.id[0]): item for item in marked(face)}
        for key, item in wanted.items():
            message = catalog.get(key[1], context=key[0])
            if message is None:
                found.append(f"{item.where}: {key[1]!r} is not in {path.name} (scripts/i18n.py update)")
                continue
            strings = [
                str(s) for s in (message.string if isinstance(message.string, (list, tuple)) else [message.string]) if s
            ]
            if (
                message.fuzzy
                or not strings
                or len(strings) < (len(message.string) if isinstance(message.string, (list, tuple)) else 1)
            ):
                found.append(f"{item.where}: {key[1]!r} has no {language} translation in {path.name}")
                continue
            sources = list(item.id) if isinstance(item.id, tuple) else [item.id]
            for string in strings:
                if placeholders(string) != placeholders(sources[-1]) and placeholders(string) != placeholders(
                    sources[0]
                ):
                    found.append(f"{item.where}: {string!r} does not keep the placeholders of {sources[0]!r}")
            earlier = translations.setdefault(key, strings[0])
            if earlier != strings[0]:
                found.append(f"{key[1]!r} reads {earlier!r} in one face and {strings[0]!r} in {path.name}")
        for message in catalog:
            if not message.id:
                continue
            key = (message.context, message.id if isinstance(message.id, str) else message.id[0])
            if key not in wanted:
                found.append(f"{path.name}: {key[1]!r} is no longer marked in this face (scripts/i18n.py update)")
    return found


def update(language: str) -> list[Path]:
    """Bring each face's ``.po`` in step with the code: add marked strings (taking a translation the
    same English already has in another face), drop strings no longer marked. Returns what changed."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    existing: dict[str, Catalog] = {}
    for face in FACES:
        path = po_path(language, face)
        if path.is_file():
            with path.open("rb") as source:
                existing[face] = read_po(source, locale=language)
    known: dict[tuple[str | None, str], object] = {}
    for catalog in existing.values():
        for message in catalog:
            strings = list(message.string) if isinstance(message.string, (list, tuple)) else [message.string]
            if message.id and not message.fuzzy and all(strings):
                key = (message.context, message.id if isinstance(message.id, str) else message.id[0])
                known.setdefault(key, message.string)
    changed = []
    for face in FACES:
        path = po_path(language, face)
        old = existing.get(face)
        fresh = Catalog(
            locale=language,
            domain=face,
            header_comment=f"# {language} translations of jupyter_gpu's {face} face (docs/i18n.md).",
            project="jupyter_gpu",
            version="",
            msgid_bugs_address="",
            last_translator="jupyter_gpu developers",
            language_team=language,
            creation_date=CATALOG_DATE,
            revision_date=CATALOG_DATE,
            fuzzy=False,
        )
        for item in marked(face):
            key = (item.context, item.id if isinstance(item.id, str) else item.id[0])
            previous = old.get(key[1], context=key[0]) if old is not None else None
            string: object = (
                previous.string if previous is not None else known.get(key, "" if isinstance(item.id, str) else ("",))
            )
            fresh.add(item.id, string, locations=[(item.where.rsplit(":", 1)[0], None)], context=item.context)  # type: ignore[arg-type,list-item]
            if previous is not None and previous.fuzzy:
                fresh[item.id if isinstance(item.id, str) else item.id[0]].flags.add("fuzzy")
        path.parent.mkdir(parents=True, exist_ok=True)
        before = path.read_bytes() if path.is_file() else b""
        with path.open("wb") as target:
            write_po(target, fresh, width=100, omit_header=False, include_lineno=False, no_location=False)
        if path.read_bytes() != before:
            changed.append(path)
    return changed
