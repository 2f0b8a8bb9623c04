"""``jupyter-gpu doctor`` and ``%gpu_doctor``: check the GPU stack and the plan on this machine.

One page in three parts (docs/doctor.md explains each line):

1. the machine (:mod:`.machine`): driver, NVML and CUDA driver versions, the GPUs, what NVML may
   see, the CUDA variables, the fence, the admin's settings, the services; simulated GPUs said so;
2. each installed framework: version, GPU build or CPU-only (and the package that gives a GPU
   build), the CUDA/cuDNN it was built for against what the driver supports, and why a GPU build
   lists no GPU;
3. the plan checked for real: each installed framework is started in a child process
   (:mod:`.probe`, all at once, time-boxed, :mod:`.children`) with the plan applied as a fresh
   kernel applies it, and what it lists and takes is compared with the plan (:mod:`.compare`).

:func:`run` returns a :class:`~.report.Report`; the faces render it (:func:`~.report.render_text`)
or print its JSON (:meth:`~.report.Report.to_dict`). This layer imports no face: the plan arrives
as a built :class:`~jupyter_gpu.plan.GpuPlan` with its one-line summary.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from ..core.environ import SIMULATE_ENV_VAR
from ..core.errors import WireError
from ..core.i18n import N_
from ..core.snapshot import GpuInfo
from ..core.wire import Fields, loads
from ..plan import GpuPlan, PlanRequest, kernel_start_fence
from .children import ProbeResult, Probes, request_to_json
from .compare import GPU_INSTALL, NO_GPU_AS_PLANNED, PlanExpectation, check_devices, expectation, no_gpu_causes
from .machine import read_machine
from .report import (
    CANNOT_VERIFY,
    FOLLOWS,
    NOT_CHECKED,
    NOT_INSTALLED,
    Finding,
    FrameworkCheck,
    Machine,
    Report,
    render_text,
)

__all__ = ["DEFAULT_TIMEOUT_S", "FRAMEWORKS", "Report", "render_text", "resolved_request", "run"]

#: How long the framework children may take, all together (they run at once).
DEFAULT_TIMEOUT_S = 60.0

#: module -> (name, the distributions that provide it, first found wins)
FRAMEWORKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tensorflow": ("TensorFlow", ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-intel")),
    "torch": ("PyTorch", ("torch",)),
    "jax": ("JAX", ("jax",)),
}

#: Variables the plan writes or reads: a child starts with their values at process start.
SELECTION_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")


def installed_frameworks() -> dict[str, tuple[str | None, str | None]]:
    """module -> (distribution, version) of each framework importable here, found without importing it."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for module, (_, distributions) in FRAMEWORKS.items():
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except (ImportError, ValueError):
            continue
        found[module] = (None, None)
        for distribution in distributions:
            try:
                found[module] = (distribution, metadata.version(distribution))
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def keras_facts(env: Mapping[str, str]) -> dict[str, str] | None:
    """Keras 3's version and the backend its import will choose, read without importing it: the
    ``backend`` of ``$KERAS_HOME/keras.json`` (default ``~/.keras``), then ``KERAS_BACKEND``, as
    ``keras/src/backend/config.py`` reads them; None when Keras is not installed."""
    try:
        version = metadata.version("keras")
    except metadata.PackageNotFoundError:
        return None
    backend, source = "tensorflow", "Keras' default"
    home = env.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), "rb") as file:
            chosen = Fields(loads(file.read(64 * 1024 + 1), max_bytes=64 * 1024, max_depth=4)).optional_text(
                "backend", 40
            )
        if chosen:
            backend, source = chosen, os.path.join(home, "keras.json")
    except (OSError, WireError):
        pass
    if env.get("KERAS_BACKEND"):
        backend, source = env["KERAS_BACKEND"], "KERAS_BACKEND"
    return {"version": version, "backend": backend, "source": source}


def resolved_request(plan: GpuPlan) -> PlanRequest:
    """The plan's request with its selection as the GPUs it chose (``auto`` is not chosen again)."""
    request = plan.request
    if plan.selected_indices is None:
        return request
    selection = plan.selected_slice or (",".join(map(str, plan.selected_indices)) or "none")
    return replace(request, selection=selection, min_free=None)


def child_environment(env: Mapping[str, str], start: Mapping[str, str]) -> dict[str, str]:
    """The children's environment: ``env`` with the variables the plan manages as they were when
    this process started (a child applies the plan itself, as a fresh kernel does), no claims."""
    from .. import frameworks

    child = dict(env)
    for key in (*SELECTION_VARIABLES, *frameworks._managed_keys()):
        if key in start:
            child[key] = start[key]
        else:
            child.pop(key, None)
    child["JUPYTER_GPU_CLAIMS"] = "0"  # a probe of a plan leaves no claim on the host's board
    _pin_relative_scenario(child)  # the children run in a private folder of their own (children.py)
    package_root = str(Path(__file__).resolve().parents[2])
    child["PYTHONPATH"] = os.pathsep.join(p for p in (child.get("PYTHONPATH"), package_root) if p)
    return child


