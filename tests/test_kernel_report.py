"""Kernel reports as the server reads them: untrusted input, validated field by field."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from jupyter_gpu.kernel.report import REPORT_PREFIX, ReportReader, build_report, parse_report
from jupyter_gpu.sources.processes import process_start

KERNEL = "0b6d3f8e-5a1c-4f3e-9a57-2d9c1f7e4b10"


def good(**changes):
    report = {
        "version": 1,
        "kernel_id": KERNEL,
        "pid": os.getpid(),  # a report counts only while the process it names runs, as its file's owner
        "start_time": process_start(os.getpid()),
        "session": "a.ipynb",
        "nvml_pids": [],
        "gpu_memory": {"GPU-1": 5 * 2**30},
        "frameworks": {},
        "timestamp": time.time(),
    }
    report.update(changes)
    return report


def write(folder, text, kernel_id=KERNEL):
    path = folder / f"{REPORT_PREFIX}{kernel_id}.json"
    path.write_text(text)
    return path


def test_a_kernel_reports_its_own_pid_and_start_time(monkeypatch):
    report = build_report(KERNEL)
    assert report["pid"] == os.getpid() and report["start_time"] == process_start(os.getpid())
    parsed = parse_report(json.loads(json.dumps(report)), KERNEL)
    assert parsed.key == (os.getpid(), process_start(os.getpid()))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (json.dumps(good(nvml_pids=5)), "nvml_pids must be a list"),
        (json.dumps(good(nvml_pids=[1, "2"])), "nvml_pids[1] must be a whole number"),
        (json.dumps(good(timestamp="x")), "timestamp must be a finite number"),
        (json.dumps(good(gpu_memory={"GPU-1": float("nan")})), "NaN is not a number"),
        (json.dumps(good(gpu_memory={"GPU-1": float("inf")})), "Infinity is not a number"),
        (json.dumps(good(gpu_memory={"GPU-1": -1})), "gpu_memory['GPU-1'] must be a finite number in 0.."),
        (json.dumps(good(gpu_memory=[1])), "gpu_memory must be an object"),
        (json.dumps(good(pid="1")), "pid must be a whole number in 1.."),
        (json.dumps(good(pid=True)), "pid must be a whole number in 1.."),
        (json.dumps(good(session=7)), "session must be a string"),
        (json.dumps(good(kernel_id="someone-else")), "kernel_id does not match the file name"),
        (json.dumps(good(version=2)), "version must be 1"),
        (json.dumps(good(session="x" * 70_000)), "larger than 64 KiB"),
        ("[" * 100_000 + "]" * 100_000, "larger than 64 KiB"),
        ("[" * 20_000 + "]" * 20_000, "nested too deeply"),
        ("{not json", "Expecting property name"),
        ("[]", "a report must be a JSON object"),
    ],
)
def test_a_bad_report_is_dropped_with_one_log_line(tmp_path, caplog, text, words):
    write(tmp_path, json.dumps(good(kernel_id="other-kernel")), kernel_id="other-kernel")
    write(tmp_path, text)
    reader = ReportReader()
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.kernel.report"):
        reports = reader.read(tmp_path)
        reader.read(tmp_path)  # unchanged file: not parsed (or logged) again
    assert list(reports) == ["other-kernel"]
    (record,) = caplog.records
    assert words in record.getMessage() and "\n" not in record.getMessage()


def test_a_good_report_is_parsed_into_typed_fields(tmp_path):
    write(tmp_path, json.dumps(good(nvml_pids=[7, 8])))
    (report,) = ReportReader().read(tmp_path).values()
    assert report.kernel_id == KERNEL and report.key == (os.getpid(), process_start(os.getpid()))
    assert report.nvml_pids == (7, 8) and dict(report.gpu_memory) == {"GPU-1": 5 * 2**30}


def _as_kernel(monkeypatch, folder, kernel_id=KERNEL):
    from jupyter_gpu.kernel import report
    from jupyter_gpu.sources import kernel_reports

    monkeypatch.setattr(kernel_reports, "kernel_identity", lambda: (kernel_id, folder))
    monkeypatch.setattr(report, "_state", dict(report._state, path=None, last=None))
    return report


def test_a_planted_symlink_never_makes_the_report_overwrite_another_file(tmp_path, monkeypatch):
    """Another user of a shared folder (/tmp) links the names a report might be written through to a
    victim's notebook: the notebook is untouched, and the report is a private file of its own."""
    report = _as_kernel(monkeypatch, tmp_path)
    victim = tmp_path / "thesis.ipynb"
    victim.write_text("the victim's notebook")
    final = tmp_path / f"{REPORT_PREFIX}{KERNEL}.json"
    for name in (f".{final.name}.{os.getpid()}.tmp", f".{final.name}.tmp", final.name):
        (tmp_path / name).symlink_to(victim)

    path = report.write_report(force=True)

    assert path == final
    assert victim.read_text() == "the victim's notebook"
    assert not final.is_symlink()
    assert json.loads(final.read_text())["kernel_id"] == KERNEL
    assert final.stat().st_mode & 0o777 == 0o600
    report.write_report(gpu_memory={"GPU-1": 1}, force=True)  # and again on a later write
    assert victim.read_text() == "the victim's notebook"


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    report = _as_kernel(monkeypatch, tmp_path)
    final = tmp_path / f"{REPORT_PREFIX}{KERNEL}.json"
    final.mkdir()  # os.replace cannot put a file where a directory is

    assert report.write_report(force=True) is None
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert final.is_dir()


