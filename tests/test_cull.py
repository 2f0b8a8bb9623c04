"""The GPU-aware idle and culling rule (core.culling) and the server culler's choices (server.cull),
without a server: plain values in, decisions out."""

from __future__ import annotations

import pytest

from jupyter_gpu.core.culling import cull_in_s, cull_warning, is_idle
from jupyter_gpu.server.cull import (
    Due,
    cull_every_s,
    cull_record,
    culled_message,
    due_kernels,
    kept_message,
    ran_since,
)


@pytest.mark.parametrize(
    ("idle_s", "holds", "expected"),
    [(None, True, False), (59.9, True, False), (60.0, True, True), (3600.0, False, False), (61.0, True, True)],
)
def test_a_kernel_is_idle_when_it_holds_gpu_memory_and_waited_the_threshold(idle_s, holds, expected):
    assert is_idle(idle_s, holds, 60.0) is expected


def test_the_countdown_runs_only_for_an_idle_kernel_holding_memory_while_culling_is_on():
    assert cull_in_s(10.0, True, False, 60.0) == 50.0
    assert cull_in_s(90.0, True, False, 60.0) == 0.0  # due now, never negative
    assert cull_in_s(10.0 + 1 / 3, True, False, 60.0) == 49.667  # rounded to milliseconds
    assert cull_in_s(10.0, True, False, 0.0) is None  # culling off
    assert cull_in_s(10.0, False, False, 60.0) is None  # no GPU memory: never culled
    assert cull_in_s(10.0, True, True, 60.0) is None  # busy
    assert cull_in_s(None, True, False, 60.0) is None  # idle time unknown


def test_the_warning_starts_warn_s_before_culling():
    assert cull_warning(5.0, 5.0) and cull_warning(0.0, 5.0)
    assert not cull_warning(5.1, 5.0) and not cull_warning(None, 5.0)


def summary(kernel_id, cull_in, gpus=(), memory=0, reported=None, notebook="a.ipynb", idle_s=70.0):
    return {
        "kernel_id": kernel_id,
        "notebook": notebook,
        "idle_s": idle_s,
        "gpu_memory": memory,
        "gpus": list(gpus),
        "reported_gpu_memory": reported,
        "cull_in_s": cull_in,
    }


def test_due_kernels_are_those_at_zero_named_by_gpu_or_by_their_report():
    summaries = [
        summary("k1", 0.0, gpus=[0, 1], memory=300),
        summary("k2", 4.0, gpus=[0], memory=100),
        summary("k3", None),
        summary("k4", 0.0, reported={"GPU-abc": 20, "GPU-def": 22}, notebook=None),
    ]
    assert due_kernels(summaries, {0: "GPU-0000"}) == (
        Due("k1", "a.ipynb", 70.0, 300, ("GPU 0 (GPU-0000)", "GPU 1 (?)"), (0, 1)),
        Due("k4", "", 70.0, 42, ("GPU-abc (the kernel's report)", "GPU-def (the kernel's report)")),
    )


def test_a_due_kernel_that_ran_since_is_spared():
    now = 1000.0
    assert ran_since("busy", None, now, 60.0)
    assert ran_since("idle", now - 10, now, 60.0)
    assert not ran_since("idle", now - 60, now, 60.0)
    assert not ran_since("idle", None, now, 60.0)


def test_the_culler_looks_every_tenth_of_the_limit_within_bounds():
    assert cull_every_s(1.0, 100.0) == 10.0
    assert cull_every_s(1.0, 3600.0) == 30.0
    assert cull_every_s(5.0, 2.0) == 5.0


def test_the_log_line_says_whose_kernel_how_idle_and_what_was_freed_where():
    line = culled_message(Due("k1", "", 70.4, 3 * 2**20, ()), "", 60.0)
    assert line == (
        "jupyter_gpu: culled idle GPU kernel k1 of user ?, notebook (no notebook): idle 70 s "
        "(cull_idle_after_s = 60), 3145728 bytes (3.0 MiB) of GPU memory freed on GPUs unknown"
    )


def test_a_cull_record_says_which_notebook_how_idle_what_was_freed_where():
    record = cull_record(Due("k1", "work/cull_a.ipynb", 7200.1234, 6 << 30, ("GPU 1 (GPU-1)",), (1,)), 1000.5)
    assert record == {
        "kernel_id": "k1",
        "notebook": "work/cull_a.ipynb",
        "idle_s": 7200.123,
        "memory": 6 << 30,
        "gpus": [1],
        "culled_at": 1000.5,
    }
    assert cull_record(Due("k2", "", 1.0, 0, ()), 1.0)["notebook"] is None


def test_the_keep_line_says_who_kept_which_kernel_for_how_long():
    assert kept_message("k1", None, "ana", 7200.0) == (
        "jupyter_gpu: user ana kept idle GPU kernel k1 (notebook (no notebook)) running: "
        "its cull is postponed by 7200 s"
    )


def test_a_postponement_adds_up_and_ends_with_its_idle_stretch_or_its_kernel():
    from jupyter_gpu.server.attribution import KernelInfo
    from jupyter_gpu.server.cull import Postponements

    kept = Postponements()
    table = {"k1": KernelInfo("k1", last_activity=100.0), "k2": KernelInfo("k2", last_activity=50.0)}
    with pytest.raises(ValueError, match="culling is off"):
        kept.add(table, "k1", 0.0)
    with pytest.raises(KeyError):
        kept.add(table, "nope", 60.0)
    assert len(kept) == 0
    once = kept.add(table, "k1", 60.0)
    assert once.cull_postponed_s == 60.0 and once.cull_idle_s(70.0) == 10.0
    twice = kept.add({"k1": once}, "k1", 60.0)  # asked again: once more
    assert twice.cull_postponed_s == 120.0
    # A fresh table keeps it while the kernel stays idle ...
    fresh = kept.apply(dict(table))
    assert fresh["k1"].cull_postponed_s == 120.0 and fresh["k2"].cull_postponed_s == 0.0
    # ... and ends it when the kernel ran something, or is gone
    ran = kept.apply({"k1": KernelInfo("k1", last_activity=130.0)})
    assert ran["k1"].cull_postponed_s == 0.0 and len(kept) == 0
    kept.add(table, "k2", 60.0)
    assert kept.apply({}) == {} and len(kept) == 0
