"""nbval settings for the example notebooks (``pytest --nbval tests example_notebooks``).

Here at the repository's root rather than in example_notebooks/, so the notebooks' folder, which
``scripts/lab.sh`` opens, holds only notebooks; pytest loads a root ``conftest.py`` for every
path below it. The hooks touch notebook cells only (items with nbval's ``skip_compare``).

- The notebooks' outputs were recorded on the simulated ``demo`` server standing still: their
  kernels are started with ``JUPYTER_GPU_SIMULATE=demo-still`` (nbval starts a notebook's kernel
  while setting up its first cell, with this process's environment), whatever ran before them in
  the same pytest run. (``demo`` itself moves over minutes; stored outputs could not match it.)
- The "Restart kernel and apply" offer under a too-late warning carries the kernel's id and a
  one-time token, new in every run (like ipywidgets' model ids, which nbval already skips): its
  MIME bundle is left out of the comparison. Its text/plain twin is still compared.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

NEW_IN_EVERY_RUN = ("application/vnd.jupyter-gpu.restart+json",)


def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:
        notebook = item.parent
        skip = getattr(notebook, "skip_compare", None)
        if skip is not None and not set(NEW_IN_EVERY_RUN) <= set(skip):
            notebook.skip_compare = (*skip, *NEW_IN_EVERY_RUN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: Any) -> Iterator[None]:
    if not hasattr(item.parent, "skip_compare"):  # not a notebook cell
        yield
        return
    saved = os.environ.get("JUPYTER_GPU_SIMULATE")
    os.environ["JUPYTER_GPU_SIMULATE"] = "demo-still"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_GPU_SIMULATE", None)
        else:
            os.environ["JUPYTER_GPU_SIMULATE"] = saved
