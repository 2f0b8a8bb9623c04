"""Item 4's kernel side: the plan as magic lines, and the offer shown with the too-late warning."""

from __future__ import annotations

import re

import pytest
from plan_state import reset_plan_state
from support import flat

from jupyter_gpu.kernel import magics
from jupyter_gpu.plan import PlanRequest, current_plan, plan_magics


def _renderer_allowed_line() -> re.Pattern[str]:
    """The renderer's whitelist (labextension/src/restart.ts, ALLOWED_LINE), read from its source:
    every line made here must pass it."""
    from pathlib import Path

    source = (Path(__file__).parents[1] / "labextension" / "src" / "restart.ts").read_text()
    found = re.search(r"export const ALLOWED_LINE =\s*/(.+)/;", source)
    assert found is not None, "restart.ts no longer defines ALLOWED_LINE as a regular expression literal"
    return re.compile(found[1])


ALLOWED_LINE = _renderer_allowed_line()


@pytest.mark.parametrize(
    "request_",
    [
        PlanRequest(selection="auto:2", min_free="8GiB", growth=True, limits=("2GiB", "2GiB")),
        PlanRequest(
            selection="1,0", intra_op_threads=4, inter_op_threads=2, soft_placement=True, log_device_placement=False
        ),
        PlanRequest(growth=True, limits=("30%",)),
        PlanRequest(selection="none"),
    ],
)
def test_the_lines_rebuild_the_same_request_in_a_fresh_kernel(shell, request_: PlanRequest) -> None:
    lines = plan_magics(request_)
    assert all(ALLOWED_LINE.match(line) for line in lines), lines
    for line in lines[1:]:
        name, _, arguments = line[1:].partition(" ")
        shell.run_line_magic(name, arguments)
    assert current_plan().request == request_


def test_a_refused_plan_is_offered_for_a_restart_and_kept_for_gpu_restart(
    shell,
    clean,
    monkeypatch,
    capsys,
) -> None:
    import os

    clean.update(lambda s: s["gpus"][0].__setitem__("processes", [{"pid": os.getpid(), "memory_mib": 1024}]))
    shown: list[dict] = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw=False: shown.append(data))
    with pytest.warns(magics.GPUAlreadyInitializedWarning):
        shell.run_line_magic("gpu_select", "1 --growth")
    offer = shown[-1][magics.RESTART_MIME]
    assert offer["lines"] == ["%load_ext jupyter_gpu", "%gpu_select 1 --growth"] and offer["automatic"] is False
    assert "restart the kernel and run first: %gpu_select 1 --growth" in flat(shown[-1]["text/plain"])
    with pytest.warns(magics.GPUAlreadyInitializedWarning):
        shell.run_line_magic("gpu_limit", "4GiB")  # also refused: the offer now has both
    assert shown[-1][magics.RESTART_MIME]["lines"][1:] == ["%gpu_select 1 --growth", "%gpu_limit 4GiB"]
    shell.run_line_magic("gpu_restart", "")
    assert shown[-1][magics.RESTART_MIME]["automatic"] is True
    assert shown[-1][magics.RESTART_MIME]["lines"][1:] == ["%gpu_select 1 --growth", "%gpu_limit 4GiB"]
    reset_plan_state()


def test_the_expression_the_extension_evaluates_after_a_restart_works(shell) -> None:
    """labextension/src/restart.ts evaluates SUMMARY in the new kernel; a renamed function would make
    the button's "Kernel restarted; GPU plan applied: …" never come. The string there is this one, and
    it evaluates to the plan in force."""
    from pathlib import Path

    from jupyter_gpu.kernel.restart_offer import SUMMARY_EXPRESSION
    from jupyter_gpu.session.report import summary

    source = (Path(__file__).parents[1] / "labextension" / "src" / "restart.ts").read_text()
    found = re.search(r'export const SUMMARY =\s*"([^"]+)"', source)
    assert found is not None, "restart.ts no longer defines SUMMARY as a string"
    assert found[1] == SUMMARY_EXPRESSION
    shell.run_line_magic("gpu_select", "1 --growth")
    assert eval(SUMMARY_EXPRESSION) == summary(current_plan())  # what the kernel answers
    assert "GPU 1" in eval(SUMMARY_EXPRESSION)
    # What the extension reads: the value's text/plain in the reply's user_expressions, a JSON string.
    import json

    reply = shell.user_expressions({"plan": SUMMARY_EXPRESSION})["plan"]
    assert reply["status"] == "ok"
    assert json.loads(reply["data"]["text/plain"]) == summary(current_plan())


