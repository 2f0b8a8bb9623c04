"""Helpers for tests that run real servers as subprocesses (Jupyter servers, Prometheus).

Importable as ``live_processes`` (pytest puts tests/ on sys.path). Processes are started with
``start_new_session=True`` so that :func:`stop` ends each one with everything it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from support import UNDER_LOAD_S

PROMETHEUS = shutil.which("prometheus")  # Debian's, for the tests with a real Prometheus


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, token: str | None = None, timeout: float = 5) -> Any:
    """``GET url`` as JSON, with a Jupyter token when given."""
    headers = {"Authorization": f"token {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        return json.loads(response.read())


def wait_for(
    what: str, check: Any, timeout: float, process: subprocess.Popen | None = None, log: Path | None = None
) -> Any:
    """Poll ``check()`` until it returns something truthy; fail early (with the log's tail) when
    ``process`` exits, and after ``timeout`` seconds with the last answer or error."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(
                f"{what}: the process exited ({process.returncode}); log: {log.read_text()[-3000:] if log else ''}"
            )
        try:
            last = check()
            if last:
                return last
        except (OSError, ValueError) as error:
            last = error
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout} s; last: {str(last)[:3000]}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process's session (it and its kernels), SIGKILL after 20 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def kernel_child(server_pid: int) -> int:
    """The PID of the server's ipykernel child (servers also start helpers, e.g. npm, now and then)."""

    def find() -> int | None:
        for child in psutil.Process(server_pid).children():
            try:
                if any("ipykernel" in part for part in child.cmdline()):
                    return child.pid
            except psutil.Error:
                continue
        return None

    return wait_for("the kernel process", find, 30)


def start_prometheus(config: Path, folder: Path) -> tuple[subprocess.Popen, str, Path]:
    """A real Prometheus with ``config`` on a free loopback port, its data and log in ``folder``:
    the process (end it with :func:`stop`), its URL and its log."""
    assert PROMETHEUS is not None, "prometheus is not installed (Debian: apt-get install prometheus)"
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}", log


class LiveServer:
    """A real ``jupyter server`` with jupyter_gpu enabled for one hub user, in its own session.

    Its config (``gpu_config``: the ``JupyterGpuServer`` traits), runtime and root folders are under
    ``base``; ``JUPYTERHUB_USER`` is ``user``, ``env`` adds to the environment and ``args`` to the
    command line. Waits until it
    answers unless ``wait_s`` is None (then call :meth:`wait`); end it with :meth:`stop`.
    """

    def __init__(
        self,
        base: Path,
        user: str,
        token: str,
        gpu_config: dict[str, Any],
        env: dict[str, str] | None = None,
        base_url: str = "/",
        wait_s: float | None = UNDER_LOAD_S,
        args: tuple[str, ...] = (),
    ) -> None:
        self.user, self.token, self.port, self.base_url = user, token, free_port(), base_url
        self.url = f"http://127.0.0.1:{self.port}{base_url}"
        for folder in ("root", "runtime", "config"):
            (base / folder).mkdir(parents=True, exist_ok=True)
        (base / "config" / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}}, "JupyterGpuServer": gpu_config})
        )
        full_env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTERHUB_USER": user,
            **(env or {}),
        }
        self.log = base / "server.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "jupyter_server",
                    "--no-browser",
                    "--allow-root",
                    "--ServerApp.ip=127.0.0.1",
                    f"--ServerApp.port={self.port}",
                    "--ServerApp.port_retries=0",
                    f"--ServerApp.base_url={base_url}",
                    f"--IdentityProvider.token={token}",
                    f"--ServerApp.root_dir={base / 'root'}",
                    *args,
                ],
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait_s is not None:
            self.wait(wait_s)

    def wait(self, timeout: float = UNDER_LOAD_S) -> None:
        """Until the server answers ``api/status`` (fails early, with its log, if it exits)."""
        wait_for(
            f"{self.user}'s server",
            lambda: get_json(self.url + "api/status", self.token),
            timeout,
            self.process,
            self.log,
        )

    def start_kernel(self) -> int:
        """Start a notebook session (``<user>.ipynb``); return the kernel's PID (the server's child)."""
        data = json.dumps({"path": f"{self.user}.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
        request = urllib.request.Request(
            self.url + "api/sessions",
            data=data.encode(),
            method="POST",
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=60):
            pass
        return kernel_child(self.process.pid)

    def stop(self) -> None:
        stop(self.process)
