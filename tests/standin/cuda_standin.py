"""Test-only stand-in for the CUDA driver beneath TensorFlow's and PyTorch's GPU listing (CPU builds).

Imported in a kernel from an IPython startup file (see ``tests/test_magics_frameworks.py``), never by
the package. Like the real driver, :func:`cu_init` reads ``CUDA_VISIBLE_DEVICES`` and
``CUDA_DEVICE_ORDER`` **once**, the first time anything lists GPUs, and numbers the simulated GPUs
(read through nvidia-ml-py like any reader) fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``:
this stand-in's "fastest" is the higher compute capability (an RTX A6000, 8.6, before an A100, 8.0),
ties in PCI bus order. ``CUDA_VISIBLE_DEVICES`` entries are indices into that order or UUID prefixes;
CUDA stops at the first entry it cannot use.

- TensorFlow: ``Context._initialize_physical_devices`` adds one ``PhysicalDevice`` per CUDA device
  and ``get_device_details`` answers the device's name; a ``tf.compat.v1.Session`` starts CUDA too,
  and :func:`session_view` records in :data:`sessions` the GPUs, memory and growth it uses (from the
  config the session was made with, as the GPU build reads it); so does
  ``device_lib.list_local_devices()`` (``tf.test.is_gpu_available()``), which lists one
  ``DeviceAttributes`` per CUDA device without touching the eager context.
- The driver: a library named ``libcuda.so.1`` is mapped into the process at :func:`cu_init`, as
  the real one is (``/proc/self/maps`` is the only trace ``torch.cuda.is_available()`` leaves).
- PyTorch: ``torch._C._cuda_getDeviceCount``/``_cuda_init`` (so ``is_available()``,
  ``device_count()`` and lazy init start CUDA), ``get_device_name``, and
  ``set_per_process_memory_fraction`` that refuses a device that does not exist, as CUDA does; so do
  ``torch.cuda.set_device(N)`` and ``Tensor.to('cuda:N')``/``.cuda(N)`` for an N past the devices
  CUDA shows (``CUDA error: invalid device ordinal``), and ``get_device_name(N)`` (``Invalid device id``).
  PyTorch's own NVML count (``device_count()``, ``is_available()`` with
  ``PYTORCH_NVML_BASED_CUDA_CHECK=1``) fails, so those ask CUDA, unless ``CUDA_STANDIN_TORCH_NVML=1``:
  then it reads the simulated GPUs as torch's ctypes NVML reading would on a machine with the driver.
"""

from __future__ import annotations

import os
import types
from typing import Any

from jupyter_gpu.core import import_hooks as _import_hooks

CAPABILITY = {"NVIDIA A100-SXM4-80GB": (8, 0), "NVIDIA RTX A6000": (8, 6), "NVIDIA T400 4GB": (7, 5)}

# A workstation: a T400 4 GB driving the display as NVML GPU 0, an RTX A6000 as GPU 1 (CUDA's
# fastest first numbers the A6000 0). Written to a file for JUPYTER_GPU_SIMULATE (MIXED_WORKSTATION).
MIXED_WORKSTATION = {
    "driver_version": "550.54.15",
    "gpus": [
        {
            "name": "NVIDIA T400 4GB",
            "memory_total_mib": 4096,
            "processes": [{"pid": 910010, "memory_mib": 180, "user": "root", "name": "Xorg", "type": "graphics"}],
        },
        {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140},
    ],
}


def capability(name: str) -> tuple[int, int]:
    """The model's compute capability (the simulation marks its names: " [simulated]")."""
    return CAPABILITY.get(name.removesuffix(" [simulated]"), (0, 0))


started: dict[str, Any] = {}  # "env": the variables read at cuInit; "devices": [(nvml index, name, uuid)]
fractions: dict[int, float] = {}
sessions: list[dict[str, Any]] = []  # what each tf.compat.v1 session uses, by session_view, in order


def _nvml_gpus() -> list[tuple[int, str, str]]:
    import pynvml

    pynvml.nvmlInit()
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append((index, pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle)))
    return gpus


def _load_driver_library() -> None:
    """Map a library named ``libcuda.so.1`` into the process, as the real driver is at ``cuInit``
    (a copy of zlib: only its name in ``/proc/self/maps`` matters). The copy's folder is removed at
    once: the mapping outlives the file (its line then ends in " (deleted)"), and a kernel killed by
    a signal leaves nothing behind in the temporary directory."""
    import ctypes
    import ctypes.util
    import shutil
    import tempfile

    source = ctypes.util.find_library("z")
    directory = tempfile.mkdtemp(prefix="cuda-standin-")
    target = os.path.join(directory, "libcuda.so.1")
    folders = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
    try:
        for folder in folders:
            if source and os.path.exists(os.path.join(folder, source)):
                shutil.copy(os.path.join(folder, source), target)
                started["driver"] = ctypes.CDLL(target)
                return
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def cu_init() -> list[tuple[int, str, str]]:
    """The CUDA devices of this process, fixed at the first call."""
    if "devices" in started:
        return started["devices"]
    _load_driver_library()
    visible, order = os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER")
    gpus = _nvml_gpus()
    if order != "PCI_BUS_ID":
        gpus.sort(key=lambda gpu: (tuple(-n for n in capability(gpu[1])), gpu[0]))
    devices = gpus
    if visible is not None:
        devices = []
        for entry in visible.split(","):
            entry = entry.strip()
            if entry.isascii() and entry.isdigit() and int(entry) < len(gpus) and gpus[int(entry)] not in devices:
                devices.append(gpus[int(entry)])
                continue
            matches = [gpu for gpu in gpus if entry and gpu[2].lower().startswith(entry.lower())]
            if len(matches) != 1 or matches[0] in devices:
                break
            devices.append(matches[0])
    started.update(env=(visible, order), devices=devices)
    return devices


