"""The magics in an in-process InteractiveShell: output, environment, hooks, bad input, the warning."""

from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from plan_state import state
from support import flat

from jupyter_gpu import GPUAlreadyInitializedWarning, frameworks, plan
from jupyter_gpu.core import import_hooks as _import_hooks
from jupyter_gpu.kernel import magics
from jupyter_gpu.plan import Fence, current_plan


def test_select_sets_cuda_env_prints_the_mapping_and_waits_for_imports(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "1 --growth")
    out = capsys.readouterr().out
    assert "GPU 1 (A100-SXM4-80GB [simulated], 79.5 GiB free) → TensorFlow /GPU:0, PyTorch cuda:0, JAX cuda:0" in flat(
        out
    )
    assert "Applied to TensorFlow, PyTorch, JAX when imported" in flat(out)
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert current_plan().selected_indices == (1,)
    for framework in frameworks.FRAMEWORKS:
        assert framework.hook in _import_hooks.pending(framework.module_name)


def test_two_gpus_explain_that_selecting_does_not_parallelize(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "all")
    assert "tf.distribute.MirroredStrategy()" in capsys.readouterr().out
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_none_hides_every_gpu_and_no_growth_restores_the_kernel_start_value(shell, monkeypatch) -> None:
    shell.run_line_magic("gpu_select", "none --growth")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "-1"
    shell.run_line_magic("gpu_select", "0 --no-growth")
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


def test_limit_sets_jax_fraction_and_reports_cooperative_caps(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "0")
    shell.run_line_magic("gpu_limit", "8GiB")
    out = capsys.readouterr().out
    assert "GPU 0: at most 8 GiB of 80 GiB" in flat(out) and "cooperative" in flat(out)
    assert os.environ["XLA_CLIENT_MEM_FRACTION"] == "0.100"
    assert current_plan().memory_limit_bytes(0) == 8 * 1024**3
    shell.run_line_magic("gpu_limit", "2048 2048")
    assert "2 logical GPUs of 2 GiB + 2 GiB" in capsys.readouterr().out
    shell.run_line_magic("gpu_limit", "off")
    assert "XLA_CLIENT_MEM_FRACTION" not in os.environ and current_plan().memory_limit_bytes(0) is None


def test_status_shows_plan_frameworks_and_gpus(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "1")
    capsys.readouterr()
    shell.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out
    assert "Plan: GPU 1; growth off; no memory limit" in flat(out)
    assert "TensorFlow: not imported; the plan is applied when it is imported" in flat(out)
    assert " * GPU 1 NVIDIA A100-SXM4-80GB" in out and "   GPU 0 NVIDIA A100-SXM4-80GB" in out


def test_status_shows_names_from_elsewhere_bidi_safe_and_cut(shell, scenario, capsys) -> None:
    def hostile(data: dict) -> None:
        data["gpus"][0]["name"] = "NVIDIA " + "X" * 70  # NVML names hold at most 96 bytes, " [simulated]" included
        data["gpus"][0]["processes"] = [{"pid": 4242, "memory_mib": 512, "user": "a\u202eevil", "name": "python"}]
        data["gpus"][1]["fault"] = "lost"

    scenario.update(hostile)
    shell.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out
    assert "\u202e" not in flat(out) and "a\ufffdevil" in flat(out)
    line = next(line for line in out.splitlines() if "GPU 0" in line)
    assert "X" * 40 not in line and "…" in line
    assert "GPU 1: cannot be read (GPU is lost" in flat(out)  # not "0 MiB used, 0 MiB free of 0 MiB"


def test_threads_and_placement(shell, capsys) -> None:
    shell.run_line_magic("gpu_threads", "--intra 3 --inter 2 --soft-placement on")
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "3" and os.environ["TF_NUM_INTEROP_THREADS"] == "2"
    assert current_plan().request.soft_placement is True
    assert "intra-op 3, inter-op 2; TensorFlow soft placement on" in capsys.readouterr().out
    shell.run_line_magic("gpu_threads", "--intra 0")
    assert "TF_NUM_INTRAOP_THREADS" not in os.environ


