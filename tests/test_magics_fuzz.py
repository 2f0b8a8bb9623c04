"""Issue 9, item 11: every argument line either works or is one UsageError line, and a refusal changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from plan_state import state

TOKENS = st.sampled_from(
    [
        "0",
        "1",
        "3",
        "1,2",
        "auto",
        "auto:2",
        "all",
        "none",
        "GPU-",
        "off",
        "2GiB",
        "30%",
        "--growth",
        "--no-growth",
        "--min-free",
        "--intra",
        "--inter",
        "-1",
        "²",
        "٣",
        "1e5",
        "9" * 400,
        '"',
        "'",
        "\\",
        "\x00",
        ",",
        "%",
        "--",
        "-h",
    ]
)
LINES = st.one_of(st.text(max_size=30), st.lists(st.one_of(TOKENS, st.text(max_size=6)), max_size=5).map(" ".join))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(magic=st.sampled_from(["gpu_select", "gpu_limit", "gpu_threads"]), line=LINES)
@example(magic="gpu_select", line="²")
@example(magic="gpu_limit", line="9" * 400)
@example(magic="gpu_limit", line='1 "')
@example(magic="gpu_threads", line="--intra " + "9" * 400)
def test_any_line_works_or_is_one_usage_error_that_changes_nothing(shell, capsys, magic: str, line: str) -> None:
    before = state()
    try:
        shell.run_line_magic(magic, line)
    except UsageError as error:
        assert "\n" not in str(error).strip(), str(error)
        assert state() == before
    except SystemExit:  # argparse's -h prints the help and exits, as for every IPython magic
        pytest.fail("a magic must not exit")
    capsys.readouterr()
