"""The plan in real kernels (ipykernel via jupyter_client), checked against what the frameworks do.

Expectations, from the frameworks' documentation:

- PyTorch: ``torch.cuda.set_per_process_memory_fraction`` makes the caching allocator refuse to go
  past the fraction with ``torch.cuda.OutOfMemoryError`` ("If trying to allocate more than the
  allowed value in a process, will raise an out of memory error in allocator", PyTorch docs);
  ``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` is read at CUDA init (PyTorch docs,
  "CUDA semantics: Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF");
  ``torch.cuda.get_device_properties(i).uuid`` is the device's UUID, NVML's without ``GPU-``.
- JAX ("GPU memory allocation", JAX docs): preallocates 75 % of the GPU at the first operation
  unless ``XLA_PYTHON_CLIENT_PREALLOCATE=false``; ``XLA_CLIENT_MEM_FRACTION`` sets that share.
- NVML counts a process's memory as the driver gave it: the framework's pool plus the CUDA context
  (some hundreds of MiB), hence :data:`CONTEXT`.
"""

from __future__ import annotations

import re

import pytest
from real_gpu import gib, process_memory, ran, total_memory, uuid0

pytestmark = pytest.mark.gpu

GIB = 1024**3
CONTEXT = 1.5 * GIB  # what NVML may show beyond the framework's pool: CUDA context, cuBLAS workspace


def magic(kernel, line: str) -> tuple[str, str]:
    out, err = kernel.run(line)
    assert "UsageError" not in err and "Traceback" not in err, f"{line}: {err}"
    return out, err


def test_plan_magics(kernel, check) -> None:
    """``%gpu_select 0 --growth``, ``none``, ``auto``, ``%gpu_limit 4GiB``, ``%gpu_limit 50%``: what
    each sets for the frameworks (before any is imported), and the time of the first and next magic."""
    ran(kernel, "import time")
    first = kernel.value(
        "(lambda t: (get_ipython().run_line_magic('gpu_select', '0 --growth'), time.perf_counter() - t)[1])"
        "(time.perf_counter())"
    )
    env = kernel.value("env()")
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", env
    selected = env["CUDA_VISIBLE_DEVICES"]
    assert selected in ("0", uuid0()), env
    assert "expandable_segments:True" in (env["PYTORCH_CUDA_ALLOC_CONF"] or ""), env
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false", env
    again = kernel.value(
        "(lambda t: (get_ipython().run_line_magic('gpu_select', '0 --growth'), time.perf_counter() - t)[1])"
        "(time.perf_counter())"
    )
    check.figure("gpu_select_first_ms", round(first * 1000, 1))
    check.figure("gpu_select_next_ms", round(again * 1000, 2))

    magic(kernel, "%gpu_select none")
    env = kernel.value("env()")
    assert env["CUDA_VISIBLE_DEVICES"] in ("", "-1"), env

    magic(kernel, "%gpu_select auto")
    env = kernel.value("env()")
    assert env["CUDA_VISIBLE_DEVICES"] == selected, env

    total = total_memory()
    magic(kernel, "%gpu_limit 4GiB")
    fraction = float(kernel.value("env()")["XLA_CLIENT_MEM_FRACTION"])
    assert fraction == pytest.approx(4 * GIB / total, abs=0.01), (fraction, total)

    magic(kernel, "%gpu_limit 50%")
    half = float(kernel.value("env()")["XLA_CLIENT_MEM_FRACTION"])
    assert half == pytest.approx(0.5, abs=0.02), half
    check.detail(f"CUDA_VISIBLE_DEVICES={selected}; 4GiB -> JAX fraction {fraction:.4f}; 50% -> {half:.3f}")


