"""The JupyterLab face's catalog (lab.po -> jupyter_gpu.json) as JupyterLab itself reads it.

What the browser tests show end to end (tests/browser/test_lab_i18n.py), checked here without a
browser: every marked string of labextension/src is extracted, the built catalog follows the rules
of JupyterLab's ``Gettext`` (labextension/node_modules/@jupyterlab/translation/lib/gettext.js), and
JupyterLab's translation server finds it through the ``jupyterlab.locale`` entry point.
"""

# ruff: noqa: RUF001  (Chinese text is written with full-width punctuation: docs/i18n.md)

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_gpu.core import i18n, i18n_catalogs

#: A marker call as the TypeScript writes it: ``trans.__(``, ``trans._n(``, ``trans._p(``.
MARKER = re.compile(r"\btrans\.(__|_n|_p)\(")
#: Comments (their examples are not calls); a `//` inside a string only hides the rest of its line.
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def test_every_marker_call_in_the_extension_is_extracted() -> None:
    """Babel's JavaScript reader skips a call inside a template literal (``${trans.__('x')}``) and one
    inside another marker call's arguments (``trans.__('a: %1', x ?? trans.__('b'))``): such a string
    would never reach lab.po and would stay English in every language."""
    for path in i18n_catalogs.face_files("lab"):
        if path.suffix != ".ts":
            continue  # a settings schema has no marker calls (tests/test_i18n_lab_settings.py)
        code = COMMENT.sub("", path.read_text(encoding="utf-8"))
        calls = len(MARKER.findall(code))
        extracted = len(list(i18n_catalogs.extract(path)))
        assert calls == extracted, f"{path.name}: {calls} marker calls, {extracted} extracted (one inside `${{}}`?)"


def test_the_extension_marks_its_strings() -> None:
    """The face is marked at all: the sidebar's, status bar's and dialogs' words are in lab.po."""
    ids = {item.id if isinstance(item.id, str) else item.id[0] for item in i18n_catalogs.marked("lab")}
    for message in (
        "GPU monitor",
        "%1/%2 GPUs in use",
        "Restart kernel and apply",
        "Restart kernel and apply the GPU plan?",
        "Free GPU memory?",
        "Shut down kernel?",
    ):
        assert message in ids


def test_the_catalog_names_its_language_as_jupyterlab_looks_it_up() -> None:
    """Lab looks a bundle up as ``zh-CN`` then ``zh`` (``Gettext.expandLocale``): ``zh_CN`` is never found."""
    assert i18n.lab_catalog("zh_CN")[""]["language"] == "zh-CN"


def test_plural_messages_have_two_entries_and_singular_ones_one() -> None:
    """Lab's ``dcnpgettext`` takes a plural translation only with more than one entry, a singular one
    only with exactly one; Chinese has one plural form, so the second entry is an unused ``""``."""
    data = i18n.lab_catalog("zh_CN")
    plural_ids = {item.id[0] for item in i18n_catalogs.marked("lab") if not isinstance(item.id, str)}
    assert plural_ids, "the extension has plural messages (trans._n)"
    for key, value in data.items():
        if not key:
            continue
        message_id = key.rpartition("\x04")[2]
        if message_id in plural_ids:
            assert len(value) >= 2 and value[0], key
        else:
            assert len(value) == 1 and value[0], key


def test_a_context_is_joined_as_jupyterlab_joins_it() -> None:
    data = i18n.lab_catalog("zh_CN")
    assert data["button: free GPU memory\x04Free"] == ["释放"]
    assert data["Free GPU memory?"] == ["释放显存？"]


def test_jupyterlabs_translation_server_serves_the_catalog() -> None:
    """``GET lab/api/translations/zh_CN`` answers what ``get_language_pack`` returns: the zh-CN pack's
    domains and, through our ``jupyterlab.locale`` entry point, ``jupyter_gpu``."""
    translation_utils = pytest.importorskip("jupyterlab_server.translation_utils")
    built = i18n.LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / f"{i18n.DOMAIN}.json"
    assert built.is_file(), "scripts/i18n.py update builds it"
    found, message = translation_utils.get_installed_packages_locale("zh_CN")
    assert not message.strip(), message
    assert Path(i18n.__file__).resolve().parents[1] == (i18n.LOCALE_DIR.parent).resolve()
    assert found["jupyter_gpu"] == i18n.lab_catalog("zh_CN")
    assert found["jupyter_gpu"]["GPU monitor"] == ["GPU 监视器"]
