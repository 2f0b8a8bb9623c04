"""nbval runs the example notebooks on the simulated 'demo' GPUs unless a machine asks otherwise."""

import os

os.environ.setdefault("JUPYTER_GPU_SIMULATE", "demo")
