"""The pure GPU plan: sizes, selections, the auto policy, the admin fence and ceiling."""

from __future__ import annotations

import time

import pytest

from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot
from jupyter_gpu.plan import (
    MIB,
    Fence,
    PlanError,
    PlanRequest,
    build_plan,
    parse_selection,
    parse_size,
    select_idlest,
    split_sizes,
)

GIB = 1024**3
NO_FENCE = Fence({})


def gpu(
    index: int, total_gib: int = 80, free_gib: float = 79, utilization: int = 0, users: tuple[str, ...] = ()
) -> GpuInfo:
    processes = tuple(GpuProcess(pid=900000 + index * 10 + n, memory=GIB, user=user) for n, user in enumerate(users))
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index}{index}aa{index}-0000",
        name="NVIDIA A100",
        memory_total=total_gib * GIB,
        memory_used=int((total_gib - free_gib) * GIB),
        memory_free=int(free_gib * GIB),
        utilization=utilization,
        processes=processes,
    )


def snap(*gpus: GpuInfo) -> Snapshot:
    return Snapshot(nvml_available=True, timestamp=time.time(), gpus=gpus)


NO_NVML = Snapshot(nvml_available=False, timestamp=0.0, error="the NVIDIA driver is not loaded")
FOUR = snap(
    gpu(0, free_gib=5, utilization=97, users=("bob",)),
    gpu(1, free_gib=60, utilization=12, users=("carol",)),
    gpu(2, total_gib=48, free_gib=47),
    gpu(3, total_gib=48, free_gib=46, utilization=3),
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2048", 2048 * MIB),
        ("2GiB", 2 * GIB),
        ("1.5G", int(1.5 * GIB)),
        ("512MB", 512 * MIB),
        ("512m", 512 * MIB),
        ("1T", 1024 * GIB),
        ("3 GiB", 3 * GIB),
    ],
)
def test_absolute_sizes(text: str, expected: int) -> None:
    assert parse_size(text).resolve(None) == expected


@pytest.mark.parametrize(
    ("line", "sizes"),
    [
        ("4 GiB", ("4GiB",)),
        ("4GiB", ("4GiB",)),
        ("2 GiB 2 GiB", ("2GiB", "2GiB")),
        ("30 %", ("30%",)),
        ("1.5 G  512 mib", ("1.5G", "512mib")),
        ("2048 2048", ("2048", "2048")),
        ("GiB 4", ("GiB", "4")),  # a unit with no number before it stays a word: parse_size refuses it
        ("4 GiB GiB", ("4GiB", "GiB")),
        ("off", ("off",)),
    ],
)
def test_sizes_typed_with_a_space_before_the_unit_are_one_size(line: str, sizes: tuple[str, ...]) -> None:
    assert split_sizes(line) == sizes


def test_a_percentage_is_of_that_gpus_total() -> None:
    assert parse_size("30%").resolve(100 * GIB) == 30 * GIB
    with pytest.raises(PlanError, match="NVML cannot tell"):
        parse_size("30%").resolve(None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0", "zero"),
        ("0GiB", "zero"),
        ("-1", "negative"),
        ("-2GiB", "negative"),
        ("2x", "malformed"),
        ("GiB", "malformed"),
        ("", "malformed"),
        ("0%", "more than 0%"),
        ("150%", "at most 100%"),
        ("abc%", "malformed"),
        ("100B", "under 1 MiB"),
    ],
)
def test_bad_sizes_say_what_is_wrong_and_what_is_valid(text: str, problem: str) -> None:
    with pytest.raises(PlanError, match=problem) as caught:
        parse_size(text)
    assert "valid sizes" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("auto:0", "at least 1"),
        ("auto:x", "whole number"),
        ("1,1", "twice"),
        ("1,,2", "empty entry"),
        ("", "no GPUs given"),
        ("all,1", "mixes"),
        ("-1", "not a GPU index"),
    ],
)
def test_bad_selections(text: str, problem: str) -> None:
    with pytest.raises(PlanError, match=problem):
        parse_selection(text)


def test_auto_prefers_gpus_without_other_users_then_free_memory_then_utilization() -> None:
    assert select_idlest(FOUR.gpus, 2, own_pid=1, own_user="me") == (2, 3)
    assert select_idlest(FOUR.gpus, 3, own_pid=1, own_user="me") == (2, 3, 1)
    tie = [gpu(0, free_gib=40, utilization=50), gpu(1, free_gib=40, utilization=10)]
    assert select_idlest(tie, 1, own_pid=1, own_user="me") == (1,)


def test_auto_does_not_count_my_own_processes_against_a_gpu() -> None:
    gpus = [gpu(0, free_gib=70, users=("me",)), gpu(1, free_gib=60)]
    assert select_idlest(gpus, 1, own_pid=1, own_user="me") == (0,)


