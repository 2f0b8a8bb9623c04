"""The server's clean-up of kernel reports left behind (``ReportFiles.remove_orphans``).

Every report is parsed once, by :class:`ReportReader` through :mod:`jupyter_gpu.core.wire`; the
PID namespace the clean-up compares comes from that parse, so a file rewritten behind the reader's
cache (deeply nested, not JSON) cannot raise out of a server's start-up.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from neighbours import forge_kernel_report

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
    assert reader.parse_file(path) is not None
    stat = path.stat()
    with open(path, "r+b") as file:
        file.write(b"[" * 10_000 + b"]" * 10_000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    assert ReportFiles(str(tmp_path), reader).remove_orphans() == []  # another namespace: left alone
    assert path.exists()


# -- a report counts only if its file belongs to the user the process it names runs as


def _own_sleeper_reported(folder: str, kernel_id: str) -> int:
    """As the neighbour: start a process of one's own and write its genuine report; its PID."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    start = process_start(sleeper.pid)
    assert start is not None
    forge_kernel_report(folder, kernel_id, sleeper.pid, start)
    return sleeper.pid


def _running_sleep() -> tuple[subprocess.Popen[bytes], int | float]:
    """A ``sleep`` of this (root) test: the victim's kernel stand-in; with its start time."""
    victim = subprocess.Popen(["sleep", "60"])
    for _ in range(200):
        start = process_start(victim.pid)
        if start is not None:
            return victim, start
        time.sleep(0.01)
    raise AssertionError("the victim's process did not start")


def test_a_report_forged_by_another_user_for_a_victims_process_does_not_count(
    neighbour: Any, shared_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a victim's process (PID and start time readable by anyone in /proc) and a shared
    # runtime folder (1777), the neighbour writes a report claiming 40 GiB for it
    victim, start = _running_sleep()
    try:
        neighbour.run(forge_kernel_report, str(shared_tmp), "victim-kernel", victim.pid, start)
        assert neighbour.owns(shared_tmp / f"{REPORT_PREFIX}victim-kernel.json")
        # And the neighbour's genuine report of a process of its own
        own_pid = neighbour.run(_own_sleeper_reported, str(shared_tmp), "neighbour-kernel")
        try:
            reader = ReportReader()
            with caplog.at_level(logging.WARNING, logger="jupyter_gpu"):
                reports = reader.read(shared_tmp)
                reader.read(shared_tmp)  # logged once per version of the file
            # Then the forged report does not count, with one log line naming both owners
            assert "victim-kernel" not in reports
            (record,) = [r for r in caplog.records if "victim-kernel" in r.getMessage()]
            assert f"belongs to uid {neighbour.uid}" in record.getMessage() and "runs as uid 0" in record.getMessage()
            # And a report whose file is its process's owner's counts, whoever that owner is
            assert reports["neighbour-kernel"].pid == own_pid
            # And the victim's own report (written by its owner, replacing nothing of the neighbour's) counts
            genuine = _report("victim-2", victim.pid, start, NAMESPACE)
            (shared_tmp / f"{REPORT_PREFIX}victim-2.json").write_bytes(genuine)
            assert reader.read(shared_tmp)["victim-2"].key == (victim.pid, start)
        finally:
            os.kill(own_pid, signal.SIGKILL)
    finally:
        victim.kill()
        victim.wait()


def test_the_cull_rule_never_sees_forged_memory(neighbour: Any, shared_tmp: Path) -> None:
    # The server's attribution takes the reader's reports: a forged one gives the victim's kernel
    # no "reported" GPU memory, so an idle kernel holding nothing is not a culling candidate.
    from jupyter_gpu.server.attribution import KernelInfo, current_reports

    victim, start = _running_sleep()
    try:
        neighbour.run(forge_kernel_report, str(shared_tmp), "victim-kernel", victim.pid, start)
        info = KernelInfo(kernel_id="victim-kernel", pid=victim.pid, start=start)
        assert info.key == (victim.pid, start)
        assert current_reports(ReportReader().read(shared_tmp), {"victim-kernel": info}) == {}
    finally:
        victim.kill()
        victim.wait()
