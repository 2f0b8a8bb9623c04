# ruff: noqa: RUF001  (Chinese sentences use full-width punctuation: docs/i18n.md)
"""core.wire, the one strict reader of untrusted JSON: its rules, and every reader built on it.

The unit tests pin each rule of :func:`jupyter_gpu.core.wire.loads` and :class:`Fields`. The
property tests feed hostile input (deep nesting, huge integers, NaN/Infinity, wrong types, long
strings, non-UTF-8 and random bytes, and valid documents with one field made hostile) to every
reader that uses it and check that only that reader's one error type (or a clean drop) comes out.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_json import FAST, HUGE, SCALARS, hostile_bytes, hostile_documents
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gpu.core import wire
from jupyter_gpu.core.history import GpuHistory
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, MigSlice, Snapshot
from jupyter_gpu.core.wire import Fields, WireError, loads
from jupyter_gpu.hub import core as hub_core
from jupyter_gpu.hub import prometheus as prom
from jupyter_gpu.sources import kernel_reports, peers, remote, servers
from jupyter_gpu.sources.claims import ClaimBoard, parse_claim, user_folder

# -- loads


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"[" * 2040 + b"]" * 2040, "nested too deeply"),
        ("[" * 33 + "]" * 33, "nested too deeply"),
        ('{"a": [[[' + "[" * 40, "nested too deeply"),  # unbalanced: refused before the parser recurses
        (b'{"t": NaN}', "NaN is not a number"),
        (b"[Infinity]", "Infinity is not a number"),
        (b"[-Infinity]", "-Infinity is not a number"),
        (b"[1e400]", "too large"),
        (b'{"a": 1, "a": 2}', "'a' appears twice"),
        (b"\xff\xfe[\x00]\x00", "not UTF-8"),
        ('["\ud800"]', "not UTF-8"),
        (b"\xef\xbb\xbf[]", "not JSON"),  # a byte-order mark is not JSON text
        (b"[" + b"9" * 5000 + b"]", "not usable JSON"),
        (b"{not json", "not JSON"),
        (b" " * 6001, "larger than 6000 bytes"),
        ("é" * 3001, "larger than 6000 bytes"),  # counted in UTF-8 bytes, not characters
    ],
)
def test_loads_refuses_with_one_line(data: bytes | str, words: str) -> None:
    with pytest.raises(WireError) as caught:
        loads(data, max_bytes=6000)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_loads_reads_good_json_exactly() -> None:
    assert loads(b"[" * 32 + b"]" * 32, max_bytes=100) == eval("[" * 32 + "]" * 32)
    assert loads('["[[[[[[[[[[", "\\"[[[[[[[[[["]', max_bytes=100, max_depth=1) == ["[" * 10, '"' + "[" * 10]
    assert loads(b'{"t": ' + b"9" * 400 + b"}", max_bytes=1000) == {"t": HUGE}  # kept exact
    assert loads('{"a": 1.5, "b": [true, null, "é"]}', max_bytes=100) == {"a": 1.5, "b": [True, None, "é"]}
    assert loads(b"x" * 0 + b"1", max_bytes=1) == 1


@pytest.mark.parametrize(("wraps", "depth"), [(4, 5), (30, 31), (31, 32), (32, 33), (199, 200)])
def test_depth_is_counted_exactly_with_siblings_and_brackets_in_strings(wraps: int, depth: int) -> None:
    value: Any = "]]}"
    for level in range(wraps):
        value = [value, [1], {}, "[{"] if level % 2 else {"a": value, "b": [2], "c": "{{["}
    assert _depth(value) == depth
    text = json.dumps(value)
    if depth <= 32:
        assert loads(text, max_bytes=10**6) == value
    else:
        with pytest.raises(WireError, match="nested too deeply"):
            loads(text, max_bytes=10**6)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


# -- fields


def test_fields_check_types_and_ranges_naming_the_path() -> None:
    f = Fields({"n": 5, "b": True, "f": 2.5, "h": HUGE, "s": "abc", "l": [1, {"x": "y"}], "m": {"k": 1}}, "top")
    assert f.integer("n", 0, 10) == 5 and f.number("n") == 5.0 and f.number("f", 0, 3) == 2.5
    assert f.text("s", 3) == "abc" and f.boolean("b") is True and f.items("l", 2) == [1, {"x": "y"}]
    assert f.mapping("m", 1) == {"k": 1} and f.optional_integer("missing", 0, 1) is None
    assert f.integer("missing", 0, 1, default=7) == 7 and f.optional_text("missing", 5) is None
    assert [item.path("x") for item in Fields({"l": [{}, {}]}).objects("l", 2)] == ["l[0].x", "l[1].x"]
    refused = {
        "integer of a bool": lambda: f.integer("b", 0, 10),
        "number of a bool": lambda: f.number("b"),
        "out of range": lambda: f.integer("n", 6, 10),
        "a float for an integer": lambda: f.integer("f", 0, 10),
        "a huge integer": lambda: f.integer("h", 0, 2**63),
        "a huge number, bounded": lambda: f.number("h", 0, 1e300),
        "a huge number, unbounded": lambda: f.number("h"),
        "a long string": lambda: f.text("s", 2),
        "an empty string": lambda: Fields({"s": ""}).text("s", 2),
        "a string for a bool": lambda: f.boolean("s"),
        "a long list": lambda: f.items("l", 1),
        "a long key": lambda: Fields({"m": {"k" * 9: 1}}).mapping("m", 1, max_key_chars=8),
        "a missing field": lambda: f.text("missing", 5),
        "a list entry that is no object": lambda: list(f.objects("l", 2)),
        "not an object": lambda: Fields([1], "top"),
        "NaN given directly": lambda: Fields({"x": float("nan")}).number("x"),
    }
    for what, read in refused.items():
        with pytest.raises(WireError) as caught:
            read()
        message = str(caught.value)
        assert message and "\n" not in message, (what, message)
    with pytest.raises(WireError, match=r"^top\.h must be a finite number within a double's range$"):
        f.number("h")
    with pytest.raises(WireError, match=r"^x must be a finite number, not nan$"):
        Fields({"x": float("nan")}).number("x")
    with pytest.raises(WireError, match=r"^top\.h must be a whole number in 0\.\.9, not an integer of 1329 bits$"):
        f.integer("h", 0, 9)
    with pytest.raises(WireError, match=r"^top\.b must be a whole number in 0\.\.9, not true/false$"):
        f.integer("b", 0, 9)
    with pytest.raises(WireError, match=r"^l\[1\] is not a JSON object \(a string\)$"):
        list(Fields({"l": [{}, "x"]}).objects("l", 2))


def test_wire_error_lives_with_the_other_errors_and_scenario_error_is_one() -> None:
    from jupyter_gpu.core import errors
    from jupyter_gpu.simulate import ScenarioError

    assert wire.WireError is errors.WireError and issubclass(errors.WireError, ValueError)
    assert ScenarioError is errors.ScenarioError and issubclass(ScenarioError, WireError)


def test_finite_and_maybe_never_raise() -> None:
    assert wire.finite(HUGE) and wire.finite(1.0) and not wire.finite(True) and not wire.finite(float("inf"))
    assert not wire.finite("1") and not wire.finite(None)
    assert wire.maybe(wire.number, HUGE, "x") is None and wire.maybe(wire.number, 3, "x") == 3.0


# -- the claim bugs (issue 18): a file any local user can leave in the shared claims directory


@pytest.fixture
def other_process() -> Any:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def _claim_text(pid: int, when: str) -> str:
    return (
        f'{{"version": 1, "uid": {os.getuid()}, "pid": {pid}, "gpu_uuid": "GPU-aaaa-0", '
        f'"time": {when}, "host": {json.dumps(socket.gethostname())}}}'
    )


def _claim_file(directory: str | Path, pid: int, name: str) -> Path:
    """Where a claim of this user's process ``pid`` is read from in the claims ``directory``."""
    folder = user_folder(directory, os.getuid())
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder / f"{pid}-{name}.json"


