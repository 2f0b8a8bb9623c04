"""Which kernel holds which GPU process (server.attribution) and the answer built on it
(server.answer), without a server: kernel records, process keys, ancestors and kernel reports in;
matches, holdings, summaries, notes and answers out."""

from __future__ import annotations

import json

from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
from jupyter_gpu.server.answer import AnswerBuilder
from jupyter_gpu.server.attribution import (
    CONTAINER_NOTE,
    AttributedSnapshot,
    CullPolicy,
    Holdings,
    KernelInfo,
    KernelMatcher,
    KernelTable,
    attribution_note,
    current_reports,
    kernel_summary,
    process_fields,
)
from jupyter_gpu.server.config import JupyterGpuServer
from jupyter_gpu.sources.kernel_reports import KernelReport

NOW = 10_000.0
POLICY = CullPolicy(idle_threshold_s=60.0, cull_idle_after_s=120.0, cull_warn_s=30.0)


def kernel(kernel_id="k1", pid=100, start=5, **fields):
    return KernelInfo(kernel_id=kernel_id, pid=pid, start=start, **fields)


def report(kernel_id="k1", pid=100, start=5, nvml_pids=(), gpu_memory=(), session=None):
    return KernelReport(kernel_id, pid, start, session, tuple(nvml_pids), tuple(gpu_memory), NOW - 2)


def test_a_report_counts_only_while_its_writer_is_the_kernels_process():
    kernels = {"k1": kernel(), "k2": kernel("k2", pid=200, start=None)}
    reports = {
        "k1": report(),
        "k2": report("k2", pid=200, start=None),  # the kernel's start is unknown: no proof
        "k3": report("k3"),  # not this server's kernel
    }
    assert current_reports(reports, kernels) == {"k1": reports["k1"]}
    assert current_reports({"k1": report(start=6)}, kernels) == {}  # a restarted kernel / reused PID


def test_a_process_is_matched_by_its_key_then_its_ancestors_then_the_reports():
    k1, k2, k3 = kernel(), kernel("k2", pid=200, start=7), kernel("k3", pid=300, start=9)
    kernels = {"k1": k1, "k2": k2, "k3": k3}
    keys = {100: (100, 5), 150: (150, 8), 400: (400, 1), 500: (500, 1)}
    ancestry = {150: ((120, 1), (200, 7)), 500: ((100, 4),)}
    matcher = KernelMatcher(kernels, keys, ancestry, {"k3": report("k3", 300, 9, nvml_pids=[4242])})
    assert matcher.kernel_of(100) is k1  # the kernel's own process
    assert matcher.kernel_of(150) is k2  # its grandchild
    assert matcher.kernel_of(4242) is k3  # a host PID its report names (a container)
    assert matcher.kernel_of(500) is None  # an ancestor with k1's PID but another start time
    assert matcher.kernel_of(400) is None


def test_a_pid_reused_by_another_process_is_not_the_kernels():
    matcher = KernelMatcher({"k1": kernel()}, {100: (100, 6)}, {}, {})
    assert matcher.kernel_of(100) is None


def test_holdings_sum_memory_per_kernel_gpu_slice_and_label():
    holdings = Holdings()
    holdings.add("k1", "a.ipynb", 0, GpuProcess(100, 10))
    holdings.add("k1", "a.ipynb", 0, GpuProcess(101, None))
    holdings.add("k1", None, 1, GpuProcess(102, 5, slice="MIG-1"))
    assert holdings.matched == 3
    assert holdings.memory == {"k1": 15}
    assert holdings.gpus == {"k1": {0, 1}}
    assert holdings.slices == {"k1": {"MIG-1"}}
    assert holdings.by_label == {("k1", "a.ipynb", "0"): 10, ("k1", "", "1"): 5}


def test_a_process_of_an_idle_kernel_counts_down_to_culling():
    info = kernel(execution_state="idle", last_activity=NOW - 100)
    fields = process_fields(info, "a.ipynb", 100.0, 1 << 20, POLICY)
    assert fields == {
        "kernel_id": "k1",
        "notebook": "a.ipynb",
        "own": True,
        "idle_s": 100.0,
        "idle": True,
        "cull_in_s": 20.0,
        "cull_warning": True,
    }
    assert process_fields(info, None, 100.0, 0, POLICY)["cull_in_s"] is None  # no memory, no countdown


def test_a_kernel_summary_joins_nvml_holdings_and_its_own_report():
    info = kernel(name="python3", notebook=None, execution_state="idle", last_activity=NOW - 30, connections=2)
    holdings = Holdings()
    holdings.add("k1", None, 0, GpuProcess(100, 64))
    own = report(gpu_memory=[("MIG-2", 32), ("MIG-9", 0)], session="b.ipynb")
    summary = kernel_summary(info, holdings, own, NOW, POLICY, {"MIG-2", "MIG-9"})
    assert summary == {
        "kernel_id": "k1",
        "name": "python3",
        "notebook": "b.ipynb",  # from the report: the session manager did not name it
        "pid": 100,
        "execution_state": "idle",
        "idle_s": 30.0,
        "idle": False,
        "gpu_memory": 64,
        "gpus": [0],
        "slices": ["MIG-2"],  # a slice it reports memory on
        "reported_gpu_memory": {"MIG-2": 32, "MIG-9": 0},
        "report_age_s": 2.0,
        "cull_in_s": 90.0,
        "cull_warning": False,
        "connections": 2,  # websockets connected to it, as the kernel manager counts them
    }


