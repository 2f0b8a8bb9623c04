# ruff: noqa: RUF001  (Chinese text and its full-width punctuation on purpose)
"""Neutralising and truncating text from other processes (GPU, user, program and notebook names)."""

from __future__ import annotations

import pytest

from jupyter_gpu.core.text import (
    BIDI_CONTROLS,
    ELLIPSIS,
    REPLACEMENT,
    WIDTH,
    columns,
    display_text,
    neutralize,
    truncate,
    wrap,
)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("evil\u202egnp.ipynb", "evil\ufffdgnp.ipynb"),  # shown "evilbnypi.png" by a bidi renderer
        ("a\u202eevil", "a\ufffdevil"),
        ("x\u2066y\u2069", "x\ufffdy\ufffd"),
        ("name\x1b[2Jcleared", "name\ufffd[2Jcleared"),  # a terminal escape cannot clear the CLI's screen
        ("two\nlines\r", "two\ufffdlines\ufffd"),
        ("\x85\x9b", "\ufffd\ufffd"),  # C1 controls (NEL, CSI)
    ],
)
def test_controls_are_replaced_visibly(raw, shown):
    assert neutralize(raw) == shown


def test_every_bidi_control_is_neutralised_and_rtl_letters_are_kept():
    assert neutralize("".join(sorted(BIDI_CONTROLS))) == REPLACEMENT * len(BIDI_CONTROLS)
    assert neutralize("משתמש مستخدم café") == "משתמש مستخدم café"


def test_truncate_ends_with_an_ellipsis_within_the_limit():
    assert truncate("short", 10) == "short"
    assert truncate("0123456789", 10) == "0123456789"
    cut = truncate("x" * 10_000, 40)
    assert len(cut) == 40 and cut.endswith(ELLIPSIS)
    # A combining accent stays with its letter.
    assert truncate("abcde\u0301fgh", 6) == "abcd" + ELLIPSIS
    with pytest.raises(ValueError, match="max_chars must be at least 1"):
        truncate("abc", 0)


def test_display_text():
    assert display_text(None) == "?"
    assert display_text(None, missing="unknown user") == "unknown user"
    assert display_text(1234) == "1234"
    assert display_text("u\u202e" + "y" * 100, max_chars=10) == "u\ufffd" + "y" * 7 + ELLIPSIS


LONG = (
    "TensorFlow already initialized the GPU in this kernel, so it cannot change the GPU selection, memory "
    "limit and growth any more; raise it with %gpu_limit 16GiB then %gpu_restart, or move with "
    "`%gpu_select 2 --growth`; the report is /home/a-user/projects/deep-learning/runs/2026-11-27/report.json here."
)


def test_wrap_keeps_lines_within_the_width_and_every_word():
    wrapped = wrap(LONG)
    lines = wrapped.splitlines()
    assert len(lines) > 2 and all(len(line) <= WIDTH for line in lines), lines
    assert all(line.startswith("  ") for line in lines[1:])  # continued lines are indented
    assert " ".join(wrapped.split()) == LONG  # nothing lost, nothing broken inside a word
    assert wrap(wrapped) == wrapped  # idempotent


def test_wrap_never_breaks_a_magic_with_its_arguments_a_code_span_or_a_path():
    for width in range(30, 101):
        lines = wrap(LONG, width).splitlines()
        assert any("%gpu_limit 16GiB" in line for line in lines), (width, lines)
        assert any("`%gpu_select 2 --growth`;" in line for line in lines), (width, lines)
        assert any("/home/a-user/projects/deep-learning/runs/2026-11-27/report.json" in line for line in lines)
    # A magic's argument stops at the end of a clause, and at a word that is no argument
    assert wrap("a %gpu_limit off, then text", 12).splitlines() == ["a", "  %gpu_limit off,", "  then text"]
    assert wrap("see %gpu_select auto chooses", 20).splitlines() == ["see %gpu_select auto", "  chooses"]
    # A figure stays with its unit
    assert wrap("JAX: 4 GiB in all, 30 % busy", 10).splitlines() == ["JAX: 4 GiB", "  in all,", "  30 %", "  busy"]


def test_wrap_keeps_each_lines_indent_and_leaves_short_lines_alone():
    text = "Memory limit:\n  GPU 0: at most 4 GiB\n  " + "word " * 30 + "end"
    lines = wrap(text, 60).splitlines()
    assert lines[:2] == ["Memory limit:", "  GPU 0: at most 4 GiB"]
    assert all(line.startswith("    ") for line in lines[3:]) and all(len(line) <= 60 for line in lines)
    assert wrap("  " + "x" * 120, 100) == "  " + "x" * 120  # one word longer than the width: left whole


CHINESE = (
    "TensorFlow 已在此内核中初始化了 GPU，所以无法再更改 GPU 选择、显存上限和显存动态增长；请用 %gpu_limit 16GiB "
    "提高上限，然后运行%gpu_restart 重启内核，或者改用 `%gpu_select 2 --growth`（只剩 4 GiB 空闲，报告在 "
    "/home/a-user/projects/deep-learning/report.json）。"
)


def test_columns_count_east_asian_wide_characters_as_two():
    assert columns("GPU 0") == 5
    assert columns("显存 4 GiB") == 10
    assert columns("（空闲）。") == 10  # fullwidth punctuation too
    assert columns("e\u0301") == 1  # a combining mark takes no column


def test_wrap_breaks_a_chinese_sentence_between_characters_within_the_width():
    for width in range(24, 101):
        wrapped = wrap(CHINESE, width)
        lines = wrapped.splitlines()
        unbreakable = ("  `%gpu_select 2 --growth`", "  /home/a-user/projects/deep-learning/report.json）。")
        assert all(columns(line) <= width or line in unbreakable for line in lines), (width, lines)
        assert "".join("".join(line.split()) for line in lines) == "".join(CHINESE.split()), width  # nothing lost
        assert wrap(wrapped, width) == wrapped  # idempotent
        text = "\n".join(lines)
        assert "%gpu_limit 16GiB" in text and "`%gpu_select 2 --growth`" in text and "4 GiB" in text
        # no line starts with a closing mark nor ends with an opening one
        assert not any(line.lstrip()[:1] in "，。、；）" for line in lines), (width, lines)
        assert not any(line.rstrip()[-1:] in "（" for line in lines), (width, lines)
    # Chinese text fills lines by columns: 100 columns are 50 characters, not 100
    assert wrap("显" * 120) == "显" * 50 + "\n  " + "显" * 49 + "\n  " + "显" * 21


def test_wrap_keeps_a_magic_after_chinese_text_with_its_arguments():
    lines = wrap("请先运行%gpu_select auto:1 --growth，然后再运行单元格", 16).splitlines()
    assert any("%gpu_select auto:1 --growth，" in line for line in lines), lines
    lines = wrap("显存上限为 4 GiB，空闲显存只有 2 GiB。", 12).splitlines()
    assert any("4 GiB，" in line for line in lines) and any("2 GiB。" in line for line in lines), lines
