"""MIG: simulated slices behind nvidia-ml-py's real MIG calls, and the snapshot contract for them."""

from __future__ import annotations

import re

import pytest
from support import A100_MIG_UUIDS, a100_mig_scenario, h100_split_scenario

import jupyter_gpu
from jupyter_gpu import simulate
from jupyter_gpu.sources.nvml import NvmlReader, mig_profile

MIB = 1024 * 1024


# -- the simulation, through nvidia-ml-py


def test_nvml_mig_calls_answer_like_a_driver_in_mig_mode(scenario):
    import pynvml

    scenario.write(a100_mig_scenario())
    library = simulate.install(str(scenario.path))
    try:
        pynvml.nvmlInit()
        parent = pynvml.nvmlDeviceGetHandleByIndex(0)
        whole = pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetMigMode(parent) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(whole) == 0
        # a GPU without mig_slices has MIG off, as a real H100 answered (docs/real-gpu.md)
        assert pynvml.nvmlDeviceGetMigMode(whole) == [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetGpuInstanceId(whole)  # a whole GPU is no GPU instance (driver 580's answer)
        assert not pynvml.nvmlDeviceIsMigDeviceHandle(parent).value
        seen = []
        for position in range(3):
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, position)
            assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
            assert pynvml.nvmlDeviceGetUUID(
                pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            ) == pynvml.nvmlDeviceGetUUID(parent)
            for unsupported, args in (
                (pynvml.nvmlDeviceGetUtilizationRates, ()),
                (pynvml.nvmlDeviceGetTemperature, (0,)),
                (pynvml.nvmlDeviceGetPowerUsage, ()),
            ):
                with pytest.raises(pynvml.NVMLError_NotSupported):
                    unsupported(mig, *args)
            seen.append(
                (
                    pynvml.nvmlDeviceGetUUID(mig),
                    pynvml.nvmlDeviceGetName(mig),
                    pynvml.nvmlDeviceGetGpuInstanceId(mig),
                    pynvml.nvmlDeviceGetComputeInstanceId(mig),
                    pynvml.nvmlDeviceGetMemoryInfo(mig).total // MIB,
                    [(p.pid, p.gpuInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig)],
                )
            )
            by_uuid = pynvml.nvmlDeviceGetHandleByUUID(seen[-1][0].encode())  # MIG UUIDs resolve too
            assert pynvml.nvmlDeviceGetUUID(by_uuid) == seen[-1][0]
        assert seen == [
            (A100_MIG_UUIDS[0], "NVIDIA A100-SXM4-80GB MIG 3g.40gb [simulated]", 2, 0, 40192, [(4100001, 2)]),
            (A100_MIG_UUIDS[1], "NVIDIA A100-SXM4-80GB MIG 2g.20gb [simulated]", 3, 0, 19968, []),
            (A100_MIG_UUIDS[2], "NVIDIA A100-SXM4-80GB MIG 1g.10gb [simulated]", 9, 0, 9728, [(4100002, 9)]),
        ]
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)
        # the parent lists every slice's processes with their instance ids; its utilization is gone
        assert [
            (p.pid, p.gpuInstanceId, p.computeInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(parent)
        ] == [(4100001, 2, 0), (4100002, 9, 0)]
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(parent)
        assert pynvml.nvmlDeviceGetTemperature(parent, 0) == 44
        assert pynvml.nvmlDeviceGetMemoryInfo(parent, version=pynvml.nvmlMemory_v2).used == 34000 * MIB
        assert [p.gpuInstanceId for p in pynvml.nvmlDeviceGetComputeRunningProcesses(whole)] == [0xFFFFFFFF]
    finally:
        simulate.uninstall()
    assert library.callback_errors == []


def test_a_gpu_that_cannot_do_mig_answers_not_supported_and_reads_as_a_whole_gpu(scenario):
    import pynvml

    world = a100_mig_scenario()
    world["gpus"][1]["unsupported"] = ["mig"]  # e.g. a V100 or an RTX card
    scenario.write(world)
    library = simulate.install(str(scenario.path))
    try:
        pynvml.nvmlInit()
        whole = pynvml.nvmlDeviceGetHandleByIndex(1)
        for call in (pynvml.nvmlDeviceGetMigMode, pynvml.nvmlDeviceGetMaxMigDeviceCount):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call(whole)
        gpu = NvmlReader().snapshot().gpus[1]
        assert (gpu.mig_mode, gpu.slices) == (False, ())
    finally:
        simulate.uninstall()
    assert library.callback_errors == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["gpus"][0]["mig_slices"][0].update(colour="red"), "mig_slices[0].colour is not a scenario key"),
        (lambda d: d["gpus"][0]["mig_slices"][1].update(uuid=A100_MIG_UUIDS[0]), "is used by another slice"),
        (
            lambda d: d["gpus"][0]["mig_slices"][1].update(gpu_instance_id=2),
            "gpu_instance_id 2 with compute_instance_id 0",
        ),
        (lambda d: d["gpus"][0]["mig_slices"][1].update(uuid="GPU-1234"), 'uuid must start with "MIG-"'),
        (lambda d: d["gpus"][0]["mig_slices"][1].update(memory_total_mib=50000), "exceeds the GPU's memory_total_mib"),
        (lambda d: d["gpus"][0]["mig_slices"][0].pop("profile"), "mig_slices[0].profile is required"),
        (
            lambda d: d["gpus"][0]["mig_slices"][2].update(memory_used_mib=-1),
            "mig_slices[2].memory_used_mib must be >= 0",
        ),
        (lambda d: d["gpus"][0].update(processes=[{"pid": 5}]), "processes must be empty when mig_slices is given"),
        (lambda d: d["gpus"][0].update(mig_slices=[{"profile": "1g.10gb"}] * 8), "mig_slices must have at most 7"),
        (lambda d: d["gpus"][0].update(mig_slices={"profile": "1g.10gb"}), "mig_slices must be a list"),
    ],
)
def test_mig_scenario_keys_are_validated_like_every_key(change, message):
    data = a100_mig_scenario()
    change(data)
    with pytest.raises(simulate.ScenarioError, match=re.escape(message)):
        simulate.Scenario.from_dict(data)


