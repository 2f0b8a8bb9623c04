"""A command started with the plan: the environment it gets, and whether it is a Python interpreter.

:func:`child_environment` is the one place a child's environment is built from a plan (``jupyter-gpu
run``): this process's environment with every variable that carries the plan
(:func:`jupyter_gpu.frameworks.environment`: ``CUDA_DEVICE_ORDER``, ``CUDA_VISIBLE_DEVICES``, growth,
JAX's share), the same values the kernel writes for itself. The TensorFlow and PyTorch caps are
calls made inside a Python process, not variables: they reach a child only through what that child
runs at start, so :func:`is_python_command` tells the commands they can reach (an interpreter named
``python*``, or a file whose ``#!`` line names python) from those they cannot (a shell script, a
binary), :func:`plan_hook_in` asks a Python command's interpreter whether jupyter_gpu's start-up
hook runs there (it does only where jupyter_gpu is installed in that interpreter's environment), and
:func:`caps_note` says in one line which of these holds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.files import private_folder
from ..core.i18n import _
from ..core.text import display_text

if TYPE_CHECKING:
    from ..plan import GpuPlan

PLAN_VARIABLE = "JUPYTER_GPU_PLAN"
"""The variable that carries the plan's caps to a Python child's start-up hook (when it is set):
:data:`jupyter_gpu.plan.carry.PLAN_VARIABLE`, named here so a run with nothing to plan imports no planner."""

_PYTHON_NAME = re.compile(r"^python[0-9.]*(?:-dbg|d|m|u)?$")
_SHEBANG_BYTES = 256
_PATH_CHARS = 200  # an interpreter's path as the report shows it (the user's own: whole, but bounded)

HOOK_PROBE_TIMEOUT_S = 20.0
"""How long :func:`plan_hook_in` waits for the interpreter's answer (a Python start takes tens of
milliseconds; an environment on a slow network file system, seconds)."""

# Interpreter options that change what runs at start-up: -S (no site: no .pth file runs), -s (no user
# site-packages), -I (isolated: -E -s -P). The probe is started with those the command gives.
_START_UP_FLAGS = frozenset("SsIE")
# Options whose value is the next argument, and those that end the options (the program follows).
_FLAGS_WITH_VALUE = frozenset("WX")
_FLAGS_ENDING = frozenset("cm")

# Run in the command's interpreter, with the command's environment: whether the start-up hook of
# jupyter_gpu_plan.pth registered the carried plan's hooks. An interpreter without jupyter_gpu (or
# with a version before the question existed) answers "no"; one whose hook failed printed its line.
_HOOK_PROBE = (
    "import sys\n"
    "s = sys.modules.get('jupyter_gpu._startup')\n"
    "ask = getattr(s, 'waits_to_apply_the_carried_plan', None)\n"
    "sys.stdout.write('\\nyes\\n' if ask is not None and ask() else '\\nno\\n')\n"
)


@dataclass(frozen=True)
class HookAnswer:
    """What a Python command's interpreter said about jupyter_gpu's start-up hook.

    ``interpreter``: the program asked (the command itself, or the one its ``#!`` line names);
    ``runs``: True (the carried plan's hooks are registered there), False (they are not: jupyter_gpu
    is not installed in that environment, or the command's options skip it), None (no answer:
    ``why`` says what happened)."""

    interpreter: str
    runs: bool | None
    why: str = ""


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
    words = _shebang(executable)
    return any(_PYTHON_NAME.match(os.path.basename(word)) for word in words[:3])


def _shebang(executable: str) -> list[str]:
    """The words of ``executable``'s ``#!`` line ([] when it has none or cannot be read)."""
    try:
        with open(executable, "rb") as file:
            first = file.read(_SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return []
    return first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []


def _interpreter(command: Sequence[str], executable: str, env: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The interpreter that runs ``command``'s Python and its start-up options: ``executable`` and
    the options before the program (``python -S train.py``), or, for a script, what its ``#!`` line
    names (``#!/usr/bin/env python3`` looked up in ``env``'s PATH, as env does). None when no
    interpreter can be named."""
    if _PYTHON_NAME.match(os.path.basename(executable)):
        return executable, _start_up_flags(command[1:])
    words = _shebang(executable)
    if words and os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        found = shutil.which(names[0], path=env.get("PATH", os.defpath)) if names else None
        return (found, _start_up_flags(words[words.index(names[0]) + 1 :])) if found else None
    return (words[0], _start_up_flags(words[1:])) if words else None


def _start_up_flags(arguments: Sequence[str]) -> list[str]:
    """The options among ``arguments`` (those before the program) that change what runs at start-up."""
    flags: list[str] = []
    skip = False
    for argument in arguments:
        if skip:
            skip = False
            continue
        if argument == "-" or not argument.startswith("-") or argument.startswith("--"):
            if argument.startswith("--") and argument != "--":
                continue  # --version, --help: the program does not start anyway
            break
        for position, letter in enumerate(argument[1:], start=1):
            if letter in _START_UP_FLAGS:
                flags.append(f"-{letter}")
            if letter in _FLAGS_WITH_VALUE:
                skip = position == len(argument) - 1  # "-W error" takes the next argument; "-Werror" not
                break
            if letter in _FLAGS_ENDING:
                return flags
    return flags


def plan_hook_in(command: Sequence[str], executable: str, env: Mapping[str, str]) -> HookAnswer:
    """Ask the interpreter that will run ``command`` (started with its start-up options and ``env``,
    the environment the command gets) whether jupyter_gpu's start-up hook registered the carried
    plan: the TensorFlow and PyTorch caps reach the command only where it did. One short interpreter
    start (``-c``, nothing of the command runs; :data:`HOOK_PROBE_TIMEOUT_S` at most)."""
    found = _interpreter(command, executable, env)
    if found is None:
        return HookAnswer(executable, None, _("its #! line names no interpreter that could be found"))
    interpreter, flags = os.path.abspath(found[0]), found[1]
    # In a private folder, not the caller's: the question imports nothing, but the interpreter's
    # start-up resolves a relative PYTHONPATH entry against its folder (docs/security.md).
    folder = private_folder("jupyter-gpu-run-")
    try:
        done = subprocess.run(
            [interpreter, *flags, "-c", _HOOK_PROBE],
            env=dict(env),
            cwd=folder or "/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=HOOK_PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return HookAnswer(
            interpreter, None, _("it did not answer within {seconds:.0f} s").format(seconds=HOOK_PROBE_TIMEOUT_S)
        )
    except OSError as error:
        return HookAnswer(interpreter, None, error.strerror or str(error))
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    # The last line: a sitecustomize or .pth of that environment may print before the answer.
    answer = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode == 0 and answer in ("yes", "no"):
        return HookAnswer(interpreter, answer == "yes")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    else:
        said = _("it answered {answer!r}").format(answer=answer[:80])
    return HookAnswer(interpreter, None, said)


def caps_note(
    plan: GpuPlan, command: Sequence[str], python: bool, env: Mapping[str, str], hook: HookAnswer | None = None
) -> str | None:
    """The one line about the TensorFlow and PyTorch caps for ``command`` (None when the plan has no
    caps): a non-Python command cannot get them; a Python one gets them at start when the plan's
    variable travels in ``env`` and its interpreter runs jupyter_gpu's start-up hook (``hook``, from
    :func:`plan_hook_in`; None: not asked), else only the environment part."""
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
    if PLAN_VARIABLE in env and hook is not None and hook.runs is False:
        return _(
            "The TensorFlow and PyTorch caps cannot be applied in {name}: its interpreter ({interpreter}) does not "
            "run jupyter_gpu's start-up hook (jupyter_gpu is not installed in its environment, or its options "
            "turn site-packages off); it gets the GPU selection, growth and JAX's share (environment variables). "
            "Install jupyter_gpu in that environment, or cap the frameworks in the program."
        ).format(name=name, interpreter=display_text(hook.interpreter, _PATH_CHARS))
    if PLAN_VARIABLE in env and hook is not None and hook.runs is None:
        return _(
            "Could not tell whether {name}'s interpreter ({interpreter}) runs jupyter_gpu's start-up hook "
            "({why}): the TensorFlow and PyTorch caps are applied only where it does; the GPU selection, growth "
            "and JAX's share are set either way."
        ).format(
            name=name, interpreter=display_text(hook.interpreter, _PATH_CHARS), why=display_text(hook.why, _PATH_CHARS)
        )
    if PLAN_VARIABLE in env:
        return _(
            "The TensorFlow and PyTorch caps are applied in {name} when it imports them (jupyter_gpu's "
            "start-up hook), as in a kernel; cooperative, one cap per process."
        ).format(name=name)
    return _(
        "{name} gets the GPU selection, growth and JAX's share (environment variables), not the TensorFlow "
        "and PyTorch caps (calls made inside a Python process): cap them in the program itself."
    ).format(name=name)


PLAN_HOOK_FILE = "jupyter_gpu_plan.pth"
"""The start-up hook's file, installed into site-packages with jupyter_gpu (pyproject.toml)."""


def hook_installed_here() -> bool:
    """Whether this interpreter runs jupyter_gpu's start-up hook when it starts: ``jupyter_gpu_plan.pth``
    lies in one of its site-packages folders (the user's own included, where enabled) and ``site`` ran.
    A kernel that loads jupyter_gpu from a folder of its own (``PYTHONPATH``, a checkout) has none, nor
    then do the Python programs it starts with its interpreter. A few ``stat`` calls, nothing imported."""
    import site
    import sys

    if sys.flags.no_site:
        return False
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return any(os.path.isfile(os.path.join(folder, PLAN_HOOK_FILE)) for folder in folders)


def kernel_children_note() -> str | None:
    """The kernel's caveat about the programs it starts when its own Python lacks the start-up hook
    (:func:`hook_installed_here`); None when it has it (the report's usual caveat holds)."""
    if hook_installed_here():
        return None
    import sys

    return _(
        "Python programs this kernel starts (!python, subprocess, spawn workers) inherit the GPU selection, growth "
        "and JAX's share, not the TensorFlow and PyTorch caps: this kernel's Python ({python}) has no jupyter_gpu "
        "start-up hook ({file} is in none of its site-packages: jupyter_gpu is loaded from a folder of its own), "
        "and programs started with it have none either. Cap the frameworks in those programs, or install "
        "jupyter_gpu in that environment. Other programs get the variables only."
    ).format(python=display_text(sys.executable, _PATH_CHARS), file=PLAN_HOOK_FILE)


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
