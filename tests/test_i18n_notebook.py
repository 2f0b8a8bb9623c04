# ruff: noqa: RUF001  (Chinese sentences use full-width punctuation: docs/i18n.md)
"""The notebook face in Chinese (docs/i18n.md): ``%gpu_free``'s and ``%gpu_watch``'s printouts, the
out-of-memory report, the after-cell hints and the guard's lines, the restart offer, the panel, the
server's error messages, and a real kernel that follows ``LANG=zh_CN.UTF-8``.

Every other test runs in English (tests/conftest.py); each test here chooses Chinese the way a user
would (the kernel's environment, JupyterLab's Settings → Language) or forces it
(:func:`jupyter_gpu.core.i18n.language_forced`), and says it stays English without that choice.
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernels import start
from pytest_jupyter.jupyter_server import *  # noqa: F403
from support import asynctest, wait_until
from tornado.httpclient import HTTPClientError

from jupyter_gpu.core import i18n
from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess
from jupyter_gpu.core.units import GIB
from jupyter_gpu.kernel import free, hooks, oom
from jupyter_gpu.kernel.watch import CellReport, FrameworkMemory

ZH = "zh_CN"


@pytest.fixture
def chinese() -> Iterator[None]:
    with i18n.language_forced(ZH):
        yield


# -- %gpu_free, %gpu_watch ------------------------------------------------------------------------


def test_gpu_free_reports_and_refuses_in_chinese(chinese: None) -> None:
    from IPython.core.error import UsageError

    before = free.Measure(nvml={0: 4 * GIB}, gpu_names={0: "NVIDIA A100"}, rss=GIB)
    after = free.Measure(nvml={0: GIB}, gpu_names={0: "NVIDIA A100"}, rss=GIB)
    lines = free.describe_change(before, after, free.Tracked())
    assert lines == ["GPU 0（A100）：本内核 4 GiB → 1 GiB（NVML）", "进程内存（RSS，CPU 数组）：1 GiB → 1 GiB"]
    report = free._dry_run_report(["您的变量 model"], free.Tracked())
    assert report.splitlines()[0] == "将丢弃：您的变量 model。"
    assert report.splitlines()[-1] == "未做任何更改（--dry-run）。"
    shell = types.SimpleNamespace(user_ns={"model": 1}, user_ns_hidden={})
    with pytest.raises(UsageError, match=r"^没有变量 'optimizer'；未做任何更改$"):
        free.check_names(shell, ["optimizer"])


def test_gpu_watch_line_in_chinese_and_in_english_without_the_choice() -> None:
    report = CellReport(
        pid=4711,
        nvml_available=True,
        before=GIB,
        after=3 * GIB,
        peak=4 * GIB,
        gpus=(0,),
        frameworks=(FrameworkMemory("torch", GIB, 2 * GIB, 3 * GIB),),
    )
    english = report.line()
    assert english.startswith("GPU memory of this kernel (PID 4711): +2 GiB over the cell")
    with i18n.language_forced(ZH):
        assert report.line() == (
            "本内核（PID 4711）的显存：本单元格 +2 GiB（1 GiB → 3 GiB），单元格运行期间峰值 4 GiB，在 GPU 0 上"
            " · torch：使用中 +1 GiB，峰值 3 GiB"
        )


# -- the out-of-memory report, the hints, the guard -----------------------------------------------


def _gpu(index: int, total_gib: int, processes: tuple[GpuProcess, ...]) -> GpuInfo:
    used = sum(p.memory or 0 for p in processes)
    total = total_gib * GIB
    return GpuInfo(index, f"GPU-{index}", "NVIDIA A100", total, used, total - used, processes=processes)


def test_the_out_of_memory_report_in_chinese(chinese: None) -> None:
    error = oom.OutOfMemory("PyTorch", "torch", device=0, requested_bytes=2 * GIB)
    facts = oom.Facts(
        gpus=[_gpu(0, 80, (GpuProcess(100, 70 * GIB, "me"), GpuProcess(200, 9 * GIB, "bob"))), _gpu(1, 80, ())],
        own_pid=100,
        own_user="me",
        device_gpus=(0,),
    )
    report = oom.explain(error, facts)
    lines = report.splitlines()
    assert lines[0] == "jupyter_gpu：PyTorch cuda:0 显存不足；它尝试分配 2 GiB。"
    assert lines[1] == "GPU 0 A100（PyTorch cuda:0）：共 80 GiB，已用 79 GiB，可用 1 GiB。"
    assert "  占用者：" in lines and "    本内核：70 GiB" in lines and "    bob：9 GiB" in lines
    assert "下一步：" in lines
    assert "  - GPU 1 有 80 GiB 可用：`%gpu_select 1`，然后 `%gpu_restart`（用它重启内核）" in lines, report
    assert "ran out" not in report and "Next steps" not in report


def test_the_framework_hints_and_the_guards_line_in_chinese(chinese: None, capsys: pytest.CaptureFixture[str]) -> None:
    hint = hooks.traceback_hint(RuntimeError("Torch not compiled with CUDA enabled"))
    assert hint is not None and hint.startswith("jupyter_gpu：当前 PyTorch 是仅支持 CPU 的版本：GPU 方案无法作用于它。")
    assert "本内核的 GPU 方案：" in hint

    def broken() -> None:
        raise SystemExit(3)

    hooks.guarded(broken, i18n.N_("the after-cell check"))()
    assert capsys.readouterr().err == "jupyter_gpu：单元格运行后的检查失败（SystemExit）；单元格及其变量不受影响。\n"


def test_the_restart_offer_in_chinese(chinese: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu.kernel import restart_offer
    from jupyter_gpu.plan import PlanRequest

    shown: list[dict[str, Any]] = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw=False: shown.append(data))
    restart_offer.offer_restart(PlanRequest(selection="1", growth=True), "test")
    (offer,) = shown
    text = offer["text/plain"]
    assert text.startswith("要应用这个 GPU 方案，请重启内核并首先运行：%gpu_select 1 --growth"), text
    assert offer[restart_offer.RESTART_MIME]["lines"][1] == "%gpu_select 1 --growth"  # the lines stay code


# -- the panel ------------------------------------------------------------------------------------


def test_the_panel_in_chinese(chinese: None, scenario: Any) -> None:
    from jupyter_gpu.panel import widget
    from jupyter_gpu.sources import nvml

    with pytest.raises(ValueError, match=r"^interval_s 至少为 0\.1 s，而不是 0\.01$"):
        widget.GPUMonitor(interval_s=0.01)
    panel = widget.GPUMonitor(start=False)
    try:
        assert (panel.pause_button.description, panel.close_button.description) == ("恢复", "关闭")
        assert panel.close_button.tooltip == "永久停止此面板（运行 %gpu_monitor 可打开新面板）"
        panel.update(nvml.snapshot())
        wait_until(lambda: len(panel.rows) == 2)
        assert "2 块 GPU" in panel.status.value and "每 1 s · " in panel.status.value
        row = panel.rows[0]
        assert "没有进程" in row.processes.value
        assert row.utilization.value == "利用率 0 %"
        assert "利用率 <b>0 %</b>" in row.history_chart.value and "显存 <b>0 %</b>" in row.history_chart.value
        assert "GPU 面板：内核已重启：请重新运行该单元格" in panel.children[0].value  # the CSS's note
        panel.resume()
        assert panel.pause_button.description == "暂停"
    finally:
        panel.close(note=False)
        widget.close_all()


def test_a_translation_cannot_end_the_panels_css_string(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu.panel import render

    monkeypatch.setattr(render, "_", lambda message: 'x"}</style><script>')
    css = render.style()
    assert "</style><script>" not in css and '"x\\22 }\\3c /style\\3e \\3c script\\3e "' in css
    assert css.count("</style>") == 1


# -- the server -----------------------------------------------------------------------------------


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}},
        "JupyterGpuServer": {"interval_s": 0.1, "linger_s": 5.0, "wait_s": 1.0, "history_s": 2.0},
    }


def choose_in_lab(language: str) -> None:
    """What Settings → Language writes, in this test's own settings folder (tests/conftest.py)."""
    path = i18n.lab_settings_dir() / i18n.LAB_SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"locale": language}), encoding="utf-8")


