# ruff: noqa: RUF001  (Chinese sentences use full-width punctuation: docs/i18n.md)
"""What each framework sees: CUDA's devices as NVML GPUs, from facts only (the pure core)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from jupyter_gpu.core.visibility import CudaEnv, cuda_devices


@dataclass(frozen=True)
class G:
    index: int
    name: str
    uuid: str


A100, A6000 = "NVIDIA A100-SXM4-80GB", "NVIDIA RTX A6000"
DEMO = [G(0, A100, "GPU-aaaa0"), G(1, A100, "GPU-bbbb1"), G(2, A6000, "GPU-cccc2"), G(3, A6000, "GPU-dddd3")]
SAME = [G(i, A100, f"GPU-{i}{i}{i}") for i in range(4)]


def test_pci_order_maps_indices_as_nvidia_smi() -> None:
    assert cuda_devices(CudaEnv("1,2", "PCI_BUS_ID"), DEMO).indices == (1, 2)
    assert cuda_devices(CudaEnv("3,1", "PCI_BUS_ID"), DEMO).indices == (3, 1)
    assert cuda_devices(CudaEnv(None, "PCI_BUS_ID"), DEMO).indices == (0, 1, 2, 3)


def test_fastest_first_between_models_is_unknown_and_says_why() -> None:
    unset = cuda_devices(CudaEnv(None, None), DEMO)
    assert unset.indices is None and "fastest first" in unset.reason and "2 models" in unset.reason
    assert cuda_devices(CudaEnv("0", None), DEMO).indices is None


def test_one_model_fastest_first_is_pci_order() -> None:
    assert cuda_devices(CudaEnv("1,2", None), SAME).indices == (1, 2)
    assert cuda_devices(CudaEnv(None, None), SAME).indices == (0, 1, 2, 3)


def test_uuids_name_gpus_whatever_the_order() -> None:
    assert cuda_devices(CudaEnv("GPU-cccc,GPU-aaaa", None), DEMO).indices == (2, 0)


def test_cuda_stops_at_the_first_unusable_entry() -> None:
    assert cuda_devices(CudaEnv("1,9,2", "PCI_BUS_ID"), DEMO).indices == (1,)
    assert cuda_devices(CudaEnv("-1", "PCI_BUS_ID"), DEMO).indices == ()
    assert cuda_devices(CudaEnv("", None), DEMO).indices == ()
    assert cuda_devices(CudaEnv("²", "PCI_BUS_ID"), DEMO).indices == ()


def test_a_huge_index_ends_the_list_and_leading_zeros_count_as_cuda_reads_them() -> None:
    # int() refuses more than 4300 digits: a value set by code or a spawner must not crash the magics
    assert cuda_devices(CudaEnv("1," + "9" * 5000, "PCI_BUS_ID"), DEMO).indices == (1,)
    assert cuda_devices(CudaEnv("0" * 5000 + "2,3", "PCI_BUS_ID"), DEMO).indices == (2, 3)
    assert cuda_devices(CudaEnv("4294967297", "PCI_BUS_ID"), DEMO).indices == ()  # not 1 modulo 2**32


def test_the_frameworks_device_names_resolve_fastest_first_and_are_checked() -> None:
    names = [A6000, A6000, A100, A100]  # the A6000s reported first: one model after another, PCI order within
    assert cuda_devices(CudaEnv(None, None), DEMO, names).indices == (2, 3, 0, 1)
    assert cuda_devices(CudaEnv(None, None), DEMO, [A6000, A100, A6000, A100]).indices is None
    mismatch = cuda_devices(CudaEnv("1", "PCI_BUS_ID"), DEMO, [A6000])
    assert mismatch.indices is None and "lists 1 GPU" in mismatch.reason


@given(st.text(alphabet="0123456789,-GPU abcd²", max_size=12), st.sampled_from([None, "PCI_BUS_ID", "FASTEST_FIRST"]))
def test_any_value_gives_known_distinct_gpus_or_a_reason(value: str, order: str | None) -> None:
    result = cuda_devices(CudaEnv(value, order), DEMO)
    if result.indices is None:
        assert result.reason
    else:
        assert len(set(result.indices)) == len(result.indices)
        assert set(result.indices) <= {0, 1, 2, 3}


def test_names_match_across_small_spelling_differences() -> None:
    assert cuda_devices(CudaEnv("1", "PCI_BUS_ID"), DEMO, ["A100-SXM4-80GB"]).indices == (1,)
    assert cuda_devices(CudaEnv("2", "PCI_BUS_ID"), DEMO, ["nvidia rtx a6000"]).indices == (2,)


def test_the_reason_is_english_data_and_shown_in_the_users_language() -> None:
    """``reason`` goes into ``jupyter-gpu doctor --json``: English whatever the language; a face shows
    ``shown_reason``, and ``describe`` is only ever shown (docs/i18n.md)."""
    from jupyter_gpu.core import i18n

    with i18n.language_forced("zh_CN"):
        counted = cuda_devices(CudaEnv("0", None), DEMO)
        none_listed = cuda_devices(CudaEnv("1", "PCI_BUS_ID"), DEMO, [])
        assert counted.reason.startswith("CUDA_VISIBLE_DEVICES='0' counts GPUs in that order: CUDA_DEVICE_ORDER")
        assert counted.shown_reason == (
            "CUDA_VISIBLE_DEVICES='0' 按这个顺序数 GPU：CUDA 启动时 CUDA_DEVICE_ORDER 不是 PCI_BUS_ID，"
            f"所以 CUDA 把 2 种型号（{A100}, {A6000}）的 4 块 GPU 按最快的在前编号，而 NVML 无法得知这个顺序"
        )
        assert none_listed.shown_reason == "框架一块 GPU 也没有列出，而 CUDA 变量指定了 1 块"
        assert CudaEnv(None, None).describe() == "CUDA_VISIBLE_DEVICES 未设置，CUDA_DEVICE_ORDER 未设置（最快的在前）"
        assert counted.describe() == "未知的 GPU"
    assert counted.shown_reason == counted.reason  # English: the data as it is
    assert CudaEnv("1", "PCI_BUS_ID").describe() == "CUDA_VISIBLE_DEVICES '1', CUDA_DEVICE_ORDER PCI_BUS_ID"