BAD_INPUTS = [
    ("gpu_select", "7", "there is no GPU 7; valid GPUs: 0 "),
    ("gpu_select", "GPU-ffff", "no GPU has a UUID starting with 'GPU-ffff'"),
    ("gpu_select", "0,0", "given twice"),
    ("gpu_select", "auto:0", "at least 1"),
    ("gpu_select", "auto:3", "auto:3 needs 3 GPUs"),
    ("gpu_select", "auto --min-free 90GiB", "at least 90 GiB free"),
    ("gpu_select", "1 --min-free 1GiB", "only applies to auto"),
    ("gpu_select", "auto --min-free 90 GiB", "at least 90 GiB free"),  # read as 90GiB, then refused
    ("gpu_select", "1 --growth --no-growth", "conflict"),
    ("gpu_select", "1 --bogus", "unrecognized arguments"),
    ("gpu_limit", "0", "zero"),
    ("gpu_limit", "-5", "negative"),
    ("gpu_limit", "2x", "malformed size"),
    ("gpu_limit", "90GiB", "more than GPU 0's memory"),
    ("gpu_limit", "50GiB 40GiB", "more than GPU 0's memory"),
    ("gpu_limit", "off 2GiB", "cannot be combined"),
    ("gpu_limit", "4 GiB GiB", "malformed size 'GiB'"),
    ("gpu_threads", "--intra -1", "must be 0 to 4096"),
    ("gpu_threads", "--soft-placement maybe", "invalid choice"),
]


@pytest.mark.parametrize(("magic", "line", "problem"), BAD_INPUTS)
def test_bad_input_is_one_line_and_changes_nothing(shell, magic, line, problem) -> None:
    shell.run_line_magic("gpu_select", "0 --growth")
    shell.run_line_magic("gpu_limit", "4GiB")
    before = state()
    with pytest.raises(UsageError, match=problem) as caught:
        shell.run_line_magic(magic, line)
    assert "\n" not in str(caught.value)
    assert state() == before


def test_a_gpu_outside_the_admin_fence_is_refused(shell, monkeypatch) -> None:
    monkeypatch.setattr(plan.fence, "_KERNEL_START_FENCE", Fence({"CUDA_VISIBLE_DEVICES": "1"}))
    before = state()
    with pytest.raises(
        UsageError,
        match=r"GPU 0 is outside the GPUs assigned to this kernel "
        r"\(CUDA_VISIBLE_DEVICES='1'\); valid GPUs assigned to this kernel: 1 ",
    ):
        shell.run_line_magic("gpu_select", "0")
    assert state() == before
    shell.run_line_magic("gpu_select", "all")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"


def test_auto_without_nvml_is_refused(shell, monkeypatch) -> None:
    shell.run_line_magic("gpu_select", "1")
    before = state()
    clean_scenario = {"fault": "driver_not_loaded", "gpus": []}
    from jupyter_gpu import simulate

    path = os.environ[simulate.ENV_VAR]
    simulate.write_scenario(path, clean_scenario)
    with pytest.raises(UsageError, match="needs NVML"):
        shell.run_line_magic("gpu_select", "auto")
    assert state() == before


