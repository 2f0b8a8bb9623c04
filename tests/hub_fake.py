"""A stand-in for the JupyterHub REST API and the user servers' answers, on one loopback port.

Used where a real hub would add minutes and nothing the test checks (privacy filtering, the admin
action's permission check, 50 users for the benchmark). ``tests/test_hub_real.py`` runs a real hub.

- ``GET /hub/api/user``: the model of the token's owner (``tokens``), 403 for an unknown token;
- ``GET /hub/api/users?state=active``: ``servers`` (service token only);
- ``GET /user/<name>/jupyter-gpu/snapshot``: that user's canned snapshot (service token only), and
- ``DELETE /user/<name>/api/kernels/<id>``: recorded in ``deleted`` (service token only): the
  service no longer calls either (issue 27); tests check ``snapshot_calls`` and ``deleted`` stay empty.
  The snapshots are what each user's server *reports* (``report_of``, ``hub_service.Running.reported``);
- named servers (``named[(user, server)]``): the same under ``/user/<name>/<server>/``.

Hostile answers for the adversarial tests: ``raw[user]`` (bytes sent instead of the snapshot),
``hang`` (users whose server accepts the request and never answers), ``users_answer`` (what
``/hub/api/users`` answers instead of the generated list: any JSON value, or bytes).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any
from urllib.parse import quote

from tornado import netutil, web
from tornado.httpserver import HTTPServer

SERVICE_TOKEN = "service-secret-token"


class FakeHub:
    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {
            SERVICE_TOKEN: {
                "kind": "service",
                "name": "jupyter-gpu",
                "scopes": [],  # the service needs no role (it never calls a user server)
            }
        }
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str]] = []  # (user, kernel_id, token)
        self.user_calls = 0
        self.raw: dict[str, bytes] = {}
        self.raw_headers: dict[str, dict[str, str]] = {}
        self.named: dict[tuple[str, str], dict[str, Any]] = {}  # (user, server name): snapshot
        self.hang: set[str] = set()
        self.users_answer: Any = None
        self.snapshot_calls: dict[str, int] = {}
        self.users_calls = 0
        sockets = netutil.bind_sockets(0, "127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        started = threading.Event()
        # Its own thread and loop, like a real hub in its own process: HubAuth checks tokens with a
        # blocking call, which would deadlock against a hub on the service's own loop.
        self.loop: asyncio.AbstractEventLoop | None = None

        def serve() -> None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            self.server = HTTPServer(
                web.Application(
                    [
                        (r"/hub/api/user", _Whoami, {"hub": self}),
                        (r"/hub/api/users", _Users, {"hub": self}),
                        (r"/user/([^/]+)/jupyter-gpu/snapshot", _Snapshot, {"hub": self}),
                        (r"/user/([^/]+)/api/kernels/([^/]+)", _Kernel, {"hub": self}),
                        (r"/user/([^/]+)/([^/]+)/jupyter-gpu/snapshot", _NamedSnapshot, {"hub": self}),
                        (r"/user/([^/]+)/([^/]+)/api/kernels/([^/]+)", _NamedKernel, {"hub": self}),
                    ]
                )
            )
            self.server.add_sockets(sockets)
            started.set()
            self.loop.run_forever()
            self.loop.close()

        self._thread = threading.Thread(target=serve, name="fake-hub", daemon=True)
        self._thread.start()
        started.wait(10)

    def add_user(self, name: str, token: str, admin: bool = False, scopes: list[str] | None = None) -> None:
        base = ["access:services!service=jupyter-gpu", f"read:users:name!user={name}"]
        self.tokens[token] = {"kind": "user", "name": name, "admin": admin, "scopes": base + (scopes or [])}

    def stop(self) -> None:
        """Stop listening, close the open connections, end the hub's loop and thread (idempotent)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return

        async def shut() -> None:
            self.server.stop()
            try:
                await asyncio.wait_for(self.server.close_all_connections(), 5)
            finally:
                loop.stop()

        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(shut()))
        except RuntimeError:  # closed meanwhile
            return
        self._thread.join(10)


class _Handler(web.RequestHandler):
    def initialize(self, hub: FakeHub) -> None:
        self.hub = hub

    def token(self) -> str:
        return self.request.headers.get("Authorization", "").removeprefix("token ").strip()

    def service_only(self) -> None:
        if self.token() != SERVICE_TOKEN:
            raise web.HTTPError(403)


class _Whoami(_Handler):
    def get(self) -> None:
        self.hub.user_calls += 1
        model = self.hub.tokens.get(self.token())
        if model is None:
            raise web.HTTPError(403)
        self.finish(json.dumps(model))


class _Users(_Handler):
    def get(self) -> None:
        self.service_only()
        self.hub.users_calls += 1
        answer = self.hub.users_answer
        if isinstance(answer, bytes):
            self.finish(answer)
            return
        if answer is None:  # server URLs escaped as JupyterHub escapes them (url_escape_path)
            names = dict.fromkeys([*self.hub.snapshots, *self.hub.raw, *self.hub.hang])
            answer = [
                {"name": name, "servers": {"": {"url": f"/user/{quote(name, safe='@~')}/", "ready": True}}}
                for name in names
            ]
            for (name, server), _ in self.hub.named.items():
                entry = next((a for a in answer if a["name"] == name), None)
                if entry is None:
                    entry = {"name": name, "servers": {}}
                    answer.append(entry)
                entry["servers"][server] = {"url": f"/user/{quote(name, safe='@~')}/{server}/", "ready": True}
        self.finish(json.dumps(answer))


