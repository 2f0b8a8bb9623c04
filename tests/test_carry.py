"""``jupyter_gpu.plan.carry``: a plan's caps in ``JUPYTER_GPU_PLAN`` and back, and its strict reader."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hostile_json import FAST, HUGE, hostile_documents
from hypothesis import given

from jupyter_gpu.core.i18n import language_forced
from jupyter_gpu.core.snapshot import GpuInfo, Snapshot
from jupyter_gpu.core.visibility import CudaEnv
from jupyter_gpu.plan import Fence, PlanRequest, build_plan
from jupyter_gpu.plan.carry import PLAN_VARIABLE, WireError, plan_environment, plan_from_environment

GIB = 1024**3


def gpu(index: int, total_gib: int, name: str) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index}{index}aa-0000",
        name=name,
        memory_total=total_gib * GIB,
        memory_used=0,
        memory_free=total_gib * GIB,
        utilization=0,
    )


GPUS = (gpu(0, 4, "NVIDIA T400 4GB"), gpu(1, 80, "NVIDIA A100"), gpu(2, 48, "NVIDIA RTX A6000"))
SNAPSHOT = Snapshot(nvml_available=True, timestamp=time.time(), gpus=GPUS)


def plan(**request: Any) -> Any:
    return build_plan(PlanRequest(**request), SNAPSHOT, Fence({}))


def value(**request: Any) -> str:
    return plan_environment(plan(**request), GPUS)[PLAN_VARIABLE]


def test_a_selection_with_a_limit_round_trips_to_the_same_caps_and_growth() -> None:
    sent = plan(selection="2", limits=("4GiB",), growth=True)
    received = plan_from_environment(plan_environment(sent, GPUS)[PLAN_VARIABLE])
    assert received.plan.selected_indices == (2,)
    assert received.plan.limits_bytes == {2: (4 * GIB,)}
    assert received.plan.growth is True
    assert received.plan.memory_fraction(2) == sent.memory_fraction(2)
    assert received.plan.cuda_visible_devices == "2"
    # every GPU the sender knew travels, for CUDA's numbering in the child
    assert [g.index for g in received.known_gpus()] == [0, 1, 2]


def test_logical_devices_and_a_plan_without_selection_round_trip() -> None:
    received = plan_from_environment(value(limits=("1GiB", "1GiB")))
    assert received.plan.selected_indices is None
    assert received.plan.limits_bytes == {0: (GIB, GIB), 1: (GIB, GIB), 2: (GIB, GIB)}


def test_the_value_is_compact_json_with_a_version() -> None:
    text = value(selection="2", limits=("30%",))
    assert " " not in text.replace("RTX A6000", "").replace("T400 4GB", "").replace("NVIDIA ", "")
    assert json.loads(text)["v"] == 1


@pytest.mark.parametrize(
    "request_",
    [{}, {"selection": "2"}, {"selection": "2", "growth": True}, {"selection": "none"}],
)
def test_a_plan_without_a_cap_carries_nothing(request_: dict[str, Any]) -> None:
    assert plan_environment(plan(**request_), GPUS) == {}


def test_without_the_snapshots_gpus_the_childs_numbering_still_places_a_selection() -> None:
    # jupyter-gpu run may pass the plan alone: the child pads GPUs 0 and 1 without a name
    received = plan_from_environment(plan_environment(plan(selection="2", limits=("4GiB",)))[PLAN_VARIABLE])
    known = received.known_gpus()
    assert [(g.index, g.name) for g in known] == [(0, ""), (1, ""), (2, "NVIDIA RTX A6000")]


def test_a_child_whose_cuda_variables_are_not_the_plans_selection_is_refused() -> None:
    received = plan_from_environment(value(selection="2", limits=("4GiB",)))
    assert received.mismatch(CudaEnv("2", "PCI_BUS_ID")) is None
    for env in (CudaEnv("0", "PCI_BUS_ID"), CudaEnv("2", None), CudaEnv(None, None)):
        problem = received.mismatch(env)
        assert problem is not None and "the plan selected GPU 2" in problem, env
    # no selection: nothing to compare (each cap goes where CUDA puts that GPU)
    assert plan_from_environment(value(limits=("10%",))).mismatch(CudaEnv("0", None)) is None


def test_the_refusal_a_child_prints_is_in_the_users_language() -> None:
    received = plan_from_environment(value(selection="2", limits=("4GiB",)))
    with language_forced("zh_CN"):
        problem = received.mismatch(CudaEnv("0", "PCI_BUS_ID"))
    assert problem is not None and problem.startswith("此进程的设置为 CUDA_VISIBLE_DEVICES")
    assert "而 GPU 方案选择的是 GPU 2（需要 CUDA_VISIBLE_DEVICES '2' 和 CUDA_DEVICE_ORDER PCI_BUS_ID）" in problem  # noqa: RUF001


VALID = json.loads(value(selection="2", limits=("4GiB",), growth=True))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"v": 2}, "v must be 1, not 2"),
        ({"v": True}, "v must be a whole number"),
        ({"growth": "yes"}, "growth must be true or false"),
        ({"selected": [2, 2]}, "selected names a GPU twice"),
        ({"selected": [7]}, "selected names a GPU that gpus does not describe"),
        ({"selected": [HUGE]}, "selected[0] must be a whole number in 0..1023"),
        ({"limits": {}}, "limits is empty"),
        ({"limits": {"2": []}}, "limits.2 must list at least one size"),
        ({"limits": {"2": [-1]}}, "limits.2[0] must be a whole number"),
        ({"limits": {"2": [1.5e9]}}, "limits.2[0] must be a whole number"),
        ({"limits": {"x": [GIB]}}, "limits.x: the key must be the index of a GPU in gpus"),
        ({"limits": {"0": [GIB]}}, "limits caps a GPU outside the selection"),
        ({"gpus": [{"index": 2, "uuid": "u", "name": "n", "total": None}] * 2}, "names GPU 2 twice"),
        ({"gpus": [{"index": 2, "uuid": "u" * 129, "name": "n"}]}, "gpus[0].uuid must be a string of 0..128"),
    ],
)
def test_a_malformed_value_is_one_line_naming_the_field(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(WireError) as error:
        plan_from_environment(json.dumps({**VALID, **change}))
    assert problem in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[1]", "is not a JSON object"),
        ("x" * 70_000, "larger than 65536 bytes"),
        ('{"v": 1, "v": 1}', "appears twice"),
        ('{"v": NaN}', "NaN is not a number"),
        ("[" * 50 + "]" * 50, "nested"),
    ],
)
def test_hostile_text_is_refused_before_it_is_used(text: str, problem: str) -> None:
    with pytest.raises(WireError) as error:
        plan_from_environment(text)
    assert problem.lower() in str(error.value).lower()


@FAST
@given(hostile_documents({"plan": VALID}))
def test_any_document_reads_as_a_plan_or_one_wire_error(document: Any) -> None:
    try:
        received = plan_from_environment(json.dumps(document, allow_nan=True))
    except WireError as error:
        assert "\n" not in str(error)
        return
    assert received.plan.limits_bytes and all(
        index in {g.index for g in received.plan.gpus} for index in received.plan.limits_bytes
    )
