"""The doctor's pure parts: what the plan means, the comparison, the causes, the report and its JSON,
the children's answers read as untrusted, the time box, the machine part on a failing NVML."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from support import UNDER_LOAD_S, wait_until

from jupyter_gpu import doctor
from jupyter_gpu.core.snapshot import GpuInfo
from jupyter_gpu.doctor import children, compare, machine, report
from jupyter_gpu.doctor.children import (
    ProbeDevice,
    ProbeResult,
    Probes,
    parse_answer,
    request_to_json,
    run_probes,
)
from jupyter_gpu.doctor.compare import PlanExpectation, check_devices, expectation, no_gpu_causes
from jupyter_gpu.plan import Fence, GpuPlan, PlannedGpu, PlanRequest

GIB = 1024**3
T400 = GpuInfo(index=0, uuid="GPU-aaaa-0000", name="NVIDIA T400 4GB", memory_total=4 * GIB)
A6000 = GpuInfo(index=1, uuid="GPU-bbbb-1111", name="NVIDIA RTX A6000", memory_total=48 * GIB)
WORKSTATION = (T400, A6000)


def plan_of(selection: tuple[int, ...] | None, limit: int | None = None, growth: bool = False) -> GpuPlan:
    gpus = tuple(
        PlannedGpu(gpu.index, gpu.uuid, gpu.name, gpu.memory_total, gpu.memory_total)
        for gpu in WORKSTATION
        if selection is None or gpu.index in selection
    )
    limits = {gpu.index: (limit,) for gpu in gpus} if limit else {}
    return GpuPlan(PlanRequest(growth=growth), selection, gpus, limits)


def probe(*devices: ProbeDevice, growth: bool | None = False, **fields: Any) -> ProbeResult:
    return ProbeResult("torch", 1.0, devices=devices, growth=growth, **fields)


# -- what the plan means


def test_a_selection_means_its_gpus_in_its_order() -> None:
    expect = expectation(plan_of((1, 0), limit=2 * GIB, growth=True), WORKSTATION, {})
    assert expect.indices == (1, 0)
    assert expect.caps == {0: (2 * GIB,), 1: (2 * GIB,)}
    assert expect.fractions[0] == pytest.approx(0.5) and expect.fractions[1] == pytest.approx(2 / 48)
    assert expect.jax_fraction == 0.041  # JAX: one share for all, the smallest, as the plan writes it (rounded down)
    assert expect.growth


def test_no_selection_on_two_models_means_nvidia_smis_order_and_says_it_is_assumed() -> None:
    expect = expectation(plan_of(None), WORKSTATION, {})
    assert expect.indices == (0, 1)
    assert expect.nvidia_smi_order_assumed
    assert "fastest first" in expect.reason
    pci = expectation(plan_of(None), WORKSTATION, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert pci.indices == (0, 1) and not pci.nvidia_smi_order_assumed


# -- the comparison


def test_a_plan_that_is_followed() -> None:
    expect = expectation(plan_of((1,), limit=2 * GIB, growth=True), WORKSTATION, {})
    answer = probe(ProbeDevice("NVIDIA RTX A6000", fraction=2 / 48), growth=True)
    verdict, reasons, devices = check_devices("torch", answer, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert verdict == report.FOLLOWS
    assert devices[0].gpu == 1 and devices[0].matched_by == "name"
    assert devices[0].memory_limit == 2 * GIB
    assert "told by model name" in reasons[0] and "growth on" in reasons[0]


def test_fastest_first_order_differs_and_names_the_cause() -> None:
    expect = expectation(plan_of(None), WORKSTATION, {})
    answer = probe(ProbeDevice("NVIDIA RTX A6000"), ProbeDevice("NVIDIA T400 4GB"))
    verdict, reasons, devices = check_devices("torch", answer, expect, WORKSTATION, {}, None)
    assert verdict == report.DIFFERS
    assert [d.gpu for d in devices] == [1, 0]
    assert reasons[0] == ("its device 0 is GPU 1 (NVIDIA RTX A6000); the plan's device 0 is GPU 0 (NVIDIA T400 4GB)")
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID" in reasons[-1] and "export CUDA_DEVICE_ORDER=PCI_BUS_ID" in reasons[-1]


def test_a_framework_that_ignores_a_cap_differs() -> None:
    expect = expectation(plan_of((1,), limit=2 * GIB), WORKSTATION, {})
    answer = probe(ProbeDevice("NVIDIA RTX A6000", fraction=1.0))
    verdict, reasons, _ = check_devices("torch", answer, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert verdict == report.DIFFERS
    assert reasons == ("took no memory cap on GPU 1 (the plan: 0.042 of it, 2 GiB)",)


def test_tensorflow_caps_are_its_logical_devices() -> None:
    expect = expectation(plan_of((1,), limit=2 * GIB), WORKSTATION, {})
    good = probe(ProbeDevice("NVIDIA RTX A6000", limits=(2 * GIB,)))
    assert check_devices("tensorflow", good, expect, WORKSTATION, {}, "PCI_BUS_ID")[0] == report.FOLLOWS
    bad = probe(ProbeDevice("NVIDIA RTX A6000", limits=(1 * GIB, 1 * GIB)))
    verdict, reasons, _ = check_devices("tensorflow", bad, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert verdict == report.DIFFERS
    assert reasons == ("took caps of 1 GiB + 1 GiB on GPU 1 (the plan: 2 GiB)",)


def test_jax_takes_one_share_of_each_gpu() -> None:
    expect = expectation(plan_of((1,), limit=2 * GIB), WORKSTATION, {})
    good = probe(ProbeDevice("NVIDIA RTX A6000", limits=(2 * GIB,)))
    assert check_devices("jax", good, expect, WORKSTATION, {}, "PCI_BUS_ID")[0] == report.FOLLOWS
    bad = probe(ProbeDevice("NVIDIA RTX A6000", limits=(36 * GIB,)))
    verdict, reasons, _ = check_devices("jax", bad, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert verdict == report.DIFFERS and "took a cap of 36 GiB on GPU 1" in reasons[0]


def test_growth_the_plan_asks_for_and_the_framework_does_not_take_differs() -> None:
    expect = expectation(plan_of((1,), growth=True), WORKSTATION, {})
    answer = probe(ProbeDevice("NVIDIA RTX A6000"), growth=False)
    verdict, reasons, _ = check_devices("torch", answer, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert (verdict, reasons) == (report.DIFFERS, ("memory growth is off (the plan asks for growth)",))


def test_more_devices_than_the_plan_gives_differs() -> None:
    expect = expectation(plan_of((1,)), WORKSTATION, {})
    answer = probe(ProbeDevice("NVIDIA RTX A6000"), ProbeDevice("NVIDIA T400 4GB"))
    verdict, reasons, _ = check_devices("torch", answer, expect, WORKSTATION, {}, "PCI_BUS_ID")
    assert verdict == report.DIFFERS
    assert reasons[0] == "it lists 2 GPU(s) (NVIDIA RTX A6000, NVIDIA T400 4GB); the plan gives GPU 1"


def test_devices_are_told_by_uuid_or_pci_bus_id_before_their_name() -> None:
    twins = (
        GpuInfo(index=0, uuid="GPU-1111", name="NVIDIA A100-SXM4-80GB", memory_total=80 * GIB),
        GpuInfo(index=1, uuid="GPU-2222", name="NVIDIA A100-SXM4-80GB", memory_total=80 * GIB),
    )
    pci = {0: "00000000:07:00.0", 1: "00000000:0F:00.0"}
    expect = expectation(
        GpuPlan(PlanRequest(), (0, 1), tuple(PlannedGpu(g.index, g.uuid, g.name, g.memory_total, 0) for g in twins)),
        twins,
        {},
    )
    # By name alone the swapped twins would pass; the UUID (PyTorch's, without "GPU-") and the PCI bus id
    # (another domain width, lower case) tell them apart.
    swapped = probe(ProbeDevice("NVIDIA A100-SXM4-80GB", uuid="2222"), ProbeDevice("A100", pci_bus_id="0000:07:00.0"))
    verdict, reasons, devices = check_devices("torch", swapped, expect, twins, pci, "PCI_BUS_ID")
    assert [(d.gpu, d.matched_by) for d in devices] == [(1, "uuid"), (0, "pci bus id")]
    assert verdict == report.DIFFERS
    by_name = probe(ProbeDevice("NVIDIA A100-SXM4-80GB"), ProbeDevice("NVIDIA A100-SXM4-80GB"))
    verdict, reasons, _ = check_devices("tensorflow", by_name, expect, twins, pci, "PCI_BUS_ID")
    assert verdict == report.FOLLOWS and "GPUs of one model cannot be told apart that way" in reasons[0]


def test_the_plan_cannot_be_told_without_the_gpus() -> None:
    expect = PlanExpectation(None, reason="no GPU can be read")
    verdict, reasons, _ = check_devices("torch", probe(ProbeDevice("X")), expect, (), {}, None)
    assert verdict == report.CANNOT_VERIFY and reasons == (
        "which GPUs the plan means cannot be told: no GPU can be read",
    )


# -- why a GPU build lists no GPU


def test_the_classic_causes_each_with_a_fix() -> None:
    answer = ProbeResult("tensorflow", 1.0, cuda="13.0", stderr="W Cannot dlopen some GPU libraries. Skipping")
    causes = no_gpu_causes("tensorflow", answer, True, 2, "12.4", {"CUDA_VISIBLE_DEVICES": "-1"})
    assert causes == [
        "CUDA_VISIBLE_DEVICES='-1' hides every GPU; fix: unset it or %gpu_select GPUs",
        "the driver is too old: it supports CUDA 12.4, the build needs CUDA 13.0; fix: update the NVIDIA driver, "
        "or install a build for CUDA 12",
        "CUDA libraries are missing or do not load; fix: install tensorflow[and-cuda]",
    ]
    assert no_gpu_causes("torch", ProbeResult("torch", 1.0), False, 0, None, {})[0].startswith(
        "the NVIDIA driver cannot be reached"
    )
    quiet = no_gpu_causes("jax", ProbeResult("jax", 1.0, stderr="first\nlast words\n"), True, 2, "12.4", {})
    assert quiet == ["it lists no GPU although NVML shows 2; its last message: last words"]


def test_a_newer_minor_cuda_is_not_a_driver_too_old() -> None:
    assert compare.driver_too_old("12.6", "12.4") is None
    assert compare.driver_too_old("garbage", "12.4") is None


# -- the children's answers are untrusted


def test_a_child_answer_is_read_field_by_field() -> None:
    raw = json.dumps(
        {
            "framework": "torch",
            "version": "2.5.1+cu124",
            "gpu_build": True,
            "cuda": "12.4",
            "cudnn": 90100,
            "growth": True,
            "devices": [{"name": "NVIDIA A100", "uuid": "GPU-1", "memory_total": 80 * GIB, "fraction": 0.25}],
        }
    ).encode()
    answer = parse_answer("torch", b"noise the framework printed\n" + raw + b"\n", 2.0)
    assert answer.failure is None
    assert (answer.version, answer.gpu_build, answer.cuda, answer.cudnn) == ("2.5.1+cu124", True, "12.4", "90100")
    assert answer.devices == (ProbeDevice("NVIDIA A100", uuid="GPU-1", memory_total=80 * GIB, fraction=0.25),)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"", "could not be read"),
        (b"Traceback (most recent call last):", "could not be read"),
        (b'{"devices": [{"name": "x", "fraction": NaN}]}', "could not be read"),
        (b'{"devices": [{"name": "x", "limits": [-1]}]}', "devices[0].limits[0]"),
        (b"[" * 5000 + b"]" * 5000, "could not be read"),
        (b'{"devices": "all of them"}', "could not be read"),
    ],
)
def test_a_bad_child_answer_is_one_line_not_a_crash(raw: bytes, words: str) -> None:
    answer = parse_answer("jax", raw, 1.0)
    assert answer.failure is not None and words in answer.failure
    assert "\n" not in answer.failure


def test_the_request_goes_to_the_child_as_json() -> None:
    from jupyter_gpu.doctor.probe import request_from_json

    request = PlanRequest(selection="1,0", limits=("2GiB",), growth=True, max_limit="50%")
    assert request_from_json(request_to_json(request)) == request


def hanging_torch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``torch`` starts a helper, writes both PIDs to a file, and hangs."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    pids = tmp_path / "pids"
    (fake / "__init__.py").write_text(
        textwrap.dedent(f"""
        import os, subprocess, time
        helper = subprocess.Popen(["sleep", "600"])
        with open({str(pids) + ".tmp"!r}, "w") as file:
            file.write(f"{{os.getpid()}} {{helper.pid}}")
        os.rename({str(pids) + ".tmp"!r}, {str(pids)!r})
        time.sleep(600)
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    return env, pids


