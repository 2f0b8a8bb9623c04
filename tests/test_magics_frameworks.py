"""Issue 9: the plan never silently diverges from what the frameworks do, in real kernels.

Real ipykernel processes on the ``demo`` simulated GPUs (4 GPUs of 2 models), the real CPU builds
of TensorFlow, PyTorch and JAX, and ``tests/standin/cuda_standin.py`` — imported from an IPython
startup file — standing in for the CUDA driver beneath TensorFlow's and PyTorch's GPU listing: it
reads ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` once, when something first lists GPUs, and
numbers GPUs fastest first (the RTX A6000s, NVML 2 and 3, before the A100s) unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Each case runs user code first and magic first, and ends with the
framework seeing what the plan says, or with a clear warning and nothing changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, standin_kernel, start
from support import flat

pytestmark = pytest.mark.frameworks

# NVML index of each physical GPU TensorFlow lists, and the ones it made visible, via the stand-in.
TF_GPUS = """
import cuda_standin
from tensorflow.python.eager import context as _c
_ctx = _c.context()
_phys = [d for d in _ctx._physical_devices if d.device_type == "GPU"]
print(json.dumps({"physical": [cuda_standin.started["devices"][i][0] for i in range(len(_phys))],
                  "visible": [cuda_standin.started["devices"][_phys.index(d)][0]
                              for d in _ctx._visible_device_list if d.device_type == "GPU"],
                  "limits": {str(cuda_standin.started["devices"][_phys.index(d)][0]): [c.memory_limit for c in v]
                             for d, v in _ctx._virtual_device_map.items()}}))