# -- the snapshot contract


def test_a_gpu_in_mig_mode_lists_its_slices_next_to_a_whole_gpu(scenario, monkeypatch):
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")  # other users' program names too (admin)
    scenario.write(a100_mig_scenario())
    snap = jupyter_gpu.snapshot()
    mig, whole = snap.gpus
    assert mig.mig_mode and not whole.mig_mode and whole.slices == ()
    assert [(s.index, s.uuid, s.profile, s.memory_total // MIB, s.memory_used // MIB) for s in mig.slices] == [
        (0, A100_MIG_UUIDS[0], "3g.40gb", 40192, 30000),
        (1, A100_MIG_UUIDS[1], "2g.20gb", 19968, 0),
        (2, A100_MIG_UUIDS[2], "1g.10gb", 9728, 4000),
    ]
    # processes attributed to their slice, on the slice and on the GPU
    assert [(p.pid, p.user) for p in mig.slice(0).processes] == [(4100001, "bob")]
    assert mig.slice(1).processes == ()
    assert [p.pid for p in mig.slice(A100_MIG_UUIDS[2]).processes] == [4100002]
    assert {p.pid: p.slice for p in mig.processes} == {4100001: A100_MIG_UUIDS[0], 4100002: A100_MIG_UUIDS[2]}
    # the parent's figures stay the whole card's; utilization does not exist in MIG mode
    assert (mig.memory_total // MIB, mig.memory_used // MIB, mig.memory_reserved // MIB) == (81920, 34000, 512)
    assert (mig.utilization, mig.temperature, mig.power) == (None, 44, 150.0)
    assert snap.find_slice(A100_MIG_UUIDS[1]) == (mig, mig.slice(1))
    # additive: the whole GPU's JSON is the old one plus mig_mode false and no slices
    data = snap.to_dict()["gpus"]
    assert data[1]["mig_mode"] is False and data[1]["slices"] == []
    assert data[1]["processes"] == [
        {"pid": 4100003, "memory": 2000 * MIB, "user": "dave", "name": "python", "type": "compute"}
    ]
    assert data[0]["slices"][2] == {
        "index": 2,
        "uuid": A100_MIG_UUIDS[2],
        "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb [simulated]",
        "profile": "1g.10gb",
        "gpu_instance_id": 9,
        "compute_instance_id": 0,
        "memory_total": 9728 * MIB,
        "memory_used": 4000 * MIB,
        "memory_free": 5728 * MIB,
        "error": None,
        "processes": [
            {
                "pid": 4100002,
                "memory": 4000 * MIB,
                "user": "carol",
                "name": "python",
                "type": "compute",
                "slice": A100_MIG_UUIDS[2],
            }
        ],
    }


def test_h100_split_into_seven_slices(scenario):
    scenario.write(h100_split_scenario())
    gpu = jupyter_gpu.snapshot().gpus[0]
    assert [s.profile for s in gpu.slices] == ["1g.10gb"] * 7
    assert [s.gpu_instance_id for s in gpu.slices] == list(range(7, 14))
    assert len({s.uuid for s in gpu.slices}) == 7 and all(s.uuid.startswith("MIG-") for s in gpu.slices)
    assert all(s.memory_total == 9856 * MIB and s.memory_used == 0 for s in gpu.slices)


def test_a_slice_created_later_is_found_when_a_process_appears_in_it(scenario):
    data = a100_mig_scenario()
    slices = data["gpus"][0]["mig_slices"]
    created_later = slices.pop(1)
    scenario.write(data)
    reader = NvmlReader()
    assert [s.profile for s in reader.snapshot().gpus[0].slices] == ["3g.40gb", "1g.10gb"]
    created_later["processes"] = [{"pid": 4100009, "memory_mib": 100, "user": "erin", "name": "python"}]
    slices.insert(1, created_later)
    scenario.write(data)
    gpu = reader.snapshot().gpus[0]  # at once, not after the periodic re-enumeration
    assert [s.profile for s in gpu.slices] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert [p.pid for p in gpu.slice(1).processes] == [4100009]


def test_slices_are_attributed_on_drivers_without_the_v3_process_call(scenario):
    data = a100_mig_scenario()
    data["missing_functions"] = ["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"]
    scenario.write(data)
    gpu = jupyter_gpu.snapshot().gpus[0]
    assert {p.pid: p.slice for p in gpu.processes} == {4100001: A100_MIG_UUIDS[0], 4100002: A100_MIG_UUIDS[2]}


def test_profile_comes_from_the_mig_device_name():
    assert mig_profile("NVIDIA A100-SXM4-80GB MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb [simulated]") == "1c.3g.40gb"
    assert mig_profile("odd name") == "odd name"


def test_nvitop_reading_the_same_simulated_gpus_agrees_on_the_slices(scenario):
    from nvitop import Device

    scenario.write(a100_mig_scenario())
    ours = jupyter_gpu.snapshot()
    theirs = Device.all()
    assert [d.is_mig_mode_enabled() for d in theirs] == [g.mig_mode for g in ours.gpus]
    for device, gpu in zip(theirs, ours.gpus, strict=True):
        assert [
            (
                m.uuid(),
                m.name(),
                m.memory_total(),
                m.memory_used(),
                m.gpu_instance_id(),
                m.compute_instance_id(),
                sorted(m.processes()),
            )
            for m in device.mig_devices()
        ] == [
            (
                s.uuid,
                s.name,
                s.memory_total,
                s.memory_used,
                s.gpu_instance_id,
                s.compute_instance_id,
                sorted(p.pid for p in s.processes),
            )
            for s in gpu.slices
        ]
    assert all(str(m.gpu_utilization()) == "N/A" for m in theirs[0].mig_devices())  # nvitop: n/a too


# -- what CUDA shows (visibility.py)


def test_cuda_shows_one_mig_device_whatever_the_variable_names(scenario):
    from jupyter_gpu.core.visibility import CudaEnv, cuda_devices

    scenario.write(a100_mig_scenario())
    gpus = jupyter_gpu.snapshot().gpus
    parent = gpus[0].uuid
    cases = {
        A100_MIG_UUIDS[1]: ((0,), (A100_MIG_UUIDS[1],)),
        A100_MIG_UUIDS[2][:12]: ((0,), (A100_MIG_UUIDS[2],)),  # a unique prefix
        f"MIG-{parent}/3/0": ((0,), (A100_MIG_UUIDS[1],)),  # the R450/R460 form
        f"{A100_MIG_UUIDS[2]},{A100_MIG_UUIDS[0]}": ((0,), (A100_MIG_UUIDS[2],)),  # only the first MIG device
        f"1,{A100_MIG_UUIDS[0]}": ((0,), (A100_MIG_UUIDS[0],)),  # a MIG device hides the whole GPU
        "1,0": ((0,), (A100_MIG_UUIDS[0],)),  # a GPU in MIG mode shows its first MIG device, alone
        "1": ((1,), ()),
        "MIG-ffffffff": ((), ()),  # an unknown MIG UUID ends the list
    }
    for value, (indices, slices) in cases.items():
        devices = cuda_devices(CudaEnv(value, "PCI_BUS_ID"), gpus)
        assert (devices.indices, devices.slices) == (indices, slices), value
    unset = cuda_devices(CudaEnv(None, None), gpus)
    assert (unset.indices, unset.slices) == ((0,), (A100_MIG_UUIDS[0],))