def _gpus() -> list[GpuInfo]:
    return [GpuInfo(index=0, uuid="GPU-aaaa-0", name="A100", memory_total=1 << 30, memory_free=1 << 30)]


def test_a_hostile_claim_file_costs_only_itself(
    tmp_path: Path, other_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _claim_file(tmp_path, other_process.pid, "huge").write_text(_claim_text(other_process.pid, "9" * 400))
    _claim_file(tmp_path, other_process.pid, "deep").write_text("[" * 2040 + "]" * 2040)
    _claim_file(tmp_path, other_process.pid, "good").write_text(_claim_text(other_process.pid, repr(time.time())))
    board = ClaimBoard(tmp_path)
    assert board.problem is None
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.sources.claims"):
        assert board.load(_gpus()) == {0: 1}  # the good claim counts; the others are refused
    refused = sorted(r.getMessage() for r in caplog.records)
    assert len(refused) == 2 and "nested too deeply" in refused[0] and "time must be a finite" in refused[1]


def test_a_failing_claim_board_means_auto_without_claims_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    board = ClaimBoard(tmp_path)
    _claim_file(tmp_path, os.getpid(), "x").write_text("{}")

    def broken(*args: Any) -> None:
        raise RuntimeError("a case no rule foresaw")

    monkeypatch.setattr(board, "_read", broken)
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.sources.claims"):
        assert board.load(_gpus()) == {} and board.load(_gpus()) == {}
    assert [r.getMessage() for r in caplog.records] == ["jupyter_gpu: GPU claims not used: a case no rule foresaw"]


def test_gpu_select_auto_survives_hostile_claim_files(shell, clean, other_process: Any) -> None:
    folder = Path(os.environ["JUPYTER_GPU_CLAIMS_DIR"])
    _claim_file(folder, other_process.pid, "huge").write_text(_claim_text(other_process.pid, "9" * 400))
    _claim_file(folder, other_process.pid, "deep").write_text("[" * 2040 + "]" * 2040)
    shell.run_line_magic("gpu_select", "auto")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


# -- hostile input to every reader


def _templates() -> dict[str, Any]:
    process = GpuProcess(pid=7, memory=1 << 20, user="alice", slice="MIG-1")
    part = MigSlice(0, "MIG-1", "1g.10gb", "1g.10gb", 1, 0, 10, 5, 5, processes=(process,))
    gpu = GpuInfo(0, "GPU-aaaa-0", "A100", 1 << 30, 1 << 20, 1 << 29, utilization=5, power=50.0, processes=(process,))
    gpu_mig = GpuInfo(1, "GPU-bbbb-1", "A100", 1 << 30, 0, 1 << 30, mig_mode=True, slices=(part,))
    labels = {"__name__": "jupyter_gpu_kernel_memory_used_bytes", "gpu": "0", "UUID": "GPU-aaaa-0"}
    return {
        "claim": json.loads(_claim_text(os.getpid(), "1.5")),
        "report": {
            "version": 1, "kernel_id": "k1", "pid": 42, "start_time": 12.5, "session": "a.ipynb",
            "nvml_pids": [7], "gpu_memory": {"GPU-1": 5}, "timestamp": 1.0,
        },
        "snapshot": Snapshot(True, 1.0, (gpu, gpu_mig), None, "550", True, ("w",)).to_dict(),
        "server": {
            "kernels": [
                {"kernel_id": "k1", "pid": 7, "notebook": "n", "execution_state": "idle", "idle_s": 5,
                 "idle": False, "cull_in_s": 3, "reported_gpu_memory": {"0": 5}},
            ],
            "gpus": [{"processes": [{"own": True, "pid": 7, "kernel_id": "k1", "idle_s": 1, "notebook": "n"}]}],
        },
        "vector": {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {**labels, "user": "u", "kernel_id": "k1"}, "value": [1.5, "100"]},
            {"metric": {**labels, "__name__": "jupyter_gpu_gpu_info", "host": "h"}, "value": [1.5, "1"]},
        ]}},
        "matrix": {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"uuid": "GPU-aaaa-0"}, "values": [[1.5, "10"], [2.5, "20"]]},
        ]}},
    }  # fmt: skip


