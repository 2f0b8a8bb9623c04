"""The out-of-memory explainer's pure parts: recognising errors, the report, the user's other kernels."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess
from jupyter_gpu.core.units import GIB, MIB
from jupyter_gpu.kernel import oom
from jupyter_gpu.sources import peers
from jupyter_gpu.sources.processes import process_start

OLD_TORCH = (
    "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.50 GiB already "
    "allocated; 3.75 MiB free; 14.61 GiB reserved in total by PyTorch)"
)


def test_older_pytorch_runtime_error_is_recognised_with_its_figures() -> None:
    found = oom.recognize(RuntimeError(OLD_TORCH))
    assert found is not None and found.framework == "PyTorch" and found.device == 0
    assert found.requested_bytes == 20 * MIB
    assert found.in_use_bytes == int(14.50 * GIB) and found.reserved_bytes == int(14.61 * GIB)


def test_cause_chain_and_tensorflow_messages_from_other_exceptions() -> None:
    try:
        try:
            raise RuntimeError("failed to allocate 2.00G (2147483648 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY")
        except RuntimeError as inner:
            raise ValueError("the model could not be built") from inner
    except ValueError as outer:
        found = oom.recognize(outer)
    assert found is not None and found.framework == "CUDA" and found.requested_bytes == 2147483648


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Out of memory"),
        RuntimeError("CUDA error: an illegal memory access"),
        type("OutOfMemoryError", (Exception,), {})("host"),
        _Unprintable(),
        None,
    ],
)
def test_other_errors_are_not_gpu_out_of_memory(error: BaseException | None) -> None:
    assert oom.recognize(error) is None


def _gpu(
    index: int, total_gib: float, processes: list[tuple[int, float, str | None]], name: str = "NVIDIA A100"
) -> GpuInfo:
    used = int(sum(m for _, m, _ in processes) * GIB)
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index}",
        name=name,
        memory_total=int(total_gib * GIB),
        memory_used=used,
        memory_free=int(total_gib * GIB) - used,
        processes=tuple(GpuProcess(pid, int(m * GIB), user) for pid, m, user in processes),
    )


def test_an_admin_ceiling_that_ran_out_is_named_and_no_higher_limit_offered() -> None:
    error = oom.OutOfMemory("PyTorch", "torch", device=0, requested_bytes=4 * GIB)
    facts = oom.Facts(
        gpus=[_gpu(0, 80, [(100, 15.5, "me")]), _gpu(1, 80, [(200, 70, "bob")])],
        own_pid=100,
        own_user="me",
        device_gpus=(0,),
        limits={0: 16 * GIB},
        limit_from_ceiling=True,
        admin_ceiling="16GiB",
    )
    report = oom.explain(error, facts)
    assert "This kernel's limit on GPU 0 is 16 GiB (the admin ceiling 16GiB), and it ran out, not the GPU" in report
    assert "%gpu_limit" not in report.split("Next steps:")[1]
    assert "GPU 1 has" not in report  # 10 GiB free there: not room for 15.5 + 4 GiB


def test_19_7_a_suggestion_the_planner_refuses_is_changed_until_it_passes_or_left_out() -> None:
    """%gpu_limit 50GiB on GPU 0 (80 GiB). GPU 1 (48 GiB, idle) has room for 30 + 2 GiB, but not for the
    limit: a limit that fits comes first. GPU 2 (48 GiB) is outside the kernel's fence: never offered."""
    from jupyter_gpu.core.snapshot import Snapshot
    from jupyter_gpu.plan import Fence, PlanRequest, build_plan

    gpus = [_gpu(0, 80, [(100, 30, "me"), (200, 20, "bob")]), _gpu(1, 48, []), _gpu(2, 48, [])]
    snapshot = Snapshot(True, 0.0, tuple(gpus))
    fence = Fence({"CUDA_VISIBLE_DEVICES": "GPU-0,GPU-1"})
    request = PlanRequest(selection="0", limits=("50GiB",))
    error = oom.OutOfMemory("PyTorch", "torch", device=0, requested_bytes=2 * GIB)
    facts = oom.Facts(
        gpus=gpus,
        own_pid=100,
        own_user="me",
        device_gpus=(0,),
        allowed=(0, 1),
        limits={0: 50 * GIB},
        request=request,
        snapshot=snapshot,
        fence=fence,
    )
    steps = oom.explain(error, facts).split("Next steps:")[1]
    assert "GPU 1 has 48 GiB free: `%gpu_limit 48GiB`, `%gpu_select 1`, then `%gpu_restart`" in steps, steps
    assert "GPU 2" not in steps
    followed = PlanRequest(selection="1", limits=("48GiB",))
    assert build_plan(followed, snapshot, fence).memory_limit_bytes(1) == 48 * GIB  # what the restart applies
    # 47 + 0.2 GiB needed, 47.5 GiB free on GPU 1: room, but no whole GiB limit that fits both: left out
    tight_gpus = [_gpu(0, 80, [(100, 47, "me"), (200, 20, "bob")]), _gpu(1, 48, [(300, 0.5, "me")]), gpus[2]]
    tight = replace(facts, gpus=tight_gpus, snapshot=Snapshot(True, 0.0, tuple(tight_gpus)))
    steps = oom.explain(replace(error, requested_bytes=GIB // 5), tight).split("Next steps:")[1]
    assert "%gpu_select 1" not in steps and "GPU 1 has" not in steps, steps


def test_without_nvml_or_a_mapping_the_report_says_so_and_still_has_a_next_step() -> None:
    error = oom.OutOfMemory("JAX", "jax", requested_bytes=GIB)
    report = oom.explain(error, oom.Facts(gpus=(), own_pid=1, own_user=None))
    assert "NVML cannot be read here" in report and "Next steps:" in report
    report = oom.explain(error, oom.Facts(gpus=[_gpu(0, 80, []), _gpu(1, 80, [])], own_pid=1, own_user=None))
    assert "Which GPU this was cannot be told" in report


def test_explain_error_never_raises_and_ignores_other_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert oom.explain_error(ValueError("x")) is None

    def broken(*_args: object, **_kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(oom, "gather_facts", broken)
    report = oom.explain_error(RuntimeError(OLD_TORCH))
    assert report is not None and "the explanation failed: OSError: disk on fire" in report


# -- the user's other kernels: untrusted answers and files


def test_server_answer_is_read_defensively() -> None:
    answer = {
        "kernels": [
            {"kernel_id": "k1", "pid": 11, "notebook": "a.ipynb", "idle_s": 30.0, "idle": True},
            {"kernel_id": "k2", "pid": "12", "notebook": 7, "idle_s": float("nan")},
            {"kernel_id": ["x"], "pid": 13},
            "junk",
            None,
        ],
        "gpus": [
            {
                "processes": [
                    {"pid": 21, "own": True, "kernel_id": "k1", "idle_s": -5},
                    {"pid": 22, "own": False, "kernel_id": "k9", "notebook": "evil.ipynb"},
                    {"pid": True, "own": True, "kernel_id": "k1"},
                ]
            },
            5,
        ],
    }
    found = peers.parse_server_snapshot(answer)
    assert set(found) == {11, 21}
    assert found[11] == peers.KernelPeer(11, "k1", "a.ipynb", 30.0, True)
    assert found[21].notebook == "a.ipynb" and found[21].idle_s is None  # negative idle time dropped
    assert peers.parse_server_snapshot(["not", "a", "dict"]) == {}


def test_runtime_files_of_other_users_or_too_large_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's server, as the OOM report finds it (:mod:`jupyter_gpu.sources.servers`' rule)."""
    from jupyter_gpu.sources import servers

    me = os.getppid()
    monkeypatch.setattr(servers, "_ancestors", lambda: [me])

    def found() -> list[tuple[str, str]]:
        return [(s.url, s.token) for s in servers.running_servers(tmp_path, ancestors_only=True)]

    good = tmp_path / "jpserver-1.json"
    good.write_text(json.dumps({"pid": me, "url": "http://127.0.0.1:8888/", "token": "t"}))
    assert found() == [("http://127.0.0.1:8888/", "t")]
    good.write_text(json.dumps({"pid": me, "url": "file:///etc/passwd", "token": "t"}))
    assert found() == []
    good.write_text(json.dumps({"pid": me + 1, "url": "http://127.0.0.1:8888/", "token": "t"}))
    assert found() == []  # not this kernel's server
    good.write_text(json.dumps({"pid": me, "url": "http://127.0.0.1:8888/", "token": "t", "pad": "x" * 70_000}))
    assert found() == []
    good.write_text(json.dumps({"pid": me, "url": "http://127.0.0.1:8888/", "token": "t"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    good.rename(elsewhere / "real.json")
    good.symlink_to(elsewhere / "real.json")
    assert found() == []  # a link (planted in a shared folder) is never followed
    good.unlink()
    (elsewhere / "real.json").rename(good)
    if os.getuid() == 0:  # only root can give a file away
        os.chown(good, 4242, 4242)
        assert found() == []


def test_on_a_mig_slice_the_slice_is_what_ran_out() -> None:
    from jupyter_gpu.core.snapshot import MigSlice

    bob = GpuProcess(200, 30 * GIB, "bob", slice="MIG-a")
    mine = GpuProcess(100, int(9.4 * GIB), "me", slice="MIG-c")
    slices = (
        MigSlice(
            0, "MIG-a", "NVIDIA A100 MIG 3g.40gb", "3g.40gb", 2, 0, 40 * GIB, 30 * GIB, 10 * GIB, processes=(bob,)
        ),
        MigSlice(
            2,
            "MIG-c",
            "NVIDIA A100 MIG 1g.10gb",
            "1g.10gb",
            9,
            0,
            int(9.5 * GIB),
            int(9.4 * GIB),
            int(0.1 * GIB),
            processes=(mine,),
        ),
    )
    parent = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="NVIDIA A100",
        memory_total=80 * GIB,
        memory_used=int(39.4 * GIB),
        memory_free=int(40.6 * GIB),
        processes=(bob, mine),
        mig_mode=True,
        slices=slices,
    )
    other_mig = GpuInfo(
        index=2, uuid="GPU-2", name="NVIDIA A100", memory_total=80 * GIB, memory_free=80 * GIB, mig_mode=True
    )
    views = oom.slice_views([parent, _gpu(1, 80, []), other_mig], "MIG-c")
    assert [(g.index, g.uuid) for g in views] == [(0, "MIG-c"), (1, "GPU-1")]  # GPU 2 cannot be selected whole
    error = oom.OutOfMemory("PyTorch", "torch", device=0, requested_bytes=GIB)
    report = oom.explain(error, oom.Facts(gpus=views, own_pid=100, own_user="me", device_gpus=(0,)))
    assert "GPU 0 A100 MIG 1g.10gb" in report and "9.5 GiB total" in report  # the slice, not the 80 GiB card
    assert "bob" not in report  # bob works on another slice: he does not hold this memory
    assert "%gpu_select 1" in report and "%gpu_select 2" not in report


def test_kernel_reports_count_only_while_their_writer_runs(tmp_path, monkeypatch) -> None:
    """A report left by a dead kernel (or naming a PID now reused) is no peer; a live one is."""
    import json
    import subprocess
    import sys

    from jupyter_gpu.kernel.report import REPORT_PREFIX, build_report
    from jupyter_gpu.sources import peers

    monkeypatch.setenv("JPY_SESSION_NAME", "work/train_old.ipynb")
    live = build_report("live-kernel", nvml_pids=[4_000_111])
    (tmp_path / f"{REPORT_PREFIX}live-kernel.json").write_text(json.dumps(live))
    dead_process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead = {**live, "kernel_id": "dead-kernel", "pid": int(dead_process.stdout), "nvml_pids": [4_000_222]}
    (tmp_path / f"{REPORT_PREFIX}dead-kernel.json").write_text(json.dumps(dead))
    (tmp_path / f"{REPORT_PREFIX}bad-kernel.json").write_text('{"kernel_id": "bad-kernel", "pid": NaN}')
    found = peers._from_reports(tmp_path)
    assert {pid: peer.kernel_id for pid, peer in found.items()} == {
        live["pid"]: "live-kernel",
        4_000_111: "live-kernel",
    }
    assert found[4_000_111].notebook == "train_old.ipynb"


# -- the user's other kernels from reports in a crowded, shared folder (the flake of the PyTorch kernel test)


def _peers_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> oom.Facts:
    """find_peers as a kernel whose connection file lies in ``folder`` (no server), as facts for explain."""
    from jupyter_gpu.sources import kernel_reports

    monkeypatch.setattr(kernel_reports, "kernel_identity", lambda: ("this-kernel", folder))
    found = peers.find_peers()
    assert found.source == "kernel reports"
    return oom.Facts(gpus=(), own_pid=1, own_user="me", peers=found.by_pid, peers_source=found.source)


@pytest.fixture
def other_kernel() -> Iterator[int]:
    """A running process of this user, standing in for another kernel (find_peers leaves out its own PID)."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _write_report(folder: Path, kernel_id: str, **fields: object) -> Path:
    from jupyter_gpu.kernel.report import REPORT_PREFIX, build_report

    path = folder / f"{REPORT_PREFIX}{kernel_id}.json"
    path.write_text(json.dumps({**build_report(kernel_id), **fields}))
    return path


def test_the_live_kernels_report_is_found_among_thousands_left_by_killed_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_kernel: int
) -> None:
    """What the full suite did to /tmp: kernels started by a bare KernelManager keep their connection
    files (and so their reports) in /tmp, and killed kernels leave their reports behind. With 1,100
    of them sorting before the live kernel's report, the explainer (which once read the first 1,024
    names only) lost the live kernel and showed it as 'your process PID n'."""
    start = process_start(other_kernel)
    assert isinstance(start, int)
    for number in range(1100):  # reports of dead kernels; some had this very PID before it wrapped
        _write_report(
            tmp_path,
            f"a-stale-{number:04d}",
            pid=other_kernel if number % 100 == 0 else 4_000_000 + number,
            start_time=start - 1 - number,
            session=f"stale-{number}.ipynb",
        )
    monkeypatch.setenv("JPY_SESSION_NAME", "work/train_old.ipynb")
    _write_report(tmp_path, "z-live", pid=other_kernel, start_time=start, nvml_pids=[4_000_111])
    facts = _peers_in(tmp_path, monkeypatch)
    assert {pid: peer.notebook for pid, peer in facts.peers.items()} == {
        other_kernel: "train_old.ipynb",
        4_000_111: "train_old.ipynb",
    }


def test_a_report_without_a_start_time_never_names_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_kernel: int
) -> None:
    """A report whose start time is null matches any PID with no process here: a dead kernel's PID,
    or a host PID NVML shows inside a container, which may be another user's process."""
    host_pid = 4_100_002  # no such process in this PID namespace (pid_max is far lower)
    assert process_start(host_pid) is None
    _write_report(tmp_path, "ghost", pid=host_pid, start_time=None, session="ghost.ipynb")
    _write_report(tmp_path, "ghost-2", pid=other_kernel, start_time=None, session="ghost-2.ipynb")  # running
    facts = _peers_in(tmp_path, monkeypatch)
    assert facts.peers == {}
    gpu = _gpu(0, 80, [(1, 10, "me"), (host_pid, 24, "carol")])
    report = oom.explain(oom.OutOfMemory("PyTorch", "torch", device=0), replace_gpus(facts, gpu))
    assert "carol: 24 GiB" in report and "ghost" not in report