async def bad_since(jp_fetch: Any) -> str:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("jupyter-gpu", "history", params={"since": "yesterday"})
    assert caught.value.code == 400
    return str(json.loads(caught.value.response.body)["message"])


@pytest.mark.usefixtures("stop_sampler_after_test")
@asynctest
async def test_the_servers_messages_follow_the_language_chosen_in_jupyterlab_and_its_log_stays_english(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(i18n.ENV)
    for variable in i18n.STANDARD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert await bad_since(jp_fetch) == "since must be a number of epoch seconds, not 'yesterday'"
    choose_in_lab("zh_CN")  # read at each error: no restart of the server
    caplog.set_level(logging.WARNING)
    assert await bad_since(jp_fetch) == "since 必须是以秒为单位的 Unix 时间戳，而不是 'yesterday'"
    logged = [record.getMessage() for record in caplog.records if "wrote error" in record.getMessage()]
    assert logged and all("since must be a number" in line for line in logged), logged
    monkeypatch.setenv(i18n.ENV, "en")  # the variable outranks JupyterLab's choice
    assert await bad_since(jp_fetch) == "since must be a number of epoch seconds, not 'yesterday'"


# -- a real kernel --------------------------------------------------------------------------------


@pytest.fixture
def chinese_kernel(scenario: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """A kernel whose environment says Chinese the standard way: ``LANG=zh_CN.UTF-8``, no
    ``JUPYTER_GPU_LANG`` and no other language variable."""
    monkeypatch.delenv(i18n.ENV)
    for variable in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    yield from start({"IPYTHONDIR": str(tmp_path / "ipython")})


def test_a_kernel_with_lang_zh_cn_shows_the_notebook_face_in_chinese(chinese_kernel: Any) -> None:
    kernel = chinese_kernel
    kernel.run("%load_ext jupyter_gpu")
    out, err = kernel.run("%gpu_watch on")
    assert "%gpu_watch 已开启：每个单元格运行后显示一行显存信息（每 0.2 s 采样一次）" in out, (out, err)
    out, err = kernel.run("x = 1")
    assert "本内核（PID " in out and "的显存：" in out, (out, err)
    out, err = kernel.run("%gpu_watch off")
    assert "%gpu_watch 已关闭" in out, (out, err)
    out, err = kernel.run("%gpu_monitor --history 1")
    assert "--history 至少为 2 个采样，而不是 1" in out + err, (out, err)
    out, err = kernel.run("%gpu_free --dry-run")
    assert "将丢弃：" in out and "未做任何更改（--dry-run）。" in out, (out, err)
    assert kernel.value(
        "[b.description for b in __import__('jupyter_gpu.panel.widget', fromlist=['x']).GPUMonitor(start=False)"
        ".children[1].children[:2]]"
    ) == ["恢复", "关闭"]


def test_the_servers_language_setting_outranks_jupyterlabs_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """``c.JupyterGpuServer.language`` (set for the process when the extension loads) decides the
    refusals' language before JUPYTER_GPU_LANG and JupyterLab's Settings → Language."""
    from jupyter_gpu.server.config import JupyterGpuServer
    from jupyter_gpu.server.handlers import reader_language, refuse

    monkeypatch.delenv(i18n.ENV)
    choose_in_lab("en")
    assert reader_language() == "en"
    assert JupyterGpuServer(language="zh_CN").language == "zh_CN"
    i18n.set_language("zh_CN")  # what loading the extension does with that setting
    try:
        assert reader_language() is None
        refusal = refuse(400, i18n.N_("since must be a number of epoch seconds, not {value}"), value="'yesterday'")
        assert refusal.shown == "since 必须是以秒为单位的 Unix 时间戳，而不是 'yesterday'"
        assert refusal.english == "since must be a number of epoch seconds, not 'yesterday'"
    finally:
        i18n.set_language(None)
