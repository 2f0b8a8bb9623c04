"""Helpers shared by the test modules (importable as ``support``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_gpu import simulate


class ScenarioFile:
    """A scenario file that JUPYTER_GPU_SIMULATE points at; rewrite it while kernels and servers run."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.write(data)

    def write(self, data: dict[str, Any]) -> None:
        self.data = copy.deepcopy(data)
        simulate.write_scenario(self.path, self.data)

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to a copy of the scenario and write it (atomically)."""
        data = copy.deepcopy(self.data)
        change(data)
        self.write(data)


UNDER_LOAD_S = 120.0
"""The deadline of one wait for something that is slow only on a loaded machine (a kernel or server
starting, a service's first sample, a process ending after a signal): generous, so the suite passes
beside other work (two CPU hogs on two cores), and still bounded, so a real hang fails the test."""


def flat(text: str) -> str:
    """``text`` with every run of whitespace (a wrapped line's break and indent included) one space:
    what a check searches when the text it looks for may be wrapped (``core.text.wrap``)."""
    return " ".join(text.split())


POLL_BACKOFF = 1.5
"""How much longer each gap between two polls of :func:`wait_until` is than the one before."""

MAX_POLL_INTERVAL_S = 0.25
"""The longest gap between two polls of :func:`wait_until` (unless its ``interval_s`` is longer)."""


def wait_until(
    condition: Callable[[], Any], timeout_s: float = UNDER_LOAD_S, what: str = "condition", interval_s: float = 0.02
) -> Any:
    """Poll ``condition`` until it returns something truthy and return that; fail after ``timeout_s``
    (by default :data:`UNDER_LOAD_S`: it returns at the event, so a long deadline costs nothing
    while the thing awaited comes, and holds where it comes late on a loaded machine).

    The first gap is ``interval_s``; each next one is :data:`POLL_BACKOFF` times longer, up to
    :data:`MAX_POLL_INTERVAL_S`. So what comes at once is seen at once, and a long wait (a cull, an
    idle threshold, a server starting) costs four polls a second, not fifty: a poll that reads a
    page or asks a server costs CPU there too, and at 50 Hz that was a fifth of a core for as long
    as the wait lasted (benchmarks/README.md, "A test's polling")."""
    deadline = time.monotonic() + timeout_s
    gap = interval_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(gap)
        gap = min(gap * POLL_BACKOFF, max(interval_s, MAX_POLL_INTERVAL_S))


# Run by a fresh, single-threaded interpreter: clone3(2) with set_tid asks the kernel for exactly
# that PID (EEXIST when a process has it), and CLONE_PARENT makes the new process a child of the
# test process itself (the helper exits at once). Unlike writing ns_last_pid and forking, which any
# other fork on the host (another xdist worker, another engineer's run) may overtake, nothing races.
_CLONE_AT_PID = r"""
import ctypes, os, sys
answer, pid, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
libc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL: the child must not wait for it after the clone
libc.syscall.restype = ctypes.c_long
set_tid = (ctypes.c_int * 1)(pid)
# struct clone_args: flags (CLONE_PARENT), pidfd, child_tid, parent_tid, exit_signal (0: the
# parent's own, as CLONE_PARENT requires), stack, stack_size, tls, set_tid, set_tid_size, cgroup
args = (ctypes.c_uint64 * 11)(0x8000, 0, 0, 0, 0, 0, 0, 0, ctypes.addressof(set_tid), 1, 0)
child = libc.syscall(ctypes.c_long(435), ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))  # clone3
if child == 0:
    try:
        os.close(answer)  # the test reads the answer to its end: the new process must not hold it open
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
os.write(answer, str(child if child > 0 else -ctypes.get_errno()).encode())
"""


class ChildAtPid:
    """A child of this process started by :func:`spawn_at_pid`: ``kill()`` and ``wait()`` as a Popen's."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def kill(self) -> None:
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self) -> int | None:
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else already
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn_at_pid(pid: int, argv: list[str]) -> ChildAtPid | None:
    """Start ``argv`` as process number ``pid`` (a recycled PID) and a child of this process.

    The kernel gives that PID or refuses (clone3's ``set_tid``: Linux 5.5+, root in the PID
    namespace): None then, and the caller skips the test. It may return before ``argv`` is exec'd.
    """
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    try:
        helper = subprocess.Popen(
            [sys.executable, "-c", _CLONE_AT_PID, str(write_end), str(pid), *argv], pass_fds=[write_end]
        )
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as answer_file:
            read_end = -1
            answer = answer_file.read().decode().strip()
        helper.wait(timeout=60)
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    if helper.returncode != 0 or answer != str(pid):
        return None
    return ChildAtPid(pid)


