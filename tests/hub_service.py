"""The hub service (``jupyter_gpu.hub``) started against the stand-in hub API of ``hub_fake``, on a
loopback port, for the hub tests and benchmarks (importable as ``hub_service``: pytest puts tests/ on
sys.path; the benchmarks put it there themselves).

The one place the tests build the service and its app, as ``python -m jupyter_gpu.hub`` does:
:func:`service_for` (a :class:`HubService` against a hub's API with the service's token),
:func:`listen` (its app behind the hub's OAuth on a loopback port of the running loop), and the two
ways a test runs them: :func:`start` on the test's own loop, :class:`InThread` on a loop of its own
(for a browser or a benchmark that blocks the test's thread).

Every :func:`start` is closed after the test by the ``stop_started`` fixture (conftest.py), which a
module using it asks for: ``pytestmark = pytest.mark.usefixtures("stop_started")``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hub_fake import SERVICE_TOKEN, FakeHub, report_of, scenario_of, user_snapshot
from jupyterhub.services.auth import HubOAuth
from support import UNDER_LOAD_S, ScenarioFile
from tornado import netutil
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer

from jupyter_gpu.hub import core
from jupyter_gpu.hub.app import HubService, make_app

PREFIX = "/services/jupyter-gpu/"


class Running:
    def __init__(
        self, hub: FakeHub, service: HubService, port: int, server: HTTPServer | None = None, first_sample: bool = True
    ) -> None:
        self.hub, self.service, self.port, self.server = hub, service, port, server
        self.first_sample = first_sample  # call() waits for the service's first NVML sample
        self.url = f"http://127.0.0.1:{port}{PREFIX}"
        self._pushed: dict[str, bool] = {}

    def close(self) -> None:
        """Stop the stand-in hub (its thread and sockets), the service and its listening socket."""
        self.hub.stop()
        if self.server is not None:
            self.server.stop()
        self.service.close()
        if getattr(self, "client", None) is not None:
            self.client.close()

    def reported(self) -> None:
        """The stand-in user servers have pushed: each of ``hub.snapshots`` (and ``hub.named``) is
        its user's latest report (``hub_fake.report_of``), ``hub.raw`` bytes a hostile one (dropped
        and counted by the board's rules); a user in ``hub.hang`` reports nothing. The HTTP push
        itself (tokens, 413/422/429) is tested in test_hub_push.py."""
        import time

        from jupyter_gpu.hub.reports import Refused

        board = self.service.board
        pushes = [(user, report_of(snapshot)) for user, snapshot in self.hub.snapshots.items()]
        pushes += [(user, report_of(snapshot, server)) for (user, server), snapshot in self.hub.named.items()]
        pushes += list(self.hub.raw.items())
        for user, body in pushes:
            if user in self.hub.hang or self._pushed.get(user + "\0" + body.decode(errors="replace")):
                continue
            board._last_try.clear()  # the stand-ins report whenever their answer changes
            try:
                board.receive(user, body, time.time(), None, self.service.system_user)
            except Refused:
                pass
            self._pushed[user + "\0" + body.decode(errors="replace")] = True

    async def sampled(self) -> None:
        """Wait (up to :data:`support.UNDER_LOAD_S`) until the service has its first NVML sample.

        A request waits at most 1 s for one (``HubService.devices``, by design: less than the user
        servers' 3 s timeout), then answers "no GPU sample yet": on a loaded machine the first
        sample (NVML's start, the scenario's first read) can take longer, and a test of what the
        console makes of NVML's processes would then read a console without any."""
        sampler = self.service.sampler
        if sampler.latest is None:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: sampler.wait_for_snapshot(timeout=UNDER_LOAD_S)
            )
        assert sampler.latest is not None, f"the hub service took no NVML sample within {UNDER_LOAD_S} s"

    async def call(self, path: str, token: str, method: str = "GET") -> tuple[int, Any]:
        """``path`` of the service as ``token``'s owner: (HTTP status, body). The stand-in servers
        report first (:meth:`reported`) and, unless the test started the service with
        ``first_sample=False`` (a hung driver), the service has its first sample (:meth:`sampled`)."""
        self.reported()
        if self.first_sample and self.service.prometheus is None:
            await self.sampled()
        # The test's own client: tornado's per-loop shared one would queue the service's requests
        # (same loop) behind the test's (10 at a time), a deadlock no real browser causes.
        if getattr(self, "client", None) is None:
            self.client = AsyncHTTPClient(force_instance=True, max_clients=100)
        try:
            response = await self.client.fetch(
                self.url + path, method=method, follow_redirects=False, headers={"Authorization": f"token {token}"}
            )
        except HTTPClientError as error:
            return error.code, error.response.body if error.response else b""
        return response.code, response.body


