"""The terminal face in Chinese: ``jupyter-gpu status``, ``doctor`` and ``run``, their ``--help`` and
argparse's own words (:mod:`jupyter_gpu.core.arguments`), English by default, ``--json`` English always."""

# ruff: noqa: RUF001  (the Chinese text's full-width punctuation is what is tested)

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from jupyter_gpu import cli, simulate
from jupyter_gpu.core import arguments, i18n
from jupyter_gpu.core.arguments import ARGPARSE_MESSAGES, columns, translate_error, wrap_columns
from jupyter_gpu.doctor.compare import GPU_INSTALL
from jupyter_gpu.doctor.report import FrameworkCheck, Machine, Report, Service, render_text


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(i18n.ENV, "zh_CN")


def command(*args: str, lang: str | None = "zh_CN", **env: str) -> subprocess.CompletedProcess[str]:
    """``jupyter-gpu ARGS`` in a fresh process; ``lang`` as JUPYTER_GPU_LANG (None: removed)."""
    environment = {**os.environ, **env}
    environment.pop(i18n.ENV, None)
    if lang is not None:
        environment[i18n.ENV] = lang
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.cli", *args], env=environment, capture_output=True, text=True, timeout=120
    )


# -- --help of the command and its subcommands, in both languages (fresh processes)


def test_help_is_chinese_with_argparse_words_too() -> None:
    done = command("--help")
    assert done.returncode == 0
    out = done.stdout
    assert out.startswith("用法：jupyter-gpu ")
    assert "查看这台机器的 GPU 以及谁在使用它们" in out
    assert "\n位置参数：\n" in out and "\n选项：\n" in out  # the headings' colon is full-width too
    assert "显示此帮助信息并退出" in out and "显示程序的版本号并退出" in out
    for english in ("usage:", "options:", "positional arguments", "show this help message"):
        assert english not in out


def test_help_is_english_by_default() -> None:
    done = command("--help", lang=None, LANG="C.UTF-8", LANGUAGE="", LC_ALL="", LC_MESSAGES="")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: jupyter-gpu ")
    assert "options:" in done.stdout and "show this help message and exit" in done.stdout
    assert "用法" not in done.stdout


def test_lang_chooses_chinese_when_nothing_forces_a_language() -> None:
    done = command("status", "--help", lang=None, LANG="zh_CN.UTF-8", LANGUAGE="", LC_ALL="", LC_MESSAGES="")
    assert done.stdout.startswith("用法：jupyter-gpu status")
    assert "输出 JSON 快照而不是表格" in done.stdout


