"""A command started with the plan: the environment it gets, and whether it is a Python interpreter.

:func:`child_environment` is the one place a child's environment is built from a plan (``jupyter-gpu
run``): this process's environment with every variable that carries the plan
(:func:`jupyter_gpu.frameworks.environment`: ``CUDA_DEVICE_ORDER``, ``CUDA_VISIBLE_DEVICES``, growth,
JAX's share), the same values the kernel writes for itself. The TensorFlow and PyTorch caps are
calls made inside a Python process, not variables: they reach a child only through what that child
runs at start, so :func:`is_python_command` tells the commands they can reach (an interpreter named
``python*``, or a file whose ``#!`` line names python) from those they cannot (a shell script, a
binary), and :func:`caps_note` says which in one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..core.i18n import _

if TYPE_CHECKING:
    from ..plan import GpuPlan

PLAN_VARIABLE = "JUPYTER_GPU_PLAN"
"""The variable that carries the plan's caps to a Python child's start-up hook (when it is set):
:data:`jupyter_gpu.plan.carry.PLAN_VARIABLE`, named here so a run with nothing to plan imports no planner."""

_PYTHON_NAME = re.compile(r"^python[0-9.]*(?:-dbg|d|m|u)?$")
_SHEBANG_BYTES = 256


def child_environment(plan: GpuPlan | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command started with ``plan`` gets: ``base`` (this process's environment)
    with every variable that carries the plan set, or removed where the plan unsets it. ``plan``
    None: nothing was asked for (no selection, limit, growth or admin ceiling), and as a kernel
    with nothing configured touches no variable, the environment is ``base`` as it is."""
    env = dict(os.environ if base is None else base)
    if plan is None:
        return env
    from .. import frameworks

    for key, value in frameworks.environment(plan).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def is_python_command(executable: str) -> bool:
    """Whether ``executable`` (a resolved path) is a Python interpreter: its name is ``python``,
    ``python3``, ``python3.11`` …, or it is a script whose ``#!`` line names python (``#!/usr/bin/env
    python3``, a virtual environment's console script). Nothing is run to find out."""
    if _PYTHON_NAME.match(os.path.basename(executable)):
        return True
    try:
        with open(executable, "rb") as file:
            first = file.read(_SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    words = first[2:].decode("utf-8", "replace").split()
    return any(_PYTHON_NAME.match(os.path.basename(word)) for word in words[:3])


def caps_note(plan: GpuPlan, command: Sequence[str], python: bool, env: Mapping[str, str]) -> str | None:
    """The one line about the TensorFlow and PyTorch caps for ``command`` (None when the plan has no
    caps): a non-Python command cannot get them; a Python one gets them at start when the plan's
    variable travels in ``env``, else only the environment part."""
    if not plan.limits_bytes:
        return None
    from .report import shown

    name = shown(os.path.basename(command[0]))
    if not python:
        return (
            _(
                "Caps cannot be applied to {name}: it is not a Python interpreter; it gets the GPU selection, "
                "growth and JAX's share (environment variables); Python programs it starts get them through "
                "JUPYTER_GPU_PLAN where jupyter_gpu is installed in their environment."
            )
            if PLAN_VARIABLE in env
            else _(
                "Caps cannot be applied to {name}: it is not a Python interpreter; it gets the GPU selection, "
                "growth and JAX's share (environment variables); the Python programs it starts get no "
                "TensorFlow or PyTorch cap."
            )
        ).format(name=name)
    if PLAN_VARIABLE in env:
        return _(
            "The TensorFlow and PyTorch caps are applied in {name} when it imports them (jupyter_gpu's "
            "start-up hook), as in a kernel; cooperative, one cap per process."
        ).format(name=name)
    return _(
        "{name} gets the GPU selection, growth and JAX's share (environment variables), not the TensorFlow "
        "and PyTorch caps (calls made inside a Python process): cap them in the program itself."
    ).format(name=name)


def run_label(command: Sequence[str]) -> str:
    """What a run's claim calls it: the script a Python command runs (``python -u train.py`` ->
    ``train.py``, ``python -m pkg.train`` -> ``pkg.train``), else the program's name (``./train.sh``
    -> ``train.sh``). Only the run's own user is ever shown it (docs/security.md)."""
    if not command:
        return ""
    program = os.path.basename(command[0])
    if not _PYTHON_NAME.match(program):  # a console script's arguments are its own, not python's
        return program
    arguments = iter(command[1:])
    for argument in arguments:
        if argument == "-m":
            return next(arguments, program)
        if argument == "-c":
            return f"{program} -c"
        if argument in ("-W", "-X", "-Q"):  # options that take a value
            next(arguments, None)
            continue
        if not argument.startswith("-"):
            return os.path.basename(argument)
    return program
