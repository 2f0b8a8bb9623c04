"""Translations (jupyter_gpu.core.i18n): the language chosen, the catalogs complete and consistent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu.core import i18n, i18n_catalogs

LANGUAGES = i18n.available_languages()[1:]


@pytest.fixture(autouse=True)
def chosen_by_environment(monkeypatch: Any, tmp_path: Path) -> None:
    for variable in (i18n.ENV, "JPY_PARENT_PID", *i18n.STANDARD_VARIABLES):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(tmp_path / "lab-settings"))
    i18n._cached_lab_language.cache_clear()
    i18n.set_language(None)


def test_chinese_has_a_catalog() -> None:
    assert "zh_CN" in LANGUAGES


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_marked_string_is_translated_with_its_placeholders(language: str) -> None:
    problems = i18n_catalogs.problems(language)
    assert not problems, f"{len(problems)} to do (scripts/i18n.py update {language}, then translate):\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    ("value", "catalog"),
    [
        ("zh_CN.UTF-8", "zh_CN"),
        ("zh-CN", "zh_CN"),
        ("zh-cn", "zh_CN"),
        ("zh", "zh_CN"),
        ("zh_TW", "zh_CN"),
        ("C", None),
        ("POSIX", None),
        ("en_US.UTF-8", None),
        ("fr_FR", None),
        ("", None),
    ],
)
def test_language_names_are_read_as_people_write_them(value: str, catalog: str | None) -> None:
    assert i18n.normalize(value) == catalog


def test_the_standard_variables_choose_in_gettexts_order(monkeypatch: Any) -> None:
    assert i18n.language() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.language() == "zh_CN"
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # LC_ALL outranks LANG
    assert i18n.language() == "en"
    monkeypatch.setenv("LANGUAGE", "fr:zh_CN:en")  # a list: the first with a catalog
    assert i18n.language() == "zh_CN"


def test_the_setting_and_the_variable_force_a_language(monkeypatch: Any) -> None:
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv(i18n.ENV, "en")
    assert i18n.language() == "en"
    i18n.set_language("zh-CN")
    assert i18n.language() == "zh_CN"
    with i18n.language_forced("en"):
        assert i18n.language() == "en"
    assert i18n.language() == "zh_CN"


def test_a_kernel_started_by_jupyter_follows_the_language_chosen_in_lab(monkeypatch: Any, tmp_path: Path) -> None:
    settings = tmp_path / "lab-settings" / i18n.LAB_SETTINGS_FILE
    settings.parent.mkdir(parents=True)
    settings.write_text('{\n  // chosen in Settings -> Language\n  "locale": "zh_CN"\n}\n')
    assert i18n.language() == "en"  # not a kernel
    monkeypatch.setenv("JPY_PARENT_PID", "1")
    assert i18n.language() == "zh_CN"
    monkeypatch.setenv(i18n.ENV, "en")
    assert i18n.language() == "en"


def test_labs_default_and_an_unreadable_setting_choose_nothing(tmp_path: Path) -> None:
    settings = tmp_path / "lab-settings" / i18n.LAB_SETTINGS_FILE
    settings.parent.mkdir(parents=True)
    for text in ('{"locale": "default"}', "{not json", '["zh_CN"]', '{"locale": 7}'):
        settings.write_text(text)
        assert i18n.lab_language() is None


def test_english_is_the_source_and_costs_no_catalog() -> None:
    i18n._translations.cache_clear()
    assert i18n._("GPU memory") == "GPU memory"
    assert i18n.ngettext("{count} GPU", "{count} GPUs", 2) == "{count} GPUs"
    assert i18n._translations.cache_info().currsize == 0


def test_placeholders_are_compared_by_name() -> None:
    assert i18n.placeholders("GPU {index} of {count:d}, %1") == ["%1", "{count:d}", "{index}"]


def test_lab_catalog_is_in_jupyterlabs_format() -> None:
    data = i18n.lab_catalog("zh_CN")
    assert data[""]["domain"] == "jupyter_gpu" and data[""]["plural_forms"] == "nplurals=1; plural=0;"
    assert all(isinstance(value, list) for key, value in data.items() if key)


def test_the_built_lab_catalog_matches_lab_po() -> None:
    """The file JupyterLab reads is the build's output of lab.po (pip install -e . or scripts/i18n.py update)."""
    for language in LANGUAGES:
        built = i18n.LOCALE_DIR / language / "LC_MESSAGES" / f"{i18n.DOMAIN}.json"
        assert built.is_file(), f"{built} not built: scripts/i18n.py update"
        assert json.loads(built.read_text(encoding="utf-8")) == i18n.lab_catalog(language), (
            f"{built} is stale: scripts/i18n.py update"
        )


def test_a_languages_po_files_are_read_together_fuzzy_left_out(monkeypatch: Any, tmp_path: Path) -> None:
    folder = tmp_path / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    header = (
        'msgid ""\nmsgstr ""\n"Language: zh_CN\\n"\n"Plural-Forms: nplurals=1; plural=0;\\n"\n'
        '"Content-Type: text/plain; charset=utf-8\\n"\n\n'
    )
    (folder / "a.po").write_text(
        header + 'msgid "GPU memory"\nmsgstr "显存"\n\n#, fuzzy\nmsgid "Idle"\nmsgstr "忙"\n', encoding="utf-8"
    )
    (folder / "b.po").write_text(
        header + 'msgid "{count} GPU"\nmsgid_plural "{count} GPUs"\nmsgstr[0] "{count} 张显卡"\n\n'
        'msgctxt "button"\nmsgid "Free"\nmsgstr "释放"\n\n'
        'msgid "; "\nmsgstr " / "\n\nmsgctxt "between names"\nmsgid "; "\nmsgstr "、"\n',
        encoding="utf-8",
    )
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)  # a catalog cached by its folder: no clearing needed
    try:
        i18n.set_language("zh_CN")
        assert i18n._("GPU memory") == "显存"
        assert i18n._("Idle") == "Idle"  # fuzzy: not trusted
        assert i18n.ngettext("{count} GPU", "{count} GPUs", 3).format(count=3) == "3 张显卡"
        assert i18n.pgettext("button", "Free") == "释放" and i18n._("Free") == "Free"
        # one id with and without a context, in a file read after the first: two messages, both kept
        assert i18n._("; ") == " / " and i18n.pgettext("between names", "; ") == "、"
    finally:
        i18n.set_language(None)


def test_a_language_is_found_once_whatever_its_spelling(monkeypatch: Any) -> None:
    """Every spelling shares one compiled catalog, and a message in Chinese lists no folder."""
    assert i18n.translator("zh-CN") is i18n.translator("zh_CN.UTF-8") is i18n.translator("zh")
    listed: list[Path] = []
    real_iterdir = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: listed.append(self) or real_iterdir(self))
    with i18n.language_forced("zh_CN"):
        for _ in range(100):
            assert i18n._("GPU memory") != "GPU memory"
    assert listed == []