def replace_gpus(facts: oom.Facts, *gpus: GpuInfo) -> oom.Facts:
    from dataclasses import replace

    return replace(facts, gpus=gpus, device_gpus=tuple(gpu.index for gpu in gpus))


def test_reports_of_other_users_and_symbolic_links_are_no_kernels_of_this_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_kernel: int
) -> None:
    """In a folder others may write to (/tmp), a file of another user names nothing of this user's,
    even with the PID and start time of a running process (anyone can read those in /proc)."""
    monkeypatch.setenv("JPY_SESSION_NAME", "mine.ipynb")
    running = {"pid": other_kernel, "start_time": process_start(other_kernel)}
    mine = _write_report(tmp_path, "real", **running)
    (tmp_path / "store").mkdir()
    (tmp_path / "links").mkdir()
    target = _write_report(tmp_path / "store", "linked", **running)
    (tmp_path / "links" / target.name).symlink_to(target)
    assert _peers_in(tmp_path / "links", monkeypatch).peers == {}  # a link is not a report
    assert set(_peers_in(tmp_path, monkeypatch).peers) == {other_kernel}
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(mine, 4242, 4242)
    assert _peers_in(tmp_path, monkeypatch).peers == {}


def test_a_kernel_report_cannot_make_another_users_process_one_of_this_users_kernels() -> None:
    """Reports are untrusted: one listing another user's PID among its ``nvml_pids`` does not
    relabel that process; a PID whose owner is unknown here (a host PID in a container) may be the kernel's."""
    gpu = _gpu(0, 80, [(1, 10, "me"), (4_100_002, 24, "carol"), (4_100_003, 8, None)])
    kernel = peers.KernelPeer(None, "k1", "train_old.ipynb")
    facts = oom.Facts(
        gpus=(gpu,),
        own_pid=1,
        own_user="me",
        device_gpus=(0,),
        peers={4_100_002: kernel, 4_100_003: kernel},
        peers_source="kernel reports",
    )
    report = oom.explain(oom.OutOfMemory("PyTorch", "torch", device=0), facts)
    assert "carol: 24 GiB" in report
    assert "your kernel train_old.ipynb: 8 GiB" in report


