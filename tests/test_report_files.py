"""The server's clean-up of kernel reports left behind (``ReportFiles.remove_orphans``).

Every report is parsed once, by :class:`ReportReader` through :mod:`jupyter_gpu.core.wire`; the
PID namespace the clean-up compares comes from that parse, so a file rewritten behind the reader's
cache (deeply nested, not JSON) cannot raise out of a server's start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jupyter_gpu.server.report_files import ReportFiles
from jupyter_gpu.sources.kernel_reports import REPORT_PREFIX, ReportReader, parse_report
from jupyter_gpu.sources.processes import process_start

NAMESPACE = os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self/ns/pid") else None


def _dead_process() -> tuple[int, int | float]:
    """(pid, start time) of a process that ran and exited."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(200):
            start = process_start(child.pid)
            if start is not None:
                break
            time.sleep(0.01)
        assert start is not None
    finally:
        child.kill()
        child.wait()
    return child.pid, start


def _report(kernel_id: str, pid: int, start: int | float, namespace: str | None, size: int = 0) -> bytes:
    document = {
        "version": 1,
        "kernel_id": kernel_id,
        "pid": pid,
        "start_time": start,
        "pid_namespace": namespace,
        "session": "",
        "nvml_pids": [],
        "gpu_memory": {},
        "timestamp": time.time(),
    }
    raw = json.dumps(document).encode()
    return raw + b" " * (size - len(raw))  # padded with white space to ``size`` bytes, if asked


def test_the_report_carries_its_pid_namespace() -> None:
    document = json.loads(_report("k1", 5, 7, "pid:[4026531836]"))
    assert parse_report(document, "k1").pid_namespace == "pid:[4026531836]"
    del document["pid_namespace"]
    assert parse_report(document, "k1").pid_namespace is None


def test_only_reports_of_dead_kernels_in_this_namespace_are_removed(tmp_path: Path) -> None:
    pid, start = _dead_process()
    (tmp_path / f"{REPORT_PREFIX}dead.json").write_bytes(_report("dead", pid, start, NAMESPACE))
    (tmp_path / f"{REPORT_PREFIX}elsewhere.json").write_bytes(_report("elsewhere", pid, start, "pid:[1]"))
    alive = process_start(os.getpid())
    assert alive is not None
    (tmp_path / f"{REPORT_PREFIX}alive.json").write_bytes(_report("alive", os.getpid(), alive, NAMESPACE))
    (tmp_path / f"{REPORT_PREFIX}deep.json").write_bytes(b"[" * 5000 + b"]" * 5000)

    assert ReportFiles(str(tmp_path), ReportReader()).remove_orphans() == ["dead"]
    left = sorted(p.name for p in tmp_path.glob(f"{REPORT_PREFIX}*"))
    assert left == [f"{REPORT_PREFIX}{name}.json" for name in ("alive", "deep", "elsewhere")]


def test_a_report_rewritten_behind_the_readers_cache_cannot_crash_the_clean_up(tmp_path: Path) -> None:
    # Regression: remove_orphans parsed each report a second time with plain json.loads to find its
    # pid_namespace, and a deeply nested file raised RecursionError out of the server's start-up.
    # Here the file is rewritten in place (same inode, same size, same modification time) after
    # the reader cached its good version; only one parse remains, so the cached one is used.
    pid, start = _dead_process()
    path = tmp_path / f"{REPORT_PREFIX}k1.json"
    path.write_bytes(_report("k1", pid, start, "pid:[1]", size=20_000))
    reader = ReportReader()
    assert reader.read_one(path) is not None
    stat = path.stat()
    with open(path, "r+b") as file:
        file.write(b"[" * 10_000 + b"]" * 10_000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    assert ReportFiles(str(tmp_path), reader).remove_orphans() == []  # another namespace: left alone
    assert path.exists()
