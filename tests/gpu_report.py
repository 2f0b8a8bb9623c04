"""The GPU check's report: ``gpu-report.json`` and ``gpu-report.md`` (scripts/gpu-check.sh, docs/real-gpu.md).

A pytest plugin (``-p gpu_report --gpu-report DIR``; importable as ``gpu_report``: pytest puts tests/
on sys.path). Every test of ``tests/gpu/`` is one check, named after its function without ``test_``.
A check adds what it saw through the ``check`` fixture (tests/gpu/conftest.py): ``check.detail(text)``
and ``check.figure(name, value)``; they travel in the test report's ``user_properties``.

The report is rewritten (atomically) after every check, so a run cut off by its time box still leaves
the checks it finished. The JSON shape (issue 29)::

    {"machine": {"mode": "real"|"simulated", "date": str, "gpus": [{"index", "name", "uuid",
                 "memory_total"}], "driver": str|null, "cuda": str|null, "python": str,
                 "packages": {name: version|null}, "elapsed_s": float, "complete": bool},
     "checks": [{"name": str, "outcome": "passed"|"failed"|"skipped", "detail": str,
                 "figures": {name: number|str}}]}
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu.core.text import display_text

# The packages whose versions a run records (None: not installed there).
PACKAGES = (
    "jupyter_gpu",
    "torch",
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "jax-cuda12-plugin",
    "cupy-cuda13x",
    "cupy-cuda12x",
    "tensorflow",
    "nvidia-ml-py",
    "ipykernel",
    "jupyter_client",
    "jupyter_server",
    "pytest",
)
DETAIL_CHARS = 600  # one check's detail in the report: enough for an assertion's message


def package_versions() -> dict[str, str | None]:
    """The installed version of each of :data:`PACKAGES` (from metadata: nothing is imported)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_facts(mode: str) -> dict[str, Any]:
    """GPUs, driver, CUDA and package versions, read once through jupyter_gpu's NVML reader.

    Never raises: a machine whose NVML cannot be read is reported with no GPU and the error."""
    facts: dict[str, Any] = {
        "mode": mode,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpus": [],
        "driver": None,
        "cuda": None,
        "nvml_error": None,
        "python": platform.python_version(),
        "packages": package_versions(),
    }
    try:
        from jupyter_gpu.sources import nvml

        snap = nvml.snapshot()
        facts["driver"] = snap.driver_version
        facts["cuda"] = nvml.driver_facts().cuda_driver_version
        facts["nvml_error"] = snap.error
        facts["gpus"] = [
            {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "memory_total": gpu.memory_total}
            for gpu in snap.gpus
        ]
    except Exception as error:  # the report must be written whatever NVML does
        facts["nvml_error"] = f"{type(error).__name__}: {error}"
    return facts


def check_name(nodeid: str) -> str:
    """``tests/gpu/test_nvml.py::test_snapshot_vs_nvidia_smi[x]`` -> ``snapshot_vs_nvidia_smi[x]``."""
    return nodeid.rsplit("::", 1)[-1].removeprefix("test_")


def one_line(text: str) -> str:
    """A detail as one sanitized line of at most :data:`DETAIL_CHARS` characters."""
    return display_text(" ".join(str(text).split()), max_chars=DETAIL_CHARS, missing="")


