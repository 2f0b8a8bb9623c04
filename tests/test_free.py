"""``%gpu_free``'s core: framework releases and the before/after report (pure parts)."""

from __future__ import annotations

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
