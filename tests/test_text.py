"""Neutralising and truncating text from other processes (GPU, user, program and notebook names)."""

from __future__ import annotations

import pytest

from jupyter_gpu.core.text import BIDI_CONTROLS, ELLIPSIS, REPLACEMENT, display_text, neutralize, truncate


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