def test_names_from_reports_nvml_and_other_users_are_shown_bidi_safe_on_one_short_line() -> None:
    """A notebook name (another kernel's report or the server), a process, user or GPU name is untrusted:
    a bidi control or a newline in it must not reorder or split the report, and a huge one must not flood it."""
    evil = "a\nb\u202e" + "x" * 3000 + ".ipynb"
    gpu = _gpu(0, 80, [(1, 10, "me"), (2, 10, "me"), (3, 5, "ev\u202eil\nuser")], name="NVIDIA A100\u2067")
    gpu = replace(gpu, processes=(*gpu.processes, GpuProcess(4, 5 * GIB, "me", name="p\u202e" * 500)))
    facts = oom.Facts(
        gpus=(gpu,),
        own_pid=1,
        own_user="me",
        device_gpus=(0,),
        own_notebook="mine\u2066.ipynb",
        peers={2: peers.KernelPeer(2, "k1", evil, 700.0, True)},
        peers_source="server extension",
    )
    report = oom.explain(oom.OutOfMemory("PyTorch", "torch", device=0), facts)
    assert not any(char in report for char in "\u202e\u2066\u2067"), report
    lines = report.splitlines()
    assert not any(line.startswith(("b", "user")) for line in lines), report  # no name split the report
    assert max(len(line) for line in lines) < 200, report
    assert "your kernel a\ufffdb\ufffdxxx" in report and "ev\ufffdil\ufffduser: 5 GiB" in report
    assert "GPU 0 A100\ufffd (PyTorch cuda:0)" in report and "this kernel (mine\ufffd.ipynb)" in report