def fake_initialized_tensorflow(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """sys.modules entries that look like TensorFlow after its first op; returns the calls it receives."""
    calls: list[Any] = []
    context = types.SimpleNamespace(
        _context_handle=object(), _physical_devices=[], _visible_device_list=[], _virtual_device_map={}
    )
    context_module = types.ModuleType("tensorflow.python.eager.context")
    context_module.context_safe = lambda: context  # type: ignore[attr-defined]
    tensorflow = types.ModuleType("tensorflow")
    tensorflow.config = types.SimpleNamespace(  # type: ignore[attr-defined]
        set_soft_device_placement=lambda on: calls.append(("soft_placement", on))
    )
    monkeypatch.setitem(sys.modules, "tensorflow", tensorflow)
    monkeypatch.setitem(sys.modules, "tensorflow.python.eager.context", context_module)
    return calls


def test_after_tensorflow_initialized_the_magic_warns_and_changes_nothing(shell, monkeypatch, capsys) -> None:
    shell.run_line_magic("gpu_select", "0")
    calls = fake_initialized_tensorflow(monkeypatch)
    before = state()
    with pytest.warns(GPUAlreadyInitializedWarning) as caught:
        shell.run_line_magic("gpu_select", "1")
    message = str(caught[0].message)
    assert "TensorFlow already initialized the GPU" in message and "restart the kernel" in message
    assert "in effect: no visible GPU (CPU only)" in message
    assert state() == before
    with pytest.warns(GPUAlreadyInitializedWarning):  # every time, not once per location
        shell.run_line_magic("gpu_limit", "1GiB")
    assert state() == before
    shell.run_line_magic("gpu_threads", "--soft-placement on")  # placement still changes a live context
    assert current_plan().request.soft_placement is True and calls == [("soft_placement", True)]
    with pytest.warns(GPUAlreadyInitializedWarning, match="cannot change the number of threads"):
        shell.run_line_magic("gpu_threads", "--intra 2")


def test_nvml_showing_this_kernel_on_a_gpu_also_blocks_a_new_plan(shell, clean) -> None:
    clean.update(lambda data: data["gpus"][1].update(processes=[{"pid": os.getpid(), "memory_mib": 900}]))
    before = state()
    with pytest.warns(
        GPUAlreadyInitializedWarning,
        match=rf"NVML shows this kernel \(PID {os.getpid()}\) holding "
        "GPU memory: 900 MiB on GPU 1",
    ):
        shell.run_line_magic("gpu_select", "0")
    assert state() == before


def test_warning_is_a_userwarning_shown_by_default() -> None:
    assert issubclass(GPUAlreadyInitializedWarning, UserWarning)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        magics._warn_already_initialized("%gpu_select", "PyTorch", "in effect: x")
        magics._warn_already_initialized("%gpu_select", "PyTorch", "in effect: x")
    assert len(seen) == 2


def test_warnings_show_no_fake_location_one_sentence_a_line_and_filters_still_work() -> None:
    import subprocess

    code = (
        "import warnings\n"
        "from jupyter_gpu.core.errors import GPUPlanMismatchWarning, GPUAlreadyInitializedWarning, warn\n"
        "warn('JAX will not follow the GPU plan (GPU 1). Restart the kernel (%gpu_restart).', GPUPlanMismatchWarning)\n"
        "warnings.warn('an ordinary warning')\n"  # others are shown as Python shows them
        "warnings.filterwarnings('ignore', category=GPUAlreadyInitializedWarning)\n"
        "warn('silenced', GPUAlreadyInitializedWarning)\n"
        "warnings.filterwarnings('error', category=GPUPlanMismatchWarning)\n"
        "try:\n    warn('raised', GPUPlanMismatchWarning)\n"
        "except GPUPlanMismatchWarning as e:\n    print('raised', e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stderr.splitlines() == [
        "GPUPlanMismatchWarning: JAX will not follow the GPU plan (GPU 1).",
        "  Restart the kernel (%gpu_restart).",
        "<string>:4: UserWarning: an ordinary warning",
    ]
    assert run.stdout == "raised raised\n"


def test_the_too_late_warning_is_short_lines(shell, monkeypatch) -> None:
    shell.run_line_magic("gpu_select", "0")
    fake_initialized_tensorflow(monkeypatch)
    with pytest.warns(GPUAlreadyInitializedWarning) as caught:
        shell.run_line_magic("gpu_select", "1")
    from jupyter_gpu.core.errors import warning_text

    lines = warning_text(str(caught[0].message), GPUAlreadyInitializedWarning).splitlines()
    assert lines[0].startswith("GPUAlreadyInitializedWarning: TensorFlow already initialized the GPU in this kernel")
    assert lines[-2:] == [
        "  The GPU plan and the environment are unchanged.",
        "  To apply a new plan, restart the kernel (%gpu_restart) and run the magic before the first GPU use.",
    ]
    # Long sentences are wrapped to 100 columns, continued further in than the next sentence
    assert lines[1:3] == [
        "    cannot take effect:",
        "  it cannot change the GPU selection, memory limit and growth any more; in effect: no visible GPU",
    ]
    assert lines[3] == "    (CPU only), growth off, CUDA_VISIBLE_DEVICES=0."
    assert all(len(line) <= 100 for line in lines), lines


def test_admin_defaults_and_ceiling_from_the_environment(clean, monkeypatch, capsys) -> None:
    monkeypatch.setenv("JUPYTER_GPU_DEFAULT_SELECT", "auto:1")
    monkeypatch.setenv("JUPYTER_GPU_GROWTH", "1")
    monkeypatch.setenv("JUPYTER_GPU_MAX_LIMIT", "10%")
    ip = InteractiveShell.instance()
    magics.register(ip)
    try:
        out = capsys.readouterr().out
        assert "jupyter_gpu: GPU 0 (auto:1); growth on; limit GPU 0: 8 GiB (admin ceiling)" in flat(out)
        assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
        with pytest.raises(UsageError, match="above the admin ceiling max_limit=10%"):
            ip.run_line_magic("gpu_limit", "9GiB")
        ip.run_line_magic("gpu_limit", "2GiB")
        assert current_plan().memory_limit_bytes(0) == 2 * 1024**3
        ip.run_line_magic("gpu_limit", "off")
        assert current_plan().memory_limit_bytes(0) == 8 * 1024**3  # the ceiling stays
        ip.run_line_magic("config", "GpuMagics.max_limit = '4GiB'")
        assert current_plan().memory_limit_bytes(0) == 4 * 1024**3
        capsys.readouterr()
        for looser in ("'50%'", "''"):  # the kernel may tighten the admin's ceiling, never loosen or drop it
            ip.run_line_magic("config", f"GpuMagics.max_limit = {looser}")
            assert "can only be tightened" in capsys.readouterr().err
            assert current_plan().memory_limit_bytes(0) == 4 * 1024**3
    finally:
        magics.unregister(ip)


def test_traitlets_config_defaults(clean) -> None:
    from traitlets.config import Config

    ip = InteractiveShell.instance()
    saved = ip.config
    config = Config()
    config.GpuMagics.default_select = "1"
    config.GpuMagics.default_limit = "25%"
    ip.config = config
    try:
        magics.register(ip)
        assert current_plan().selected_indices == (1,) and current_plan().memory_limit_bytes(1) == 20 * 1024**3
    finally:
        magics.unregister(ip)
        ip.config = saved


def test_bad_defaults_do_not_break_loading(clean, monkeypatch, capsys) -> None:
    monkeypatch.setenv("JUPYTER_GPU_DEFAULT_SELECT", "auto:5")
    ip = InteractiveShell.instance()
    magics.register(ip)
    try:
        assert "the configured defaults were not applied: auto:5 needs 5 GPUs" in capsys.readouterr().err
        assert current_plan().selected_indices is None
    finally:
        magics.unregister(ip)


def test_help_is_the_manual(shell) -> None:
    for name in ("gpu_select", "gpu_limit", "gpu_status", "gpu_threads"):
        doc = shell.find_line_magic(name).__doc__
        assert "Example" in doc
    assert "cooperative" in shell.find_line_magic("gpu_limit").__doc__
    assert "--min-free" in shell.find_line_magic("gpu_select").__doc__


def test_unregister_removes_the_magics(clean) -> None:
    ip = InteractiveShell.instance()
    magics.register(ip)
    magics.unregister(ip)
    assert ip.find_line_magic("gpu_select") is None


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Cannot set memory growth on device when virtual devices configured"),
        RuntimeError("Physical devices cannot be modified after being initialized"),
        RuntimeError("Virtual devices cannot be modified after being initialized"),
        RuntimeError("Visible devices cannot be modified after being initialized"),
        AssertionError("Torch not compiled with CUDA enabled"),
    ],
)
def test_framework_errors_of_gpu_configuration_get_a_hint(error: BaseException) -> None:
    hint = magics.traceback_hint(error)
    assert hint is not None and hint.startswith("jupyter_gpu: ") and "The kernel's GPU plan:" in hint
    assert "\n" not in hint


