"""Sentences that travel inside data (:mod:`jupyter_gpu.core.messages`): English in the snapshot, its
JSON and ``--json``; in Chinese where the panel and ``jupyter-gpu status`` show them, a driver's own
words kept as they are."""

# ruff: noqa: RUF001  (the Chinese text's full-width punctuation is what is tested)

from __future__ import annotations

import argparse
import io
import json
import os
import re
from typing import Any

import pytest

from jupyter_gpu import cli, simulate
from jupyter_gpu.core import i18n, messages
from jupyter_gpu.core.i18n import _
from jupyter_gpu.core.snapshot import GpuInfo, Snapshot
from jupyter_gpu.sources import nvml
from jupyter_gpu.sources.host import SOURCE_LABELS, HostSample, source_label

DRIVER_NOT_LOADED = (
    "the NVIDIA driver is not loaded: the kernel module is missing or failed to load (see dmesg) "
    "(NVML: Driver Not Loaded)"
)


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(i18n.ENV, "zh_CN")


class FakeNvmlError(Exception):
    def __init__(self, value: int, words: str) -> None:
        super().__init__(words)
        self.value = value


# -- the table itself


def test_english_is_shown_as_written() -> None:
    assert messages.shown(DRIVER_NOT_LOADED) is DRIVER_NOT_LOADED
    assert messages.shown(None) is None


def test_every_known_template_is_recognized_and_translated(chinese: None) -> None:
    for template in messages.KNOWN:
        fields = {name: f"F{number}" for number, name in enumerate(dict.fromkeys(re.findall(r"\{(\w+)\}", template)))}
        english = template.format(**fields)
        wanted = _(template).format(**fields)
        assert wanted != english or template in ("{variable}={value}: {error}", "{path}: {error}"), template
        assert messages.shown(english) == wanted, template


def test_every_template_of_the_module_is_in_the_table() -> None:
    """A template written into data but left out of KNOWN would stay English on every face."""
    templates = {
        value
        for name, value in vars(messages).items()
        if name.isupper() and isinstance(value, str) and name != "JOINER" and not hasattr(i18n, name)
    }
    assert templates | set(messages.NVML_EXPLANATIONS.values()) == set(messages.KNOWN)


def test_the_drivers_own_words_stay_inside_the_translated_sentence(chinese: None) -> None:
    english = nvml.explain_nvml_error(FakeNvmlError(9, "Driver Not Loaded"))
    assert english == DRIVER_NOT_LOADED  # the data: English, whatever the language
    assert messages.shown(english) == (
        "NVIDIA 驱动未加载：内核模块缺失或加载失败（见 dmesg）（NVML：Driver Not Loaded）"
    )
    unexplained = nvml.explain_nvml_error(FakeNvmlError(999, "Unknown Error"))
    assert unexplained == "NVML error: Unknown Error"
    assert messages.shown(unexplained) == "NVML 错误：Unknown Error"


def test_a_known_sentence_inside_a_known_sentence_is_translated_too(chinese: None) -> None:
    with pytest.raises(simulate.ScenarioError) as refused:
        simulate.ScenarioSource("65")
    english = messages.SIMULATION_FAILED.format(error=refused.value)
    assert english == (
        "simulated GPUs could not be set up: JUPYTER_GPU_SIMULATE='65': the number of simulated GPUs must "
        "be 1 to 64 (unset the variable, or set it to 0, to read the real GPUs)"
    )
    assert messages.shown(english) == (
        "无法设置模拟 GPU：JUPYTER_GPU_SIMULATE='65': 模拟 GPU 的数量必须在 1 到 64 之间"
        "（取消设置该变量或设为 0，即读取真实 GPU）"
    )