def test_torch_cap_and_device(kernel, check, tmp_path) -> None:
    """``%gpu_select 0 --growth`` + ``%gpu_limit 4GiB``: the cap holds in PyTorch (simulated: the
    fraction PyTorch was given; real: OutOfMemoryError near the cap, NVML shows the kernel under it),
    expandable segments as set, ``cuda:0`` is GPU 0 by UUID."""
    magic(kernel, "%gpu_select 0 --growth")
    magic(kernel, "%gpu_limit 4GiB")
    total = total_memory()
    if not check.real:
        ran(kernel, "import torch, cuda_standin\ntorch.cuda.init()")
        fractions = kernel.value("{str(k): v for k, v in cuda_standin.fractions.items()}")
        assert fractions == {"0": pytest.approx(4 * GIB / total, abs=0.001)}, fractions
        check.detail(f"stand-in: PyTorch given fraction {fractions['0']:.4f} of GPU 0 (no real allocation)")
        return
    out, err = ran(
        kernel,
        "import torch\n"
        "x = torch.empty(int(3.5 * 2**30), dtype=torch.uint8, device='cuda')\n"
        "try:\n"
        "    y = torch.empty(1 * 2**30, dtype=torch.uint8, device='cuda')\n"
        "    print('NO-OOM')\n"
        "except torch.cuda.OutOfMemoryError as error:\n"
        "    print('OOM', str(error).splitlines()[0][:200])\n"
        "pid = os.getpid()\n",
    )
    assert "OOM" in out and "NO-OOM" not in out, out + err
    pid = kernel.value("pid")
    held = process_memory(pid)
    assert held is not None, "NVML does not list the kernel's PID"
    assert 3.5 * GIB <= held <= 4 * GIB + CONTEXT, f"NVML shows the kernel holding {gib(held)}"
    conf = kernel.value("os.environ.get('PYTORCH_CUDA_ALLOC_CONF')")
    assert "expandable_segments:True" in conf, conf
    uuid = kernel.value("str(torch.cuda.get_device_properties(0).uuid)")
    assert uuid0().removeprefix("GPU-") == uuid.removeprefix("GPU-"), (uuid, uuid0())
    check.detail(f"3.5 GiB allocated, 1 GiB more refused (OutOfMemoryError); NVML: kernel holds {gib(held)}")
    check.figure("kernel_nvml_gib", round(held / GIB, 2))


@pytest.mark.real_only("the CUDA stand-in does not model JAX (its CPU build lists no GPU)")
def test_jax_growth(kernel, check) -> None:
    """With ``--growth`` JAX does not preallocate: NVML shows the kernel far below 75 %."""
    magic(kernel, "%gpu_select 0 --growth")
    ran(kernel, "import jax, jax.numpy as jnp\na = jnp.ones((1024, 1024)).block_until_ready()\npid = os.getpid()")
    devices = kernel.value("[str(d.platform) for d in jax.devices()]")
    assert devices == ["gpu"], devices
    held = process_memory(kernel.value("pid")) or 0
    total = total_memory()
    assert held < 0.1 * total, f"JAX holds {gib(held)} of {gib(total)} with growth"
    check.detail(f"jax.devices() {devices}; NVML: kernel holds {gib(held)} ({100 * held / total:.1f} %)")


@pytest.mark.real_only("the CUDA stand-in does not model JAX (its CPU build lists no GPU)")
def test_jax_limit(kernel, check) -> None:
    """With ``%gpu_limit 8GiB`` (no growth) JAX preallocates its share: NVML shows about 8 GiB."""
    magic(kernel, "%gpu_select 0")
    magic(kernel, "%gpu_limit 8GiB")
    ran(kernel, "import jax, jax.numpy as jnp\na = jnp.ones((1024, 1024)).block_until_ready()\npid = os.getpid()")
    held = process_memory(kernel.value("pid")) or 0
    assert 0.9 * 8 * GIB <= held <= 8 * GIB + CONTEXT, f"JAX holds {gib(held)} under an 8 GiB limit"
    # NVML counts CUDA's context beside JAX's pool: a kernel within its limit is not flagged "!"
    status, _ = kernel.run("%gpu_status")
    assert not [line for line in status.splitlines() if line.strip().startswith("!")], status
    check.detail(f"NVML: kernel holds {gib(held)} under %gpu_limit 8GiB; %gpu_status flags nothing")
    check.figure("beyond_pool_gib", round((held - 8 * GIB) / GIB, 2))


