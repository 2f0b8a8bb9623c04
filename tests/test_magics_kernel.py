"""Real kernels (jupyter_client + ipykernel) with simulated GPUs and the real frameworks (CPU builds).

TensorFlow on a CPU build lists no GPU, so kernel 1 imports the CUDA stand-in
(``tests/standin/cuda_standin.py``), which lists the simulated GPUs as CUDA would, and asserts what
TensorFlow's config layer received: visible devices and logical
devices with their memory limits. Each kernel checks several transitions to keep the run short.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernels import Kernel, start
from support import flat

pytestmark = pytest.mark.frameworks

# The CUDA stand-in beneath TensorFlow's GPU listing (tests/standin/cuda_standin.py): physical GPU k
# is NVML GPU k here, as the plan sets CUDA_DEVICE_ORDER=PCI_BUS_ID.
INJECT_SIMULATED_TF_GPUS = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent / "standin")!r})
import cuda_standin
"""

TF_SEEN = """
from tensorflow.python.eager import context as _c
_ctx = _c.context()
print(json.dumps({"visible": [d.name for d in _ctx._visible_device_list if d.device_type == "GPU"],
                  "limits": {d.name: [v.memory_limit for v in c] for d, c in _ctx._virtual_device_map.items()},
                  "initialized": _ctx._context_handle is not None}))
"""


@pytest.fixture
def kernel(scenario: Any) -> Iterator[Kernel]:
    yield from start()