def test_joined_reasons_are_translated_one_by_one_and_unknown_text_is_left_alone(chinese: None) -> None:
    reasons = messages.JOINER.join(
        [
            messages.SERVER_FAILED.format(url="http://127.0.0.1:8888/", reason="HTTP 500"),
            "something another program wrote",
        ]
    )
    english = messages.LOCAL_BECAUSE_NOTE.format(reasons=reasons)
    assert messages.shown(english) == (
        "在本机读取 NVML：http://127.0.0.1:8888/ 上的 Jupyter 服务器没有给出可用的响应（HTTP 500）；"
        "something another program wrote"
    )
    assert messages.shown("Driver Not Loaded") == "Driver Not Loaded"


def rejected(tmp_path: Any, text: str) -> str | None:
    """What a simulation says when its good scenario file is rewritten to ``text`` (its rejection)."""
    path = tmp_path / "scenario.json"
    simulate.write_scenario(path, simulate.plausible_gpus(2))
    source = simulate.ScenarioSource(str(path))
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(1, 1))
    source.current()
    return source.rejection()


def test_the_scenario_writers_use_the_table(tmp_path: Any) -> None:
    """The English the simulation writes is unchanged, and made from the table's templates."""
    rejection = rejected(tmp_path, "{ not json")
    assert rejection is not None and rejection.startswith("simulated scenario rejected: not valid JSON (")
    with i18n.language_forced("zh_CN"):
        assert messages.shown(rejection).startswith("模拟场景被拒绝：不是有效的 JSON（")
        assert messages.shown(rejection).endswith("（继续使用上一个有效的场景）")


def test_a_scenario_files_refusal_is_shown_in_chinese_down_to_the_kind_of_value(tmp_path: Any) -> None:
    """The scenario's own rules (simulate/scenario.py) are table templates too: a refusal is English
    data, and a face shows it in Chinese down to the kind of value the field got."""
    rejection = rejected(tmp_path, '{"gpus": [{"utilization": "busy"}]}')
    assert rejection == (
        "simulated scenario rejected: gpus[0].utilization must be a whole number, not a string "
        "(keeping the last good scenario)"
    )
    with i18n.language_forced("zh_CN"):
        assert messages.shown(rejection) == (
            "模拟场景被拒绝：gpus[0].utilization 必须是整数，而不是字符串（继续使用上一个有效的场景）"
        )
    with pytest.raises(simulate.ScenarioError) as refused:
        simulate.plausible_gpus(-1)
    with i18n.language_forced("zh_CN"):
        assert messages.shown(str(refused.value)) == "模拟 GPU 的数量不能为负"


# -- the source labels (panel) and the host sample's own refusals (jupyter-gpu status)


def test_the_source_labels_are_marked_and_translated(chinese: None) -> None:
    assert SOURCE_LABELS["jupyter-server"] == "from the server"  # the table stays English
    assert [source_label(source) for source in SOURCE_LABELS] == ["来自服务器", "来自 JupyterHub", "在本机读取 NVML"]
    assert source_label("elsewhere") == "elsewhere"


def test_a_chosen_source_that_does_not_answer_is_english_in_json_and_chinese_in_the_table(
    chinese: None, tmp_path: Any
) -> None:
    host = HostSample(
        kernel=False,
        runtime_dir=tmp_path,
        source="server",
        fallback=lambda: Snapshot(nvml_available=True, timestamp=0.0),
    )
    reading = host.read()
    assert reading.snapshot.error == "no Jupyter server of this user answered (--source server)"
    data = cli.status_json(reading, cli._viewer(reading.snapshot))
    assert data["error"] == "no Jupyter server of this user answered (--source server)"
    table = cli.format_table(reading.snapshot, reading)
    assert "该用户没有 Jupyter 服务器响应（--source server）" in table
    assert "no Jupyter server" not in table


# -- the panel