def _patch_tensorflow(_tf: types.ModuleType) -> None:
    from tensorflow.python.client import session
    from tensorflow.python.eager import context

    cls = context.Context
    original = cls._initialize_physical_devices

    def _initialize_physical_devices(ctx: Any, reinitialize: bool = False) -> None:
        fresh = ctx._physical_devices is None
        original(ctx, reinitialize)
        if fresh:
            gpus = [
                context.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
                for i in range(len(cu_init()))
            ]
            ctx._physical_devices += gpus
            ctx._physical_device_to_index = {d: i for i, d in enumerate(ctx._physical_devices)}
            ctx._visible_device_list += gpus
            ctx._memory_growth_map.update({d: None for d in gpus})

    original_details = cls.get_device_details

    def get_device_details(ctx: Any, device: Any) -> dict[str, Any]:
        if device.device_type == "GPU":
            _, name, _ = cu_init()[int(device.name.rsplit(":", 1)[1])]
            return {"device_name": name, "compute_capability": capability(name)}
        return original_details(ctx, device)

    cls._initialize_physical_devices = _initialize_physical_devices
    cls.get_device_details = get_device_details
    original_init = session.BaseSession.__init__

    def __init__(sess: Any, *args: Any, **kwargs: Any) -> None:
        cu_init()  # a session creates its devices, which starts CUDA
        original_init(sess, *args, **kwargs)
        sessions.append(session_view(sess._config))

    session.BaseSession.__init__ = __init__
    _patch_device_lib()


def _patch_device_lib() -> None:
    """``device_lib.list_local_devices()`` (and ``tf.test.is_gpu_available()``, which calls it): the
    C++ device factories start CUDA and add one ``DeviceAttributes`` per CUDA device, as the real
    ``_pywrap_device_lib.list_devices`` does; the eager context is left untouched."""
    from tensorflow.core.framework import device_attributes_pb2
    from tensorflow.python.client import _pywrap_device_lib

    original_list = _pywrap_device_lib.list_devices

    def list_devices(serialized_config: Any = None) -> list[bytes]:
        found = list(original_list(serialized_config))
        for position, (_, name, _) in enumerate(cu_init()):
            major, minor = capability(name)
            found.append(
                device_attributes_pb2.DeviceAttributes(
                    name=f"/device:GPU:{position}",
                    device_type="GPU",
                    physical_device_desc=(
                        f"device: {position}, name: {name}, pci bus id: 0000:00:0{position}.0, "
                        f"compute capability: {major}.{minor}"
                    ),
                ).SerializeToString()
            )
        return found

    _pywrap_device_lib.list_devices = list_devices


def session_view(config: Any) -> dict[str, Any]:
    """What a session made with ``config`` (the ``ConfigProto`` ``BaseSession`` kept) uses, as the
    real GPU build would make its devices: ``device_count['GPU'] == 0`` makes none;
    ``gpu_options.visible_device_list`` picks CUDA devices by CUDA's number (all when empty); each
    ``experimental.virtual_devices`` entry splits its GPU into devices of ``memory_limit_mb`` (empty:
    the whole GPU), else ``per_process_gpu_memory_fraction`` of the GPU's memory, else the whole GPU;
    ``TF_FORCE_GPU_ALLOW_GROWTH`` ``true``/``false`` overrides ``allow_growth``.

    Returns ``{"gpus": [NVML index per GPU used], "memory_mb": {NVML index: [MiB per device]},
    "growth": bool}``."""
    import pynvml

    devices = cu_init()
    options = config.gpu_options
    if "GPU" in config.device_count and config.device_count["GPU"] == 0:
        positions: list[int] = []
    elif options.visible_device_list:
        positions = [int(p) for p in options.visible_device_list.split(",")]
    else:
        positions = list(range(len(devices)))
    virtual = list(options.experimental.virtual_devices)
    memory: dict[str, list[float]] = {}
    for k, position in enumerate(positions):
        index = devices[position][0]
        total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total / 2**20
        if virtual and virtual[k].memory_limit_mb:
            memory[str(index)] = list(virtual[k].memory_limit_mb)
        elif options.per_process_gpu_memory_fraction:
            memory[str(index)] = [round(total * options.per_process_gpu_memory_fraction, 1)]
        else:
            memory[str(index)] = [round(total, 1)]
    forced = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    growth = forced == "true" if forced in ("true", "false") else bool(options.allow_growth)
    return {"gpus": [devices[p][0] for p in positions], "memory_mb": memory, "growth": growth}


