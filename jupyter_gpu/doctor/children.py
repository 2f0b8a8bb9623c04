"""Start each framework's probe (:mod:`jupyter_gpu.doctor.probe`) in its own child process, all at
once, each in its own process group, within one time box.

A child that has not answered when the box closes is killed with its whole group (a framework that
hangs at start, a CUDA initialization that never returns) and reported as timed out; nothing is
waited for past the box. Its standard output is read as untrusted JSON (:mod:`jupyter_gpu.core.wire`):
a child that crashed, printed garbage or too much is reported with one line, never a traceback.

**Where a child imports from.** A child must import jupyter_gpu and the frameworks from the
environment the user installed, never from the folder the doctor happens to run in (``/tmp``, a
course folder, a notebook's folder in ``%gpu_doctor``), where another user may have planted a
``torch.py`` or ``jupyter_gpu.py``. So each child

- is started as ``python -c BOOTSTRAP``: the bootstrap drops the current folder Python puts first
  on ``sys.path`` for ``-c`` (added after ``site`` ran, so no ``sitecustomize`` is looked up there
  either) and then runs :mod:`jupyter_gpu.doctor.probe` with :mod:`runpy`; this is what ``-P``
  does on Python 3.11+, and works on 3.10 too;
- runs in a fresh private folder (``mkdtemp``: 0700, empty, removed afterwards), so an empty or
  relative entry of ``PYTHONPATH`` (which Python resolves against the current folder) finds
  nothing either;
- keeps ``PYTHONPATH``, the user's site-packages and ``.pth`` files: that *is* the user's installed
  environment (``pip install --user torch``, a virtual environment, an editable install of
  jupyter_gpu, the tests' worktree on ``PYTHONPATH``). ``-I`` would drop all of them, so it is not
  used: the child would then miss frameworks the user's kernels do see.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import WireError
from ..core.files import private_folder
from ..core.units import format_duration
from ..core.wire import Fields, integer, loads
from ..plan import PlanRequest

MAX_ANSWER_BYTES = 256 * 1024
STDERR_TAIL_BYTES = 64 * 1024

# ``python -c`` puts "" (the current folder) first on sys.path after site ran; drop it, then run the
# probe as ``-m`` would (argv[1:] are the probe's arguments).
BOOTSTRAP = (
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_module('jupyter_gpu.doctor.probe', run_name='__main__', alter_sys=True)\n"
)


def child_command(python: str, *args: str) -> list[str]:
    """The command line of a probe child: :data:`BOOTSTRAP` (no current folder on ``sys.path``)."""
    return [python, "-c", BOOTSTRAP, *args]


def request_to_json(request: PlanRequest) -> str:
    """The plan's request as the child's argument (the fields of :class:`PlanRequest`)."""
    return json.dumps({name: getattr(request, name) for name in PlanRequest.__dataclass_fields__})


@dataclass(frozen=True)
class ProbeDevice:
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total: int | None = None
    limits: tuple[int, ...] | None = None
    fraction: float | None = None


@dataclass(frozen=True)
class ProbeResult:
    """What one child said (or why it said nothing: ``failure``)."""

    framework: str
    elapsed_s: float
    failure: str | None = None
    version: str | None = None
    gpu_build: bool | None = None
    cuda: str | None = None
    cudnn: str | None = None
    growth: bool | None = None
    error: str | None = None
    plan_error: str | None = None
    cuda_device_order: str | None = None
    devices: tuple[ProbeDevice, ...] = ()
    stderr: str = field(default="", repr=False)


def parse_answer(framework: str, raw: bytes, elapsed_s: float, stderr: str = "") -> ProbeResult:
    """The child's JSON line, checked field by field; a :class:`ProbeResult` with ``failure`` if bad."""
    try:
        lines = raw.strip().splitlines()
        data = Fields(loads(lines[-1] if lines else b"", max_bytes=MAX_ANSWER_BYTES, max_depth=6))
        devices = tuple(
            ProbeDevice(
                name=device.text("name", 256, min_chars=0),
                uuid=device.optional_text("uuid", 128),
                pci_bus_id=device.optional_text("pci_bus_id", 64),
                memory_total=device.optional_integer("memory_total", 0, 2**62),
                limits=_limits(device),
                fraction=device.optional_number("fraction", 0, 1),
            )
            for device in data.objects("devices", 256, default=[])
        )
        build = data.raw("gpu_build", None)
        growth = data.raw("growth", None)
        return ProbeResult(
            framework=framework,
            elapsed_s=elapsed_s,
            version=data.optional_text("version", 64),
            gpu_build=build if isinstance(build, bool) else None,
            cuda=_version_text(data.raw("cuda", None)),
            cudnn=_version_text(data.raw("cudnn", None)),
            growth=growth if isinstance(growth, bool) else None,
            error=data.optional_text("error", 600),
            plan_error=data.optional_text("plan_error", 600),
            cuda_device_order=data.optional_text("cuda_device_order", 64),
            devices=devices,
            stderr=stderr,
        )
    except WireError as error:
        return ProbeResult(framework, elapsed_s, failure=f"its answer could not be read ({error})", stderr=stderr)


