"""Fixtures shared by the test modules: simulated GPUs beneath nvidia-ml-py, per test; the magics in
this process's IPython shell (``clean``, ``shell``); and the cleanups a server or hub test module asks
for on every test (``stop_sampler_after_test``, ``stop_started``).

Test modules never import from each other: helpers live in support modules by topic (``support``,
``plan_state``, ``kernels``, ``live_processes``, ``hub_fake``, ``hub_service``, ``prometheus_fake``),
fixtures here; ``markers`` sets the quick loop's markers at collection.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support import ScenarioFile

from jupyter_gpu import simulate

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

# pytest keeps the test modules it rewrites (for its assert messages) in __pycache__, unless bytecode
# is not to be written: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) each
# worker rewrote all 250 modules again at every run, half its collection (16 s -> 7 s;
# benchmarks/README.md, "The quick loop"). This process only: its kernels and servers still see the
# variable.
sys.dont_write_bytecode = False

# The servers, hubs and kernels the tests start must stop on the signals their real parents send
# (JupyterHub stops services and user servers with SIGINT; a Jupyter server stops its kernels' work
# with it), and a child inherits an ignored signal. A suite started as a background job of a script
# (``cmd &`` without job control: SIGINT and SIGQUIT ignored; CI runners do this) passed that on to
# all of them: each SIGINT stop then waited out its timeout (a hub's teardown 36-54 s, a server's
# SIGINT test 30 s; benchmarks/README.md, stop 41). Undone here, in this process and each worker, so
# every child starts with them at their defaults. SIGHUP stays as it is: ignoring it is nohup's.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _no_ambient_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts on real NVML unless it asks for simulated GPUs (the fixtures below).

    A simulation an earlier test installed in this process is removed too: its scenario's PIDs
    would otherwise still name the owners of real processes that happen to get those PIDs (PIDs wrap
    at 32,768 here, and the PID-reuse tests choose PIDs on purpose).

    So is the process's shared NVML reader (``nvml.default_reader()``, what ``jupyter-gpu status``
    and the magics read through): its process directory keeps who a PID is for a minute, and a
    simulated PID has no start time to tell one scenario's process from the next, so an earlier
    test's owner of PID 910001 would still be shown in the next test's scenario."""
    monkeypatch.delenv(simulate.ENV_VAR, raising=False)
    simulate.uninstall()
    nvml = sys.modules.get("jupyter_gpu.sources.nvml")  # not imported for every test
    if nvml is not None:
        monkeypatch.setattr(nvml, "_default_reader", None)


@pytest.fixture(autouse=True)
def _english_unless_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every face speaks English in a test (and in the kernels, servers and commands it starts),
    whatever this machine's LANG or JupyterLab setting says; a test of another language sets
    ``JUPYTER_GPU_LANG`` or deletes it and sets ``LANG`` (docs/i18n.md). JupyterLab's settings folder
    is the test's own, so a test that chooses a language in Lab leaves none behind."""
    from jupyter_gpu.core import i18n

    monkeypatch.setenv(i18n.ENV, "en")
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(tmp_path / "lab-user-settings"))
    i18n.set_language(None)


@pytest.fixture(autouse=True)
def _private_gpu_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU claims (``auto``) go to a folder of this test: simulated GPUs have the same UUIDs in every
    test, and a claim left by another test process (or another engineer's run) must not steer ``auto``."""
    folder = tmp_path / "gpu-claims"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(folder))


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScenarioFile]:
    """Two idle simulated A100s, in a file this test may rewrite; child processes see it too."""
    file = ScenarioFile(tmp_path / "scenario.json", simulate.plausible_gpus(2))
    monkeypatch.setenv(simulate.ENV_VAR, str(file.path))
    yield file