def test_other_errors_get_no_hint() -> None:
    assert magics.traceback_hint(ValueError("invalid literal for int()")) is None
    assert magics.traceback_hint(None) is None


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_an_error_that_cannot_print_itself_adds_no_note_of_its_own(shell, capsys) -> None:
    assert magics.traceback_hint(_Unprintable()) is None
    assert magics.error_notes(_Unprintable()) == []
    capsys.readouterr()
    shell.run_cell("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()")
    captured = capsys.readouterr()
    assert "jupyter_gpu" not in captured.out + captured.err, captured


def test_loading_and_the_after_cell_check_import_no_adapter_while_no_framework_is_imported() -> None:
    import subprocess

    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'jupyter_gpu')\n"
        "ip.run_cell('x = 1')\n"
        "print(sorted(m for m in ('jupyter_gpu.frameworks', 'jupyter_gpu.plan', 'jupyter_gpu.sources.nvml',"
        " 'tensorflow', 'torch', 'jax') if m in sys.modules))"
    )
    out = subprocess.check_output([sys.executable, "-c", code], text=True)
    assert out.strip().splitlines()[-1] == "[]"


def test_status_says_when_this_kernel_holds_more_than_its_limit(shell, clean, capsys) -> None:
    shell.run_line_magic("gpu_limit", "8GiB")
    clean.update(lambda data: data["gpus"][1].update(processes=[{"pid": os.getpid(), "memory_mib": 10 * 1024}]))
    capsys.readouterr()
    shell.run_line_magic("gpu_status", "")
    lines = capsys.readouterr().out.splitlines()
    flagged = [line.strip() for line in lines if line.strip().startswith("!")]
    assert flagged == [
        "! this kernel holds 10 GiB on GPU 1, more than its %gpu_limit of 8 GiB plus 1 GiB for CUDA's own "
        "context: caps bind each framework's allocator, not a second framework or code that ignores them"
    ]
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("!"))
    assert "GPU 1 NVIDIA" in lines[at - 1]  # right under its GPU
    # JAX's 8 GiB pool under %gpu_limit 8GiB showed as 8.46 GiB in NVML on a real H100: the CUDA
    # context, which no cap binds (docs/real-gpu.md). That kernel is within its limit.
    clean.update(lambda data: data["gpus"][1].update(processes=[{"pid": os.getpid(), "memory_mib": 8663}]))
    shell.run_line_magic("gpu_status", "")
    assert "more than its %gpu_limit" not in capsys.readouterr().out