def test_the_summary_survives_quotes_and_new_lines(monkeypatch) -> None:
    """A Python repr cut at its outer quotes kept "it's" double-quoted and showed \\n literally."""
    import json

    from jupyter_gpu.kernel import restart_offer
    from jupyter_gpu.session import report as plan_report

    text = "GPU 1 'Tesla' \"x\"\nback\\slash ü"
    monkeypatch.setattr(plan_report, "summary", lambda plan: text)
    value = restart_offer.applied_plan_summary()
    assert value == text
    assert json.loads(repr(value)) == text


@pytest.mark.parametrize(
    "request_",
    [
        PlanRequest(selection="auto:2 --wait 168h"),  # one spec with spaces, as `%gpu_select "auto:2 --wait 168h"`
        PlanRequest(selection="auto:1", min_free="999GiB --w 1h"),
    ],
)
def test_an_offer_that_could_wait_in_the_new_kernel_is_never_made(monkeypatch, request_: PlanRequest) -> None:
    from jupyter_gpu.kernel import restart_offer

    shown: list[dict] = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw=False: shown.append(data))
    restart_offer.offer_restart(request_, "test", automatic=True)
    assert len(shown) == 1 and restart_offer.RESTART_MIME not in shown[0]
    assert "could keep the new kernel waiting" in shown[0]["text/plain"]


@pytest.mark.parametrize(
    ("line", "blocking"),
    [
        ("%gpu_select auto:2 --min-free 8GiB --growth", None),
        ("%gpu_select --no-growth", None),
        ("%gpu_select auto:2 --wait 1h", "--wait"),
        ("%gpu_select auto:2 --wai 1h", "--wai"),
        ("%gpu_limit 4GiB", None),
    ],
)
def test_blocking_option(line: str, blocking: str | None) -> None:
    from jupyter_gpu.kernel.restart_offer import blocking_option

    assert blocking_option(line) == blocking


def test_the_text_shows_every_line_but_an_exact_load_ext_first() -> None:
    from jupyter_gpu.kernel.restart_offer import shown_lines

    assert shown_lines(["%load_ext jupyter_gpu", "%gpu_select 1"]) == "%gpu_select 1"
    assert shown_lines(["%load_ext jupyter_gpu"]) == "%load_ext jupyter_gpu"
    assert shown_lines(["%gpu_select 0", "%gpu_limit 1"]) == "%gpu_select 0; %gpu_limit 1"


def test_gpu_watch_is_carried_over_with_the_plan(shell, monkeypatch, capsys) -> None:
    """A restart by jupyter_gpu carries the kernel's jupyter_gpu settings: the plan and %gpu_watch,
    as lines the renderer accepts; the new kernel's summary says the watch is on."""
    import json

    from jupyter_gpu.kernel import monitor_magics, restart_offer

    monitor_magics.register(shell)
    try:
        shown: list[dict] = []
        monkeypatch.setattr("IPython.display.display", lambda data, raw=False: shown.append(data))
        shell.run_line_magic("gpu_select", "1")
        shell.run_line_magic("gpu_restart", "")
        assert shown[-1][restart_offer.RESTART_MIME]["lines"] == ["%load_ext jupyter_gpu", "%gpu_select 1"]
        shell.run_line_magic("gpu_watch", "on --interval 0.5")
        shell.run_line_magic("gpu_restart", "")
        lines = shown[-1][restart_offer.RESTART_MIME]["lines"]
        assert lines == ["%load_ext jupyter_gpu", "%gpu_select 1", "%gpu_watch on --interval 0.5"]
        assert all(ALLOWED_LINE.match(line) for line in lines), lines
        assert "%gpu_select 1; %gpu_watch on --interval 0.5" in flat(shown[-1]["text/plain"])
        assert json.loads(repr(restart_offer.applied_plan_summary())).endswith("; %gpu_watch on")
        shell.run_line_magic("gpu_watch", "on --interval 0.2")  # the default interval: no option
        assert restart_offer.carried_lines(current_plan().request)[-1] == "%gpu_watch on"
        # The lines rebuild the watch in a fresh kernel (here: after turning it off)
        shell.run_line_magic("gpu_watch", "off")
        assert restart_offer.watch_lines(shell) == []
        name, _, arguments = lines[2][1:].partition(" ")
        shell.run_line_magic(name, arguments)
        assert restart_offer.watch_lines(shell) == ["%gpu_watch on --interval 0.5"]
    finally:
        monitor_magics.unregister(shell)
