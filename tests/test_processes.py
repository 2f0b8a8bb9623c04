"""Process identities: every cached fact is keyed by PID and start time, so a reused PID is new."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import spawn_at_pid, wait_until

from jupyter_gpu.sources import processes
from jupyter_gpu.sources.processes import PidCache, ProcessDirectory, process_start


def test_process_start_is_stable_and_none_for_missing_pids():
    assert process_start(os.getpid()) == process_start(os.getpid()) is not None
    assert process_start(2**22 + 12345) is None  # above Linux's pid_max


def test_a_reused_pid_is_looked_up_afresh_at_once():
    # Given a cached fact about process P
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid = first.pid
    calls: list[int] = []
    cache = PidCache(lambda p: (calls.append(p), f"lookup {len(calls)}")[1])
    assert cache.get(pid) == "lookup 1" and cache.get(pid) == "lookup 1" and calls == [pid]
    # When P exits and another process gets its PID
    first.kill()
    first.wait()
    time.sleep(0.05)  # start times tick at 100 Hz; real PID reuse takes far longer than a tick
    second = spawn_at_pid(pid, ["sleep", "60"])
    if second is None:
        pytest.skip("cannot choose the next PID here (needs root in this PID namespace)")
    try:
        # Then the cache does not answer for the new process with the old one's fact
        assert cache.get(pid) == "lookup 2" and calls == [pid, pid]
    finally:
        second.kill()
        second.wait()


def test_identity_of_a_recycled_pid_is_the_new_owners(monkeypatch):
    # The operating system's answer only: no simulated scenario (one another test's thread may still
    # hold in this process) names the owner of the real PIDs this test uses.
    monkeypatch.setattr(ProcessDirectory, "_simulated_identity", staticmethod(lambda pid: None))
    # Given this user's process on a GPU, identified with its command line
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--kernel-secret"])
    wait_until(
        lambda: b"--kernel-secret" in Path(f"/proc/{first.pid}/cmdline").read_bytes(), what="the program's exec"
    )  # before it, /proc shows the forking parent's command line
    directory = ProcessDirectory()
    assert "--kernel-secret" in directory.identify(first.pid).command
    first.kill()
    first.wait()
    time.sleep(0.05)
    # When the PID is reused by another program
    second = spawn_at_pid(first.pid, ["sleep", "61"])
    if second is None:
        pytest.skip("cannot choose the next PID here (needs root in this PID namespace)")
    try:

        def exec_done() -> bool:  # its own command line, not merely one: until the exec, /proc shows the forker's
            return Path(f"/proc/{second.pid}/cmdline").read_bytes() == b"sleep\x0061\x00"

        wait_until(exec_done, what="the new program's exec")
        identity = directory.identify(first.pid)
        assert identity.name == "sleep" and identity.command == "sleep 61"
    finally:
        second.kill()
        second.wait()


def test_a_cached_value_is_not_kept_when_the_process_changes_during_the_lookup(monkeypatch):
    starts = iter([100, 200, 200])
    monkeypatch.setattr(processes, "process_start", lambda pid: next(starts))
    cache = PidCache(lambda pid: "old process's fact")
    cache.get(42)  # start 100 before the lookup, 200 after: not cached
    assert len(cache) == 0


def test_other_users_program_names_are_withheld_unless_widened(monkeypatch):
    # The operating system's answer only: no simulated scenario (one another test's thread may still
    # hold in this process) names the owner of the real PIDs this test uses.
    monkeypatch.setattr(ProcessDirectory, "_simulated_identity", staticmethod(lambda pid: None))
    # Given a process that, to the directory, is another user's (its "me" is someone else)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--secret"])
    wait_until(lambda: b"--secret" in Path(f"/proc/{other.pid}/cmdline").read_bytes(), what="the program's exec")
    try:
        monkeypatch.delenv(processes.SHOW_OTHER_NAMES_ENV, raising=False)
        directory = ProcessDirectory()
        directory.me = "somebody-else"
        identity = directory.identify(other.pid)
        # Then it shows its user only: no program name, no command line
        assert identity.user == processes.current_user() and identity.name is None and identity.command is None
        # When an admin widens it (environment), the program name is shown; the command line never
        monkeypatch.setenv(processes.SHOW_OTHER_NAMES_ENV, "1")
        widened = ProcessDirectory()
        widened.me = "somebody-else"
        assert widened.identify(other.pid).name and widened.identify(other.pid).command is None
        # and an explicit choice beats the environment
        narrow = ProcessDirectory(show_other_names=False)
        narrow.me = "somebody-else"
        assert narrow.identify(other.pid).name is None
        # while one's own processes keep their name and command line
        assert ProcessDirectory(show_other_names=False).identify(other.pid).command.endswith("--secret")
    finally:
        other.kill()
        other.wait()