def test_next_actions_need_a_kernel_id_a_plan_and_a_cache_worth_freeing() -> None:
    """The buttons of the report (kernel/oom_offer.py): none that could not be done."""
    from jupyter_gpu.sources.peers import KernelPeer

    def gpu(index: int, free_gib: int, processes: tuple[GpuProcess, ...] = ()) -> GpuInfo:
        total = 80 << 30
        return GpuInfo(
            index=index,
            uuid=f"GPU-{index}",
            name="A100",
            memory_total=total,
            memory_used=total - (free_gib << 30),
            memory_free=free_gib << 30,
            processes=processes,
        )

    held = (
        GpuProcess(pid=10, memory=30 << 30),
        GpuProcess(pid=20, memory=22 << 30),
        GpuProcess(pid=30, memory=1 << 30),
    )
    gpus = (gpu(0, 3, held), gpu(1, 60))
    peers = {20: KernelPeer(20, "k-old", "old.ipynb", 3600.0, True), 30: KernelPeer(30, None, "noid.ipynb")}
    error = oom.recognize(RuntimeError(OLD_TORCH))
    assert error is not None
    facts = oom.Facts(gpus=gpus, own_pid=10, own_user="me", device_gpus=(0,), peers=peers)
    kinds = [action["kind"] for action in oom.next_actions(error, facts)]
    assert kinds.count("shutdown") == 1 and "restart" not in kinds  # no plan request known: no restart
    (shutdown,) = [action for action in oom.next_actions(error, facts) if action["kind"] == "shutdown"]
    assert shutdown["kernel_id"] == "k-old" and shutdown["gpu"] == 0 and shutdown["memory"] == 22 << 30


