"""The hub service's SQLite file: usage per hour and the GPU history, kept across restarts.

One writer (the service's accounting loop, one thread: :class:`UsageStore` is not shared between
threads) and any number of readers (``sqlite3 usage.sqlite`` while the service runs): the file is in
WAL mode, where readers never block the writer nor see half of a transaction
(https://www.sqlite.org/wal.html). Every accounting interval is one transaction
(:meth:`UsageStore.record`), committed before the next sample: a ``kill -9`` of the service, or a
crash of the machine (``synchronous=NORMAL`` in WAL mode keeps every committed transaction but the
last ones not yet checkpointed on power loss; a process kill loses none), costs at most the interval
being sampled.

Tables (``names`` interns the user and notebook strings, so a row of ``usage`` is a few numbers):

- ``usage(hour, name, held_s, byte_s, idle_s)``: per hour (Unix time // 3600) and (user, notebook),
  the sums of :class:`jupyter_gpu.hub.accounting.Usage` — already the downsampled form, whatever the
  interval (an interval adds to its hour's row: ``INSERT ... ON CONFLICT DO UPDATE``);
- ``gpu_samples(t, gpu, ...)``: one row per GPU per interval, for :data:`RAW_WINDOW_S` (a day), then
  folded into ``gpu_hourly`` (means per hour) by :meth:`UsageStore.prune`.

Bounds: rows older than ``max_age_s`` (31 days by default) are deleted once an hour; if the file
still grows past ``max_bytes`` the oldest days go first until it fits (``auto_vacuum=INCREMENTAL``
gives the pages back to the file system). 30 days of 200 users x 2 notebooks x 8 GPUs are about
15 MiB (``benchmarks/bench_accounting.py``).

The file is the service's own: created 0600 (SQLite gives the ``-wal`` and ``-shm`` files the same
mode), never opened through a symbolic link, refused when another account owns it.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .accounting import Usage

RAW_WINDOW_S = 86_400  # GPU samples kept at the interval; older ones as hourly means
MAX_AGE_S = 31 * 86_400
MAX_BYTES = 64 * 1024 * 1024
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS names (
    id INTEGER PRIMARY KEY, user TEXT NOT NULL, notebook TEXT NOT NULL, UNIQUE (user, notebook));
CREATE TABLE IF NOT EXISTS usage (
    hour INTEGER NOT NULL, name INTEGER NOT NULL,
    held_s REAL NOT NULL, byte_s REAL NOT NULL, idle_s REAL NOT NULL,
    PRIMARY KEY (hour, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_daily (
    day INTEGER NOT NULL, name INTEGER NOT NULL,
    held_s REAL NOT NULL, byte_s REAL NOT NULL, idle_s REAL NOT NULL,
    PRIMARY KEY (day, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_samples (
    t REAL NOT NULL, gpu TEXT NOT NULL, idx INTEGER NOT NULL, gpu_name TEXT NOT NULL,
    utilization REAL, memory REAL, PRIMARY KEY (t, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_hourly (
    hour INTEGER NOT NULL, gpu TEXT NOT NULL, idx INTEGER NOT NULL, gpu_name TEXT NOT NULL,
    utilization REAL, memory REAL, PRIMARY KEY (hour, gpu)) WITHOUT ROWID;
"""


class StoreError(Exception):
    """The usage file cannot be used (one line: which file and why)."""


