"""Every request that carries a credential, tried against a second local user (docs/security.md,
"Every request that carries a credential"; issue 27 item 3).

The neighbour (a real system user, ``tests/neighbours.py``) listens on the port a credential is sent
to: a user server that died, the hub service or Prometheus while they are down. For each flow the
credential's sender must send the neighbour not one byte (so not the token) and say whose listener
it found. Without the listener-owner check each of these would hand the neighbour the token: the
user's server token (runs code as the user), the user server's hub token (opens the user's server),
or the Prometheus bearer token.
"""

from __future__ import annotations

import asyncio
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from live_processes import free_port
from test_sources_host import runtime_file

from jupyter_gpu.sources import remote


@pytest.fixture
def neighbour_port(neighbour: Any) -> Iterator[tuple[int, Callable[[], bytes]]]:
    """A port the neighbour listens on while the test runs; the second item stops the listener and
    returns every byte anybody sent there (``Neighbour.listening``)."""
    port = free_port()
    with neighbour.listening(port) as heard:
        yield port, lambda: b"".join(heard())


def test_the_usage_endpoint_sends_the_users_hub_token_only_to_the_service(neighbour_port, neighbour) -> None:
    """``GET jupyter-gpu/usage`` of the user server asks the service with the server's own hub
    token (``own_usage``): while the service is down a neighbour on its port gets nothing."""
    port, received = neighbour_port
    with pytest.raises(urllib.error.URLError) as caught:
        remote.own_usage(f"http://127.0.0.1:{port}/services/jupyter-gpu/", "alice", token="user-secret", account="root")
    assert isinstance(caught.value.reason, remote.NotTheService)
    assert f"account '{neighbour.name}'" in str(caught.value.reason)
    assert received() == b""


def test_the_oom_reports_peers_never_send_the_server_token_to_a_neighbour(
    neighbour_port, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OOM explainer of a kernel asks the server that started it (its runtime file, an ancestor
    PID) with that server's token; the server died and a neighbour took its port."""
    import os

    from jupyter_gpu.sources import kernel_reports, peers

    port, received = neighbour_port
    runtime_file(tmp_path, f"http://127.0.0.1:{port}/", pid=os.getppid(), token="server-secret")
    monkeypatch.setattr(kernel_reports, "kernel_identity", lambda: ("own-kernel", tmp_path))
    found = peers.find_peers(timeout_s=2.0)
    assert found.source == "kernel reports"  # the server was not believed: the kernels' own reports
    assert received() == b""


def test_the_doctors_server_check_sends_no_token_to_a_neighbour(neighbour_port, neighbour, tmp_path: Path) -> None:
    from jupyter_gpu.doctor.machine import server_extension

    port, received = neighbour_port
    runtime_file(tmp_path, f"http://127.0.0.1:{port}/", token="server-secret")
    service = server_extension(str(tmp_path))
    assert service.state == "no answer" and f"account '{neighbour.name}'" in service.detail, service
    assert received() == b""


def test_the_doctors_hub_check_sends_no_token_to_a_neighbour(
    neighbour_port, neighbour, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu.doctor.machine import hub_service

    port, received = neighbour_port
    monkeypatch.setenv("JUPYTER_GPU_SERVICE_URL", f"http://127.0.0.1:{port}/services/jupyter-gpu/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "user-secret")
    service = hub_service()
    assert service.state == "no answer" and f"account '{neighbour.name}'" in service.detail, service
    assert received() == b""


def test_status_source_hub_sends_no_token_to_a_neighbour(
    neighbour_port, neighbour, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import io

    from jupyter_gpu import cli

    port, received = neighbour_port
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_GPU_SERVICE_URL", f"http://127.0.0.1:{port}/services/jupyter-gpu/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "user-secret")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["status", "--source", "hub"], out=out, err=err) == 1
    assert f"account '{neighbour.name}'" in out.getvalue()
    assert received() == b""


def test_the_prometheus_bearer_token_goes_only_to_prometheuss_listener(
    neighbour_port, neighbour, tmp_path: Path
) -> None:
    """The hub service in Prometheus mode (``--prometheus-url http://127.0.0.1:9090``) while
    Prometheus is down: the neighbour on its port gets no bearer token, the console says why."""
    from test_hub_prometheus import start_service

    port, received = neighbour_port
    token_file = tmp_path / "token"
    token_file.write_text("prom-secret\n")

    async def ask() -> str | None:
        hub, service, _ = await start_service(f"http://127.0.0.1:{port}/", str(token_file))
        try:
            assert neighbour.uid not in service.prometheus.owners
            return (await service.prometheus._ask())[3]
        finally:
            service.close()
            hub.stop()

    error = asyncio.run(ask())
    assert error is not None and f"account '{neighbour.name}'" in error and "was not sent" in error
    assert received() == b""


def test_get_with_credential_sends_to_an_owners_listener() -> None:
    """The same check lets the request through to a listener of an allowed account (here this test's
    own), and does not follow a redirect."""
    import os

    from test_sources_host import FakeServer

    fake = FakeServer()
    try:
        body = remote.get_with_credential(
            fake.url + "x", {"Authorization": "Bearer t"}, frozenset({os.getuid()}), 5.0, 1 << 20
        )
        assert body.startswith(b"{") and fake.seen == ["Bearer t"]
        fake.status = 302
        fake.headers = {"Location": "http://127.0.0.1:9/"}
        with pytest.raises(urllib.error.HTTPError):
            remote.get_with_credential(fake.url, {"Authorization": "Bearer t"}, frozenset({os.getuid()}), 5.0, 99)
        assert fake.seen == ["Bearer t", "Bearer t"]
    finally:
        fake.close()


def test_prometheus_refusing_the_bearer_token_is_the_consoles_http_error(tmp_path: Path) -> None:
    """With a token the query goes through ``get_with_credential``: an error status still reads
    ``HTTP <code>`` in the console's error line, as without one."""
    from test_hub_prometheus import start_service
    from test_sources_host import FakeServer

    token_file = tmp_path / "token"
    token_file.write_text("prom-secret\n")
    fake = FakeServer()
    fake.status = 403

    async def ask() -> str | None:
        hub, service, _ = await start_service(fake.url, str(token_file))
        try:
            return (await service.prometheus._ask())[3]
        finally:
            service.close()
            hub.stop()

    try:
        error = asyncio.run(ask())
    finally:
        fake.close()
    assert error == f"cannot read Prometheus at {fake.url.rstrip('/')}: HTTP 403"
    assert fake.seen and all(seen == "Bearer prom-secret" for seen in fake.seen)
