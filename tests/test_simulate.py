"""The simulated NVML itself: scenario validation, presets, call accounting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hostile_json import FAST, HUGE, hostile_bytes, hostile_documents
from hypothesis import given

from jupyter_gpu import simulate


def test_presets():
    assert len(simulate.ScenarioSource("3").current().gpus) == 3
    demo = simulate.ScenarioSource("demo-still").current()
    assert {gpu.name for gpu in demo.gpus} == {"NVIDIA A100-SXM4-80GB", "NVIDIA RTX A6000"}
    assert max(gpu.utilization for gpu in demo.gpus) > 90
    assert {p.user for gpu in demo.gpus for p in gpu.processes} >= {"bob", "carol"}


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ({"fault": "melted"}, "fault: unknown fault 'melted'"),
        ({"gpus": [{"fault": "on fire"}]}, "gpus[0].fault: unknown fault"),
        ({"gpus": [{"memory_total_mib": 10, "memory_used_mib": 20}]}, "exceeds memory_total_mib"),
        ({"gpus": [{"unsupported": ["name"]}]}, "cannot mark"),
        ({"gpus": {}}, "gpus must be a list"),
        ({"gpus": [{"memory_used_mib": -5}]}, "gpus[0].memory_used_mib must be >= 0"),
        ({"gpus": [{}, {"temperature": -300}]}, "gpus[1].temperature must be >= 0"),
        ({"gpus": [{"utilization": 101}]}, "gpus[0].utilization must be <= 100"),
        ({"gpus": [{"utilization": True}]}, "gpus[0].utilization must be a whole number"),
        ({"gpus": [{"power_w": "hot"}]}, "gpus[0].power_w must be a number, not a string"),
        ({"gpus": [{"processes": [{"pid": 0}]}]}, "gpus[0].processes[0].pid must be >= 1"),
        ({"gpus": [{"processes": [{"memory_mib": 1}]}]}, "gpus[0].processes[0].pid is required"),
        ({"gpus": [{"processes": [{"pid": 5, "memory_mib": -1}]}]}, "processes[0].memory_mib must be >= 0"),
        ({"gpus": [{"processes": [{"pid": 5, "type": "both"}]}]}, "processes[0].type must be one of"),
        ({"gpus": [{"memory_used_mb": 5}]}, "gpus[0].memory_used_mb is not a scenario key"),
        ({"gpus": [{}] * 65}, "gpus must have at most 64 entries"),
        ({"latency_ms": -1}, "latency_ms must be >= 0"),
        ({"gpus": [{"name": "N" * 84}]}, "gpus[0].name must be at most 83 bytes in UTF-8"),  # a driver's 96-byte name
    ],
)
def test_bad_scenarios_are_refused_with_one_line_naming_the_key_and_the_rule(tmp_path, scenario, words):
    with pytest.raises(simulate.ScenarioError) as raised:
        simulate.write_scenario(tmp_path / "s.json", scenario)
    assert words in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # refused by core.wire while parsing, before any key is known (as NaN and Infinity are)
        ('{"gpus": [{"memory_total_mib": 1e400}]}', "not valid JSON (the number 1e400 is too large)"),
        ('{"gpus": [{"power_w": NaN}]}', "not valid JSON (NaN is not a number"),
        ('{"gpus": [{"power_w": Infinity}]}', "not valid JSON (Infinity is not a number"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ('{"gpus": [', "not valid JSON"),
    ],
)
def test_a_bad_edit_keeps_the_last_good_scenario_and_says_why(tmp_path, text, words):
    # Given a simulation following a good scenario file
    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"gpus": [{"utilization": 40}]})
    source = simulate.ScenarioSource(str(path))
    assert source.current().gpus[0].utilization == 40 and source.rejection() is None
    # When the file is overwritten with something the schema refuses
    path.write_text(text)
    # Then the last good scenario stays, and one line says what was refused
    assert source.current().gpus[0].utilization == 40
    assert source.rejection() == f"simulated scenario rejected: {words}" + source.rejection().split(words, 1)[1]
    assert source.rejection().endswith("(keeping the last good scenario)") and "\n" not in source.rejection()
    # And a good edit clears it
    simulate.write_scenario(path, {"gpus": [{"utilization": 41}]})
    assert source.current().gpus[0].utilization == 41 and source.rejection() is None


def test_a_bad_edit_is_parsed_once_not_at_every_nvml_call(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"gpus": [{}]})
    source = simulate.ScenarioSource(str(path))
    path.write_text('{"gpus": [{"temperature": -300}]}')
    parsed = []
    real = simulate.Scenario.from_dict
    monkeypatch.setattr(simulate.Scenario, "from_dict", lambda data: parsed.append(1) or real(data))
    for _ in range(5):
        source.current()
    assert len(parsed) == 1


def test_bad_spec_names_the_choices():
    with pytest.raises(simulate.ScenarioError, match=r"a number of GPUs \(1 to 64\), 'demo', or the path"):
        simulate.ScenarioSource("/no/such/scenario.json")


@pytest.mark.parametrize("spec", ["65", "99999", "-1", "4x", "demo2"])
def test_malformed_values_of_the_variable_are_refused_in_one_line(spec):
    with pytest.raises(simulate.ScenarioError) as raised:
        simulate.ScenarioSource(spec)
    message = str(raised.value)
    assert message.startswith(f"JUPYTER_GPU_SIMULATE={spec!r}") and "\n" not in message


@pytest.mark.parametrize("value", ["0", "false", "OFF", "no", " "])
def test_off_values_mean_the_real_gpus(monkeypatch, value):
    monkeypatch.setenv(simulate.ENV_VAR, value)
    assert simulate.install_from_environment() is None and simulate.installed() is None


def test_simulated_gpu_names_carry_a_visible_marker():
    import pynvml

    simulate.install("demo")
    try:
        pynvml.nvmlInit()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(4)]
    finally:
        simulate.uninstall()
    assert names == ["NVIDIA A100-SXM4-80GB [simulated]"] * 2 + ["NVIDIA RTX A6000 [simulated]"] * 2


def test_symbols_it_does_not_implement_answer_not_supported_like_a_driver(tmp_path):
    import pynvml

    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"missing_functions": ["nvmlDeviceGetGspFirmwareMode"], "gpus": [{}]})
    library = simulate.install(str(path))
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        # symbols nobody listed: "Not Supported", as a real driver says for a feature the GPU lacks
        for call in (
            lambda: pynvml.nvmlDeviceGetEccMode(handle),
            lambda: pynvml.nvmlDeviceGetFanSpeed_v2(handle, 0),
            lambda: pynvml.nvmlDeviceGetMultiGpuBoard(handle),
            lambda: pynvml.nvmlDeviceGetGpcClkVfOffset(handle),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call()
        # the scenario's missing_functions stay truly absent (an old driver)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetGspFirmwareMode(handle)
    finally:
        simulate.uninstall()
    assert library.callback_errors == []


def test_unmodified_nvitop_reads_the_demo_without_a_traceback(demo_gpus):
    nvitop = [sys.executable, "-c", "import sys; from nvitop.cli import main; sys.exit(main())"]
    result = subprocess.run([*nvitop, "-1"], capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Error" not in output, output
    assert result.returncode == 0, output
    assert output.count("[simulated]") >= 4 or "simulated" in output, output
    assert "550.54.15" in output


def test_scenario_lookups_are_by_pid_in_one_pass():
    data = {
        "gpus": [
            {"processes": [{"pid": 1000 + i, "user": f"u{i}", "memory_mib": 1} for i in range(500)]} for _ in range(3)
        ]
    }
    scenario = simulate.Scenario.from_dict(json.loads(json.dumps(data)))
    assert scenario.process_identity(1499) == ("u499", None)
    assert scenario.process_identity(5) is None
    assert len(scenario.identities) == 500


def test_missing_symbols_are_missing_and_calls_are_counted(tmp_path):
    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"missing_functions": ["nvmlDeviceGetPowerUsage"], "gpus": [{}]})
    library = simulate.SimulatedNvmlLibrary(simulate.ScenarioSource(str(path)))
    assert not hasattr(library, "nvmlDeviceGetPowerUsage")
    assert hasattr(library, "nvmlDeviceGetTemperature")
    assert library.nvmlInit_v2() == simulate.SUCCESS
    assert library.calls["nvmlInit_v2"] == 1 and library.callback_errors == []


def test_a_raising_callback_returns_unknown_and_is_recorded(tmp_path):
    library = simulate.SimulatedNvmlLibrary(simulate.ScenarioSource("1"))
    library.nvmlInit_v2()
    assert library.nvmlDeviceGetCount_v2(None) == simulate.ERROR_UNKNOWN  # NULL out-pointer
    assert library.callback_errors and "nvmlDeviceGetCount_v2" in library.callback_errors[0]


# -- NVML calls counted across processes (JUPYTER_GPU_SIMULATE_CALLS_DIR)

COUNTING_CHILD = r"""
import os, sys
import pynvml
from jupyter_gpu import simulate

