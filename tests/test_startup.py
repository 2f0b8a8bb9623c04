"""The ``jupyter_gpu_simulate.pth`` hook and ``jupyter_gpu._startup``: safe at every interpreter start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_pth(env_value: str | None, code: str = "", importable: bool = True) -> subprocess.CompletedProcess[str]:
    """Process the worktree's .pth file the way site.py does at start-up, then run ``code``."""
    env = {key: value for key, value in os.environ.items() if key not in ("JUPYTER_GPU_SIMULATE", "PYTHONPATH")}
    if env_value is not None:
        env["JUPYTER_GPU_SIMULATE"] = env_value
    if importable:
        env["PYTHONPATH"] = str(ROOT)
    # -S: no site-packages (so jupyter_gpu is importable only through PYTHONPATH, and the installed
    # copy of the .pth file does not run); then the worktree's .pth is processed exactly like site.py does.
    program = f"import site, sys; site.addpackage({str(ROOT)!r}, 'jupyter_gpu_simulate.pth', set()); {code}"
    return subprocess.run(
        [sys.executable, "-S", "-c", program], capture_output=True, text=True, env=env, cwd="/", timeout=60
    )


def test_unset_variable_imports_nothing():
    result = run_pth(None, "print(sorted(m for m in sys.modules if m.startswith('jupyter_gpu')))")
    assert result.stdout.strip() == "[]" and result.stderr == ""


@pytest.mark.parametrize("value", ["0", "off"])
def test_off_values_register_no_hook(value):
    result = run_pth(value, "import jupyter_gpu.core.import_hooks as h; print(sorted(h._callbacks))")
    assert result.stdout.strip() == "[]" and result.stderr == ""


def test_a_hook_whose_package_is_gone_prints_one_line_and_no_traceback():
    # Given the .pth file left behind while jupyter_gpu itself cannot be imported
    result = run_pth("demo", "print('started')", importable=False)
    # Then the interpreter starts, with one line saying why the simulation is not there
    assert result.returncode == 0 and result.stdout.strip() == "started"
    assert "Traceback" not in result.stderr and "Error processing line" not in result.stderr
    assert result.stderr.splitlines() == ["jupyter_gpu: simulated GPUs not installed: No module named 'jupyter_gpu'"]


def test_a_malformed_value_is_refused_with_one_line_when_pynvml_is_imported():
    env = {**os.environ, "JUPYTER_GPU_SIMULATE": "four", "PYTHONPATH": str(ROOT)}
    code = "import pynvml; import jupyter_gpu.simulate as s; print(s.installed())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "None"
    (line,) = result.stderr.splitlines()
    assert line.startswith("jupyter_gpu: simulated GPUs not installed: JUPYTER_GPU_SIMULATE='four': expected")


def test_zero_means_the_real_nvml_in_every_reader():
    env = {**os.environ, "JUPYTER_GPU_SIMULATE": "0", "PYTHONPATH": str(ROOT)}
    code = "import pynvml; import jupyter_gpu.simulate as s; print(s.installed())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.stdout.strip() == "None" and result.stderr == ""
