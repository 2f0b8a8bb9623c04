# ruff: noqa: RUF001  (Chinese text and its full-width punctuation on purpose)
"""TensorFlow's words in Chinese, and the magics' argument help (``%gpu_select?``) and errors in Chinese.

Every other test runs in English (``tests/conftest.py``). In-process, a fake eager context (as
``tests/test_frameworks_adapters.py`` makes one) shows what ``%gpu_status`` says TensorFlow has in
effect, in both languages from the same state. In a real kernel (the CPU TensorFlow over the CUDA
stand-in, as ``tests/test_magics_frameworks.py``) started with ``JUPYTER_GPU_LANG=zh_CN``: the
status line, a ``tf.compat.v1`` session's warning, and ``%gpu_select?``.
"""

from __future__ import annotations

import re
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kernels import Kernel, standin_kernel

from jupyter_gpu.core import i18n
from jupyter_gpu.core.snapshot import GpuInfo, Snapshot
from jupyter_gpu.core.text import columns
from jupyter_gpu.frameworks import TENSORFLOW
from jupyter_gpu.frameworks.tensorflow import forced_growth
from jupyter_gpu.plan import Fence, PlanRequest, build_plan

GIB = 1024**3


def tight(text: str) -> str:
    """``text`` without any whitespace: a Chinese line may be wrapped between any two characters."""
    return "".join(text.split())


@dataclass(frozen=True)
class Device:
    """A ``PhysicalDevice`` as TensorFlow's context keeps it (a key of its maps)."""

    name: str
    device_type: str = "GPU"


def gpu(number: int) -> Device:
    return Device(f"/physical_device:GPU:{number}")