def test_a_framework_that_hangs_at_start_is_killed_with_its_group(tmp_path: Path) -> None:
    env, pids = hanging_torch(tmp_path)
    answers = run_probes(["torch"], request_to_json(PlanRequest()), env, timeout_s=4)
    failure = answers["torch"].failure
    assert failure == "did not finish starting within 4 s: killed (it hangs at start)"
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), pid


def test_an_interrupt_kills_the_children_too(tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's foreground group only; the children have their own."""
    env, pids = hanging_torch(tmp_path)
    probes = Probes(["torch"], request_to_json(PlanRequest()), env, timeout_s=600)
    wait_until(pids.exists, what="the hanging child")

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            probes.collect()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to read its status is not), after waiting up to
    ``support.UNDER_LOAD_S`` for it to end (a killed process's end can take seconds under load)."""
    deadline = time.monotonic() + UNDER_LOAD_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def test_a_child_that_crashes_is_reported_with_its_last_line(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'loading...' >&2\necho 'Segmentation fault' >&2\nexit 139\n")
    python.chmod(0o755)
    answers = run_probes(["torch"], "{}", dict(os.environ), timeout_s=60, python=str(python))
    assert answers["torch"].failure == "its child process exited with status 139: Segmentation fault"


# -- the machine


def test_the_machine_part_degrades_when_nvml_fails(scenario: Any) -> None:
    scenario.update(lambda data: data.update(fault="driver_not_loaded"))
    part, shot = machine.read_machine(Fence({}), services=False)
    assert not part.nvml_available and not shot.nvml_available
    assert part.nvml_error and "driver" in part.nvml_error.lower()
    assert part.simulated
    text = report.render_text(_report(part))
    assert "NVML cannot be read: " in text
    assert _report(part).exit_status == 1


def test_the_machine_part_counts_other_users_processes_and_never_names_them(demo_gpus: None) -> None:
    part, shot = machine.read_machine(Fence({}), services=False)
    assert part.nvml_available and part.simulated
    others = sum(1 for gpu in shot.gpus for process in gpu.processes)
    assert part.processes["other_users"] + part.processes["unknown_owner"] + part.processes["yours"] == others > 0
    assert part.cuda_driver_version == "12.4" and part.nvml_version
    text = json.dumps(_report(part).to_dict())
    for gpu in shot.gpus:
        for process in gpu.processes:
            assert process.user is None or f'"{process.user}"' not in text


def test_container_hints(tmp_path: Path) -> None:
    assert machine.container_hint(str(tmp_path)) is None
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/kubepods/besteffort/pod1234\n")
    assert machine.container_hint(str(tmp_path)) == "kubepods (in /proc/1/cgroup)"
    (tmp_path / ".dockerenv").write_text("")
    assert machine.container_hint(str(tmp_path)) == "Docker (/.dockerenv exists)"


def test_no_running_server_and_a_stale_runtime_file(tmp_path: Path) -> None:
    assert machine.server_extension(str(tmp_path)).state == "not running"
    (tmp_path / "jpserver-1.json").write_text(json.dumps({"pid": 2**31 - 2, "url": "http://127.0.0.1:1/", "token": ""}))
    (tmp_path / "jpserver-2.json").write_text("{not json")
    assert machine.server_extension(str(tmp_path)).state == "not running"


# -- the report


def _report(part: report.Machine, *checks: report.FrameworkCheck) -> report.Report:
    return report.Report("0.1.0", part, "no selection", (), checks)


def _cpu(name: str) -> report.FrameworkCheck:
    return report.FrameworkCheck(
        name, "pkg", True, "1.0", "cpu", gpu_install="pkg[cuda]", verdict=report.CANNOT_VERIFY, reason="CPU-only build"
    )


def test_cpu_builds_on_simulated_gpus_run_clean() -> None:
    part = report.Machine(nvml_available=True, simulated=True, driver_version="550.54.15")
    done = _report(part, _cpu("TensorFlow"), _cpu("PyTorch"), report.FrameworkCheck("JAX"))
    assert done.exit_status == 0
    assert done.verdict == "cannot verify the plan: no framework with GPU support"
    text = report.render_text(done)
    assert "SIMULATED GPUs" in text
    assert "  PyTorch 1.0 (pkg): CPU-only build: for a GPU, install pkg[cuda]" in text
    assert "  JAX: not installed" in text


def test_a_difference_or_a_timeout_is_exit_status_1() -> None:
    part = report.Machine(nvml_available=True)
    differs = report.FrameworkCheck("PyTorch", installed=True, verdict=report.DIFFERS, differences=("a", "b"))
    assert _report(part, differs).exit_status == 1
    assert "    DIFFERS from the plan:\n      - a\n      - b" in report.render_text(_report(part, differs))
    hung = report.FrameworkCheck("JAX", installed=True, verdict=report.CANNOT_VERIFY, problems=("JAX did not finish",))
    assert _report(part, hung).exit_status == 1
    assert _report(part, hung).verdict == "cannot verify the plan: no framework listed a GPU"


def test_the_json_shape_is_the_documented_one() -> None:
    part = report.Machine(nvml_available=True, gpus=(report.MachineGpu(0, "A100", "GPU-1", None, False, GIB),))
    check = report.FrameworkCheck(
        "PyTorch",
        "torch",
        True,
        "2.5",
        "gpu",
        verdict=report.FOLLOWS,
        devices=(report.DeviceMatch(0, "A100", 0, "uuid", GIB),),
    )
    data = json.loads(json.dumps(_report(part, check).to_dict()))
    assert set(data) == {
        "schema",
        "jupyter_gpu",
        "status",
        "exit_status",
        "elapsed_s",
        "machine",
        "plan",
        "frameworks",
        "keras",
        "verdict",
    }
    assert data["schema"] == 1 and data["status"] == "ok" and data["exit_status"] == 0
    assert set(data["machine"]) == {
        "nvml_available", "nvml_error", "simulated", "driver_version", "nvml_version", "cuda_driver_version", "gpus",
        "processes", "environment", "container", "fence", "admin", "services", "problems", "notes", "elapsed_s",
    }  # fmt: skip
    assert set(data["machine"]["gpus"][0]) == {
        "index",
        "name",
        "uuid",
        "pci_bus_id",
        "mig_mode",
        "memory_total",
        "error",
    }
    assert set(data["frameworks"][0]) == {
        "name", "package", "installed", "version", "build", "cuda", "cudnn", "gpu_install", "verdict", "reason",
        "differences", "devices", "problems", "elapsed_s",
    }  # fmt: skip
    assert data["frameworks"][0]["devices"] == [
        {"position": 0, "name": "A100", "gpu": 0, "matched_by": "uuid", "memory_limit": GIB}
    ]
    assert data["plan"] == {"summary": "no selection", "magics": []}
    assert data["keras"] is None


def test_an_answer_over_the_size_limit_is_refused() -> None:
    assert children.MAX_ANSWER_BYTES == 256 * 1024
    answer = parse_answer("torch", b'{"devices": [], "version": "' + b"x" * (300 * 1024) + b'"}', 1.0)
    assert answer.failure is not None


def test_keras_backend_as_its_import_will_choose(tmp_path: Path) -> None:
    if doctor.keras_facts({}) is None:
        pytest.skip("Keras is not installed")
    home = tmp_path / "keras"
    assert doctor.keras_facts({"KERAS_HOME": str(home)})["backend"] == "tensorflow"  # type: ignore[index]
    home.mkdir()
    (home / "keras.json").write_text(json.dumps({"backend": "jax", "floatx": "float32"}))
    facts = doctor.keras_facts({"KERAS_HOME": str(home)})
    assert facts is not None and (facts["backend"], facts["source"]) == ("jax", str(home / "keras.json"))
    facts = doctor.keras_facts({"KERAS_HOME": str(home), "KERAS_BACKEND": "torch"})
    assert facts is not None and (facts["backend"], facts["source"]) == ("torch", "KERAS_BACKEND")
    (home / "keras.json").write_text("[" * 100)  # a broken file: Keras' default, no crash
    assert doctor.keras_facts({"KERAS_HOME": str(home)})["backend"] == "tensorflow"  # type: ignore[index]
    part = report.Machine(nvml_available=True)
    text = report.render_text(report.Report("0.1.0", part, "", (), (), keras=facts))
    assert "  Keras " in text and "backend torch (from KERAS_BACKEND)" in text and "PyTorch's line above" in text


def test_frameworks_left_out_do_not_change_the_verdict() -> None:
    part = report.Machine(nvml_available=True)
    left_out = report.FrameworkCheck("TensorFlow", installed=True, verdict=report.NOT_CHECKED)
    done = _report(part, left_out, _cpu("JAX"))
    assert done.verdict == "cannot verify the plan: no framework with GPU support"
    assert "  TensorFlow ?: not checked (left out by --framework)" in report.render_text(done)


def test_the_hub_service_is_asked_as_the_server_extension_asks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loopback service of this test (its listener is this user's, root, the default service account)."""
    import http.server
    import threading

    from jupyter_gpu.core.snapshot import Snapshot

    body = json.dumps(Snapshot(nvml_available=True, timestamp=1.0).to_dict()).encode()
    seen: list[str | None] = []

    class Service(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            status = 200 if self.headers.get("Authorization") == "token good" else 403
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if status == 200 else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("JUPYTER_GPU_SERVICE_URL", f"http://127.0.0.1:{server.server_port}/services/jupyter-gpu/")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "good")
        answer = machine.hub_service()
        assert (answer.state, answer.detail) == (
            "answers",
            f"http://127.0.0.1:{server.server_port}/services/jupyter-gpu/api/devices",
        )
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "bad")
        assert machine.hub_service().detail.endswith("answered HTTP 403")
        assert seen == ["token good", "token bad"]
    finally:
        server.shutdown()
    monkeypatch.delenv("JUPYTER_GPU_SERVICE_URL")
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN")
    assert machine.hub_service().state == "not configured"


def test_a_running_server_of_this_user_is_asked_with_its_own_token(tmp_path: Path) -> None:
    import http.server
    import threading

    from jupyter_gpu.core.snapshot import Snapshot

    asked: list[tuple[str, str | None]] = []
    body = json.dumps(Snapshot(nvml_available=False, timestamp=1.0, error="no NVML").to_dict()).encode()

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append((self.path, self.headers.get("Authorization")))
            found = self.path == "/lab/jupyter-gpu/snapshot"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if found:
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    try:
        for base, state in (("lab/", "answers"), ("other/", "no answer")):
            url = f"http://127.0.0.1:{server.server_port}/{base}"
            (runtime / "jpserver-1.json").write_text(json.dumps({"pid": os.getpid(), "url": url, "token": "own"}))
            answer = machine.server_extension(str(runtime))
            assert answer.state == state, answer
        assert answer.detail.endswith("runs without jupyter_gpu's extension")
        assert asked == [("/lab/jupyter-gpu/snapshot", "token own"), ("/other/jupyter-gpu/snapshot", "token own")]
        # A runtime file that is a link (planted, or not this user's own file) is not read: its
        # token is never sent anywhere.
        real = tmp_path / "elsewhere.json"
        (runtime / "jpserver-1.json").rename(real)
        (runtime / "jpserver-1.json").symlink_to(real)
        assert machine.server_extension(str(runtime)).state == "not running"
        assert len(asked) == 2
    finally:
        server.shutdown()


def test_a_mig_slice_is_its_gpus_device() -> None:
    """PyTorch shows one MIG device: its UUID is the slice's (without "MIG-"), its memory the slice's."""
    from jupyter_gpu.core.snapshot import MigSlice

    uuid = "MIG-5e3d4f1c-9f60-5c83-9d2e-3a4b5c6d7e8f"
    slice_ = MigSlice(2, uuid, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb", 9, 0, memory_total=9728 * 1024**2)
    a100 = GpuInfo(
        index=0, uuid="GPU-1", name="NVIDIA A100-SXM4-80GB", memory_total=80 * GIB, mig_mode=True, slices=(slice_,)
    )
    gpus = (a100, A6000)
    plan = GpuPlan(
        PlanRequest(selection=uuid), (0,), (PlannedGpu(0, "GPU-1", a100.name, 80 * GIB, 0),), selected_slice=uuid
    )
    expect = expectation(plan, gpus, {})
    by_uuid = probe(ProbeDevice("NVIDIA A100-SXM4-80GB MIG 1g.10gb", uuid=uuid[4:], memory_total=9728 * 1024**2))
    verdict, _, devices = check_devices("torch", by_uuid, expect, gpus, {}, "PCI_BUS_ID")
    assert (verdict, devices[0].gpu, devices[0].matched_by) == (report.FOLLOWS, 0, "uuid")
    by_name = probe(ProbeDevice("NVIDIA A100-SXM4-80GB MIG 1g.10gb", memory_total=9728 * 1024**2))
    verdict, _, devices = check_devices("torch", by_name, expect, gpus, {}, "PCI_BUS_ID")
    assert (verdict, devices[0].gpu, devices[0].matched_by) == (report.FOLLOWS, 0, "name")


def test_a_framework_that_cannot_be_imported_is_a_problem_with_its_error() -> None:
    part = report.Machine(nvml_available=True)
    answer = ProbeResult("tensorflow", 2.0, error="ImportError: libcudart.so.12: cannot open shared object file")
    check = doctor.check_framework("tensorflow", ("tensorflow", "2.21.0"), answer, PlanExpectation(()), part, (), {})
    assert check.version == "2.21.0" and check.verdict == report.CANNOT_VERIFY
    assert check.problems == (
        "TensorFlow could not be imported: ImportError: libcudart.so.12: cannot open shared object file",
    )
    assert _report(part, check).exit_status == 1


def test_a_probe_keeps_what_it_learnt_before_an_error(tmp_path: Path) -> None:
    """A GPU build of PyTorch whose CUDA fails to start: its version and build are still reported."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        textwrap.dedent("""
        import types
        __version__ = "9.9+cu124"
        version = types.SimpleNamespace(cuda="12.4")
        backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 90100))
        def _fail():
            raise RuntimeError("CUDA driver initialization failed, you might not have a CUDA gpu.")
        cuda = types.SimpleNamespace(is_available=_fail)
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    env["JUPYTER_GPU_SIMULATE"] = "demo"
    answer = run_probes(["torch"], request_to_json(PlanRequest()), env, timeout_s=120)["torch"]
    assert answer.failure is None, answer
    assert (answer.version, answer.gpu_build, answer.cuda, answer.cudnn) == ("9.9+cu124", True, "12.4", "90100")
    assert answer.error == "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu."
    part = report.Machine(nvml_available=True, cuda_driver_version="12.4")
    check = doctor.check_framework("torch", ("torch", "9.9"), answer, PlanExpectation((0,)), part, (T400,), {})
    assert (check.build, check.verdict, check.reason) == ("gpu", report.CANNOT_VERIFY, answer.error)
    assert check.problems == (
        "CUDA's driver did not start in the framework (RuntimeError: CUDA driver initialization failed, you might "
        "not have a CUDA gpu.); fix: check that nvidia-smi works in this same environment (in a container: the GPU "
        "devices and the driver's libraries mounted)",
    )


def test_memory_no_listed_process_holds_is_noted(scenario: Any) -> None:
    scenario.update(lambda data: data["gpus"][1].update(memory_used_mib=6144))
    part, _ = machine.read_machine(Fence({}), services=False)
    assert part.notes == (
        "GPU 1: 6 GiB in use by processes NVML does not list here (another container or PID namespace, or no "
        "permission to see them): jupyter_gpu cannot say whose",
    )
    assert "  note: GPU 1: 6 GiB in use by processes NVML does not list here" in report.render_text(_report(part))
