"""The GPU check itself (scripts/gpu-check.sh, tests/gpu/, docs/real-gpu.md) where there is no GPU:
its simulated run end to end (so the suite cannot rot unseen), its skip without a driver, the
report's pages and the nvidia-smi reader it compares with on a real machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from gpu_report import failure_detail, markdown
from real_gpu import bus_id, parse_smi

ROOT = Path(__file__).resolve().parent.parent

# Checks the simulated run must pass: what the simulated GPU and the CUDA stand-in model.
SIMULATED_PASSES = {
    "cli_status_and_json",
    "plan_magics",
    "torch_cap_and_device",
    "no_selection",
    "too_late_torch",
    "doctor_json",
    "snapshot_cost",
    "sampler_cpu",
    "run_cap",
}


# The dev environment's auto-loaded pytest plugins that tests/gpu never uses (a bare GPU machine has
# neither): nbval imports nbformat and its JSON schema checks, about 2.5 s of every pytest start here,
# hypothesis about 1 s. Left out of the two runs below through PYTEST_ADDOPTS; the script is unchanged.
UNUSED_PLUGINS = "-p no:nbval -p no:hypothesispytest"


def clean_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_GPU_", "CUDA_", "PYTEST_"))}
    env["PYTEST_ADDOPTS"] = UNUSED_PLUGINS
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    env.update(more)
    return env


@pytest.mark.frameworks
@pytest.mark.timeout(480)
def test_simulated_run_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        ["scripts/gpu-check.sh", "--simulated", str(out)],
        cwd=ROOT,
        env=clean_env(GPU_CHECK_PYTHON=sys.executable, GPU_CHECK_TIME_BOX_S="400"),
        capture_output=True,
        text=True,
        timeout=450,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads((out / "gpu-report.json").read_text())
    machine = report["machine"]
    assert machine["mode"] == "simulated" and machine["complete"] is True
    assert machine["gpus"][0]["name"].endswith("[simulated]")
    assert machine["driver"] and machine["packages"]["jupyter_gpu"]
    outcomes = {c["name"]: c["outcome"] for c in report["checks"]}
    assert {name for name, outcome in outcomes.items() if outcome == "passed"} == SIMULATED_PASSES, outcomes
    assert set(outcomes.values()) == {"passed", "skipped"}, outcomes
    for check in report["checks"]:
        assert set(check) == {"name", "outcome", "detail", "figures"}
        if check["outcome"] == "skipped":
            assert check["detail"].startswith("simulated: "), check
    figures = {k: v for c in report["checks"] for k, v in c["figures"].items()}
    assert {"snapshot_ms_median", "nvml_calls_per_sample", "sampler_cpu_ms_per_s", "doctor_s"} <= set(figures)
    assert {"gpu_select_first_ms", "gpu_select_next_ms"} <= set(figures)
    page = (out / "gpu-report.md").read_text()
    assert "# jupyter_gpu GPU check: SIMULATED GPUs (no real driver)" in page
    assert all(f"| {name} | {outcome} |" in page for name, outcome in outcomes.items())


def a_driver_answers() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_without_a_driver_every_check_is_skipped_with_one_reason(tmp_path: Path) -> None:
    if a_driver_answers():
        pytest.skip("an NVIDIA driver answers here: tests/gpu runs for real")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-rs", "-p", "no:cacheprovider", f"--basetemp={tmp_path}"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    # "SKIPPED [1] tests/gpu/test_gpu_nvml.py:16: REASON": one line per place, one reason for all
    reasons = {line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("SKIPPED")}
    assert len(reasons) == 1, reasons
    assert next(iter(reasons)).startswith("no NVIDIA driver answers here (NVML: "), reasons
    assert " passed" not in done.stdout and " failed" not in done.stdout


def test_the_page_escapes_what_a_check_said() -> None:
    document = {
        "machine": {
            "mode": "real",
            "date": "2026-11-27 06:00 UTC",
            "elapsed_s": 12.5,
            "complete": False,
            "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory_total": 1}],
            "driver": "580.65.06",
            "cuda": "13.0",
            "python": "3.12.3",
            "packages": {"torch": "2.11.0", "tensorflow": None},
            "nvml_error": None,
        },
        "checks": [
            {"name": "a", "outcome": "failed", "detail": "x | y \u202e", "figures": {"t_ms": 1.23456}},
            {"name": "b", "outcome": "skipped", "detail": "why", "figures": {}},
        ],
    }
    page = markdown(document)
    assert "INCOMPLETE" in page
    assert "GPU 0 NVIDIA H100 80GB HBM3" in page and "driver 580.65.06, CUDA 13.0" in page
    assert "torch 2.11.0" in page and "tensorflow" not in page
    assert "1 failed, 1 skipped" in page
    row = next(line for line in page.splitlines() if line.startswith("| a |"))
    assert "x \\| y" in row and "\u202e" not in row and "t_ms = 1.235" in row


def test_a_failure_is_reported_by_its_first_line() -> None:
    crash = SimpleNamespace(message="AssertionError: GPU 0 name 'A' vs 'B'\nassert 1 == 2\n  +  where ...")
    report = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=crash))
    assert failure_detail(report) == "AssertionError: GPU 0 name 'A' vs 'B'"  # type: ignore[arg-type]


SMI = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>580.65.06</driver_version>
  <cuda_version>13.0</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-5b6d0e2c-0000-1111-2222-333344445555</uuid>
    <mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
    <pci><pci_bus>18</pci_bus><pci_bus_id>00000000:18:00.0</pci_bus_id></pci>
    <fan_speed>N/A</fan_speed>
    <fb_memory_usage><total>81559 MiB</total><reserved>530 MiB</reserved><used>4412 MiB</used>
      <free>76617 MiB</free></fb_memory_usage>
    <ecc_errors><volatile><sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>1</sram_uncorrectable_secded><dram_correctable>3</dram_correctable>
      <dram_uncorrectable>2</dram_uncorrectable></volatile></ecc_errors>
    <clocks><graphics_clock>1980 MHz</graphics_clock><sm_clock>1980 MHz</sm_clock>
      <mem_clock>2619 MHz</mem_clock></clocks>
    <processes><process_info><gpu_instance_id>N/A</gpu_instance_id><pid>4711</pid><type>C</type>
      <process_name>python3</process_name><used_memory>3880 MiB</used_memory></process_info></processes>
  </gpu>
</nvidia_smi_log>
"""


