"""The doctor's child process: start one framework with the plan and say what it got.

Run as ``python -m jupyter_gpu.doctor.probe FRAMEWORK REQUEST`` (``FRAMEWORK`` is ``tensorflow``,
``torch`` or ``jax``; ``REQUEST`` the plan's request as JSON, see
:func:`jupyter_gpu.doctor.children.request_to_json`). It
applies the plan exactly as a fresh kernel does (``build_plan`` against NVML and the fence this
process started with, then :func:`jupyter_gpu.frameworks.apply_plan`: the variables, and the
post-import calls), imports the framework, lets it list its GPUs, and writes one JSON object on
its standard output (everything the framework prints goes to standard error)::

    {"framework": str, "version": str|null, "gpu_build": bool|null, "cuda": str|null,
     "cudnn": str|null, "growth": bool|null, "error": str|null, "plan_error": str|null,
     "cuda_device_order": str|null,
     "devices": [{"name": str, "uuid": str|null, "pci_bus_id": str|null,
                  "memory_total": int|null, "limits": [int]|null, "fraction": float|null}]}

``limits`` are the bytes per logical device TensorFlow was configured with (null: none);
``fraction`` is PyTorch's per-process memory fraction or JAX's share of the device. The parent
(:mod:`jupyter_gpu.doctor.children`) reads this as untrusted output, kills the child when it
hangs, and compares (:mod:`jupyter_gpu.doctor.compare`). The child keeps no GPU memory: it exits.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from ..plan import PlanRequest

MIB = 1024**2


def request_from_json(text: str) -> PlanRequest:
    data = json.loads(text)
    data["limits"] = tuple(data.get("limits") or ())
    return PlanRequest(**{key: value for key, value in data.items() if key in PlanRequest.__dataclass_fields__})


def apply_request(request: PlanRequest) -> str | None:
    """Make ``request`` this process's plan, as ``%gpu_select``/``%gpu_limit`` do; the error, or None."""
    from .. import frameworks
    from ..plan import GpuPlan, PlanError, build_plan, kernel_start_fence
    from ..sources.nvml import snapshot

    frameworks.start_watching()  # as %load_ext does: the CUDA start is recorded when it happens
    if request == PlanRequest():
        return None
    try:
        gpus = snapshot()
        frameworks.remember_gpus(gpus.gpus)  # as the plan session does before it builds a plan
        plan = build_plan(request, gpus, kernel_start_fence())
        frameworks.apply_plan(GpuPlan(), plan)
    except PlanError as error:
        return str(error)
    return None


def _env_growth(name: str, on: str) -> bool:
    return os.environ.get(name, "").strip().lower() == on


def probe_tensorflow(facts: dict[str, Any]) -> None:
    # Warnings on: a GPU build that cannot load its CUDA libraries says so at WARNING level only.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    tf = importlib.import_module("tensorflow")  # untyped: read through Any
    facts["version"] = tf.__version__
    info = dict(tf.sysconfig.get_build_info())
    facts["gpu_build"] = bool(info.get("is_cuda_build")) or tf.test.is_built_with_cuda()
    facts["cuda"], facts["cudnn"] = info.get("cuda_version"), info.get("cudnn_version")
    devices = []
    growth = _env_growth("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        configs = tf.config.get_logical_device_configuration(device)
        limits = [int(c.memory_limit) * MIB for c in configs if c.memory_limit is not None] if configs else None
        try:
            growth = growth or bool(tf.config.experimental.get_memory_growth(device))
        except ValueError:
            pass
        devices.append({"name": str(details.get("device_name", device.name)), "limits": limits or None})
    facts["devices"] = devices
    facts["growth"] = growth


def _torch_device(torch: Any, position: int) -> dict[str, Any]:
    cuda = torch.cuda
    device: dict[str, Any] = {"name": str(cuda.get_device_name(position))}
    try:
        properties = cuda.get_device_properties(position)
    except Exception:
        properties = None  # a build whose CUDA cannot describe the device: the name is all there is
    if properties is not None:
        device["memory_total"] = int(properties.total_memory)
        uuid = getattr(properties, "uuid", None)
        device["uuid"] = str(uuid) if uuid is not None else None
        bus = getattr(properties, "pci_bus_id", None)
        if bus is not None:
            domain = int(getattr(properties, "pci_domain_id", 0))
            slot = int(getattr(properties, "pci_device_id", 0))
            device["pci_bus_id"] = f"{domain:08x}:{int(bus):02x}:{slot:02x}.0"
    try:
        device["fraction"] = float(cuda.get_per_process_memory_fraction(position))
    except (AttributeError, RuntimeError):
        device["fraction"] = None
    return device


def probe_torch(facts: dict[str, Any]) -> None:
    torch = importlib.import_module("torch")
    facts["version"] = torch.__version__
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version()
    except (AttributeError, RuntimeError):
        pass
    facts["gpu_build"] = torch.version.cuda is not None
    facts["cuda"], facts["cudnn"] = torch.version.cuda, str(cudnn) if cudnn else None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count:
        torch.cuda.init()  # PyTorch's own lazy initialization: the plan's queued caps run here
    facts["devices"] = [_torch_device(torch, position) for position in range(count)]
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    facts["growth"] = "expandable_segments:true" in conf.replace(" ", "").lower()


def probe_jax(facts: dict[str, Any]) -> None:
    from importlib import metadata

    jax = importlib.import_module("jax")
    plugins = [name for name in ("jax-cuda12-plugin", "jax-cuda13-plugin") if _installed(metadata, name)]
    facts.update(version=jax.__version__, gpu_build=bool(plugins), cuda=None, cudnn=None)
    if plugins:
        facts["cuda"] = plugins[0].split("-")[1].removeprefix("cuda")
    devices = []
    try:
        found = jax.devices("gpu")
    except RuntimeError as error:
        found = []
        if plugins:
            facts["error"] = f"JAX cannot start its GPU backend: {str(error).splitlines()[0] if str(error) else error}"
    for device in found:
        entry: dict[str, Any] = {"name": str(device.device_kind)}
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            entry["limits"] = [int(stats["bytes_limit"])]
        entry["pci_bus_id"] = getattr(device, "pci_bus_id", None)
        devices.append(entry)
    facts["devices"] = devices
    facts["growth"] = _env_growth("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _installed(metadata: Any, name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


PROBES = {"tensorflow": probe_tensorflow, "torch": probe_torch, "jax": probe_jax}


def main(argv: list[str]) -> int:
    """Probe ``argv[0]`` with the request ``argv[1]``; the JSON goes to the original standard output."""
    name, request_text = argv[0], argv[1]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the framework and the plan print goes to standard error
    sys.stdout = sys.stderr
    facts: dict[str, Any] = {"framework": name, "devices": []}
    try:
        facts["plan_error"] = apply_request(request_from_json(request_text))
        facts["cuda_device_order"] = os.environ.get("CUDA_DEVICE_ORDER")  # what CUDA will read here
        if facts["plan_error"] is None:
            PROBES[name](facts)  # each fact as soon as it is known: an error later keeps the ones before
    except Exception as error:  # the report says what broke; the parent never sees a traceback only
        first = str(error).splitlines()[0] if str(error) else ""
        facts["error"] = f"{type(error).__name__}: {first}"[:500]
    out.write(json.dumps(facts) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
