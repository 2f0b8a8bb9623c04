"""Issue 19, past the list, TensorFlow and Keras: the seeds' own snippets in real kernels on the stand-in.

Each case ends with TensorFlow (and Keras' backend) seeing what ``%gpu_status`` says, or with one
line that names the cause and the fix. The kernels start with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so
CUDA's numbering is nvidia-smi's (``tests/standin/cuda_standin.py``). The stand-in fakes the GPUs
TensorFlow *lists*, not devices its C++ runtime places ops on: on these CPU builds every op runs on
the CPU, so where an op lands on a GPU build is a fact read in TensorFlow's source (docs/magics.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, standin_kernel
from support import flat

pytestmark = pytest.mark.frameworks

# The NVML index of each GPU TensorFlow made visible (via the stand-in).
TF_VISIBLE = """
import cuda_standin
from tensorflow.python.eager import context as _c
_ctx = _c.context()
_phys = [d for d in _ctx._physical_devices if d.device_type == "GPU"]
print(json.dumps([cuda_standin.started["devices"][_phys.index(d)][0]
                  for d in _ctx._visible_device_list if d.device_type == "GPU"]))
"""

MAPPING = (
    "after %gpu_select 1,2, TensorFlow's /GPU:0 is GPU 1 and /GPU:1 is GPU 2; /GPU:3 does not exist in this kernel"
)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    yield from standin_kernel(tmp_path, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})


def tf_visible(kernel: Kernel) -> list[int]:
    out, err = kernel.run(TF_VISIBLE)
    assert out, err
    return json.loads(out.strip().splitlines()[-1])


# -- case 0: a framework that will not follow the plan is not "applied" ---------------------------


def test_19_a_framework_that_will_not_follow_is_not_said_applied(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\nimport torch\ntorch.cuda.is_available()")  # CUDA starts, all GPUs
    out, err = kernel.run("%gpu_select 2")
    assert "PyTorch will NOT follow this" in flat(out) and "JAX will NOT follow this" in flat(out), (out, err)
    assert "Applied now to PyTorch" not in flat(out) and "applied to JAX when imported" not in flat(out), out
    assert "Applied to TensorFlow when imported; not applied to PyTorch, JAX (above: restart the kernel)." in flat(
        out
    ), out


# -- case 1: with tf.device('/GPU:3') after %gpu_select 1,2 -----------------------------------------


def test_19_the_device_names_tensorflow_accepts_are_read_from_the_cell_and_nothing_else() -> None:
    from jupyter_gpu.kernel.hooks import _TF_GPU, _TF_UNSATISFIED

    cell = (
        "with tf.device('/GPU:3'): pass\n"
        'tf.device("/device:gpu:4")\n'
        "MirroredStrategy(devices=['/job:localhost/replica:0/task:0/device:GPU:5', 'GPU:6', '/gpu:7'])\n"
        "torch.device('cuda:8'); print('my gpu:9 notes'); x = '/CPU:0'"
    )
    assert _TF_GPU.findall(cell) == ["3", "4", "5", "6", "7"]
    error = "Could not satisfy device specification '/job:localhost/replica:0/task:0/device:GPU:3'. enable_soft"
    assert _TF_UNSATISFIED.findall(error) == ["3"]


def test_19_a_tf_device_outside_the_plan_is_named_with_the_mapping_magic_first(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1,2\nimport tensorflow as tf")
    out, err = kernel.run("with tf.device('/GPU:3'):\n    x = tf.constant(1.0) + 1\nprint(x.device)")
    assert out.strip().endswith("device:CPU:0")  # the CPU build: soft placement, without a word from TensorFlow
    assert err.count("jupyter_gpu:") == 1 and MAPPING in err, err
    assert "soft placement" in flat(err) and "Use /GPU:0 or /GPU:1" in flat(err)
    _, err = kernel.run("with tf.device('/device:GPU:1'):\n    y = tf.constant(1.0) + 1")  # exists: nothing said
    assert "jupyter_gpu" not in flat(err), err
    # soft placement off: TensorFlow's own error, and the same one hint under it (not two)
    _, err = kernel.run(
        "tf.config.set_soft_device_placement(False)\nwith tf.device('/GPU:3'):\n    z = tf.constant(1.0) + 1"
    )
    assert "Could not satisfy device specification" in flat(err) and err.count(MAPPING) == 1, err
    assert tf_visible(kernel) == [1, 2]
    status, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(status) and "NOT" not in flat(status), status


def test_19_a_tf_device_outside_the_plan_is_named_tensorflow_imported_first(kernel: Kernel) -> None:
    kernel.run("import tensorflow as tf\n%load_ext jupyter_gpu\n%gpu_select 1,2")
    _, err = kernel.run("with tf.device('gpu:3'):\n    x = tf.constant(1.0) + 1")
    assert MAPPING in err, err
    assert tf_visible(kernel) == [1, 2]


def test_19_a_tf_device_before_the_magic_is_no_hint_where_the_gpu_exists(kernel: Kernel) -> None:
    # tf.device initializes TensorFlow with every GPU (its /GPU:3 is GPU 3): the magic is refused, no hint lies
    kernel.run("%load_ext jupyter_gpu\nimport tensorflow as tf\nwith tf.device('/GPU:3'):\n    x = tf.constant(1.0)")
    _, err = kernel.run("%gpu_select 1,2")
    assert "GPUAlreadyInitializedWarning" in flat(err), err
    _, err = kernel.run("with tf.device('/GPU:3'):\n    x = tf.constant(1.0)")
    assert "jupyter_gpu" not in flat(err), err
    assert tf_visible(kernel) == [0, 1, 2, 3]


# -- case 2: tf.distribute.MirroredStrategy ---------------------------------------------------------


def test_19_mirrored_strategy_gets_the_plans_gpus_and_a_device_outside_is_named(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1,2\nimport tensorflow as tf")
    _, err = kernel.run("strategy = tf.distribute.MirroredStrategy()")
    assert "jupyter_gpu" not in flat(err) and "Warning" not in flat(err), err
    # MirroredStrategy() takes tf.config.list_logical_devices('GPU'): the visible GPUs, the plan's (on
    # this CPU build no GPU exists for the runtime, so the strategy runs on CPU:0)
    assert tf_visible(kernel) == [1, 2]
    assert kernel.value("strategy.extended.worker_devices[0].endswith('CPU:0')") is True
    status, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(status) and "NOT" not in flat(status), status
    _, err = kernel.run("bad = tf.distribute.MirroredStrategy(devices=['/gpu:0', '/gpu:3'])")
    assert err.count("jupyter_gpu:") == 1 and MAPPING in err, err


def test_19_logical_gpus_of_a_split_limit_count_as_tensorflow_devices(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1,2\n%gpu_limit 2GiB 2GiB\nimport tensorflow as tf")
    _, err = kernel.run("ok = tf.distribute.MirroredStrategy(devices=['/gpu:0', '/gpu:3'])")  # GPU 2's second half
    assert "jupyter_gpu" not in flat(err), err
    _, err = kernel.run("with tf.device('/GPU:4'):\n    x = tf.constant(1.0)")
    assert (
        "after %gpu_select 1,2 and %gpu_limit 2GiB 2GiB, TensorFlow's /GPU:0 and /GPU:1 are GPU 1 and /GPU:2 and "
        "/GPU:3 are GPU 2; /GPU:4 does not exist in this kernel" in flat(err)
    ), err


# -- case 3: Keras 3 on each backend, after %gpu_select 1 --growth and %gpu_limit 2GiB ---------------

PLAN = "%load_ext jupyter_gpu\n%gpu_select 1 --growth\n%gpu_limit 2GiB"
MODEL = "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])"
A100_MIB = 81920  # the demo scenario's A100 80GB (GPU 0, 1)


def keras_kernel(tmp_path: Path, backend: str, by_file: bool = False) -> Iterator[Kernel]:
    """A stand-in kernel whose Keras picks ``backend`` from ``KERAS_BACKEND``, or from ``keras.json``."""
    home = tmp_path / "keras"
    home.mkdir()
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "KERAS_HOME": str(home), "CUDA_STANDIN_TORCH_NVML": "1"}
    if by_file:
        (home / "keras.json").write_text(json.dumps({"backend": backend}))
    else:
        env["KERAS_BACKEND"] = backend
    yield from standin_kernel(tmp_path, env)


@pytest.mark.parametrize("magic_first", [True, False], ids=["magic_first", "keras_first"])
def test_19_keras_on_tensorflow_gets_the_plan(tmp_path: Path, magic_first: bool) -> None:
    for kernel in keras_kernel(tmp_path, "tensorflow"):
        cells = [PLAN, "import keras"] if magic_first else ["import keras", PLAN]
        for cell in cells:
            _, err = kernel.run(cell)
            assert "Warning" not in flat(err), err
        _, err = kernel.run(MODEL)  # building a model initializes TensorFlow
        assert "Warning" not in flat(err), err
        assert kernel.value("keras.config.backend()") == "tensorflow"
        assert kernel.value("env()['TF_FORCE_GPU_ALLOW_GROWTH']") == "true"
        assert tf_visible(kernel) == [1]
        limits = kernel.value("{d.name: [c.memory_limit for c in v] for d, v in _ctx._virtual_device_map.items()}")
        assert list(limits.values()) == [[2048]], limits
        status, _ = kernel.run("%gpu_status")
        assert "TensorFlow: initialized with the plan applied" in flat(status) and "NOT" not in flat(status), status
        assert "Keras: backend tensorflow: Keras has no GPU settings of its own; it uses what TensorFlow" in flat(
            status
        )


@pytest.mark.parametrize("magic_first", [True, False], ids=["magic_first", "keras_first"])
def test_19_keras_on_jax_gets_the_plan_in_jaxs_variables(tmp_path: Path, magic_first: bool) -> None:
    for kernel in keras_kernel(tmp_path, "jax", by_file=True):  # keras.json names the backend
        cells = [PLAN, "import keras"] if magic_first else ["import keras", PLAN]
        for cell in cells:
            _, err = kernel.run(cell)
            assert "Warning" not in flat(err), err
        assert kernel.value("keras.config.backend()") == "jax"
        env = kernel.value("env()")
        # JAX reads these when it makes its GPU backend: GPU 1 only, no preallocation, 2 GiB of 80 GiB
        assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
        assert float(env["XLA_CLIENT_MEM_FRACTION"]) == pytest.approx(2048 / A100_MIB, abs=1e-3)
        _, err = kernel.run(MODEL)  # this jaxlib is a CPU build: said so, once
        assert err.count("GPUPlanMismatchWarning") == 1 and "this jaxlib has no GPU support" in flat(err), err
        status, _ = kernel.run("%gpu_status")
        assert "Keras: backend jax: Keras has no GPU settings of its own; it uses what JAX above says" in flat(status)
        assert "JAX: initialized on the CPU only" in flat(status) and "does NOT follow the plan" in flat(status), status


def test_19_keras_on_torch_gets_the_plan_magic_first(tmp_path: Path) -> None:
    for kernel in keras_kernel(tmp_path, "torch"):
        kernel.run(PLAN)
        _, err = kernel.run("import keras")  # Keras asks torch.cuda.is_available(): NVML, CUDA not started
        assert "Warning" not in flat(err) and kernel.value("cuda_standin.started") == {}, err
        assert kernel.value("keras.config.backend()") == "torch"
        assert kernel.value("env()['PYTORCH_CUDA_ALLOC_CONF']") == "expandable_segments:True"
        status, _ = kernel.run("%gpu_status")
        assert "PyTorch: imported, GPU not initialized; plan applied" in flat(status), status
        assert "Keras: backend torch: Keras has no GPU settings of its own; it uses what PyTorch above says" in flat(
            status
        )
        # the model's first CUDA tensor starts CUDA (this CPU build then fails): the queued cap lands on GPU 1
        kernel.run("torch = __import__('torch')\ntorch.cuda.init()")
        assert kernel.value("cuda_standin.started['env']") == ["1", "PCI_BUS_ID"]
        assert kernel.value("cuda_standin.fractions") == {"0": pytest.approx(2048 / A100_MIB, abs=1e-6)}


def test_19_keras_on_torch_imported_first_started_cuda_and_says_so(tmp_path: Path) -> None:
    for kernel in keras_kernel(tmp_path, "torch"):
        kernel.run("%load_ext jupyter_gpu\nimport keras")  # no magic yet: is_available() asks CUDA
        assert kernel.value("cuda_standin.started['env']") == [None, "PCI_BUS_ID"]
        out, err = kernel.run("%gpu_select 1 --growth")
        assert "PyTorch will NOT follow this: CUDA already started in this kernel" in flat(out), (out, err)
        assert "torch.cuda.is_available()" in flat(out) and "not applied to PyTorch" in flat(out), out
        status, _ = kernel.run("%gpu_status")
        assert "Keras: backend torch" in flat(status) and "CUDA: started in this kernel by PyTorch" in flat(status), (
            status
        )


def test_19_keras_on_jax_without_growth_says_it_turned_tensorflow_growth_on(tmp_path: Path) -> None:
    for kernel in keras_kernel(tmp_path, "jax"):
        kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\nimport keras")
        assert kernel.value("env()['TF_FORCE_GPU_ALLOW_GROWTH']") == "true"  # Keras' own doing
        status, _ = kernel.run("%gpu_status")
        assert "at import it set TF_FORCE_GPU_ALLOW_GROWTH=true" in flat(status), status