def _dead_report_of_ones_own(folder, kernel_id):
    """As the neighbour: the report a killed kernel of one's own left behind (its process is gone)."""
    import subprocess

    from jupyter_gpu.sources.processes import process_start

    child = subprocess.Popen(["sleep", "0.2"])
    start = process_start(child.pid)
    child.wait()
    document = {"version": 1, "kernel_id": kernel_id, "pid": child.pid, "session": None, "timestamp": 1.0}
    document.update(start_time=start, pid_namespace=os.readlink("/proc/self/ns/pid"))
    with open(os.path.join(folder, f"{REPORT_PREFIX}{kernel_id}.json"), "w") as file:
        json.dump(document, file)


def test_a_kernels_first_report_clears_what_its_users_killed_kernels_left(neighbour, shared_tmp, monkeypatch):
    """Killed kernels (SIGKILL: a shutdown's last resort, the OOM killer) leave their
    reports behind, and in /tmp no server cleans them: the next kernel of the same user does."""
    _dead_report_of_ones_own(str(shared_tmp), "killed")
    neighbour.run(_dead_report_of_ones_own, str(shared_tmp), "neighbours-killed")
    live = good(kernel_id="live-peer", pid=os.getpid(), pid_namespace=os.readlink("/proc/self/ns/pid"))
    write(shared_tmp, json.dumps(live), kernel_id="live-peer")
    report = _as_kernel(monkeypatch, shared_tmp)

    report.write_report(force=True)

    left = sorted(p.name[len(REPORT_PREFIX) : -len(".json")] for p in shared_tmp.iterdir())
    assert left == sorted([KERNEL, "live-peer", "neighbours-killed"])  # never another user's files
    assert (shared_tmp / f"{REPORT_PREFIX}{KERNEL}.json").stat().st_mode & 0o777 == 0o600


def _execute(client, code):
    reply = client.execute_interactive(code, timeout=60, output_hook=lambda _message: None)
    assert reply["content"]["status"] == "ok", reply["content"]


def test_every_exit_path_of_a_real_kernel_leaves_no_report_for_long(tmp_path, scenario):
    """Unload and a clean shutdown remove the report (atexit); SIGKILL kills the kernel without
    it, and the user's next kernel there removes it (SIGTERM, SIGHUP and the parent's death:
    tests/test_exit_hooks.py)."""
    import signal

    from support import start_kernel

    def reports():
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((REPORT_PREFIX, f".{REPORT_PREFIX}")))

    manager, client = start_kernel(tmp_path)
    try:
        _execute(client, "%load_ext jupyter_gpu")
        assert len(reports()) == 1 and (tmp_path / reports()[0]).stat().st_mode & 0o777 == 0o600
        _execute(client, "%unload_ext jupyter_gpu")
        assert reports() == []
        _execute(client, "%load_ext jupyter_gpu")
        assert len(reports()) == 1
    finally:
        client.stop_channels()
        manager.shutdown_kernel()  # a shutdown request: the kernel exits through atexit
    assert reports() == []

    manager, client = start_kernel(tmp_path)
    try:
        _execute(client, "%load_ext jupyter_gpu")
        (left,) = reports()
    finally:
        client.stop_channels()
        os.kill(manager.provisioner.pid, signal.SIGKILL)
        manager.shutdown_kernel(now=True)
    assert reports() == [left]  # SIGKILL: no clean-up in the kernel

    manager, client = start_kernel(tmp_path)
    try:
        _execute(client, "%load_ext jupyter_gpu")
        (own,) = reports()
        assert own != left  # the next kernel's first report cleared it
    finally:
        client.stop_channels()
        manager.shutdown_kernel()
    assert reports() == []
