"""Issue 11 item 2: ``%gpu_free`` in real kernels.

Measured on PyTorch CPU allocations (what the output cache, a failed cell's frames and named
variables keep alive, followed by weak references, and the process's resident memory) and on the
simulated NVML: with the CUDA stand-in (``tests/standin/cuda_standin.py``) PyTorch initializes its
"GPUs", and a stand-in for the driver's side of ``torch.cuda.empty_cache()`` rewrites the scenario
so NVML shows this kernel holding less, as a real driver would once the cache is returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, standin_kernel, start
from support import ScenarioFile

from jupyter_gpu import simulate

pytestmark = pytest.mark.frameworks

FAILING_CELL = """
def train():
    activations = torch.ones(64 * 2**20)     # 256 MiB of float32, kept alive by the traceback's frame
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
train()
"""


@pytest.fixture
def kernel(scenario: ScenarioFile) -> Iterator[Kernel]:
    yield from start()


def mib(text: str, pattern: str) -> float:
    match = re.search(pattern + r" ([0-9.]+) (MiB|GiB)", text)
    assert match, (pattern, text)
    return float(match[1]) * (1024 if match[2] == "GiB" else 1)


def test_gpu_free_drops_cache_traceback_and_named_variables_only(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\nimport torch, sys, gc, weakref")
    kernel.run(FAILING_CELL)
    kernel.run("torch.zeros(32 * 2**20)")  # 128 MiB, kept as Out[n] and _
    kernel.run("model = torch.nn.Linear(4096, 4096)\nkeep = torch.ones(16 * 2**20)")  # 64 MiB of weights; 64 MiB
    out, err = kernel.run("%gpu_free --dry-run")
    assert re.search(
        r"Would drop: IPython's output cache \(Out: 1 entry; names _\d+, _\); the last error's traceback "
        r"\(OutOfMemoryError, \d frames and their locals\)\.",
        out,
    ), (out, err)
    assert "PyTorch 384 MiB on cpu" in out and "Nothing was changed (--dry-run)." in out
    assert kernel.value("[len(Out), sys.last_value is not None, 'model' in dir()]") == [1, True, True]

    out, err = kernel.run("%gpu_free model")
    assert "your variable model" in out, (out, err)
    assert "PyTorch arrays freed on cpu: 448 MiB" in out  # 256 (frame) + 128 (Out) + 64 (model), measured
    assert "no framework has" not in out and "still referenced" not in out
    before, after = mib(out, r"RSS, CPU arrays\):"), mib(out, r"→")
    assert before - after >= 300, out  # the allocations went back to the operating system
    assert kernel.value("[len(Out), getattr(sys, 'last_value', None) is None, 'model' in dir(), keep.numel()]") == [
        0,
        True,
        False,
        16 * 2**20,
    ]  # user variables not named are untouched


def test_bad_names_change_nothing(kernel: Kernel) -> None:
    kernel.run("%load_ext jupyter_gpu\nimport sys\nx = 1\n1 / 0")
    for line, words in (
        ("x nosuch", "there is no variable 'nosuch'"),
        ("x x", "given twice"),
        ("Out", "belongs to IPython"),
        ("'a b'", "not a variable name"),
    ):
        _, err = kernel.run(f"%gpu_free {line}")
        assert "UsageError" in err and words in err and err.count("\n") <= 1, err
        assert kernel.value("[x, sys.last_value is not None]") == [1, True]


def test_gpu_free_on_simulated_nvml_reports_the_drivers_figures_before_and_after(tmp_path: Path) -> None:
    world = ScenarioFile(tmp_path / "gpus.json", simulate.demo_scenario(moving=False))
    generator = standin_kernel(tmp_path, {"JUPYTER_GPU_SIMULATE": str(world.path)})
    kernel = next(generator)
    try:
        kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\nimport torch, os\ntorch.cuda.init()")
        pid = kernel.value("os.getpid()")

        def holding(mib: int) -> dict:
            data = simulate.demo_scenario(moving=False)
            data["gpus"][1]["processes"].append({"pid": pid, "memory_mib": mib, "name": "python"})
            return data

        world.write(holding(10035))  # 9.8 GiB
        after = tmp_path / "after.json"
        simulate.write_scenario(after, holding(1229))  # 1.2 GiB once the cache is back
        # The driver's side of empty_cache, standing in for a GPU: NVML then shows the smaller figure.
        kernel.run(
            "import shutil\n"
            "def returned_to_the_driver():\n"
            f"    shutil.copy({str(after)!r}, {str(world.path) + '.tmp'!r})\n"
            f"    os.replace({str(world.path) + '.tmp'!r}, {str(world.path)!r})\n"
            "torch._C._cuda_emptyCache = returned_to_the_driver"
        )
        out, err = kernel.run("%gpu_free")
        assert "PyTorch: torch.cuda.empty_cache(): returns the cached blocks" in out, (out, err)
        assert "GPU 1 (A100-SXM4-80GB [simulated]): this kernel 9.8 GiB → 1.2 GiB (NVML)" in out
        kernel.run("import tensorflow as tf\nx = tf.constant(1.0)")  # TensorFlow initialized
        out, err = kernel.run("%gpu_free --dry-run")
        assert "release of TensorFlow, PyTorch" in out, (out, err)
        out, err = kernel.run("%gpu_free")
        assert "TensorFlow: " in out and "only a restart of the kernel returns it" in out, (out, err)
    finally:
        generator.close()
