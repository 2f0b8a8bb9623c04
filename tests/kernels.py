"""Driving real kernels (jupyter_client + ipykernel) from tests: start one, run code, read values.

Importable as ``kernels`` (pytest puts tests/ on sys.path). :func:`start` runs :data:`ENV` in each
kernel first, so tests can call ``env()`` and ``state()`` there.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from support import UNDER_LOAD_S, kernel_manager

# The CUDA stand-in (tests/standin/cuda_standin.py), imported by the kernels of standin_kernel.
STANDIN = Path(__file__).parent / "standin"

ENV = (
    "import json, os\n"
    "def env():\n"
    "    keys = ['CUDA_DEVICE_ORDER', 'CUDA_VISIBLE_DEVICES', 'TF_FORCE_GPU_ALLOW_GROWTH',\n"
    "            'XLA_CLIENT_MEM_FRACTION', 'XLA_PYTHON_CLIENT_PREALLOCATE', 'PYTORCH_CUDA_ALLOC_CONF',\n"
    "            'TF_NUM_INTRAOP_THREADS']\n"
    "    return {k: os.environ.get(k) for k in keys}\n"
    "def state():\n"
    "    from jupyter_gpu import plan, frameworks\n"
    "    from jupyter_gpu.core import import_hooks as _import_hooks\n"
    "    hooks = {f.module_name: len(_import_hooks.pending(f.module_name)) for f in frameworks.FRAMEWORKS}\n"
    "    return repr((plan.current_plan(), env(), hooks))\n"
)


class Kernel:
    def __init__(self, client: BlockingKernelClient) -> None:
        self.client = client
        self.displayed: list[dict[str, Any]] = []  # the display_data bundles of the last run

    def run(self, code: str, timeout: float = UNDER_LOAD_S) -> tuple[str, str]:
        """Run ``code``; return (stdout, stderr); its displays are kept in :attr:`displayed`."""
        out: list[str] = []
        err: list[str] = []
        self.displayed = []
        msg_id = execute_drained(self.client, code)
        for message in iopub_until_idle(self.client, msg_id, timeout):
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                (out if content["name"] == "stdout" else err).append(content["text"])
            elif kind == "display_data":
                self.displayed.append(content["data"])
            elif kind == "error":
                err.append(f"{content['ename']}: {content['evalue']}")
        self.client.get_shell_msg(timeout=10)
        return "".join(out), "".join(err)

    def read(self, code: str, timeout: float = UNDER_LOAD_S) -> str:
        """Run ``code``; return everything a user reads under the cell, as a frontend without
        extensions shows it: stdout, stderr and the error, then each display's ``text/plain`` (the
        out-of-memory report is displayed, not printed). :attr:`displayed` keeps the bundles."""
        out, err = self.run(code, timeout)
        return "\n".join([out, err, *(str(shown.get("text/plain", "")) for shown in self.displayed)])

    def value(self, expression: str) -> Any:
        out, err = self.run(f"print(json.dumps({expression}))")
        assert out, err
        return json.loads(out.strip().splitlines()[-1])


def execute_drained(client: BlockingKernelClient, code: str) -> str:
    """Send ``code`` for execution and return its msg_id, after reading away the IOPub messages
    waiting since the last cell (a panel's updates). A subscriber that does not read drops what
    arrives once its queue holds ZMQ's high-water mark (1,000 messages): a panel updating between
    two cells could fill it, and the new cell's own output and idle status would be dropped."""
    while True:
        try:
            client.get_iopub_msg(timeout=0)
        except queue.Empty:
            break
    return client.execute(code)


def iopub_until_idle(client: BlockingKernelClient, msg_id: str, timeout: float) -> list[dict[str, Any]]:
    """Every IOPub message read until the request ``msg_id`` is idle (others' too, in order).

    Fails after ``timeout`` seconds in all, also while other messages keep coming (a panel updating
    every second would otherwise keep a lost idle status waiting for ever, past any deadline)."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"no idle status of {msg_id} within {timeout} s; read {[m['msg_type'] for m in messages][-20:]}"
            )
        try:
            message = client.get_iopub_msg(timeout=left)
        except queue.Empty:
            continue
        messages.append(message)
        if (
            message["parent_header"].get("msg_id") == msg_id
            and message["msg_type"] == "status"
            and message["content"]["execution_state"] == "idle"
        ):
            return messages


def start(env: dict[str, str] | None = None, connection_dir: Path | None = None) -> Iterator[Kernel]:
    """A real kernel with ``env`` added to this process's environment.

    Its connection file, and so the kernel report jupyter_gpu writes next to it, lies in
    ``connection_dir`` (a Jupyter runtime directory of the test), else in a temporary folder removed
    afterwards. Not in jupyter_client's default, the system's /tmp: the kernel is killed at the end,
    so its report stays, and every later kernel that reads reports from its folder (the OOM
    explainer) would read thousands of them, other test runs' too.
    """
    kernel_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="jupyter-gpu-kernel-test-") as scratch:
        folder = connection_dir or Path(scratch)
        manager = kernel_manager(folder)
        manager.start_kernel(env=kernel_env)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=UNDER_LOAD_S)
            kernel = Kernel(client)
            kernel.run(ENV)
            yield kernel
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


def standin_kernel(tmp_path: Path, env: dict[str, str] | None = None) -> Iterator[Kernel]:
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    code = f"import sys\nsys.path.insert(0, {str(STANDIN)!r})\nimport cuda_standin\n"
    (startup / "00-cuda-standin.py").write_text(code)
    yield from start({"IPYTHONDIR": str(tmp_path / "ipython"), "JUPYTER_GPU_SIMULATE": "demo-still", **(env or {})})


def attach(connection_file: Path, timeout_s: float = 120) -> Kernel:
    """A client of a kernel someone else started (a Jupyter server's, by its connection file).

    ``wait_for_ready`` is asked again when it reports the kernel dead: on a loaded host the
    heartbeat can miss its one-second deadline while the kernel is merely starting."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.wait_for_ready(timeout=max(1.0, deadline - time.monotonic()))
            return Kernel(client)
        except RuntimeError:
            if time.monotonic() >= deadline:
                client.stop_channels()
                raise
            time.sleep(1.0)
