"""Run by ``jupyter_gpu_simulate.pth`` at interpreter start, only when ``JUPYTER_GPU_SIMULATE`` is set.

It registers a post-import hook and nothing else: the simulation itself (:mod:`jupyter_gpu.simulate`)
is imported and installed the moment some library imports ``pynvml``, so a process that never
reads NVML pays a fraction of a millisecond. With the variable unset (or ``0``/``false``/``off``/
``no``) the ``.pth`` line costs one dictionary look-up and imports nothing.

Nothing here may print a traceback at interpreter start or break the user's import: the ``.pth``
line catches any failure (jupyter_gpu uninstalled or broken) and prints one line; a malformed
value of the variable is refused with one line when ``pynvml`` is imported, and then every NVML
reader in the process sees the real GPUs.
"""

from __future__ import annotations

import sys
from types import ModuleType

from .core.import_hooks import pending, when_imported


def _install(_pynvml: ModuleType) -> None:
    try:
        from .simulate import install_from_environment

        install_from_environment()
    except Exception as error:  # interpreter start-up and the user's import must never fail because of us
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"jupyter_gpu: simulated GPUs not installed: {first_line}", file=sys.stderr)


def install_simulation_when_pynvml_is_imported() -> None:
    import os

    value = os.environ.get("JUPYTER_GPU_SIMULATE", "")
    if value.strip().lower() in ("", "0", "false", "off", "no"):  # simulate.OFF_VALUES, without importing it
        return
    pin_relative_path(value)
    # Once, however often the .pth file is processed (a venv whose lib64 links to lib has it twice).
    if _install not in pending("pynvml"):
        when_imported("pynvml", _install)


def pin_relative_path(value: str) -> None:
    """A relative scenario path is resolved once, against the folder the interpreter started in,
    and written back to the variable: a later ``chdir`` (a kernel's notebook folder) and every child
    process then name the same file (docs/security.md). Presets and absolute paths are left alone."""
    import os

    spec = value.strip()
    if spec.isdigit() or spec in ("demo", "demo-still") or os.path.isabs(spec) or spec.startswith("~"):
        return
    if "\0" not in spec and os.path.isfile(spec):  # anything else is refused later, as the user wrote it
        os.environ["JUPYTER_GPU_SIMULATE"] = os.path.abspath(spec)
