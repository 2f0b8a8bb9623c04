"""``%gpu_free``'s core: framework releases and the before/after report (pure parts)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpu import frameworks
from jupyter_gpu.kernel import free
from jupyter_gpu.kernel.free import Measure, Tracked


def test_no_framework_imported_means_no_release_and_nothing_imported() -> None:
    collected, releases = free.release()
    assert releases == [] and collected >= 0


def test_a_failing_release_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("CUDA error: unknown error")

    monkeypatch.setattr(frameworks.TORCH, "release", boom)
    assert ("PyTorch", "release failed", "RuntimeError: CUDA error: unknown error") in frameworks.release_memory()


def test_report_lines_before_and_after() -> None:
    gib = 1024**3

    class Dead:
        pass

    tracked = Tracked(arrays=[("PyTorch", "cuda:0", 2 * gib, lambda: None), ("PyTorch", "cuda:0", gib, Dead)])
    before = Measure(
        nvml={1: int(9.8 * gib)},
        gpu_names={1: "NVIDIA A100-SXM4-80GB"},
        counters={"torch": {"GPU-x": (5 * gib, 9 * gib)}},
        rss=3 * gib,
    )
    after = Measure(nvml={1: int(1.2 * gib)}, counters={"torch": {"GPU-x": (gib, gib)}}, rss=2 * gib)
    lines = free.describe_change(before, after, tracked)
    assert lines == [
        "GPU 1 (A100-SXM4-80GB): this kernel 9.8 GiB → 1.2 GiB (NVML)",
        "PyTorch GPU-x: in use 5 GiB → 1 GiB, reserved 9 GiB → 1 GiB",
        "PyTorch arrays freed on cuda:0: 2 GiB",
        "PyTorch arrays still referenced elsewhere on cuda:0: 1 GiB (name them: %gpu_free NAME …)",
        "process memory (RSS, CPU arrays): 3 GiB → 2 GiB",
    ]


def test_a_gpu_name_from_the_driver_is_shown_bidi_safe_and_cut() -> None:
    before = Measure(nvml={0: 1024**3}, gpu_names={0: "NVIDIA a\u202eb" + "X" * 70})
    (line,) = free.describe_change(before, Measure(nvml={0: 0}), Tracked())
    assert "\u202e" not in line and "a\ufffdb" in line and "X" * 40 not in line and "…" in line, line


# -- issue 23 item 11: only what IPython put in the output cache is dropped ------------------------


class _Hostile:
    """A value whose comparisons and truth raise (a tensor's ``==``/``bool`` misbehave alike)."""

    def __eq__(self, other: object) -> bool:
        raise SystemExit(3)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise SystemExit(3)


@pytest.fixture
def fresh(shell: Any) -> Iterator[Any]:
    """The shell with an empty namespace and output cache (the shell is this process's one)."""
    shell.reset()
    yield shell
    shell.reset()


def _names(shell: Any) -> dict[str, int]:
    return {key: id(value) for key, value in shell.user_ns.items()}


def test_the_users_own_underscore_names_are_kept_and_the_report_says_nothing_went(fresh: Any, capsys: Any) -> None:
    shell = fresh
    shell.run_cell("_2 = 'mine'\n_ = 'also mine'\n__ = 'mine too'", store_history=True)
    shell.execution_count = max(shell.execution_count, 5)  # _2 lies within IPython's prompt count
    before = _names(shell)
    shell.run_line_magic("gpu_free", "--dry-run")
    dry_run = capsys.readouterr().out
    assert _names(shell) == before  # --dry-run changes nothing at all
    shell.run_line_magic("gpu_free", "")
    assert [shell.user_ns.get(key) for key in ("_2", "_", "__")] == ["mine", "also mine", "mine too"]
    assert "Would drop: nothing" in dry_run
    assert "Dropped: nothing to drop" in capsys.readouterr().out


def test_the_output_cache_ipython_made_is_dropped_and_named(fresh: Any, capsys: Any) -> None:
    shell = fresh
    shell.run_cell("[1, 2]", store_history=True)
    number = max(shell.user_ns["Out"])
    assert shell.user_ns[f"_{number}"] is shell.user_ns["_"]
    before = _names(shell)
    shell.run_line_magic("gpu_free", "--dry-run")
    assert f"Would drop: IPython's output cache (Out: 1 entry; names _{number}, _)" in capsys.readouterr().out
    assert _names(shell) == before and shell.user_ns["Out"]
    shell.run_line_magic("gpu_free", "")
    assert f"Dropped: IPython's output cache (Out: 1 entry; names _{number}, _)" in capsys.readouterr().out
    assert f"_{number}" not in shell.user_ns and not shell.user_ns["Out"] and shell.user_ns["_"] == ""
    shell.run_cell("[3]", store_history=True)  # IPython goes on caching as before
    assert shell.user_ns["_"] == [3]


def test_a_cached_value_the_user_reassigned_is_theirs(fresh: Any, capsys: Any) -> None:
    shell = fresh
    shell.run_cell("[1, 2]", store_history=True)
    number = max(shell.user_ns["Out"])
    shell.run_cell(f"_{number} = 'mine'", store_history=True)
    shell.run_line_magic("gpu_free", "")
    assert "Dropped: IPython's output cache (Out: 1 entry; names _)" in capsys.readouterr().out
    assert shell.user_ns[f"_{number}"] == "mine"


def test_values_whose_comparison_or_truth_raise_are_only_compared_by_identity(fresh: Any, capsys: Any) -> None:
    shell = fresh
    shell.user_ns["make"] = _Hostile
    shell.run_cell("make()", store_history=True)  # IPython's own _, _N, Out hold it
    shell.run_cell("_ = make()\n__ = make()", store_history=True)  # and the user's own _ and __
    shell.run_line_magic("gpu_free", "--dry-run")
    shell.run_line_magic("gpu_free", "")
    assert "Dropped: IPython's output cache (Out: 1 entry" in capsys.readouterr().out
    assert isinstance(shell.user_ns["_"], _Hostile) and isinstance(shell.user_ns["__"], _Hostile)


class _NameMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise SystemExit(3)


class _Named(Exception, metaclass=_NameMeta):
    pass


def test_the_last_errors_class_name_is_read_past_its_metaclass(
    fresh: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        raise _Named()
    except _Named as caught:  # as IPython leaves a failed cell's error (its own display meets the SystemExit first)
        error = caught
    monkeypatch.setattr(sys, "last_value", error, raising=False)
    monkeypatch.setattr(sys, "last_traceback", error.__traceback__, raising=False)
    fresh.run_line_magic("gpu_free", "--dry-run")
    assert "the last error's traceback (_Named, " in capsys.readouterr().out


def test_only_the_first_items_of_a_huge_container_are_followed() -> None:
    taken = []

    class Counted(list):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            for item in super().__iter__():
                taken.append(1)
                yield item

    free.track([Counted(range(free._CONTAINER_LIMIT * 10))])
    assert len(taken) <= free._CONTAINER_LIMIT + 1


def test_the_users_runs_are_said_as_theirs_and_not_freed_here() -> None:
    """Issue 30: a `jupyter-gpu run`'s memory is the user's own, named from the run's claim; %gpu_free
    frees this kernel's memory only and says how the run's is freed."""
    run = "train.py (jupyter-gpu run), 2 h"
    after = Measure(nvml={0: 0}, runs={(2, run): 30 * 1024**3})
    lines = free.describe_change(Measure(nvml={0: 1024**3}), after, Tracked())
    assert f"GPU 2: yours: {run} holds 30 GiB" in "\n".join(lines)
    assert "end the run to free it" in lines[-1]