@pytest.mark.real_only("the CUDA stand-in does not model JAX")
def test_both_frameworks(kernel, check) -> None:
    """PyTorch and JAX in one kernel under one plan (growth, 4 GiB each): both work, the plan is followed."""
    magic(kernel, "%gpu_select 0 --growth")
    magic(kernel, "%gpu_limit 4GiB")
    out, err = ran(
        kernel,
        "import torch, jax, jax.numpy as jnp\n"
        "t = torch.ones(256 * 2**20, device='cuda')\n"
        "a = jnp.ones((4096, 4096)).block_until_ready()\n"
        "print(t.device, a.devices())\n",
    )
    assert "cuda:0" in out, out + err
    status, err = kernel.run("%gpu_status")
    assert "NOT follow" not in status, status
    held = process_memory(kernel.value("os.getpid()")) or 0
    assert held <= 8 * GIB + CONTEXT, gib(held)
    check.detail(f"both allocated; %gpu_status follows; NVML: kernel holds {gib(held)}")


def test_no_selection(kernel, check) -> None:
    """A kernel with the extension and no selection: every GPU visible, ``%gpu_status`` says so."""
    status, err = magic(kernel, "%gpu_status")
    assert status.strip(), err
    count = kernel.value("__import__('torch').cuda.device_count()")
    from jupyter_gpu.sources import nvml

    assert count == len(nvml.snapshot().gpus), count
    assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] is None
    check.detail(f"PyTorch sees {count} GPU(s); %gpu_status {len(status.splitlines())} lines")


def too_late(kernel, start: str, framework: str) -> str:
    """Start ``framework`` with ``start``; then ``%gpu_select`` must warn and change nothing, and
    ``%gpu_status`` say the framework is initialized. Returns that line of ``%gpu_status``."""
    ran(kernel, start)
    before = kernel.value("env()")
    out, err = kernel.run("%gpu_select 0 --growth")
    assert "GPUAlreadyInitializedWarning" in out + err, out + err
    assert kernel.value("env()") == before
    status, _ = magic(kernel, "%gpu_status")
    line = next((x.strip() for x in status.splitlines() if x.strip().startswith(f"{framework}:")), "")
    assert "initialized" in line, status
    return line


def device_count_said(line: str) -> int | None:
    """``… in effect: CUDA_VISIBLE_DEVICES=(unset), 1 CUDA device(s)`` -> 1."""
    said = re.search(r"([0-9]+) [A-Za-z]+ device\(s\)", line)
    return int(said.group(1)) if said else None


def test_too_late_torch(kernel, check) -> None:
    """After ``torch.cuda.init()`` a selection warns and changes nothing; ``%gpu_status`` says what
    PyTorch really uses, as PyTorch itself answers (its device count)."""
    line = too_late(kernel, "import torch\ntorch.cuda.init()", "PyTorch")
    assert kernel.value("torch.cuda.is_initialized()") is True
    count = kernel.value("torch.cuda.device_count()")
    assert device_count_said(line) == count, (line, count)
    check.detail(f"warned; {line}")


@pytest.mark.real_only("the CUDA stand-in does not model JAX")
def test_too_late_jax(kernel, check) -> None:
    """After ``jax.devices()`` a selection warns; ``%gpu_status`` says JAX is initialized, with
    JAX's own device count where it gives one."""
    line = too_late(kernel, "import jax\nd = jax.devices()", "JAX")
    devices = kernel.value("[str(x) for x in d]")
    said = device_count_said(line)
    assert said in (None, len(devices)), (line, devices)
    check.detail(f"warned; {line}; jax.devices() {devices}")
