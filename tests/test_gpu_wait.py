"""``%gpu_select auto:N --wait``, "would fit if" hints and the claim ``auto`` leaves (in-process shell).

Time is the wait loop's own clock and sleep (``jupyter_gpu.session.wait._clock``/``_sleep``), replaced by a fake that
advances when the magic sleeps: no test waits in real time, and the polling interval is checked
from what the magic asked to sleep and how often it read NVML.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from plan_state import state

from jupyter_gpu import simulate
from jupyter_gpu.kernel import magics
from jupyter_gpu.session import plan_session as session
from jupyter_gpu.session import wait
from jupyter_gpu.sources import nvml

GIB_MIB = 1024


def busy_world(scenario: Any, free_gpu_1: bool = False) -> None:
    """GPU 0 full (bob), GPU 1 held by carol unless ``free_gpu_1``."""

    def change(data: dict) -> None:
        data["gpus"][0]["processes"] = [{"pid": 910001, "memory_mib": 70 * GIB_MIB, "user": "bob", "name": "python"}]
        data["gpus"][1]["processes"] = (
            [] if free_gpu_1 else [{"pid": 910002, "memory_mib": 60 * GIB_MIB, "user": "carol", "name": "python"}]
        )

    scenario.update(change)


class FakeTime:
    """Advances by what the magic sleeps; calls ``at(n)`` on the n-th sleep."""

    def __init__(self, at: dict[int, Any] | None = None) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.at = at or {}

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        action = self.at.get(len(self.sleeps))
        if action is not None:
            action()


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(wait, "_clock", fake.clock)
    monkeypatch.setattr(wait, "_sleep", fake.sleep)
    return fake


def nvml_reads() -> int:
    return simulate.installed().calls.get("nvmlDeviceGetMemoryInfo_v2", 0) if simulate.installed() else 0


def test_wait_selects_once_the_gpus_fit_polling_at_most_once_a_second(shell, clean, fake_time, capsys) -> None:
    busy_world(clean)
    fake_time.at = {3: lambda: busy_world(clean, free_gpu_1=True)}  # carol finishes after the 3rd poll
    shell.run_line_magic("gpu_select", "auto:1 --min-free 40GiB --wait 30m")
    out = capsys.readouterr().out
    assert (
        "Waiting for auto:1 with at least 40GiB free — GPU 0: 9.5 GiB free; bob 70 GiB | GPU 1: 19.5 GiB "
        "free; carol 60 GiB — waited 0 s of 30 min" in out
    )
    assert "waited 2 s of 30 min" in out
    assert "Waited 3 s for auto:1: the GPUs fit now." in out
    assert "GPU 1 (A100-SXM4-80GB [simulated], 79.5 GiB free)" in out
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert fake_time.sleeps == [1.0, 1.0, 1.0]  # one NVML look per second, no more


def test_wait_without_min_free_waits_for_gpus_without_other_users(shell, clean, fake_time, capsys) -> None:
    busy_world(clean)
    fake_time.at = {2: lambda: busy_world(clean, free_gpu_1=True)}
    shell.run_line_magic("gpu_select", "auto --wait 10")
    out = capsys.readouterr().out
    assert "Waiting for auto without other users' work" in out and os.environ["CUDA_VISIBLE_DEVICES"] == "1"


def test_time_up_or_interrupt_changes_nothing(shell, clean, fake_time, capsys) -> None:
    busy_world(clean)
    before = state()
    with pytest.raises(
        UsageError,
        match=r"no GPUs fit after waiting 5 s: auto:1 needs 1 GPU with at least 40 GiB "
        r"free.*nothing was changed",
    ):
        shell.run_line_magic("gpu_select", "auto:1 --min-free 40GiB --wait 5s")
    assert state() == before and len(fake_time.sleeps) == 5

    def interrupt() -> None:
        raise KeyboardInterrupt

    fake_time.at = {2: interrupt}
    fake_time.sleeps = []
    with pytest.raises(UsageError, match=r"stopped waiting for auto:1 after 2 s \(interrupted\); nothing was changed"):
        shell.run_line_magic("gpu_select", "auto:1 --min-free 40GiB --wait 1h")
    assert state() == before


@pytest.fixture
def sigint() -> Any:
    """A real SIGINT, raised where a test calls it, with Python's handler installed (KeyboardInterrupt),
    as in a kernel's cell."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield lambda: signal.raise_signal(signal.SIGINT)
    signal.signal(signal.SIGINT, before)


def waited_for(shell: Any, line: str) -> None:
    """``%gpu_select LINE``; a bare KeyboardInterrupt out of it fails the test (not the whole run)."""
    try:
        shell.run_line_magic("gpu_select", line)
    except KeyboardInterrupt:
        pytest.fail("a bare KeyboardInterrupt came out of the wait, not its one-line refusal")


