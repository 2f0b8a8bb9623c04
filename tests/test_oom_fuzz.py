"""Issue 23 item 10: the out-of-memory recogniser takes linear time on any message.

``RuntimeError("CUDA out of memory. " + "7" * N)`` took 0.9 / 4.9 / 21 / 73 s in ``recognize()`` for
N = 2k / 5k / 10k / 20k (a number pattern tried at every digit, each try running to the end of the
run), and froze the after-cell hook. Hypothesis builds messages from the recogniser's own
vocabulary (its triggers, its figures' words, long runs of digits, dots and blanks) at the sizes
where the old code took seconds; a quadratic pattern blows the per-example deadline many times
over. The figure (the hook on a 1 MB message) is in ``benchmarks/bench_post_cell.py``.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyter_gpu.kernel import oom


def _error_class(module: str, name: str) -> type[Exception]:
    return type(name, (RuntimeError,), {"__module__": module})


CLASSES = {
    "PyTorch": _error_class("torch", "OutOfMemoryError"),
    "TensorFlow": _error_class("tensorflow.python.framework.errors_impl", "ResourceExhaustedError"),
    "JAX": _error_class("jaxlib.xla_extension", "XlaRuntimeError"),
    "CUDA": _error_class("somelib", "Error"),
}
TRIGGERS = {
    "PyTorch": "CUDA out of memory. ",
    "TensorFlow": "OOM when allocating ",
    "JAX": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ",
    "CUDA": "CUDA_ERROR_OUT_OF_MEMORY ",
}
VOCABULARY = [
    "7",
    "0",
    ".",
    " ",
    "\n",
    ",",
    "[",
    "]",
    "(",
    ")",
    "B",
    "MiB",
    "GiB",
    "bytes",
    "Tried to allocate ",
    "GPU ",
    "memory ",
    " is allocated by PyTorch",
    " already allocated",
    " reserved in total by PyTorch",
    " is reserved by PyTorch but unallocated",
    "device:GPU:",
    "shape",
    " and type float",
    "allocate ",
    "request for ",
    "device ordinal ",
    "cuda:",
    "on device ",  # JAX 0.11 on a real GPU: "... with allocator GPU_0_bfc on device 0."
    "GPU_",
    "_bfc",
    " bytes)",
    "CUDA out of memory",
    "OOM when allocating",
    "RESOURCE_EXHAUSTED",
]
PIECES = st.lists(st.tuples(st.sampled_from(VOCABULARY), st.integers(1, 6_000)), min_size=1, max_size=6)


@settings(max_examples=60, deadline=timedelta(seconds=1), suppress_health_check=[HealthCheck.too_slow])
@given(framework=st.sampled_from(sorted(CLASSES)), pieces=PIECES)
@example(framework="PyTorch", pieces=[("7", 20_000)])
@example(framework="PyTorch", pieces=[("Tried to allocate ", 1), ("7", 10_000), (" ", 5_000), ("7", 5_000)])
@example(framework="JAX", pieces=[("allocate ", 1), ("7.", 10_000)])
@example(framework="JAX", pieces=[("on device ", 1), ("7", 10_000), ("_bfc", 1), ("GPU_", 1), ("7", 10_000)])
@example(framework="JAX", pieces=[("GPU_", 3_000), ("on device ", 3_000)])
@example(framework="TensorFlow", pieces=[("shape", 1), ("[", 1), ("7,", 10_000)])
@example(framework="JAX", pieces=[("device ordinal ", 1), ("7", 4301)])  # found by hypothesis: int()'s digit limit
def test_the_recogniser_is_linear_on_messages_of_its_own_vocabulary(
    framework: str, pieces: list[tuple[str, int]]
) -> None:
    message = TRIGGERS[framework] + "".join(token * count for token, count in pieces)
    found = oom.recognize(CLASSES[framework](message))
    assert found is not None
    assert found.framework == framework or framework == "CUDA"  # another trigger in the text may name a framework
    assert len(found.summary) <= 160


def test_a_huge_message_is_read_only_to_its_bound() -> None:
    tail = " 9.00 GiB reserved in total by PyTorch"
    message = "CUDA out of memory. Tried to allocate 2.00 GiB. " + "7" * 2**20 + tail
    found = oom.recognize(RuntimeError(message))
    assert found is not None and found.requested_bytes == 2 * 2**30
    assert found.reserved_bytes is None  # beyond the bound: not read