def test_the_panel_shows_nvml_errors_warnings_and_the_source_in_chinese(chinese: None, scenario: Any) -> None:
    from jupyter_gpu.panel import widget

    panel = widget.GPUMonitor(start=False)
    try:
        scenario.update(lambda data: data.update(fault="driver_not_loaded"))
        down = nvml.snapshot()
        assert down.error == DRIVER_NOT_LOADED  # the snapshot keeps the English, and its JSON
        assert down.to_dict()["error"] == DRIVER_NOT_LOADED
        rejected = messages.SCENARIO_REJECTED.format(error=messages.SCENARIO_NOT_REGULAR)
        note = messages.SERVER_NOTE.format(url="http://127.0.0.1:8888/")
        panel.update(
            Snapshot(
                nvml_available=False,
                timestamp=down.timestamp,
                error=down.error,
                warnings=(rejected,),
                extra={"source": "jupyter-server", "source_note": note},
            )
        )
        status = panel.status.value
        assert "NVML 不可用：NVIDIA 驱动未加载：内核模块缺失或加载失败（见 dmesg）（NVML：Driver Not Loaded）" in status
        assert '<span title="来自 http://127.0.0.1:8888/ 上的 Jupyter 服务器">来自服务器</span>' in status
        assert "模拟场景被拒绝：不是普通文件（继续使用上一个有效的场景）" in panel.warnings.value
        lost = GpuInfo(
            index=0, uuid="GPU-x", name="A100", error=nvml.explain_nvml_error(FakeNvmlError(15, "GPU is lost"))
        )
        panel.update(Snapshot(nvml_available=True, timestamp=down.timestamp, gpus=(lost,)))
        wanted = "GPU 已丢失：显卡从总线上掉线或需要重置（见 nvidia-smi 和 dmesg）（NVML：GPU is lost）"
        assert wanted in panel.rows[0].title.value
    finally:
        panel.close(note=False)
        widget.close_all()


# -- jupyter-gpu status


def _status(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(json=False, watch=None, wide=False, show_other_names=False, source="local")
    for flag in argv:
        setattr(args, flag, True)
    code = cli._status(args, out, err)
    return code, out.getvalue(), err.getvalue()


def test_status_says_why_nvml_is_unavailable_in_chinese_and_json_stays_english(chinese: None, scenario: Any) -> None:
    scenario.update(lambda data: data.update(fault="driver_not_loaded"))
    code, out, _err = _status()
    assert code == 1
    assert "无法读取任何 GPU：NVIDIA 驱动未加载" in out and "（NVML：Driver Not Loaded）" in out
    code, out, err = _status("json")
    assert json.loads(out)["error"] == DRIVER_NOT_LOADED
    assert json.loads(out)["source_note"] == "NVML read locally (--source local)"
    assert err == "jupyter-gpu: NVIDIA 驱动未加载：内核模块缺失或加载失败（见 dmesg）（NVML：Driver Not Loaded）\n"


def test_status_shows_a_gpus_error_and_a_warning_in_chinese(chinese: None) -> None:
    lost = GpuInfo(index=0, uuid="GPU-x", name="A100", error=messages.GPU_NOT_OPENED)
    warning = messages.SCENARIO_COUNT_MORE.format(now=3, fixed=2)
    table = cli.format_table(Snapshot(nvml_available=True, timestamp=0.0, gpus=(lost,), warnings=(warning,)), wide=True)
    assert "警告：模拟场景现在有 3 块 GPU；本进程在重启前仍保留它的 2 块" in table
    assert "无法打开" in table and "could not be opened" not in table


# -- the kernel's own lines that carry NVML's error (%gpu_watch, %gpu_free)


def test_gpu_watch_and_gpu_free_say_why_nvml_is_unavailable_in_chinese(chinese: None) -> None:
    from jupyter_gpu.kernel.free import Measure, describe_change, track
    from jupyter_gpu.kernel.watch import CellReport

    report = CellReport(pid=4711, nvml_available=False, before=0, after=0, peak=0, gpus=(), error=DRIVER_NOT_LOADED)
    chinese_reason = "NVIDIA 驱动未加载：内核模块缺失或加载失败（见 dmesg）（NVML：Driver Not Loaded）"
    assert chinese_reason in report.line()
    lines = describe_change(Measure(nvml_error=DRIVER_NOT_LOADED), Measure(nvml_error=DRIVER_NOT_LOADED), track([]))
    assert f"NVML 不可用（{chinese_reason}）" in lines
