"""NVML: jupyter_gpu's snapshot against ``nvidia-smi -q -x`` (NVIDIA's own reading of the driver)."""

from __future__ import annotations

import json

import pytest
from real_gpu import MIB, bus_id, read_smi, run_cli

pytestmark = pytest.mark.gpu

# Memory used moves between two reads (the driver's own allocations, other processes): 64 MiB or 1 %.
USED_TOLERANCE_MIB = 64


@pytest.mark.real_only("nvidia-smi reads the driver; the simulation lives beneath nvidia-ml-py only")
def test_snapshot_vs_nvidia_smi(check) -> None:
    """Name, UUID, PCI bus id, memory total/used, driver and CUDA versions, processes, MIG mode."""
    from jupyter_gpu.sources import nvml

    smi = read_smi()
    snap = nvml.snapshot()
    facts = nvml.driver_facts()
    problems = []
    assert snap.nvml_available, snap.error
    assert len(snap.gpus) == len(smi.gpus), f"snapshot {len(snap.gpus)} GPUs, nvidia-smi {len(smi.gpus)}"
    if snap.driver_version != smi.driver_version:
        problems.append(f"driver {snap.driver_version!r} vs nvidia-smi {smi.driver_version!r}")
    if facts.cuda_driver_version != smi.cuda_version:
        problems.append(f"CUDA {facts.cuda_driver_version!r} vs nvidia-smi {smi.cuda_version!r}")
    for gpu, ref in zip(snap.gpus, smi.gpus, strict=True):
        where = f"GPU {gpu.index}"
        if gpu.name != ref.name:
            problems.append(f"{where} name {gpu.name!r} vs {ref.name!r}")
        if gpu.uuid != ref.uuid:
            problems.append(f"{where} UUID {gpu.uuid!r} vs {ref.uuid!r}")
        if bus_id(gpu.pci_bus_id) != bus_id(ref.pci_bus_id):
            problems.append(f"{where} PCI bus id {gpu.pci_bus_id!r} vs {ref.pci_bus_id!r}")
        total_mib = gpu.memory_total / MIB
        if ref.memory_total_mib is None or abs(total_mib - ref.memory_total_mib) > 1:
            # nvidia-smi's fb total leaves out what the driver reserves (its "reserved" line); NVML's
            # v2 memory info has the reserved part apart: say which one we show.
            reserved = (gpu.memory_reserved or 0) / MIB
            if ref.memory_total_mib is None or abs(total_mib - reserved - ref.memory_total_mib) > 1:
                problems.append(f"{where} memory total {total_mib:.0f} MiB vs {ref.memory_total_mib} MiB")
        used_mib = gpu.memory_used / MIB
        tolerance = max(USED_TOLERANCE_MIB, 0.01 * total_mib)
        if ref.memory_used_mib is None or abs(used_mib - ref.memory_used_mib) > tolerance:
            problems.append(f"{where} memory used {used_mib:.0f} MiB vs {ref.memory_used_mib} MiB (±{tolerance:.0f})")
        if ref.mig_mode is None:
            problems.append(f"{where} nvidia-smi's XML has no mig_mode/current_mig")
        elif gpu.mig_mode != (ref.mig_mode == "Enabled"):  # "Disabled", or "N/A" on a GPU without MIG
            problems.append(f"{where} MIG mode {gpu.mig_mode} vs {ref.mig_mode!r}")
        ours = {p.pid: (p.memory or 0) / MIB for p in gpu.processes}
        if set(ours) != set(ref.processes):
            problems.append(f"{where} process PIDs {sorted(ours)} vs {sorted(ref.processes)}")
        for pid, used in ref.processes.items():
            if pid in ours and used is not None and abs(ours[pid] - used) > USED_TOLERANCE_MIB:
                problems.append(f"{where} PID {pid} {ours[pid]:.0f} MiB vs {used} MiB")
        check.detail(
            f"GPU {gpu.index} {gpu.name}, {total_mib:.0f} MiB total, {used_mib:.0f} MiB used, "
            f"{len(ours)} processes, MIG {ref.mig_mode}"
        )
    check.figure("gpus", len(snap.gpus))
    assert not problems, "; ".join(problems)


@pytest.mark.real_only("nvidia-smi reads the driver; the simulation lives beneath nvidia-ml-py only")
def test_wide_fields_vs_nvidia_smi(check) -> None:
    """``--wide``: fan (where there is one), volatile uncorrected ECC errors, SM and memory clocks."""
    from jupyter_gpu.sources import nvml

    smi = read_smi()
    snap = nvml.snapshot()
    problems = []
    assert len(snap.gpus) == len(smi.gpus), f"snapshot {len(snap.gpus)} GPUs, nvidia-smi {len(smi.gpus)}"
    for gpu, ref in zip(snap.gpus, smi.gpus, strict=True):
        where = f"GPU {gpu.index}"
        if (gpu.fan_speed is None) != (ref.fan_percent is None):
            problems.append(f"{where} fan {gpu.fan_speed} vs nvidia-smi {ref.fan_percent}")
        if gpu.ecc_errors != ref.ecc_uncorrected:
            problems.append(f"{where} uncorrected ECC {gpu.ecc_errors} vs nvidia-smi {ref.ecc_uncorrected}")
        # Clocks move with load from one read to the next: both known, and the memory clock (fixed
        # on HBM parts) equal within 10 %.
        if (gpu.clock_sm is None) != (ref.clock_sm_mhz is None):
            problems.append(f"{where} SM clock {gpu.clock_sm} vs nvidia-smi {ref.clock_sm_mhz}")
        known = gpu.clock_memory is not None and ref.clock_memory_mhz
        if known and abs(gpu.clock_memory - ref.clock_memory_mhz) > 0.1 * ref.clock_memory_mhz:
            problems.append(f"{where} memory clock {gpu.clock_memory} vs nvidia-smi {ref.clock_memory_mhz} MHz")
        check.detail(
            f"{where}: fan {gpu.fan_speed}, ECC {gpu.ecc_errors}, SM {gpu.clock_sm} MHz, memory {gpu.clock_memory} MHz"
        )
    done = run_cli("status", "--wide")
    assert done.returncode == 0, done.stderr
    assert not problems, "; ".join(problems)


def test_cli_status_and_json(check) -> None:
    """``jupyter-gpu status`` and ``--json`` on this machine: every GPU, as the snapshot has it."""
    from jupyter_gpu.sources import nvml

    snap = nvml.snapshot()
    table = run_cli("status")
    assert table.returncode == 0, table.stdout + table.stderr
    as_json = run_cli("status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert [g["uuid"] for g in data["gpus"]] == [g.uuid for g in snap.gpus]
    for gpu in snap.gpus:
        row = f"{gpu.index}  {gpu.name[:20]}"  # the table truncates long names with "…"
        assert row in table.stdout, f"no row {row!r} in the table: {table.stdout!r}"
    assert data["simulated"] is (not check.real)
    check.detail(f"{len(data['gpus'])} GPU(s) in both; table {len(table.stdout.splitlines())} lines")