def _pin_relative_scenario(env: dict[str, str]) -> None:
    """A scenario file named relative to this process's folder, named absolutely for the children,
    which start elsewhere (:mod:`jupyter_gpu.doctor.children`): they simulate what this process does."""
    from ..simulate.presets import DEMO_STILL

    spec = env.get(SIMULATE_ENV_VAR, "").strip()
    if not spec or spec.isdigit() or spec in ("demo", DEMO_STILL) or os.path.isabs(os.path.expanduser(spec)):
        return
    env[SIMULATE_ENV_VAR] = os.path.abspath(spec)


def _build(probe: ProbeResult) -> str:
    if probe.gpu_build or probe.devices:
        return "gpu"
    return "cpu" if probe.gpu_build is False else "unknown"


def check_framework(
    module: str,
    package: tuple[str | None, str | None] | None,
    probe: ProbeResult | None,
    expect: PlanExpectation,
    machine: Machine,
    gpus: Sequence[GpuInfo],
    child_env: Mapping[str, str],
) -> FrameworkCheck:
    """One framework's part of the report, from its child's answer."""
    name = FRAMEWORKS[module][0]
    if package is None or probe is None:
        return FrameworkCheck(name, verdict=NOT_INSTALLED)
    base = FrameworkCheck(
        name,
        package=package[0],
        installed=True,
        version=probe.version or package[1],
        gpu_install=GPU_INSTALL[module],
        elapsed_s=round(probe.elapsed_s, 3),
    )
    if probe.failure is not None:
        return replace(base, verdict=CANNOT_VERIFY, reason=probe.failure, problems=(f"{name} {probe.failure}",))
    if probe.plan_error is not None:
        why = Finding.said(N_("the plan was refused in the child process: {error}"), error=probe.plan_error)
        return replace(base, verdict=CANNOT_VERIFY, reason=why, problems=(why,))
    if probe.error is not None and probe.version is None:  # it never got as far as its version: no import
        why = Finding.said(N_("could not be imported: {error}"), error=probe.error)
        problem = Finding.said(N_("{framework} could not be imported: {error}"), framework=name, error=probe.error)
        return replace(base, verdict=CANNOT_VERIFY, reason=why, problems=(problem,))
    base = replace(base, build=_build(probe), cuda=probe.cuda, cudnn=probe.cudnn)
    if base.build == "cpu":
        return replace(base, verdict=CANNOT_VERIFY, reason=Finding.said(N_("CPU-only build")))
    if probe.error is not None and not probe.devices:
        causes = no_gpu_causes(module, probe, machine.nvml_available, len(gpus), machine.cuda_driver_version, child_env)
        return replace(base, verdict=CANNOT_VERIFY, reason=probe.error, problems=tuple(causes))
    if not probe.devices:
        if expect.indices == ():
            return replace(base, verdict=FOLLOWS, reason=Finding.said(NO_GPU_AS_PLANNED))
        causes = no_gpu_causes(module, probe, machine.nvml_available, len(gpus), machine.cuda_driver_version, child_env)
        return replace(base, verdict=CANNOT_VERIFY, reason=Finding.said(N_("it lists no GPU")), problems=tuple(causes))
    pci = {gpu.index: gpu.pci_bus_id for gpu in machine.gpus if gpu.pci_bus_id}
    verdict, differences, devices = check_devices(module, probe, expect, gpus, pci, probe.cuda_device_order)
    return replace(base, verdict=verdict, reason=Finding.joined(differences), differences=differences, devices=devices)


def run(
    plan: GpuPlan,
    plan_summary: str,
    plan_magics: tuple[str, ...],
    start_env: Mapping[str, str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    services: bool = True,
    only: Sequence[str] = (),
) -> Report:
    """The whole report for ``plan`` (built by the face) in a process started with ``start_env``;
    ``only`` (module names) limits the frameworks started to those."""
    # The package is imported before any of its modules; its version is read, not imported (a face's).
    version = str(getattr(sys.modules.get("jupyter_gpu"), "__version__", "unknown"))
    started = time.monotonic()
    installed = installed_frameworks()
    probed = [module for module in installed if not only or module in only]
    child_env = child_environment(os.environ, start_env)
    request = request_to_json(resolved_request(plan))
    children = Probes(probed, request, child_env, timeout_s)  # they start now, the machine is read meanwhile
    try:
        machine, snapshot = read_machine(kernel_start_fence(), start_env, services=services)
        probes = children.collect()
    except BaseException:
        children.kill()
        raise
    expect = expectation(plan, snapshot.gpus, start_env)
    checks = tuple(
        check_framework(module, installed.get(module), probes.get(module), expect, machine, snapshot.gpus, child_env)
        if module in probed or module not in installed
        else FrameworkCheck(
            FRAMEWORKS[module][0],
            package=installed[module][0],
            installed=True,
            version=installed[module][1],
            verdict=NOT_CHECKED,
        )
        for module in FRAMEWORKS
    )
    return Report(
        jupyter_gpu=version,
        machine=machine,
        plan_summary=plan_summary,
        plan_magics=plan_magics,
        frameworks=checks,
        keras=keras_facts(start_env),
        elapsed_s=time.monotonic() - started,
    )
