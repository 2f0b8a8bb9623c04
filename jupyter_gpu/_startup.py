"""Run by ``jupyter_gpu_simulate.pth`` at interpreter start, only when ``JUPYTER_GPU_SIMULATE`` is set.

It registers a post-import hook and nothing else: the simulation itself (:mod:`jupyter_gpu.simulate`)
is imported and installed the moment some library imports ``pynvml``, so a process that never
reads NVML pays a fraction of a millisecond. With the variable unset (or ``0``/``false``/``off``/
``no``) the ``.pth`` line costs one dictionary look-up and imports nothing.

Nothing here may print a traceback at interpreter start or break the user's import: the ``.pth``
line catches any failure (jupyter_gpu uninstalled or broken) and prints one line; a malformed
value of the variable is refused with one line when ``pynvml`` is imported, and then every NVML
reader in the process sees the real GPUs.

**A GPU plan carried to a child** (``jupyter_gpu_plan.pth``, only when ``JUPYTER_GPU_PLAN`` is set;
docs/children.md). A kernel with a memory limit, or ``jupyter-gpu run``, puts its plan in that
variable (:mod:`jupyter_gpu.plan.carry`); every Python interpreter started with it registers a
post-import hook for TensorFlow, PyTorch and JAX here, and nothing else. When the child imports one,
the hook reads the plan (strictly: a malformed value, or a ``CUDA_VISIBLE_DEVICES`` that is not the
plan's selection, gets one line on stderr and nothing is applied), makes it the process's plan
(:func:`jupyter_gpu.frameworks.follow_carried_plan`) and runs that framework's own hook, the one a
kernel runs (:meth:`jupyter_gpu.frameworks.Framework.hook`): TensorFlow's logical devices with the
memory limit, PyTorch's memory fraction queued for its lazy CUDA start. A child that never imports
a framework pays for the hook's registration only (about 0.1 ms), and reading the plan costs
nothing until then.

Two ``.pth`` files rather than one line doing both: the simulation is for developers and tests,
the plan is for users' programs; each line tests its own variable (one dictionary look-up, so an
interpreter with neither pays two look-ups and one more small file read, well under the 2 ms the
start-up may cost: ``benchmarks/bench_startup_hook.py``), fails with its own one line, and can be
removed alone.
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
        _say(N_("simulated GPUs not installed: {error}"), error=_first_line(error))


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


# -- the plan carried to a child --------------------------------------------------------------------

_FRAMEWORK_MODULES = ("tensorflow", "torch", "jax")
_followed: list[bool] = []  # once read: [True] when the plan is this process's, [False] when refused


def apply_carried_plan_when_a_framework_is_imported() -> None:
    """The ``jupyter_gpu_plan.pth`` line: with ``JUPYTER_GPU_PLAN`` set (not empty), a post-import hook
    for each framework; nothing is read or imported until one of them is imported."""
    import os

    if not os.environ.get("JUPYTER_GPU_PLAN", "").strip():
        return
    for name in _FRAMEWORK_MODULES:
        # Once, however often the .pth file is processed (a venv whose lib64 links to lib has it twice).
        if _apply_carried_plan not in pending(name):
            when_imported(name, _apply_carried_plan)


def waits_to_apply_the_carried_plan() -> bool:
    """Whether this interpreter's start-up registered the carried plan's hook (and no framework has
    been imported since): what ``jupyter-gpu run`` asks a Python command's interpreter before it
    says the caps will be applied (:func:`jupyter_gpu.session.child.plan_hook_in`)."""
    return all(_apply_carried_plan in pending(name) for name in _FRAMEWORK_MODULES)


def _apply_carried_plan(module: ModuleType) -> None:
    """Right after ``module`` (a framework) was imported: the plan's calls, as a kernel's hook makes them."""
    try:
        from . import frameworks

        if not _followed:
            _followed.append(_follow())
        if _followed[0]:
            framework = next(f for f in frameworks.FRAMEWORKS if f.module_name == module.__name__)
            framework.hook(module)
    except Exception as error:  # the user's import must never fail because of us
        _say(
            N_("the GPU plan's caps are not applied to {module}: {error}"),
            module=module.__name__,
            error=_first_line(error),
        )


def _follow() -> bool:
    """Read ``JUPYTER_GPU_PLAN`` and make it this process's plan; False (and one line) when it cannot be."""
    import os

    from . import frameworks
    from .core.visibility import CudaEnv
    from .plan.carry import WireError, plan_from_environment

    # A kernel started with the variable that made its own plan (a magic) rewrote or removed it:
    # what is read here is that plan, or nothing.
    value = os.environ.get("JUPYTER_GPU_PLAN", "")
    if not value.strip():
        return False  # removed since the start (del os.environ[...]): the program opted out
    try:
        carried = plan_from_environment(value)
    except WireError as error:
        _say(
            N_("the GPU plan's caps are not applied: JUPYTER_GPU_PLAN is malformed: {error}"), error=_first_line(error)
        )
        return False
    mismatch = carried.mismatch(CudaEnv.now())
    if mismatch is not None:
        _say(N_("the GPU plan's caps are not applied: {reason}"), reason=mismatch)
        return False
    frameworks.follow_carried_plan(carried.plan, carried.known_gpus())
    return True


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def N_(message: str) -> str:
    """Mark a message (as :func:`jupyter_gpu.core.i18n.N_`), without importing the translations at start-up."""
    return message


def _say(template: str, **fields: str) -> None:
    """One line on stderr, in the user's language (English if even that fails: start-up must go on)."""
    try:
        from .core.i18n import _

        message = _(template).format(**fields)
    except Exception:
        message = template.format(**fields)
    print(f"jupyter_gpu: {message}", file=sys.stderr)