@pytest.fixture
def demo_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 'demo' shared server standing still ('demo-still'): 4 GPUs of 2 models, other users'
    processes, one busy GPU, with the same figures at every read."""
    monkeypatch.setenv(simulate.ENV_VAR, simulate.DEMO_STILL)


# -- the magics in this process's IPython shell (plan_state.py holds what they change)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, scenario: Any) -> Iterator[Any]:
    """No plan, no managed variable, no hook; the frameworks not imported; 2 simulated A100s."""
    from plan_state import MANAGED, reset_plan_state  # not for every test: it imports the frameworks module

    from jupyter_gpu import plan
    from jupyter_gpu.plan import Fence, fence

    saved = {name: os.environ.pop(name, None) for name in MANAGED}
    monkeypatch.setattr(fence, "_KERNEL_START_FENCE", Fence({}))  # where kernel_start_fence() reads it
    # The admin's values come from the environment the process started with: here, os.environ.
    monkeypatch.setattr(plan, "environment_at_process_start", lambda: dict(os.environ))
    for name in ("tensorflow", "torch", "jax"):
        if name in sys.modules:
            pytest.skip(f"{name} is imported in this test process")
    reset_plan_state()
    yield scenario
    reset_plan_state()
    for name, value in saved.items():  # what the magics wrote must not leak into later tests or kernels
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def shell(clean: Any) -> Iterator[InteractiveShell]:
    """IPython's shell of this process with the magics registered, on :func:`clean`."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel import magics

    ip = InteractiveShell.instance()
    magics.register(ip)
    yield ip
    magics.unregister(ip)


# -- tests against a real Jupyter Server (pytest-jupyter's fixtures are star-imported by those modules)


@pytest.fixture
def stop_sampler_after_test(jp_serverapp: Any) -> Iterator[None]:
    """Stop each test's sampler at once, so lingering threads never add NVML calls to the next test.
    A server test module uses it for every test: ``pytestmark = pytest.mark.usefixtures(...)``."""
    from jupyter_gpu.server import GpuService  # not for every test

    yield
    service = jp_serverapp.web_app.settings.get(GpuService.SETTINGS_KEY)
    if service is not None:
        service.close()


# -- the hub service (hub_service.py starts it against the stand-in hub API of hub_fake.py)


@pytest.fixture
def stop_started() -> Iterator[None]:
    """Closes every ``hub_service.start()`` of the test, passed or failed: a test leaves no hub thread,
    sampler, parser thread or listening socket behind. A hub test module uses it for every test:
    ``pytestmark = pytest.mark.usefixtures("stop_started")``."""
    yield
    from hub_service import stop_started_services  # not for every test: it imports the hub service

    stop_started_services()


@pytest.fixture(scope="session")
def neighbour() -> Iterator[Any]:
    """Another ordinary user of this host (``neighbours.Neighbour``): ``neighbour.run(fn, *args)`` runs
    ``fn`` as them. Skipped, with the reason, where the tests cannot create one (not root)."""
    import neighbours

    reason = neighbours.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    # One account per test process: parallel workers (pytest-xdist), and other runs on the same host,
    # each create and remove their own, so none removes the account another is still using.
    with neighbours.neighbour_account(f"{neighbours.NAME}-{os.getpid()}") as account:
        yield account


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A fresh world-writable sticky folder (mode 1777, like ``/tmp``) that every local user can
    reach: pytest's own ``tmp_path`` lies under a 0700 folder no neighbour can enter."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="jgpu-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- beside a running Jupyter server of this user (sources/host.py: the host sample)


@pytest.fixture
def live_server(tmp_path: Path, scenario: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real Jupyter server of this user (``live_processes.LiveServer``, hub user "alice") with
    jupyter_gpu on the scenario's GPUs, sampling every 0.25 s; this test's terminal finds it through
    its runtime files (``JUPYTER_RUNTIME_DIR``), as a shell would. Every process counts its NVML
    calls in ``tmp_path / "nvml-calls"`` (``simulate.counters``)."""
    from live_processes import LiveServer, stop

    calls = tmp_path / "nvml-calls"
    calls.mkdir()
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE_CALLS_DIR", str(calls))
    server = LiveServer(tmp_path / "server", "alice", "alice-token", {"interval_s": 0.25, "linger_s": 30})
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "server" / "runtime"))
    try:
        yield server
    finally:
        stop(server.process)


# -- markers for the quick loop (markers.py decides which)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``browser``, ``hub`` and ``slow`` by folder, file name and helper (``markers.apply``)."""
    import markers

    markers.apply(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collecting must import no framework: the tests that need them unimported (the ``clean``
    fixture) would all skip, silently. A module-level ``pytest.importorskip("torch")`` did that."""
    imported = [name for name in ("tensorflow", "torch", "jax") if name in sys.modules]
    if imported:
        raise pytest.UsageError(
            f"collecting the tests imported {', '.join(imported)}: ask with importlib.util.find_spec instead"
        )