"""


def status_entry(out: str, name: str) -> str:
    """A framework's entry in ``%gpu_status``'s output (its wrapped lines, indented deeper, joined),
    whitespace flattened."""
    return flat(re.split(r"\n(?! {4})", out.split(f"{name}:")[1])[0])


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    yield from standin_kernel(tmp_path)


def tf_gpus(kernel: Kernel) -> dict:
    out, err = kernel.run(TF_GPUS)
    assert out, err
    return json.loads(out.strip().splitlines()[-1])


def test_1_gpus_listed_before_the_magic_map_by_fact_not_by_position(kernel: Kernel) -> None:
    kernel.run("import tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')")
    assert tf_gpus(kernel)["physical"] == [2, 3, 0, 1]  # CUDA's fastest-first order, not nvidia-smi's
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
    assert "GPU 1 (A100-SXM4-80GB" in flat(out) and "TensorFlow /GPU:0" in flat(out), err
    assert tf_gpus(kernel)["visible"] == [1]  # NVML GPU 1 (TensorFlow's physical GPU:3), not NVML GPU 0
    assert "PyTorch will NOT follow this" in flat(out) and "JAX will NOT follow this" in flat(out)  # cannot be narrowed
    assert "PyTorch cuda:0" not in flat(out)
    out, err = kernel.run("%gpu_select 3")
    assert tf_gpus(kernel)["visible"] == [3] and "set by hand" not in flat(err), err
    kernel.run("tf.config.set_visible_devices(gpus[0], 'GPU')")  # by hand: TensorFlow's GPU:0 = NVML 2
    _, err = kernel.run("%gpu_select 1")
    assert "replacing the visible GPUs set by hand (GPU:0) with the plan's (GPU:3)" in flat(err), err
    assert tf_gpus(kernel)["visible"] == [1]
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: imported, GPUs listed (CUDA started), not initialized; plan applied" in flat(out)


def test_1_an_index_counted_fastest_first_cannot_be_mapped_so_the_plan_is_refused(kernel: Kernel) -> None:
    kernel.run(
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
        "import tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')"
    )
    assert tf_gpus(kernel)["physical"] == [2]  # '0' was the fastest GPU, NVML 2
    kernel.run("%load_ext jupyter_gpu")
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_select 2")
    assert "GPUAlreadyInitializedWarning: TensorFlow already started CUDA in this kernel" in flat(err), (out, err)
    assert "cannot tell which GPU is which" in flat(err) and "restart the kernel" in flat(err)
    assert kernel.value("state()") == before and tf_gpus(kernel)["visible"] == [2]


def test_1_magic_first_gpus_are_where_the_plan_says(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 3,1 --growth\n%gpu_limit 1GiB")
    _, err = kernel.run(
        "import tensorflow as tf\nimport torch\ngpus = tf.config.list_physical_devices('GPU')\n"
        "x = tf.constant(1.0)\ntorch.cuda.init()"
    )
    assert "jupyter_gpu" not in flat(err), err  # the documented path: no warning, no hint
    assert tf_gpus(kernel)["visible"] == [3, 1]
    assert kernel.value("cuda_standin.fractions") == {
        "0": pytest.approx(1024 / 49140, abs=1e-6),
        "1": pytest.approx(1024 / 81920, abs=1e-6),
    }
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(out) and "NOT" not in flat(out)
    assert kernel.value("torch.cuda.device_count()") == 2
    assert kernel.value("[torch.cuda.get_device_name(i) for i in range(2)]") == [
        "NVIDIA RTX A6000 [simulated]",
        "NVIDIA A100-SXM4-80GB [simulated]",
    ]


def test_2_magic_first_then_the_users_cuda_visible_devices_is_noticed(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1,2 --growth\n%gpu_limit 2048")
    out, err = kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '0'\nimport tensorflow as tf\nimport torch")
    assert (
        "GPUPlanMismatchWarning" in flat(err)
        and "CUDA_VISIBLE_DEVICES='0'" in flat(err)
        and "not the plan" in flat(err)
    ), err
    assert err.count("GPUPlanMismatchWarning") == 1  # one clear warning, not one per framework
    out, _ = kernel.run("%gpu_status")
    assert "plan applied" not in flat(out) and "does NOT follow the plan" in flat(out)
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_limit 1024")
    assert "UsageError" in flat(err) and "changes nothing" in flat(err) and err.count("\n") == 1, err
    assert kernel.value("state()") == before and kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == "0"
    # PyTorch will have one GPU (NVML 0, uncapped): no cap may be queued for devices that will not exist
    kernel.run("torch.cuda.init()")
    assert kernel.value("cuda_standin.fractions") == {}
    kernel.run("gpus = tf.config.list_physical_devices('GPU')")
    seen = tf_gpus(kernel)  # TensorFlow was left as the user's variable made it, and said so
    assert seen["physical"] == [0] == seen["visible"] and seen["limits"] == {}


def test_2_user_first_a_selection_says_it_replaces_the_users_value(kernel: Kernel) -> None:
    kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '0'")
    _out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1,2\n%gpu_limit 2048")
    assert "replaces CUDA_VISIBLE_DEVICES='0'" in flat(err), err
    kernel.run("import torch\ntorch.cuda.init()")
    assert kernel.value("cuda_standin.fractions") == {
        "0": pytest.approx(2048 / 81920, abs=1e-6),
        "1": pytest.approx(2048 / 49140, abs=1e-6),
    }


def test_4_5_cpu_only_jax_is_not_gpu_initialized_and_a_tf1_session_is(kernel: Kernel) -> None:
    kernel.run("import jax.numpy as jnp\nx = jnp.arange(3)")
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
    assert "already initialized" not in flat(err) and "GPU 1 (A100-SXM4-80GB" in flat(out), err
    assert "JAX does not follow the GPU plan (GPU 1): it runs on the CPU only" in flat(err)  # item 8, said once
    assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == "1"
    kernel.run(
        "import tensorflow as tf\ng = tf.Graph()\nwith g.as_default():\n    c = tf.constant(1)\n"
        "sess = tf.compat.v1.Session(graph=g, config=tf.compat.v1.ConfigProto())\nsess.run(c)"
    )
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized" in flat(out)
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_limit 1024")
    assert "GPUAlreadyInitializedWarning: TensorFlow already initialized the GPU" in flat(err)
    assert kernel.value("state()") == before


def test_6_7_user_settings_survive_and_framework_errors_get_a_hint(kernel: Kernel) -> None:
    kernel.run(
        "import tensorflow as tf\ntf.config.threading.set_intra_op_parallelism_threads(2)\n"
        "tf.config.threading.set_inter_op_parallelism_threads(3)"
    )
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 2048")
    assert kernel.value(
        "[tf.config.threading.get_intra_op_parallelism_threads(), "
        "tf.config.threading.get_inter_op_parallelism_threads()]"
    ) == [2, 3]
    _, err = kernel.run(
        "for g in tf.config.list_physical_devices('GPU'):\n    tf.config.experimental.set_memory_growth(g, True)"
    )
    assert "ValueError: Cannot set memory growth on device when virtual devices configured" in flat(err)
    assert "jupyter_gpu: TensorFlow refuses set_memory_growth" in flat(err) and "%gpu_select --growth" in flat(err)
    assert "The kernel's GPU plan: GPU 1" in flat(err)
    kernel.run(
        "g = tf.config.get_visible_devices('GPU')[0]\n"
        "tf.config.set_logical_device_configuration(g, [tf.config.LogicalDeviceConfiguration(512)])"
    )
    _, err = kernel.run("%gpu_limit 1024")
    assert "replacing the logical devices set by hand" in flat(err) and "512 MiB" in flat(err), err
    assert tf_gpus(kernel)["limits"] == {"1": [1024]}
    kernel.run("x = tf.constant(1.0)")
    _out, err = kernel.run("tf.config.set_visible_devices([], 'GPU')")
    assert "Visible devices cannot be modified after being initialized" in flat(err) and "%gpu_select SPEC" in flat(err)


def test_8_a_cpu_only_tensorflow_is_not_reported_as_success(scenario) -> None:
    for kernel in start({"JUPYTER_GPU_SIMULATE": "demo"}):  # no stand-in: the real CPU build lists no GPU
        kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
        out, err = kernel.run("import tensorflow as tf\nx = tf.constant(1.0)")
        assert "TensorFlow does not follow the GPU plan (GPU 1): it sees no GPU" in flat(err), err
        assert "tensorflow[and-cuda]" in flat(err)
        out, _ = kernel.run("%gpu_status")
        assert "initialized with the plan applied" not in flat(out) and "does NOT follow the plan" in flat(out)


def test_9_the_admin_ceiling_comes_from_the_kernels_start(tmp_path: Path) -> None:
    for kernel in standin_kernel(tmp_path, {"JUPYTER_GPU_MAX_LIMIT": "10%"}):
        kernel.run("os.environ.pop('JUPYTER_GPU_MAX_LIMIT')")
        kernel.run("%load_ext jupyter_gpu")
        _, err = kernel.run("%config GpuMagics.max_limit = ''")
        assert "can only be tightened" in flat(err)
        _, err = kernel.run("%gpu_limit 32GiB")
        assert "UsageError" in flat(err) and "above the admin ceiling" in flat(err), err
        kernel.run("%reload_ext jupyter_gpu")
        _out, err = kernel.run("%gpu_limit 32GiB")
        assert "UsageError" in flat(err) and "above the admin ceiling" in flat(err), err


def test_3_index_style_nvidia_visible_devices_in_a_container(scenario) -> None:
    for kernel in start({"NVIDIA_VISIBLE_DEVICES": "2,3"}):  # the scenario's 2 GPUs are the container's 0, 1
        kernel.run("%load_ext jupyter_gpu")
        out, err = kernel.run("%gpu_select")
        assert " GPU 0 " in out and " GPU 1 " in out, (out, err)
        out, err = kernel.run("%gpu_select all")
        assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == "0,1", err
        out, err = kernel.run("%gpu_select auto")
        assert "UsageError" not in flat(err) and kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == "0"


def test_10_auto_says_why_limits_warn_and_status_is_complete(kernel: Kernel) -> None:
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select auto")
    assert "GPU 3 " not in out or "Xorg" not in flat(out)
    assert "chosen by auto: free" in flat(out), (out, err)
    out, err = kernel.run("%gpu_select 0\n%gpu_limit 10GiB")
    assert "only 5.3 GiB of GPU 0 is free now (held by bob 74.2 GiB)" in flat(out), (out, err)
    kernel.run("%gpu_select none")
    out, _ = kernel.run("%gpu_limit")
    assert "applies again when GPUs are selected" in flat(out)
    out, _ = kernel.run("%gpu_status")
    assert "Threads: intra-op" in flat(out) and "(* selected)" not in flat(out) and "jupyter-gpu status" in flat(out)


def test_5_a_session_made_before_the_extension_counts_too(kernel: Kernel) -> None:
    kernel.run(
        "import tensorflow as tf\ng = tf.Graph()\nwith g.as_default():\n    c = tf.constant(1)\n"
        "sess = tf.compat.v1.Session(graph=g, config=tf.compat.v1.ConfigProto())\nsess.run(c)"
    )
    kernel.run("%load_ext jupyter_gpu")
    before = kernel.value("state()")
    _, err = kernel.run("%gpu_select 2")
    assert "GPUAlreadyInitializedWarning: TensorFlow already initialized the GPU" in flat(err), err
    assert kernel.value("state()") == before
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized before the plan" in flat(out)


def test_6_7_magic_first_then_the_users_settings_and_the_blog_loop(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 2 --growth\n%gpu_limit 2048")
    kernel.run("import tensorflow as tf\ntf.config.threading.set_intra_op_parallelism_threads(2)")
    kernel.run("%gpu_limit 1024")
    assert kernel.value("tf.config.threading.get_intra_op_parallelism_threads()") == 2
    assert tf_gpus(kernel) == {"physical": [2], "visible": [2], "limits": {"2": [1024]}}
    _, err = kernel.run(
        "for g in tf.config.list_physical_devices('GPU'):\n    tf.config.experimental.set_memory_growth(g, True)"
    )
    assert (
        "Cannot set memory growth" in flat(err) and "growth is" not in flat(err) and "%gpu_select --growth" in flat(err)
    )
    assert "The kernel's GPU plan: GPU 2; growth on; limit GPU 2: 1 GiB" in flat(err)


def test_1_torch_is_available_before_the_extension_starts_cuda_unseen(kernel: Kernel) -> None:
    kernel.run("import torch\nprint(torch.cuda.is_available())")
    kernel.run("%load_ext jupyter_gpu")
    before = kernel.value("state()")
    out, err = kernel.run("%gpu_select 1")
    assert "PyTorch already started CUDA in this kernel" in flat(err) and "cannot tell which GPU is which" in flat(
        err
    ), (out, err)
    assert "restart the kernel" in flat(err) and kernel.value("state()") == before
    assert kernel.value("torch.cuda.device_count()") == 4


def test_7_user_first_growth_set_by_hand_then_a_limit_says_what_tensorflow_will_do(kernel: Kernel) -> None:
    kernel.run(
        "import tensorflow as tf\nfor g in tf.config.list_physical_devices('GPU'):\n"
        "    tf.config.experimental.set_memory_growth(g, True)"
    )
    _, err = kernel.run("%load_ext jupyter_gpu\n%gpu_limit 2048")
    assert "the memory growth set by hand on GPU:0, GPU:1, GPU:2, GPU:3 does not hold next to a memory limit" in flat(
        err
    )
    assert err.count("set by hand") == 1
    assert "%gpu_select --growth" in flat(err)
    assert tf_gpus(kernel)["limits"] == {"0": [2048], "1": [2048], "2": [2048], "3": [2048]}


ALLOC = "torch._C._accelerator_getAllocatorSettings()"  # the allocator settings PyTorch parsed (once, lazily)


def test_11_allocator_settings_set_by_code_are_kept_and_a_conflict_is_warned(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
    kernel.run("os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'max_split_size_mb:128'")  # the plan needs none of it
    kernel.run("%gpu_select 2")
    assert kernel.value("env()")["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"  # not reset behind the back
    kernel.run("%gpu_select 2 --growth")
    assert kernel.value("env()")["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    _, err = kernel.run(
        "os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:False'\n"
        "os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'true'"
    )
    assert "GPUPlanMismatchWarning: code in this kernel changed PyTorch's settings" in flat(err), err
    assert "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:False', without expandable_segments:True" in flat(err)
    assert "changed JAX's settings" in flat(err) and "XLA_PYTHON_CLIENT_PREALLOCATE is 'true'" in flat(err)
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: not imported; the plan is applied when it is imported — does NOT follow the plan" in flat(out), out
    _, err = kernel.run("%gpu_limit 1GiB")
    assert "replaces PYTORCH_CUDA_ALLOC_CONF='expandable_segments:False' (now 'expandable_segments:True')" in flat(err)
    assert "XLA_PYTHON_CLIENT_PREALLOCATE='true' (now 'false')" in flat(err) and "Warning" not in flat(err), err
    kernel.run("import torch\ntorch.cuda.init()")
    assert kernel.value(ALLOC) == "expandable_segments:True"  # what PyTorch's allocator really read
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: initialized with the plan applied" in flat(out) and "NOT" not in flat(out), out


def test_11_a_users_pytorch_alloc_conf_is_carried_into_the_variable_pytorch_reads(tmp_path: Path) -> None:
    for kernel in standin_kernel(tmp_path, {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}):
        kernel.run("%load_ext jupyter_gpu\n%gpu_select 1 --growth")
        _, err = kernel.run("import torch\ntorch.cuda.init()")
        assert "jupyter_gpu" not in flat(err), err
        # PyTorch parses PYTORCH_CUDA_ALLOC_CONF when set and then never PYTORCH_ALLOC_CONF
        assert kernel.value(ALLOC) == "max_split_size_mb:64,expandable_segments:True"


def test_11_jax_platform_allocator_has_no_memory_fraction_so_the_limit_is_said_not_to_hold(kernel: Kernel) -> None:
    kernel.run(
        "os.environ['XLA_PYTHON_CLIENT_ALLOCATOR'] = 'platform'\nos.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'true'"
    )
    _, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1 --growth")  # the first plan replaces a value too
    assert "%gpu_select replaces XLA_PYTHON_CLIENT_PREALLOCATE='true' (now 'false'): the plan needs it." in flat(err), (
        err
    )
    _, err = kernel.run("%gpu_select 1 --no-growth\n%gpu_limit 2GiB")
    assert "GPUPlanMismatchWarning: JAX will not follow the GPU plan (GPU 1; limit GPU 1: 2 GiB)" in flat(err), err
    assert "platform allocator has no memory fraction" in flat(err)
    kernel.run("del os.environ['XLA_PYTHON_CLIENT_ALLOCATOR']")
    _, err = kernel.run("os.environ['XLA_PYTHON_CLIENT_MEM_FRACTION'] = '.9'")
    assert "JAX refuses both" in flat(err), err
    kernel.run("del os.environ['XLA_PYTHON_CLIENT_MEM_FRACTION']")
    out, _ = kernel.run("%gpu_status")
    assert "JAX: not imported; the plan is applied when it is imported" in flat(out) and "NOT" not in flat(out), out


def test_12_a_memory_fraction_set_by_hand_after_the_plan_is_not_reported_as_the_plan(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 1GiB")
    _, err = kernel.run("import torch\ntorch.cuda.init()")
    assert "jupyter_gpu" not in flat(err), err  # the plan's cap: nothing to say
    _, err = kernel.run("torch.cuda.set_per_process_memory_fraction(0.5, 0)")  # a later cell, no state change
    assert (
        "GPUPlanMismatchWarning: PyTorch does not follow the GPU plan (GPU 1): cuda:0 (GPU 1) may use 50.0% of its "
        "memory (set_per_process_memory_fraction by code), the plan 1." in flat(err)
    ), err
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: initialized with the plan applied" not in flat(out) and "does NOT follow the plan" in flat(out), (
        out
    )
    kernel.run(f"torch.cuda.set_per_process_memory_fraction({1024 / 81920!r}, 0)")  # back to the plan's cap
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: initialized with the plan applied" in flat(out), out


def test_12_jax_told_to_use_the_cpu_is_not_sent_to_install_a_gpu_jaxlib(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
    _, err = kernel.run(
        "import jax\njax.config.update('jax_platforms', 'cpu')\nimport jax.numpy as jnp\nx = jnp.arange(3)"
    )
    assert (
        "JAX does not follow the GPU plan (GPU 1): it runs on the CPU only: the code set jax_platforms='cpu'"
        in flat(err)
    ), err
    assert "jax[cuda12]" not in flat(err)


CHILD_ENV = (
    "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ['CUDA_VISIBLE_DEVICES', "
    "'CUDA_DEVICE_ORDER', 'TF_FORCE_GPU_ALLOW_GROWTH', 'PYTORCH_CUDA_ALLOC_CONF', "
    "'XLA_PYTHON_CLIENT_PREALLOCATE', 'XLA_CLIENT_MEM_FRACTION']}))"
)


def test_13_programs_the_kernel_starts_inherit_the_selection_and_growth_and_the_limit_says_what_not(
    kernel: Kernel,
) -> None:
    out, _ = kernel.run("%load_ext jupyter_gpu\n%gpu_select 3,1 --growth\n%gpu_limit 1GiB")
    assert (
        "inherit the GPU selection, growth and JAX's share, and, where their Python has jupyter_gpu installed "
        "(this kernel's has), the TensorFlow and PyTorch caps" in flat(out)
    )
    assert "a cap per process, not shared" in flat(out) and "Other programs get the variables only." in flat(out)
    planned = kernel.value("env()")
    child = kernel.value(
        f"json.loads(__import__('subprocess').run([sys.executable, '-c', {CHILD_ENV!r}], "
        "capture_output=True, text=True, check=True).stdout)"
    )
    assert child == {key: planned[key] for key in child}
    assert child["CUDA_VISIBLE_DEVICES"] == "3,1" and child["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert child["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True" and child["XLA_CLIENT_MEM_FRACTION"]
    out, _ = kernel.run("!{sys.executable} -c \"import os; print(os.environ['CUDA_VISIBLE_DEVICES'])\"")
    assert out.strip() == "3,1"  # a shell escape too
    kernel.run(
        "import multiprocessing\nwith multiprocessing.get_context('spawn').Pool(1) as pool:\n"
        "    spawned = pool.apply(os.getenv, ('CUDA_VISIBLE_DEVICES',))"
    )
    assert kernel.value("spawned") == "3,1"


def test_12_jax_narrowed_by_its_own_flag_is_not_reported_as_the_plan(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 3,1\nimport jax")
    _, err = kernel.run("jax.config.update('jax_cuda_visible_devices', '1')")  # CUDA device 1 of the plan's: GPU 1
    assert (
        "GPUPlanMismatchWarning: JAX does not follow the GPU plan (GPU 3,1): it uses GPU 1, the plan says "
        "GPU 3, 1" in flat(err)
    ), err
    out, _ = kernel.run("%gpu_status")
    assert "JAX: imported, GPU not initialized; plan NOT applied — does NOT follow the plan" in flat(out), out
    _, err = kernel.run("jax.config.update('jax_cuda_visible_devices', 'all')")
    out, _ = kernel.run("%gpu_status")
    assert "JAX: imported, GPU not initialized; plan applied" in flat(out) and "NOT" not in flat(out), out


def test_12_logical_devices_set_by_hand_after_the_limit_are_not_reported_as_the_plan(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 1GiB\nimport tensorflow as tf")
    assert tf_gpus(kernel)["limits"] == {"1": [1024]}
    _, err = kernel.run(
        "g = tf.config.list_physical_devices('GPU')[0]\n"
        "tf.config.set_logical_device_configuration(g, [tf.config.LogicalDeviceConfiguration(4096)])"
    )
    assert (
        "GPUPlanMismatchWarning: TensorFlow does not follow the GPU plan (GPU 1): GPU:0 has logical devices "
        "of 4096 MiB (set by code), the plan 1024 MiB" in flat(err)
    ), err
    kernel.run("x = tf.constant(1.0)")
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" not in flat(out) and "does NOT follow the plan" in flat(
        out
    ), out


def test_14_torch_device_count_before_the_magic_counts_with_nvml_and_starts_no_cuda(tmp_path: Path) -> None:
    # PyTorch 2.13 torch/cuda/__init__.py device_count(): NVML first (no cuInit), not cached before init
    for kernel in standin_kernel(tmp_path, {"CUDA_STANDIN_TORCH_NVML": "1"}):
        kernel.run("import torch")
        assert kernel.value("torch.cuda.device_count()") == 4
        assert kernel.value("'env' in cuda_standin.started") is False  # CUDA did not start
        out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
        assert "PyTorch cuda:0" in flat(out) and "Warning" not in flat(err), (out, err)
        assert kernel.value("torch.cuda.device_count()") == 1  # the plan's variables, counted again
        # what Keras' torch backend asks at import: with the plan's PYTORCH_NVML_BASED_CUDA_CHECK=1, NVML answers
        assert kernel.value("torch.cuda.is_available()") is True
        assert kernel.value("'env' in cuda_standin.started") is False
        kernel.run("torch.cuda.init()")
        assert kernel.value("cuda_standin.started['env']") == ["1", "PCI_BUS_ID"]
        out, _ = kernel.run("%gpu_status")
        assert "PyTorch: initialized with the plan applied" in flat(out), out


def test_15_reload_ext_keeps_the_kernels_plan_instead_of_the_admin_defaults(tmp_path: Path) -> None:
    for kernel in standin_kernel(tmp_path, {"JUPYTER_GPU_DEFAULT_SELECT": "3", "JUPYTER_GPU_DEFAULT_LIMIT": "10%"}):
        out, _ = kernel.run("%load_ext jupyter_gpu")
        assert "GPU 3" in flat(out)  # the defaults, at the first load
        kernel.run("%gpu_select 1\n%gpu_limit 2GiB\nimport torch")
        before = kernel.value("state()")
        out, err = kernel.run("%reload_ext jupyter_gpu")
        assert kernel.value("state()") == before and "jupyter_gpu" not in flat(out) + err, (out, err)
        kernel.run("torch.cuda.init()")
        _, err = kernel.run("%reload_ext jupyter_gpu")  # no spurious "too late" warning, no restart offer
        assert "Warning" not in flat(err) and "restart" not in flat(err), err
        assert kernel.value("cuda_standin.fractions") == {"0": pytest.approx(2048 / 81920, abs=1e-6)}


def test_12_tensorflow_narrowed_by_hand_in_a_later_cell_is_noticed_at_once(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 3,1\n%gpu_limit 1GiB\nimport tensorflow as tf")  # lists the GPUs
    _, err = kernel.run("tf.config.set_visible_devices([], 'GPU')")  # no state change: TensorFlow stays listed
    assert (
        "GPUPlanMismatchWarning: TensorFlow does not follow the GPU plan (GPU 3,1): it uses no GPU, the plan "
        "says GPU 3, 1" in flat(err)
    ), err


def test_2_the_same_gpus_spelled_otherwise_and_a_value_set_back_are_not_a_divergence(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 2048")
    uuid = kernel.value("cuda_standin._nvml_gpus()[1][2]")
    _, err = kernel.run(f"os.environ['CUDA_VISIBLE_DEVICES'] = {uuid!r}")  # GPU 1 by its UUID: the same GPU
    assert "Warning" not in flat(err), err
    _, err = kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '0'\nimport torch")
    assert "GPUPlanMismatchWarning" in flat(err) and "not the plan" in flat(err), err
    kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '1'")  # set back before PyTorch starts CUDA
    kernel.run("torch.cuda.init()")
    assert kernel.value("cuda_standin.fractions") == {"0": pytest.approx(2048 / 81920, abs=1e-6)}  # the cap holds
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: initialized with the plan applied" in flat(out), out


def test_16_a_plan_without_a_selection_is_not_called_a_divergence_on_gpus_of_two_models(kernel: Kernel) -> None:
    # No CUDA_DEVICE_ORDER and two models: CUDA's order is unknown, but with no selection every GPU is the plan's
    kernel.run("%load_ext jupyter_gpu\n%gpu_threads --intra 4 --inter 2\nimport tensorflow as tf\nimport torch")
    out, _ = kernel.run("%gpu_status")
    assert "does NOT follow" not in flat(out) and "TensorFlow: imported, GPU not initialized; plan applied" in flat(
        out
    ), out
    assert "PyTorch: imported, GPU not initialized; plan applied" in flat(out)
    _, err = kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '0'")  # a change still counts
    assert "GPUPlanMismatchWarning" in flat(err), err
    out, _ = kernel.run("%gpu_status")
    assert "does NOT follow" in flat(out), out


def test_7_growth_on_some_gpus_and_an_nvidia_smi_index_get_a_hint(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 3,1\nimport tensorflow as tf")
    _, err = kernel.run(
        "tf.config.experimental.set_memory_growth(tf.config.list_physical_devices('GPU')[0], True)\n"
        "x = tf.constant(1.0)"
    )
    assert "ValueError: Memory growth cannot differ between GPU devices" in flat(err), err  # TensorFlow's own check
    assert "jupyter_gpu: TensorFlow needs the same memory growth on every GPU" in flat(err) and "--growth" in flat(err)
    assert "The kernel's GPU plan: GPU 3, 1" in flat(err)
    _, err = kernel.run("import torch\ntorch.cuda.set_per_process_memory_fraction(0.5, 3)")  # nvidia-smi's GPU 3
    assert "invalid device ordinal" in flat(err) and "count the GPUs the plan selected, from 0" in flat(err), err


def test_2_a_cuda_visible_devices_set_after_cuda_started_is_said_to_have_no_effect(kernel: Kernel) -> None:
    kernel.run(
        "%load_ext jupyter_gpu\n%gpu_select 1,2\nimport tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')"
    )  # CUDA starts with the plan's variables
    _, err = kernel.run("os.environ['CUDA_VISIBLE_DEVICES'] = '0'")
    assert (
        "GPUPlanMismatchWarning: code in this kernel set CUDA_VISIBLE_DEVICES='0' after CUDA started "
        "(TensorFlow started it with CUDA_VISIBLE_DEVICES '1,2'"
        in flat(err)
        and "has no effect" in flat(err)
    ), err
    kernel.run("import torch\ntorch.cuda.init()")
    assert kernel.value("cuda_standin.started['env']") == ["1,2", "PCI_BUS_ID"]  # indeed: CUDA read them once


def test_17_a_limit_then_another_selection_caps_the_new_gpus_and_selecting_twice_keeps_your_settings(
    kernel: Kernel,
) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1 --growth\n%gpu_limit 2GiB\nimport torch")
    _, err = kernel.run("os.environ['PYTORCH_ALLOC_CONF'] = 'max_split_size_mb:64'")  # the newer name, after the plan
    assert "PyTorch ignores PYTORCH_ALLOC_CONF='max_split_size_mb:64' while PYTORCH_CUDA_ALLOC_CONF is set" in flat(
        err
    ), err
    _, err = kernel.run("%gpu_select 3,2")  # PyTorch imported, CUDA not started: the caps move with the GPUs
    assert "Warning" not in flat(err), err
    assert kernel.value("env()")["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64,expandable_segments:True"
    kernel.run("torch.cuda.init()")
    assert kernel.value("cuda_standin.fractions") == {
        "0": pytest.approx(2048 / 49140, abs=1e-6),
        "1": pytest.approx(2048 / 49140, abs=1e-6),
    }
    assert kernel.value(ALLOC) == "max_split_size_mb:64,expandable_segments:True"


# Issue 19: the seeds' TF1 snippets. What a session really uses comes from the stand-in
# (cuda_standin.sessions: its GPUs by NVML index, MiB per device, growth), read from the ConfigProto
# the session was made with, as TensorFlow's GPU build reads it.
SESSION = "cuda_standin.sessions[-1]"
A6000_MIB = 49140  # the demo scenario's RTX A6000 (GPU 2, 3)


def test_19_a_tf1_session_config_gets_the_plan_in_every_field_it_leaves_unset(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 2,3 --growth\n%gpu_limit 4GiB\nimport tensorflow as tf")
    _, err = kernel.run(
        "config = tf.compat.v1.ConfigProto()\nconfig.gpu_options.allow_growth = True\n"
        "sess = tf.compat.v1.Session(config=config)"
    )
    assert "Warning" not in flat(err), err
    assert kernel.value(SESSION) == {"gpus": [2, 3], "memory_mb": {"2": [4096.0], "3": [4096.0]}, "growth": True}
    assert kernel.value("len(config.gpu_options.experimental.virtual_devices)") == 0  # the user's object is untouched
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(out) and "NOT" not in flat(out), out
    assert (
        "Session 1: /GPU:0 (GPU 2), /GPU:1 (GPU 3); limit /GPU:0 (GPU 2): 4 GiB, /GPU:1 (GPU 3): 4 GiB; growth on"
        in flat(out)
    ), out
    # a field the user set that contradicts the plan: kept, and said once
    _, err = kernel.run(
        "config = tf.compat.v1.ConfigProto()\nconfig.gpu_options.visible_device_list = '1'\n"
        "config.gpu_options.per_process_gpu_memory_fraction = 0.9\nsess2 = tf.compat.v1.Session(config=config)"
    )
    assert err.count("GPUPlanMismatchWarning") == 1, err
    assert (
        "TensorFlow Session 2 does not follow the GPU plan (GPU 2,3; limit 4 GiB): per_process_gpu_memory_fraction"
        "=0.9 in your ConfigProto overrides %gpu_limit 4 GiB for this session" in flat(err)
    ), err
    assert kernel.value(SESSION) == {"gpus": [3], "memory_mb": {"3": [round(A6000_MIB * 0.9, 1)]}, "growth": True}
    out, _ = kernel.run("%gpu_status")
    assert "initialized with the plan applied" not in flat(
        out
    ) and "Session 2: /GPU:0 (GPU 3); 90% of each GPU" in flat(out), out
    assert "does NOT follow the plan: Session 2: per_process_gpu_memory_fraction=0.9" in flat(out), out
    kernel.run("sess2.close()")
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(out) and "Session 2" not in flat(out), out
    # Session() without a config takes the eager context's config: the plan
    _, err = kernel.run("sess3 = tf.compat.v1.Session()")
    assert "Warning" not in flat(err) and kernel.value(SESSION)["memory_mb"] == {"2": [4096.0], "3": [4096.0]}, err
    # InteractiveSession replaces a missing config by its own (allow_growth only): the plan is merged in too
    kernel.run("isess = tf.compat.v1.InteractiveSession()\nisess.close()")
    assert kernel.value(SESSION) == {"gpus": [2, 3], "memory_mb": {"2": [4096.0], "3": [4096.0]}, "growth": True}
    _, err = kernel.run(
        "isess = tf.compat.v1.InteractiveSession(config=tf.compat.v1.ConfigProto(device_count={'GPU': 0}))"
    )
    assert err.count("GPUPlanMismatchWarning") == 1, err
    assert "device_count={'GPU': 0} in your ConfigProto: this session uses no GPU, the plan GPU 2, GPU 3" in flat(err)
    assert kernel.value(SESSION)["gpus"] == []
    out, _ = kernel.run("%gpu_status")
    assert "InteractiveSession 5: no GPU (device_count={'GPU': 0})" in flat(out), out
    # Keras 3 has no TF1 session: tf.compat.v1.keras.backend.set_session is gone (tf_keras, Keras 2, had it)
    assert kernel.value("hasattr(tf.compat.v1.keras.backend, 'set_session')") is False


def test_19_a_tf1_session_made_before_the_magic_is_said_with_what_it_uses(kernel: Kernel) -> None:
    kernel.run(
        "%load_ext jupyter_gpu\nimport tensorflow as tf\nconfig = tf.compat.v1.ConfigProto()\n"
        "config.gpu_options.visible_device_list = '1'\nconfig.gpu_options.per_process_gpu_memory_fraction = 0.9\n"
        "sess = tf.compat.v1.Session(config=config)\ngpus = tf.config.list_physical_devices('GPU')"
    )
    before = kernel.value("state()")
    _, err = kernel.run("%gpu_select 2,3 --growth")
    assert "GPUAlreadyInitializedWarning: TensorFlow already initialized the GPU" in flat(err), err
    # CUDA numbers fastest first here (no CUDA_DEVICE_ORDER): its device 1 is the second RTX A6000, GPU 3
    assert "Session 1: /GPU:0 (GPU 3); 90% of each GPU (per_process_gpu_memory_fraction); growth off" in flat(err), err
    assert "eager: visible GPUs /GPU:0 (GPU 2), /GPU:1 (GPU 3), /GPU:2 (GPU 0), /GPU:3 (GPU 1)" in flat(err), err
    assert kernel.value("state()") == before and kernel.value(SESSION)["gpus"] == [3]


def test_19_a_tf1_session_made_before_the_extension_is_said_to_be_unknown(kernel: Kernel) -> None:
    kernel.run(
        "import tensorflow as tf\nsess = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto())\n%load_ext jupyter_gpu"
    )
    _, err = kernel.run("%gpu_select 2")
    assert "1 session made before jupyter_gpu watched (its devices and caps are not known)" in flat(err), err


def test_19_growth_turned_on_by_code_is_shown_as_on(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\nimport tensorflow as tf")
    _, err = kernel.run(
        "for g in tf.config.list_physical_devices('GPU'):\n    tf.config.experimental.set_memory_growth(g, True)\n"
        "x = tf.constant(1.0)"
    )
    assert "Warning" not in flat(err), err
    assert kernel.value("tf.config.experimental.get_memory_growth(tf.config.list_physical_devices('GPU')[0])")
    out, _ = kernel.run("%gpu_status")
    assert "growth on (set by your code: tf.config.experimental.set_memory_growth)" in flat(out), out
    assert "growth off" not in status_entry(out, "TensorFlow")


def test_19_growth_turned_on_by_code_before_the_magic_is_shown_as_on(kernel: Kernel) -> None:
    kernel.run(
        "import tensorflow as tf\nfor g in tf.config.list_physical_devices('GPU'):\n"
        "    tf.config.experimental.set_memory_growth(g, True)"
    )
    _, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
    assert "Warning" not in flat(err), err
    kernel.run("x = tf.constant(1.0)")
    out, _ = kernel.run("%gpu_status")
    assert "TensorFlow: initialized with the plan applied" in flat(out), out
    assert "visible GPUs /GPU:0 (GPU 1), growth on (set by your code" in flat(out), out  # CUDA's device 3 here


def test_31_3_tensorflows_devices_are_named_with_nvidia_smis_number_beside_them(kernel: Kernel) -> None:
    # CUDA started fastest first (GPU 2, 3, 0, 1: the 48 GiB A6000s before the 80 GiB A100s) before the
    # plan: TensorFlow's /GPU:0 is GPU 2. "GPU 0: 40 GiB" read as the 48 GiB GPU 0 capped at 40 GiB.
    kernel.run("import tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')\n%load_ext jupyter_gpu")
    _, err = kernel.run("%gpu_limit 50%\nx = tf.constant(1.0)")
    assert "Error" not in flat(err), err
    out, _ = kernel.run("%gpu_status")
    tensorflow = status_entry(out, "TensorFlow")
    assert (
        "visible GPUs /GPU:0 (GPU 2), /GPU:1 (GPU 3), /GPU:2 (GPU 0), /GPU:3 (GPU 1), memory limits "
        "/GPU:0 (GPU 2): 24 GiB; /GPU:1 (GPU 3): 24 GiB; /GPU:2 (GPU 0): 40 GiB; /GPU:3 (GPU 1): 40 GiB" in tensorflow
    ), out
    kernel.run("sess = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto())")  # a session's devices too
    out, _ = kernel.run("%gpu_status")
    assert "Session 1: /GPU:0 (GPU 2), /GPU:1 (GPU 3), /GPU:2 (GPU 0), /GPU:3 (GPU 1); limit /GPU:0 (GPU 2)" in flat(
        out
    ), out


def test_31_4_keras_on_jax_turning_tensorflows_growth_on_is_warned_at_once_and_said_once(tmp_path: Path) -> None:
    for kernel in standin_kernel(tmp_path, {"KERAS_BACKEND": "jax"}):
        kernel.run("%load_ext jupyter_gpu\n%gpu_select 1")
        _, err = kernel.run("import keras")  # keras/src/backend/config.py: TF_FORCE_GPU_ALLOW_GROWTH=true
        assert kernel.value("os.environ['TF_FORCE_GPU_ALLOW_GROWTH']") == "true"
        assert err.count("GPUPlanMismatchWarning") == 1, err
        assert "importing Keras (backend jax) set TF_FORCE_GPU_ALLOW_GROWTH=true, so TensorFlow" in flat(err), err
        for first_op in ("", "x = tf.constant(1.0)\n"):  # TensorFlow imported, then initialized
            out, _ = kernel.run(f"import tensorflow as tf\n{first_op}%gpu_status")
            tensorflow, keras = (status_entry(out, name) for name in ("TensorFlow", "Keras"))
            assert "plan applied" not in tensorflow, out
            assert "does NOT follow the plan: TF_FORCE_GPU_ALLOW_GROWTH=true (set by Keras at import" in tensorflow
            assert keras.endswith("at import it set TF_FORCE_GPU_ALLOW_GROWTH=true (what that does: TensorFlow above)")
            assert "growth off" not in keras  # the consequence is said once, on TensorFlow's line


def test_19_a_tf1_session_after_tensorflow_was_narrowed_gets_the_narrowed_gpus(kernel: Kernel) -> None:
    # CUDA started (fastest first: GPU 2, 3, 0, 1) before the plan; the plan narrowed TensorFlow to GPU 1
    kernel.run("import tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')\n%load_ext jupyter_gpu")
    kernel.run("%gpu_select 1")
    _, err = kernel.run("sess = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto())")
    assert "Warning" not in flat(err) and kernel.value(SESSION)["gpus"] == [1], err
    _, err = kernel.run(
        "config = tf.compat.v1.ConfigProto()\nconfig.gpu_options.visible_device_list = '0'\n"
        "sess2 = tf.compat.v1.Session(config=config)"
    )
    assert kernel.value(SESSION)["gpus"] == [2]  # CUDA's device 0 is GPU 2: the user's field is kept
    assert "visible_device_list='0' in your ConfigProto: this session uses GPU 2, outside the plan's GPU 1" in flat(
        err
    ), err


# -- issue 19: each GPU's cap where CUDA really numbers it; JAX's one share said as it is --------

TORCH_CAPS = """
import cuda_standin, pynvml
_totals = {i: pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total
           for i in range(pynvml.nvmlDeviceGetCount())}
