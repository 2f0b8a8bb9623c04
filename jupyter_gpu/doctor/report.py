"""The doctor's report: plain data, its stable JSON shape and its one page of text (pure).

``Report.to_dict()`` is the documented contract of ``jupyter-gpu doctor --json`` (docs/doctor.md)::

    {"schema": 1, "jupyter_gpu": str, "status": "ok"|"problem", "exit_status": 0|1,
     "elapsed_s": float,
     "machine": {"nvml_available": bool, "nvml_error": str|null, "simulated": bool,
                 "driver_version": str|null, "nvml_version": str|null, "cuda_driver_version": str|null,
                 "gpus": [{"index": int, "name": str, "uuid": str, "pci_bus_id": str|null,
                           "mig_mode": bool, "memory_total": int, "error": str|null}],
                 "processes": {"total": int, "yours": int, "other_users": int, "unknown_owner": int},
                 "environment": {"CUDA_VISIBLE_DEVICES": str|null, "CUDA_DEVICE_ORDER": str|null,
                                 "NVIDIA_VISIBLE_DEVICES": str|null},
                 "container": str|null, "fence": str|null, "admin": {name: value},
                 "services": [{"name": str, "state": "answers"|"no answer"|"not running"|"not configured",
                               "detail": str}],
                 "problems": [str], "notes": [str], "elapsed_s": float},
     "plan": {"summary": str, "magics": [str]},
     "frameworks": [{"name": str, "package": str|null, "installed": bool, "version": str|null,
                     "build": "gpu"|"cpu"|"unknown", "cuda": str|null, "cudnn": str|null,
                     "gpu_install": str, "verdict": "follows"|"differs"|"cannot verify"|"not installed"|"not checked",
                     "reason": str, "differences": [str],   (one line each; "reason" joins them)
                     "devices": [{"position": int, "name": str, "gpu": int|null,
                                  "matched_by": "uuid"|"pci bus id"|"name"|null,
                                  "memory_limit": int|null}],
                     "problems": [str], "elapsed_s": float|null}],
     "keras": {"version": str, "backend": str, "source": str}|null,    (Keras 3, not imported)
     "verdict": str}

Sizes are bytes. ``status`` is "problem" (exit status 1) when a framework differs from the plan,
timed out or failed, a GPU build sees no GPU, NVML cannot be read, or a machine problem was found;
"cannot verify" alone is not a problem (a machine with CPU builds runs clean). Exit status 2 (could
not run: bad arguments, a plan the planner refuses) has no report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.text import display_text
from ..core.units import format_bytes

SCHEMA = 1

FOLLOWS = "follows"
DIFFERS = "differs"
CANNOT_VERIFY = "cannot verify"
NOT_INSTALLED = "not installed"
NOT_CHECKED = "not checked"  # installed, left out by --framework


@dataclass(frozen=True)
class Service:
    """Whether a jupyter_gpu service answers: the server extension or the hub service."""

    name: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class MachineGpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str | None = None
    mig_mode: bool = False
    memory_total: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Machine:
    """Part 1: the driver, the GPUs, what NVML may see, the variables and the services."""

    nvml_available: bool
    nvml_error: str | None = None
    simulated: bool = False
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[MachineGpu, ...] = ()
    processes: Mapping[str, int] = field(default_factory=dict)
    environment: Mapping[str, str | None] = field(default_factory=dict)
    container: str | None = None
    fence: str | None = None
    admin: Mapping[str, str] = field(default_factory=dict)
    services: tuple[Service, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class DeviceMatch:
    """One device of a framework, in its own numbering, and the NVML GPU it is."""

    position: int
    name: str
    gpu: int | None = None
    matched_by: str | None = None
    memory_limit: int | None = None


@dataclass(frozen=True)
class FrameworkCheck:
    """Part 2 and 3 for one framework: its build, and whether it follows the plan."""

    name: str
    package: str | None = None
    installed: bool = False
    version: str | None = None
    build: str = "unknown"
    cuda: str | None = None
    cudnn: str | None = None
    gpu_install: str = ""
    verdict: str = NOT_INSTALLED
    reason: str = ""
    differences: tuple[str, ...] = ()
    devices: tuple[DeviceMatch, ...] = ()
    problems: tuple[str, ...] = ()
    elapsed_s: float | None = None

    @property
    def failed(self) -> bool:
        return self.verdict == DIFFERS or bool(self.problems)


@dataclass(frozen=True)
class Report:
    jupyter_gpu: str
    machine: Machine
    plan_summary: str
    plan_magics: tuple[str, ...]
    frameworks: tuple[FrameworkCheck, ...]
    keras: Mapping[str, str] | None = None
    elapsed_s: float = 0.0

    @property
    def verdict(self) -> str:
        """The plan's verdict in one line."""
        checked = [f for f in self.frameworks if f.verdict in (FOLLOWS, DIFFERS)]
        if not checked:
            installed = [f for f in self.frameworks if f.installed and f.verdict != NOT_CHECKED]
            if not installed:
                return "cannot verify the plan: no framework (TensorFlow, PyTorch, JAX) is installed"
            if all(f.build == "cpu" for f in installed):
                return "cannot verify the plan: no framework with GPU support"
            return "cannot verify the plan: no framework listed a GPU"
        differing = [f.name for f in checked if f.verdict == DIFFERS]
        if differing:
            return f"the plan is NOT followed by {', '.join(differing)}"
        return f"the plan is followed by {', '.join(f.name for f in checked)}"

    @property
    def exit_status(self) -> int:
        """0: all good; 1: a problem was found (see the module docstring)."""
        machine = self.machine
        if not machine.nvml_available or machine.problems or any(f.failed for f in self.frameworks):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        machine = asdict(self.machine)
        machine["processes"] = dict(self.machine.processes)
        machine["environment"] = dict(self.machine.environment)
        machine["admin"] = dict(self.machine.admin)
        frameworks = []
        for check in self.frameworks:
            data = asdict(check)
            frameworks.append(data)
        return {
            "schema": SCHEMA,
            "jupyter_gpu": self.jupyter_gpu,
            "status": "problem" if self.exit_status else "ok",
            "exit_status": self.exit_status,
            "elapsed_s": round(self.elapsed_s, 3),
            "machine": machine,
            "plan": {"summary": self.plan_summary, "magics": list(self.plan_magics)},
            "frameworks": frameworks,
            "keras": dict(self.keras) if self.keras is not None else None,
            "verdict": self.verdict,
        }


