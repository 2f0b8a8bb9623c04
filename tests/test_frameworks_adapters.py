"""Each framework adapter: state from sys.modules alone, and the environment that carries a plan."""

from __future__ import annotations

import sys
import time
import types

import pytest

from jupyter_gpu.core.snapshot import GpuInfo, Snapshot
from jupyter_gpu.frameworks import JAX, TENSORFLOW, TORCH, State
from jupyter_gpu.plan import Fence, PlanRequest, build_plan

GIB = 1024**3
SNAP = Snapshot(
    nvml_available=True,
    timestamp=time.time(),
    gpus=(
        GpuInfo(index=0, uuid="GPU-a", name="A100", memory_total=80 * GIB, memory_free=80 * GIB),
        GpuInfo(index=1, uuid="GPU-b", name="A6000", memory_total=48 * GIB, memory_free=48 * GIB),
    ),
)


def plan(**request: object):
    return build_plan(PlanRequest(**request), SNAP, Fence({}))  # type: ignore[arg-type]


def test_states_come_from_sys_modules_only(monkeypatch) -> None:
    for name in ("tensorflow", "tensorflow.python.eager.context", "torch", "torch.cuda", "jax", "jax._src.xla_bridge"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert TENSORFLOW.state() is TORCH.state() is JAX.state() is State.NOT_IMPORTED

    context = types.SimpleNamespace(_context_handle=None, _physical_devices=None)
    context_module = types.SimpleNamespace(context_safe=lambda: context)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    monkeypatch.setitem(sys.modules, "tensorflow.python.eager.context", context_module)
    assert TENSORFLOW.state() is State.IMPORTED
    context._physical_devices = []
    assert TENSORFLOW.state() is State.DEVICES_LISTED
    context._context_handle = object()
    assert TENSORFLOW.state() is State.INITIALIZED

    cuda = types.SimpleNamespace(_initialized=False)
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)
    assert TORCH.state() is State.IMPORTED
    cuda._initialized = True
    assert TORCH.state() is State.INITIALIZED

    initialized = [False]
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    bridge = types.SimpleNamespace(backends_are_initialized=lambda: initialized[0], _backends={})
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)
    assert JAX.state() is State.IMPORTED
    initialized[0] = True
    bridge._backends = {"cpu": object()}
    assert JAX.state() is State.CPU_ONLY  # a CPU computation does not touch the GPU
    bridge._backends = {"cpu": object(), "cuda": object()}
    assert JAX.state() is State.INITIALIZED


def test_tensorflow_environment_and_labels() -> None:
    env = TENSORFLOW.environment(plan(selection="1,0", growth=True, intra_op_threads=4), {})
    assert env == {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "TF_NUM_INTRAOP_THREADS": "4", "TF_NUM_INTEROP_THREADS": None}
    admin = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    assert TENSORFLOW.environment(plan(), admin)["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    split = plan(selection="1,0", limits=("1GiB", "1GiB"))
    assert TENSORFLOW.device_labels(split) == {1: "/GPU:0…/GPU:1", 0: "/GPU:2…/GPU:3"}
    assert TORCH.device_labels(split) == {1: "cuda:0", 0: "cuda:1"}


def test_torch_environment_keeps_the_admins_allocator_settings() -> None:
    env = TORCH.environment(plan(selection="0", growth=True), {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert env == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    }
    assert TORCH.environment(plan(), {})["PYTORCH_CUDA_ALLOC_CONF"] is None


def test_jax_uses_the_smallest_share_and_drops_the_deprecated_variable() -> None:
    env = JAX.environment(plan(selection="0,1", limits=("12GiB",)), {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"})
    assert env["XLA_CLIENT_MEM_FRACTION"] == "0.150"  # 12/80 < 12/48
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] is None
    off = JAX.environment(plan(selection="0"), {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"})
    assert off["XLA_PYTHON_CLIENT_MEM_FRACTION"] == ".5" and off["XLA_CLIENT_MEM_FRACTION"] is None
    assert JAX.environment(plan(growth=True), {})["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


@pytest.mark.parametrize("framework", [TENSORFLOW, TORCH, JAX])
def test_checking_state_imports_nothing(framework) -> None:
    before = set(sys.modules)
    framework.state()
    assert set(sys.modules) == before


def test_tensorflow_devices_are_named_with_nvidia_smis_number_beside_them() -> None:
    from jupyter_gpu.frameworks.tensorflow import tf_device_label

    assert tf_device_label(0, 1, 3) == "/GPU:0 (GPU 3)"
    assert tf_device_label(2, 2, 1) == "/GPU:2…/GPU:3 (GPU 1)"  # one GPU split into two logical GPUs
    assert tf_device_label(1) == "/GPU:1"  # CUDA's order not known: TensorFlow's name alone, never a guess
