"""Issue 22 item 3: what jupyter_gpu says in a Jupyter server goes through the server's log (its
format, its level), naming the hub server it comes from; never bare to stderr."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from live_processes import LiveServer, free_port, get_json

from jupyter_gpu.server.logs import ServerLogHandler, attach, detach, server_name

# jupyter_server's default log_format: "[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s] %(message)s"
SERVER_LINE = r"\[{level} \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}} {logger}\] {message}"


def unreachable_service(tmp_path: Path, user: str, args: tuple[str, ...] = ()) -> LiveServer:
    """A user server whose jupyter-gpu service is down (nothing listens at its URL)."""
    url = f"http://127.0.0.1:{free_port()}/services/jupyter-gpu/"
    config = {"interval_s": 0.3, "source": url, "service_account": ""}
    return LiveServer(tmp_path, user, "secret-token", config, env={"JUPYTERHUB_SERVER_NAME": "second"}, args=args)


def test_the_service_unreachable_line_has_the_servers_format_names_the_server_and_comes_once(
    demo_gpus: None, tmp_path: Path
) -> None:
    server = unreachable_service(tmp_path, "alice")
    try:
        for _ in range(4):  # four samples, one after another, all falling back to NVML
            snapshot = get_json(server.url + "jupyter-gpu/snapshot", server.token, timeout=30)
            assert [w for w in snapshot["warnings"] if "unreachable" in w], snapshot["warnings"]
            time.sleep(0.4)
    finally:
        server.stop()
    log = server.log.read_text()
    pattern = SERVER_LINE.format(
        level="W",
        logger=re.escape("jupyter_gpu.sources.remote"),
        message=r"server alice/second: the jupyter-gpu service \(http://127\.0\.0\.1:\d+/.*\) is unreachable",
    )
    lines = [line for line in log.splitlines() if "is unreachable" in line]
    assert len(lines) == 1, log[-3000:]  # said once while it stays down (and again when it answers)
    assert re.match(pattern, lines[0]), lines[0]


def test_the_servers_log_level_applies(demo_gpus: None, tmp_path: Path) -> None:
    server = unreachable_service(tmp_path, "bob", args=("--ServerApp.log_level=ERROR",))
    try:
        snapshot = get_json(server.url + "jupyter-gpu/snapshot", server.token, timeout=30)
        assert [w for w in snapshot["warnings"] if "unreachable" in w]
    finally:
        server.stop()
    assert "unreachable" not in server.log.read_text()  # a warning, under --log-level ERROR


@pytest.fixture
def server_log() -> tuple[logging.Logger, list[str]]:
    """A server's application logger (``propagate = False``, its own handler and format)."""
    from tornado.log import LogFormatter as TornadoFormatter

    lines: list[str] = []
    logger = logging.Logger("ServerApp", logging.DEBUG)
    logger.propagate = False

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(
        TornadoFormatter(
            fmt="[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s]%(end_color)s %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",  # traitlets' log_datefmt
        )
    )
    logger.addHandler(handler)
    return logger, lines


def test_a_record_goes_to_the_server_log_with_its_logger_and_the_server_named(
    server_log: tuple[logging.Logger, list[str]],
) -> None:
    logger, lines = server_log
    handler = ServerLogHandler(logger, "server alice")
    record = logging.LogRecord(
        "jupyter_gpu.server.service",
        logging.WARNING,
        __file__,
        1,
        "jupyter_gpu: culled idle GPU kernel %s",
        ("k1",),
        None,
    )
    handler.handle(record)
    [line] = lines
    assert re.match(
        SERVER_LINE.format(level="W", logger=re.escape("jupyter_gpu.server.service"), message="")
        + re.escape("server alice: culled idle GPU kernel k1")
        + "$",
        line,
    ), line
    assert record.getMessage() == "jupyter_gpu: culled idle GPU kernel k1"  # other handlers get it unchanged


@pytest.fixture
def no_server_attached() -> None:
    """The in-process servers of earlier tests stay attached (jupyter_server 2 never unloads a module extension)."""
    package = logging.getLogger("jupyter_gpu")
    for handler in [h for h in package.handlers if isinstance(h, ServerLogHandler)]:
        detach(handler.serverapp, handler)


@pytest.mark.usefixtures("no_server_attached")
def test_attach_follows_the_servers_log_level_and_detach_undoes_it() -> None:
    from traitlets.config import Application

    app = Application(log_level=logging.INFO)
    package = logging.getLogger("jupyter_gpu")
    before = package.level
    handler = attach(app)
    try:
        assert handler in package.handlers and package.level == logging.INFO
        app.log_level = logging.ERROR
        assert package.level == logging.ERROR
    finally:
        detach(app, handler)
    assert handler not in package.handlers and package.level == before
    app.log_level = logging.DEBUG
    assert package.level == before


@pytest.mark.usefixtures("no_server_attached")
def test_a_second_server_in_one_process_replaces_the_first() -> None:
    from traitlets.config import Application

    package = logging.getLogger("jupyter_gpu")
    before = package.level
    first, second = Application(log_level=logging.INFO), Application(log_level=logging.WARNING)
    one = attach(first)
    two = attach(second)
    try:
        assert one not in package.handlers and two in package.handlers and package.level == logging.WARNING
        first.log_level = logging.DEBUG  # the first server no longer steers the level
        assert package.level == logging.WARNING
    finally:
        detach(second, two)
    assert package.level == before


def test_the_server_name_on_a_hub() -> None:
    assert server_name({"JUPYTERHUB_USER": "alice"}) == "server alice"
    assert server_name({"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": "gpu"}) == "server alice/gpu"
    assert server_name({}) == ""
