"""Issue 19, past the list, PyTorch: the seeds' own device snippets after the magics, in real kernels
on the CUDA stand-in (``tests/standin/cuda_standin.py``), in both orders (the magics before
``import torch``, and after it).

- ``torch.cuda.set_device(3)`` / ``.to('cuda:3')`` after ``%gpu_select 1,2``: CUDA's
  ``invalid device ordinal``, and the hint under the cell names which GPU each ``cuda:N`` is;
- ``torch.cuda.device_count()`` / ``get_device_name(k)`` after ``%gpu_select 3,1``: what the
  printout maps (``cuda:0`` is GPU 3);
- a ``torch.multiprocessing`` spawn worker after ``%gpu_select 2`` and ``%gpu_limit 4GiB``: it reads
  the selection from the environment and, through ``JUPYTER_GPU_PLAN`` and the start-up hook, gets the
  same cap as the kernel (its own: not a share of the kernel's), as ``%gpu_limit`` says.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, standin_kernel
from standin_site import plan_site
from support import flat

pytestmark = pytest.mark.frameworks

MAGICS_FIRST, TORCH_FIRST = "magics first", "torch first"

NVML_NAMES = (
    "__import__('pynvml').nvmlInit() or [__import__('pynvml').nvmlDeviceGetName("
    "__import__('pynvml').nvmlDeviceGetHandleByIndex(i)) for i in range(__import__('pynvml').nvmlDeviceGetCount())]"
)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    yield from standin_kernel(tmp_path)


def plan_then_torch(kernel: Kernel, order: str, magics: str) -> str:
    """The magics and ``import torch`` in ``order``; the magics' printout."""
    if order == TORCH_FIRST:
        kernel.run("import torch")
    out, err = kernel.run(f"%load_ext jupyter_gpu\n{magics}")
    assert "Warning" not in flat(err) and "Error" not in flat(err), err
    if order == MAGICS_FIRST:
        kernel.run("import torch")
    return out


MAPPING_HINT = (
    "After %gpu_select 1,2, PyTorch's cuda:0 is GPU 1 and cuda:1 is GPU 2 (nvidia-smi's numbers): "
    "use cuda:1 for GPU 2; there is no cuda:2."
)


@pytest.mark.parametrize("order", [MAGICS_FIRST, TORCH_FIRST])
def test_a_cuda_index_past_the_selection_fails_as_in_cuda_and_the_hint_names_each_gpu(
    kernel: Kernel, order: str
) -> None:
    plan_then_torch(kernel, order, "%gpu_select 1,2")
    snippets = ["torch.cuda.set_device(3)", "torch.zeros(2).to('cuda:3')", "torch.zeros(2).to(torch.device('cuda:3'))"]
    if order == TORCH_FIRST:
        snippets.reverse()  # CUDA started by .to() this time
    for snippet in snippets:
        _, err = kernel.run(snippet)
        assert "RuntimeError: CUDA error: invalid device ordinal" in flat(err), (snippet, err)
        assert MAPPING_HINT in err, (snippet, err)
        assert "The kernel's GPU plan: GPU 1, 2" in flat(err), err
    # the advice, followed: cuda:1 is GPU 2 (an RTX A6000 in the demo; GPU 1 is an A100)
    _, err = kernel.run("torch.cuda.set_device(1)\nname = torch.cuda.get_device_name()")
    assert "Error" not in flat(err), err
    assert kernel.value("name") == kernel.value(NVML_NAMES)[2]
    assert kernel.value("cuda_standin.started['env']") == ["1,2", "PCI_BUS_ID"]
    _, err = kernel.run("torch.cuda.get_device_name(2)")  # PyTorch's own check of an index
    assert "AssertionError: Invalid device id" in flat(err) and MAPPING_HINT in err, err


@pytest.mark.parametrize("order", [MAGICS_FIRST, TORCH_FIRST])
@pytest.mark.parametrize("torch_nvml", [False, True])
def test_device_count_and_names_are_the_printouts_mapping(tmp_path: Path, order: str, torch_nvml: bool) -> None:
    env = {"CUDA_STANDIN_TORCH_NVML": "1"} if torch_nvml else {}
    for kernel in standin_kernel(tmp_path, env):
        out = plan_then_torch(kernel, order, "%gpu_select 3,1")
        assert "PyTorch cuda:0" in out.split("GPU 3", 1)[1].split("\n", 1)[0], out
        assert "PyTorch cuda:1" in out.split("GPU 1", 1)[1].split("\n", 1)[0], out
        nvml = kernel.value(NVML_NAMES)
        assert kernel.value("torch.cuda.device_count()") == 2
        assert kernel.value("[torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]") == [
            nvml[3],
            nvml[1],
        ]
        assert kernel.value("torch.cuda.get_device_name('cuda:1')") == nvml[1]
        out, err = kernel.run("%gpu_status")
        assert "PyTorch: initialized" in flat(out) and "NOT" not in flat(out), (out, err)
        assert "Warning" not in flat(err), err


