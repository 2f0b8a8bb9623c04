"""Real kernels on MIG slices: %gpu_select takes 0:1 and MIG UUIDs, the spawner's slice is the fence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kernels import Kernel, start
from support import A100_MIG_UUIDS, a100_mig_scenario, flat, h100_split_scenario


@pytest.fixture
def mig_kernel(scenario: Any) -> Iterator[Kernel]:
    scenario.write(a100_mig_scenario())
    yield from start()


def test_a_kernel_selects_a_slice_and_its_environment_carries_the_mig_uuid(mig_kernel: Kernel) -> None:
    out, err = mig_kernel.run("%load_ext jupyter_gpu\nfrom jupyter_gpu import plan\n%gpu_select 0:1")
    assert not err, err
    assert mig_kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == A100_MIG_UUIDS[1]
    out, err = mig_kernel.run("%gpu_limit 50%")  # a share of the slice (19968 MiB), not of the card
    assert not err, err
    assert mig_kernel.value("plan.current_plan().memory_limit_bytes(0)") == 19968 * 2**20 // 2
    out, err = mig_kernel.run(f"%gpu_select {A100_MIG_UUIDS[2][:13]}")  # a unique prefix of a MIG UUID
    assert not err, err
    assert mig_kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == A100_MIG_UUIDS[2]
    before = mig_kernel.value("env()")
    for spec, words in (
        ("0:1,0:2", "CUDA enumerates at most one MIG device per process"),
        ("0", "GPU 0 is in MIG mode: CUDA cannot use it whole; select one of its slices: 0:0"),
        ("0:5", "GPU 0 has no MIG slice 5"),
    ):
        out, err = mig_kernel.run(f"%gpu_select {spec}")
        assert words in out + err, (spec, out, err)
        assert mig_kernel.value("env()") == before  # refused: nothing changed


def test_a_slice_as_the_spawners_fence(scenario: Any) -> None:
    scenario.write(a100_mig_scenario())
    for kernel in start({"CUDA_VISIBLE_DEVICES": A100_MIG_UUIDS[0]}):
        kernel.run("%load_ext jupyter_gpu\nfrom jupyter_gpu import plan")
        out, err = kernel.run("%gpu_limit 25%")  # before any selection: a share of the assigned slice
        assert not err, err
        assert kernel.value("plan.current_plan().memory_limit_bytes(0)") == 40192 * 2**20 // 4
        out, err = kernel.run("%gpu_select auto")
        assert not err, err
        assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == A100_MIG_UUIDS[0]
        out, err = kernel.run("%gpu_select 0:2")
        assert "outside the GPUs assigned to this kernel" in flat(out) + err
        out, err = kernel.run("%gpu_select 0")  # names the one slice assigned, not every slice
        assert "CUDA cannot use it whole; select one of its slices: 0:0 (3g.40gb)\n" in out + err + "\n"
        assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == A100_MIG_UUIDS[0]


def test_auto_chooses_the_idlest_slice_when_only_slices_can_be_selected(scenario: Any) -> None:
    data = h100_split_scenario()
    for position in range(6):  # others work on every slice but the last
        data["gpus"][0]["mig_slices"][position]["processes"] = [
            {"pid": 4_200_000 + position, "memory_mib": 100, "user": "bob", "name": "python"}
        ]
    scenario.write(data)
    for kernel in start():
        out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select auto")
        assert not err, err
        wanted = kernel.value("[s.uuid for s in __import__('jupyter_gpu').snapshot().gpus[0].slices][6]")
        assert kernel.value("env()")["CUDA_VISIBLE_DEVICES"] == wanted
        out, err = kernel.run("%gpu_select auto:2")
        assert "CUDA enumerates at most one MIG device per process" in flat(out) + err


def test_gpu_select_lists_slices_under_their_gpu_and_status_names_the_slice(mig_kernel: Kernel) -> None:
    out, err = mig_kernel.run("%load_ext jupyter_gpu\n%gpu_select")
    assert not err, err
    lines = out.splitlines()
    gpu0 = next(i for i, line in enumerate(lines) if "GPU 0 " in line)
    assert [line.split()[:3] for line in lines[gpu0 + 1 : gpu0 + 4]] == [
        ["0:0", "MIG", "3g.40gb"],
        ["0:1", "MIG", "2g.20gb"],
        ["0:2", "MIG", "1g.10gb"],
    ]
    assert "used by bob" in lines[gpu0 + 1] and A100_MIG_UUIDS[1] in lines[gpu0 + 2]
    mig_kernel.run("%gpu_select 0:1")
    out, _ = mig_kernel.run("%gpu_status")
    assert f"Plan: MIG slice {A100_MIG_UUIDS[1]} of GPU 0" in flat(out)
    assert any(line.startswith(" *   0:1 MIG 2g.20gb") for line in out.splitlines())
