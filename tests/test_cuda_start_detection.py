"""Issue 19: how a CUDA start is detected and named, without a kernel (fast).

The driver check runs in a child interpreter: mapping a ``libcuda.so.1`` here would make every later
test of this process believe CUDA started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import jupyter_gpu
from jupyter_gpu.frameworks.base import starting_call

CHILD = r"""
import sys
from jupyter_gpu.core import visibility
before = visibility.cuda_driver_loaded()
loads = visibility._loaded_objects()
again = visibility.cuda_driver_loaded()  # kept: no library loaded since
sys.path.insert(0, sys.argv[1])
import cuda_standin
cuda_standin._load_driver_library()  # a libcuda.so.1 mapped, as cuInit's loading leaves it
print(before, again, isinstance(loads, int), visibility._loaded_objects() > loads, visibility.cuda_driver_loaded())
"""


def test_the_mapped_driver_is_seen_and_the_cached_answer_is_renewed_when_a_library_loads(tmp_path: Path) -> None:
    root = str(Path(jupyter_gpu.__file__).parent.parent)  # this tree's package, whatever is installed
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        "TMPDIR": str(temporary),
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent / "standin")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert out.split() == ["False", "False", "True", "True", "True"], out
    # The stand-in's copy of the library is gone once mapped: thousands of kernels leave no folders
    assert list(temporary.iterdir()) == []


def _call_from(module_name: str, function: str, inner: str = "") -> str:
    """Run ``starting_call`` from ``module_name.function`` (called from this test, outside it)."""
    module = types.ModuleType(module_name)
    code = f"def {function}():\n    return {inner or 'look'}()\n"
    if inner:
        helper = types.ModuleType("jupyter_gpu.fake")
        exec("def wrapper():\n    return look()\n", helper.__dict__)
        helper.__dict__["look"] = lambda: starting_call(module_name.split(".")[0])
        module.__dict__[inner] = helper.wrapper
    else:
        module.__dict__["look"] = lambda: starting_call(module_name.split(".")[0])
    exec(code, module.__dict__)
    return getattr(module, function)()


def test_the_starting_call_is_the_users_call_into_the_framework_by_its_public_name() -> None:
    assert _call_from("torch.cuda", "is_available") == "torch.cuda.is_available()"
    assert _call_from("tensorflow.python.framework.test_util", "is_gpu_available") == "tf.test.is_gpu_available()"
    assert _call_from("torch.cuda", "_lazy_init") == "its first GPU use (torch.cuda._lazy_init)"
    # through a wrapper of jupyter_gpu's between the framework and the look: still the framework's call
    assert _call_from("jax._src.xla_bridge", "devices", inner="backends") == "jax.devices()"
    assert starting_call("torch") == ""  # no frame of the framework on the stack
