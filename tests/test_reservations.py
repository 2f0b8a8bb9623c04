"""Issue 30 items 3-4: claims that say what holds them, and reservations as every face sees them.

A claim (``sources/claims.py``) says its kind (a kernel's selection, or ``jupyter-gpu run``), a label
for its owner and the run's child; a GPU claimed by a process that holds nothing on it yet is
*reserved*. Another user's reservation is "reserved by another user" and nothing more: its label
never reaches anybody else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import UNDER_LOAD_S, idle_gpus

from jupyter_gpu.core.availability import (
    FREE,
    IN_USE_BY_YOU,
    RESERVED_BY_ANOTHER_USER,
    RESERVED_BY_YOU,
    Reservation,
    run_description,
    run_of,
    unit_availability,
)
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess
from jupyter_gpu.sources.claims import ClaimBoard, user_folder

UUIDS = [f"GPU-{n:08x}-0000-0000-0000-00000000000{n}" for n in range(3)]


def three_gpus(*processes: tuple[int, int]) -> list[GpuInfo]:
    """Three idle GPUs; ``processes``: (gpu index, pid) NVML shows."""
    return idle_gpus(UUIDS, *processes)


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts (claimants, a run's child); killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def sleeper(started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    started.append(process)
    return process


def claim_as(shared_tmp: Path, pid: int, uuids: list[str], **holder: Any) -> list[Path]:
    """Claims written through the real code as this user's process ``pid``."""
    board = ClaimBoard(shared_tmp)
    board.pid = pid
    return board.claim(uuids, **holder)


