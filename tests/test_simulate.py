"""The simulated NVML itself: scenario validation, presets, call accounting."""

from __future__ import annotations

import pytest

from jupyter_gpu import simulate


def test_presets():
    assert len(simulate.ScenarioSource("3").current().gpus) == 3
    demo = simulate.ScenarioSource("demo").current()
    assert {gpu.name for gpu in demo.gpus} == {"NVIDIA A100-SXM4-80GB", "NVIDIA RTX A6000"}
    assert max(gpu.utilization for gpu in demo.gpus) > 90
    assert {p.user for gpu in demo.gpus for p in gpu.processes} >= {"bob", "carol"}


@pytest.mark.parametrize(("scenario", "words"), [
    ({"fault": "melted"}, "unknown fault"),
    ({"gpus": [{"fault": "on fire"}]}, "unknown fault"),
    ({"gpus": [{"memory_total_mib": 10, "memory_used_mib": 20}]}, "exceeds"),
    ({"gpus": [{"unsupported": ["name"]}]}, "cannot mark"),
    ({"gpus": {}}, "must be a list"),
])
def test_bad_scenarios_are_refused_with_a_reason(tmp_path, scenario, words):
    with pytest.raises(simulate.ScenarioError, match=words):
        simulate.write_scenario(tmp_path / "s.json", scenario)
    assert not (tmp_path / "s.json").exists()


def test_bad_spec_names_the_choices():
    with pytest.raises(simulate.ScenarioError, match="a number of GPUs, 'demo', or the path"):
        simulate.ScenarioSource("/no/such/scenario.json")


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