CHILD = (
    "import cuda_standin, torch.multiprocessing as mp\n"
    "with mp.get_context('spawn').Pool(1) as pool:\n"
    "    child = pool.apply(cuda_standin.child_report)\n"
)


@pytest.mark.parametrize("order", [MAGICS_FIRST, TORCH_FIRST])
def test_a_spawned_worker_gets_the_selection_and_its_own_cap_and_the_printout_says_so(
    tmp_path: Path, order: str
) -> None:
    site = plan_site(tmp_path / "site")  # the spawned worker's interpreter runs jupyter_gpu_plan.pth
    paths = [str(site), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    for kernel in standin_kernel(tmp_path, {"PYTHONPATH": os.pathsep.join(paths)}):
        spawned_worker_is_capped(kernel, order)


def spawned_worker_is_capped(kernel: Kernel, order: str) -> None:
    out = plan_then_torch(kernel, order, "%gpu_select 2\n%gpu_limit 4GiB")
    assert "(this kernel's has), the TensorFlow and PyTorch caps through JUPYTER_GPU_PLAN" in flat(
        out
    ) and "not shared" in flat(out)
    _, err = kernel.run("torch.cuda.init()")
    assert "Error" not in flat(err), err
    capped = kernel.value("{str(k): round(v * 47.98828125, 3) for k, v in cuda_standin.fractions.items()}")
    assert capped == {"0": pytest.approx(4, abs=0.01)}  # this kernel: GPU 2 (48 GiB) at 4 GiB
    _, err = kernel.run(CHILD)
    assert "Error" not in flat(err), err
    child = kernel.value("child")
    # the selection is in the environment: the worker's CUDA shows GPU 2 alone
    assert child["CUDA_VISIBLE_DEVICES"] == "2" and child["gpus"] == [2]
    # the cap reached the worker through JUPYTER_GPU_PLAN: its own allocator has the same 4 GiB on its cuda:0
    assert {k: round(v * 47.98828125, 3) for k, v in child["fractions"].items()} == {"0": pytest.approx(4, abs=0.01)}
    assert kernel.value("{str(k): v for k, v in cuda_standin.fractions.items()}").keys() == {"0"}


def test_after_cuda_started_before_the_selection_the_hint_names_what_cuda_shows_or_nothing(tmp_path: Path) -> None:
    # CUDA started in PCI bus order with every GPU: the selection cannot reach PyTorch any more
    for kernel in standin_kernel(tmp_path, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}):
        kernel.run("import torch\ntorch.cuda.is_available()\n%load_ext jupyter_gpu")
        out, err = kernel.run("%gpu_select 1,2")
        assert "PyTorch will NOT follow this" in flat(out) + err, (out, err)
        _, err = kernel.run("torch.cuda.set_device(5)")
        assert "invalid device ordinal" in flat(err), err
        assert (
            "In this kernel, PyTorch's cuda:0 is GPU 0, cuda:1 is GPU 1, cuda:2 is GPU 2 and cuda:3 is GPU 3 "
            "(nvidia-smi's numbers); there is no cuda:4." in flat(err)
        ), err
    # fastest first (the A6000s, GPUs 2 and 3, before the A100s): the selection is refused, and once
    # PyTorch initialized the kernel tells each cuda:N by its model (ties in PCI bus order, as CUDA)
    for kernel in standin_kernel(tmp_path / "fastest"):
        kernel.run("import torch\ntorch.cuda.is_available()\n%load_ext jupyter_gpu")
        kernel.run("%gpu_select 1,2")
        _, err = kernel.run("torch.cuda.set_device(5)")
        assert "invalid device ordinal" in flat(err) and "count the GPUs the plan selected" not in flat(err), err
        assert (
            "jupyter_gpu: CUDA has no device with that index. In this kernel, PyTorch's cuda:0 is GPU 2, "
            "cuda:1 is GPU 3, cuda:2 is GPU 0 and cuda:3 is GPU 1 "
            "(nvidia-smi's numbers): use cuda:3 for GPU 1; there is no cuda:4." in flat(err)
        ), err
        assert [kernel.value(f"torch.cuda.get_device_name({k})") for k in range(4)] == [
            kernel.value(NVML_NAMES)[index] for index in (2, 3, 0, 1)
        ]
