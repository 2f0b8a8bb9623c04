# ruff: noqa: RUF001  (Chinese text and its full-width punctuation on purpose)
"""The magics in Chinese: ``c.GpuMagics.language``, and a real kernel started with ``LANG=zh_CN.UTF-8``.

Every other test runs in English (``tests/conftest.py``); these show the magics' face (the plan,
selection, limit and status reports, the one-line errors) in Simplified Chinese with the glossary's
words (docs/i18n.md), figures, units and magic names unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from kernels import Kernel, start
from support import flat

from jupyter_gpu.core import i18n
from jupyter_gpu.core.text import WIDTH, columns


@pytest.fixture
def chinese_setting(shell: Any) -> Iterator[Any]:
    """The shell with ``%config GpuMagics.language = 'zh_CN'``, English again afterwards."""
    shell.run_line_magic("config", "GpuMagics.language = 'zh_CN'")
    try:
        yield shell
    finally:
        shell.run_line_magic("config", "GpuMagics.language = ''")
        shell.config.GpuMagics.pop("language", None)  # a later test's magics must not load it
        i18n.set_language(None)


def test_the_language_setting_puts_the_magics_in_chinese(chinese_setting: Any, capsys: Any) -> None:
    shell = chinese_setting
    shell.run_line_magic("gpu_select", "1 --growth")
    out = flat(capsys.readouterr().out)
    assert "GPU 1（A100-SXM4-80GB [simulated]，79.5 GiB 空闲）→ TensorFlow /GPU:0" in out
    assert "显存动态增长开启：按需分配显存。" in out
    assert "TensorFlow、PyTorch、JAX 导入时应用。" in out

    shell.run_line_magic("gpu_limit", "8GiB")
    out = flat(capsys.readouterr().out)
    assert "显存上限：" in out and "GPU 1：最多 8 GiB（共 80 GiB）" in out
    assert "上限是协作式的：它只约束框架的分配器，不约束驱动" in out

    shell.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out
    assert "GPU 方案：GPU 1；显存动态增长开启；显存上限 GPU 1：8 GiB" in flat(out)
    assert " * GPU 1 NVIDIA A100-SXM4-80GB" in out and "（* 已选择）" in out
    assert "框架：" in out and "TensorFlow: 未导入；导入时应用 GPU 方案" in flat(out)
    assert all(columns(line) <= WIDTH for line in out.splitlines() if "GPU-" not in line), out  # wrapped by columns

    with pytest.raises(UsageError, match=r"^没有 GPU 7；可选 GPU：0 .*，或 auto、all、none$"):
        shell.run_line_magic("gpu_select", "7")
    with pytest.raises(UsageError, match=r"^大小 '4XB' 格式不正确；有效的大小：2048（MiB）"):
        shell.run_line_magic("gpu_limit", "4XB")


def test_the_language_setting_back_to_english(chinese_setting: Any, capsys: Any) -> None:
    shell = chinese_setting
    shell.run_line_magic("gpu_threads", "--intra 4")
    assert "线程：intra-op 4，inter-op 框架默认值；" in capsys.readouterr().out
    shell.run_line_magic("config", "GpuMagics.language = 'en'")
    shell.run_line_magic("gpu_threads", "")
    assert "Threads: intra-op 4, inter-op framework default" in capsys.readouterr().out


def test_every_marked_magics_string_has_a_chinese_translation_with_its_placeholders() -> None:
    """The magics' own catalog complete (tests/test_i18n.py checks every face; this one, this face)."""
    from jupyter_gpu.core import i18n_catalogs

    problems = [line for line in i18n_catalogs.problems("zh_CN") if "magics.po" in line]
    assert not problems, problems


@pytest.fixture
def chinese_kernel(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    """A real kernel whose language comes from the standard variables only: LANG=zh_CN.UTF-8."""
    for variable in (i18n.ENV, "LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    yield from start()


def test_a_kernel_started_with_a_chinese_lang_speaks_chinese(chinese_kernel: Kernel) -> None:
    kernel = chinese_kernel
    out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 4GiB")
    out = flat(out)
    assert "GPU 1（A100-SXM4-80GB [simulated]，79.5 GiB 空闲）→ TensorFlow /GPU:0" in out, err
    assert "显存动态增长关闭。" in out
    assert "GPU 1：最多 4 GiB（共 80 GiB）" in out and "上限是协作式的" in out

    out, err = kernel.run("%gpu_status")
    assert "GPU 方案：GPU 1；显存动态增长关闭；显存上限 GPU 1：4 GiB" in flat(out), err
    assert "框架：" in out and "（* 已选择）" in out

    out, err = kernel.run("%gpu_select 0,0")
    assert "UsageError: GPU '0' 在 '0,0' 中出现了两次；每块 GPU 只列一次" in err, (out, err)
    assert kernel.value("os.environ['CUDA_VISIBLE_DEVICES']") == "1"  # the error changed nothing
