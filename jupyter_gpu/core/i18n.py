"""Translations: every face speaks the user's language (docs/i18n.md is the guide and the glossary).

**Marking text.** A sentence a person reads goes through one of these, with named ``str.format``
placeholders filled *after* translation (a translator may move them)::

    from jupyter_gpu.core.i18n import _, ngettext, pgettext, N_

    _("GPU {index} is free").format(index=2)
    ngettext("{count} GPU", "{count} GPUs", count).format(count=count)
    pgettext("button", "Free")       # where one English word has two meanings
    HELP = N_("the GPUs to use")     # marked where it is defined, translated where it is shown: _(HELP)

Never an f-string inside ``_()`` (it would be looked up already filled in), never a sentence built
from translated fragments. Machine-readable output (``--json``, API fields, Prometheus names and
labels, admin logs) is never translated; numbers, dates and units stay as they are
(:mod:`jupyter_gpu.core.units`).

**Catalogs.** The sources are gettext ``.po`` files in ``jupyter_gpu/locale/<language>/LC_MESSAGES/``,
one per face (``magics.po``, ``notebook.po``, ``terminal.po``, ``console.po``, ``lab.po``); a
language's catalog is all of them together, read directly (with Babel, only once a non-English
language is chosen: English costs nothing). ``lab.po`` also becomes the JupyterLab extension's
``jupyter_gpu.json`` at build time (:func:`lab_catalog`, ``labextension/build_hook.py``), which
JupyterLab's translation server finds through the ``jupyterlab.locale`` entry point.
``tests/test_i18n.py`` fails on a marked string without a translation, a translation whose
placeholders differ, and a translation of a string that no longer exists.

**Choosing the language**, first match wins:

0. inside :func:`language_forced`, its language (that thread's or asyncio task's alone);
1. :func:`set_language` (the ``language`` traitlets of the kernel, the server and the hub service);
2. ``JUPYTER_GPU_LANG``;
3. in a kernel started by Jupyter, the language chosen in JupyterLab's Settings → Language (the
   user's settings file, :func:`lab_language`);
4. the standard variables ``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG`` (as gettext reads them).

A value names a language as people write it (``zh_CN``, ``zh-CN``, ``zh_CN.UTF-8``, ``zh``); one
with no catalog (``C``, ``en_US``, ``fr``) means English. The hub console chooses per request
(:func:`jupyter_gpu.hub.page.request_language`: the page's ``?lang=``, the service's ``--language``
or ``JUPYTER_GPU_LANG``, the browser's ``Accept-Language``) and answers in it with
:func:`language_forced` and :func:`translator`.

Pure: the standard library, and Babel only to read a catalog.
"""

from __future__ import annotations

import contextvars
import functools
import gettext
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The gettext domain, and JupyterLab's name for the extension's catalog (``jupyter_gpu.json``).
DOMAIN = "jupyter_gpu"
#: Where the catalogs live: ``<language>/LC_MESSAGES/*.po``.
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
#: Forces a language for every face (``zh_CN``, ``en``).
ENV = "JUPYTER_GPU_LANG"
#: The variables gettext reads, in its order.
STANDARD_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
#: The language every source string is written in.
SOURCE_LANGUAGE = "en"
#: JupyterLab's language setting: plugin and file under the user-settings folder.
LAB_SETTINGS_FILE = Path("@jupyterlab", "translation-extension", "plugin.jupyterlab-settings")
#: The catalog JupyterLab's front end reads (built from it).
LAB_SOURCE = "lab.po"

_forced: str | None = None  # set_language: the whole process's
#: language_forced: one block's, seen only by its own thread and asyncio task (a request answered in
#: its asker's language while the sampler's thread or another request's task goes on in theirs).
_scoped: contextvars.ContextVar[str | None] = contextvars.ContextVar("jupyter_gpu_language", default=None)


def available_languages() -> tuple[str, ...]:
    """The languages with a catalog, English (the source) first: ``("en", "zh_CN")``."""
    return _languages_in(LOCALE_DIR)


@functools.lru_cache(maxsize=4)
def _languages_in(folder: Path) -> tuple[str, ...]:
    """Listed once per folder and process: every ``_()`` in a non-English language asks (through
    :func:`normalize`), and the installed catalogs do not change while a process runs."""
    found = sorted(path.name for path in folder.iterdir() if (path / "LC_MESSAGES").is_dir()) if folder.is_dir() else []
    return (SOURCE_LANGUAGE, *found)