def test_31_5_an_allocation_over_the_kernels_own_cap_says_the_cap_and_offers_raising_it() -> None:
    """TensorFlow on GPU 2 under %gpu_limit 4GiB asks for 16 GiB: the cap is what ran out. No "restart on
    GPU 2 with growth" (the GPU it is on, whose restart applies the same cap), but a higher limit."""
    from jupyter_gpu.core.snapshot import Snapshot
    from jupyter_gpu.plan import Fence, PlanRequest

    # NVML does not show this kernel (TensorFlow failed before it held anything there)
    gpus = [_gpu(0, 80, [(200, 70, "bob")]), _gpu(1, 48, [(300, 40, "carol")]), _gpu(2, 48, [])]
    request = PlanRequest(selection="2", limits=("4GiB",))
    error = oom.OutOfMemory("TensorFlow", "tensorflow", device=0, requested_bytes=16 * GIB)
    facts = oom.Facts(
        gpus=gpus,
        own_pid=100,
        own_user="me",
        device_gpus=None,  # what TensorFlow uses could not be read
        limits={2: 4 * GIB},
        request=request,
        snapshot=Snapshot(True, 0.0, tuple(gpus)),
        fence=Fence({}),
    )
    for device_gpus in (None, (2,)):  # unmapped, and mapped through the plan
        report = oom.explain(error, replace(facts, device_gpus=device_gpus))
        steps = report.split("Next steps:")[1]
        assert "Which GPU this was cannot be told" not in report or device_gpus is None
        assert "the limit ran out, not the GPU" in report or "and it ran out, not the GPU" in report, report
        assert "raise this kernel's limit: `%gpu_limit 16GiB`, then `%gpu_restart`" in steps, steps
        assert "%gpu_select" not in steps and "GPU 0 has" not in steps, steps
        actions = oom.next_actions(error, replace(facts, device_gpus=device_gpus))
        assert [a["kind"] for a in actions] == ["raise_limit"], actions
        assert actions[0]["request"].limits == (actions[0]["limit"],) and actions[0]["request"].selection == "2"
    report = oom.explain(error, replace(facts, device_gpus=(2,)))
    assert "GPU 2 A100 (TensorFlow /GPU:0)" in report and "This kernel's limit on GPU 2 is 4 GiB (%gpu_limit)" in report
    unmapped = oom.explain(error, facts)
    assert "This kernel's limit is 4 GiB per GPU, less than the 16 GiB it asked for" in unmapped
    assert "`%gpu_limit 16GiB`" in unmapped


