"""``jupyter-gpu doctor`` and ``%gpu_doctor`` in a folder another user can write (docs/security.md,
"Every request that carries a credential" and the doctor's section; issue 27 item 4).

The neighbour (a real second system user, ``tests/neighbours.py``) plants ``torch.py``, ``jax.py``,
``tensorflow.py``, ``jupyter_gpu.py``, ``pynvml.py`` and ``numpy.py`` in a 1777 folder; each writes a
mark file when imported. The victim (this test's user) runs the doctor *in that folder*: its
children must import jupyter_gpu and the frameworks from the installed environment only, so no
mark appears and every framework is reported with its real (CPU) build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from standin_site import child_env

PLANTED = ("torch", "jax", "tensorflow", "jupyter_gpu", "pynvml", "numpy")
CONSOLE_SCRIPT = Path(sys.executable).parent / "jupyter-gpu"


def plant(folder: str) -> None:
    """As the neighbour: a module for each name that leaves a mark when anybody imports it."""
    for name in PLANTED:
        path = os.path.join(folder, f"{name}.py")
        code = f"open({os.path.join(folder, 'imported-' + name)!r}, 'w').close()\nraise SystemExit('planted {name}')\n"
        with open(path, "w") as file:
            file.write(code)
        os.chmod(path, 0o644)


def marks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("imported-"))


@pytest.fixture
def planted(neighbour: Any, shared_tmp: Path) -> Path:
    neighbour.run(plant, str(shared_tmp))
    assert all(neighbour.owns(shared_tmp / f"{name}.py") for name in PLANTED)
    return shared_tmp


@pytest.mark.parametrize("simulated", [True, False], ids=["simulated", "real-nvml"])
def test_the_doctor_in_a_planted_folder_imports_nothing_from_it(planted: Path, simulated: bool) -> None:
    env = child_env(None, "demo")
    if not simulated:
        env.pop("JUPYTER_GPU_SIMULATE")  # no GPU here: NVML's error degrades the machine part
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), env["PYTHONPATH"]) if p)
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "doctor"], cwd=planted, env=env, capture_output=True, text=True, timeout=240
    )
    assert marks(planted) == [], (done.stdout, done.stderr)
    assert "planted" not in done.stdout + done.stderr
    for build in ("tensorflow[and-cuda]", "torch from PyTorch's CUDA wheel index", "jax[cuda12]"):
        assert f"CPU-only build: for a GPU, install {build}" in done.stdout, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr


def test_a_relative_scenario_still_reaches_the_children(tmp_path: Path) -> None:
    """The children start in their own private folder; a scenario named relative to the doctor's
    folder is named absolutely for them, so they simulate what the doctor does."""
    from jupyter_gpu.doctor import child_environment

    (tmp_path / "here.json").write_text("{}")
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        env = child_environment({"JUPYTER_GPU_SIMULATE": "here.json"}, {})
        assert env["JUPYTER_GPU_SIMULATE"] == str(tmp_path / "here.json")
        for kept in ("4", "demo", "demo-still", "/abs/x.json"):
            assert child_environment({"JUPYTER_GPU_SIMULATE": kept}, {})["JUPYTER_GPU_SIMULATE"] == kept
    finally:
        os.chdir(before)


def test_gpu_doctor_in_a_kernel_whose_notebook_sits_in_a_planted_folder(planted: Path) -> None:
    """The kernel works in the shared folder, as one whose notebook is kept there does. (The kernel
    itself imports from its notebook's folder: that is Python's and IPython's rule for notebooks,
    not jupyter_gpu's: a module the kernel has not imported yet, pynvml included, would come from
    there. So the kernel has read NVML once, as any kernel showing its GPUs has, before it moves.)"""
    from kernels import start

    env = child_env(None, "demo")
    for kernel in start(env):
        kernel.run("%load_ext jupyter_gpu\nimport jupyter_gpu.sources.nvml as n; n.snapshot()")
        kernel.run(f"import os; os.chdir({str(planted)!r})")
        assert kernel.value("os.getcwd()") == str(planted)
        out, err = kernel.run("%gpu_doctor")
        assert marks(planted) == [], (out, err)
        assert "CPU-only build: for a GPU, install torch from PyTorch's CUDA wheel index" in out, (out, err)
        assert "planted" not in out + err


def test_the_doctors_probes_are_the_only_child_processes_the_package_starts() -> None:
    """Issue 27 item 4 covers every child the package starts of its own: the doctor's probes. A new
    one must take the same care (no current folder on ``sys.path``, a private folder): this fails
    when one appears, so it is looked at. ``jupyter-gpu run`` starts no child of the package's: it
    starts the user's own COMMAND, in the user's folder with the user's ``sys.path``, as a shell
    would (docs/run.md) -- running the user's code as the user is its purpose."""
    import ast
    import re

    package = Path(__file__).resolve().parents[1] / "jupyter_gpu"
    calls = re.compile(r"(system|popen|fork|exec\w*|spawn\w*|posix_spawn\w*|create_subprocess_\w+|executable)$")

    def starts_children(tree: ast.AST) -> bool:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(
                alias.name.split(".")[0] in ("subprocess", "multiprocessing") for alias in node.names
            ):
                return True
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "subprocess",
                "multiprocessing",
            ):
                return True
            if isinstance(node, ast.ImportFrom) and any(alias.name == "ProcessPoolExecutor" for alias in node.names):
                return True
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("os", "asyncio", "sys")
                and calls.match(node.attr)
            ):
                return True
        return False

    found = {
        str(path.relative_to(package)) for path in package.rglob("*.py") if starts_children(ast.parse(path.read_text()))
    }
    # session/child.py: run's question to the command's interpreter (a private folder, imports nothing;
    # tests/test_cli_run.py::test_the_question_to_the_interpreter_is_asked_outside_the_callers_folder)
    assert found == {"doctor/children.py", "cli_run.py", "session/child.py"}, found
