"""Host-wide GPU claims: safe between users, never required, ignored once stale."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import idle_gpus

from jupyter_gpu.core.snapshot import GpuInfo
from jupyter_gpu.sources.claims import MAX_LOGGED, ClaimBoard, user_folder

UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2"]


def gpus(*processes: tuple[int, int]) -> list[GpuInfo]:
    """Three idle GPUs; ``processes``: (gpu index, pid) NVML shows."""
    return idle_gpus(UUIDS, *processes)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)  # like /tmp
    return folder


@pytest.fixture
def other_process() -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def write_claim(folder: Path, pid: int, uuid: str, when: float | None = None, **extra: object) -> Path:
    """A claim as another kernel of this user writes it (through the real code, from its PID)."""
    board = ClaimBoard(folder)
    board.pid = pid
    [path] = board.claim([uuid])
    if when is not None or extra:
        data = json.loads(path.read_text())
        data.update(extra)
        if when is not None:
            data["time"] = when
        path.write_text(json.dumps(data))
    return path


def own_folder(shared: Path) -> Path:
    """This user's claims folder in ``shared`` (made as the real code makes it)."""
    folder = user_folder(shared, os.getuid())
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder


def test_claims_count_as_load_until_the_process_shows_in_nvml_goes_or_times_out(
    shared: Path, other_process: subprocess.Popen
) -> None:
    board = ClaimBoard(shared, ttl_s=600)
    assert board.problem is None
    write_claim(shared, other_process.pid, UUIDS[1])
    write_claim(shared, other_process.pid, UUIDS[1])
    assert board.load(gpus()) == {1: 1}  # one process weighs one selection: each GPU once
    assert board.load(gpus((1, other_process.pid))) == {}  # NVML counts it now
    old = write_claim(shared, other_process.pid, UUIDS[2], when=time.time() - 601)
    assert 2 not in board.load(gpus()) and not old.exists()  # expired, and this user's stale file is removed
    other_process.kill()
    other_process.wait()
    assert board.load(gpus()) == {}  # the process is gone


def test_own_claims_are_written_atomically_replaced_and_released(shared: Path) -> None:
    board = ClaimBoard(shared)
    first = board.claim([UUIDS[0]])
    assert [p.name.startswith(f"{os.getpid()}-") for p in first] == [True]
    assert first[0].parent == user_folder(shared, os.getuid())
    assert (first[0].stat().st_mode & 0o777) == 0o644 and (first[0].parent.stat().st_mode & 0o7777) == 0o755
    assert [p.name for p in first[0].parent.iterdir()] == [first[0].name]  # no temporary file left
    second = board.claim([UUIDS[1], UUIDS[2]])
    assert not first[0].exists() and all(p.exists() for p in second)
    assert board.load(gpus()) == {}  # this process's own claims are not load for itself
    board.release()
    assert not list(user_folder(shared, os.getuid()).iterdir())


def test_hostile_files_are_ignored_with_one_log_line_each(
    shared: Path, other_process: subprocess.Popen, caplog: pytest.LogCaptureFixture
) -> None:
    board = ClaimBoard(shared)
    good = write_claim(shared, other_process.pid, UUIDS[0])
    mine = own_folder(shared)
    name = f"{other_process.pid}-%s.json"  # a live process of this user: the file is opened
    (mine / (name % "junk")).write_text("{not json")
    (mine / (name % "list")).write_text("[1, 2]")
    (mine / (name % "big")).write_text(" " * 5000)
    (mine / (name % "uuid")).write_text(
        json.dumps(
            {
                "version": 1,
                "uid": os.getuid(),
                "pid": other_process.pid,
                "gpu_uuid": "../../etc",
                "time": time.time(),
                "host": board.host,
            }
        )
    )
    (mine / (name % "nan")).write_text(
        json.dumps(
            {
                "version": 1,
                "uid": os.getuid(),
                "pid": other_process.pid,
                "gpu_uuid": UUIDS[1],
                "time": float("nan"),
                "host": board.host,
            }
        )
    )
    os.symlink(good, mine / (name % "link"))
    os.mkfifo(mine / (name % "fifo"))  # must not block the reader
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.sources.claims"):
        assert board.load(gpus()) == {0: 1}
        assert board.load(gpus()) == {0: 1}
    refused = [r.getMessage() for r in caplog.records]
    assert len(refused) == 7, refused  # once per file, not once per look
    for words in (
        "not JSON",
        "not a JSON object",
        "larger than 4096",
        "not a GPU UUID",
        "NaN is not a number",
        "symbolic link",
        "not a regular file",
    ):
        assert any(words in message for message in refused), (words, refused)


