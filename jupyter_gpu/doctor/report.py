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

The page (:func:`render_text`) is in the user's language (:mod:`jupyter_gpu.core.i18n`); the JSON
stays English. A finding (a problem, a note, a cause) made with :meth:`Finding.said` is English in the
JSON and carries its translation for the page; the others (a framework's own message, a child's
answer) are shown as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.i18n import N_, _
from ..core.messages import shown as shown_message
from ..core.text import display_text
from ..core.units import format_bytes

SCHEMA = 1


class Finding(str):
    """A finding as the JSON has it (English), with :attr:`shown`, the page's words, beside it.

    ``Finding.said(N_("GPU {index} cannot be read: {error}"), index=1, error=...)``: the template is
    filled once in English and once in the user's language. A plain ``str`` everywhere else (JSON,
    comparisons, ``asdict``); :func:`shown` gives the page's words of any string."""

    shown: str

    def __new__(cls, text: str, shown: str | None = None) -> Finding:
        finding = super().__new__(cls, text)
        finding.shown = text if shown is None else shown
        return finding

    @classmethod
    def said(cls, template: str, shown_fields: Mapping[str, object] | None = None, **fields: object) -> Finding:
        """``template`` (marked with ``N_``) filled in English, and in the user's language for the page
        (with ``shown_fields`` instead of those ``fields`` there: a marked word translated)."""
        return cls(template.format(**fields), _(template).format(**{**fields, **(shown_fields or {})}))

    @classmethod
    def joined(cls, parts: Sequence[str]) -> Finding:
        """Findings as one line, ``; `` between them (in the page's language too)."""
        return cls("; ".join(parts), _("; ").join(shown(part) for part in parts))


def shown(text: str) -> str:
    """The page's words of a finding (:class:`Finding`), or ``text`` as it is."""
    return text.shown if isinstance(text, Finding) else text


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
        """The plan's verdict in one line (English: the JSON's ``verdict``)."""
        template, frameworks = self._verdict()
        return template.format(frameworks=frameworks)

    def shown_verdict(self) -> str:
        """:attr:`verdict` in the user's language (the page)."""
        template, frameworks = self._verdict()
        return _(template).format(frameworks=frameworks)

    def _verdict(self) -> tuple[str, str]:
        checked = [f for f in self.frameworks if f.verdict in (FOLLOWS, DIFFERS)]
        if not checked:
            installed = [f for f in self.frameworks if f.installed and f.verdict != NOT_CHECKED]
            if not installed:
                return N_("cannot verify the plan: no framework (TensorFlow, PyTorch, JAX) is installed"), ""
            if all(f.build == "cpu" for f in installed):
                return N_("cannot verify the plan: no framework with GPU support"), ""
            return N_("cannot verify the plan: no framework listed a GPU"), ""
        differing = [f.name for f in checked if f.verdict == DIFFERS]
        if differing:
            return N_("the plan is NOT followed by {frameworks}"), ", ".join(differing)
        return N_("the plan is followed by {frameworks}"), ", ".join(f.name for f in checked)

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


def _value(value: str | None, missing: str | None = None) -> str:
    if value is None:
        return _("unset") if missing is None else missing
    return repr(display_text(value, 200))


#: A service's state as the page says it (the JSON keeps the English words).
SERVICE_STATES = {
    "answers": N_("answers"),
    "no answer": N_("no answer"),
    "not running": N_("not running"),
    "not configured": N_("not configured"),
}


#: A service's name as the page says it (:mod:`jupyter_gpu.doctor.machine` names them).
SERVICE_NAMES = {"Server extension": N_("Server extension"), "Hub service": N_("Hub service")}


def _machine_lines(machine: Machine) -> list[str]:
    lines = [_("Machine")]
    if machine.simulated:
        lines.append("  " + _("SIMULATED GPUs (JUPYTER_GPU_SIMULATE): no real GPU or driver is being checked"))
    if not machine.nvml_available:
        lines.append("  " + _("NVML cannot be read: {error}").format(error=display_text(machine.nvml_error)))
    else:
        lines.append(
            "  "
            + _("driver {driver}, NVML {nvml}, CUDA {cuda} (the newest the driver runs)").format(
                driver=display_text(machine.driver_version),
                nvml=display_text(machine.nvml_version, missing=_("n/a")),
                cuda=display_text(machine.cuda_driver_version, missing=_("n/a")),
            )
        )
        if not machine.gpus:
            lines.append("  " + _("NVML works, but it shows no GPU"))
        for gpu in machine.gpus:
            if gpu.error:
                lines.append(
                    "  "
                    + _("GPU {index}: cannot be read: {error}").format(
                        index=gpu.index, error=display_text(shown_message(gpu.error))
                    )
                )
                continue
            pci = display_text(gpu.pci_bus_id, missing=_("n/a"))
            mig = _("MIG on") if gpu.mig_mode else _("MIG off")
            lines.append(
                f"  GPU {gpu.index}: {display_text(gpu.name, 48)}, {format_bytes(gpu.memory_total)}, "
                f"{display_text(gpu.uuid, 48)}, PCI {pci}, {mig}"
            )
        counts = machine.processes
        if counts:
            lines.append(
                "  "
                + _(
                    "GPU processes NVML lists: {total} (yours {yours}, other users' {others}, "
                    "owner not known {unknown})"
                ).format(
                    total=counts.get("total", 0),
                    yours=counts.get("yours", 0),
                    others=counts.get("other_users", 0),
                    unknown=counts.get("unknown_owner", 0),
                )
            )
    env = machine.environment
    lines.append(
        "  "
        + _(
            "At start: CUDA_VISIBLE_DEVICES {visible}, CUDA_DEVICE_ORDER {order}, NVIDIA_VISIBLE_DEVICES {nvidia}"
        ).format(
            visible=_value(env.get("CUDA_VISIBLE_DEVICES")),
            order=_value(env.get("CUDA_DEVICE_ORDER"), _("unset (fastest first)")),
            nvidia=_value(env.get("NVIDIA_VISIBLE_DEVICES")),
        )
    )
    if machine.container:
        lines.append("  " + _("Container: {container}").format(container=display_text(machine.container, 200)))
    fence = display_text(machine.fence, 200, missing=_("none (every GPU may be selected)"))
    lines.append("  " + _("Fence: {fence}").format(fence=fence))
    if machine.admin:
        admin = ", ".join(f"{key}={display_text(value, 60)}" for key, value in sorted(machine.admin.items()))
        lines.append("  " + _("Admin settings: {settings}").format(settings=admin))
    else:
        lines.append("  " + _("Admin settings: none"))
    for service in machine.services:
        name = _(SERVICE_NAMES[service.name]) if service.name in SERVICE_NAMES else service.name
        state = _(SERVICE_STATES[service.state]) if service.state in SERVICE_STATES else service.state
        if service.detail:
            line = _("{service}: {state} ({detail})").format(
                service=name, state=state, detail=display_text(service.detail, 200)
            )
        else:
            line = _("{service}: {state}").format(service=name, state=state)
        lines.append("  " + line)
    lines += [
        "  " + _("PROBLEM: {problem}").format(problem=display_text(shown(text), 300)) for text in machine.problems
    ]
    lines += ["  " + _("note: {note}").format(note=display_text(shown(text), 300)) for text in machine.notes]
    return lines