# -- the page -------------------------------------------------------------------------------------


def _value(value: str | None, missing: str = "unset") -> str:
    return missing if value is None else repr(display_text(value, 200))


def _machine_lines(machine: Machine) -> list[str]:
    lines = ["Machine"]
    if machine.simulated:
        lines.append("  SIMULATED GPUs (JUPYTER_GPU_SIMULATE): no real GPU or driver is being checked")
    if not machine.nvml_available:
        lines.append(f"  NVML cannot be read: {display_text(machine.nvml_error)}")
    else:
        versions = [f"driver {display_text(machine.driver_version)}"]
        versions.append(f"NVML {display_text(machine.nvml_version, missing='n/a')}")
        versions.append(f"CUDA {display_text(machine.cuda_driver_version, missing='n/a')} (the newest the driver runs)")
        lines.append("  " + ", ".join(versions))
        if not machine.gpus:
            lines.append("  NVML works, but it shows no GPU")
        for gpu in machine.gpus:
            if gpu.error:
                lines.append(f"  GPU {gpu.index}: cannot be read: {display_text(gpu.error)}")
                continue
            pci = display_text(gpu.pci_bus_id, missing="n/a")
            mig = "MIG on" if gpu.mig_mode else "MIG off"
            lines.append(
                f"  GPU {gpu.index}: {display_text(gpu.name, 48)}, {format_bytes(gpu.memory_total)}, "
                f"{display_text(gpu.uuid, 48)}, PCI {pci}, {mig}"
            )
        counts = machine.processes
        if counts:
            lines.append(
                f"  GPU processes NVML lists: {counts.get('total', 0)} (yours {counts.get('yours', 0)}, "
                f"other users' {counts.get('other_users', 0)}, owner not known {counts.get('unknown_owner', 0)})"
            )
    env = machine.environment
    lines.append(
        "  At start: CUDA_VISIBLE_DEVICES "
        + _value(env.get("CUDA_VISIBLE_DEVICES"))
        + ", CUDA_DEVICE_ORDER "
        + _value(env.get("CUDA_DEVICE_ORDER"), "unset (fastest first)")
        + ", NVIDIA_VISIBLE_DEVICES "
        + _value(env.get("NVIDIA_VISIBLE_DEVICES"))
    )
    if machine.container:
        lines.append(f"  Container: {display_text(machine.container, 200)}")
    lines.append(f"  Fence: {display_text(machine.fence, 200, missing='none (every GPU may be selected)')}")
    if machine.admin:
        admin = ", ".join(f"{key}={display_text(value, 60)}" for key, value in sorted(machine.admin.items()))
        lines.append(f"  Admin settings: {admin}")
    else:
        lines.append("  Admin settings: none")
    for service in machine.services:
        detail = f" ({display_text(service.detail, 200)})" if service.detail else ""
        lines.append(f"  {service.name}: {service.state}{detail}")
    lines += [f"  PROBLEM: {display_text(text, 300)}" for text in machine.problems]
    lines += [f"  note: {display_text(text, 300)}" for text in machine.notes]
    return lines