TEMPLATES = _templates()


def documents(*names: str) -> st.SearchStrategy[Any]:
    """A hostile value, or a valid document of a reader (``names``: which) made hostile."""
    return hostile_documents({name: TEMPLATES[name] for name in names or TEMPLATES})


def raw_documents(*names: str) -> st.SearchStrategy[bytes]:
    """Bytes a reader may find in a file or an answer."""
    return hostile_bytes(documents(*names))


def _parsed(raw: bytes) -> Any:
    try:
        return loads(raw, max_bytes=64 * 1024)
    except WireError:
        return None


@FAST
@given(raw_documents("claim"))
def test_the_claim_board_only_drops_hostile_files(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _claim_file(folder, os.getpid(), "x").write_bytes(raw)
        board = ClaimBoard(folder)
        board.pid = -1  # a claim naming this process is not excluded as "its own"
        logging.getLogger("jupyter_gpu.sources.claims").disabled = True
        try:
            assert board.load(_gpus(), now=1.5) in ({}, {0: 1})
        finally:
            logging.getLogger("jupyter_gpu.sources.claims").disabled = False


@FAST
@given(documents("claim"))
def test_parse_claim_answers_a_claim_or_a_reason(data: Any) -> None:
    result = parse_claim(data, os.getuid(), Path("x"))
    assert isinstance(result, str) or result.gpu_uuid == "GPU-aaaa-0"


@FAST
@given(raw_documents("report"))
def test_kernel_reports_raise_only_report_error_and_the_reader_drops(raw: bytes) -> None:
    data = _parsed(raw)
    try:
        kernel_reports.parse_report(data)
    except kernel_reports.ReportError:
        pass
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{kernel_reports.REPORT_PREFIX}k1.json"
        path.write_bytes(raw)
        logging.getLogger("jupyter_gpu.sources.kernel_reports").disabled = True
        try:
            kernel_reports.ReportReader().read(folder)
        finally:
            logging.getLogger("jupyter_gpu.sources.kernel_reports").disabled = False


@FAST
@given(documents("report"))
def test_parse_report_raises_only_report_error(data: Any) -> None:
    try:
        report = kernel_reports.parse_report(data)
    except kernel_reports.ReportError:
        return
    assert isinstance(report, kernel_reports.KernelReport) and isinstance(report.timestamp, float)


@FAST
@given(documents("server"), raw_documents("server"))
def test_peers_never_raise(data: Any, raw: bytes) -> None:
    assert isinstance(peers.parse_server_snapshot(data), dict)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jpserver-1.json"
        path.write_bytes(raw)
        read = servers.own_runtime_file(path)
        assert read is None or isinstance(read, Fields)


@FAST
@given(documents("snapshot"))
def test_the_remote_snapshot_raises_only_bad_answer_and_the_history_takes_what_passes(data: Any) -> None:
    try:
        snapshot = remote.snapshot_from_dict(data)
    except remote.BadAnswer:
        return
    history = GpuHistory(window_s=10)
    history.record(snapshot)
    history.to_dict()


@FAST
@given(raw_documents("snapshot"))
def test_the_remote_answer_bytes_raise_only_bad_answer(raw: bytes) -> None:
    try:
        data = loads(raw, max_bytes=remote.MAX_BYTES)
    except WireError:
        return
    try:
        remote.snapshot_from_dict(data)
    except remote.BadAnswer:
        pass


@FAST
@given(documents("server"))
def test_the_hub_reads_a_user_servers_answer_without_raising(data: Any) -> None:
    notes: list[str] = []
    hub_core.snapshot_problem(data)
    hub_core.user_kernels(data, None, "alice", notes)
    server = hub_core.UserServer("alice", "/user/alice/", data if isinstance(data, dict) else None)
    hub_core.console(None, {}, [server], "alice", "admin")


@FAST
@given(documents("vector", "matrix"))
def test_prometheus_answers_raise_only_prometheus_error(data: Any) -> None:
    logging.getLogger("jupyter_gpu.hub").disabled = True
    try:
        try:
            prom.devices_and_kernels(data)
        except prom.PrometheusError:
            pass
        prom.history({"utilization": data, "memory": data})
        prom.console(data, "alice", "read")
    finally:
        logging.getLogger("jupyter_gpu.hub").disabled = False


@FAST
@given(SCALARS)
def test_the_history_refuses_a_bad_window_with_value_error_only(value: Any) -> None:
    try:
        GpuHistory(window_s=value)
    except ValueError as error:
        assert "window_s must be a positive number" in str(error)


def test_a_refusal_is_english_data_and_shown_in_the_users_language() -> None:
    """What the checks say travels as data (a server's answer refused by a kernel becomes a warning
    of its snapshot): English there, Chinese where :func:`jupyter_gpu.core.messages.shown` shows it."""
    from jupyter_gpu.core import i18n, messages

    with i18n.language_forced("zh_CN"):
        with pytest.raises(WireError) as not_json:
            loads(b"{", max_bytes=100)
        with pytest.raises(WireError) as not_whole:
            wire.integer("0", "gpus[0].index", 0, 63)
        assert str(not_json.value).startswith("not JSON (Expecting property name")
        assert str(not_whole.value) == "gpus[0].index must be a whole number in 0..63, not a string"
        failed = messages.SERVER_FAILED.format(url="http://127.0.0.1:8888/", reason=not_whole.value)
        assert messages.shown(failed) == (
            "http://127.0.0.1:8888/ 上的 Jupyter 服务器没有给出可用的响应"
            "（gpus[0].index 必须是 0..63 之间的整数，而不是字符串）"
        )
        assert messages.shown(str(not_json.value)).startswith("不是 JSON（Expecting property name")