KERAS_FOLLOWS = {"tensorflow": "TensorFlow", "torch": "PyTorch", "jax": "JAX"}


def _framework_lines(check: FrameworkCheck, driver_cuda: str | None = None) -> list[str]:
    if not check.installed:
        return ["  " + _("{framework}: not installed").format(framework=check.name)]
    version = display_text(check.version, missing="?")
    if check.verdict == NOT_CHECKED:
        return [
            "  "
            + _("{framework} {version}: not checked (left out by --framework)").format(
                framework=check.name, version=version
            )
        ]
    package = f" ({check.package})" if check.package else ""
    if check.build == "cpu":
        build = _("CPU-only build: for a GPU, install {command}").format(
            command=_(check.gpu_install) if check.gpu_install else ""  # _("") would be the catalog's header
        )
    elif check.build == "gpu":
        built = ", ".join(
            part
            for part in (f"CUDA {check.cuda}" if check.cuda else "", f"cuDNN {check.cudnn}" if check.cudnn else "")
            if part
        )
        build = _("GPU build for {versions}").format(versions=built) if built else _("GPU build")
        if check.cuda and driver_cuda:
            build += " " + _("(the driver supports CUDA {version})").format(version=display_text(driver_cuda))
    else:
        build = _("build not known")
    lines = [
        "  "
        + _("{framework} {version}{package}: {build}").format(
            framework=check.name, version=version, package=package, build=build
        )
    ]
    for device in check.devices:
        if device.gpu is not None:
            which = _("GPU {index} (by {matched_by})").format(index=device.gpu, matched_by=device.matched_by)
        else:
            which = _("no NVML GPU matches")
        cap = (
            _(", cap {size}").format(size=format_bytes(device.memory_limit)) if device.memory_limit is not None else ""
        )
        lines.append(
            "    "
            + _("device {position}: {name} = {which}{cap}").format(
                position=device.position, name=display_text(device.name, 48), which=which, cap=cap
            )
        )
    if check.verdict == DIFFERS:
        lines.append("    " + _("DIFFERS from the plan:"))
        lines += [f"      - {display_text(shown(text), 400)}" for text in check.differences or (check.reason,)]
    elif check.verdict in (FOLLOWS, CANNOT_VERIFY):
        verdict = _("follows the plan") if check.verdict == FOLLOWS else _("cannot verify")
        if check.reason:
            verdict = _("{verdict}: {reason}").format(verdict=verdict, reason=display_text(shown(check.reason), 400))
        lines.append(f"    {verdict}")
    lines += [
        "    " + _("PROBLEM: {problem}").format(problem=display_text(shown(text), 400)) for text in check.problems
    ]
    return lines


def render_text(report: Report) -> str:
    """The report as one page of plain text (the terminal and ``%gpu_doctor``), in the user's language."""
    lines = [f"jupyter-gpu doctor (jupyter_gpu {report.jupyter_gpu})"]
    lines += _machine_lines(report.machine)
    lines.append(_("Plan: {plan}").format(plan=display_text(report.plan_summary, 400)))
    lines.append(_("Frameworks (each started in a child process with the plan)"))
    for check in report.frameworks:
        lines += _framework_lines(check, report.machine.cuda_driver_version)
    if report.keras is not None:
        keras = report.keras
        follows = KERAS_FOLLOWS.get(keras.get("backend", ""))
        which = (
            _("{framework}'s line above says what it uses").format(framework=follows)
            if follows
            else _("not a backend jupyter_gpu configures")
        )
        lines.append(
            "  "
            + _(
                "Keras {version}: backend {backend} (from {source}); Keras has no GPU settings of its own: {which}"
            ).format(
                version=display_text(keras.get("version")),
                backend=display_text(keras.get("backend"), 40),
                source=display_text(keras.get("source"), 200),
                which=which,
            )
        )
    found = _("a problem was found (exit status 1)")
    status = found if report.exit_status else _("no problem found (exit status 0)")
    lines.append(_("Verdict: {verdict}; {status}").format(verdict=report.shown_verdict(), status=status))
    return "\n".join(lines)