def _limits(device: Fields) -> tuple[int, ...] | None:
    if device.raw("limits", None) is None:
        return None
    where = device.path("limits")
    return tuple(integer(value, f"{where}[{k}]", 0, 2**62) for k, value in enumerate(device.items("limits", 64)))


def _version_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        return str(value)[:32]
    return None


def _tail(text: bytes) -> str:
    return text[-STDERR_TAIL_BYTES:].decode(errors="replace")


def _wait(framework: str, process: subprocess.Popen[bytes], deadline: float, started: float) -> ProbeResult:
    """The answer of one started child, waiting at most until ``deadline``."""
    try:
        out, err = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(process)
        out, err = process.communicate()
        elapsed = time.monotonic() - started
        return ProbeResult(
            framework,
            elapsed,
            failure=f"did not finish starting within {format_duration(deadline - started)}: killed (it hangs at start)",
            stderr=_tail(err),
        )
    finally:
        _kill_group(process)  # anything the child left running in its group
    elapsed = time.monotonic() - started
    if process.returncode != 0:
        last = _tail(err).strip().splitlines()[-1:] or [""]
        return ProbeResult(
            framework,
            elapsed,
            failure=f"its child process exited with status {process.returncode}: {last[0][:300]}",
            stderr=_tail(err),
        )
    return parse_answer(framework, out, elapsed, _tail(err))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Probes:
    """The children, started at once when this is made; :meth:`collect` their answers.

    Each child is the leader of its own process group (a new session), so a timeout kills what it
    started too; so does an interrupt of the parent (Ctrl-C), which the children, outside the
    terminal's foreground group, would not get themselves.
    """

    def __init__(
        self,
        frameworks: Sequence[str],
        request_json: str,
        env: Mapping[str, str],
        timeout_s: float,
        python: str = sys.executable,
    ) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.failures: dict[str, ProbeResult] = {}
        self.folder: str | None = None
        try:
            cwd = self.folder = private_folder("jupyter-gpu-doctor-")
            for name in frameworks:
                try:
                    self.processes[name] = subprocess.Popen(
                        child_command(python, name, request_json),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=dict(env),
                        cwd=cwd or "/",
                        start_new_session=True,
                    )
                except OSError as error:
                    self.failures[name] = ProbeResult(name, 0.0, failure=f"its child process could not start: {error}")
        except BaseException:
            self.kill()
            raise

    def collect(self) -> dict[str, ProbeResult]:
        """Every child's answer, or why there is none; nothing outlives the time box or an interrupt."""
        answers = dict(self.failures)
        if not self.processes:
            self._remove_folder()
            return answers
        pool = ThreadPoolExecutor(max_workers=len(self.processes))
        try:
            futures = {
                name: pool.submit(_wait, name, process, self.deadline, self.started)
                for name, process in self.processes.items()
            }
            answers.update({name: future.result() for name, future in futures.items()})
            return answers
        except BaseException:
            self.kill()
            raise
        finally:
            pool.shutdown(wait=True)
            self._remove_folder()

    def kill(self) -> None:
        for process in self.processes.values():
            _kill_group(process)
        self._remove_folder()

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def run_probes(
    frameworks: Sequence[str],
    request_json: str,
    env: Mapping[str, str],
    timeout_s: float,
    python: str = sys.executable,
) -> dict[str, ProbeResult]:
    """Probe every framework in ``frameworks`` at once; each answer, or why there is none."""
    return Probes(frameworks, request_json, env, timeout_s, python).collect()