def test_keras_first_gets_visible_and_logical_devices_then_a_narrower_selection(kernel: Kernel) -> None:
    kernel.run(INJECT_SIMULATED_TF_GPUS)
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 0,1 --growth\n%gpu_limit 1GiB 512")
    assert "GPU 0: 2 logical GPUs of 1 GiB + 512 MiB of 80 GiB → TensorFlow /GPU:0…/GPU:1" in flat(out), err
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: not imported; the plan is applied when it is imported" in flat(out)
    kernel.run("import keras")  # Keras first: it imports TensorFlow, whose hook runs
    seen = json.loads(kernel.run(TF_SEEN)[0])
    assert seen["visible"] == ["/physical_device:GPU:0", "/physical_device:GPU:1"]
    assert seen["limits"] == {"/physical_device:GPU:0": [1024, 512], "/physical_device:GPU:1": [1024, 512]}
    assert kernel.value("env()")["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"

    out, err = kernel.run("%gpu_select 1")  # TF listed its GPUs: it narrows with set_visible_devices
    assert "GPU 1 (A100-SXM4-80GB [simulated], 79.5 GiB free) → TensorFlow /GPU:0…/GPU:1" in flat(out), err
    seen = json.loads(kernel.run(TF_SEEN)[0])
    assert seen["visible"] == ["/physical_device:GPU:1"]
    assert seen["limits"] == {"/physical_device:GPU:1": [1024, 512]}
    assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == "0,1"  # CUDA read it already: left alone
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: imported, GPUs listed (CUDA started), not initialized; plan applied" in flat(out)
    kernel.run("%gpu_limit off")
    assert json.loads(kernel.run(TF_SEEN)[0])["limits"] == {}


def test_compat_v1_import_then_first_op_then_the_warning(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1 --growth\n%gpu_limit 2GiB\n%gpu_threads --intra 2 --inter 1")
    out, err = kernel.run("import tensorflow.compat.v1 as tf1\nimport tensorflow as tf")  # the hook lists GPUs
    assert (
        "TensorFlow does not follow the GPU plan (GPU 1): it sees no GPU: this TensorFlow has no GPU support"
        in flat(err)
    )
    out, _ = kernel.run("%gpu_status")  # a CPU build lists no GPU: never "plan applied"
    assert (
        "TensorFlow: imported, GPUs listed (CUDA started), not initialized; plan NOT applied — does NOT follow "
        "the plan: it sees no GPU: this TensorFlow has no GPU support" in flat(out)
    )
    out, err = kernel.run("x = tf.constant(1.0) * 2")  # initializes the context
    assert "GPUPlanMismatchWarning" not in flat(err)  # said once
    assert kernel.value("tf.config.threading.get_intra_op_parallelism_threads()") == 2
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_select 0")
    assert (
        "GPUAlreadyInitializedWarning: TensorFlow already initialized the GPU in this kernel, so %gpu_select "
        "cannot take effect" in flat(err)
    )
    assert "restart the kernel" in flat(err) and "in effect: no visible GPU (CPU only)" in flat(err)
    assert kernel.value("state()") == before
    out, err = kernel.run("%gpu_threads --intra 4")
    assert "cannot change the number of threads" in flat(err) and kernel.value("state()") == before
    out, err = kernel.run("%gpu_threads --log-placement on")
    assert "device-placement logging on" in flat(out) and "Warning" not in flat(err)
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized; in effect: no visible GPU (CPU only)" in flat(out) and "does NOT follow" in flat(
        out
    )


def test_torch_and_jax_through_importlib(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1 --growth\n%gpu_threads --intra 3")
    kernel.run("import importlib\ntorch = importlib.import_module('torch')\njax = importlib.import_module('jax')")
    assert kernel.value("torch.get_num_threads()") == 3
    out, err = kernel.run("%gpu_limit 25%")  # imported, not initialized: applied now
    assert "Applied now to PyTorch, JAX; applied to TensorFlow when imported." not in flat(out)  # limit report only
    assert kernel.value("torch.cuda.is_initialized()") is False  # the cap waits for PyTorch's lazy init
    from_jupyter = "__import__('jupyter_gpu.frameworks', fromlist=['x']).TORCH"
    assert kernel.value(f"{from_jupyter}.queued_fractions()") == [[0, 0.25]]
    assert kernel.value("any(c[0].__name__ == 'cap_memory' for c in torch.cuda._queued_calls)") is True
    kernel.run("%gpu_limit 10%")
    assert kernel.value("sum(c[0].__name__ == 'cap_memory' for c in torch.cuda._queued_calls)") == 1
    # What the queued call does at PyTorch's lazy CUDA init, with the CPU build's CUDA call recorded:
    kernel.run(
        "calls = []\ntorch.cuda.set_per_process_memory_fraction = lambda f, d: calls.append([f, d])\n"
        "[c[0]() for c in torch.cuda._queued_calls if c[0].__name__ == 'cap_memory']"
    )
    assert kernel.value("calls") == [[0.1, 0]]
    env = kernel.value("env()")
    assert env["XLA_CLIENT_MEM_FRACTION"] == "0.100" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: imported, GPU not initialized; plan applied" in flat(out)
    assert "JAX: imported, GPU not initialized; plan applied" in flat(out)

    out, err = kernel.run("import jax.numpy as jnp\ny = jnp.ones(3).sum()")  # JAX creates its (CPU) backend
    assert "JAX does not follow the GPU plan (GPU 1): it runs on the CPU only: this jaxlib has no GPU support" in flat(
        err
    )
    out, err = kernel.run("%gpu_limit 5%")  # a CPU computation did not touch the GPU: not too late
    assert "Warning" not in flat(err) and "GPU 1: at most 4 GiB" in flat(out), err


@pytest.fixture
def admin_kernel(scenario: Any) -> Iterator[Kernel]:
    yield from start(
        {
            "CUDA_VISIBLE_DEVICES": "1",
            "JUPYTER_GPU_DEFAULT_SELECT": "auto:1",
            "JUPYTER_GPU_GROWTH": "1",
            "JUPYTER_GPU_MAX_LIMIT": "50%",
        }
    )


def test_admin_fence_defaults_ceiling_bad_inputs_and_own_memory(admin_kernel: Kernel, scenario: Any) -> None:
    kernel = admin_kernel
    _, err = kernel.run("import os; os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'")  # code cannot widen the fence
    assert err == ""
    out, err = kernel.run("%load_ext jupyter_gpu")
    assert "jupyter_gpu: GPU 1 (auto:1); growth on; limit GPU 1: 40 GiB (admin ceiling)" in flat(out), err
    assert kernel.value("env()")["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    before = kernel.value("state()")
    for magic, problem in [
        ("%gpu_select 0", "GPU 0 is outside the GPUs assigned to this kernel (CUDA_VISIBLE_DEVICES='1')"),
        ("%gpu_select 5", "there is no GPU 5"),
        ("%gpu_select auto:2", "auto:2 needs 2 GPUs"),
        ("%gpu_select auto:0", "at least 1"),
        ("%gpu_select 1,1", "twice"),
        ("%gpu_limit 60%", "above the admin ceiling max_limit=50%"),
        ("%gpu_limit 0", "zero"),
        ("%gpu_limit 1.5.5G", "malformed"),
        ("%gpu_limit off 1G", "cannot be combined"),
    ]:
        out, err = kernel.run(magic)
        assert "UsageError: " in err and problem in err and err.count("\n") == 1, (magic, err)
        assert kernel.value("state()") == before, magic
    kernel.run("%gpu_limit off")
    assert kernel.value("__import__('jupyter_gpu.plan').plan.current_plan().memory_limit_bytes(1)") == 40 * 1024**3

    pid = kernel.value("os.getpid()")
    scenario.update(lambda data: data["gpus"][1].update(processes=[{"pid": pid, "memory_mib": 700}]))
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_limit 4GiB")
    assert f"NVML shows this kernel (PID {pid}) holding GPU memory: 700 MiB on GPU 1" in flat(err)
    assert kernel.value("state()") == before
    out, _ = kernel.run("%gpu_status")
    assert "this kernel 700 MiB" in flat(out) and "CUDA_VISIBLE_DEVICES='1'" in flat(out)