def test_a_size_typed_with_a_space_before_its_unit_is_accepted(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "0")
    shell.run_line_magic("gpu_limit", "4 GiB")
    assert current_plan().memory_limit_bytes(0) == 4 * 1024**3
    assert current_plan().request.limits == ("4GiB",)
    shell.run_line_magic("gpu_limit", "2 GiB 25 %")
    assert current_plan().logical_limits_bytes(0) == (2 * 1024**3, 20 * 1024**3)
    assert "2 logical GPUs of 2 GiB + 20 GiB" in capsys.readouterr().out


def test_min_free_typed_with_a_space_before_its_unit_is_accepted_as_gpu_limit_is(shell, capsys) -> None:
    shell.run_line_magic("gpu_select", "auto --min-free 8 GiB")
    assert current_plan().request.min_free == "8GiB" and current_plan().request.selection == "auto"
    shell.run_line_magic("gpu_select", "auto:1 --min-free=2 GiB --growth")
    assert current_plan().request.min_free == "2GiB" and current_plan().request.growth is True
    shell.run_line_magic("gpu_select", "auto --min-free 4096 --growth")  # a plain number: MiB, nothing joined
    assert current_plan().request.min_free == "4096"


def test_keras_with_another_backend_turning_growth_on_is_warned_once_and_the_advice_works(
    shell, monkeypatch, capsys
) -> None:
    from jupyter_gpu.frameworks import check_after_cell, env_conflict_messages, keras_status

    shell.run_line_magic("gpu_select", "0")
    config = types.ModuleType("keras.src.backend.config")
    config._BACKEND = "jax"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "keras.src.backend.config", config)
    os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"  # what importing Keras on JAX does
    [message] = check_after_cell()
    assert message.startswith("importing Keras (backend jax) set TF_FORCE_GPU_ALLOW_GROWTH=true, so TensorFlow")
    assert check_after_cell() == []  # once
    assert "at import it set TF_FORCE_GPU_ALLOW_GROWTH=true" in (keras_status() or "")
    shell.run_line_magic("gpu_select", "--growth")  # the first advice: growth becomes the plan
    assert env_conflict_messages() == [] and "at import it set" not in (keras_status() or "")
    shell.run_line_magic("gpu_select", "--no-growth")  # the second: growth off again, for TensorFlow too
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ and env_conflict_messages() == []
    config._BACKEND = "tensorflow"  # type: ignore[attr-defined]
    os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"  # set by code, not Keras: the general message
    [message] = check_after_cell()
    assert message.startswith("code in this kernel changed TensorFlow's settings after the GPU plan (GPU 0)")
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true makes it grow its memory, and the plan says growth off" in message