def test_an_interrupt_while_nvml_is_read_is_the_same_one_line_refusal(
    shell, clean, fake_time, sigint, monkeypatch
) -> None:
    # An interrupt lands wherever the kernel is: mostly in the sleep, sometimes in NVML's read (slow
    # beside other work). Either way it is "stopped waiting", never a bare KeyboardInterrupt.
    busy_world(clean)
    before = state()
    reads = []
    real = session.take_snapshot

    def read_then_interrupted(*args: Any) -> Any:
        reads.append(1)
        if len(reads) == 3:
            sigint()
        return real(*args)

    monkeypatch.setattr(session, "take_snapshot", read_then_interrupted)
    with pytest.raises(UsageError, match=r"stopped waiting for auto:1 after 2 s \(interrupted\); nothing was changed"):
        waited_for(shell, "auto:1 --min-free 40GiB --wait 1h")
    assert state() == before and len(fake_time.sleeps) == 2


def test_an_interrupt_while_the_line_is_shown_is_the_same_refusal(shell, clean, fake_time, sigint, monkeypatch) -> None:
    from jupyter_gpu.kernel import wait as kernel_wait

    busy_world(clean)
    before = state()
    real = kernel_wait._show_progress

    def shown_then_interrupted(handle: Any, text: str) -> Any:
        handle = real(handle, text)
        sigint()
        return handle

    monkeypatch.setattr(kernel_wait, "_show_progress", shown_then_interrupted)
    with pytest.raises(UsageError, match=r"stopped waiting for auto:1 after 0 s \(interrupted\); nothing was changed"):
        waited_for(shell, "auto:1 --min-free 40GiB --wait 1h")
    assert state() == before


def test_an_interrupt_as_the_gpus_are_taken_leaves_the_selection_whole_then_stops_the_cell(
    shell, clean, fake_time, sigint, monkeypatch, capsys
) -> None:
    # The interrupt lands between the plan and its claim: held until both are made, then it stops the
    # cell (a training line after the magic must not start), the line having said what was done.
    from jupyter_gpu.sources.claims import user_folder

    busy_world(clean)
    fake_time.at = {2: lambda: busy_world(clean, free_gpu_1=True)}
    real = session.PlanSession._claim

    def interrupted_then_claimed(self: Any, board: Any, plan: Any) -> Any:
        sigint()
        return real(self, board, plan)

    monkeypatch.setattr(session.PlanSession, "_claim", interrupted_then_claimed)
    with pytest.raises(KeyboardInterrupt):
        shell.run_line_magic("gpu_select", "auto:1 --min-free 40GiB --wait 1h")
    assert "Waited 2 s for auto:1: the GPUs fit now." in capsys.readouterr().out
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    uuid = nvml.snapshot().gpus[1].uuid
    claims = list(user_folder(Path(os.environ["JUPYTER_GPU_CLAIMS_DIR"]), os.getuid()).glob(f"{os.getpid()}-*.json"))
    assert len(claims) == 1 and uuid in claims[0].read_text()


@pytest.mark.parametrize(
    "line, words",
    [
        ("1 --wait 5m", "--wait needs a SPEC of auto"),
        ("auto --wait soon", "is not a duration"),
        ("auto --wait 0", "more than 0"),
        ("auto --wait 200h", "at most 7 days"),
    ],
)
def test_bad_wait_lines_are_one_usage_error(shell, line: str, words: str) -> None:
    before = state()
    with pytest.raises(UsageError, match=words):
        shell.run_line_magic("gpu_select", line)
    assert state() == before


def test_nothing_fits_says_which_gpu_would_fit_if_your_own_process_went(shell, clean, capsys) -> None:
    import subprocess
    import sys

    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # this user's other process
    try:

        def change(data: dict) -> None:
            data["gpus"][0]["processes"] = [{"pid": 910001, "memory_mib": 70 * GIB_MIB, "user": "bob"}]
            data["gpus"][1]["processes"] = [{"pid": mine.pid, "memory_mib": 50 * GIB_MIB, "name": "python"}]

        clean.update(change)
        with pytest.raises(UsageError) as error:
            shell.run_line_magic("gpu_select", "auto --min-free 40GiB")
        message = str(error.value)
        assert f"GPU 1 would fit if your process PID {mine.pid} (50 GiB) were shut down" in message, message
        assert "GPU 0 would fit" not in message and "\n" not in message
    finally:
        mine.kill()
        mine.wait()


