"""The references the GPU check (tests/gpu/) compares jupyter_gpu with, read without jupyter_gpu.

Importable as ``real_gpu``. ``nvidia-smi -q -x`` is NVIDIA's own reading of the driver; its XML
element names follow NVIDIA's DTD (``nvsmi_device_v12.dtd``, ``nvsmi_device_v13.dtd`` from driver 580 on,
shipped with the driver and named in the XML's DOCTYPE): ``product_name``, ``uuid``, ``pci/pci_bus_id``,
``fb_memory_usage/total|used`` (``"81559 MiB"``), ``driver_version``, ``cuda_version``,
``mig_mode/current_mig`` (``Enabled``/``Disabled``/``N/A``; as read from driver 580.159.04's output,
docs/real-gpu.md), ``fan_speed`` (``"30 %"`` or ``N/A``), ``clocks/sm_clock`` and
``clocks/mem_clock`` (``"1980 MHz"``), ``ecc_errors/volatile/…`` and ``processes/process_info``
with ``pid`` and ``used_memory``. Every value may be ``N/A`` or missing: the parser gives None then,
so a check says what was missing instead of crashing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024
_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)")


def number(text: str | None) -> float | None:
    """``"81559 MiB"`` -> 81559.0; ``"N/A"``, ``"[N/A]"``, ``"Not Supported"``, None -> None."""
    if text is None:
        return None
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else None


@dataclass
class SmiGpu:
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    mig_mode: str | None
    fan_percent: float | None
    clock_sm_mhz: float | None
    clock_memory_mhz: float | None
    ecc_uncorrected: int | None
    processes: dict[int, float | None] = field(default_factory=dict)  # pid -> used MiB


@dataclass
class Smi:
    driver_version: str | None
    cuda_version: str | None
    gpus: list[SmiGpu]


def _text(node: ElementTree.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if text in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else text


def _raw_text(node: ElementTree.Element, path: str) -> str | None:
    """The element's text as nvidia-smi wrote it (``N/A`` kept); None only when it is missing, so a
    check can tell "this GPU has no such mode" from "the reader looks for the wrong name"."""
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _ecc_uncorrected(gpu: ElementTree.Element) -> int | None:
    """Volatile uncorrected ECC errors: the sum of the ``volatile`` counts NVIDIA names uncorrectable
    (``dram_uncorrectable``, ``sram_uncorrectable*``; older drivers: ``double_bit/total``)."""
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    values = [
        number(element.text)
        for element in volatile.iter()
        if "uncorrectable" in element.tag and element.tag != "volatile"
    ]
    double_bit = number(_text(volatile, "double_bit/total"))
    if double_bit is not None:
        values.append(double_bit)
    known = [v for v in values if v is not None]
    return int(sum(known)) if known else None


def parse_smi(xml: str) -> Smi:
    """``nvidia-smi -q -x``'s output (DOCTYPE and all) -> :class:`Smi`."""
    xml = re.sub(r"<!DOCTYPE[^>]*>", "", xml)
    root = ElementTree.fromstring(xml)
    gpus = []
    for gpu in root.findall("gpu"):
        processes: dict[int, float | None] = {}
        for info in gpu.findall("processes/process_info"):
            pid = number(_text(info, "pid"))
            if pid is not None:
                processes[int(pid)] = number(_text(info, "used_memory"))
        gpus.append(
            SmiGpu(
                name=_text(gpu, "product_name"),
                uuid=_text(gpu, "uuid"),
                pci_bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                memory_total_mib=number(_text(gpu, "fb_memory_usage/total")),
                memory_used_mib=number(_text(gpu, "fb_memory_usage/used")),
                mig_mode=_raw_text(gpu, "mig_mode/current_mig"),
                fan_percent=number(_text(gpu, "fan_speed")),
                clock_sm_mhz=number(_text(gpu, "clocks/sm_clock")),
                clock_memory_mhz=number(_text(gpu, "clocks/mem_clock")),
                ecc_uncorrected=_ecc_uncorrected(gpu),
                processes=processes,
            )
        )
    return Smi(_text(root, "driver_version"), _text(root, "cuda_version"), gpus)


def read_smi(timeout: float = 60) -> Smi:
    done = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=timeout, check=True)
    return parse_smi(done.stdout)


def bus_id(value: str | None) -> str | None:
    """A PCI bus id without its domain, lower case: ``00000000:18:00.0`` -> ``18:00.0`` (NVML's
    ``busId`` and nvidia-smi both give 8 hex digits of domain; ``busIdLegacy`` gives 4)."""
    if not value:
        return None
    return value.strip().lower().split(":", 1)[-1] if value.count(":") == 2 else value.strip().lower()


def process_memory(pid: int) -> int | None:
    """Bytes NVML shows ``pid`` holding on any GPU (compute and graphics), read with nvidia-ml-py
    directly; None when NVML lists it nowhere. (The reference: not jupyter_gpu's reader.)"""
    import pynvml

    pynvml.nvmlInit()
    try:
        total = None
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for reader in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    processes = reader(handle)
                except pynvml.NVMLError:
                    continue
                for process in processes:
                    if process.pid == pid and isinstance(process.usedGpuMemory, int):
                        total = (total or 0) + process.usedGpuMemory
        return total
    finally:
        pynvml.nvmlShutdown()


def total_memory() -> int:
    """GPU 0's memory total, as jupyter_gpu's NVML reader gives it."""
    from jupyter_gpu.sources import nvml

    return nvml.snapshot().gpus[0].memory_total


def uuid0() -> str:
    """GPU 0's UUID, as jupyter_gpu's NVML reader gives it."""
    from jupyter_gpu.sources import nvml

    return nvml.snapshot().gpus[0].uuid


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``jupyter-gpu ARGS`` as a child process (``python -m jupyter_gpu.cli``: no console script
    needed on the bare machine), with this process's environment (its PYTHONPATH holds the tree)."""
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.cli", *args],
        env=env if env is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024**3:.2f} GiB"


def first(items: list[Any], what: str) -> Any:
    assert items, f"no {what}"
    return items[0]


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b: ", re.MULTILINE)


def ran(kernel: Any, code: str, timeout: float = 180) -> tuple[str, str]:
    """``kernel.run(code)`` that must not raise: a cell's error fails the check with the error's own
    line (``ModuleNotFoundError: No module named 'torch'``), not a later, puzzling assertion."""
    out, err = kernel.run(code, timeout=timeout)
    error = _ERROR_LINE.search(err)
    assert error is None, err[error.start() :].splitlines()[0] if error else err
    return out, err
