"""Issue 19, items 3 and 4: every path that starts CUDA, before and after the magic, in real kernels.

CUDA reads ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` once per process, at the first ``cuInit``,
whoever calls it. Each path below starts CUDA through ``tests/standin/cuda_standin.py``'s
``cu_init`` (which maps a ``libcuda.so.1`` as the real driver does). Path first: the magic either
narrows TensorFlow within what CUDA showed and says PyTorch and JAX will not follow (naming the call
that started CUDA and ``%gpu_restart``), or refuses; ``%gpu_status`` says CUDA started. Magic first:
CUDA starts with the plan's variables and every framework sees the plan.

The kernels start with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (as the admin docs advise), so the mapping of
CUDA's devices is known; without it the magic refuses (the last test, and ``test_magics_frameworks``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, standin_kernel
from support import flat

pytestmark = pytest.mark.frameworks

# (the cell that starts CUDA, how the record names it, whether it initializes its framework)
PATHS = [
    ("import tensorflow as tf\ntf.test.is_gpu_available()", "TensorFlow, at tf.test.is_gpu_available()", False),
    (
        "import tensorflow as tf\nfrom tensorflow.python.client import device_lib\ndevice_lib.list_local_devices()",
        "TensorFlow, at device_lib.list_local_devices()",
        False,
    ),
    (
        "import tensorflow as tf\ntf.config.experimental.get_device_details(tf.config.list_physical_devices('GPU')[0])",
        "TensorFlow, at tf.config.list_physical_devices()",
        False,
    ),
    ("import tensorflow as tf\ntf.compat.v1.Session()", "TensorFlow, at tf.compat.v1.Session()", True),
    ("import torch\ntorch.cuda.is_available()", "PyTorch, at torch.cuda.is_available()", False),
    ("import torch\ntorch.cuda.init()", "PyTorch, at torch.cuda.init()", True),
    # a start no wrapper sees (a C extension, another library): only the mapped driver shows it
    (
        "import torch\ncuda_standin.cu_init()",
        "PyTorch, at a call jupyter_gpu does not watch (the CUDA driver is loaded)",
        False,
    ),
]
IDS = ["is_gpu_available", "device_lib", "get_device_details", "session", "is_available", "torch_init", "unwatched"]

VISIBLE_TF = """
from tensorflow.python.eager import context as _c
_ctx = _c.context()
_phys = [d for d in _ctx._physical_devices if d.device_type == "GPU"]
print(json.dumps([cuda_standin.started["devices"][_phys.index(d)][0]
                  for d in _ctx._visible_device_list if d.device_type == "GPU"]))
"""


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    for kernel in standin_kernel(tmp_path, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}):
        kernel.run("import cuda_standin")
        yield kernel


def tf_visible(kernel: Kernel) -> list[int]:
    kernel.run("import tensorflow as tf\nx = tf.constant(1.0)")
    out, err = kernel.run(VISIBLE_TF)
    assert out, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize(("path", "by", "initializes"), PATHS, ids=IDS)
def test_19_a_path_that_started_cuda_before_the_magic_is_said_not_believed_unstarted(
    kernel: Kernel, path: str, by: str, initializes: bool
) -> None:
    kernel.run("%load_ext jupyter_gpu")
    kernel.run(path)
    assert kernel.value("cuda_standin.started['env']") == [None, "PCI_BUS_ID"]
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_select 2")
    if initializes:  # the framework holds its GPUs: nothing changes, and the warning says why
        assert "GPUAlreadyInitializedWarning" in flat(err) and "already initialized the GPU" in flat(err), (out, err)
        assert kernel.value("state()") == before
    else:
        assert "GPU 2 (RTX A6000" in flat(out) and "TensorFlow /GPU:0" in flat(out), (out, err)
        for name in ("PyTorch", "JAX"):
            assert (
                f"{name} will NOT follow this: CUDA already started in this kernel (by {by}) showing GPU 0, 1, 2, 3"
                in flat(out)
            ), out
        assert "%gpu_restart" in flat(out) and "PyTorch cuda:0" not in flat(out)
        assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] is None  # nothing written that nobody reads
    status, _ = kernel.run("%gpu_status")
    assert f"CUDA: started in this kernel by {by}, with CUDA_VISIBLE_DEVICES unset" in flat(status), status
    assert "%gpu_restart" in flat(status)
    if not initializes:  # TensorFlow, imported now or later, sees what the status says: GPU 2
        assert tf_visible(kernel) == [2]
        status, _ = kernel.run("%gpu_status")
        assert "TensorFlow: initialized with the plan applied" in flat(status), status
        assert "PyTorch: not imported; the plan is applied when it is imported" not in flat(status)


@pytest.mark.parametrize(("path", "by", "initializes"), PATHS, ids=IDS)
def test_19_the_magic_first_then_each_path_starts_cuda_with_the_plan(
    kernel: Kernel, path: str, by: str, initializes: bool
) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 2 --growth")
    _, err = kernel.run(path)
    assert "Warning" not in flat(err), err
    assert kernel.value("cuda_standin.started['env']") == ["2", "PCI_BUS_ID"]
    status, _ = kernel.run("%gpu_status")
    assert f"CUDA: started in this kernel by {by}, with CUDA_VISIBLE_DEVICES '2'" in flat(status), status
    assert "NOT" not in flat(status), status
    if "tf.compat.v1.Session" not in path:
        assert tf_visible(kernel) == [2]
        status, _ = kernel.run("%gpu_status")
        assert "TensorFlow: initialized with the plan applied" in flat(status) and "NOT" not in flat(status), status


def test_19_item_3_gpus_of_two_models_counted_fastest_first_are_refused_and_stay_so(tmp_path: Path) -> None:
    # The case in the demo kernel (no CUDA_DEVICE_ORDER): which GPU is which cannot be told.
    for kernel in standin_kernel(tmp_path):
        kernel.run("%load_ext jupyter_gpu\nimport torch\ntorch.cuda.is_available()")
        before = kernel.value("state()")
        _, err = kernel.run("%gpu_select 2")
        assert (
            "GPUAlreadyInitializedWarning: PyTorch already started CUDA in this kernel (at torch.cuda.is_available())"
            in flat(err)
        ), err
        assert (
            "cannot tell which GPU is which" in flat(err)
            and "%gpu_restart" in flat(err)
            and kernel.value("state()") == before
        )
        kernel.run("import tensorflow as tf")
        status, _ = kernel.run("%gpu_status")
        assert "plan applied" not in flat(status) and "the plan is applied when it is imported" not in flat(status)
        assert "CUDA: started in this kernel by PyTorch, at torch.cuda.is_available()" in flat(status), status