@pytest.mark.parametrize(
    ("subcommand", "words"),
    [
        ("status", ["显示每块 GPU：显存、利用率、温度、功耗和进程。", "每 SECONDS 秒原地刷新"]),
        ("doctor", ["检查这台机器上的 GPU 软件栈和 GPU 方案", "只检查这个框架", "%gpu_select 1 --growth"]),
        (
            "run",
            [
                "按笔记本中 %gpu_select 和 %gpu_limit 会生成的 GPU 方案启动 COMMAND",
                "信号与退出状态：",
                "示例：",
                "30%（该 GPU 的）",
            ],
        ),
    ],
)
def test_each_subcommand_help_is_chinese(subcommand: str, words: list[str], chinese: None, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([subcommand, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"用法：jupyter-gpu {subcommand}")
    for word in words:
        assert word in out
    assert "选项" in out and "options:" not in out
    # wide characters count two; the first line is run's usage, given whole
    assert all(columns(line) <= 100 for line in out.splitlines()[1:]), out


def test_each_subcommand_help_is_english_by_default(capsys: Any) -> None:
    for subcommand in ("status", "doctor", "run"):
        with pytest.raises(SystemExit):
            cli.main([subcommand, "--help"])
        out = capsys.readouterr().out
        assert out.startswith(f"usage: jupyter-gpu {subcommand}") and "options:" in out


# -- argparse's errors


def test_a_bad_option_value_is_one_chinese_error(chinese: None, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["status", "--watch", "soon"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("用法：jupyter-gpu status")
    assert err.splitlines()[-1] == "jupyter-gpu status：错误：参数 --watch：需要一个秒数，收到的是 'soon'"


def test_an_unknown_subcommand_is_said_in_chinese_in_a_fresh_process() -> None:
    done = command("bogus")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "jupyter-gpu：错误：参数 COMMAND：无效的选择：'bogus'（可选：'status', 'doctor', 'run'）"
    )


def test_unknown_options_are_said_in_chinese(chinese: None, capsys: Any) -> None:
    with pytest.raises(SystemExit):
        cli.main(["status", "--bogus"])
    assert capsys.readouterr().err.splitlines()[-1] == "jupyter-gpu：错误：无法识别的参数：--bogus"


def test_every_argparse_template_is_argparse_s_own() -> None:
    """A Python whose argparse words its errors differently fails here, not silently in English."""
    source = inspect.getsource(argparse)
    for english, _ours in ARGPARSE_MESSAGES:
        assert repr(english)[1:-1] in source or english in source, english


def test_argparse_errors_are_translated_and_unknown_ones_kept(chinese: None) -> None:
    assert translate_error("argument --framework: invalid choice: 'x' (choose from 'torch', 'jax')") == (
        "参数 --framework：无效的选择：'x'（可选：'torch', 'jax'）"
    )
    assert translate_error("the following arguments are required: COMMAND") == "缺少以下必需参数：COMMAND"
    assert translate_error("argument --x: expected one argument") == "参数 --x：需要一个参数"
    assert translate_error("something argparse never said") == "something argparse never said"


def test_argparse_errors_stay_english_in_english() -> None:
    message = "argument --framework: invalid choice: 'x' (choose from 'torch', 'jax')"
    assert translate_error(message) == message


# -- status


def test_status_table_is_chinese_and_fits_80_columns(demo_gpus: None, chinese: None, capsys: Any) -> None:
    assert cli.main(["status", "--source", "local"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("驱动 ") and lines[0].endswith("（模拟 GPU）")
    assert lines[1] == "采样来源：在本机读取 NVML（--source local）"
    head = next(line for line in lines if line.startswith("GPU "))
    for word in ("名称", "显存 已用 / 总量", "利用率", "温度", "功耗"):
        assert word in head
    availability = next(line for line in lines if line.startswith("可用情况："))
    assert "空闲：GPU 2" in availability and "他人正在使用：GPU 0, GPU 1" in availability
    assert all(columns(line) <= cli.WIDTH for line in lines), out
    rows = [line for line in lines if line[:3].strip().isdigit()]
    assert len({columns(line) for line in rows}) == 1  # the columns line up, wide headers or not


def test_status_json_stays_english_in_chinese(demo_gpus: None, chinese: None, capsys: Any) -> None:
    assert cli.main(["status", "--source", "local", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source_note"] == "NVML read locally (--source local)"
    assert [gpu["availability"] for gpu in data["gpus"]] == ["in use by others", "in use by others", "free", "in use"]


def test_status_in_a_fresh_chinese_process() -> None:
    done = command("status", "--source", "local", **{simulate.ENV_VAR: simulate.DEMO_STILL})
    assert done.returncode == 0, done.stderr
    assert "可用情况：空闲：GPU 2" in done.stdout
    english = command("status", "--source", "local", lang="en", **{simulate.ENV_VAR: simulate.DEMO_STILL})
    assert "Availability: free: GPU 2" in english.stdout and "可用" not in english.stdout


def test_a_chinese_warning_wraps_at_80_columns() -> None:
    text = "警告：" + "模拟场景的修改被拒绝，" * 12
    lines = wrap_columns(text, 80, "  ")
    assert len(lines) > 1 and all(columns(line) <= 80 for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])
    assert not any(line.strip().startswith("，") for line in lines)  # a comma never starts a line
    assert "".join(line.strip() for line in lines) == text


def test_english_wraps_as_before() -> None:
    import textwrap

    text = "Warning: " + "the simulated scenario edit was refused, " * 5
    assert wrap_columns(text, 80, "  ") == textwrap.wrap(text, 80, subsequent_indent="  ", break_on_hyphens=False)


# -- doctor


def _report() -> Report:
    machine = Machine(
        nvml_available=True,
        simulated=True,
        driver_version="550.54.15",
        nvml_version="12.550",
        cuda_driver_version="12.4",
        services=(Service("Hub service", "not configured", "JUPYTERHUB_API_TOKEN unset"),),
    )
    torch = FrameworkCheck(
        name="PyTorch", package="torch", installed=True, version="2.5", build="cpu", gpu_install=GPU_INSTALL["torch"]
    )
    return Report("0.1.0", machine, "no selection", (), (torch, FrameworkCheck(name="JAX")))


def test_doctor_page_is_chinese(chinese: None) -> None:
    page = render_text(_report())
    assert "机器\n  模拟 GPU（JUPYTER_GPU_SIMULATE）" in page
    assert "驱动 550.54.15，NVML 12.550，CUDA 12.4（驱动支持的最高版本）" in page
    assert "JupyterHub 服务：未配置（JUPYTERHUB_API_TOKEN unset）" in page
    assert "PyTorch 2.5 (torch)：仅 CPU 构建：要使用 GPU，请安装 从 PyTorch 的 CUDA wheel 索引安装的 torch（" in page
    assert "JAX：未安装" in page
    assert page.endswith("结论：无法验证方案：没有支持 GPU 的框架；未发现问题（退出状态 0）")


def test_doctor_json_stays_english_in_chinese(chinese: None) -> None:
    data = _report().to_dict()
    assert data["verdict"] == "cannot verify the plan: no framework with GPU support"
    assert data["machine"]["services"][0]["state"] == "not configured"


def test_doctor_page_is_english_by_default() -> None:
    page = render_text(_report())
    assert "Hub service: not configured (JUPYTERHUB_API_TOKEN unset)" in page
    assert page.endswith(
        "Verdict: cannot verify the plan: no framework with GPU support; no problem found (exit status 0)"
    )


def test_doctor_bad_plan_is_said_in_chinese(chinese: None, capsys: Any) -> None:
    assert cli.main(["doctor", "--plan", "%gpu_nonsense 1"]) == 2
    assert capsys.readouterr().err.startswith("jupyter-gpu doctor: --plan 有误：")


def test_doctor_bad_timeout_is_said_in_chinese(chinese: None, capsys: Any) -> None:
    with pytest.raises(SystemExit):
        cli.main(["doctor", "--timeout", "0"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "jupyter-gpu doctor：错误：参数 --timeout：超时时间必须大于 0 且不超过 3600 秒，收到的是 0"
    )


# -- run


def test_run_refusals_are_one_chinese_line() -> None:
    done = command("run", "--growth", "--no-growth", "--", "true")
    assert done.returncode == 2
    assert done.stderr == (
        "jupyter-gpu run: 参数 --no-growth：不能与参数 --growth 同时使用（参见 jupyter-gpu run --help）\n"
    )
    missing = command("run", "--", "no-such-command-here")
    assert missing.returncode == 2
    assert missing.stderr == "jupyter-gpu run: no-such-command-here：找不到命令（或不可执行）\n"


def test_run_with_nothing_asked_says_so_in_chinese(chinese: None, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "JUPYTER_GPU_DEFAULT_SELECT",
        "JUPYTER_GPU_DEFAULT_LIMIT",
        "JUPYTER_GPU_GROWTH",
        "JUPYTER_GPU_MAX_LIMIT",
    ):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["run", "--", "true"]) == 0
    assert capsys.readouterr().err.startswith("jupyter-gpu run: 没有要求任何 GPU 方案")


def test_run_option_errors_in_chinese(chinese: None, capsys: Any) -> None:
    assert cli.main(["run", "--select", "0", "--min-free", "8GiB", "--", "true"]) == 2
    assert capsys.readouterr().err == (
        "jupyter-gpu run: --min-free 需要 --select auto 或 auto:N，例如 --select auto --min-free 8GiB\n"
    )


def test_the_parser_is_the_one_class(chinese: None) -> None:
    parser = cli.build_parser()
    assert isinstance(parser, arguments.ArgumentParser)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert all(isinstance(p, arguments.ArgumentParser) for p in subparsers.choices.values())


# -- the start-up hook's one line (a child of `jupyter-gpu run`, a simulation)


def test_the_start_up_line_is_chinese() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "JUPYTER_GPU_SIMULATE": "four", "PYTHONPATH": root, i18n.ENV: "zh_CN"}
    code = "import pynvml; import jupyter_gpu.simulate as s; print(s.installed())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "None"
    (line,) = result.stderr.splitlines()
    assert line.startswith("jupyter_gpu: 模拟 GPU 未安装：JUPYTER_GPU_SIMULATE='four'")


def test_doctor_findings_are_english_in_json_and_chinese_on_the_page(chinese: None) -> None:
    from jupyter_gpu.doctor.children import ProbeResult
    from jupyter_gpu.doctor.compare import no_gpu_causes

    causes = no_gpu_causes("torch", ProbeResult("torch", 1.0), False, 0, None, {"CUDA_VISIBLE_DEVICES": "-1"})
    check = FrameworkCheck(name="PyTorch", installed=True, version="2.5", build="gpu", problems=tuple(causes))
    report = Report("0.1.0", Machine(nvml_available=False, nvml_error="no driver"), "", (), (check,))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["frameworks"][0]["problems"] == [
        "the NVIDIA driver cannot be reached (see Machine); fix: install or load the driver",
        "CUDA_VISIBLE_DEVICES='-1' hides every GPU; fix: unset it or %gpu_select GPUs",
    ]
    page = render_text(report)
    assert "    问题：无法访问 NVIDIA 驱动（见“机器”部分）；解决：安装或加载驱动" in page
    assert "    问题：CUDA_VISIBLE_DEVICES='-1' 隐藏了所有 GPU；解决：取消设置它，或用 %gpu_select 选择 GPU" in page
