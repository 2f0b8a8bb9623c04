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
