"""Issue 23: a hostile neighbour and the claims board of ``%gpu_select auto``.

The neighbour (``neighbours.Neighbour``, a real second user) writes where every user may write: the
shared claims directory (``shared_tmp``, mode 1777 like ``/tmp``). Each attack is also written the
way the board of jupyter_gpu 0.2 read claims (flat files ``jupyter-gpu-claim-<uid>-<pid>-<hex>.json``
in the directory itself), so these tests show what that layout let a neighbour do.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import UNDER_LOAD_S, wait_until

from jupyter_gpu import simulate
from jupyter_gpu.core.snapshot import GpuInfo
from jupyter_gpu.sources.claims import ClaimBoard, user_folder

UUIDS = [f"GPU-{n:08x}-0000-0000-0000-00000000000{n}" for n in range(4)]


def four_gpus() -> list[GpuInfo]:
    return [
        GpuInfo(index=i, uuid=uuid, name="A100", memory_total=80 << 30, memory_free=80 << 30)
        for i, uuid in enumerate(UUIDS)
    ]


# -- what the neighbour runs (stdlib only: it runs as the neighbour in a forked child)


def _plant(directory: str, uuids: list[str], copies: int, offset_s: float, content: str | None = None) -> int:
    """Start a ``sleep`` and leave ``copies`` claims of it on each of ``uuids``, dated ``offset_s``
    from now (or ``content`` instead of a claim), in the neighbour's own folder and flat in the
    directory. Returns the sleep's PID (the test kills it)."""
    import json
    import secrets
    import socket

    sleeper = subprocess.Popen(
        ["sleep", "120"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(0.05)
    uid = os.getuid()
    folder = os.path.join(directory, f"jupyter-gpu-claims-{uid}")
    os.makedirs(folder, mode=0o755, exist_ok=True)
    for _ in range(copies):
        for uuid in uuids:
            text = content or json.dumps(
                {
                    "version": 1,
                    "uid": uid,
                    "pid": sleeper.pid,
                    "gpu_uuid": uuid,
                    "time": time.time() + offset_s,
                    "host": socket.gethostname(),
                }
            )
            token = secrets.token_hex(8)
            for path in (
                os.path.join(folder, f"{sleeper.pid}-{token}.json"),
                os.path.join(directory, f"jupyter-gpu-claim-{uid}-{sleeper.pid}-{token}.json"),
            ):
                with open(path, "w") as file:
                    file.write(text)
    return sleeper.pid


def _flood(directory: str, count: int) -> None:
    """``count`` junk files with claim-like names in the shared directory (no process needed)."""
    uid = os.getuid()
    for number in range(count):
        with open(os.path.join(directory, f"jupyter-gpu-claim-{uid}-{number + 2}-{number:016x}.json"), "w") as file:
            file.write("{}")


def _squat(directory: str, victim_uid: int, how: str) -> str:
    """Take the victim's folder name first: a folder of the neighbour's, or a link to one."""
    import json
    import socket

    mine = os.path.join(directory, "neighbour-owned")
    os.mkdir(mine, 0o777)
    os.chmod(mine, 0o777)
    target = os.path.join(directory, f"jupyter-gpu-claims-{victim_uid}")
    if how == "link":
        os.symlink(mine, target)
    else:
        os.mkdir(target, 0o777)
        os.chmod(target, 0o777)
        claim = {"version": 1, "uid": victim_uid, "pid": 1, "gpu_uuid": "GPU-aaaa-0", "time": time.time()}
        with open(os.path.join(target, "1-aaaa.json"), "w") as file:
            file.write(json.dumps({**claim, "host": socket.gethostname()}))
    return mine


# -- helpers of the victim's side


@pytest.fixture
def killed() -> Iterator[list[int]]:
    """PIDs to kill at the end of the test (the neighbour's sleeps, the victim's other kernels)."""
    pids: list[int] = []
    yield pids
    for pid in pids:  # a negative one: a process group
        try:
            os.kill(pid, signal.SIGKILL) if pid > 0 else os.killpg(-pid, signal.SIGKILL)
        except OSError:
            pass


def other_kernel(killed: list[int]) -> int:
    """Another kernel of this user: a live process whose PID a board claims for."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    killed.append(process.pid)
    return process.pid


# -- item 1: no file content breaks %load_ext with a default auto selection


def test_hostile_claims_of_a_neighbour_never_stop_load_ext_with_an_auto_default(
    neighbour: Any, shared_tmp: Path, clean: Any, monkeypatch: pytest.MonkeyPatch, killed: list[int], capsys: Any
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel import extension, report

    for content in ("[" * 2040 + "]" * 2040, '{"version": 1, "time": ' + "9" * 400 + "}"):
        killed.append(neighbour.run(_plant, str(shared_tmp), UUIDS[:1], 1, 0.0, content))
    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(shared_tmp))
    monkeypatch.setenv("JUPYTER_GPU_DEFAULT_SELECT", "auto:1")
    ip = InteractiveShell.instance()
    extension.load_ipython_extension(ip)
    try:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
        assert "gpu_monitor" in ip.magics_manager.magics["line"]  # the panel and watch are registered
        assert report._state["callback"] is not None  # and the kernel's report
        ip.run_line_magic("gpu_select", "auto")
    finally:
        extension.unload_ipython_extension(ip)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("error", [ValueError("a case no rule foresaw"), PermissionError(13, "Permission denied")])
def test_a_board_that_fails_in_any_way_means_auto_without_claims_said_once(
    shell: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, error: Exception
) -> None:
    def broken(self: ClaimBoard, uuids: Any) -> list[Path]:
        raise error

    monkeypatch.setattr(ClaimBoard, "claim", broken)
    shell.run_line_magic("gpu_select", "auto")
    shell.run_line_magic("gpu_select", "auto:2")
    notes = [line for line in capsys.readouterr().err.splitlines() if "claims" in line]
    assert len(notes) == 1 and "auto chooses without them" in notes[0], notes
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


# -- item 2: steering auto


def test_one_process_of_a_neighbour_weighs_one_kernel_however_many_claims_it_leaves(
    neighbour: Any, shared_tmp: Path, killed: list[int]
) -> None:
    killed.append(neighbour.run(_plant, str(shared_tmp), UUIDS[1:], 100, 0.0))  # 300 valid claims, one sleep
    chosen = []
    for _ in range(3):  # three kernels of this user starting at once (one after the other under the lock)
        board = ClaimBoard(shared_tmp)
        board.pid = other_kernel(killed)
        load = board.load(four_gpus())
        if not chosen:
            assert load == {1: 1, 2: 1, 3: 1}  # the sleep weighs what one kernel that ran auto:3 weighs
        best = min(range(4), key=lambda index: (load.get(index, 0), index))
        board.claim([UUIDS[best]])
        chosen.append(best)
    assert chosen == [0, 0, 1], chosen  # they spread as beside a real kernel (before: 0, 0, 0)


def test_claims_dated_ahead_or_before_their_process_started_are_refused(
    neighbour: Any, shared_tmp: Path, clean: Any, killed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack of issue 23: ``auto:2 --wait`` refused ("only 1 qualifies") on four free GPUs."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel import magics

    clean.write(simulate.plausible_gpus(4))
    uuids = [gpu.uuid for gpu in simulate_gpus()]
    killed.append(neighbour.run(_plant, str(shared_tmp), uuids[1:2], 1, 50.0))  # 50 s ahead
    killed.append(neighbour.run(_plant, str(shared_tmp), uuids[2:4], 1, -300.0))  # before the sleep started
    monkeypatch.setenv("JUPYTER_GPU_CLAIMS_DIR", str(shared_tmp))
    ip = InteractiveShell.instance()
    magics.register(ip)
    try:
        started = time.monotonic()
        ip.run_line_magic("gpu_select", "auto:2 --wait 120s")
        # chosen at once: waiting would take the whole 120 s (then refuse); half of it is a margin
        # no loaded machine needs for one selection (a 2 s wait against 1.5 s was one it could need)
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and time.monotonic() - started < 60
    finally:
        magics.unregister(ip)


def simulate_gpus() -> list[GpuInfo]:
    from jupyter_gpu.sources import nvml

    return list(nvml.snapshot().gpus)


# -- item 3: flooding the claims directory


def test_sixty_thousand_junk_files_of_a_neighbour_crowd_out_no_claim(
    neighbour: Any, shared_tmp: Path, killed: list[int]
) -> None:
    for uuid in UUIDS[:2]:  # two kernels of this user chose GPUs 0 and 1
        board = ClaimBoard(shared_tmp)
        board.pid = other_kernel(killed)
        board.claim([uuid])
    neighbour.run(_flood, str(shared_tmp), 60_000)
    killed.append(neighbour.run(_plant, str(shared_tmp), UUIDS[2:3], 2000, 0.0, "{}"))  # its own folder, full
    assert ClaimBoard(shared_tmp).load(four_gpus()) == {0: 1, 1: 1}


# -- item 4: what a claim leaves behind, and who owns the folders


def test_a_failed_write_leaves_no_temporary_file(shared_tmp: Path) -> None:
    """A full disk (here: a file size limit of 0, so every write fails with EFBIG) leaves nothing."""
    code = (
        "import resource, signal, sys\nfrom jupyter_gpu.sources.claims import ClaimBoard\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\nboard = ClaimBoard(sys.argv[1])\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n"
        "try:\n    board.claim(['GPU-aaaa-0'])\nexcept OSError as error:\n    print(error.errno)\n"
    )
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code, str(shared_tmp)], capture_output=True, text=True)
        assert done.stdout.strip() == str(__import__("errno").EFBIG), done.stderr
    assert [str(p) for p in shared_tmp.rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("how", ["folder", "link"])
def test_a_neighbour_squatting_this_users_folder_steers_and_receives_nothing(
    neighbour: Any, shared_tmp: Path, shell: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, how: str
) -> None:
    theirs = Path(neighbour.run(_squat, str(shared_tmp), os.getuid(), how))
    monkeypatch.setattr(shell.magics_manager.registry["GpuMagics"], "claims_dir", str(shared_tmp))
    assert ClaimBoard(shared_tmp).load(four_gpus()) == {}  # its planted claim counts for nobody
    shell.run_line_magic("gpu_select", "auto")
    shell.run_line_magic("gpu_select", "auto")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    notes = [line for line in capsys.readouterr().err.splitlines() if "claims" in line]
    assert len(notes) == 1 and "auto chooses without them" in notes[0], notes
    assert ("is a symbolic link" if how == "link" else "is not this user's private folder") in notes[0], notes
    assert list(theirs.iterdir()) == []  # nothing of this user's was written through the neighbour's link
    assert neighbour.owns(user_folder(shared_tmp, os.getuid()))  # and nothing replaced (the directory is sticky)


def test_a_kernel_removes_its_claims_when_it_exits(shared_tmp: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "gpus.json"
    simulate.write_scenario(scenario, simulate.plausible_gpus(2))
    code = (
        "import os\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'jupyter_gpu')\n"
        "assert os.environ['CUDA_VISIBLE_DEVICES'] == '0'\n"
        "folder = os.path.join(os.environ['JUPYTER_GPU_CLAIMS_DIR'], f'jupyter-gpu-claims-{os.getuid()}')\n"
        "print(len(os.listdir(folder)), flush=True)\n"
    )
    env = {
        **os.environ,
        "JUPYTER_GPU_SIMULATE": str(scenario),
        "JUPYTER_GPU_CLAIMS_DIR": str(shared_tmp),
        "JUPYTER_GPU_DEFAULT_SELECT": "auto:1",
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "1", done.stderr  # one claim while it ran
    assert list(user_folder(shared_tmp, os.getuid()).iterdir()) == []  # none after


def _take_directory(path: str, how: str) -> str:
    """Make the claims directory an admin configured before anybody else: the neighbour's own 1777
    folder, or a link at its name to one."""
    mine = path + "-theirs"
    os.mkdir(mine)
    os.chmod(mine, 0o1777)
    if how == "link":
        os.symlink(mine, path)
    else:
        os.rename(mine, path)
        mine = path
    return mine


@pytest.mark.parametrize("how, words", [("folder", "belongs to another user"), ("link", "symbolic link")])
def test_a_claims_directory_a_neighbour_made_first_is_not_used(
    neighbour: Any, shared_tmp: Path, shell: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, how: str, words: str
) -> None:
    configured = shared_tmp / "gpu-claims"
    theirs = Path(neighbour.run(_take_directory, str(configured), how))
    monkeypatch.setattr(shell.magics_manager.registry["GpuMagics"], "claims_dir", str(configured))
    shell.run_line_magic("gpu_select", "auto")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    notes = [line for line in capsys.readouterr().err.splitlines() if "claims" in line]
    assert len(notes) == 1 and words in notes[0], notes
    assert list(theirs.iterdir()) == []  # nothing written where the neighbour could read, move or delete it


def _lock_held(directory: str) -> bool:
    """Whether someone holds the claims lock (``flock`` on the directory) now; takes it for an
    instant when nobody does."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the only descriptor releases a lock taken here
    return False


def _hold_lock(directory: str) -> int:
    """Hold the claims lock forever (``flock(1)`` on the directory); returns the holder's PID."""
    holder = subprocess.Popen(
        ["flock", directory, "sleep", "120"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    # until flock(1) holds it (a fixed 0.3 s held only while flock got the CPU in time)
    wait_until(lambda: _lock_held(directory), UNDER_LOAD_S, "flock(1) to hold the claims lock")
    return holder.pid


def test_a_neighbour_holding_the_lock_forever_delays_auto_once(
    neighbour: Any, shared_tmp: Path, killed: list[int]
) -> None:
    from jupyter_gpu.sources import claims

    holder = neighbour.run(_hold_lock, str(shared_tmp))
    killed.append(-holder)  # its process group
    board = ClaimBoard(shared_tmp, lock_timeout_s=0.5)
    with board.locked() as obtained:
        assert obtained is False and board.lock_missed  # waited lock_timeout_s, then chose without it
    with board.locked() as obtained:
        assert obtained is False  # this time waited only CONTENDED_WAIT_S
    assert board.lock_timeout_s > claims.CONTENDED_WAIT_S
    os.killpg(holder, signal.SIGKILL)
    wait_until(lambda: not _lock_held(str(shared_tmp)), what="the lock to go with its holder")
    with board.locked() as obtained:
        assert obtained is True and not board.lock_missed