def test_31_5_the_framework_device_is_mapped_through_the_plan_when_it_cannot_be_read() -> None:
    from jupyter_gpu import frameworks
    from jupyter_gpu.core.snapshot import Snapshot
    from jupyter_gpu.kernel.oom.gather import planned_gpus
    from jupyter_gpu.plan import Fence, PlanRequest, build_plan

    gpus = (_gpu(0, 80, []), _gpu(1, 48, []), _gpu(2, 48, []))
    snapshot = Snapshot(True, 0.0, gpus)
    plan = build_plan(PlanRequest(selection="2,0", limits=("4GiB",)), snapshot, Fence({}))
    assert planned_gpus(frameworks.TENSORFLOW, plan, gpus) == (2, 0)
    only = build_plan(PlanRequest(limits=("4GiB",)), Snapshot(True, 0.0, gpus[:1]), Fence({}))
    assert planned_gpus(frameworks.TENSORFLOW, only, gpus[:1]) == (0,)


def test_a_runs_processes_are_yours_named_from_its_claim_and_another_users_never() -> None:
    """Issue 30: `jupyter-gpu run`'s processes count as this user's, named by the run's own claim; a
    run description given for another user's PID names nothing (a claim is believed only about its
    owner's own processes)."""
    gpu = _gpu(0, 80, [(1, 10, "me"), (700, 30, "me"), (701, 6, "me"), (800, 20, "carol")])
    run = "train.py (jupyter-gpu run), 2 h"
    facts = oom.Facts(
        gpus=(gpu,), own_pid=1, own_user="me", device_gpus=(0,), runs={700: run, 701: run, 800: "forged.py"}
    )
    report = oom.explain(oom.OutOfMemory("PyTorch", "torch", device=0), facts)
    assert f"your process PID 700 ({run}): 36 GiB" in report  # the run's worker adds up under it
    assert "carol: 20 GiB" in report and "forged" not in report


