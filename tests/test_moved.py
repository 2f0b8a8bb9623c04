"""The 0.1 module paths keep working for one release (jupyter_gpu/_moved.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from jupyter_gpu._moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_each_old_path_is_the_new_module_itself(old: str, new: str) -> None:
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error')\n"
        f"new = importlib.import_module('jupyter_gpu.{new}')\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        f"    old = importlib.import_module('jupyter_gpu.{old}')\n"
        "assert old is new, (old, new)\n"
        f"assert new.__name__ == new.__spec__.name == 'jupyter_gpu.{new}', new.__spec__\n"
        "assert [w.category.__name__ for w in caught] == ['DeprecationWarning'], caught\n"
        f"assert 'jupyter_gpu.{new}' in str(caught[0].message)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_names_from_old_paths_import() -> None:
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from jupyter_gpu.kernel_report import write_report, parse_report\n"
        "from jupyter_gpu.widget import GPUMonitor\n"
        "from jupyter_gpu.snapshots import Snapshot\n"
        "import jupyter_gpu.nvml as old\n"
        "from jupyter_gpu.sources import nvml\n"
        "assert old is nvml\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_names_are_still_missing() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("jupyter_gpu.no_such_module")


def test_every_new_path_exists() -> None:
    for new in MOVED.values():
        importlib.import_module(f"jupyter_gpu.{new}")