_gpu = {k: cuda_standin.started["devices"][k][0] for k in cuda_standin.fractions}
print(json.dumps({str(_gpu[k]): round(f * _totals[_gpu[k]] / 2**30, 3) for k, f in cuda_standin.fractions.items()}))
"""


def torch_caps_gib(kernel: Kernel) -> dict[str, float]:
    """PyTorch's cap on each GPU, by NVML index, in GiB (each fraction times the total of the GPU
    CUDA's ordinal really is)."""
    out, err = kernel.run(TORCH_CAPS)
    assert out, err
    return json.loads(out.strip().splitlines()[-1])


def test_19_2_caps_on_a_t400_and_an_a6000_without_a_selection_land_on_their_gpus(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "standin"))
    from cuda_standin import MIXED_WORKSTATION

    scenario = tmp_path / "workstation.json"
    scenario.write_text(json.dumps(MIXED_WORKSTATION))
    for kernel in standin_kernel(tmp_path, {"JUPYTER_GPU_SIMULATE": str(scenario)}):
        out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_limit 3GiB")
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID set by the plan" in flat(out), (out, err)
        _, err = kernel.run("import torch; torch.cuda.init()")
        assert "jupyter_gpu" not in flat(err), err
        assert torch_caps_gib(kernel) == {"0": pytest.approx(3, abs=0.01), "1": pytest.approx(3, abs=0.01)}
        assert kernel.value("torch.cuda.get_device_name(0)") == "NVIDIA T400 4GB [simulated]"  # as nvidia-smi
        out, _ = kernel.run("%gpu_status")
        assert "PyTorch: initialized with the plan applied" in flat(out) and "NOT" not in flat(out), out
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID set by the plan" in flat(out)


