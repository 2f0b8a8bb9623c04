"""`import jupyter_gpu` stays cheap: no IPython, widgets, server, NVML binding or framework."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "IPython",
    "ipywidgets",
    "tornado",
    "jupyter_server",
    "ipykernel",
    "pynvml",
    "psutil",
    "tensorflow",
    "keras",
    "torch",
    "jax",
    "prometheus_client",
    "traitlets",
)


def test_import_pulls_in_nothing_heavy():
    code = "import sys, json; import jupyter_gpu; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", code], text=True)))
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_faces_are_loaded_lazily():
    code = (
        "import sys, jupyter_gpu; jupyter_gpu.snapshot; "
        "print('jupyter_gpu.sources.nvml' in sys.modules, 'jupyter_gpu.cli' in sys.modules)"
    )
    assert subprocess.check_output([sys.executable, "-c", code], text=True).split() == ["False", "False"]