def service_for(hub_url: str, **options: Any) -> HubService:
    """The service against the hub API at ``hub_url`` with the service's token (``SERVICE_TOKEN``);
    ``options`` are :class:`HubService`'s own (``interval_s``, ``usage_db``, ``prometheus_url``...)."""
    return HubService(hub_url + "/hub/api", SERVICE_TOKEN, hub_url, **options)


def listen(service: HubService, hub_url: str, cache_max_age: float = 60) -> tuple[HTTPServer, int]:
    """The service's app at :data:`PREFIX` behind the hub's OAuth (the hub at ``hub_url``), on a
    loopback port of the running loop: the server and its port."""
    auth = HubOAuth(
        api_url=hub_url + "/hub/api",
        api_token=SERVICE_TOKEN,
        oauth_client_id="service-jupyter-gpu",
        access_scopes={"access:services!service=jupyter-gpu"},
        cache_max_age=cache_max_age,
    )
    sockets = netutil.bind_sockets(0, "127.0.0.1")
    server = HTTPServer(make_app(service, PREFIX, hub_auth=auth))
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]


async def start(
    interval_s: float = 0.2, usage_db: str | None = None, usage_interval_s: float = 60.0, first_sample: bool = True
) -> Running:
    """The service on a loopback port; with ``usage_db``, usage accounting in that file (tests call
    ``run.service.accountant.account_once()`` or ``run.service.accountant.start()`` themselves).
    ``first_sample=False``: :meth:`Running.call` does not wait for the first NVML sample (a test of
    the service without one)."""
    hub = FakeHub()
    service = service_for(
        hub.url, interval_s=interval_s, linger_s=5, usage_db=usage_db, usage_interval_s=usage_interval_s
    )
    server, port = listen(service, hub.url)
    run = Running(hub, service, port, server, first_sample)
    _STARTED.append(run)
    return run


class InThread:
    """The service on an event loop of its own, in a daemon thread, for a test or benchmark whose own
    thread blocks (a browser's synchronous calls would block a loop shared with the service).

    ``prepare`` is awaited on that loop before the service listens (e.g. accounting a few intervals);
    :meth:`stop` stops the loop and closes the service (the stand-in hub is the caller's)."""

    def __init__(
        self,
        hub_url: str,
        *,
        prepare: Callable[[HubService], Awaitable[None]] | None = None,
        cache_max_age: float = 60,
        ready_s: float = 10,
        **options: Any,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)

            async def begin() -> None:
                self.service = service_for(hub_url, **options)
                if prepare is not None:
                    await prepare(self.service)
                _, port = listen(self.service, hub_url, cache_max_age)
                self.url = f"http://127.0.0.1:{port}{PREFIX}"
                ready.set()

            self.loop.run_until_complete(begin())
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(ready_s), f"the hub service did not start within {ready_s} s"

    def stop(self) -> None:
        """Stop the service's loop and thread, then close the service."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.service.close()


_STARTED: list[Running] = []  # what start() made, closed after each test by stop_started_services


def stop_started_services() -> None:
    """Close every :func:`start` so far (the ``stop_started`` fixture calls it after each test)."""
    while _STARTED:
        _STARTED.pop().close()


def people(hub: FakeHub, gpus: ScenarioFile | None = None) -> None:
    """An admin, a reader (alice) and a plain user (bob) with their servers' kernels; with ``gpus``,
    NVML shows the service those kernels' processes, each owned by its user."""
    hub.add_user("root-admin", "admin-token", admin=True)
    hub.add_user("alice", "alice-token", scopes=[core.READ_SCOPE])
    hub.add_user("bob", "bob-token")
    hub.snapshots["alice"] = user_snapshot("alice", 1, gpu=0)
    hub.snapshots["bob"] = user_snapshot("bob", 2, gpu=1, mib=2048)
    if gpus is not None:
        gpus.write(scenario_of(hub.snapshots))


