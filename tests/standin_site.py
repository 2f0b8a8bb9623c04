"""The CUDA stand-in for child processes: a ``sitecustomize`` that imports it at interpreter start.

Importable as ``standin_site``. The doctor starts each framework in a child process; a folder made
by :func:`standin_site` first on that child's ``PYTHONPATH`` makes its TensorFlow and PyTorch (CPU
builds) see the simulated GPUs through ``tests/standin/cuda_standin.py``, as the kernels of
``kernels.standin_kernel`` do. ``extra`` is more code for that file (e.g. a framework that ignores a
call), run after the stand-in is imported. :func:`plan_site` adds the tree's ``jupyter_gpu_plan.pth``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

STANDIN = Path(__file__).parent / "standin"


def standin_site(folder: Path, extra: str = "") -> Path:
    """Write ``folder/sitecustomize.py`` (the stand-in, then ``extra``) and return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    code = f"import sys\nsys.path.insert(0, {str(STANDIN)!r})\nimport cuda_standin\n{extra}"
    (folder / "sitecustomize.py").write_text(code)
    return folder


ROOT = Path(__file__).resolve().parents[1]


def plan_site(folder: Path, standin: bool = True) -> Path:
    """A folder for ``PYTHONPATH`` whose ``sitecustomize`` imports the CUDA stand-in (``standin``),
    then processes the tree's ``jupyter_gpu_plan.pth`` as site.py processes a ``.pth`` file in
    site-packages: children started with it apply a carried ``JUPYTER_GPU_PLAN`` from the file under
    test, whatever copy (or none) an editable install left in site-packages. The stand-in comes
    first, as in a kernel of ``kernels.standin_kernel`` (its start-up file runs before jupyter_gpu watches)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["import site, sys"]
    if standin:
        lines += [
            f"sys.path.insert(0, {str(STANDIN)!r})",
            "import cuda_standin",
            # The stand-in plays the driver, which exists before any program: its patches run before
            # every other post-import hook, the hooks an installed jupyter_gpu_plan.pth registered
            # earlier in site-packages included (TensorFlow lists its GPUs once).
            "from jupyter_gpu.core import import_hooks",
            "for waiting in import_hooks._callbacks.values():",
            "    waiting.sort(key=lambda callback: getattr(callback, '__module__', '') != 'cuda_standin')",
        ]
    lines.append(f"site.addpackage({str(ROOT)!r}, 'jupyter_gpu_plan.pth', set())")
    (folder / "sitecustomize.py").write_text("\n".join(lines) + "\n")
    return folder


def mixed_workstation(path: Path) -> Path:
    """The stand-in's workstation (a T400 as GPU 0, an RTX A6000 as GPU 1) as a scenario file.

    Read from the stand-in's source, not imported: importing it here would patch this test
    process's own TensorFlow and PyTorch imports."""
    tree = ast.parse((STANDIN / "cuda_standin.py").read_text())
    value = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MIXED_WORKSTATION" for t in node.targets)
    )
    path.write_text(json.dumps(ast.literal_eval(value)))
    return path


def child_env(site: Path | None, scenario: str | Path, **more: str) -> dict[str, str]:
    """This process's environment with ``site`` first on ``PYTHONPATH`` and the scenario simulated;
    no CUDA variable and no jupyter_gpu setting of the developer's own shell."""
    kept = ("JUPYTER_GPU_CLAIMS_DIR",)  # the test's own claims folder (conftest), never /tmp's
    env = {
        key: value
        for key, value in os.environ.items()
        if key in kept or not key.startswith(("CUDA_", "NVIDIA_", "JUPYTER_GPU_"))
    }
    paths = [str(site)] if site is not None else []
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(PYTHONPATH=os.pathsep.join(paths), JUPYTER_GPU_SIMULATE=str(scenario), TF_CPP_MIN_LOG_LEVEL="3")
    env.update(more)
    return env