@pytest.fixture
def fake_context(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An eager context that listed two GPUs, the first split into two logical GPUs of 2 GiB."""
    first, second = gpu(0), gpu(1)
    context = types.SimpleNamespace(
        _context_handle=object(),
        _physical_devices=[first, second],
        _visible_device_list=[first, second],
        _virtual_device_map={first: [types.SimpleNamespace(memory_limit=2048)] * 2},
        _memory_growth_map={},
    )
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    monkeypatch.setitem(
        sys.modules, "tensorflow.python.eager.context", types.SimpleNamespace(context_safe=lambda: context)
    )
    monkeypatch.delitem(sys.modules, "tensorflow.python.client.session", raising=False)
    for variable in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH"):
        monkeypatch.delenv(variable, raising=False)
    return context


def test_what_tensorflow_has_in_effect_in_english_and_in_chinese(fake_context: Any) -> None:
    english = TENSORFLOW.in_effect()
    assert english == (
        "visible GPUs /GPU:0…/GPU:1, /GPU:2, memory limits /GPU:0…/GPU:1: 2 GiB + 2 GiB, growth off, "
        "CUDA_VISIBLE_DEVICES=(unset)"
    )
    with i18n.language_forced("zh_CN"):
        chinese = TENSORFLOW.in_effect()
    assert chinese == (
        "可见 GPU /GPU:0…/GPU:1、/GPU:2，显存上限 /GPU:0…/GPU:1：2 GiB + 2 GiB，显存动态增长关闭，"
        "CUDA_VISIBLE_DEVICES=（未设置）"
    )

    fake_context._virtual_device_map = {}
    fake_context._memory_growth_map = {fake_context._physical_devices[0]: True}
    assert TENSORFLOW.in_effect().endswith(
        "growth on GPU:0 only (set by your code): TensorFlow refuses different growth on its GPUs at its first op, "
        "CUDA_VISIBLE_DEVICES=(unset)"
    )
    with i18n.language_forced("zh_CN"):
        assert "仅 GPU:0 开启显存动态增长（由您的代码设置）：TensorFlow 在第一个运算时会拒绝" in TENSORFLOW.in_effect()


def test_growth_forced_by_keras_is_said_in_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = Snapshot(
        nvml_available=True,
        timestamp=time.time(),
        gpus=(GpuInfo(index=0, uuid="GPU-a", name="A100", memory_total=80 * GIB, memory_free=80 * GIB),),
    )
    plan = build_plan(PlanRequest(), snapshot, Fence({}))
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    monkeypatch.setitem(sys.modules, "keras.src.backend.config", types.SimpleNamespace(_BACKEND="jax"))
    english = "TF_FORCE_GPU_ALLOW_GROWTH=true (set by Keras at import: its backend is jax) makes it grow its memory"
    assert (forced_growth(plan, "true") or "").startswith(english)
    with i18n.language_forced("zh_CN"):
        assert forced_growth(plan, "true") == (
            "TF_FORCE_GPU_ALLOW_GROWTH=true（由 Keras 在导入时设置：其后端为 jax）使它动态增长显存，"
            "而 GPU 方案要求显存动态增长关闭"
        )


def test_the_release_note_is_one_translated_sentence(fake_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    called, note = TENSORFLOW.release() or ("", "")
    assert called == "nothing to call (Keras not imported)"
    assert note.startswith("without memory growth TensorFlow took nearly the whole GPU at its start: freed tensors")
    with i18n.language_forced("zh_CN"):
        called, note = TENSORFLOW.release() or ("", "")
    assert called == "无可调用的函数（未导入 Keras）"
    assert note.startswith("未开启显存动态增长时，TensorFlow 启动时就占用了几乎整块显卡的显存")
    assert note.endswith("只有重启内核才能释放")


@pytest.fixture
def chinese_kernel(tmp_path: Path) -> Iterator[Kernel]:
    """A kernel with the CPU TensorFlow over the CUDA stand-in, in Chinese (``JUPYTER_GPU_LANG``)."""
    yield from standin_kernel(tmp_path, {i18n.ENV: "zh_CN"})


def pager(kernel: Kernel, code: str) -> str:
    """What ``code`` (``%magic?``) sends to the pager, without its colours."""
    msg_id = kernel.client.execute(code)
    while True:
        reply = kernel.client.get_shell_msg(timeout=90)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    pages = [p["data"]["text/plain"] for p in reply["content"].get("payload", []) if p.get("source") == "page"]
    return re.sub(r"\x1b\[[0-9;]*m", "", "".join(pages))


def test_a_chinese_kernel_says_tensorflow_in_chinese_and_its_magic_help_too(chinese_kernel: Kernel) -> None:
    kernel = chinese_kernel
    kernel.run("%load_ext jupyter_gpu\n%gpu_select 2,3\n%gpu_limit 4GiB\nimport tensorflow as tf")
    _, err = kernel.run(
        "config = tf.compat.v1.ConfigProto()\nconfig.gpu_options.per_process_gpu_memory_fraction = 0.9\n"
        "sess = tf.compat.v1.Session(config=config)"
    )
    assert err.count("GPUPlanMismatchWarning") == 1, err
    assert tight(
        "TensorFlow Session 1 没有遵循 GPU 方案（GPU 2,3；显存上限 4 GiB）：您的 ConfigProto 中的 "
        "per_process_gpu_memory_fraction=0.9 在这个会话中覆盖了 %gpu_limit 4 GiB。"
    ) in tight(err), err
    out, err = kernel.run("%gpu_status")
    assert tight(
        "当前生效：eager 模式：可见 GPU /GPU:0 (GPU 2)、/GPU:1 (GPU 3)，显存上限 /GPU:0 (GPU 2)：4 GiB；"
        "/GPU:1 (GPU 3)：4 GiB，显存动态增长关闭"
    ) in tight(out), (out, err)
    assert tight("Session 1：/GPU:0 (GPU 2)、/GPU:1 (GPU 3)；每块 GPU 显存的 90%") in tight(out), out

    help_page = pager(kernel, "%gpu_select?")
    assert "%gpu_select [--growth]" in help_page, help_page  # the usage line: option names stay
    assert "--no-growth      关闭显存动态增长" in help_page, help_page
    assert tight("与 auto 一起使用：最多等待 DURATION（90s、30m、2h；纯数字表示秒）") in tight(help_page)
    assert "turn memory growth off again" not in help_page
    assert "\n位置参数：\n" in help_page and "\n选项：\n" in help_page, help_page  # argparse's headings too
    lines = help_page[help_page.index("位置参数：") :].splitlines()
    assert all(columns(line) <= 80 for line in lines), lines  # Chinese help wrapped by columns, not characters
    _, err = kernel.run("%gpu_select --bogus")
    assert "UsageError: 无法识别的参数：--bogus" in err, err  # argparse's own error
    assert "--intra N" in pager(kernel, "%gpu_threads?") and "单个运算内部的线程数（0：框架默认值）" in tight(
        pager(kernel, "%gpu_threads?")
    )
