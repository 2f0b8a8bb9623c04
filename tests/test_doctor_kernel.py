"""``%gpu_doctor`` (``jupyter_gpu.kernel.magics.doctor``): in a real kernel, the doctor's report for the
kernel's own plan, the kernel untouched; in this process, its registration and the ``--plan`` text.

The children inherit the kernel's environment; the CUDA stand-in (``standin_site``) on that
environment's ``PYTHONPATH`` lets their PyTorch (a CPU build) see the simulated workstation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kernels import start
from standin_site import child_env, mixed_workstation, standin_site


def test_gpu_doctor_checks_the_kernels_plan_and_changes_nothing(tmp_path: Path) -> None:
    env = child_env(standin_site(tmp_path / "site"), mixed_workstation(tmp_path / "workstation.json"))
    for kernel in start(env):
        out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select auto --growth\n%gpu_limit 2GiB")
        chosen = kernel.value("__import__('jupyter_gpu.plan').plan.current_plan().selected_indices")
        before = kernel.value("env()")
        out, err = kernel.run("%gpu_doctor --framework torch")
        assert f"Plan: GPU {chosen[0]} (auto); growth on; limit GPU {chosen[0]}: 2 GiB" in out, (out, err)
        assert f"follows the plan: device 0 = GPU {chosen[0]}" in out, out
        assert "Verdict: the plan is followed by PyTorch; no problem found (exit status 0)" in out
        # The kernel is as it was: no framework imported here, the plan's variables unchanged.
        assert kernel.value("any(m in __import__('sys').modules for m in ('torch', 'tensorflow', 'jax'))") is False
        assert kernel.value("env()") == before
        out, err = kernel.run("%gpu_doctor --json --framework jax")
        data = json.loads(out)
        assert data["plan"]["magics"] == [f"%gpu_select {chosen[0]} --growth", "%gpu_limit 2GiB"]
        assert data["exit_status"] == 0 and data["machine"]["simulated"] is True
        out, err = kernel.run("%gpu_doctor --timeout 0")
        assert "UsageError: --timeout must be more than 0" in err


def test_the_magic_comes_and_goes_with_the_extension(shell: Any) -> None:
    from jupyter_gpu.kernel.magics import doctor

    line_magics = shell.magics_manager.magics["line"]
    doctor.register(shell)
    doctor.register(shell)  # a second load registers nothing twice
    assert "gpu_doctor" in line_magics
    doctor.unregister(shell)
    assert "gpu_doctor" not in line_magics


def test_plan_text_is_plan_magics_only() -> None:
    from jupyter_gpu.kernel.magics.doctor import PlanTextError, plan_lines

    assert plan_lines("%load_ext jupyter_gpu\n%gpu_select 1 --growth;  %gpu_limit 2GiB ;") == [
        ("gpu_select", "1 --growth"),
        ("gpu_limit", "2GiB"),
    ]
    assert plan_lines("") == []
    for bad in ("%gpu_status", "!rm -rf x", "%gpu_select auto --wait 10m"):
        with pytest.raises(PlanTextError):
            plan_lines(bad)
