"""``jupyter-gpu doctor`` end to end: real child processes, the frameworks' CPU builds, and the CUDA
stand-in (``tests/standin/``) in the children where a test needs frameworks that see GPUs.

The stand-in's workstation has a T400 as NVML GPU 0 and an RTX A6000 as GPU 1; CUDA's default
order (fastest first) numbers the A6000 0. Each case below is what the doctor reports on a real
machine for the same facts: a plan that is followed, a fastest-first order that differs, a
framework that ignores a cap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from standin_site import child_env, mixed_workstation, standin_site

# PyTorch ignores set_per_process_memory_fraction (as a framework that skips a cap would).
IGNORES_CAP = (
    "from jupyter_gpu.core import import_hooks\n"
    "def _ignore(torch):\n"
    "    torch.cuda.set_per_process_memory_fraction = lambda fraction, device=None: None\n"
    "import_hooks.when_imported('torch', _ignore)\n"
)


def doctor(env: dict[str, str], *args: str, timeout: float = 240) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.cli", "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def workstation(tmp_path: Path) -> Path:
    return mixed_workstation(tmp_path / "workstation.json")


def framework(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in data["frameworks"] if f["name"] == name)


def test_here_it_runs_clean_and_says_so(tmp_path: Path) -> None:
    """Simulated GPUs and CPU builds: each framework's version, CPU-only with what to install, exit 0."""
    status, out, err = doctor(child_env(None, "demo"))
    assert status == 0, (out, err)
    assert "SIMULATED GPUs (JUPYTER_GPU_SIMULATE): no real GPU or driver is being checked" in out
    assert "CPU-only build: for a GPU, install tensorflow[and-cuda]" in out
    assert "CPU-only build: for a GPU, install torch from PyTorch's CUDA wheel index" in out
    assert "CPU-only build: for a GPU, install jax[cuda12]" in out
    assert "Verdict: cannot verify the plan: no framework with GPU support; no problem found (exit status 0)" in out
    assert "Traceback" not in out + err


def test_a_plan_that_is_followed(tmp_path: Path, workstation: Path) -> None:
    env = child_env(standin_site(tmp_path / "site"), workstation)
    status, out, err = doctor(
        env, "--plan", "%gpu_select 1 --growth; %gpu_limit 2GiB", "--json", "--framework", "torch"
    )
    assert status == 0, (out, err)
    data = json.loads(out)
    torch = framework(data, "PyTorch")
    assert torch["verdict"] == "follows", torch
    assert torch["devices"] == [
        {
            "position": 0,
            "name": "NVIDIA RTX A6000 [simulated]",
            "gpu": 1,
            "matched_by": "name",
            "memory_limit": 2 * 1024**3,
        }
    ]
    assert data["plan"]["magics"] == ["%gpu_select 1 --growth", "%gpu_limit 2GiB"]
    # The variables as the user set them (none), not as the plan wrote them in the doctor's own process
    assert data["machine"]["environment"] == {
        "CUDA_VISIBLE_DEVICES": None,
        "CUDA_DEVICE_ORDER": None,
        "NVIDIA_VISIBLE_DEVICES": None,
    }
    assert framework(data, "TensorFlow")["verdict"] == "not checked"


def test_fastest_first_differs_from_nvidia_smis_order(tmp_path: Path, workstation: Path) -> None:
    env = child_env(standin_site(tmp_path / "site"), workstation)
    status, out, err = doctor(env, "--framework", "torch")
    assert status == 1, (out, err)
    assert "    device 0: NVIDIA RTX A6000 [simulated] = GPU 1 (by name)" in out
    assert "    DIFFERS from the plan:" in out
    assert "cause: CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA numbers the GPUs fastest first" in out
    assert "Verdict: the plan is NOT followed by PyTorch; a problem was found (exit status 1)" in out
    # The fix it names is the fix: with PCI_BUS_ID the same machine follows.
    status, out, err = doctor({**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "--framework", "torch")
    assert status == 0 and "follows the plan: device 0 = GPU 0, device 1 = GPU 1" in out, (out, err)


def test_a_framework_that_ignores_a_cap(tmp_path: Path, workstation: Path) -> None:
    env = child_env(standin_site(tmp_path / "site", IGNORES_CAP), workstation)
    status, out, err = doctor(env, "--plan", "%gpu_select 1; %gpu_limit 2GiB", "--framework", "torch")
    assert status == 1, (out, err)
    assert "      - took no memory cap on GPU 1 (the plan: 0.042 of it, 2 GiB)" in out


def test_tensorflow_follows_a_split_gpu(tmp_path: Path, workstation: Path) -> None:
    env = child_env(standin_site(tmp_path / "site"), workstation)
    status, out, err = doctor(
        env, "--plan", "%gpu_select 0,1; %gpu_limit 1GiB 1GiB", "--json", "--framework", "tensorflow"
    )
    assert status == 0, (out, err)
    tf = framework(json.loads(out), "TensorFlow")
    assert tf["verdict"] == "follows", tf
    assert [(d["gpu"], d["memory_limit"]) for d in tf["devices"]] == [(0, 2 * 1024**3), (1, 2 * 1024**3)]


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ("%gpu_select 9", "bad --plan: %gpu_select 9: there is no GPU 9"),
        ("import torch", "bad --plan: 'import torch' is not a plan magic"),
        ("%gpu_limit 2Gix", "bad --plan: %gpu_limit 2Gix: malformed size '2Gix'"),
        ("%gpu_select auto --wait 1h", "the doctor does not wait for GPUs"),
    ],
)
def test_a_bad_plan_is_one_line_and_exit_status_2(plan: str, words: str) -> None:
    status, out, err = doctor(child_env(None, "demo"), "--plan", plan, "--framework", "jax")
    assert status == 2 and out == ""
    assert words in err and err.count("\n") == 1, err


def test_a_failing_nvml_degrades_the_machine_part(tmp_path: Path) -> None:
    scenario = tmp_path / "broken.json"
    scenario.write_text(json.dumps({"fault": "driver_not_loaded", "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}]}))
    status, out, err = doctor(child_env(None, scenario), "--framework", "jax")
    assert status == 1, (out, err)
    assert "  NVML cannot be read: " in out
    assert "Traceback" not in out + err


def test_a_framework_that_hangs_is_reported_not_waited_for(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("import time\ntime.sleep(600)\n")
    status, out, err = doctor(child_env(site, "demo"), "--framework", "torch", "--timeout", "3")
    assert status == 1, (out, err)
    assert "    cannot verify: did not finish starting within 3 s: killed (it hangs at start)" in out
    assert "    PROBLEM: PyTorch did not finish starting within 3 s: killed (it hangs at start)" in out