# Real errors on an NVIDIA H100 80GB HBM3 (driver 580.159.04), PyTorch 2.11.0 and JAX 0.11.2, read
# by the GPU check's session on 2026-11-27 (docs/real-gpu.md): their classes and messages as raised.
REAL_TORCH_BEYOND_GPU = (
    "CUDA out of memory. Tried to allocate 186.27 GiB. GPU 0 has a total capacity of 79.18 GiB of which 78.66 GiB "
    "is free. Including non-PyTorch memory, this process has 518.00 MiB memory in use. Of the allocated memory 0 "
    "bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-"
    "usage-with-pytorch-cuda-alloc-conf)"
)
REAL_TORCH_UNDER_FRACTION = (  # torch.cuda.set_per_process_memory_fraction(0.05), expandable segments
    "CUDA out of memory. Tried to allocate 2.79 GiB. GPU 0 has a total capacity of 79.18 GiB of which 75.85 GiB is "
    "free. Including non-PyTorch memory, this process has 3.32 GiB memory in use. 3.96 GiB allowed; Of the allocated "
    "memory 2.79 GiB is allocated by PyTorch, and 18.98 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
REAL_JAX = (
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.45GiB with allocator GPU_0_bfc on device 0. "
    "[executable_name='jit_broadcast_in_dim'] [tf-allocator-allocation-error='']"
)


def _raised_as(module: str, name: str, message: str) -> BaseException:
    cls = type(name, (RuntimeError,), {"__module__": module})
    return cls(message)


@pytest.mark.parametrize(
    ("module", "name", "message", "expected"),
    [
        ("torch", "OutOfMemoryError", REAL_TORCH_BEYOND_GPU, ("PyTorch", 0, 186.27 * GIB, 0, 0)),
        (
            "torch",
            "OutOfMemoryError",
            REAL_TORCH_UNDER_FRACTION,
            ("PyTorch", 0, 2.79 * GIB, 2.79 * GIB, int(2.79 * GIB) + int(18.98 * MIB)),
        ),
        ("jax.errors", "JaxRuntimeError", REAL_JAX, ("JAX", 0, 7.45 * GIB, None, None)),
    ],
)
def test_real_errors_of_pytorch_2_11_and_jax_0_11_are_read_with_their_device_and_figures(
    module: str, name: str, message: str, expected: tuple[object, ...]
) -> None:
    found = oom.recognize(_raised_as(module, name, message))
    assert found is not None
    framework, device, requested, in_use, reserved = expected
    assert (found.framework, found.device) == (framework, device)
    assert found.requested_bytes == int(requested)  # type: ignore[call-overload]
    assert found.in_use_bytes == (None if in_use is None else int(in_use))  # type: ignore[call-overload]
    assert found.reserved_bytes == (None if reserved is None else int(reserved))  # type: ignore[call-overload]


def test_an_allocation_larger_than_every_usable_gpu_is_told_so_and_offers_no_freeing() -> None:
    """The real H100 error above asked for 186 GiB of an 80 GiB GPU: no step that frees, moves or
    shuts down can make room, so the one next step is a smaller allocation, and no button is offered."""
    found = oom.recognize(_raised_as("torch", "OutOfMemoryError", REAL_TORCH_BEYOND_GPU))
    assert found is not None
    gpus = [_gpu(0, 80, [(4711, 30, "me")]), _gpu(1, 80, [])]
    facts = oom.Facts(gpus=gpus, own_pid=4711, own_user="me", device_gpus=(0,))
    text = oom.explain(found, facts)
    steps = text[text.index("Next steps:") :].splitlines()[1:]
    assert steps == [
        "  - it asked for 186.3 GiB in one allocation, more than the whole memory of any GPU this kernel may use "
        "(GPU 0: 80 GiB): freeing memory cannot make room for it; make that allocation smaller (a smaller batch, "
        "sequence or model, or split the tensor)"
    ]
    assert oom.next_actions(found, facts) == ()
    smaller = replace(found, requested_bytes=60 * GIB)  # fits GPU 1: the usual steps come back
    assert "more than the whole memory" not in oom.explain(smaller, facts)


@pytest.mark.parametrize(
    ("module", "name", "message"),
    [
        (
            "tensorflow.python.framework.errors_impl",
            "ResourceExhaustedError",
            "OOM when allocating tensor with shape["
            + ",".join(["99999999"] * 30)
            + "] and type float on /device:GPU:0",
        ),
        ("torch", "OutOfMemoryError", "CUDA out of memory. Tried to allocate " + "9" * 40 + " GiB. GPU 0 has a total"),
        (
            "jax.errors",
            "JaxRuntimeError",
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate " + "9" * 300 + " bytes",
        ),
    ],
)
def test_a_size_no_device_could_have_is_read_as_unknown_not_printed_whole(module: str, name: str, message: str) -> None:
    """A message can claim any size; above 8 PiB (more than any device, and past what every face
    formats exactly) the figure is unknown, so the report's first line stays one short line."""
    found = oom.recognize(_raised_as(module, name, message))
    assert found is not None and found.requested_bytes is None
    text = oom.explain(found, oom.Facts(gpus=[_gpu(0, 80, [])], own_pid=1, own_user="me", device_gpus=(0,)))
    assert len(text.splitlines()[0]) < 80 and "more than the whole memory" not in text
    real = oom.recognize(_raised_as("torch", "OutOfMemoryError", "CUDA out of memory. Tried to allocate 7000 TiB."))
    assert real is not None and real.requested_bytes == 7000 * 1024 * GIB  # a real (if absurd) request stays


TORCH_OOM = ("torch", "OutOfMemoryError")
TF_OOM = ("tensorflow.python.framework.errors_impl", "ResourceExhaustedError")
JAX_OOM = ("jaxlib.xla_extension", "XlaRuntimeError")
MANY = "7" * 5000  # past the 4,300 digits Python converts to an int; a 400-digit GiB is float infinity


@pytest.mark.parametrize(
    ("error", "message", "device", "requested"),
    [
        (TORCH_OOM, f"CUDA out of memory. Tried to allocate {'7' * 400} GiB. GPU 1 has a total", 1, None),
        (TORCH_OOM, f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU {MANY} has a total", None, 2 * GIB),
        (TF_OOM, f"OOM when allocating tensor with shape[2] and type float on /device:GPU:{MANY}", None, 8),
        (TF_OOM, f"OOM when allocating tensor with shape[{MANY},2] and type float on /device:GPU:1", 1, None),
        (TF_OOM, f"OOM when allocating ({MANY} bytes) on /device:GPU:1", 1, None),
        (
            JAX_OOM,
            f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate 100 bytes on device ordinal {MANY}",
            None,
            100,
        ),
        (JAX_OOM, f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {MANY} bytes on device 1.", 1, None),
    ],
)
def test_a_number_too_long_to_be_real_is_unknown_and_the_error_still_recognised(
    error: tuple[str, str], message: str, device: int | None, requested: int | None
) -> None:
    """Python refuses to turn more than 4,300 digits into an int, and float() makes a 400-digit size
    infinite: each left the whole error unrecognised (no report at all). Only that figure is unknown."""
    found = oom.recognize(_raised_as(*error, message))
    assert found is not None
    assert (found.device, found.requested_bytes) == (device, requested)
