"""The console's join made once per sample (issue 27's first paint, ``hub.console_join``): every
request of a sample reads the same joined rows, a report rebuilds its user's row only, a new sample
is joined ahead of the next request while a console is open, and each viewer's answer is exactly
what ``core.console`` makes for that viewer (privacy included): counted, never timed."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hub_fake import report_of, scenario_of, user_snapshot
from hub_service import people, start
from support import UNDER_LOAD_S, ScenarioFile

from jupyter_gpu import simulate
from jupyter_gpu.core.availability import Reservation
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
from jupyter_gpu.hub import core
from jupyter_gpu.hub.console_join import ConsoleJoin
from jupyter_gpu.hub.reports import Board

pytestmark = pytest.mark.usefixtures("stop_started")

MIB = 1 << 20
NOW = 1_000.0


def _snapshots() -> dict[str, dict[str, Any]]:
    return {
        "alice": user_snapshot("alice", 1, gpu=0),
        "bob": user_snapshot("bob", 2, gpu=1, mib=2048),
        "carol": user_snapshot("carol", 1, gpu=0, mib=512),
        "dave": user_snapshot("dave", 1, gpu=1),  # goes stale
        "eve": user_snapshot("eve", 1, gpu=0),  # lies: claims bob's process
    }


def _sample(snapshots: dict[str, dict[str, Any]], timestamp: float = NOW) -> Snapshot:
    """NVML as the service sees it: every user's kernel processes, owned by that user."""
    gpus = []
    for index in (0, 1):
        processes = [
            GpuProcess(p["pid"], p["memory"], p["user"])
            for snapshot in snapshots.values()
            for gpu in snapshot["gpus"]
            if gpu["index"] == index
            for p in gpu["processes"]
        ]
        total, used = 80 << 30, 1 << 30
        gpus.append(
            GpuInfo(index, f"GPU-{index}", "A100", memory_total=total, memory_used=used, processes=(*processes,))
        )
    return Snapshot(nvml_available=True, timestamp=timestamp, gpus=tuple(gpus))


def _board(snapshots: dict[str, dict[str, Any]]) -> Board:
    board = Board(interval_s=5.0)
    for name, snapshot in snapshots.items():
        board.receive(name, report_of(snapshot), NOW - (20.0 if name == "dave" else 1.0))
    board.receive("bob", report_of(user_snapshot("bob", 1, gpu=1), "gpu"), NOW - 1.0)  # a named server too
    lie = json.loads(report_of(snapshots["eve"]))
    lie["kernels"][0]["pids"].append(snapshots["bob"]["gpus"][0]["processes"][0]["pid"])
    board._last_try.clear()
    board.receive("eve", json.dumps(lie).encode(), NOW - 1.0)  # no sample at receipt: caught when used
    return board


@pytest.mark.parametrize(
    "viewer, role", [("root-admin", "admin"), ("alice", "read"), ("bob", "admin"), ("service:x", "read"), ("", "admin")]
)
def test_each_viewers_answer_is_core_consoles_answer(viewer: str, role: str) -> None:
    """The answer put together from the rows' two serialized forms is exactly the pure join's for
    that viewer: other users' kernels without ids and notebooks for a reader, the viewer's own row
    with its runs and server URL, this viewer's availability words, stale and lying rows."""
    snapshots = _snapshots()
    devices = _sample(snapshots)
    history = {"gpus": [{"uuid": "GPU-0", "t": [NOW - 1, NOW], "utilization": [3, 4], "memory": [1.5, 2.0]}]}
    reserved = {"GPU-1": frozenset({"alice", "bob"})}
    runs = {"alice": (Reservation("GPU-0", own=True, kind="run", since=NOW - 7200, label="train.py", pid=5),)}
    expected_board, board = _board(snapshots), _board(snapshots)
    servers = expected_board.servers(NOW, core.Truth.of(devices))
    expected = core.console(devices, history, servers, viewer, role, reserved=reserved, runs=runs)
    join = ConsoleJoin(devices, history, reserved=reserved, runs=runs)
    join.refresh(board, NOW)
    answer = json.loads(join.answer(viewer, role, {"reports_dropped": {"lying": 1}}))
    assert answer == {**expected, "reports_dropped": {"lying": 1}}
    assert {row["name"] for row in answer["users"]} == {"alice", "bob", "carol", "dave", "eve"}
    dave = next(row for row in answer["users"] if row["name"] == "dave")
    assert (dave["error"] or "").startswith("stale")
    if viewer == "alice":
        assert answer["users"][0]["runs"] and answer["users"][0]["kernels"][0]["notebook"]
        bob = next(row for row in answer["users"] if row["name"] == "bob")
        assert bob["server_url"] is None and {(k["kernel_id"], k["notebook"]) for k in bob["kernels"]} == {(None, None)}