def test_auto_leaves_a_claim_and_counts_others(shell, clean, capsys, tmp_path: Path) -> None:
    import subprocess
    import sys

    from jupyter_gpu.sources.claims import ClaimBoard, user_folder

    folder = Path(os.environ["JUPYTER_GPU_CLAIMS_DIR"])
    mine = user_folder(folder, os.getuid())
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        board = ClaimBoard(folder)
        board.pid = other.pid
        uuids = [gpu.uuid for gpu in nvml.snapshot().gpus]
        board.claim([uuids[0]])  # another kernel just chose GPU 0
        shell.run_line_magic("gpu_select", "auto")
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # GPU 0 is claimed: the equally idle GPU 1 instead
        claims = list(mine.glob(f"{os.getpid()}-*.json"))
        assert len(claims) == 1 and uuids[1] in claims[0].read_text()
        shell.run_line_magic("gpu_select", "0")  # not auto: the claim follows the selection (issue 30)
        claims = list(mine.glob(f"{os.getpid()}-*.json"))
        assert len(claims) == 1 and uuids[0] in claims[0].read_text()
        shell.run_line_magic("gpu_select", "none")  # no GPU: this kernel's claim goes
        assert not list(mine.glob(f"{os.getpid()}-*.json"))
    finally:
        other.kill()
        other.wait()


def test_an_unusable_claims_directory_changes_nothing_but_a_one_line_note(
    shell,
    clean,
    capsys,
    monkeypatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(shell.magics_manager.registry["GpuMagics"], "claims_dir", str(tmp_path / "nowhere"))
    shell.run_line_magic("gpu_select", "auto")
    shell.run_line_magic("gpu_select", "auto:2")
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "claims" in line]
    assert notes == [
        f"jupyter_gpu: GPU claims are not used: the claims directory {tmp_path / 'nowhere'} cannot be "
        "used (No such file or directory); auto chooses without them."
    ]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_the_waiting_line_shows_other_users_names_bidi_safe(shell, clean, fake_time, capsys) -> None:
    def change(data: dict) -> None:
        data["gpus"][0]["processes"] = [{"pid": 910001, "memory_mib": 70 * GIB_MIB, "user": "a\u202eevil"}]
        data["gpus"][1]["processes"] = [{"pid": 910002, "memory_mib": 60 * GIB_MIB, "user": "x" * 200}]

    clean.update(change)

    def interrupt() -> None:
        raise KeyboardInterrupt

    fake_time.at = {1: interrupt}
    with pytest.raises(UsageError, match="interrupted"):
        shell.run_line_magic("gpu_select", "auto:1 --min-free 40GiB --wait 1h")
    out = capsys.readouterr().out
    assert "a\ufffdevil 70 GiB" in out and "\u202e" not in out, out
    assert "x" * 40 not in out and "…" in out, out


def test_the_fit_hint_names_a_kernel_by_its_notebook_on_one_safe_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebook name comes from another kernel's report or the server: untrusted, and the
    hint ends up in a one-line UsageError."""
    from jupyter_gpu import plan
    from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
    from jupyter_gpu.sources import peers

    gib = 1024**3
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="A100",
        memory_total=80 * gib,
        memory_free=10 * gib,
        processes=(GpuProcess(910003, 70 * gib, "me"),),
    )
    found = peers.Peers({910003: peers.KernelPeer(910003, "k1", "a\n\u202e" + "y" * 200 + ".ipynb")})
    monkeypatch.setattr(peers, "find_peers", lambda **_: found)
    monkeypatch.setattr(session, "current_user", lambda: "me")
    hint = magics._fit_hints(Snapshot(True, 0.0, (gpu,)), plan.PlanRequest(selection="auto", min_free="40GiB"))
    assert hint.startswith("; GPU 0 would fit if your kernel a\ufffd\ufffdyyy"), hint
    assert "\n" not in hint and "\u202e" not in hint and "y" * 40 not in hint, hint


def test_19_7_a_would_fit_hint_is_given_only_where_following_it_makes_the_request_pass(monkeypatch) -> None:
    """GPU 0 would have room once my kernel ends, but the kernel may use GPU 1 only (its start
    fence): no hint for GPU 0 (auto never chooses it). GPU 1's hint, followed, makes auto succeed."""
    from dataclasses import replace

    from jupyter_gpu import plan
    from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
    from jupyter_gpu.sources import peers

    gib = 1024**3
    gpus = tuple(
        GpuInfo(
            index=index,
            uuid=f"GPU-{index}",
            name="A100",
            memory_total=80 * gib,
            memory_free=10 * gib,
            processes=(GpuProcess(910003 + index, 70 * gib, "me"),),
        )
        for index in (0, 1)
    )
    monkeypatch.setattr(peers, "find_peers", lambda **_: peers.Peers({}))
    monkeypatch.setattr(session, "current_user", lambda: "me")
    monkeypatch.setattr(plan, "kernel_start_fence", lambda: plan.Fence({"CUDA_VISIBLE_DEVICES": "GPU-1"}))
    request = plan.PlanRequest(selection="auto", min_free="40GiB")
    hint = magics._fit_hints(Snapshot(True, 0.0, gpus), request)
    assert "GPU 1 would fit" in hint and "GPU 0" not in hint, hint
    # Followed: process 910004 ended, and the same request passes
    after = replace(gpus[1], memory_free=80 * gib, processes=())
    chosen = plan.build_plan(request, Snapshot(True, 0.0, (gpus[0], after)), plan.kernel_start_fence(), own_user="me")
    assert chosen.selected_indices == (1,)
