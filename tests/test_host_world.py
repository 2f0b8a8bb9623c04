"""The host sample honours the world it is asked for (sources/host.py, issue 27 item 7): a reader
whose own environment names another simulated world than a running server's reads its own and
says so; ``jupyter-gpu status --source auto|server|hub|local`` chooses one source."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sources_host import FakeServer, runtime_file, server_answer

from jupyter_gpu import cli
from jupyter_gpu.sources import host


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _no_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTER_GPU_SERVICE_URL", raising=False)


def answering(fake: FakeServer, world: str | None) -> None:
    answer = server_answer(simulated=True)
    if world is not None:
        answer[host.WORLD_KEY] = world
    fake.body = json.dumps(answer).encode()


def test_world_names_compare_what_the_simulation_would_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert host.world_name(" 4 ") == host.world_name("04") == "4 GPUs"
    assert host.world_name("demo") == "demo" and host.world_name("demo-still") == "demo-still"
    assert host.world_name("x.json") == str(tmp_path / "x.json")
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "0")
    assert host.simulated_world() is None
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    assert host.simulated_world() == "4 GPUs"


def test_a_server_of_another_simulated_world_is_not_used_and_that_is_said(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    answering(fake_server, "demo")
    runtime_file(tmp_path, fake_server.url)
    reading = host.HostSample(runtime_dir=tmp_path).read()
    assert reading.source == "nvml"
    assert len(reading.snapshot.gpus) == 4 and reading.snapshot.simulated  # this process's own world
    assert f"the Jupyter server at {fake_server.url} simulates demo and this process simulates 4 GPUs" in (
        reading.note or ""
    )
    assert reading.snapshot.warnings == ()  # a choice of this reader, not a fault


def test_a_server_of_the_same_world_is_used(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    answering(fake_server, "4 GPUs")
    runtime_file(tmp_path, fake_server.url)
    assert host.HostSample(runtime_dir=tmp_path).read().source == "jupyter-server"


def test_a_server_reading_nvml_itself_names_its_world(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu.sources.nvml import snapshot

    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "demo-still")
    assert host.with_world(snapshot)().extra[host.WORLD_KEY] == "demo-still"
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "0")
    assert host.WORLD_KEY not in host.with_world(snapshot)().extra


def test_source_local_reads_nvml_here_beside_a_server(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    answering(fake_server, "4 GPUs")
    runtime_file(tmp_path, fake_server.url)
    reading = host.HostSample(runtime_dir=tmp_path, source="local").read()
    assert reading.source == "nvml" and len(reading.snapshot.gpus) == 4
    assert fake_server.seen == []  # the server was not even asked


def test_a_chosen_source_that_does_not_answer_is_an_error_and_nothing_else_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    reading = host.HostSample(runtime_dir=tmp_path, source="server").read()
    assert not reading.snapshot.nvml_available and reading.snapshot.gpus == ()
    assert reading.snapshot.error == "no Jupyter server of this user answered (--source server)"
    reading = host.HostSample(runtime_dir=tmp_path, source="hub").read()
    assert reading.snapshot.error == "no hub service is named ($JUPYTER_GPU_SERVICE_URL is not set) (--source hub)"
    with pytest.raises(ValueError, match="source must be one of auto, server, hub, local"):
        host.HostSample(source="elsewhere")


def test_source_hub_reads_the_service_only(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    answering(fake_server, None)
    runtime_file(tmp_path, fake_server.url)  # a server of this user answers too: not asked
    reading = host.HostSample(runtime_dir=tmp_path, service_url="http://127.0.0.1:9", source="hub").read()
    assert not reading.snapshot.nvml_available and "did not answer" in (reading.snapshot.error or "")
    assert fake_server.seen == []


def test_status_source_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    code, out, _ = run("status", "--source", "local")
    assert code == 0 and "Sample: NVML read locally (--source local)" in out
    code, out, err = run("status", "--source", "server", "--json")
    assert code == 1 and "no Jupyter server of this user answered (--source server)" in err
    assert json.loads(out)["gpus"] == []


@pytest.fixture
def demo_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real Jupyter server of this user simulating 'demo' (the README's example)."""
    from live_processes import LiveServer, stop

    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "demo")
    server = LiveServer(tmp_path / "server", "alice", "alice-token", {"interval_s": 0.25, "linger_s": 30})
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "server" / "runtime"))
    try:
        yield server
    finally:
        stop(server.process)


def test_the_readmes_example_beside_a_demo_server(demo_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``JUPYTER_GPU_SIMULATE=4 jupyter-gpu status`` beside a server running ``demo`` shows four
    GPUs of its own and says why; with ``demo`` it is the server's sample."""
    from live_processes import get_json

    answer = get_json(demo_server.url + "jupyter-gpu/snapshot", demo_server.token, timeout=60)
    assert answer[host.WORLD_KEY] == "demo"  # the server names its world
    code, out, _ = run("status", "--json")
    assert code == 0 and json.loads(out)["source"] == "jupyter-server"
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    code, out, _ = run("status", "--json")
    data = json.loads(out)
    assert code == 0 and data["source"] == "nvml" and len(data["gpus"]) == 4
    assert (
        f"the Jupyter server at {demo_server.url} simulates demo and this process simulates 4 GPUs"
        in data["source_note"]
    )
    code, out, _ = run("status")
    assert "simulates demo and this process simulates 4 GPUs" in out.replace("\n", " ").replace("  ", " ")


def test_a_kernels_panel_watch_and_wait_follow_the_same_rule(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel asks only the server that started it (an ancestor): of another world, it is not
    used by the kernel's shared host sample either, which the panel, ``%gpu_watch`` and ``--wait``
    (``take_snapshot(host_sample=True)``) all read."""
    import os

    from jupyter_gpu.kernel.session import take_snapshot

    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", "4")
    answering(fake_server, "demo")
    runtime_file(tmp_path, fake_server.url, pid=os.getppid())
    monkeypatch.setattr(host, "_default", host.HostSample(kernel=True, runtime_dir=tmp_path))
    taken = take_snapshot(host_sample=True)
    assert fake_server.seen  # the kernel's server was asked ...
    assert taken.extra["source"] == "nvml" and len(taken.gpus) == 4  # ... and not believed: another world
    assert "simulates demo and this process simulates 4 GPUs" in taken.extra["source_note"]
    answering(fake_server, "4 GPUs")
    monkeypatch.setattr(host, "_default", host.HostSample(kernel=True, runtime_dir=tmp_path))
    assert take_snapshot(host_sample=True).extra["source"] == "jupyter-server"