def test_19_2_demo_caps_without_a_selection_are_the_planned_ones_on_every_gpu(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\nimport torch")  # imported first: the caps are queued by the magic
    out, err = kernel.run("%gpu_limit 8GiB")
    assert "PCI_BUS_ID set by the plan" in flat(out), (out, err)
    kernel.run("torch.cuda.init()")
    assert torch_caps_gib(kernel) == {str(i): pytest.approx(8, abs=0.01) for i in range(4)}
    assert kernel.value("cuda_standin.started['env']") == [None, "PCI_BUS_ID"]


def test_19_2_a_cuda_order_the_kernel_started_with_is_kept_and_the_caps_refused(tmp_path: Path) -> None:
    for kernel in standin_kernel(tmp_path, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}):
        kernel.run("%load_ext jupyter_gpu")
        before = kernel.value("state()")
        _, err = kernel.run("%gpu_limit 8GiB")
        # the smallest share (8 GiB of 80 GiB): at most every limit; the advice, followed as printed, passes
        assert (
            "UsageError" in flat(err)
            and "CUDA_DEVICE_ORDER='FASTEST_FIRST'" in flat(err)
            and "(%gpu_limit 10%)" in flat(err)
        ), err
        assert kernel.value("state()") == before  # nothing changed
        _, err = kernel.run("%gpu_limit 10%\nimport torch; torch.cuda.init()")  # one share: order does not matter
        assert "Error" not in flat(err), err
        assert kernel.value("sorted(set(round(f, 6) for f in cuda_standin.fractions.values()))") == [0.1]
        _, err = kernel.run("%gpu_select all")  # the other advice passes too
        assert "UsageError" not in flat(err), err