A100_MIG_UUIDS = (
    "MIG-3c1b2f9a-7d4e-5a61-9b0c-1e2f3a4b5c6d",
    "MIG-4d2c3e0b-8e5f-5b72-8c1d-2f3a4b5c6d7e",
    "MIG-5e3d4f1c-9f60-5c83-9d2e-3a4b5c6d7e8f",
)


def a100_mig_scenario() -> dict[str, Any]:
    """An A100-80GB in MIG mode (3g.40gb + 2g.20gb + 1g.10gb) next to a whole A100: the issue's scenario.

    Other users run on the 3g.40gb slice (bob) and the 1g.10gb slice (carol); the 2g.20gb slice is free.
    """
    return {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "temperature": 44,
                "power_w": 150,
                "power_limit_w": 400,
                "mig_slices": [
                    {
                        "profile": "3g.40gb",
                        "uuid": A100_MIG_UUIDS[0],
                        "gpu_instance_id": 2,
                        "compute_instance_id": 0,
                        "memory_total_mib": 40192,
                        "processes": [{"pid": 4100001, "memory_mib": 30000, "user": "bob", "name": "python"}],
                    },
                    {
                        "profile": "2g.20gb",
                        "uuid": A100_MIG_UUIDS[1],
                        "gpu_instance_id": 3,
                        "compute_instance_id": 0,
                        "memory_total_mib": 19968,
                    },
                    {
                        "profile": "1g.10gb",
                        "uuid": A100_MIG_UUIDS[2],
                        "gpu_instance_id": 9,
                        "compute_instance_id": 0,
                        "memory_total_mib": 9728,
                        "processes": [{"pid": 4100002, "memory_mib": 4000, "user": "carol", "name": "python"}],
                    },
                ],
            },
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 20,
                "temperature": 40,
                "power_w": 120,
                "power_limit_w": 400,
                "processes": [{"pid": 4100003, "memory_mib": 2000, "user": "dave", "name": "python"}],
            },
        ]
    }


def h100_split_scenario(gpus: int = 1) -> dict[str, Any]:
    """``gpus`` H100-80GB each fully split into 7 x 1g.10gb (GPU instances 7 to 13), all idle."""
    return {
        "gpus": [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "memory_reserved_mib": 512,
                "temperature": 36,
                "power_w": 90,
                "power_limit_w": 700,
                "mig_slices": [
                    {"profile": "1g.10gb", "gpu_instance_id": 7 + i, "compute_instance_id": 0, "memory_total_mib": 9856}
                    for i in range(7)
                ],
            }
            for _ in range(gpus)
        ]
    }


# -- tests against a real Jupyter Server (pytest-jupyter's fixtures are star-imported by those modules)

NOTEBOOK = "work/train model.ipynb"


def asynctest(body: Callable[..., Any]) -> Callable[..., Any]:
    """Run an async test body on pytest-jupyter's event loop (the one the server runs on)."""
    from jupyter_core.utils import ensure_event_loop

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return ensure_event_loop(prefer_selector_loop=True).run_until_complete(body(*args, **kwargs))

    return wrapper


async def get_snapshot(jp_fetch: Any) -> dict[str, Any]:
    """``GET jupyter-gpu/snapshot`` as JSON (asserting a 200 JSON answer)."""
    response = await jp_fetch("jupyter-gpu", "snapshot")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


