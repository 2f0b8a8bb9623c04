"""Issue 11 item 3: 16 kernels started at once with ``auto:1`` on 4 idle GPUs spread 4/4/4/4.

Real ipykernel processes, launched together without waiting for each other, with the admin's
setup: the extension autoloaded (``ipython_kernel_config.py``) and
``JUPYTER_GPU_DEFAULT_SELECT=auto:1``, on 4 idle simulated A100s. Every kernel chooses while the
others start; each stays alive until all have answered (a claim counts only while its process
lives). With claims off they all see the same idle GPU 0 and choose it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from support import ScenarioFile, kernel_manager

from jupyter_gpu import simulate

pytestmark = pytest.mark.frameworks  # starts many kernels (slow), like the framework kernel tests

KERNELS = 16


def choices(tmp_path: Path, claims: bool, gpus: dict | None = None, kernels: int = KERNELS) -> Counter[str]:
    scenario = ScenarioFile(tmp_path / "gpus.json", gpus or simulate.plausible_gpus(4))
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text('c.InteractiveShellApp.extensions = ["jupyter_gpu"]\n')
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir(exist_ok=True)
    os.chmod(claims_dir, 0o1777)
    env = {
        **os.environ,
        "JUPYTER_GPU_SIMULATE": str(scenario.path),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "JUPYTER_GPU_DEFAULT_SELECT": "auto:1",
        "JUPYTER_GPU_CLAIMS_DIR": str(claims_dir),
        "JUPYTER_GPU_CLAIMS": "1" if claims else "0",
    }
    managers = []
    try:
        for _ in range(kernels):  # launched back to back: nobody waits for another kernel to be ready
            manager = kernel_manager(tmp_path)
            manager.start_kernel(env=env)
            managers.append(manager)
        chosen: Counter[str] = Counter()
        for manager in managers:
            client = manager.blocking_client()
            client.start_channels()
            client.wait_for_ready(timeout=120)
            reply = client.execute(
                "import os", user_expressions={"v": "os.environ.get('CUDA_VISIBLE_DEVICES')"}, reply=True, timeout=60
            )
            chosen[reply["content"]["user_expressions"]["v"]["data"]["text/plain"]] += 1
            client.stop_channels()
        return chosen
    finally:
        for manager in managers:
            manager.shutdown_kernel(now=True)


def test_sixteen_kernels_with_claims_spread_four_per_gpu(tmp_path: Path) -> None:
    assert choices(tmp_path, claims=True) == Counter({"'0'": 4, "'1'": 4, "'2'": 4, "'3'": 4})


def test_without_claims_they_all_take_the_same_idle_gpu(tmp_path: Path) -> None:
    assert choices(tmp_path, claims=False) == Counter({"'0'": 16})


def test_seven_kernels_with_claims_take_the_seven_slices_of_a_split_h100(tmp_path: Path) -> None:
    from support import h100_split_scenario

    data = h100_split_scenario()
    chosen = choices(tmp_path, claims=True, gpus=data, kernels=7)
    assert len(chosen) == 7 and set(chosen.values()) == {1}  # one kernel per slice
    assert all(value.strip("'").startswith("MIG-") for value in chosen)
