"""Hostile JSON for property tests of the readers of untrusted input (core.wire and its users).

Importable as ``hostile_json`` (pytest puts tests/ on sys.path). Strategies only: each test module
keeps its own valid documents (templates) and hands them to :func:`hostile_documents`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

HUGE = int("9" * 400)  # beyond any float: float(HUGE) and math.isfinite(HUGE) raise OverflowError
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = [
    "version", "uid", "pid", "gpu_uuid", "time", "host", "kernel_id", "start_time", "session", "nvml_pids",
    "gpu_memory", "timestamp", "kernels", "gpus", "processes", "own", "notebook", "idle_s", "idle", "index",
    "uuid", "name", "memory_total", "memory_used", "memory_free", "utilization", "power", "error", "mig_mode",
    "slices", "type", "memory", "user", "warnings", "nvml_available", "status", "data", "resultType", "result",
    "metric", "value", "values", "__name__", "gpu", "reported_gpu_memory", "cull_in_s", "url", "token",
    "memory_total_mib", "memory_used_mib", "power_w", "mig_slices", "profile", "fault", "memory_mib",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([HUGE, -HUGE, 2**63, 2**64, -1, 0, 2**31, 2**53 + 1]),
    st.floats(),  # NaN and infinities too: parsers may be handed values that never were JSON
    st.text(max_size=20),
    st.sampled_from(["x" * 5000, "\u202e\n\x00", "GPU-aaaa-0", "k1", "NaN", "+Inf", "1e400", "success", "vector"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=20,
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*path, i))
    return found


HOSTILE = st.one_of(
    st.sampled_from([HUGE, float("nan"), True, None, "x" * 5000]),
    st.sampled_from([-HUGE, 2**64, -1, float("inf"), -float("inf"), "", "\u202e\n", [], {}, [[[[]]]], 1e308, 2**31]),
    VALUES,
)


@st.composite
def hostile_documents(draw: Any, templates: Mapping[str, Any]) -> Any:
    """A hostile value, or one of the valid ``templates`` with one to three parts made hostile or
    removed."""
    if draw(st.integers(0, 3)) == 0:
        return draw(VALUES)
    document = copy.deepcopy(templates[draw(st.sampled_from(sorted(templates)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(document)))
        if not path:
            return draw(VALUES)
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(HOSTILE))  # sampled values are shared: never mutate them
    return document


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()  # NaN and Infinity spelled as Python writes them


@st.composite
def hostile_bytes(draw: Any, documents: st.SearchStrategy[Any]) -> bytes:
    """Bytes a reader may find in a file or an answer: ``documents`` written as JSON (whole, cut,
    in UTF-16, with huge numbers), random bytes, or deep nesting."""
    kind = draw(st.sampled_from(["json", "json", "random", "deep", "utf16", "cut", "huge"]))
    if kind == "random":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        depth = draw(st.integers(1, 3000))
        return draw(st.sampled_from([b"[", b'{"a":'])) * depth + b"1" + draw(st.sampled_from([b"]", b"}"])) * depth
    text = _dumps(draw(documents))
    if kind == "utf16":
        return text.decode().encode("utf-16")
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))] + draw(st.binary(max_size=3))
    if kind == "huge":
        return text.replace(b"1", b"9" * 400, 1).replace(b"5", b"1e400", 1)
    return text