def test_a_claim_says_its_kind_label_and_child(shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    run, child = sleeper(sleepers), sleeper(sleepers)
    [path] = claim_as(shared_tmp, run.pid, UUIDS[2:], kind="run", label="train.py", child_pid=child.pid)
    data = json.loads(path.read_text())
    assert (data["version"], data["kind"], data["label"], data["child_pid"]) == (2, "run", "train.py", child.pid)
    [reservation] = ClaimBoard(shared_tmp).reservations(three_gpus())
    assert reservation.own and reservation.kind == "run" and reservation.label == "train.py"
    assert (reservation.pid, reservation.child_pid, reservation.holding) == (run.pid, child.pid, False)
    with pytest.raises(ValueError, match="kind"):
        ClaimBoard(shared_tmp).claim(UUIDS[:1], kind="daemon")


def test_a_version_1_claim_is_still_a_kernel_claim(shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    kernel = sleeper(sleepers)
    [path] = claim_as(shared_tmp, kernel.pid, UUIDS[:1])
    data = json.loads(path.read_text())
    for key in ("kind", "label", "child_pid"):
        del data[key]
    path.write_text(json.dumps({**data, "version": 1}))
    [reservation] = ClaimBoard(shared_tmp).reservations(three_gpus())
    assert (reservation.kind, reservation.label, reservation.child_pid) == ("kernel", "", None)


def test_a_run_holds_its_claim_while_it_lives_a_kernel_for_the_ttl(
    shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    run, kernel = sleeper(sleepers), sleeper(sleepers)
    claim_as(shared_tmp, run.pid, UUIDS[:1], kind="run", label="train.py")
    claim_as(shared_tmp, kernel.pid, UUIDS[1:2])
    later = time.time() + 3600  # an hour on: the kernel's claim (ttl 600 s) is over, the run's is not
    board = ClaimBoard(shared_tmp, ttl_s=600)
    assert [r.gpu_uuid for r in board.reservations(three_gpus(), now=later)] == UUIDS[:1]
    assert board.load(three_gpus(), now=later) == {0: 1}


def test_a_run_is_no_longer_reserved_once_its_child_or_a_descendant_holds_memory(
    shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    run, child = sleeper(sleepers), sleeper(sleepers)
    claim_as(shared_tmp, run.pid, UUIDS[:2], kind="run", label="train.py", child_pid=child.pid)
    board = ClaimBoard(shared_tmp)
    held = board.reservations(three_gpus((0, child.pid)))
    assert {r.gpu_uuid: r.holding for r in held} == {UUIDS[0]: True, UUIDS[1]: False}
    assert board.load(three_gpus((0, child.pid))) == {1: 1}  # auto counts the child as NVML's, once
    worker = 99999  # a DataLoader worker of the child: its ancestors name the child
    held = board.reservations(three_gpus((1, worker)), ancestors={worker: [child.pid, run.pid]})
    assert {r.gpu_uuid: r.holding for r in held} == {UUIDS[0]: False, UUIDS[1]: True}


def test_a_sigkilled_claimants_reservation_disappears(
    shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    run = sleeper(sleepers)
    claim_as(shared_tmp, run.pid, UUIDS[:1], kind="run", label="train.py")
    board = ClaimBoard(shared_tmp)
    assert [r.gpu_uuid for r in board.reservations(three_gpus())] == UUIDS[:1]
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert board.reservations(three_gpus()) == []
    assert board.load(three_gpus()) == {}
    assert not list(user_folder(shared_tmp, os.getuid()).iterdir())  # this user's dead claim is tidied away


def test_a_label_is_sanitized_and_bounded(shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    run = sleeper(sleepers)
    [path] = claim_as(shared_tmp, run.pid, UUIDS[:1], kind="run", label="evil\u202e.py" + "x" * 500)
    label = json.loads(path.read_text())["label"]
    assert "\u202e" not in label and len(label) <= 80
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "label": "a\u2066b" * 50}))  # written by hand: read back sanitized
    [reservation] = ClaimBoard(shared_tmp).reservations(three_gpus())
    assert "\u2066" not in reservation.label and len(reservation.label) <= 80


def _plant_run(directory: str, uuid: str, label: str) -> int:
    """As the neighbour: start a ``sleep`` and leave a run's claim of it on ``uuid`` labelled ``label``."""
    import secrets
    import socket

    process = subprocess.Popen(
        ["sleep", "120"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(0.05)
    uid = os.getuid()
    folder = os.path.join(directory, f"jupyter-gpu-claims-{uid}")
    os.makedirs(folder, mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    claim = {
        "version": 2,
        "uid": uid,
        "pid": process.pid,
        "gpu_uuid": uuid,
        "time": time.time(),
        "host": socket.gethostname(),
        "kind": "run",
        "label": label,
        "child_pid": process.pid,
    }
    path = os.path.join(folder, f"{process.pid}-{secrets.token_hex(8)}.json")
    with open(path, "w") as file:
        file.write(json.dumps(claim))
    os.chmod(path, 0o644)
    return process.pid


def test_another_users_reservation_is_all_anybody_else_learns(
    neighbour: Any, shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    pid = neighbour.run(_plant_run, str(shared_tmp), UUIDS[1], "secret-experiment.py")
    try:
        mine = sleeper(sleepers)
        claim_as(shared_tmp, mine.pid, UUIDS[2:], kind="kernel")
        gpus = three_gpus()
        reservations = ClaimBoard(shared_tmp).reservations(gpus)
        theirs = [r for r in reservations if not r.own]
        assert [(r.gpu_uuid, r.label, r.pid, r.child_pid, r.since) for r in theirs] == [(UUIDS[1], "", None, None, 0.0)]
        assert "secret" not in json.dumps([r.to_dict() for r in reservations])
        assert [unit_availability(gpu, reservations, me="nobody-here") for gpu in gpus] == [
            FREE,
            RESERVED_BY_ANOTHER_USER,
            RESERVED_BY_YOU,
        ]
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_runs_process_is_the_users_own_and_described_from_its_claim() -> None:
    run = Reservation(UUIDS[0], own=True, kind="run", since=1000.0, label="train.py", pid=10, child_pid=11)
    foreign = Reservation(UUIDS[0], own=False, kind="run")
    assert run_of(12, [11, 10, 1], [foreign, run]) is run  # a worker of the child
    assert run_of(12, [5, 1], [foreign, run]) is None
    assert run_description(run, 1000.0 + 2 * 3600) == "train.py (jupyter-gpu run), 2 h"
    gpu = three_gpus((0, 12))[0]
    assert unit_availability(gpu, [run], me=None, own_pids={12}) == IN_USE_BY_YOU


# -- the Python faces: the terminal and the panel say the same words


def _faces_world() -> tuple[list[GpuInfo], Any]:
    """GPU 0 free, 1 reserved by you, 2 reserved by another user, 3 holding this user's run's worker."""
    from jupyter_gpu.core.availability import Viewer

    gpus = [
        GpuInfo(index=i, uuid=f"GPU-{i}", name="A100", memory_total=80 << 30, memory_free=80 << 30) for i in range(3)
    ]
    worker = GpuProcess(4321, 2 << 30, user="me", name="python")
    gpus.append(
        GpuInfo(index=3, uuid="GPU-3", name="A100", memory_total=80 << 30, memory_used=2 << 30, processes=(worker,))
    )
    view = Viewer(
        me="me",
        reservations=(Reservation("GPU-1", own=True, pid=77), Reservation("GPU-2", own=False)),
        runs={4321: "train.py (jupyter-gpu run), 2 h"},
    )
    return gpus, view


def test_the_terminal_says_reserved_and_names_the_users_run() -> None:
    from jupyter_gpu.cli import format_table
    from jupyter_gpu.core.snapshot import Snapshot

    gpus, view = _faces_world()
    text = format_table(
        Snapshot(nvml_available=True, timestamp=0.0, gpus=tuple(gpus), driver_version="550"), viewer=view
    )
    assert all(len(line) <= 80 for line in text.splitlines())
    words = " ".join(text.split())
    assert "yours: train.py (jupyter-gpu run), 2 h" in words
    assert (
        "Availability: free: GPU 0; reserved by you: GPU 1; reserved by another user: GPU 2; in use by you: GPU 3"
        in words
    )


def test_the_panel_says_reserved_and_names_the_users_run() -> None:
    from jupyter_gpu.panel.render import processes_html, who_text

    gpus, view = _faces_world()
    assert [who_text(gpu, own_pid=1, viewer=view) for gpu in gpus[:3]] == [
        "free",
        "reserved by you",
        "reserved by another user",
    ]
    assert "◀ yours: train.py (jupyter-gpu run), 2 h" in processes_html(gpus[3], own_pid=1, viewer=view)


def test_the_viewer_finds_a_runs_child_process_from_the_claim(
    shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu.sources.claims import viewer
    from jupyter_gpu.sources.processes import current_user

    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(shared_tmp))
    run = sleeper(sleepers)
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '60'])"])
    sleepers.append(child)
    claim_as(shared_tmp, run.pid, UUIDS[:2], kind="run", label="train.py", child_pid=child.pid)
    me = current_user()
    deadline = time.time() + UNDER_LOAD_S
    grandchild = None
    while grandchild is None and time.time() < deadline:  # the child's own child: `sleep`
        import psutil

        children = psutil.Process(child.pid).children()
        grandchild = children[0].pid if children else None
        time.sleep(0.05)
    assert grandchild is not None
    gpus = [
        GpuInfo(index=0, uuid=UUIDS[0], name="A100", processes=(GpuProcess(grandchild, 1 << 30, user=me),)),
        GpuInfo(index=1, uuid=UUIDS[1], name="A100"),
    ]
    claims = viewer(gpus, me, now=time.time())
    assert claims.run(grandchild) is not None and claims.run(grandchild).startswith(
        "yours: train.py (jupyter-gpu run), "
    )
    assert [claims.state(gpu) for gpu in gpus] == [IN_USE_BY_YOU, RESERVED_BY_YOU]


def test_the_hub_console_tells_each_viewer_whose_reservation_it_is_and_nothing_more() -> None:
    from jupyter_gpu.core.snapshot import Snapshot
    from jupyter_gpu.hub import core

    gpus = tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="A100", memory_total=80 << 30) for i in range(3))
    devices = Snapshot(nvml_available=True, timestamp=1.0, gpus=gpus)
    reserved = {"GPU-1": frozenset({"alice"})}
    seen = {
        viewer: [g["availability"] for g in core.console(devices, {}, [], viewer, "read", reserved=reserved)["gpus"]]
        for viewer in ("alice", "bob")
    }
    assert seen == {
        "alice": ["free", "reserved by you", "free"],
        "bob": ["free", "reserved by another user", "free"],
    }
    assert "alice" not in json.dumps(core.console(devices, {}, [], "bob", "read", reserved=reserved)["gpus"])


def test_the_hub_reads_reservations_by_account(
    neighbour: Any, shared_tmp: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    import pwd

    from jupyter_gpu.sources.claims import reserved_accounts, runs_by_account

    pid = neighbour.run(_plant_run, str(shared_tmp), UUIDS[1], "secret.py")
    try:
        mine = sleeper(sleepers)
        claim_as(shared_tmp, mine.pid, UUIDS[2:])
        found = reserved_accounts(three_gpus(), directory=str(shared_tmp))
        me = pwd.getpwuid(os.getuid()).pw_name
        assert found[UUIDS[2]] == {me} and len(found[UUIDS[1]]) == 1 and me not in found[UUIDS[1]]
        assert reserved_accounts(three_gpus((1, pid)), directory=str(shared_tmp)).get(UUIDS[1]) is None  # in use
        runs = runs_by_account(three_gpus(), directory=str(shared_tmp))  # the console shows each to its owner
        [(account, [run])] = runs.items()
        assert account != me and (run.kind, run.label, run.gpu_uuid) == ("run", "secret.py", UUIDS[1])
    finally:
        os.kill(pid, signal.SIGKILL)


def _neighbours_view(directory: str, uuids: list[str]) -> list[tuple[str, bool, str]]:
    """As the neighbour: the host's reservations and the one rule's words for each GPU, from their board."""
    from jupyter_gpu.core.availability import unit_availability as words
    from jupyter_gpu.core.snapshot import GpuInfo as Gpu
    from jupyter_gpu.sources.claims import ClaimBoard as Board

    gpus = [Gpu(index=i, uuid=uuid, name="A100") for i, uuid in enumerate(uuids)]
    found = Board(directory).reservations(gpus)
    return [(gpu.uuid, any(r.own for r in found), words(gpu, found, "neighbour")) for gpu in gpus]


def test_a_kernel_that_selected_a_gpu_and_allocated_nothing_reserves_it_for_both_users_to_see(
    shell: Any, neighbour: Any, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from jupyter_gpu.sources.nvml import snapshot

    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(shared_tmp))
    shell.run_line_magic("gpu_select", "1")  # an explicit selection: no auto, still a claim
    gpus = snapshot().gpus
    uuids = [gpu.uuid for gpu in gpus]
    mine = ClaimBoard(shared_tmp).reservations(gpus)
    assert [(r.gpu_uuid, r.own, r.kind, r.pid) for r in mine] == [(uuids[1], True, "kernel", os.getpid())]
    assert [unit_availability(gpu, mine, "me") for gpu in gpus] == [FREE, RESERVED_BY_YOU]
    assert neighbour.run(_neighbours_view, str(shared_tmp), uuids) == [
        (uuids[0], False, FREE),
        (uuids[1], False, RESERVED_BY_ANOTHER_USER),
    ]
    shell.run_line_magic("gpu_select", "none")  # no GPU chosen: the claim goes
    assert ClaimBoard(shared_tmp).reservations(gpus) == []


def test_autos_reason_says_reserved_by_another_user_in_the_rules_words(
    shell: Any, neighbour: Any, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from jupyter_gpu.sources.nvml import snapshot

    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(shared_tmp))
    uuids = [gpu.uuid for gpu in snapshot().gpus]
    planted = [neighbour.run(_plant_run, str(shared_tmp), uuid, "secret.py") for uuid in uuids]
    try:
        shell.run_line_magic("gpu_select", "auto")  # both GPUs reserved by the neighbour: one is chosen anyway
        out = capsys.readouterr().out
        assert "chosen by auto: reserved by another user" in out, out
        assert "secret" not in out
    finally:
        for pid in planted:
            os.kill(pid, signal.SIGKILL)


def test_jupyter_gpu_status_reads_the_board_json_and_table(
    scenario: Any, sleepers: list[subprocess.Popen[bytes]], capsys: Any
) -> None:
    from jupyter_gpu.cli import main
    from jupyter_gpu.sources.claims import claims_directory
    from jupyter_gpu.sources.nvml import snapshot

    uuids = [gpu.uuid for gpu in snapshot().gpus]
    run = sleeper(sleepers)
    claim_as(Path(claims_directory()), run.pid, uuids[1:], kind="run", label="train.py")
    assert main(["status", "--json", "--source", "local"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [gpu["availability"] for gpu in data["gpus"]] == [FREE, RESERVED_BY_YOU]
    assert main(["status", "--source", "local"]) == 0
    assert "Availability: free: GPU 0; reserved by you: GPU 1" in " ".join(capsys.readouterr().out.split())


def test_the_hub_console_shows_a_run_to_its_owner_only_admins_included() -> None:
    from jupyter_gpu.core.snapshot import Snapshot
    from jupyter_gpu.hub import core

    gpus = tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="A100", memory_total=80 << 30) for i in range(2))
    devices = Snapshot(nvml_available=True, timestamp=10_000.0, gpus=gpus)
    run = Reservation("GPU-1", own=True, kind="run", since=10_000.0 - 7200, label="train.py", pid=5)
    servers = [
        core.UserServer("alice", None, {"gpus": [], "kernels": []}),
        core.UserServer("bob", None, {"gpus": [], "kernels": []}),
    ]
    rows = {
        (viewer, role): {
            u["name"]: u["runs"]
            for u in core.console(devices, {}, servers, viewer, role, runs={"alice": (run,)})["users"]
        }
        for viewer, role in (("alice", "read"), ("bob", "read"), ("bob", "admin"))
    }
    assert rows[("alice", "read")] == {"alice": ["train.py (jupyter-gpu run), 2 h on GPU 1"], "bob": []}
    assert rows[("bob", "read")] == rows[("bob", "admin")] == {"alice": [], "bob": []}