class _Snapshot(_Handler):
    async def get(self, user: str) -> None:
        self.service_only()
        self.hub.snapshot_calls[user] = self.hub.snapshot_calls.get(user, 0) + 1
        if user in self.hub.hang:
            await asyncio.sleep(3600)  # accepted, never answered
        if user in self.hub.raw:
            for name, value in self.hub.raw_headers.get(user, {}).items():
                self.set_header(name, value)
            self.finish(self.hub.raw[user])
            return
        if user not in self.hub.snapshots:
            raise web.HTTPError(404)
        self.finish(json.dumps(self.hub.snapshots[user]))


class _Kernel(_Handler):
    def delete(self, user: str, kernel_id: str) -> None:
        self.service_only()
        self.hub.deleted.append((user, kernel_id, self.token()))
        self.set_status(204)


_PID_BASE: dict[str, int] = {}


def user_snapshot(user: str, kernels: int, gpu: int = 0, mib: int = 1024) -> dict[str, Any]:
    """A user server's answer: ``kernels`` idle kernels, each holding ``mib`` on GPU ``gpu``."""
    processes, table = [], []
    base = _PID_BASE.setdefault(user, 1000 + 1000 * len(_PID_BASE))  # one PID range per user
    for k in range(kernels):
        kernel_id = f"{user}-kernel-{k}"
        processes.append(
            {
                "pid": base + k,
                "memory": mib << 20,
                "user": user,
                "name": "python",
                "type": "compute",
                "command": f"python -m ipykernel secret-{user}-{k}",
                "kernel_id": kernel_id,
                "notebook": f"{user}/secret-{k}.ipynb",
                "own": True,
                "idle_s": 7200.0,
                "idle": True,
            }
        )
        table.append(
            {
                "kernel_id": kernel_id,
                "name": "python3",
                "notebook": f"{user}/secret-{k}.ipynb",
                "pid": base + k,
                "execution_state": "idle",
                "idle_s": 7200.0,
                "idle": True,
                "gpu_memory": mib << 20,
                "gpus": [gpu],
                "reported_gpu_memory": None,
                "report_age_s": None,
            }
        )
    return {
        "nvml_available": True,
        "error": None,
        "timestamp": 0,
        "simulated": True,
        "warnings": [],
        "gpus": [{"index": gpu, "uuid": f"GPU-{gpu}", "name": "A100", "processes": processes}],
        "kernels": table,
    }


class _NamedSnapshot(_Handler):
    def get(self, user: str, server: str) -> None:
        self.service_only()
        if (user, server) not in self.hub.named:
            raise web.HTTPError(404)
        self.finish(json.dumps(self.hub.named[(user, server)]))


class _NamedKernel(_Handler):
    def delete(self, user: str, server: str, kernel_id: str) -> None:
        self.service_only()
        self.hub.deleted.append((f"{user}/{server}", kernel_id, self.token()))
        self.set_status(204)


def scenario_of(snapshots: dict[Any, dict[str, Any]] | list[dict[str, Any]], gpus: int = 4) -> dict[str, Any]:
    """Simulated GPUs holding the processes of ``snapshots`` (as ``user_snapshot`` makes them): what
    NVML shows the service, each PID owned by the user whose server reports it."""
    from jupyter_gpu import simulate

    scenario = simulate.plausible_gpus(gpus)
    for snapshot in snapshots.values() if isinstance(snapshots, dict) else snapshots:
        for gpu in snapshot["gpus"]:
            scenario["gpus"][gpu["index"]].setdefault("processes", []).extend(
                [
                    {"pid": p["pid"], "memory_mib": p["memory"] >> 20, "user": p["user"], "name": "python"}
                    for p in gpu["processes"]
                ]
            )
    return scenario


def report_of(snapshot: dict[str, Any], server: str = "") -> bytes:
    """The report a user server pushes to the service (``hub.reports``) for a ``user_snapshot``:
    its kernels with the PIDs its answer attributes to each (untyped entries passed on as they are,
    so a hostile snapshot makes a hostile report)."""
    pids: dict[Any, list[Any]] = {}
    for gpu in snapshot.get("gpus") or []:
        for process in (gpu.get("processes") or []) if isinstance(gpu, dict) else []:
            if isinstance(process, dict) and process.get("kernel_id") is not None:
                pids.setdefault(process["kernel_id"], []).append(process.get("pid"))
    kernels = []
    for kernel in snapshot.get("kernels") or []:
        if not isinstance(kernel, dict):
            kernels.append(kernel)
            continue
        entry = {k: kernel.get(k) for k in ("kernel_id", "notebook", "execution_state", "idle_s")}
        entry["cull_idle_s"] = kernel.get("idle_s")
        entry["pids"] = pids.get(kernel.get("kernel_id"), [])
        if kernel.get("reported_gpu_memory") is not None:
            entry["reported_gpu_memory"] = kernel["reported_gpu_memory"]
        kernels.append(entry)
    return json.dumps({"server": server, "kernels": kernels, "idle_threshold_s": 3600.0}).encode()