def calls(n):
    for _ in range(n):
        pynvml.nvmlDeviceGetCount()

pynvml.nvmlInit()  # the startup hook installed the simulation at "import pynvml"
assert simulate.installed() is not None and simulate.installed().calls_directory
mode, n = sys.argv[1], int(sys.argv[2])
calls(n)
if mode == "wait":  # report, then stay alive until told to exit
    print(os.getpid(), sum(simulate.installed().calls.values()), flush=True)
    sys.stdin.readline()
elif mode == "fork":  # a forked child makes 7 calls of its own, then the parent 3 more
    child = os.fork()
    if child == 0:
        calls(7)
        os._exit(0)
    os.waitpid(child, 0)
    calls(3)
    print(os.getpid(), sum(simulate.installed().calls.values()), child, flush=True)
elif mode == "exec":  # the same process (PID, start time) runs a new program that counts on
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[3], "wait", "5"])
"""


def counting_child(directory, *args, wait=False):
    env = {
        **os.environ,
        simulate.ENV_VAR: "2",
        simulate.CALLS_DIR_VAR: str(directory),
        "PYTHONPATH": str(Path(simulate.__file__).parents[1]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", COUNTING_CHILD, *args], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def test_calls_are_counted_across_processes_while_they_run_and_after_they_exit(tmp_path):
    # Given two processes on simulated GPUs, each counting in the shared directory
    children = [counting_child(tmp_path, "wait", str(n)) for n in (10, 250)]
    reported = {}
    for child in children:
        pid, total = child.stdout.readline().split()
        reported[int(pid)] = int(total)
    # Then while they run, the directory holds each one's exact count (mmap'd: always current)
    by_process = simulate.calls_by_process(tmp_path)
    assert {pid: count for (pid, _), count in by_process.items()} == reported
    assert simulate.calls_in(tmp_path) == sum(reported.values()) > 260
    # And the counts stay after they exit
    for child in children:
        child.communicate("\n", timeout=30)
    assert simulate.calls_in(tmp_path) == sum(reported.values())
    # And a later process adds its own calls (the difference is that window's calls)
    child = counting_child(tmp_path, "wait", "40")
    pid, total = child.stdout.readline().split()
    child.communicate("\n", timeout=30)
    assert simulate.calls_in(tmp_path) == sum(reported.values()) + int(total)


def test_a_forked_child_counts_in_a_file_of_its_own(tmp_path):
    child = counting_child(tmp_path, "fork", "20")
    out, _ = child.communicate(timeout=60)
    parent_pid, parent_total, fork_pid = map(int, out.split())
    counts = {pid: count for (pid, _), count in simulate.calls_by_process(tmp_path).items()}
    assert counts == {parent_pid: parent_total, fork_pid: 7}


def test_a_process_that_execs_keeps_counting_in_its_file(tmp_path):
    child = counting_child(tmp_path, "exec", "11", COUNTING_CHILD)
    pid, total = child.stdout.readline().split()
    child.communicate("\n", timeout=30)
    # one process, one file: nvmlInit and 11 calls before the exec, and the new program's own
    assert [(p, c) for (p, _), c in simulate.calls_by_process(tmp_path).items()] == [(int(pid), 1 + 11 + int(total))]


def test_without_the_variable_calls_are_not_counted_in_files(monkeypatch):
    monkeypatch.delenv(simulate.CALLS_DIR_VAR, raising=False)

    def no_file_counting(directory):
        raise AssertionError("a file counter was set up without the variable")

    monkeypatch.setattr(simulate.counters, "call_ticker", no_file_counting)
    library = simulate.SimulatedNvmlLibrary(simulate.ScenarioSource("1"))
    assert library.nvmlInit_v2() == simulate.SUCCESS
    assert library.nvmlDeviceGetNvLinkState() == simulate.ERROR_NOT_SUPPORTED
    assert library.calls_directory is None and sum(library.calls.values()) == 2 and library.callback_errors == []


def test_counter_files_are_read_as_untrusted_input(tmp_path):
    def counter(name, value, size=8):
        (tmp_path / name).write_bytes(value.to_bytes(8, sys.byteorder).ljust(size, b"\0")[:size])

    counter("100-5.nvml-calls", 7)
    counter("target", 1000)
    (tmp_path / "101-5.nvml-calls").symlink_to(tmp_path / "target")  # not followed
    counter("102-5.nvml-calls", 1000, size=16)  # wrong sizes
    counter("103-5.nvml-calls", 0, size=0)
    os.mkfifo(tmp_path / "104-5.nvml-calls")  # opened without blocking, then skipped
    (tmp_path / "105-5.nvml-calls").mkdir()
    os.link(tmp_path / "100-5.nvml-calls", tmp_path / "106-5.nvml-calls")  # one inode counts once
    counter("x-5.nvml-calls", 1000)  # names that are not <pid>-<start>.nvml-calls
    counter("100-5.nvml-calls.tmp", 1000)
    counter("1" * 11 + "-5.nvml-calls", 1000)
    counts = simulate.calls_by_process(tmp_path)
    assert sum(counts.values()) == 7 and len(counts) == 1 and next(iter(counts))[1] == 5
    assert simulate.calls_in(tmp_path) == 7


@pytest.mark.parametrize("trap", ["symlink", "other user's file"])
def test_a_trap_set_at_this_processs_name_is_never_written_through(tmp_path, monkeypatch, capsys, trap):
    # Given a shared directory where somebody put a file at the name this process will use
    name = f"{os.getpid()}-{simulate.counters._process_start()}.nvml-calls"
    target = tmp_path / "target"
    target.write_bytes(bytes(8))
    if trap == "symlink":
        (tmp_path / name).symlink_to(target)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.link(target, tmp_path / name)
        os.chown(target, 65534, 65534)
    monkeypatch.setenv(simulate.CALLS_DIR_VAR, str(tmp_path))
    monkeypatch.setattr(simulate.counters, "_process_counters", {})
    # When the simulated library in this process makes calls
    library = simulate.SimulatedNvmlLibrary(simulate.ScenarioSource("1"))
    assert library.nvmlInit_v2() == simulate.SUCCESS and library.nvmlDeviceGetCount_v2(None) != simulate.SUCCESS
    # Then NVML works, the target is untouched and one line says the calls are not counted
    assert target.read_bytes() == bytes(8) and library.callback_errors[0].startswith("nvmlDeviceGetCount_v2")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"NVML calls not counted in {simulate.CALLS_DIR_VAR}=" in err


# -- hostile scenario files (a file another user may have written): only ScenarioError comes out


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ({"gpus": [{"power_w": HUGE}]}, "gpus[0].power_w must be <= 100000"),
        ({"gpus": [{"power_w": -HUGE}]}, "gpus[0].power_w must be >= 0"),
        ({"latency_ms": HUGE}, "latency_ms must be <= 600000"),
        ({"gpus": [{"memory_total_mib": HUGE}]}, "gpus[0].memory_total_mib must be <= 1.75922e+13"),
        ({"gpus": [{"utilization": HUGE}]}, "gpus[0].utilization must be <= 100"),
        ({"gpus": [{"processes": [{"pid": 5, "memory_mib": HUGE}]}]}, "processes[0].memory_mib must be <="),
        ({"gpus": [{"processes": [{"pid": HUGE}]}]}, "gpus[0].processes[0].pid must be <= 4294967295"),
    ],
)
def test_a_400_digit_integer_is_out_of_range_not_an_overflow_error(tmp_path, scenario, words):
    # Regression: math.isfinite(10**400) raised OverflowError out of the scenario reader
    with pytest.raises(simulate.ScenarioError, match=re.escape(words)):
        simulate.Scenario.from_dict(scenario)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))  # the 400 digits written as a literal
    assert "9" * 400 in path.read_text()
    with pytest.raises(simulate.ScenarioError, match=re.escape(words)) as raised:
        simulate.ScenarioSource(str(path))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 5000 + "]" * 5000, "JSON nested too deeply (more than 16 levels)"),
        ('{"gpus": [{"a\\nb": 1}]}', "gpus[0].'a\\nb' is not a scenario key"),
        ('{"gpus": [{"name": "a", "name": "b"}]}', "not valid JSON (the key 'name' appears twice in one object)"),
        (b"\xff\xfe{\x00}\x00", "the file is not UTF-8 (byte 0)"),
        ("[" + "9" * 5000 + "]", "not valid JSON (an integer of more digits than Python reads)"),
    ],
)
def test_a_hostile_scenario_file_is_one_scenario_error(tmp_path, text, words):
    path = tmp_path / "s.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(simulate.ScenarioError) as raised:
        simulate.ScenarioSource(str(path))
    message = str(raised.value)
    assert message == f"JUPYTER_GPU_SIMULATE={str(path)!r}: {words}" + message.split(words, 1)[1]
    assert "\n" not in message


SCENARIO_TEMPLATES = {
    "plausible": simulate.plausible_gpus(2),
    "demo": simulate.demo_scenario(),  # with its motion
    "demo-still": simulate.demo_scenario(moving=False),
    "everything": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "fault": None,
        "latency_ms": 0,
        "missing_functions": ["nvmlDeviceGetComputeRunningProcesses_v3"],
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "uuid": "GPU-aaaa-0",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 3,
                "unsupported": ["power"],
                "fault": None,
                "mig_slices": [
                    {
                        "profile": "3g.40gb",
                        "uuid": "MIG-aaaa-1",
                        "gpu_instance_id": 2,
                        "compute_instance_id": 0,
                        "memory_used_mib": 10,
                        "processes": [{"pid": 5, "memory_mib": 10, "user": "u", "name": "p", "type": "compute"}],
                    }
                ],
            },
            {"processes": [{"pid": 6, "memory_mib": None, "type": "graphics"}], "memory_used_mib": 2.0},
        ],
    },
}


@FAST
@given(hostile_documents(SCENARIO_TEMPLATES))
def test_a_hostile_scenario_raises_only_scenario_error(data):
    try:
        simulate.Scenario.from_dict(data)
    except simulate.ScenarioError as error:
        assert str(error) and "\n" not in str(error)


@FAST
@given(hostile_bytes(hostile_documents(SCENARIO_TEMPLATES)))
def test_a_hostile_scenario_file_raises_only_scenario_error(raw):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.json"
        path.write_bytes(raw)
        try:
            simulate.ScenarioSource(str(path))
        except simulate.ScenarioError as error:
            assert str(error).startswith("JUPYTER_GPU_SIMULATE=") and "\n" not in str(error)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_the_scenarios_place_is_refused_without_blocking(tmp_path):
    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"gpus": [{"utilization": 40}]})
    source = simulate.ScenarioSource(str(path))
    os.mkfifo(tmp_path / "fifo")
    os.replace(tmp_path / "fifo", path)
    assert source.current().gpus[0].utilization == 40
    assert source.rejection() == "simulated scenario rejected: not a regular file (keeping the last good scenario)"


def _plant_links(folder: str, names: list[str], target: str) -> None:
    """As the neighbour: symbolic links at the names a writer might use, to the victim's file."""
    for name in names:
        os.symlink(target, os.path.join(folder, name))