def test_thousands_of_hostile_files_do_not_flood_the_notebook(shared: Path, caplog: pytest.LogCaptureFixture) -> None:
    """In a kernel the log lines show under the cell: anyone can leave any number of files in /tmp."""
    for number in range(300):
        (own_folder(shared) / f"{os.getpid()}-n{number}.json").write_text("{not json")
    board = ClaimBoard(shared)
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.sources.claims"):
        assert board.load(gpus()) == {}
        assert board.load(gpus()) == {}
    refused = [r.getMessage() for r in caplog.records]
    assert len(refused) == MAX_LOGGED + 1, len(refused)
    assert "no longer logged" in refused[-1]
    assert not any("\u202e" in message for message in refused), refused


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_claim_naming_another_user_is_a_forgery(
    shared: Path, other_process: subprocess.Popen, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_claim(shared, other_process.pid, UUIDS[0], uid=4242)  # file owned by root, claims uid 4242
    board = ClaimBoard(shared)
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.sources.claims"):
        assert board.load(gpus()) == {}
    assert "forged" in caplog.text
    os.chown(path, 4242, 4242)  # now owner and payload agree, but PID belongs to root, not uid 4242
    assert board.load(gpus()) == {}


@pytest.mark.parametrize(
    "mode, owner, words",
    [
        (0o777, None, "without the sticky bit"),
        (0o1777, 4242, "belongs to another user"),
    ],
)
def test_unsafe_directories_are_not_used(tmp_path: Path, mode: int, owner: int | None, words: str) -> None:
    if owner is not None and os.getuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    folder = tmp_path / "claims"
    folder.mkdir()
    os.chmod(folder, mode)
    if owner is not None:
        os.chown(folder, owner, owner)
    board = ClaimBoard(folder)
    assert board.problem is not None and words in board.problem
    assert board.load(gpus()) == {}


def test_a_missing_directory_or_a_symlink_means_no_claims(tmp_path: Path) -> None:
    assert "cannot be used" in ClaimBoard(tmp_path / "nowhere").problem
    os.symlink(tmp_path, tmp_path / "link")
    assert "symbolic link" in ClaimBoard(tmp_path / "link").problem


def test_the_lock_is_not_required(shared: Path) -> None:
    import fcntl

    holder = os.open(shared, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # someone holds it forever
    try:
        board = ClaimBoard(shared, lock_timeout_s=0.05)
        with board.locked() as obtained:
            assert obtained is False
        os.close(holder)
        holder = -1
        with board.locked() as obtained:
            assert obtained is True
    finally:
        if holder >= 0:
            os.close(holder)


def test_a_temporary_file_of_a_writer_that_died_is_removed_later(shared: Path) -> None:
    folder = own_folder(shared)
    dead, fresh = folder / ".tmpdeadbeef.tmp", folder / ".tmpfresh000.tmp"
    dead.write_text("")
    fresh.write_text("")
    os.utime(dead, (time.time() - 120, time.time() - 120))  # killed mid-write two minutes ago
    assert ClaimBoard(shared).load(gpus()) == {}
    assert not dead.exists() and fresh.exists()  # a writer may still be at work on the fresh one


def test_remove_ended_takes_the_claims_of_ended_processes_and_reused_pids_only(
    shared: Path, other_process: subprocess.Popen
) -> None:
    from jupyter_gpu.sources.processes import process_start

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = write_claim(shared, other_process.pid, UUIDS[0])
    gone = write_claim(shared, dead.pid, UUIDS[1])
    reused = write_claim(shared, other_process.pid, UUIDS[2], when=time.time() - 3600)  # the PID's predecessor
    board = ClaimBoard(shared)
    mine = board.claim([UUIDS[0]])
    assert board.remove_ended() == 2
    assert live.exists() and not gone.exists() and not reused.exists() and all(p.exists() for p in mine)
    # a process known to be ending (a kernel just shut down, not yet exited): its claims go too
    assert board.remove_ended([(other_process.pid, process_start(other_process.pid))]) == 1
    assert not live.exists()
    # ... but not when the PID now runs a later process than the one that ended
    again = write_claim(shared, other_process.pid, UUIDS[0])
    assert board.remove_ended([(other_process.pid, -1)]) == 0 and again.exists()


def test_remove_ended_never_touches_other_users_folders_or_links(shared: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "1-abc.json").write_text("{}")
    user_folder(shared, os.getuid()).symlink_to(target)
    assert ClaimBoard(shared).remove_ended() == 0
    assert (target / "1-abc.json").exists()
