"""The simulated NVML itself: scenario validation, presets, call accounting."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_gpu import simulate


def test_presets():
    assert len(simulate.ScenarioSource("3").current().gpus) == 3
    demo = simulate.ScenarioSource("demo").current()
    assert {gpu.name for gpu in demo.gpus} == {"NVIDIA A100-SXM4-80GB", "NVIDIA RTX A6000"}
    assert max(gpu.utilization for gpu in demo.gpus) > 90
    assert {p.user for gpu in demo.gpus for p in gpu.processes} >= {"bob", "carol"}


@pytest.mark.parametrize(("scenario", "words"), [
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
])
def test_bad_scenarios_are_refused_with_one_line_naming_the_key_and_the_rule(tmp_path, scenario, words):
    with pytest.raises(simulate.ScenarioError) as raised:
        simulate.write_scenario(tmp_path / "s.json", scenario)
    assert words in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize(("text", "words"), [
    ('{"gpus": [{"memory_total_mib": 1e400}]}', "gpus[0].memory_total_mib must be a finite number"),
    ('{"gpus": [{"power_w": NaN}]}', "not valid JSON (NaN is not a number"),
    ('{"gpus": [{"power_w": Infinity}]}', "not valid JSON (Infinity is not a number"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ('{"gpus": [', "not valid JSON"),
])
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
        for call in (lambda: pynvml.nvmlDeviceGetEccMode(handle), lambda: pynvml.nvmlDeviceGetFanSpeed_v2(handle, 0),
                     lambda: pynvml.nvmlDeviceGetMultiGpuBoard(handle),
                     lambda: pynvml.nvmlDeviceGetGpcClkVfOffset(handle)):
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
    result = subprocess.run([*nvitop, "-1"],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Error" not in output, output
    assert result.returncode == 0, output
    assert output.count("[simulated]") >= 4 or "simulated" in output, output
    assert "550.54.15" in output


def test_scenario_lookups_are_by_pid_in_one_pass():
    data = {"gpus": [{"processes": [{"pid": 1000 + i, "user": f"u{i}", "memory_mib": 1} for i in range(500)]}
                     for _ in range(3)]}
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
