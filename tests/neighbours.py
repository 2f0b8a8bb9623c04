"""Another user on the same host: the adversary of docs/security.md, for real.

Shared GPU servers are shared Linux hosts. The attacks that matter come from a second, ordinary
user who can write where the victim's jupyter_gpu reads or writes (``/tmp``, a shared claims or
runtime directory) or listen on a port it talks to. :class:`Neighbour` is such a user: a system
account made for the test session (``useradd``, removed at the end), and :meth:`Neighbour.run`
runs a function *as that user* in a forked child (real uid/gid switched, no supplementary groups),
so what the function can do is exactly what the kernel lets an ordinary local user do. Only the
standard library is needed in the child: attacks are file and socket operations.

Needs root (to create the user and switch to it); the fixture ``neighbour`` skips with the reason
otherwise. CI runs as root.
"""

from __future__ import annotations

import json
import os
import pickle
import pwd
import select
import shutil
import socket
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

NAME = "jgpu-neighbour"


class NeighbourFailed(AssertionError):
    """What the neighbour's function raised, with its traceback from the child."""


@dataclass(frozen=True)
class Neighbour:
    name: str
    uid: int
    gid: int

    def run(self, function: Callable[..., Any], *args: Any, timeout_s: float = 30) -> Any:
        """``function(*args)`` run as this user in a forked child; its return value (pickled back),
        or :class:`NeighbourFailed` with the child's traceback."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: become the neighbour, run, report, exit without cleanup handlers
            os.close(read_end)
            try:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                result: tuple[bool, Any] = (True, function(*args))
            except BaseException:
                result = (False, traceback.format_exc())
            try:
                payload = pickle.dumps(result)
            except Exception:
                payload = pickle.dumps((False, f"unpicklable result: {result!r:.200}"))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as data:
            raw = data.read()
        os.waitpid(pid, 0)
        ok, value = pickle.loads(raw) if raw else (False, "the neighbour's process died")
        if not ok:
            raise NeighbourFailed(value)
        return value

    def owns(self, path: str | os.PathLike[str]) -> bool:
        return os.lstat(path).st_uid == self.uid

    @contextmanager
    def listening(self, port: int) -> Iterator[Callable[[], list[bytes]]]:
        """This user listens on ``port`` (on 127.0.0.1) while the block runs: a port a credential is
        sent to, taken while its owner is down. Yields ``heard()``, which stops the listener and returns
        what each connection sent, one item per connection in the order they came (``[]``: nobody
        connected). The listener is up when the block starts, and stops when told, not after a fixed
        time: connections made before ``heard()`` are all in the answer, however slow the machine is
        (bounded by :data:`support.UNDER_LOAD_S`)."""
        from support import UNDER_LOAD_S, wait_until

        stop_read, stop_write = os.pipe()
        got: list[list[bytes]] = []
        thread = threading.Thread(
            target=lambda: got.append(self.run(listen_and_record, port, stop_read, UNDER_LOAD_S)), daemon=True
        )
        thread.start()
        stopped = False

        def heard() -> list[bytes]:
            nonlocal stopped
            if not stopped:
                os.write(stop_write, b"x")
                stopped = True
            thread.join(UNDER_LOAD_S)
            assert got, "the neighbour's listener did not report"
            return got[0]

        try:
            wait_until(lambda: listening(port) or not thread.is_alive(), what=f"the neighbour listening on {port}")
            assert thread.is_alive(), "the neighbour's listener ended before it listened (port taken?)"
            yield heard
        finally:
            if not stopped:
                os.write(stop_write, b"x")
                thread.join(UNDER_LOAD_S)
            os.close(stop_read)
            os.close(stop_write)


def listen_and_record(port: int, stop_fd: int, longest_s: float) -> list[bytes]:
    """As the neighbour: listen on ``port`` until a byte arrives on ``stop_fd`` (or ``longest_s``
    passed), and return every byte each connection sent, one item per connection. On the stop, the
    connections already made (waiting to be accepted) are read too: a client that connected before
    the stop was asked for is never missed."""
    received: list[bytes] = []
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        deadline = time.monotonic() + longest_s
        stop = False
        while not stop:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([listener, stop_fd], [], [], max(0.0, left))
            stop = stop_fd in ready or left <= 0
            # after the stop: only what is already waiting in the backlog
            listener.setblocking(not stop)
            while listener in ready:
                try:
                    connection, _ = listener.accept()
                except BlockingIOError:
                    break
                with connection:
                    connection.settimeout(1.0)
                    data = b""
                    try:
                        while chunk := connection.recv(65536):
                            data += chunk
                    except OSError:  # TimeoutError included: a client that sends nothing and stays
                        pass
                    received.append(data)
                if not stop:
                    break
    return received


def listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (any address, any user), from ``/proc/net/tcp*``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            if any(f":{port:04X} " in row and row.split()[3] == "0A" for row in list(rows)[1:]):
                return True
    return False


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "a second local user needs root (useradd, setuid)"
    if not shutil.which("useradd"):
        return "useradd is missing"
    return None


@contextmanager
def neighbour_account(name: str = NAME) -> Iterator[Neighbour]:
    """The system user ``name`` (created when missing, removed again if this created it)."""
    created = False
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        created = True
        entry = pwd.getpwnam(name)
    try:
        yield Neighbour(name, entry.pw_uid, entry.pw_gid)
    finally:
        if created:
            subprocess.run(["userdel", name], capture_output=True)


def forge_kernel_report(folder: str, kernel_id: str, pid: int, start: int | float) -> None:
    """As the neighbour: a kernel report for someone else's process, claiming 40 GiB on a GPU
    (what a forged report looks like: the victim's PID and start time are readable in ``/proc``)."""
    from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX

    document = {"version": 1, "kernel_id": kernel_id, "pid": pid, "start_time": start, "session": "x.ipynb"}
    document.update(nvml_pids=[], gpu_memory={"GPU-1": 40 * 2**30}, timestamp=time.time())
    with open(os.path.join(folder, f"{REPORT_PREFIX}{kernel_id}.json"), "w") as file:
        json.dump(document, file)