def test_auto_min_free_and_too_many() -> None:
    assert select_idlest(FOUR.gpus, 1, min_free_bytes=50 * GIB, own_pid=1, own_user="me") == (1,)
    with pytest.raises(PlanError, match="auto:2 needs 2 GPUs with at least 50 GiB free"):
        select_idlest(FOUR.gpus, 2, min_free_bytes=50 * GIB, own_pid=1, own_user="me")
    with pytest.raises(PlanError, match="auto:5 needs 5 GPUs"):
        build_plan(PlanRequest(selection="auto:5"), FOUR, NO_FENCE)


def test_selection_by_index_keeps_the_order_given() -> None:
    plan = build_plan(PlanRequest(selection="3,1"), FOUR, NO_FENCE)
    assert plan.selected_indices == (3, 1)
    assert plan.cuda_visible_devices == "3,1"


def test_selection_by_uuid_prefix() -> None:
    assert build_plan(PlanRequest(selection="GPU-22"), FOUR, NO_FENCE).selected_indices == (2,)
    with pytest.raises(PlanError, match="matches the UUIDs of GPUs 0, 1, 2, 3"):
        build_plan(PlanRequest(selection="GPU-"), FOUR, NO_FENCE)
    with pytest.raises(PlanError, match="no GPU has a UUID starting with 'GPU-9'"):
        build_plan(PlanRequest(selection="GPU-9"), FOUR, NO_FENCE)


def test_all_none_and_no_selection() -> None:
    assert build_plan(PlanRequest(selection="all"), FOUR, NO_FENCE).selected_indices == (0, 1, 2, 3)
    none = build_plan(PlanRequest(selection="none", limits=("2GiB",)), FOUR, NO_FENCE)
    assert none.selected_indices == () and none.cuda_visible_devices == "-1" and none.memory_limit_bytes(2) is None
    assert build_plan(PlanRequest(), FOUR, NO_FENCE).selected_indices is None


def test_unknown_index_names_the_valid_choices() -> None:
    with pytest.raises(PlanError, match=r"there is no GPU 7; valid GPUs: 0 .*, 1 .*, 2 .*, 3 .*or auto, all, none"):
        build_plan(PlanRequest(selection="7"), FOUR, NO_FENCE)


def test_the_fence_refuses_gpus_outside_it_and_all_means_the_fence() -> None:
    fence = Fence({"CUDA_VISIBLE_DEVICES": "2,3"})
    with pytest.raises(
        PlanError,
        match=r"GPU 1 is outside the GPUs assigned to this kernel "
        r"\(CUDA_VISIBLE_DEVICES='2,3'\); valid GPUs assigned to this kernel: 2 ",
    ):
        build_plan(PlanRequest(selection="1"), FOUR, fence)
    assert build_plan(PlanRequest(selection="all"), FOUR, fence).selected_indices == (2, 3)
    assert build_plan(PlanRequest(selection="auto:2"), FOUR, fence).selected_indices == (2, 3)
    with pytest.raises(PlanError, match="auto:3 needs 3 GPUs"):
        build_plan(PlanRequest(selection="auto:3"), FOUR, fence)


