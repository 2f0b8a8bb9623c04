"""A forged kernel report in a shared runtime directory, against a real Jupyter Server.

The server's runtime directory here is a 1777 folder every local user can write (``shared_tmp``).
The neighbour (a real second user) reads the victim kernel's PID and start time from ``/proc`` and
writes a report claiming 40 GiB for it. Before, the idle kernel, holding no GPU memory, was culled
(``cull_idle_after_s`` 2 s) and the log said "40960 MiB freed"; the report must not count.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from neighbours import forge_kernel_report
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import asynctest, get_snapshot, kernel_pid, start_session, until

from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX
from jupyter_gpu.sources.processes import process_start

pytestmark = pytest.mark.usefixtures("stop_sampler_after_test")

AFTER = 2.0


@pytest.fixture
def jp_runtime_dir(shared_tmp: Path) -> Path:
    return shared_tmp


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
        "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "wait_s": 1.0, "cull_idle_after_s": AFTER},
    }


def kernel(data: dict[str, Any], kernel_id: str) -> dict[str, Any]:
    return next(k for k in data["kernels"] if k["kernel_id"] == kernel_id)


@asynctest
async def test_a_report_forged_by_another_user_never_gets_an_idle_kernel_culled(
    jp_fetch, jp_serverapp, scenario, neighbour, shared_tmp, caplog
):
    caplog.set_level(logging.WARNING, logger="jupyter_gpu")
    # Given a victim's idle kernel holding no GPU memory, its connection file in a shared folder
    kernel_id = await start_session(jp_fetch)
    pid = kernel_pid(jp_serverapp, kernel_id)
    await until(jp_fetch, lambda d: any(k["kernel_id"] == kernel_id for k in d["kernels"]))
    # When the neighbour writes a report for it, claiming 40 GiB
    start = process_start(pid)
    assert start is not None
    neighbour.run(forge_kernel_report, str(shared_tmp), kernel_id, pid, start)
    assert neighbour.owns(shared_tmp / f"{REPORT_PREFIX}{kernel_id}.json")
    # Then, for well past cull_idle_after_s, the report does not count and the kernel lives
    for _ in range(50):
        entry = kernel(await get_snapshot(jp_fetch), kernel_id)
        assert entry["reported_gpu_memory"] is None and entry["cull_in_s"] is None
        assert kernel_id in jp_serverapp.kernel_manager.list_kernel_ids()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if "culled idle GPU kernel" in r.getMessage()]
    (record,) = [r for r in caplog.records if f"{REPORT_PREFIX}{kernel_id}.json" in r.getMessage()]
    assert f"belongs to uid {neighbour.uid}" in record.getMessage()