def _patch_torch(torch: types.ModuleType) -> None:
    cuda = torch.cuda

    def get_device_count() -> int:
        return len(cu_init())

    def cuda_init() -> None:
        if not cu_init():
            raise RuntimeError("No CUDA GPUs are available")

    def set_memory_fraction(fraction: float, device: int) -> None:
        if not 0 <= device < len(cu_init()):
            raise RuntimeError("CUDA error: invalid device ordinal")
        fractions[device] = fraction

    torch._C._cuda_getDeviceCount = get_device_count
    torch._C._cuda_init = cuda_init
    torch._C._cuda_setMemoryFraction = set_memory_fraction
    torch._C._cuda_getMemoryFraction = lambda device: fractions.get(device, 1.0)
    # torch.cuda._is_compiled() is now True (it asks for _cuda_getDeviceCount), so torch._dynamo (which
    # Keras' torch backend imports) takes the CUDA build's stream getter: a CUDA build has one
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    cuda._cudart = types.SimpleNamespace()
    cuda.get_device_name = lambda device=None: cu_init()[_device_position(torch, device)][1]
    _patch_torch_devices(torch)
    if os.environ.get("CUDA_STANDIN_TORCH_NVML") == "1":
        # As on a machine with the driver: PyTorch's own NVML reading (ctypes, libnvidia-ml.so.1)
        # answers with NVML's GPUs, and torch's real _device_count_nvml applies CUDA_VISIBLE_DEVICES.
        cuda._raw_device_count_nvml = lambda: len(_nvml_gpus())
        cuda._raw_device_uuid_nvml = lambda: [uuid for _, _, uuid in _nvml_gpus()]
    else:
        cuda._device_count_nvml = lambda: -1  # as when NVML cannot be opened by torch: it asks CUDA


def child_report() -> dict[str, Any]:
    """Run in a worker process (``torch.multiprocessing`` spawn: importable by name): start CUDA
    there through PyTorch's lazy init and say what this process got: the selection it read, the
    GPUs (NVML indices, by CUDA's ordinal), and its memory caps (``{ordinal: fraction}``)."""
    import torch

    torch.cuda.init()
    return {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "gpus": [index for index, _, _ in cu_init()],
        "fractions": {str(k): v for k, v in fractions.items()},
    }


current_device: list[int] = [0]  # torch.cuda.set_device's device, as CUDA keeps it per thread


def _device_position(torch: types.ModuleType, device: Any) -> int:
    """CUDA's ordinal for ``device`` (``None``: the current one), as ``get_device_properties`` checks
    it, after PyTorch's lazy init: ``AssertionError: Invalid device id`` past the devices CUDA shows."""
    torch.cuda._lazy_init()
    position = current_device[0] if device is None else torch.cuda._get_device_index(device, optional=True)
    if not 0 <= position < len(cu_init()):
        raise AssertionError("Invalid device id")
    return position


def _invalid_ordinal(torch: types.ModuleType, device: Any) -> None:
    """What CUDA answers a device past the ones it shows (``cudaSetDevice``, the device guard of
    every op on ``cuda:N``): ``RuntimeError: CUDA error: invalid device ordinal``, after lazy init."""
    torch.cuda._lazy_init()
    if not 0 <= device < len(cu_init()):
        raise RuntimeError(
            "CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at some "
            "other API call, so the stacktrace below might be incorrect."
        )


def _patch_torch_devices(torch: types.ModuleType) -> None:
    """``torch.cuda.set_device``/``current_device`` (``torch._C._cuda_setDevice``/``_cuda_getDevice``),
    and ``Tensor.to``/``Tensor.cuda`` to a ``cuda:N`` past the devices CUDA shows: the error CUDA
    gives (a device that exists still reaches the CPU build's own error: there is no CUDA tensor)."""

    def set_device(device: int) -> None:
        _invalid_ordinal(torch, device)
        current_device[0] = device

    def get_device() -> int:
        torch.cuda._lazy_init()
        return current_device[0]

    torch._C._cuda_setDevice = set_device
    torch._C._cuda_getDevice = get_device

    def cuda_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        for value in (kwargs.get("device"), *args[:1]):
            if isinstance(value, (str, torch.device)):
                target = torch.device(value)
                if target.type == "cuda":
                    return current_device[0] if target.index is None else target.index
        return None

    original_to, original_cuda = torch.Tensor.to, torch.Tensor.cuda

    def to(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        target = cuda_target(args, kwargs)
        if target is not None:
            _invalid_ordinal(torch, target)
        return original_to(tensor, *args, **kwargs)

    def cuda_method(tensor: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        if device is not None:
            _invalid_ordinal(torch, torch.cuda._get_device_index(device, optional=True))
        return original_cuda(tensor, device, *args, **kwargs)

    torch.Tensor.to = to
    torch.Tensor.cuda = cuda_method


_import_hooks.when_imported("tensorflow", _patch_tensorflow)
_import_hooks.when_imported("torch", _patch_torch)