KERAS_FOLLOWS = {"tensorflow": "TensorFlow", "torch": "PyTorch", "jax": "JAX"}


def _framework_lines(check: FrameworkCheck, driver_cuda: str | None = None) -> list[str]:
    if not check.installed:
        return [f"  {check.name}: not installed"]
    if check.verdict == NOT_CHECKED:
        return [f"  {check.name} {display_text(check.version, missing='?')}: not checked (left out by --framework)"]
    package = f" ({check.package})" if check.package else ""
    head = f"  {check.name} {display_text(check.version, missing='?')}{package}: "
    if check.build == "cpu":
        head += f"CPU-only build: for a GPU, install {check.gpu_install}"
    elif check.build == "gpu":
        built = [f"CUDA {check.cuda}" if check.cuda else "", f"cuDNN {check.cudnn}" if check.cudnn else ""]
        head += "GPU build" + (f" for {', '.join(b for b in built if b)}" if any(built) else "")
        if check.cuda and driver_cuda:
            head += f" (the driver supports CUDA {display_text(driver_cuda)})"
    else:
        head += "build not known"
    lines = [head]
    for device in check.devices:
        which = f"GPU {device.gpu} (by {device.matched_by})" if device.gpu is not None else "no NVML GPU matches"
        cap = f", cap {format_bytes(device.memory_limit)}" if device.memory_limit is not None else ""
        lines.append(f"    device {device.position}: {display_text(device.name, 48)} = {which}{cap}")
    if check.verdict == DIFFERS:
        lines.append("    DIFFERS from the plan:")
        lines += [f"      - {display_text(text, 400)}" for text in check.differences or (check.reason,)]
    elif check.verdict in (FOLLOWS, CANNOT_VERIFY):
        verdict = "follows the plan" if check.verdict == FOLLOWS else "cannot verify"
        reason = f": {display_text(check.reason, 400)}" if check.reason else ""
        lines.append(f"    {verdict}{reason}")
    lines += [f"    PROBLEM: {display_text(text, 400)}" for text in check.problems]
    return lines


def render_text(report: Report) -> str:
    """The report as one page of plain text (the terminal and ``%gpu_doctor``)."""
    lines = [f"jupyter-gpu doctor (jupyter_gpu {report.jupyter_gpu})"]
    lines += _machine_lines(report.machine)
    lines.append(f"Plan: {display_text(report.plan_summary, 400)}")
    lines.append("Frameworks (each started in a child process with the plan)")
    for check in report.frameworks:
        lines += _framework_lines(check, report.machine.cuda_driver_version)
    if report.keras is not None:
        keras = report.keras
        follows = KERAS_FOLLOWS.get(keras.get("backend", ""))
        which = f"{follows}'s line above says what it uses" if follows else "not a backend jupyter_gpu configures"
        lines.append(
            f"  Keras {display_text(keras.get('version'))}: backend {display_text(keras.get('backend'), 40)} "
            f"(from {display_text(keras.get('source'), 200)}); Keras has no GPU settings of its own: {which}"
        )
    status = "a problem was found (exit status 1)" if report.exit_status else "no problem found (exit status 0)"
    lines.append(f"Verdict: {report.verdict}; {status}")
    return "\n".join(lines)
