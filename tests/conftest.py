"""Fixtures shared by every test: simulated GPUs beneath nvidia-ml-py, per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ScenarioFile

from jupyter_gpu import simulate


@pytest.fixture(autouse=True)
def _no_ambient_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts on real NVML unless it asks for simulated GPUs (the fixtures below).

    A simulation an earlier test installed in this process is removed too: its scenario's PIDs
    would otherwise still name the owners of real processes that happen to get those PIDs (PIDs wrap
    at 32,768 here, and the PID-reuse tests choose PIDs on purpose)."""
    monkeypatch.delenv(simulate.ENV_VAR, raising=False)
    simulate.uninstall()


@pytest.fixture(autouse=True)
def _private_gpu_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU claims (``auto``) go to a folder of this test: simulated GPUs have the same UUIDs in every
    test, and a claim left by another test process (or another engineer's run) must not steer ``auto``."""
    folder = tmp_path / "gpu-claims"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(folder))


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScenarioFile]:
    """Two idle simulated A100s, in a file this test may rewrite; child processes see it too."""
    file = ScenarioFile(tmp_path / "scenario.json", simulate.plausible_gpus(2))
    monkeypatch.setenv(simulate.ENV_VAR, str(file.path))
    yield file


@pytest.fixture
def demo_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 'demo' shared server: 4 GPUs of 2 models, other users' processes, one busy GPU."""
    monkeypatch.setenv(simulate.ENV_VAR, "demo")