def _open_private(path: Path) -> None:
    """Create ``path`` 0600 if missing; refuse a link, a non-file, or a file of another account."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        reason = "it is a symbolic link" if error.errno == errno.ELOOP else (error.strerror or str(error))
        raise StoreError(f"cannot open the usage file {path}: {reason}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"cannot open the usage file {path}: not a regular file")
        if info.st_uid != os.geteuid():
            raise StoreError(f"cannot open the usage file {path}: another account owns it")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class UsageStore:
    """Usage per hour and GPU samples in the SQLite file ``path`` (see the module doc)."""

    def __init__(self, path: str | os.PathLike[str], max_age_s: float = MAX_AGE_S, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        _open_private(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0, check_same_thread=False)
            self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect on a new file
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"cannot use the usage file {self.path}: SQLite refused WAL mode ({mode})")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
            version = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif version[0] != str(SCHEMA_VERSION):
                raise StoreError(f"the usage file {self.path} has schema {version[0]}, not {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as error:
            raise StoreError(f"cannot use the usage file {self.path}: {error}") from None
        self._names: dict[tuple[str, str], int] = dict(
            ((user, notebook), ident) for ident, user, notebook in self._db.execute("SELECT * FROM names")
        )
        self._pruned = 0.0

    def close(self) -> None:
        self._db.close()

    def _name(self, user: str, notebook: str) -> int:
        key = (user, notebook)
        ident = self._names.get(key)
        if ident is None:
            cursor = self._db.execute("INSERT INTO names (user, notebook) VALUES (?, ?)", key)
            ident = self._names[key] = int(cursor.lastrowid or 0)
        return ident

    def record(self, t: float, usage: Iterable[Usage], gpus: Iterable[dict[str, Any]] = ()) -> None:
        """One interval ending at ``t``: its usage added to its hour, its GPU samples, one transaction.

        ``gpus``: ``{"uuid", "index", "name", "utilization", "memory"}`` (utilization and memory in
        percent, None when unknown). Prunes once an hour (:meth:`prune`).
        """
        hour = int(t // 3600)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = [(self._name(u.user, u.notebook), u.held_s, u.byte_s, u.idle_s) for u in usage]
                for table, key, bucket in (("usage", "hour", hour), ("usage_daily", "day", hour // 24)):
                    self._db.executemany(
                        f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?) ON CONFLICT ({key}, name) DO UPDATE SET "
                        "held_s = held_s + excluded.held_s, byte_s = byte_s + excluded.byte_s, "
                        "idle_s = idle_s + excluded.idle_s",
                        [(bucket, *row) for row in rows],
                    )
                self._db.executemany(
                    "INSERT OR REPLACE INTO gpu_samples VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (t, g["uuid"] or f"index-{g['index']}", g["index"], g["name"], g["utilization"], g["memory"])
                        for g in gpus
                    ],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._names = dict(
                    ((user, notebook), ident) for ident, user, notebook in self._db.execute("SELECT * FROM names")
                )
                raise
        except sqlite3.Error as error:
            raise StoreError(f"cannot write the usage file {self.path}: {error}") from None
        if t - self._pruned >= 3600:
            self.prune(t)

    def prune(self, now: float | None = None) -> None:
        """Fold GPU samples older than :data:`RAW_WINDOW_S` into hourly means, delete what is older
        than ``max_age_s``, then the oldest days while the file is larger than ``max_bytes``."""
        now = time.time() if now is None else now
        self._pruned = now
        cut = int((now - RAW_WINDOW_S) // 3600) * 3600  # whole hours only: an hour is folded once
        oldest_hour = int((now - self.max_age_s) // 3600)
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute(
            "INSERT OR REPLACE INTO gpu_hourly SELECT CAST(t / 3600 AS INTEGER), gpu, max(idx), max(gpu_name), "
            "avg(utilization), avg(memory) FROM gpu_samples WHERE t < ? GROUP BY CAST(t / 3600 AS INTEGER), gpu",
            (cut,),
        )
        self._db.execute("DELETE FROM gpu_samples WHERE t < ?", (cut,))
        self._db.execute("DELETE FROM usage WHERE hour < ?", (oldest_hour,))
        self._db.execute("DELETE FROM usage_daily WHERE day < ?", (oldest_hour // 24,))
        self._db.execute("DELETE FROM gpu_hourly WHERE hour < ?", (oldest_hour,))
        self._forget_unused_names()
        self._db.execute("COMMIT")
        while self.size() > self.max_bytes:
            first = self._db.execute("SELECT min(hour) FROM usage").fetchone()[0]
            if first is None:
                break
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM usage WHERE hour < ?", (first + 24,))
            self._db.execute("DELETE FROM usage_daily WHERE day < ?", ((first + 24) // 24,))
            self._db.execute("DELETE FROM gpu_hourly WHERE hour < ?", (first + 24,))
            self._forget_unused_names()
            self._db.execute("COMMIT")
            self._db.execute("PRAGMA incremental_vacuum")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.execute("PRAGMA incremental_vacuum")

    def _forget_unused_names(self) -> None:
        """Drop the (user, notebook) strings no row uses any more (inside the caller's transaction)."""
        self._db.execute(
            "DELETE FROM names WHERE id NOT IN (SELECT name FROM usage) AND id NOT IN (SELECT name FROM usage_daily)"
        )
        self._names = {(user, notebook): ident for ident, user, notebook in self._db.execute("SELECT * FROM names")}

    def size(self) -> int:
        """Bytes the database's pages take (free pages not counted), the WAL not included."""
        pages, free, size = (
            self._db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "freelist_count", "page_size")
        )
        return int((pages - free) * size)

    def usage(self, since: float, until: float | None = None) -> list[Usage]:
        """Every (user, notebook) with its sums over the hours from ``since``'s to ``until``'s.

        Whole days inside the range are read from the daily sums (30 days x 400 notebooks are 12,000
        rows instead of 288,000), the hours before and after them from the hourly ones.
        """
        first, last = int(since // 3600), int((time.time() if until is None else until) // 3600)
        day_from, day_to = -(-first // 24), (last + 1) // 24  # days [day_from, day_to) lie inside
        if day_from < day_to:
            parts = (
                "SELECT name, held_s, byte_s, idle_s FROM usage WHERE hour >= ? AND hour < ? UNION ALL "
                "SELECT name, held_s, byte_s, idle_s FROM usage_daily WHERE day >= ? AND day < ? UNION ALL "
                "SELECT name, held_s, byte_s, idle_s FROM usage WHERE hour >= ? AND hour <= ?"
            )
            bounds: tuple[int, ...] = (first, day_from * 24, day_from, day_to, day_to * 24, last)
        else:
            parts = "SELECT name, held_s, byte_s, idle_s FROM usage WHERE hour >= ? AND hour <= ?"
            bounds = (first, last)
        rows = self._db.execute(
            "SELECT n.user, n.notebook, s.held_s, s.byte_s, s.idle_s FROM (SELECT name, total(held_s) AS held_s, "
            f"total(byte_s) AS byte_s, total(idle_s) AS idle_s FROM ({parts}) GROUP BY name) "
            "AS s JOIN names AS n ON n.id = s.name",
            bounds,
        )
        return [Usage(*row) for row in rows]

    def gpu_history(self, since: float) -> list[tuple[float, str, int, str, float | None, float | None]]:
        """(t, gpu key, index, name, utilization %, memory %) since ``since``, oldest first (the
        hourly means, stamped at the middle of their hour, before the raw samples)."""
        return [
            *self._db.execute(
                "SELECT hour * 3600 + 1800, gpu, idx, gpu_name, utilization, memory FROM gpu_hourly "
                "WHERE hour * 3600 + 1800 >= ? ORDER BY hour, gpu",
                (since,),
            ),
            *self._db.execute("SELECT * FROM gpu_samples WHERE t >= ? ORDER BY t, gpu", (since,)),
        ]
