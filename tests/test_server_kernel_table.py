"""The server's kernel table (server/kernel_table.py): the figures it reads from the kernel manager."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpu.server.kernel_table import kernel_connections


class Manager:
    """A kernel manager whose kernel model says ``connections`` (or raises ``error``)."""

    def __init__(self, connections: Any = None, error: Exception | None = None) -> None:
        self.connections = connections
        self.error = error

    def kernel_model(self, kernel_id: str) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        model = {"id": kernel_id, "name": "python3"}
        if self.connections is not None:
            model["connections"] = self.connections
        return model


@pytest.mark.parametrize(
    ("manager", "expected"),
    [
        (Manager(0), 0),
        (Manager(3), 3),
        (Manager(), None),  # a kernel manager that does not count them
        (Manager(True), None),
        (Manager(-1), None),
        (Manager("2"), None),
        (Manager(error=KeyError("gone")), None),  # the kernel just went away
        (object(), None),  # no kernel model at all
    ],
)
def test_connections_are_the_kernel_models_count_or_unknown(manager: Any, expected: int | None) -> None:
    assert kernel_connections(manager, "k1") == expected