def test_nvidia_smi_xml_is_read_as_nvidia_names_it() -> None:
    smi = parse_smi(SMI)
    assert (smi.driver_version, smi.cuda_version) == ("580.65.06", "13.0")
    gpu = smi.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.uuid.startswith("GPU-5b6d0e2c")
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (81559, 4412)
    assert gpu.mig_mode == "Disabled" and gpu.fan_percent is None
    assert (gpu.clock_sm_mhz, gpu.clock_memory_mhz) == (1980, 2619)
    assert gpu.ecc_uncorrected == 3  # sram secded 1 + dram 2; correctable ones are not counted
    assert gpu.processes == {4711: 3880}
    assert bus_id(gpu.pci_bus_id) == bus_id("0000:18:00.0") == "18:00.0"


def test_a_real_h100s_nvidia_smi_xml_is_read_with_every_field_the_check_compares() -> None:
    """``nvidia-smi -q -x`` as driver 580.159.04 wrote it on an H100 (the first real run,
    docs/real-gpu.md; serial number zeroed). Its DTD names MIG mode ``mig_mode/current_mig``: the
    reader once looked for ``current_mode``, read None, and the MIG comparison passed vacuously."""
    smi = parse_smi((Path(__file__).parent / "golden" / "nvidia-smi-h100-driver-580.xml").read_text())
    assert (smi.driver_version, smi.cuda_version) == ("580.159.04", "13.0")
    (gpu,) = smi.gpus
    assert (gpu.name, gpu.uuid) == ("NVIDIA H100 80GB HBM3", "GPU-8c046411-9720-eb21-5be5-da93f88ab6f5")
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.mig_mode) == (81559, 0, "Disabled")
    assert gpu.fan_percent is None  # "N/A": an SXM board has no fan of its own
    assert (gpu.clock_sm_mhz, gpu.clock_memory_mhz, gpu.ecc_uncorrected) == (345, 2619, 0)
    assert gpu.processes == {} and bus_id(gpu.pci_bus_id) == "00:06.0"