def test_two_answers_of_one_sample_join_each_user_once_and_a_report_rebuilds_its_user_only() -> None:
    snapshots = {name: user_snapshot(name, 2, gpu=n % 2) for n, name in enumerate(("u1", "u2", "u3", "u4"))}
    devices = _sample(snapshots)
    board = Board(interval_s=5.0)
    for name, snapshot in snapshots.items():
        board.receive(name, report_of(snapshot), NOW)
    join = ConsoleJoin(devices, {})
    join.refresh(board, NOW + 1)
    first = join.answer("root-admin", "admin")
    join.refresh(board, NOW + 1.5)
    assert join.answer("root-admin", "admin") == first
    join.answer("u1", "read")
    assert join.rows_built == 4  # two admins and a reader: each user's row joined once
    board.receive("u2", report_of(user_snapshot("u2", 1, gpu=1)), NOW + 3)  # u2's next report
    join.refresh(board, NOW + 3.5)
    assert join.rows_built == 5
    u2 = next(row for row in json.loads(join.answer("root-admin", "admin"))["users"] if row["name"] == "u2")
    assert len(u2["kernels"]) == 1
    join.refresh(board, NOW + 11)  # two intervals since u1, u3, u4 reported: stale, built again
    assert join.rows_built == 8
    join.refresh(board, NOW + 13.5)  # u2 too; a stale row says for how long, so it is built each time
    assert join.rows_built == 12
    assert all((row["error"] or "").startswith("stale") for row in json.loads(join.answer("u1", "read"))["users"])


