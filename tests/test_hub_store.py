"""The usage file (jupyter_gpu.hub.store): sums per hour and day, windows across them, downsampled GPU
history, bounds by age and size, a private file never opened through a link, readers while the
writer writes, and a service killed with SIGKILL that loses nothing committed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import UNDER_LOAD_S

from jupyter_gpu.hub.accounting import Usage
from jupyter_gpu.hub.store import RAW_WINDOW_S, StoreError, UsageStore

HOUR = 3600
T0 = 1_700_000_000 // 86_400 * 86_400  # a midnight (UTC)


def gpu(utilization: float | None, memory: float | None, index: int = 0) -> dict[str, object]:
    return {"uuid": f"GPU-{index}", "index": index, "name": "sim", "utilization": utilization, "memory": memory}


def test_intervals_add_up_per_user_and_notebook_across_hours_and_days(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite")
    for hour in range(72):  # three days, one 60 s interval per hour for ann, every other hour for bob
        usage = [Usage("ann", "a.ipynb", 60.0, 60.0 * 10, 30.0)]
        if hour % 2:
            usage.append(Usage("bob", "", 60.0, 60.0, 0.0))
        store.record(T0 + hour * HOUR + 10, usage)
    whole = {(u.user, u.notebook): u for u in store.usage(T0, T0 + 72 * HOUR - 1)}
    assert whole[("ann", "a.ipynb")] == Usage("ann", "a.ipynb", 72 * 60.0, 72 * 600.0, 72 * 30.0)
    assert whole[("bob", "")].held_s == 36 * 60.0
    # A window that starts and ends inside days reads hours, days and hours: the same sums.
    part = {(u.user, u.notebook): u for u in store.usage(T0 + 5 * HOUR, T0 + 50 * HOUR)}
    assert part[("ann", "a.ipynb")].held_s == 46 * 60.0
    within_a_day = {(u.user, u.notebook): u for u in store.usage(T0 + 30 * HOUR, T0 + 33 * HOUR)}
    assert within_a_day[("ann", "a.ipynb")].held_s == 4 * 60.0 and within_a_day[("bob", "")].held_s == 2 * 60.0
    store.close()
    reopened = UsageStore(tmp_path / "usage.sqlite")  # survives a restart, names included
    reopened.record(T0 + 71 * HOUR + 20, [Usage("ann", "a.ipynb", 1.0, 1.0, 0.0)])
    assert {u.user: u.held_s for u in reopened.usage(T0, T0 + 72 * HOUR)}["ann"] == 72 * 60.0 + 1


def test_gpu_samples_older_than_a_day_become_hourly_means_and_old_rows_go(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite", max_age_s=3 * 86_400)
    for minute in range(0, 4 * 24 * 60, 30):  # four days, a sample every 30 min
        t = T0 + minute * 60
        store.record(t, [Usage("ann", "a", 1.0, 1.0, 0.0)], [gpu(minute % 60, 50.0 if minute % 60 else None)])
    now = T0 + 4 * 86_400
    store.prune(now)
    history = store.gpu_history(T0)
    raw = [row for row in history if row[0] >= now - RAW_WINDOW_S]
    hourly = [row for row in history if row[0] < now - RAW_WINDOW_S]
    assert hourly and all(row[0] % HOUR == 1800 for row in hourly)  # one per hour, mid-hour
    assert {row[4] for row in hourly} == {15.0} and {row[5] for row in hourly} == {50.0}  # means, None left out
    assert len(raw) == 48 and {row[4] for row in raw} == {0.0, 30.0}
    assert min(row[0] for row in history) >= now - 3 * 86_400 - HOUR  # older than max_age: gone
    assert min(u.held_s for u in store.usage(T0, now)) > 0
    assert sum(u.held_s for u in store.usage(T0, now)) <= 3 * 48 + 2


def test_the_file_stays_under_its_size_cap_by_dropping_the_oldest_days(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite", max_bytes=400 * 1024)
    usage = [Usage(f"user{n}", f"notebook-{n}.ipynb", 60.0, 60.0, 0.0) for n in range(200)]
    for hour in range(10 * 24):
        store.record(T0 + hour * HOUR, usage)
    store.prune(T0 + 10 * 86_400)
    assert store.size() <= 400 * 1024
    kept = store.usage(T0, T0 + 10 * 86_400)
    assert kept and max(u.held_s for u in kept) < 10 * 24 * 60  # the oldest days went
    assert {u.held_s for u in store.usage(T0 + 9 * 86_400, T0 + 10 * 86_400)} == {24 * 60.0}  # the newest stay


def test_the_file_is_private_and_never_opened_through_a_link(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite"
    UsageStore(path).close()
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    UsageStore(path).close()
    assert path.stat().st_mode & 0o777 == 0o600  # made private again
    link = tmp_path / "link.sqlite"
    link.symlink_to(path)
    with pytest.raises(StoreError, match="symbolic link"):
        UsageStore(link)
    folder = tmp_path / "folder.sqlite"
    folder.mkdir()
    with pytest.raises(StoreError, match=str(folder)):
        UsageStore(folder)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    garbage.chmod(0o600)
    with pytest.raises(StoreError, match="cannot use the usage file"):
        UsageStore(garbage)


def test_a_reader_sees_whole_intervals_while_the_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite"
    store = UsageStore(path)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for n in range(1, 30):
        store.record(T0 + n, [Usage(f"user{k}", "n", 1.0, 1.0, 0.0) for k in range(10)])
        total, users = reader.execute("SELECT total(held_s), count(*) FROM usage").fetchone()
        assert (total, users) == (10.0 * n, 10)  # every user's share of an interval, or none of it
    reader.close()


def test_a_service_killed_with_sigkill_keeps_every_committed_interval(tmp_path: Path) -> None:
    """The real hub service accounts every 0.2 s in a child process; a reader watches the file; after
    ``kill -9`` the file is sound, holds at least what the reader saw (at most the interval being
    written is lost), and a new service on the same file goes on adding to it."""
    db, scenario = tmp_path / "usage.sqlite", tmp_path / "gpus.json"
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    code = f"import hub_service; hub_service.account_in_this_process({str(db)!r}, {str(scenario)!r}, 0.2)"
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tests, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "accounting"
        seen = 0.0
        deadline = time.monotonic() + UNDER_LOAD_S
        while seen < 3 * 0.2 * 5 and time.monotonic() < deadline:  # five intervals of three kernels
            time.sleep(0.1)
            if db.exists():
                reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                seen = reader.execute("SELECT total(held_s) FROM usage").fetchone()[0]
                reader.close()
        assert seen >= 3.0, "the service accounted nothing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    reader = sqlite3.connect(db)
    assert reader.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    after = reader.execute("SELECT total(held_s) FROM usage").fetchone()[0]
    reader.close()
    assert after >= seen
    store = UsageStore(db)
    users = {u.user for u in store.usage(0)}
    assert users == {"alice", "bob"}
    store.record(time.time(), [Usage("alice", "alice/secret-0.ipynb", 1.0, 1.0, 1.0)])
    assert sum(u.held_s for u in store.usage(0)) == after + 1.0


def test_the_service_refuses_a_usage_file_it_cannot_use_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_gpu.hub.__main__ import main as service_main

    for name, value in (
        ("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:1/"),
        ("JUPYTERHUB_API_TOKEN", "token"),
        ("JUPYTERHUB_API_URL", "http://127.0.0.1:1/hub/api"),
    ):
        monkeypatch.setenv(name, value)
    (tmp_path / "elsewhere.sqlite").write_bytes(b"")
    (tmp_path / "link.sqlite").symlink_to(tmp_path / "elsewhere.sqlite")
    assert service_main(["--usage-db", str(tmp_path / "link.sqlite")]) == 2
    error = capsys.readouterr().err
    assert (
        error
        == f"python -m jupyter_gpu.hub: cannot open the usage file {tmp_path / 'link.sqlite'}: it is a symbolic link\n"
    )
    assert service_main(["--usage-interval", "0"]) == 2
    assert "--usage-interval must be positive" in capsys.readouterr().err
    assert (tmp_path / "elsewhere.sqlite").read_bytes() == b""


def test_the_wal_and_shared_memory_files_are_as_private_as_the_database(tmp_path: Path) -> None:
    """SQLite gives -wal and -shm the database file's mode (os_unix.c, findCreateFileMode), whatever
    the umask (docs/security.md relies on it)."""
    previous = os.umask(0o022)
    try:
        store = UsageStore(tmp_path / "usage.sqlite")
        store.record(T0, [Usage("ann", "a", 1.0, 1.0, 0.0)])
        modes = {
            name: (tmp_path / name).stat().st_mode & 0o777 for name in os.listdir(tmp_path) if name.startswith("usage")
        }
        store.close()
    finally:
        os.umask(previous)
    assert modes == {"usage.sqlite": 0o600, "usage.sqlite-wal": 0o600, "usage.sqlite-shm": 0o600}


def test_names_no_row_uses_are_forgotten_and_come_back_when_used_again(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite", max_age_s=86_400)
    store.record(T0, [Usage("ann", "old.ipynb", 1.0, 1.0, 0.0)])
    store.record(T0 + 3 * 86_400, [Usage("ann", "new.ipynb", 1.0, 1.0, 0.0)])
    store.prune(T0 + 3 * 86_400)
    names = store._db.execute("SELECT user, notebook FROM names").fetchall()
    assert names == [("ann", "new.ipynb")]
    store.record(T0 + 3 * 86_400 + 60, [Usage("ann", "old.ipynb", 2.0, 2.0, 0.0)])
    assert {u.notebook: u.held_s for u in store.usage(T0 + 2 * 86_400, T0 + 4 * 86_400)} == {
        "new.ipynb": 1.0,
        "old.ipynb": 2.0,
    }