def normalize(value: str) -> str | None:
    """The catalog a language name asks for, or None for English or a language with none.

    ``zh_CN.UTF-8``, ``zh-CN``, ``zh-cn``, ``zh_CN@x`` and ``zh`` all mean ``zh_CN`` (the one Chinese
    catalog); ``C``, ``POSIX``, ``en_US`` and ``fr`` mean English.
    """
    name = value.strip().split(".")[0].split("@")[0].replace("-", "_")
    if not name or name in ("C", "POSIX"):
        return None
    language, _, territory = name.partition("_")
    catalogs = available_languages()[1:]
    wanted = f"{language.lower()}_{territory.upper()}" if territory else language.lower()
    for catalog in catalogs:
        if catalog == wanted:
            return catalog
    for catalog in catalogs:  # a language alone (zh), or another territory of it, takes its one catalog
        if catalog.split("_")[0] == language.lower():
            return catalog
    return None


def choose(candidates: Iterable[str]) -> str:
    """The first candidate with a catalog, or English: ``choose(["fr", "zh-CN"]) == "zh_CN"``.

    A candidate that names English (``en``, ``en_US``, ``C``) ends the search: English was asked for.
    """
    for candidate in candidates:
        if not candidate.strip():
            continue
        if candidate.strip().split("_")[0].split("-")[0].lower() in ("en", "c", "posix"):
            return SOURCE_LANGUAGE
        catalog = normalize(candidate)
        if catalog:
            return catalog
    return SOURCE_LANGUAGE


def set_language(value: str | None) -> None:
    """Force this process's language (``None`` or ``""``: choose again from the environment)."""
    global _forced
    _forced = value or None


def forced_language() -> str | None:
    """What :func:`set_language` forced for this process, or None."""
    return _forced


@contextmanager
def language_forced(value: str | None) -> Iterator[None]:
    """Run a block in one language (tests, a face that answers one request in its asker's).

    Only this thread, or this asyncio task, speaks it: other threads and tasks keep theirs (a
    context variable), so a server may answer two requests in two languages at once. ``None`` or
    ``""``: the block has no language of its own (the process's choice, :func:`set_language`, or
    the environment)."""
    token = _scoped.set(value or None)
    try:
        yield
    finally:
        _scoped.reset(token)


def lab_settings_dir() -> Path:
    """JupyterLab's user-settings folder, as JupyterLab finds it (``JUPYTERLAB_SETTINGS_DIR``)."""
    explicit = os.environ.get("JUPYTERLAB_SETTINGS_DIR")
    if explicit:
        return Path(explicit)
    config_dir = os.environ.get("JUPYTER_CONFIG_DIR") or str(Path.home() / ".jupyter")
    return Path(config_dir, "lab", "user-settings")


def lab_language() -> str | None:
    """The language chosen in JupyterLab's Settings → Language, or None (``default``, unreadable)."""
    path = lab_settings_dir() / LAB_SETTINGS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return _lab_locale_from(text)


def _lab_locale_from(text: str) -> str | None:
    try:
        import json5  # JupyterLab saves JSON5 (comments): its own reader where installed

        settings: Any = json5.loads(text)
    except ImportError:
        try:
            settings = json.loads(_without_line_comments(text))
        except ValueError:
            return None
    except ValueError:
        return None
    locale = settings.get("locale") if isinstance(settings, dict) else None
    if not isinstance(locale, str) or locale in ("", "default"):
        return None
    return locale


def _without_line_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _started_by_jupyter() -> bool:
    """A kernel a Jupyter server started (jupyter_client sets ``JPY_PARENT_PID``)."""
    return "JPY_PARENT_PID" in os.environ


def language() -> str:
    """This process's language now (the rules in the module docstring): ``"en"`` or a catalog."""
    scoped = _scoped.get()
    if scoped:
        return choose([scoped])
    if _forced:
        return choose([_forced])
    explicit = os.environ.get(ENV, "")
    if explicit.strip():
        return choose([explicit])
    if _started_by_jupyter():
        chosen_in_lab = _cached_lab_language()
        if chosen_in_lab:
            return choose([chosen_in_lab])
    for variable in STANDARD_VARIABLES:
        value = os.environ.get(variable, "")
        if value:
            return choose(value.split(":"))  # LANGUAGE is a list: zh_CN:en
    return SOURCE_LANGUAGE


@functools.lru_cache(maxsize=1)
def _cached_lab_language() -> str | None:
    """Read once per process: a kernel speaks the language Lab had when it started."""
    return lab_language()


def catalog_files(language_: str, root: Path | None = None) -> list[Path]:
    """The ``.po`` sources of one language (under ``root``, by default :data:`LOCALE_DIR`), sorted."""
    folder = (root or LOCALE_DIR) / language_ / "LC_MESSAGES"
    return sorted(folder.glob("*.po")) if folder.is_dir() else []


def translator(language_: str) -> gettext.NullTranslations:
    """The translations of one language (all its ``.po`` files), or the source text for English.

    Any spelling of a language (``zh-CN``, ``zh_CN.UTF-8``) shares one catalog, read once per process.
    """
    catalog = normalize(language_)
    if catalog is None:
        return gettext.NullTranslations()
    return _translations(LOCALE_DIR, catalog)


