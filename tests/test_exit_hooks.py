"""Issue 22 item 2: a kernel's claims and report go however it ends, SIGKILL apart.

Real ipykernel processes, each started by a small launcher process that is its parent (as a
Jupyter server is: ``JPY_PARENT_PID``, so ipykernel's parent poller watches it), with the
extension autoloaded and ``JUPYTER_GPU_DEFAULT_SELECT=auto:1``: the kernel claims a GPU and writes
its report at start. Then it ends by one path, and its claim and report must be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from kernels import attach
from support import UNDER_LOAD_S, ScenarioFile, as_from_a_terminal, wait_until

from jupyter_gpu import simulate
from jupyter_gpu.kernel import exit_hooks
from jupyter_gpu.sources.claims import ClaimBoard, user_folder

LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys
    kernel = subprocess.Popen(
        [sys.executable, "-m", "ipykernel_launcher", "-f", sys.argv[1]],
        env={**os.environ, "JPY_PARENT_PID": str(os.getpid())},
    )
    print(kernel.pid, flush=True)
    kernel.wait()
    """
)


@dataclass
class LaunchedKernel:
    parent: subprocess.Popen[str]
    pid: int
    connection_file: Path
    claims: Path  # this user's claims folder

    def claim_files(self) -> list[Path]:
        return sorted(self.claims.glob(f"{self.pid}-*.json")) if self.claims.exists() else []

    def report_files(self) -> list[Path]:
        return sorted(self.connection_file.parent.glob("jupyter-gpu-kernel-*.json"))

    def gone(self) -> bool:
        return not psutil.pid_exists(self.pid) or psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[LaunchedKernel]:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(2))
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text('c.InteractiveShellApp.extensions = ["jupyter_gpu"]\n')
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    os.chmod(claims_dir, 0o1777)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    connection_file = runtime / "kernel-0b5e2c9a-1d3f-4c8e-9a7b-3f2e1d0c9b8a.json"
    env = {
        **os.environ,
        "JUPYTER_GPU_SIMULATE": str(scenario.path),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "JUPYTER_GPU_DEFAULT_SELECT": "auto:1",
        "JUPYTER_GPU_CLAIMS_DIR": str(claims_dir),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(connection_file)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,  # SIGHUP must end the kernel even where the suite runs under nohup
    )
    assert parent.stdout is not None
    folder = user_folder(claims_dir, os.getuid())
    kernel = LaunchedKernel(parent, int(parent.stdout.readline()), connection_file, folder)
    try:
        wait_until(
            lambda: kernel.claim_files() and kernel.report_files(), UNDER_LOAD_S, "the kernel's claim and report"
        )
        yield kernel
    finally:
        for pid in (kernel.pid, parent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.wait(10)


def _ended_clean(kernel: LaunchedKernel) -> None:
    wait_until(kernel.gone, UNDER_LOAD_S, "the kernel to end")
    wait_until(lambda: not kernel.claim_files(), 10, "its claim to go")
    assert kernel.report_files() == []


def test_a_kernel_shut_down_removes_its_claim_and_report(launched: LaunchedKernel) -> None:
    client = attach(launched.connection_file, UNDER_LOAD_S).client
    try:
        client.shutdown()
    finally:
        client.stop_channels()
    _ended_clean(launched)


def test_a_kernel_whose_parent_dies_removes_its_claim_and_report(launched: LaunchedKernel) -> None:
    """The hub stops a user server: its kernels exit through ipykernel's parent poller (os._exit)."""
    launched.parent.kill()
    launched.parent.wait(10)
    _ended_clean(launched)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_kernel_terminated_by_a_signal_removes_its_claim_and_dies_by_it(
    launched: LaunchedKernel, signum: signal.Signals
) -> None:
    os.kill(launched.pid, signum)
    assert launched.parent.wait(UNDER_LOAD_S) is not None
    _ended_clean(launched)


def test_a_killed_kernel_leaves_a_claim_that_counts_for_nothing_and_is_tidied(launched: LaunchedKernel) -> None:
    [claim] = launched.claim_files()
    os.kill(launched.pid, signal.SIGKILL)
    launched.parent.wait(UNDER_LOAD_S)
    assert launched.claim_files() == [claim]  # SIGKILL runs nothing
    board = ClaimBoard(claim.parents[1])
    assert board.active({}) == []  # its process is gone: it counts for nothing (and is tidied)
    assert launched.claim_files() == []


def test_the_exit_status_of_a_signal_is_kept(tmp_path: Path) -> None:
    """SIGTERM's default action stays the outcome: the process dies by SIGTERM after the clean-up."""
    marker = tmp_path / "cleaned"
    code = textwrap.dedent(
        f"""
        import time
        from jupyter_gpu.kernel.exit_hooks import at_kernel_exit
        at_kernel_exit(lambda: open({str(marker)!r}, "w").close())
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == -signal.SIGTERM
    assert marker.exists()


def test_an_ignored_signal_stays_ignored_and_keeps_the_claims(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned"
    code = textwrap.dedent(
        f"""
        import signal, time
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        from jupyter_gpu.kernel.exit_hooks import at_kernel_exit
        at_kernel_exit(lambda: open({str(marker)!r}, "w").close())
        print("ready", flush=True)
        time.sleep(2)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert process.poll() is None and not marker.exists()  # still running: nothing cleaned
    assert process.wait(30) == 0 and marker.exists()  # then its normal exit cleans up


def test_callbacks_run_once_and_a_failing_one_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("boom")

    monkeypatch.setattr(exit_hooks, "_callbacks", [failing, lambda: ran.append("second")])
    exit_hooks.run_exit_callbacks()
    exit_hooks.run_exit_callbacks()
    assert ran == ["failing", "second"]
