"""Issue 31 item 1: what ``auto`` chose stays. A later magic (``%gpu_limit``, ``%gpu_select --growth``)
keeps the GPUs; only ``%gpu_select auto`` chooses again, and says so.

Two real kernels on four idle simulated GPUs with claims on (the README's recipe in each): the second
kernel's limit must not put it on the first one's GPU, as it did when the limit ran ``auto`` again
without the claims. The in-process tests check the same rule and its words quickly.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kernels import start
from support import ScenarioFile, flat

from jupyter_gpu import simulate
from jupyter_gpu.plan import PlanError, PlanRequest, build_plan, current_plan

RECIPE = "%load_ext jupyter_gpu\n%gpu_select auto --growth"


def four_idle_gpus(tmp_path: Path) -> dict[str, str]:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    claims = tmp_path / "claims"
    claims.mkdir()
    os.chmod(claims, 0o1777)
    return {
        "JUPYTER_GPU_SIMULATE": str(scenario.path),
        "JUPYTER_GPU_CLAIMS": "1",
        "JUPYTER_GPU_CLAIMS_DIR": str(claims),
    }


@pytest.mark.frameworks  # two real kernels (slow), as the other kernel tests
def test_two_kernels_keep_their_auto_gpus_through_a_limit(tmp_path: Path) -> None:
    env = four_idle_gpus(tmp_path)
    first_kernel, second_kernel = start(env), start(env)
    first = next(first_kernel)
    try:
        second = next(second_kernel)
        try:
            first.run(RECIPE)
            second.run(RECIPE)
            chosen = [kernel.value("os.environ['CUDA_VISIBLE_DEVICES']") for kernel in (first, second)]
            assert chosen[0] != chosen[1]  # the claims spread them
            out, err = second.run("%gpu_limit 4GiB")
            assert not err, err
            first.run("%gpu_limit 4GiB")
            assert [kernel.value("os.environ['CUDA_VISIBLE_DEVICES']") for kernel in (first, second)] == chosen
            assert f"(GPU {chosen[1]} as auto chose it before (%gpu_select auto chooses again))" in flat(out)
            limit = f"__import__('jupyter_gpu').plan.current_plan().memory_limit_bytes({chosen[1]})"
            assert second.value(limit) == 4 * 1024**3
        finally:
            second_kernel.close()
    finally:
        first_kernel.close()


def test_a_limit_after_auto_keeps_the_gpu_though_auto_would_now_choose_another(shell, clean, capsys) -> None:
    shell.run_line_magic("gpu_select", "auto --growth")
    assert current_plan().selected_indices == (0,)  # two idle GPUs: the lowest index
    capsys.readouterr()
    clean.update(lambda data: data["gpus"][0].update(processes=[{"pid": 4242, "memory_mib": 9000, "user": "zhang"}]))
    shell.run_line_magic("gpu_limit", "4GiB")
    out = capsys.readouterr().out
    assert current_plan().selected_indices == (0,) and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert current_plan().auto_kept and current_plan().memory_limit_bytes(0) == 4 * 1024**3
    assert "GPU 0: at most 4 GiB of 80 GiB" in flat(out)
    assert "(GPU 0 as auto chose it before (%gpu_select auto chooses again))" in flat(out)
    shell.run_line_magic("gpu_select", "--no-growth")
    out = capsys.readouterr().out
    assert current_plan().selected_indices == (0,)
    assert "GPU 0 (A100-SXM4-80GB [simulated]" in flat(out) and "as auto chose it before" in flat(out)
    assert "chose again" not in flat(out)
    shell.run_line_magic("gpu_select", "auto")  # asked for: a new choice, and it says it moved
    out = capsys.readouterr().out
    assert current_plan().selected_indices == (1,) and not current_plan().auto_kept
    assert out.startswith("auto chose again: GPU 1 (it was GPU 0).\n")
    assert "chosen by auto: free" in flat(out)
    assert current_plan().memory_limit_bytes(1) == 4 * 1024**3  # the limit goes with it


def test_asking_auto_again_on_the_same_gpu_says_nothing_moved(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "auto")
    shell.run_line_magic("gpu_select", "auto")
    assert "chose again" not in capsys.readouterr().out


def test_a_kept_gpu_that_is_gone_is_refused_with_the_way_to_choose_again() -> None:
    from test_plan import NO_FENCE, gpu, snap

    chosen = build_plan(PlanRequest(selection="auto:2"), snap(gpu(0), gpu(1), gpu(2, free_gib=3)), NO_FENCE)
    assert chosen.selected_indices == (0, 1)
    request = PlanRequest(selection="auto:2", limits=("4GiB",))
    kept = build_plan(request, snap(gpu(0, free_gib=1), gpu(1), gpu(2)), NO_FENCE, kept=chosen)
    assert kept.selected_indices == (0, 1) and kept.auto_kept and kept.memory_limit_bytes(1) == 4 * 1024**3
    renumbered = snap(*(replace(gpu(index + 1), index=index) for index in range(2)))  # GPU 0 fell off the bus
    with pytest.raises(
        PlanError, match=r"^GPU 0, 1, which auto:2 chose before, cannot be kept: no GPU has a UUID"
    ) as caught:
        build_plan(request, renumbered, NO_FENCE, kept=chosen)
    assert str(caught.value).endswith("; %gpu_select auto:2 chooses again")
    assert not build_plan(request, renumbered, NO_FENCE).auto_kept  # without kept: auto chooses


def test_another_auto_or_min_free_is_a_new_choice() -> None:
    from test_plan import NO_FENCE, gpu, snap

    chosen = build_plan(PlanRequest(selection="auto"), snap(gpu(0), gpu(1)), NO_FENCE)
    busy = snap(gpu(0, free_gib=2), gpu(1))
    assert build_plan(PlanRequest(selection="auto:1"), busy, NO_FENCE, kept=chosen).selected_indices == (1,)
    again = PlanRequest(selection="auto", min_free="8GiB")
    assert build_plan(again, busy, NO_FENCE, kept=chosen).selected_indices == (1,)
    assert build_plan(PlanRequest(selection=" AUTO "), busy, NO_FENCE, kept=chosen).selected_indices == (0,)


def test_a_plan_without_auto_is_never_marked_kept(shell: Any) -> None:
    shell.run_line_magic("gpu_select", "1")
    shell.run_line_magic("gpu_limit", "4GiB")
    assert not current_plan().auto_kept and current_plan().selected_indices == (1,)