@functools.lru_cache(maxsize=8)
def _translations(folder: Path, catalog: str) -> gettext.NullTranslations:
    """The ``.po`` files of ``catalog`` under ``folder``, merged and compiled (see :func:`translator`)."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    merged = None
    for path in catalog_files(catalog, folder):
        with path.open("rb") as source:
            part = read_po(source, locale=catalog, domain=DOMAIN)
        if merged is None:
            merged = part
            continue
        for message in part:
            key = message.id if isinstance(message.id, str) else message.id[0]
            # by id *and* context: "; " in one file and ("clause separator", "; ") in another are two messages
            if message.id and merged.get(key, context=message.context) is None:
                merged[message.id] = message
    if merged is None:
        return gettext.NullTranslations()
    compiled = io.BytesIO()
    write_mo(compiled, merged)  # fuzzy entries left out, as msgfmt does
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def _(message: str) -> str:
    """``message`` in this process's language."""
    lang = language()
    if lang == SOURCE_LANGUAGE:
        return message
    return translator(lang).gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    """The singular or plural form for ``count``, in this process's language (fill in ``{count}`` after)."""
    lang = language()
    if lang == SOURCE_LANGUAGE:
        return singular if count == 1 else plural
    return translator(lang).ngettext(singular, plural, count)


def pgettext(context: str, message: str) -> str:
    """``message`` in the sense ``context`` names (``pgettext("button", "Free")``)."""
    lang = language()
    if lang == SOURCE_LANGUAGE:
        return message
    return translator(lang).pgettext(context, message)


#: The context of a magic's manual (its docstring, the long help of ``%gpu_select?``) in the catalogs:
#: the docstring itself, :func:`inspect.cleandoc`-ed, is the message (``core.i18n_catalogs`` extracts it).
HELP_PAGE = "help page"


def N_(message: str) -> str:
    """Mark ``message`` for translation where it is defined; translate it with :func:`_` where shown."""
    return message


#: ``{name}`` placeholders (Python) and ``%1`` (JupyterLab's trans.__) in a message.
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?:[:!][^{}]*)?\}|%\d+")


def placeholders(message: str) -> list[str]:
    """The placeholders of a message, sorted, to compare a translation with its source."""
    return sorted(PLACEHOLDER.findall(message))


def lab_catalog(language_: str) -> dict[str, Any]:
    """``lab.po`` of one language as JupyterLab's translation server serves it (``jupyter_gpu.json``).

    The Jed format JupyterLab's ``TranslationBundle`` reads: ``""`` holds the domain, language,
    plural forms and version; each message maps to its translations (a context is ``context\\x04id``).
    Two rules of JupyterLab's ``Gettext`` that a catalog must follow to be read at all: the language
    is a BCP 47 tag (``zh-CN``: Lab looks its own ``zh-CN``/``zh`` up, never ``zh_CN``), and a plural
    message has at least two entries, a singular one exactly one (Lab tells them apart by length;
    a language with one plural form gets an unused ``""`` second entry, as the zh-CN pack has).
    """
    from babel.messages.pofile import read_po

    path = LOCALE_DIR / language_ / "LC_MESSAGES" / LAB_SOURCE
    with path.open("rb") as source:
        catalog = read_po(source, locale=language_, domain=DOMAIN)
    data: dict[str, Any] = {
        "": {
            "domain": DOMAIN,
            "language": language_.replace("_", "-"),
            "plural_forms": catalog.plural_forms,
            "version": DOMAIN,  # compared only with a language pack of the same domain: none
        }
    }
    for message in catalog:
        if not message.id or message.fuzzy:
            continue
        key = message.id[0] if isinstance(message.id, (list, tuple)) else message.id
        if message.context:
            key = f"{message.context}\x04{key}"
        strings = list(message.string) if isinstance(message.string, (list, tuple)) else [message.string]
        if all(strings):
            plural = isinstance(message.id, (list, tuple))
            data[key] = [*strings, ""] if plural and len(strings) == 1 else strings
    return data


def write_lab_catalogs() -> list[Path]:
    """Write ``jupyter_gpu.json`` next to every language's ``lab.po`` (the build does this)."""
    written = []
    for language_ in available_languages()[1:]:
        if not (LOCALE_DIR / language_ / "LC_MESSAGES" / LAB_SOURCE).is_file():
            continue
        target = LOCALE_DIR / language_ / "LC_MESSAGES" / f"{DOMAIN}.json"
        text = json.dumps(lab_catalog(language_), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":  # python -m jupyter_gpu.core.i18n: rebuild the JupyterLab catalogs after editing lab.po
    for written_path in write_lab_catalogs():
        print(written_path)
