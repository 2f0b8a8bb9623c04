"""Snapshots read through the real nvidia-ml-py over simulated GPUs: every field, every fault."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

import jupyter_gpu
from jupyter_gpu import simulate
from jupyter_gpu.sources.nvml import NvmlReader
from jupyter_gpu.sources.processes import current_user

MIB = 1024 * 1024


def gpu(**fields):
    base = {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mib": 81920,
        "memory_reserved_mib": 512,
        "utilization": 35,
        "temperature": 41,
        "power_w": 180,
        "power_limit_w": 400,
    }
    return {**base, **fields}


def test_every_field_matches_the_scenario(scenario, monkeypatch):
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")  # other users' program names too (admin)
    scenario.write(
        {
            "driver_version": "555.42.06",
            "gpus": [
                gpu(processes=[{"pid": 4000001, "memory_mib": 1000, "user": "alice", "name": "python"}]),
                gpu(
                    name="NVIDIA RTX A6000",
                    memory_total_mib=49140,
                    utilization=3,
                    temperature=30,
                    power_w=21.5,
                    power_limit_w=300,
                ),
            ],
        }
    )
    snap = jupyter_gpu.snapshot()
    data = snap.to_dict()
    assert data["nvml_available"] is True and data["error"] is None
    assert data["driver_version"] == "555.42.06"
    assert data["simulated"] is True
    first, second = data["gpus"]
    assert first["index"] == 0 and first["name"] == "NVIDIA A100-SXM4-80GB [simulated]"  # marked as such
    assert first["uuid"].startswith("GPU-") and first["uuid"] != second["uuid"]
    assert first["memory_total"] == 81920 * MIB
    assert first["memory_used"] == 1000 * MIB  # v2: driver-reserved memory is not "used"
    assert first["memory_reserved"] == 512 * MIB
    assert first["memory_free"] == (81920 - 1000 - 512) * MIB
    assert (first["utilization"], first["temperature"], first["power"], first["power_limit"]) == (35, 41, 180.0, 400.0)
    assert first["processes"] == [
        {"pid": 4000001, "memory": 1000 * MIB, "user": "alice", "name": "python", "type": "compute"}
    ]
    assert second["name"] == "NVIDIA RTX A6000 [simulated]" and second["power"] == 21.5 and second["processes"] == []
    assert simulate.installed().callback_errors == []


def test_contract_keys_are_stable(demo_gpus):
    data = jupyter_gpu.snapshot().to_dict()
    assert {"nvml_available", "error", "driver_version", "timestamp", "gpus"} <= data.keys()
    for entry in data["gpus"]:
        assert {
            "index",
            "uuid",
            "name",
            "memory_total",
            "memory_used",
            "memory_free",
            "utilization",
            "temperature",
            "power",
            "power_limit",
            "error",
            "processes",
        } <= entry.keys()
        for process in entry["processes"]:
            assert {"pid", "memory", "user", "name"} <= process.keys()


def test_unsupported_fields_are_null(scenario):
    scenario.write({"gpus": [gpu(unsupported=["utilization", "temperature", "power", "power_limit"])]})
    (entry,) = jupyter_gpu.snapshot().to_dict()["gpus"]
    assert entry["utilization"] is None and entry["temperature"] is None
    assert entry["power"] is None and entry["power_limit"] is None
    assert entry["error"] is None and entry["memory_total"] == 81920 * MIB


def test_old_driver_without_memory_v2_falls_back_to_v1(scenario):
    scenario.write({"missing_functions": ["nvmlDeviceGetMemoryInfo_v2"], "gpus": [gpu(memory_used_mib=2000)]})
    (entry,) = jupyter_gpu.snapshot().gpus
    assert entry.memory_reserved is None
    assert entry.memory_used == (2000 + 512) * MIB  # v1 counts reserved memory as used
    assert entry.memory_free == (81920 - 2512) * MIB


def test_old_driver_without_v3_process_call_uses_v2(scenario):
    scenario.write(
        {
            "missing_functions": [
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
            ],
            "gpus": [gpu(processes=[{"pid": 4000002, "memory_mib": 64, "user": "bob"}])],
        }
    )
    snap = jupyter_gpu.snapshot()
    assert snap.gpus[0].error is None
    assert [(p.pid, p.memory) for p in snap.gpus[0].processes] == [(4000002, 64 * MIB)]
    assert simulate.installed().calls["nvmlDeviceGetComputeRunningProcesses_v2"] >= 1


def test_compute_and_graphics_processes_are_merged_by_pid(scenario):
    scenario.write(
        {
            "gpus": [
                gpu(
                    processes=[
                        {"pid": 4000003, "memory_mib": 300, "user": "eve", "name": "app", "type": "compute"},
                        {"pid": 4000003, "memory_mib": 300, "user": "eve", "name": "app", "type": "graphics"},
                        {"pid": 4000004, "memory_mib": 50, "user": "eve", "name": "Xorg", "type": "graphics"},
                    ]
                )
            ]
        }
    )
    processes = {p.pid: p for p in jupyter_gpu.snapshot().gpus[0].processes}
    assert processes[4000003].type == "compute+graphics" and processes[4000003].memory == 300 * MIB
    assert processes[4000004].type == "graphics"


def test_unknown_process_memory_is_null(scenario):
    scenario.write({"gpus": [gpu(processes=[{"pid": 4000005, "memory_mib": None, "user": "bob"}])]})
    assert jupyter_gpu.snapshot().to_dict()["gpus"][0]["processes"][0]["memory"] is None


def test_own_processes_carry_the_command_line_others_never(scenario):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # secret-token-42"])
    try:
        scenario.write(
            {
                "gpus": [
                    gpu(
                        processes=[
                            {"pid": os.getpid(), "memory_mib": 100},
                            {"pid": sleeper.pid, "memory_mib": 100, "user": "mallory"},  # a real PID, another user's
                        ]
                    )
                ]
            }
        )
        processes = {p["pid"]: p for p in jupyter_gpu.snapshot().to_dict()["gpus"][0]["processes"]}
    finally:
        sleeper.kill()
        sleeper.wait()
    mine = processes[os.getpid()]
    assert mine["user"] == current_user()
    assert "pytest" in mine["command"] or "python" in mine["command"]
    theirs = processes[sleeper.pid]
    assert theirs["user"] == "mallory"
    assert "command" not in theirs
    assert "secret-token-42" not in str(processes)


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("library_not_found", "libnvidia-ml.so.1"),
        ("driver_not_loaded", "driver is not loaded"),
        ("no_permission", "permission"),
    ],
)
def test_whole_nvml_faults_give_a_reason_not_an_exception(scenario, fault, words):
    scenario.write({"fault": fault, "gpus": [gpu()]})
    snap = jupyter_gpu.snapshot()
    assert snap.nvml_available is False and snap.gpus == ()
    assert words in snap.error
    scenario.write({"gpus": [gpu()]})  # the driver comes back: the next snapshot recovers
    assert jupyter_gpu.snapshot().nvml_available is True


def test_driver_lost_mid_run_then_back(scenario):
    scenario.write({"gpus": [gpu(), gpu()]})
    assert len(jupyter_gpu.snapshot().gpus) == 2
    scenario.update(lambda s: s.update(fault="driver_not_loaded"))
    snap = jupyter_gpu.snapshot()
    assert not snap.nvml_available and "driver is not loaded" in snap.error
    scenario.update(lambda s: s.update(fault=None))
    assert len(jupyter_gpu.snapshot().gpus) == 2


def test_one_lost_gpu_does_not_hide_the_others(scenario):
    scenario.write({"gpus": [gpu(), gpu(utilization=77)]})
    jupyter_gpu.snapshot()
    scenario.update(lambda s: s["gpus"][0].update(fault="lost"))
    snap = jupyter_gpu.snapshot()
    assert snap.nvml_available
    assert "GPU is lost" in snap.gpus[0].error
    assert snap.gpus[0].name == "NVIDIA A100-SXM4-80GB [simulated]"  # still identified
    assert snap.gpus[1].error is None and snap.gpus[1].utilization == 77
    scenario.update(lambda s: s["gpus"][0].update(fault=None))
    assert jupyter_gpu.snapshot().gpus[0].error is None


def test_gpu_lost_before_first_read(scenario):
    scenario.write({"gpus": [gpu(fault="lost"), gpu()]})
    snap = jupyter_gpu.snapshot()
    assert "GPU is lost" in snap.gpus[0].error and snap.gpus[1].error is None


def test_scenario_changes_are_picked_up(scenario):
    scenario.write({"gpus": [gpu(utilization=5)]})
    assert jupyter_gpu.snapshot().gpus[0].utilization == 5
    scenario.update(
        lambda s: s["gpus"][0].update(utilization=88, processes=[{"pid": 4000006, "memory_mib": 4096, "user": "bob"}])
    )
    snap = jupyter_gpu.snapshot()
    assert snap.gpus[0].utilization == 88
    assert [p.pid for p in snap.gpus[0].processes] == [4000006]
    assert snap.gpus[0].memory_used == 4096 * MIB
    scenario.update(lambda s: s["gpus"][0].update(processes=[]))
    assert jupyter_gpu.snapshot().gpus[0].processes == ()


def test_an_edit_that_adds_gpus_keeps_this_processs_count_and_says_so(scenario):
    scenario.write({"gpus": [gpu(), gpu()]})
    assert len(jupyter_gpu.snapshot().gpus) == 2 and jupyter_gpu.snapshot().warnings == ()
    scenario.write({"gpus": [gpu(utilization=60)] * 4})
    snap = jupyter_gpu.snapshot()
    assert [g.utilization for g in snap.gpus] == [60, 60]  # the new figures of the GPUs it has
    assert snap.warnings == (
        "simulated scenario now has 4 GPUs; this process keeps its 2 until it restarts "
        "(a process's GPUs are counted once, when it starts NVML)",
    )
    scenario.write({"gpus": [gpu()]})
    snap = jupyter_gpu.snapshot()
    assert snap.gpus[0].error is None and "GPU is lost" in snap.gpus[1].error  # removed: lost
    assert "now has 1 GPU; this process keeps its 2" in snap.warnings[0]
    assert "the missing ones read as lost" in snap.warnings[0]
    scenario.write({"gpus": [gpu(), gpu()]})
    assert jupyter_gpu.snapshot().warnings == ()


def test_a_gpus_name_uuid_and_power_limit_are_read_again(scenario, monkeypatch):
    """The reader keeps them between reads, and reads them again every MIG_REFRESH_SECONDS: an
    admin's ``nvidia-smi -pl`` or an edited scenario never shows another GPU's limit ("690 / 400 W")."""
    from jupyter_gpu.sources import nvml

    scenario.write({"gpus": [gpu(), gpu()]})
    assert jupyter_gpu.snapshot().gpus[0].power_limit == 400
    scenario.update(
        lambda s: s["gpus"][0].update(name="NVIDIA H100 80GB HBM3", uuid="GPU-h100", power_w=690, power_limit_w=700)
    )
    monkeypatch.setattr(nvml, "MIG_REFRESH_SECONDS", 0.0)
    first = jupyter_gpu.snapshot().gpus[0]  # the first read after the interval reads them again
    assert (first.power, first.power_limit) == (690, 700)
    assert first.name == "NVIDIA H100 80GB HBM3 [simulated]" and first.uuid == "GPU-h100"


def test_a_half_written_scenario_keeps_the_last_good_one(scenario):
    scenario.write({"gpus": [gpu(utilization=9)]})
    jupyter_gpu.snapshot()
    scenario.path.write_text('{"gpus": [')
    snap = jupyter_gpu.snapshot()
    assert snap.nvml_available and snap.gpus[0].utilization == 9
    assert "scenario.json" in simulate.installed().source.last_error


def test_bad_simulate_value_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv(simulate.ENV_VAR, str(tmp_path / "missing.json"))
    snap = jupyter_gpu.snapshot()
    assert not snap.nvml_available
    assert "JUPYTER_GPU_SIMULATE" in snap.error and "no such file" in snap.error


def test_four_threads_take_snapshots_at_once(demo_gpus):
    expected = jupyter_gpu.snapshot().to_dict()
    results: list[dict] = []
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(100):
                data = jupyter_gpu.snapshot().to_dict()
                data["timestamp"] = expected["timestamp"]
                results.append(data)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(results) == 400 and all(result == expected for result in results)
    assert simulate.installed().callback_errors == []


def test_nvml_is_initialised_once_and_handles_are_cached(scenario):
    reader = NvmlReader()
    for _ in range(5):
        reader.snapshot()
    calls = simulate.installed().calls
    assert calls["nvmlInitWithFlags"] == 1
    assert calls["nvmlDeviceGetHandleByIndex_v2"] == 2  # once per GPU, not per snapshot
    assert calls["nvmlDeviceGetName"] == 2
    assert calls["nvmlDeviceGetMemoryInfo_v2"] == 10


def test_simulation_reaches_child_processes_through_pynvml_alone(demo_gpus):
    """A child that never imports jupyter_gpu still sees the simulated GPUs (the .pth hook)."""
    code = (
        "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount(), "
        "pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(2)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(maxsplit=1) == ["4", "NVIDIA RTX A6000 [simulated]\n"]


def test_unsetting_the_variable_returns_to_real_nvml(demo_gpus, monkeypatch):
    assert jupyter_gpu.snapshot().simulated
    monkeypatch.delenv(simulate.ENV_VAR)
    snap = jupyter_gpu.snapshot()
    assert simulate.installed() is None and not snap.simulated
    if snap.nvml_available:
        pytest.skip("this machine has a real NVIDIA driver")
    assert "libnvidia-ml.so.1" in snap.error


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"gpus": [{"power_w": ' + "9" * 400 + "}]}", "gpus[0].power_w must be <= 100000"),
        ("[" * 5000 + "]" * 5000, "JSON nested too deeply"),
        ('{"gpus": [{"power_w": NaN}]}', "not valid JSON (NaN is not a number"),
        ('{"gpus": [{"memory_total_mib": 1e400}]}', "not valid JSON (the number 1e400 is too large)"),
        ("[" + "9" * 5000 + "]", "not valid JSON (an integer of more digits"),
        ('{"gpus": [{"name": ["\\ud800"]}]}', "gpus[0].name must be a string, not a list"),
        ('{"gpus": [{"name": "\\ud800"}]}', "gpus[0].name must not contain lone surrogates"),
    ],
)
def test_a_hostile_scenario_file_means_nvml_unavailable_not_a_crash(monkeypatch, tmp_path, text, words):
    # A scenario file another user may have written: the process-wide path (install_from_environment,
    # through the NVML reader) degrades to one line saying why, whatever the file holds.
    path = tmp_path / "hostile.json"
    path.write_text(text)
    monkeypatch.setenv(simulate.ENV_VAR, str(path))
    with pytest.raises(simulate.ScenarioError):
        simulate.install_from_environment()
    snap = jupyter_gpu.snapshot()
    assert not snap.nvml_available and simulate.installed() is None
    prefix = f"simulated GPUs could not be set up: JUPYTER_GPU_SIMULATE={str(path)!r}: "
    assert snap.error is not None and prefix + words in snap.error and "\n" not in snap.error


def test_driver_facts_beside_a_snapshot(scenario):
    """``jupyter-gpu doctor``'s extras: NVML's version and the driver's CUDA (PCI bus ids are in the
    snapshot, read once per GPU)."""
    from jupyter_gpu.sources.nvml import DriverFacts, driver_facts

    scenario.write({"driver_version": "555.42.06", "cuda_driver_version": 12050, "gpus": [gpu(), gpu()]})
    reader = NvmlReader()
    assert driver_facts(reader) == DriverFacts()  # NVML not opened yet: nothing is read
    assert reader.snapshot().nvml_available
    assert driver_facts(reader) == DriverFacts("12.555.42.06", "12.5")


# -- what `jupyter-gpu status --wide` shows: fan, PCI bus id, ECC errors, clocks


def test_fan_bus_id_ecc_and_clocks_are_read_where_the_gpu_has_them(scenario):
    extras = {"fan_speed": 41, "pci_bus_id": "00000000:3b:00.0", "ecc_uncorrected": 3}
    scenario.write(
        {
            "gpus": [
                gpu(**extras, clock_sm_mhz=1755, clock_memory_mhz=1215),
                gpu(unsupported=["fan_speed", "ecc", "clocks"]),  # passively cooled, ECC off, no clocks
            ]
        }
    )
    first, second = jupyter_gpu.snapshot().to_dict()["gpus"]
    assert (first["fan_speed"], first["pci_bus_id"], first["ecc_errors"]) == (41, "00000000:3B:00.0", 3)
    assert (first["clock_sm"], first["clock_memory"]) == (1755, 1215)
    assert second["fan_speed"] is None and second["ecc_errors"] is None and second["clock_sm"] is None
    assert second["clock_memory"] is None and second["pci_bus_id"] == "00000000:18:00.0"  # "for all products"
    assert second["error"] is None and simulate.installed().callback_errors == []


def test_extras_are_read_every_few_seconds_and_not_supported_ones_never_again(scenario, monkeypatch):
    from jupyter_gpu.sources import nvml

    scenario.write({"gpus": [gpu(unsupported=["fan_speed"], ecc_uncorrected=0)]})
    reader = NvmlReader()
    reader.snapshot()
    calls = simulate.installed().calls
    assert calls["nvmlDeviceGetFanSpeed"] == 1 and calls["nvmlDeviceGetTotalEccErrors"] == 1
    scenario.update(lambda data: data["gpus"][0].update(ecc_uncorrected=7))
    for _ in range(5):
        assert reader.snapshot().gpus[0].ecc_errors == 0  # within EXTRAS_REFRESH_SECONDS: not asked
    assert calls["nvmlDeviceGetTotalEccErrors"] == 1 and calls["nvmlDeviceGetClockInfo"] == 2
    monkeypatch.setattr(nvml, "EXTRAS_REFRESH_SECONDS", 0.0)
    assert reader.snapshot().gpus[0].ecc_errors == 7
    assert calls["nvmlDeviceGetFanSpeed"] == 1  # the card has no fan: never asked again


def test_extras_on_a_gpu_in_mig_mode_are_the_cards(scenario):
    from support import a100_mig_scenario

    data = a100_mig_scenario()
    data["gpus"][0].update(fan_speed=55, ecc_uncorrected=1)
    scenario.write(data)
    card = jupyter_gpu.snapshot().gpus[0]
    assert card.mig_mode and (card.fan_speed, card.ecc_errors, card.clock_sm) == (55, 1, 1410)
    assert simulate.installed().callback_errors == []