def test_a_kernel_known_only_by_its_report_is_a_culling_candidate_and_a_busy_one_is_not():
    idle = kernel(execution_state="idle", last_activity=NOW - 500)
    own = report(gpu_memory=[("0", 8)])
    assert kernel_summary(idle, Holdings(), own, NOW, POLICY)["cull_in_s"] == 0.0
    busy = kernel(execution_state="busy", last_activity=NOW - 500)
    summary = kernel_summary(busy, Holdings(), own, NOW, POLICY)
    assert (summary["idle_s"], summary["idle"], summary["cull_in_s"]) == (0.0, False, None)


def test_the_attribution_note_says_how_processes_were_matched():
    sample = Snapshot(nvml_available=True, timestamp=NOW)
    assert attribution_note(Snapshot(nvml_available=False, timestamp=NOW, error="no driver"), 0, 0, 0, {}) == (
        "unavailable",
        "NVML cannot be read: no driver",
    )
    assert attribution_note(sample, 3, 0, 2, {}) == ("pid", None)
    mode, note = attribution_note(sample, 3, 1, 2, {})
    assert mode == "pid" and note.startswith("1 of 3 GPU processes")
    reporting = {"k1": report(gpu_memory=[("0", 8)])}
    mode, note = attribution_note(sample, 3, 3, 0, reporting)
    assert mode == "kernel-report" and note.startswith(CONTAINER_NOTE) and "not matched to kernels" in note
    assert attribution_note(sample, 3, 3, 1, {}) == (
        "kernel-report",
        f"{CONTAINER_NOTE} 1 matched by the NVML PIDs the kernels reported.",
    )
    mode, note = attribution_note(sample, 3, 3, 0, {})
    assert mode == "unavailable" and "No kernel reported its GPU use" in note


def test_an_answer_attributes_a_kernels_process_and_hides_other_users_names():

    config = JupyterGpuServer(idle_threshold_s=60.0, cull_idle_after_s=120.0, cull_warn_s=30.0)
    processes = (GpuProcess(100, 64, user="me", name="python"), GpuProcess(900, 8, user="other", name="secret"))
    sample = AttributedSnapshot(
        nvml_available=True,
        timestamp=NOW - 1,
        gpus=(GpuInfo(0, "GPU-0", "Sim", processes=processes),),
        keys={100: (100, 5), 900: (900, 1)},
    )
    table = KernelTable(3, {"k1": kernel(execution_state="idle", last_activity=NOW - 100)})
    answer = AnswerBuilder(config, "me").build(sample, table, NOW)
    body = json.loads(answer.body)
    mine, theirs = body["gpus"][0]["processes"]
    assert (mine["kernel_id"], mine["own"], mine["cull_in_s"], mine["name"]) == ("k1", True, 20.0, "python")
    assert (theirs["kernel_id"], theirs["own"], theirs["name"]) == (None, False, None)
    assert body["kernels"][0]["gpu_memory"] == 64 and body["stale"] is False and body["age_s"] == 1.0
    assert answer.key == (NOW - 1, 3, False, None)
    assert answer.kernel_memory == (("k1", "", "0", 64),) and answer.due == ()


def test_the_answer_shows_reservations_and_runs_as_the_users_own_never_anothers_label():
    from jupyter_gpu.core.availability import Reservation

    config = JupyterGpuServer(show_other_users=True)
    worker = GpuProcess(700, 64, user="me", name="python")  # a DataLoader worker of the run's child
    stranger = GpuProcess(800, 64, user="bob", name="python")  # bob's process: never a run of mine
    sample = AttributedSnapshot(
        nvml_available=True,
        timestamp=NOW - 1,
        gpus=(
            GpuInfo(0, "GPU-0", "Sim", processes=(worker, stranger)),
            GpuInfo(1, "GPU-1", "Sim"),
            GpuInfo(2, "GPU-2", "Sim"),
            GpuInfo(3, "GPU-3", "Sim"),
        ),
        keys={700: (700, 1), 800: (800, 1)},
        ancestry={700: ((650, 1), (600, 1)), 800: ((600, 1),)},
        reservations=(
            Reservation("GPU-0", own=True, kind="run", since=NOW - 7200, label="train.py", pid=600, holding=True),
            Reservation("GPU-1", own=True, kind="run", since=NOW - 7200, label="train.py", pid=600),
            Reservation("GPU-2", own=True, kind="kernel", since=NOW - 60, pid=100),
            Reservation("GPU-3", own=False),  # bob's: its label never reached this server
        ),
    )
    body = json.loads(AnswerBuilder(config, "me").build(sample, KernelTable(), NOW).body)
    gpus = body["gpus"]
    run, theirs = gpus[0]["processes"]
    assert (run["own"], run["mine"], run["run"]) == (True, True, {"label": "train.py", "since": NOW - 7200})
    assert (theirs["own"], theirs["mine"], "run" in theirs) == (False, False, False)
    assert gpus[0]["reservations"] == []  # the run holds memory there: in use, not reserved
    assert gpus[1]["reservations"] == [{"own": True, "kind": "run", "label": "train.py", "since": NOW - 7200}]
    assert gpus[2]["reservations"][0]["kind"] == "kernel"
    assert gpus[3]["reservations"] == [{"own": False}]
