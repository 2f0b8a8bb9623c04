"""The neighbour fixture is a real, different, unprivileged user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from neighbours import NeighbourFailed


def _whoami() -> tuple[int, int, list[int]]:
    return os.getuid(), os.geteuid(), os.getgroups()


def _write(path: str) -> None:
    Path(path).write_text("neighbour was here")


def test_the_neighbour_runs_as_another_unprivileged_user(neighbour, shared_tmp: Path) -> None:
    uid, euid, groups = neighbour.run(_whoami)
    assert uid == euid == neighbour.uid != os.getuid()
    assert groups == []
    private = shared_tmp / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(NeighbourFailed, match="PermissionError"):
        neighbour.run(_write, str(private / "x"))
    neighbour.run(_write, str(shared_tmp / "y"))
    assert neighbour.owns(shared_tmp / "y")


def test_the_neighbours_listener_hears_every_connection_made_before_it_is_stopped(neighbour) -> None:
    """``Neighbour.listening``: the port is the neighbour's while the block runs, and ``heard()``
    returns what each connection sent, the last ones made just before the stop included (they wait
    in the listen backlog: the listener reads them before it ends). What the credential tests
    assert ("not one byte") would prove nothing if a sent token could go unheard."""
    import socket

    from live_processes import free_port
    from neighbours import listening

    port = free_port()
    with neighbour.listening(port) as heard:
        assert listening(port)
        # the first client stays connected: the listener reads it until its 1 s read timeout, while
        # the other two connect and the stop is asked for; they are read after the stop
        with socket.create_connection(("127.0.0.1", port)) as first:
            first.sendall(b"token secret-1")
            for data in (b"", b"token secret-2"):
                with socket.create_connection(("127.0.0.1", port)) as client:
                    client.sendall(data)
            received = heard()
    assert received == [b"token secret-1", b"", b"token secret-2"]
    assert not listening(port)