def test_fences_by_uuid_and_nvidia_visible_devices() -> None:
    assert Fence({"NVIDIA_VISIBLE_DEVICES": "GPU-11"}).allowed(FOUR.gpus) == (1,)
    assert Fence({"NVIDIA_VISIBLE_DEVICES": "all"}).allowed(FOUR.gpus) == (0, 1, 2, 3)
    assert Fence({"NVIDIA_VISIBLE_DEVICES": "none"}).allowed(FOUR.gpus) == ()
    assert Fence({"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "all"}).allowed(FOUR.gpus) == ()
    assert Fence({"CUDA_VISIBLE_DEVICES": "1,9,2"}).allowed(FOUR.gpus) == (1,)  # CUDA stops at 9


def test_index_style_nvidia_visible_devices_was_applied_by_the_container_runtime() -> None:
    # The runtime exposed host GPUs 2 and 3; NVML in the container numbers them 0 and 1.
    inside = snap(gpu(0), gpu(1))
    fence = Fence({"NVIDIA_VISIBLE_DEVICES": "2,3"})
    assert fence.allowed(inside.gpus) == (0, 1)
    assert build_plan(PlanRequest(selection="all"), inside, fence).selected_indices == (0, 1)
    assert build_plan(PlanRequest(selection="auto"), inside, fence).selected_indices == (0,)
    assert "applied by the container runtime" in fence.describe()


def test_hostile_numbers_are_plan_errors() -> None:
    for text in ("²", "1,²", "1" * 400):
        with pytest.raises(PlanError):
            build_plan(PlanRequest(selection=text), FOUR, NO_FENCE)
    for size in ("9" * 400, "9" * 400 + "%", "1e5", "²"):
        with pytest.raises(PlanError):
            parse_size(size)


def test_auto_does_not_count_a_graphics_only_process_as_a_job() -> None:
    from jupyter_gpu.plan import other_users

    display = GpuInfo(
        index=0,
        uuid="GPU-x",
        name="A6000",
        memory_total=48 * GIB,
        memory_free=47 * GIB,
        processes=(GpuProcess(pid=1, memory=GIB, user="dave", type="graphics"),),
    )
    busy = GpuInfo(
        index=1,
        uuid="GPU-y",
        name="A6000",
        memory_total=48 * GIB,
        memory_free=47 * GIB + 1,
        processes=(GpuProcess(pid=2, memory=GIB, user="erin"),),
    )
    assert other_users(display, own_pid=0, own_user="me") == []
    assert select_idlest([display, busy], 1, own_pid=0, own_user="me") == (0,)


def test_limits_per_gpu_percent_and_logical_split() -> None:
    plan = build_plan(PlanRequest(selection="1,2", limits=("25%",)), FOUR, NO_FENCE)
    assert plan.memory_limit_bytes(1) == 20 * GIB and plan.memory_limit_bytes(2) == 12 * GIB
    assert plan.memory_limit_bytes(0) is None
    split = build_plan(PlanRequest(selection="2", limits=("1GiB", "512")), FOUR, NO_FENCE)
    assert split.logical_limits_bytes(2) == (GIB, 512 * MIB)
    assert split.memory_limit_bytes(2) == GIB + 512 * MIB
    assert split.memory_fraction(2) == pytest.approx(1.5 / 48)


def test_a_limit_without_selection_caps_every_gpu_the_kernel_may_use() -> None:
    plan = build_plan(PlanRequest(limits=("4GiB",)), FOUR, Fence({"CUDA_VISIBLE_DEVICES": "3"}))
    assert plan.selected_indices is None and dict(plan.limits_bytes) == {3: (4 * GIB,)}


def test_a_limit_above_the_gpus_memory_is_refused() -> None:
    with pytest.raises(PlanError, match="more than GPU 2's memory \\(48 GiB\\); give at most 48 GiB"):
        build_plan(PlanRequest(selection="2", limits=("60GiB",)), FOUR, NO_FENCE)
    with pytest.raises(PlanError, match="more than GPU 2's memory"):
        build_plan(PlanRequest(selection="2", limits=("30GiB", "30GiB")), FOUR, NO_FENCE)


def test_the_admin_ceiling_caps_and_is_the_default_limit() -> None:
    with pytest.raises(PlanError, match=r"above the admin ceiling max_limit=25% \(12 GiB\); give at most 12 GiB"):
        build_plan(PlanRequest(selection="2", limits=("16GiB",), max_limit="25%"), FOUR, NO_FENCE)
    plan = build_plan(PlanRequest(selection="2", max_limit="25%"), FOUR, NO_FENCE)
    assert plan.memory_limit_bytes(2) == 12 * GIB and plan.limit_from_ceiling
    lower = build_plan(PlanRequest(selection="2", limits=("2GiB",), max_limit="25%"), FOUR, NO_FENCE)
    assert lower.memory_limit_bytes(2) == 2 * GIB and not lower.limit_from_ceiling


def test_without_nvml() -> None:
    with pytest.raises(PlanError, match=r"needs NVML .*\(the NVIDIA driver is not loaded\)"):
        build_plan(PlanRequest(selection="auto"), NO_NVML, NO_FENCE)
    with pytest.raises(PlanError, match="'all' needs NVML"):
        build_plan(PlanRequest(selection="all"), NO_NVML, NO_FENCE)
    assert build_plan(PlanRequest(selection="1"), NO_NVML, NO_FENCE).selected_indices == (1,)
    with pytest.raises(PlanError, match="no GPU to limit"):
        build_plan(PlanRequest(limits=("2GiB",)), NO_NVML, NO_FENCE)


def test_min_free_only_with_auto_and_absolute() -> None:
    with pytest.raises(PlanError, match="only applies to auto"):
        build_plan(PlanRequest(selection="1", min_free="8GiB"), FOUR, NO_FENCE)
    with pytest.raises(PlanError, match="absolute size"):
        build_plan(PlanRequest(selection="auto", min_free="50%"), FOUR, NO_FENCE)


def test_current_plan_defaults_to_an_empty_plan() -> None:
    from jupyter_gpu.plan import GpuPlan, current_plan

    plan = current_plan()
    assert isinstance(plan, GpuPlan)
    assert GpuPlan().selected_indices is None and GpuPlan().memory_limit_bytes(0) is None


def test_a_start_fence_counted_fastest_first_between_models_is_refused_not_guessed() -> None:
    mixed = snap(
        gpu(0),
        gpu(1),
        GpuInfo(index=2, uuid="GPU-22aa2-0000", name="NVIDIA RTX A6000", memory_total=48 * GIB, memory_free=47 * GIB),
    )
    fence = Fence({"CUDA_VISIBLE_DEVICES": "1"})  # CUDA's 1 fastest first: which GPU is that?
    with pytest.raises(PlanError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID or GPU UUIDs"):
        build_plan(PlanRequest(selection="all"), mixed, fence)
    assert build_plan(PlanRequest(selection="none"), mixed, fence).selected_indices == ()
    ordered = Fence({"CUDA_VISIBLE_DEVICES": "1"}, device_order="PCI_BUS_ID")
    assert build_plan(PlanRequest(selection="all"), mixed, ordered).selected_indices == (1,)
    assert Fence({"CUDA_VISIBLE_DEVICES": "GPU-22aa"}).allowed(mixed.gpus) == (2,)