def test_19_6_jax_one_share_is_printed_as_what_each_gpu_gets(kernel: Kernel) -> None:
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 2,0\n%gpu_limit 20GiB")
    assert "JAX: one fraction 0.250 for all its GPUs: GPU 2 12 GiB, GPU 0 20 GiB" in flat(out), (out, err)
    assert "JAX cannot cap GPUs differently" in flat(
        out
    ) and "GPU 2: at most 20 GiB of 48 GiB (TensorFlow and PyTorch" in flat(out)
    assert kernel.value("env()['XLA_CLIENT_MEM_FRACTION']") == "0.250"
    out, _ = kernel.run("%gpu_status")
    assert "JAX: one fraction 0.250 for all its GPUs: GPU 2 12 GiB, GPU 0 20 GiB" in flat(out), out
    out, _ = kernel.run("%gpu_limit 10%")  # one share on every GPU: nothing to add
    assert "JAX: one fraction" not in flat(out), out


def test_19_2_after_cuda_started_in_an_unknown_order_pytorch_gets_no_cap_on_the_wrong_gpu(kernel: Kernel) -> None:
    kernel.run("import tensorflow as tf\ntf.config.list_physical_devices('GPU')")  # fastest first, before the plan
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_limit 8GiB")
    assert "PyTorch gets no memory cap" in flat(out) and "(%gpu_limit 10%)" in flat(out), (out, err)  # 8 GiB of 80 GiB
    kernel.run("import torch; torch.cuda.init()")
    assert kernel.value("cuda_standin.fractions") == {}  # none rather than an A100's share on an A6000
    out, _ = kernel.run("%gpu_status")
    assert "PyTorch: initialized" in flat(out) and "PyTorch: initialized with the plan applied" not in flat(out), out
