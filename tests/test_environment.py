"""The test environment itself (``scripts/setup.sh test``): what keeps its hundreds of Jupyter
servers, hubs and workers cheap to start (benchmarks/README.md, "Every Jupyter server start")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What a Jupyter server imports at start (jupyter_events, hence jsonschema's format checkers), and
# whether that built rfc3987-syntax's parsers: 2 s of CPU, 39 Earley parsers, for a format no
# Jupyter schema uses.
SERVER_START_IMPORTS = (
    "import sys, jupyter_server.serverapp\nprint('rfc3987_syntax' in sys.modules, 'rfc3987' in sys.modules)"
)


def test_a_test_server_checks_iri_formats_without_building_parsers_at_import() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SERVER_START_IMPORTS], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "True"], "install the test extra again: scripts/setup.sh test"


def test_the_hub_users_environment_does_too() -> None:
    python = REPO / ".venv-hub" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-hub here (scripts/setup.sh test makes it where npm is)")
    out = subprocess.run([str(python), "-c", SERVER_START_IMPORTS], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"], "scripts/setup.sh test installs rfc3987 into .venv-hub"