def test_a_scenario_is_never_written_through_a_link_the_neighbour_planted(neighbour, shared_tmp, tmp_path):
    # Given the victim's file and a shared folder where the neighbour linked every name it could
    # guess (the old temporary name was .<name>.<pid>.<thread>.tmp) to it (fs.protected_symlinks
    # is off in many containers; with it on, the write failed instead)
    victim = tmp_path / "thesis.ipynb"
    victim.write_text("the victim's notebook")
    path = shared_tmp / "s.json"
    guesses = [f".s.json.{os.getpid()}.{threading.get_ident()}.tmp", ".s.json.tmp"]
    neighbour.run(_plant_links, str(shared_tmp), guesses, str(victim))
    # When the victim writes a scenario there
    simulate.write_scenario(path, {"gpus": [{"utilization": 40}]})
    # Then the notebook is untouched, the scenario is a regular file of the victim's, readable by
    # the other users' processes that simulate from it, and no temporary file is left
    assert victim.read_text() == "the victim's notebook"
    assert not path.is_symlink() and path.stat().st_uid == os.getuid()
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text())["gpus"][0]["utilization"] == 40
    assert sorted(p.name for p in shared_tmp.iterdir()) == sorted([*guesses, "s.json"])


def test_fan_pci_ecc_and_clocks_answer_as_a_driver_does(tmp_path):
    """nvml.h: the fan only on cards with one, ECC counts only with ECC mode on, PCI info for all
    products; a MIG device has none of them here (the card's are read on its parent)."""
    import pynvml
    from support import a100_mig_scenario

    path = tmp_path / "s.json"
    data = a100_mig_scenario()
    data["gpus"][1].update(unsupported=["fan_speed", "ecc"], pci_bus_id="00000000:b1:00.0")
    simulate.write_scenario(path, data)
    library = simulate.install(str(path))
    try:
        pynvml.nvmlInit()
        card, passive = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetFanSpeed(card) == 30
        assert pynvml.nvmlDeviceGetTotalEccErrors(card, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0) == 0
        assert pynvml.nvmlDeviceGetClockInfo(card, pynvml.NVML_CLOCK_MEM) == 1593
        info = pynvml.nvmlDeviceGetPciInfo(passive)
        assert (info.busId, info.domain, info.bus, info.device) == ("00000000:B1:00.0", 0, 0xB1, 0)
        for call in (
            lambda: pynvml.nvmlDeviceGetFanSpeed(passive),
            lambda: pynvml.nvmlDeviceGetTotalEccErrors(passive, 1, 0),
            lambda: pynvml.nvmlDeviceGetFanSpeed(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 0)),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call()
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetClockInfo(card, 9)
    finally:
        simulate.uninstall()
    assert library.callback_errors == []


@pytest.mark.parametrize(
    ("gpu", "words"),
    [
        ({"pci_bus_id": "17:00.0"}, 'gpus[0].pci_bus_id must look like "00000000:17:00.0"'),
        ({"fan_speed": -1}, "gpus[0].fan_speed must be >= 0"),
        ({"unsupported": ["fan"]}, "gpus[0].unsupported"),
    ],
)
def test_a_bad_board_figure_is_refused_in_one_line(gpu, words):
    with pytest.raises(simulate.ScenarioError, match=re.escape(words)):
        simulate.Scenario.from_dict({"gpus": [gpu]})