def test_the_childrens_caveat_says_whether_this_kernels_python_has_the_start_up_hook(
    shell, capsys, monkeypatch, tmp_path
) -> None:
    import site

    shell.run_line_magic("gpu_limit", "8GiB")  # this venv has jupyter_gpu installed, its .pth included
    installed = " ".join(capsys.readouterr().out.split())
    assert "where their Python has jupyter_gpu installed (this kernel's has), the TensorFlow and PyTorch caps" in (
        installed
    )
    # jupyter_gpu loaded from a folder of its own (PYTHONPATH, a checkout): no .pth in any site-packages
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(tmp_path)])
    monkeypatch.setattr(site, "ENABLE_USER_SITE", False)
    shell.find_magic("gpu_limit").__self__._caveats_shown = False  # the caveats in full, as in a new kernel
    shell.run_line_magic("gpu_limit", "4GiB")
    missing = " ".join(capsys.readouterr().out.split())
    assert (
        f"not the TensorFlow and PyTorch caps: this kernel's Python ({sys.executable}) has no jupyter_gpu start-up "
        "hook (jupyter_gpu_plan.pth is in none of its site-packages" in missing
    ), missing
    assert "this kernel's has" not in missing


def test_limit_caveats_are_printed_once_per_kernel_then_one_line(shell, capsys) -> None:
    shell.run_line_magic("gpu_limit", "8GiB")
    first = capsys.readouterr().out
    assert "Caps are cooperative: they bind the framework's allocator" in first
    assert "Python programs this kernel" in first
    shell.run_line_magic("gpu_limit", "4GiB")
    shell.run_line_magic("gpu_select", "0")
    shell.run_line_magic("gpu_limit", "")
    later = capsys.readouterr().out
    assert "programs this kernel starts" not in later and "Caps are cooperative: they bind" not in later
    assert later.count("(Caps are cooperative, as said above; %gpu_limit? says more.)") == 3
    assert "Caps are cooperative: they bind the framework's allocator" in shell.find_line_magic("gpu_limit").__doc__
