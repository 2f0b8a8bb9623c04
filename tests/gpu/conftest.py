"""The GPU check (issue 29, docs/real-gpu.md): where it runs, and the fixtures its checks share.

Every test here is marked ``gpu`` and runs in one of two modes:

- **real**: an NVIDIA driver answers NVML here (``nvmlInit`` succeeds with no simulation asked for).
  Every check runs against the real driver and frameworks.
- **simulated**: ``JUPYTER_GPU_CHECK_MODE=simulated`` (``scripts/gpu-check.sh --simulated``): one
  simulated GPU beneath nvidia-ml-py, and the CUDA stand-in (``tests/standin``) in kernels and doctor
  children. Checks the stand-in cannot model (real allocations, ``nvidia-smi``, JAX on a GPU) are
  skipped, each with its reason.

Anywhere else (a laptop, CI without ``--simulated``) every check is skipped with one reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MODE_VAR = "JUPYTER_GPU_CHECK_MODE"
SIMULATED = "simulated"
REAL = "real"
ROOT = Path(__file__).resolve().parents[2]
# The simulated machine: one idle A100 (the stand-in knows its compute capability).
SIMULATED_GPUS = 1


def _mode() -> tuple[str | None, str]:
    """("real" | "simulated" | None, why not) for this process, decided once at collection."""
    if os.environ.get(MODE_VAR) == SIMULATED:
        return SIMULATED, ""
    if os.environ.get("JUPYTER_GPU_SIMULATE"):
        return None, "JUPYTER_GPU_SIMULATE is set: real GPU checks need a real driver (or gpu-check.sh --simulated)"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:
        return None, f"no NVIDIA driver answers here (NVML: {error}); simulated: scripts/gpu-check.sh --simulated OUT"
    if count < 1:
        return None, "the NVIDIA driver answers but shows no GPU"
    return REAL, ""


MODE, WHY_NOT = _mode()


# The order of the checks: NVML first, before any kernel of a check has held the GPU (a process
# that just ended can linger in NVML's list for a moment), the cheap figures next, then the kernels;
# a run cut off by its time box loses the last ones.
ORDER = ("test_gpu_nvml", "test_gpu_figures", "test_gpu_plan", "test_gpu_faces")


def _rank(item: pytest.Item) -> int:
    module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return ORDER.index(module) if module in ORDER else len(ORDER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    places = [i for i, item in enumerate(items) if item.get_closest_marker("gpu") is not None]
    for place, item in zip(places, sorted((items[i] for i in places), key=_rank), strict=True):
        items[place] = item
    if MODE is not None:
        return
    skip = pytest.mark.skip(reason=WHY_NOT)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@dataclass
class Check:
    """What one check saw, for the report (tests/gpu_report.py): a detail line and figures."""

    item: pytest.Item
    mode: str
    notes: list[str] = field(default_factory=list)

    @property
    def real(self) -> bool:
        return self.mode == REAL

    def detail(self, text: str) -> None:
        self.notes.append(text)
        self.item.user_properties.append(("detail", "; ".join(self.notes)))

    def figure(self, name: str, value: float | int | str) -> None:
        self.item.user_properties.append(("figure", (name, value)))


@pytest.fixture(autouse=True)
def _gpus_of_this_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Simulated mode: the simulated GPU for this test and every process it starts (tests/conftest.py
    removed any simulation before). Real mode: no simulation, no CUDA variable of the caller's shell."""
    from jupyter_gpu import simulate

    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF", "XLA_CLIENT_MEM_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    if MODE == SIMULATED:
        monkeypatch.setenv(simulate.ENV_VAR, str(SIMULATED_GPUS))
    yield
    if MODE == SIMULATED:
        simulate.uninstall()


@pytest.fixture
def check(request: pytest.FixtureRequest) -> Check:
    """The check's record; a check marked ``real_only(why)`` is skipped here in simulated mode,
    before any kernel of it starts."""
    assert MODE is not None
    marker = request.node.get_closest_marker("real_only")
    if marker is not None and MODE == SIMULATED:
        pytest.skip(f"simulated: {marker.args[0]}")
    return Check(request.node, MODE)


@pytest.fixture
def kernel(tmp_path: Path, check: Check) -> Iterator[Any]:
    """A real kernel (ipykernel via jupyter_client) with ``%load_ext jupyter_gpu`` run; in simulated
    mode its PyTorch sees the simulated GPU through the CUDA stand-in."""
    import kernels

    env = {"JUPYTER_GPU_CLAIMS_DIR": os.environ["JUPYTER_GPU_CLAIMS_DIR"]}
    if check.real:
        started = kernels.start({**env, "IPYTHONDIR": str(tmp_path / "ipython")})
    else:
        env["JUPYTER_GPU_SIMULATE"] = str(SIMULATED_GPUS)
        started = kernels.standin_kernel(tmp_path, env)
    for k in started:
        _, err = k.run("%load_ext jupyter_gpu")
        assert "Error" not in err, err
        yield k
