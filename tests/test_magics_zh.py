# ruff: noqa: RUF001  (Chinese text and its full-width punctuation on purpose)
"""The magics in Chinese: ``c.GpuMagics.language``, and a real kernel started with ``LANG=zh_CN.UTF-8``.

Every other test runs in English (``tests/conftest.py``); these show the magics' face (the plan,
selection, limit and status reports, the one-line errors) in Simplified Chinese with the glossary's
words (docs/i18n.md), figures, units and magic names unchanged.
"""

from __future__ import annotations

import inspect
import re
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

    kernel.run("import json")
    page = kernel.value("get_ipython().find_line_magic('gpu_limit').__doc__")  # what %gpu_limit? shows
    assert "为本内核的框架在每块所选 GPU 上可使用的显存设置上限。" in page, page
    assert "上限是协作式的：它只约束框架的分配器，不约束驱动" in "".join(page.split())
    assert "Cap the GPU memory" not in page


# -- the help pages (%gpu_select? and the rest): the manual translated, every flag and example kept


def _magics() -> dict[str, Any]:
    """Every magic's function (the object whose ``__doc__`` IPython's ``%name?`` shows), by name."""
    from jupyter_gpu.kernel.magics.doctor import GpuDoctorMagics
    from jupyter_gpu.kernel.magics.memory import GpuMemoryMagics
    from jupyter_gpu.kernel.magics.plan_magics import GpuMagics
    from jupyter_gpu.kernel.magics.restart import GpuRestartMagics
    from jupyter_gpu.kernel.magics.status import GpuStatusMagics
    from jupyter_gpu.kernel.monitor_magics import MonitorMagics

    classes = (GpuMagics, GpuDoctorMagics, GpuMemoryMagics, GpuStatusMagics, GpuRestartMagics, MonitorMagics)
    return {name: vars(cls)[method] for cls in classes for name, method in cls.magics["line"].items()}


MAGICS = sorted(_magics())
#: The first sentence of each Chinese manual, as the catalog has it.
TITLES = {
    "gpu_select": "选择本内核的 TensorFlow/Keras、PyTorch 和 JAX 要使用的 GPU。",
    "gpu_limit": "为本内核的框架在每块所选 GPU 上可使用的显存设置上限。",
    "gpu_threads": "本内核的 CPU 线程数和 TensorFlow 的设备放置。",
    "gpu_doctor": "检查 GPU 软件栈和本内核的 GPU 方案：本内核的 ``jupyter-gpu doctor``。",
    "gpu_free": "不重启内核就释放显存。",
    "gpu_status": "显示内核的 GPU 方案、每个框架的状态，以及各块 GPU 和本内核的用量。",
    "gpu_restart": "重启内核，并在新内核运行任何代码之前应用 GPU 方案。",
    "gpu_monitor": "在本单元格下方显示实时 GPU 面板。",
    "gpu_watch": "每个单元格运行后报告本内核的显存：``%gpu_watch on`` / ``%gpu_watch off``。",
}


def _tight(text: str) -> str:
    """``text`` without whitespace: a Chinese sentence broken across lines reads whole again."""
    return "".join(text.split())


def _page(name: str, language: str) -> str:
    from jupyter_gpu.kernel.magics.arguments import help_page

    with i18n.language_forced(language):
        return help_page(_magics()[name])


def test_every_magic_has_a_chinese_manual() -> None:
    assert sorted(TITLES) == MAGICS  # a new magic gets a manual in Chinese too


@pytest.mark.parametrize("name", MAGICS)
def test_a_help_page_in_chinese_shows_the_chinese_manual_and_in_english_the_english_one(name: str) -> None:
    from jupyter_gpu.kernel.magics.arguments import SOURCE

    english_manual = getattr(_magics()[name], SOURCE)
    first_line = english_manual.strip().splitlines()[0]
    chinese = _page(name, "zh_CN")
    assert TITLES[name] in chinese and first_line not in chinese, chinese
    assert all(columns(line) <= WIDTH for line in chinese.splitlines()), chinese  # laid out for a pager
    english = _page(name, "en")
    assert english == _magics()[name].__doc__  # what IPython shows in this (English) test process
    assert english_manual in english or inspect.cleandoc(english_manual) in english  # the docstring unchanged
    assert TITLES[name] not in english


def _kept_verbatim(manual: str) -> set[str]:
    """What a translation must keep as it is: option names, magics (with their arguments in an
    example), environment variables and settings, and each example command (its comment aside)."""
    kept = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", manual))
    kept |= set(re.findall(r"%[a-z_]+", manual))
    kept |= set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+(?:=[\w:.]+)?", manual))
    examples = re.split(r"\bExamples?::\n", manual)[1:]
    for block in examples:
        for line in block.splitlines():
            if line.startswith("    %"):
                kept.add(line.split("#")[0].strip())
    return kept


@pytest.mark.parametrize("name", MAGICS)
def test_the_chinese_manual_keeps_every_flag_variable_and_example_command(name: str) -> None:
    from jupyter_gpu.kernel.magics.arguments import SOURCE, manual

    english_manual = inspect.cleandoc(getattr(_magics()[name], SOURCE))
    with i18n.language_forced("zh_CN"):
        chinese = manual(english_manual)
    kept = _kept_verbatim(english_manual)
    assert kept, english_manual
    missing = sorted(word for word in kept if word not in chinese)
    assert not missing, missing


def test_kept_verbatim_finds_the_flags_and_examples_a_translation_could_drop() -> None:
    kept = _kept_verbatim(inspect.cleandoc(_magics()["gpu_select"].english_manual))
    assert {"--min-free", "--wait", "%gpu_limit", "CUDA_DEVICE_ORDER=PCI_BUS_ID"} <= kept
    assert "%gpu_select auto:1 --min-free 20GiB --wait 30m" in kept and "%gpu_select 0,2 --growth" in kept


def test_the_chinese_manuals_keep_the_caveats() -> None:
    limit = _tight(_page("gpu_limit", "zh_CN"))
    assert "上限是协作式的：它只约束框架的分配器，不约束驱动" in limit
    assert "需要硬隔离时，请使用MIG，或每个容器一块GPU" in limit
    assert "每个子进程有自己的上限，而不是分享内核的上限" in limit
    status = _tight(_page("gpu_status", "zh_CN"))
    assert "上限只约束每个框架的分配器，不约束上下文" in status and "留给CUDA自身上下文的1GiB" in status
    free = _tight(_page("gpu_free", "zh_CN"))
    assert "TensorFlow从不把它的显存池还给驱动" in free


def test_a_changed_manual_is_extracted_for_translation() -> None:
    """``scripts/i18n.py update`` takes a magic's docstring into its face's catalog, so a changed
    docstring is a message without a translation until someone translates it (``check`` fails)."""
    from jupyter_gpu.core import i18n_catalogs

    source = '''
class M:
    @line_magic
    def gpu_new(self, line):
        """A new magic.

        Its manual."""

    def helper(self):
        """Not a magic: not extracted."""
'''
    assert list(i18n_catalogs.magic_manuals(source)) == [(4, "A new magic.\n\nIts manual.")]
    manuals = {item.id for item in i18n_catalogs.marked("magics") if item.context == i18n.HELP_PAGE}
    assert inspect.cleandoc(_magics()["gpu_select"].english_manual) in manuals
    with i18n.language_forced("zh_CN"):
        assert i18n.pgettext(i18n.HELP_PAGE, "A changed manual.") == "A changed manual."  # untranslated: English