@pytest.fixture
def hub_gpus(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ScenarioFile:
    scenario = ScenarioFile(tmp_path / "gpus.json", simulate.plausible_gpus(4))
    monkeypatch.setenv(simulate.ENV_VAR, str(scenario.path))
    return scenario


def test_two_console_requests_within_one_sample_join_once_and_keep_each_viewers_privacy(
    hub_gpus: ScenarioFile,
) -> None:
    """Over HTTP: the admin's page, the admin's poll and a reader's poll of one sample join each
    user once; the reader still gets no other user's notebook or kernel id (what the admin's
    request joined is not what the reader is sent)."""

    async def body() -> None:
        run = await start(interval_s=30.0)  # one sample for the whole test
        people(run.hub, hub_gpus)
        code, page = await run.call("", "admin-token")
        assert code == 200
        built = run.service.console_rows_built
        assert built == 2  # alice and bob
        code, admin = await run.call("api/console", "admin-token")
        assert code == 200 and b"bob/secret-0.ipynb" in admin and b"bob/secret-0.ipynb" in page
        code, reader = await run.call("api/console", "alice-token")
        assert code == 200 and b"alice/secret-0.ipynb" in reader
        assert b"bob/secret" not in reader and b"bob-kernel" not in reader and b"ipykernel" not in reader
        assert run.service.console_rows_built == built  # the second and third request joined nothing
        assert json.loads(admin)["reports_dropped"] == dict(run.service.board.dropped)
        assert "reports_dropped" not in json.loads(reader)

    asyncio.run(body())


def test_a_new_sample_is_joined_ahead_of_the_next_request_while_a_console_is_open(hub_gpus: ScenarioFile) -> None:
    async def body() -> None:
        run = await start(interval_s=3600.0)  # no sample of its own during the set-up, however slow
        people(run.hub, hub_gpus)
        sampler = run.service.sampler
        # A sample taken after a console was asked is joined ahead on the loop after the answer (a
        # request can wake a sampler that stopped lingering when a loaded machine makes the set-up
        # slow). Ask until a request answers from the newest sample, whose join it has finished.
        while True:
            first = sampler.latest
            assert (await run.call("api/console", "admin-token"))[0] == 200
            if sampler.latest is first and run.service._joins["en"].devices is first:
                break
        built = run.service.console_rows_built
        # bob's kernels grow (the same PIDs, his report unchanged), then a new sample is taken now
        hub_gpus.write(scenario_of({**run.hub.snapshots, "bob": user_snapshot("bob", 2, gpu=1, mib=4096)}))
        sampler.interval_s = 3000.0  # wakes the sampler
        deadline = time.monotonic() + UNDER_LOAD_S
        while run.service.console_rows_built == built and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert sampler.latest is not first and run.service._joins["en"].devices is sampler.latest
        assert run.service.console_rows_built == built + 1  # bob's row, on the loop, nobody asking
        code, raw = await run.call("api/console", "admin-token")
        assert code == 200 and json.loads(raw)["timestamp"] == sampler.latest.timestamp
        bob = next(row for row in json.loads(raw)["users"] if row["name"] == "bob")
        assert bob["memory_by_gpu"] == {"1": 2 * (4096 << 20)}
        assert run.service.console_rows_built == built + 1  # the request found it joined

    asyncio.run(body())


def test_no_join_ahead_without_an_open_console(hub_gpus: ScenarioFile) -> None:
    """Nobody asked for the console: samples (user servers' api/devices) join nothing."""

    async def body() -> None:
        run = await start(interval_s=0.05)
        people(run.hub, hub_gpus)
        hub_gpus.write(scenario_of(run.hub.snapshots))
        assert (await run.call("api/devices", "bob-token"))[0] == 200
        taken = run.service.sampler.samples_taken
        while run.service.sampler.samples_taken < taken + 3:
            await asyncio.sleep(0.05)
        assert run.service.console_rows_built == 0 and run.service._joins == {}

    asyncio.run(body())


def test_the_join_made_ahead_goes_in_steps_and_a_request_finishes_it() -> None:
    """Made ahead of requests, the join yields every ``rows_per_step`` rows (the service's loop
    answers other requests between steps); a request meanwhile finishes it, and the steps left
    build nothing again."""
    names = [f"u{n:02d}" for n in range(45)]
    snapshots = {name: user_snapshot(name, 1, gpu=n % 2) for n, name in enumerate(names)}
    board = Board(interval_s=5.0)
    for name, snapshot in snapshots.items():
        board.receive(name, report_of(snapshot), NOW)
    join = ConsoleJoin(_sample(snapshots), {})
    assert sum(1 for _ in join.steps(board, NOW + 1, rows_per_step=20)) == 2  # 20 + 20 + 5 rows
    assert join.rows_built == 45
    half = ConsoleJoin(_sample(snapshots), {})
    steps = half.steps(board, NOW + 1, rows_per_step=20)
    next(steps)
    assert half.rows_built == 20
    half.refresh(board, NOW + 1)  # a request comes
    assert half.rows_built == 45 and [name for name, _row in sorted(half.rows.items())] == names
    assert list(steps) == [] and half.rows_built == 45
    assert json.loads(half.answer("root-admin", "admin")) == json.loads(join.answer("root-admin", "admin"))


def test_a_new_sample_rebuilds_only_the_rows_whose_figures_changed() -> None:
    """A steady GPU costs no join: a new sample keeps every row whose user's NVML figures (memory,
    the owners of the PIDs the reports claim) are unchanged."""
    snapshots = {name: user_snapshot(name, 2, gpu=n % 2) for n, name in enumerate(("u1", "u2", "u3"))}
    board = Board(interval_s=5.0)
    for name, snapshot in snapshots.items():
        board.receive(name, report_of(snapshot), NOW)
    first = ConsoleJoin(_sample(snapshots, NOW), {})
    first.refresh(board, NOW + 0.5)
    assert first.rows_built == 3
    same = ConsoleJoin(_sample(snapshots, NOW + 1), {}, previous=first)
    same.refresh(board, NOW + 1.5)
    assert same.rows_built == 0
    grown = {**snapshots, "u2": user_snapshot("u2", 2, gpu=1, mib=4096)}  # u2's processes grow
    later = ConsoleJoin(_sample(grown, NOW + 2), {}, previous=same)
    later.refresh(board, NOW + 2.5)
    assert later.rows_built == 1
    u2 = next(row for row in json.loads(later.answer("u1", "read"))["users"] if row["name"] == "u2")
    assert u2["gpu_memory"] == 2 * (4096 << 20)
    u3_gpu = grown["u3"]["gpus"][0]  # NVML now shows u3's PIDs owned by u1
    taken = {**u3_gpu, "processes": [{**process, "user": "u1"} for process in u3_gpu["processes"]]}
    stolen = {**grown, "u3": {**grown["u3"], "gpus": [taken]}}
    lying = ConsoleJoin(_sample(stolen, NOW + 3), {}, previous=later)
    lying.refresh(board, NOW + 3.5)
    assert lying.rows_built == 2  # u1 holds more, u3's report now claims another account's PIDs
    u3 = next(row for row in json.loads(lying.answer("root-admin", "admin"))["users"] if row["name"] == "u3")
    assert "another account" in (u3["error"] or "")