def failure_detail(report: pytest.TestReport) -> str:
    """The failure's own message (an assertion's text, an exception's line), not the traceback."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:  # its first line: pytest's own explanation of an assert follows it
        return one_line(crash.message.strip().splitlines()[0] if crash.message.strip() else "failed")
    return one_line(str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed")


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return one_line(str(longrepr[2]).removeprefix("Skipped: "))
    return one_line(str(longrepr))


class Recorder:
    """Collects one record per check from the test reports and writes both files after each."""

    def __init__(self, folder: Path, mode: str) -> None:
        self.folder = folder
        self.mode = mode
        self.started = time.monotonic()
        self.machine: dict[str, Any] | None = None
        self.checks: dict[str, dict[str, Any]] = {}

    def add(self, report: pytest.TestReport) -> None:
        if "tests/gpu/" not in report.nodeid.replace(os.sep, "/"):
            return
        name = check_name(report.nodeid)
        record = self.checks.setdefault(name, {"name": name, "outcome": "passed", "detail": "", "figures": {}})
        for key, value in report.user_properties:
            if key == "figure":
                figure, number = value
                record["figures"][figure] = number
            elif key == "detail" and record["outcome"] == "passed":
                record["detail"] = one_line(value)
        if report.skipped and record["outcome"] != "failed":
            record["outcome"], record["detail"] = "skipped", skip_reason(report)
        elif report.failed:
            what = failure_detail(report)
            record["outcome"] = "failed"
            record["detail"] = what if report.when == "call" else f"{report.when}: {what}"
        self.write(complete=False)

    def document(self, complete: bool) -> dict[str, Any]:
        if self.machine is None:
            self.machine = machine_facts(self.mode)
        machine = {**self.machine, "elapsed_s": round(time.monotonic() - self.started, 1), "complete": complete}
        return {"machine": machine, "checks": list(self.checks.values())}

    def write(self, complete: bool) -> None:
        document = self.document(complete)
        self.folder.mkdir(parents=True, exist_ok=True)
        _replace(self.folder / "gpu-report.json", json.dumps(document, indent=1) + "\n")
        _replace(self.folder / "gpu-report.md", markdown(document))


def _replace(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def _cell(value: object) -> str:
    return display_text(value, missing="").replace("|", "\\|")


def _figure(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown(document: dict[str, Any]) -> str:
    """The report as a page a person reads: the machine, then one table row per check."""
    machine = document["machine"]
    checks = document["checks"]
    gpus = ", ".join(f"GPU {g['index']} {g['name']}" for g in machine["gpus"]) or "none read"
    packages = ", ".join(f"{name} {version}" for name, version in machine["packages"].items() if version)
    counts = {outcome: sum(c["outcome"] == outcome for c in checks) for outcome in ("passed", "failed", "skipped")}
    title = "SIMULATED GPUs (no real driver)" if machine["mode"] == "simulated" else "real GPU"
    lines = [
        f"# jupyter_gpu GPU check: {title}",
        "",
        f"- date: {_cell(machine['date'])}; elapsed {machine['elapsed_s']} s"
        + ("" if machine["complete"] else " (INCOMPLETE: the run was cut off or is still running)"),
        f"- GPUs: {_cell(gpus)}",
        f"- driver {_cell(machine['driver'] or 'n/a')}, CUDA {_cell(machine['cuda'] or 'n/a')}, "
        f"Python {_cell(machine['python'])}",
        f"- packages: {_cell(packages)}",
        f"- outcome: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped",
    ]
    if machine.get("nvml_error"):
        lines.append(f"- NVML: {_cell(machine['nvml_error'])}")
    lines += ["", "| check | outcome | detail | figures |", "| --- | --- | --- | --- |"]
    for check in checks:
        figures = "; ".join(f"{name} = {_figure(value)}" for name, value in check["figures"].items())
        lines.append(f"| {_cell(check['name'])} | {check['outcome']} | {_cell(check['detail'])} | {_cell(figures)} |")
    return "\n".join(lines) + "\n"


# -- the plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu-report", metavar="DIR", help="write gpu-report.json and gpu-report.md there")


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("--gpu-report")
    if folder:
        mode = "simulated" if os.environ.get("JUPYTER_GPU_CHECK_MODE") == "simulated" else "real"
        config.stash[_RECORDER] = Recorder(Path(folder), mode)


_RECORDER = pytest.StashKey[Recorder]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    recorder = _recorder_of(report)
    if recorder is not None:
        recorder.add(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.stash.get(_RECORDER, None)
    if recorder is not None:  # 0 all passed, 1 some failed, 5 none collected; 2 interrupted (the time box)
        recorder.write(complete=int(exitstatus) in (0, 1, 5))


_CONFIG: list[pytest.Config] = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[:] = [session.config]
    recorder = session.config.stash.get(_RECORDER, None)
    if recorder is not None:
        recorder.machine = machine_facts(recorder.mode)


def _recorder_of(report: pytest.TestReport) -> Recorder | None:
    return _CONFIG[0].stash.get(_RECORDER, None) if _CONFIG else None