@functools.cache
def _socket_folder() -> Path:
    """One short folder per test process for the kernels' Unix sockets (a socket's path must stay
    under 108 bytes; a test's ``tmp_path`` can be longer). Removed when the process ends."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="jg-ipc-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def kernel_manager(folder: Path) -> Any:
    """A ``KernelManager`` for a real ipykernel whose connection file (and so its kernel report) lies
    in ``folder``, talking over Unix sockets.

    Not jupyter_client's default folder, the system's /tmp: a kernel killed at the end leaves its
    report there, and the OOM explainer of every later kernel reads that folder. Not TCP: the test
    process picks five free ports and the kernel binds them seconds later; on a busy host another
    process's outgoing connection can take one in between, and the kernel dies at start ("Kernel died
    before replying to kernel_info": CI's stop-35 run, 16 kernels starting at once). Each kernel's
    sockets have their own prefix, so kernels started back to back never pick the same path.
    """
    import uuid

    from jupyter_client.manager import KernelManager

    kernel_id = uuid.uuid4()
    return KernelManager(
        kernel_name="python3",
        connection_file=str(folder / f"kernel-{kernel_id}.json"),
        transport="ipc",
        ip=str(_socket_folder() / kernel_id.hex[:12]),
    )


def start_kernel(folder: Path, env: dict[str, str] | None = None, timeout_s: float = UNDER_LOAD_S) -> tuple[Any, Any]:
    """A real ipykernel (see :func:`kernel_manager`) and its started client: (manager, client)."""
    manager = kernel_manager(folder)
    manager.start_kernel(env=env if env is not None else dict(os.environ))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=timeout_s)
    except BaseException:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        raise
    return manager, client


async def until(
    jp_fetch: Any, predicate: Callable[[dict[str, Any]], Any], timeout: float = UNDER_LOAD_S
) -> dict[str, Any]:
    """Poll the snapshot until ``predicate`` holds; fail with the last answer otherwise.

    A predicate that looks up a kernel the answer does not list yet (``StopIteration`` from a
    ``next(...)`` over its kernels: the server's kernel table is read once per sample, so a kernel
    started a moment ago can be missing from the next answer or two on a loaded machine) means "not
    yet", not a failure."""
    deadline = time.monotonic() + timeout
    while True:
        data = await get_snapshot(jp_fetch)
        try:
            held = predicate(data)
        except StopIteration:
            held = False
        if held:
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s; last snapshot: {json.dumps(data)[:3000]}")
        await asyncio.sleep(0.05)


async def start_session(jp_fetch: Any, path: str = NOTEBOOK) -> str:
    body = {"path": path, "name": os.path.basename(path), "type": "notebook", "kernel": {"name": "python3"}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    return json.loads(response.body)["kernel"]["id"]


async def run_code(serverapp: Any, kernel_id: str, code: str) -> str:
    """Execute ``code`` in the kernel (as a notebook would) and return its stdout."""
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels()
    output: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            output.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            output.append("\n".join(msg["content"]["traceback"]))

    try:
        ready = client.wait_for_ready(timeout=UNDER_LOAD_S)
        if inspect.isawaitable(ready):
            await ready
        reply = client.execute_interactive(code, output_hook=hook, timeout=UNDER_LOAD_S)
        if inspect.isawaitable(reply):
            reply = await reply
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", "".join(output)
    return "".join(output)


def kernel_pid(serverapp: Any, kernel_id: str) -> int:
    return serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid


def place(scenario: Any, gpu: int, **process: Any) -> None:
    """Put a process on a simulated GPU (memory in MiB)."""

    def change(data: dict[str, Any]) -> None:
        data["gpus"][gpu].setdefault("processes", []).append(process)

    scenario.update(change)


def metric_samples(text: str) -> dict[str, list[Any]]:
    """The samples of each metric family in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        families.setdefault(family.name, []).extend(family.samples)
    return families


def idle_gpus(uuids: list[str], *processes: tuple[int, int]) -> list[Any]:
    """Idle 80 GiB GPUs with these UUIDs (GpuInfo, index = position); ``processes``: (gpu index, pid)
    NVML shows, 1 GiB each (the claims tests' world)."""
    from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess

    return [
        GpuInfo(
            index=i,
            uuid=uuid,
            name="NVIDIA A100",
            memory_total=80 << 30,
            memory_free=80 << 30,
            processes=tuple(GpuProcess(pid, 1 << 30) for index, pid in processes if index == i),
        )
        for i, uuid in enumerate(uuids)
    ]


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a child started as from an interactive shell: SIGINT, SIGQUIT and SIGHUP at
    their defaults. The test runner may itself have been started with them ignored (``nohup``, a
    background job of a shell without job control, some CI runners), and children inherit ignored
    signals: a test about what a signal does must not depend on how the suite was started."""
    import signal

    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