def serve_in_this_process() -> None:
    """The service with :func:`people` on a loopback port until killed, for a test that must survive
    the service freezing (its own process: a frozen loop, or a thread stuck in HubAuth's pool, would
    take the test's process with it). Prints one JSON line: the service's URL, the login cookie's
    name and a login cookie's value for each of alice (reader) and root-admin."""
    import json

    from tornado.web import create_signed_value

    async def main() -> None:
        run = await start(interval_s=0.5)
        people(run.hub)
        app = run.server.request_callback if run.server is not None else None
        secret = app.settings["cookie_secret"]  # type: ignore[union-attr]
        name = app.settings["hub_auth"].cookie_name  # type: ignore[union-attr]
        cookies = {
            user: create_signed_value(secret, name, token).decode()
            for user, token in (("alice", "alice-token"), ("root-admin", "admin-token"))
        }
        print(json.dumps({"url": run.url, "cookie_name": name, "cookies": cookies}), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def account_in_this_process(usage_db: str, scenario: str, usage_interval_s: float) -> None:
    """The service with :func:`people` on the simulated GPUs of the file ``scenario``, accounting
    into ``usage_db`` every ``usage_interval_s`` until killed (the ``kill -9`` test's child)."""
    import os

    from jupyter_gpu import simulate

    os.environ[simulate.ENV_VAR] = scenario

    async def main() -> None:
        run = await start(usage_db=usage_db, usage_interval_s=usage_interval_s)
        people(run.hub, ScenarioFile(Path(scenario), simulate.plausible_gpus(4)))
        run.reported()  # the user servers' reports, which accounting reads
        run.service.accountant.start()
        print("accounting", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextmanager
def crowd(folder: Path, users: Sequence[str], kernels: int, gpus: int) -> Iterator[str]:
    """The console's URL for a crowd of the stand-in hub: the admin ``admin-token`` and ``users``
    (tokens ``<name>-token``) with ``kernels`` kernels each, user n's on GPU ``n % gpus`` holding
    ``256 + n`` MiB per kernel (simulated GPUs, ``folder/gpus.json``), reported and ten minutes of them
    accounted (``folder/usage.sqlite``); the service runs in a thread of its own (:class:`InThread`).
    The caller's test sets nothing: the simulation's variable is set and restored here."""
    from jupyter_gpu import simulate

    hub = FakeHub()
    hub.add_user("root-admin", "admin-token", admin=True)
    for n, name in enumerate(users):
        hub.add_user(name, f"{name}-token")
        hub.snapshots[name] = user_snapshot(name, kernels, gpu=n % gpus, mib=256 + n)
    scenario = ScenarioFile(folder / "gpus.json", scenario_of(hub.snapshots, gpus=gpus))
    before = os.environ.get(simulate.ENV_VAR)
    os.environ[simulate.ENV_VAR] = str(scenario.path)

    async def ten_minutes_of_every_kernel(service: HubService) -> None:
        for name, snapshot in hub.snapshots.items():  # every user server has reported
            service.board.receive(name, report_of(snapshot), time.time())
        now = time.time()
        assert service.accountant is not None
        await service.accountant.account_once(now - 600)
        await service.accountant.account_once(now)

    running = None
    try:
        running = InThread(
            hub.url,
            prepare=ten_minutes_of_every_kernel,
            ready_s=60,
            interval_s=0.5,
            usage_db=str(folder / "usage.sqlite"),
            usage_interval_s=600,
            report_interval_s=3600,  # the reports stay fresh for the whole test
        )
        yield running.url
    finally:
        if running is not None:
            running.stop()
        hub.stop()
        if before is None:
            os.environ.pop(simulate.ENV_VAR, None)
        else:
            os.environ[simulate.ENV_VAR] = before
