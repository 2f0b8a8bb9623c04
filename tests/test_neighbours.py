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
