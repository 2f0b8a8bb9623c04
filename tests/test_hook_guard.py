"""Issue 23 item 9: the user's own data and code never make jupyter_gpu's cell hooks end or freeze the kernel.

Every callback the package registers on a cell event goes through one guard
(:func:`jupyter_gpu.kernel.hooks.guarded`); these tests throw hostile exceptions at each of them:
``__str__``/``__repr__`` raising ``SystemExit``, ``BaseException`` subclasses, huge and recursive
``args``, ``__cause__`` cycles. ``tests/test_hook_guard_kernel.py`` does it in a real kernel.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_gpu.kernel import hooks, oom

PACKAGE = Path(__file__).parent.parent / "jupyter_gpu"


def _exit(*_: Any) -> Any:
    raise SystemExit(3)


class StrExits(Exception):
    __str__ = _exit


class ReprExits(Exception):
    __str__ = _exit
    __repr__ = _exit


class GeneratorStr(Exception):
    __str__ = lambda self: (_ for _ in ()).throw(SystemExit(3))  # noqa: E731 - the issue's own attack


class Targeted(Exception):
    """Prints itself for IPython; raises SystemExit only when jupyter_gpu reads it (what ended the kernel)."""

    def __str__(self) -> str:
        if "jupyter_gpu" in sys._getframe(1).f_code.co_filename:
            raise SystemExit(3)
        return "fine for IPython"


class Base(BaseException):
    def __str__(self) -> str:
        raise GeneratorExit


class CauseProperty(RuntimeError):
    @property  # type: ignore[override]
    def __cause__(self) -> Any:
        raise SystemExit(3)

    @property  # type: ignore[override]
    def args(self) -> Any:
        raise SystemExit(3)


class NameMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise SystemExit(3)


class NamedExits(Exception, metaclass=NameMeta):
    __str__ = _exit


class Spy:
    """An argument whose text must never be asked for (its repr would be the user's huge data)."""

    calls = 0

    def __repr__(self) -> str:
        Spy.calls += 1
        raise SystemExit(3)

    __str__ = __repr__


def _recursive() -> BaseException:
    looped: list[Any] = []
    looped.append(looped)
    return RuntimeError(looped, "CUDA out of memory.")


def _cycle() -> BaseException:
    first, second = RuntimeError("first"), RuntimeError("CUDA out of memory. 7")
    first.__cause__, second.__cause__ = second, first
    return first


HOSTILE = {
    "str raises SystemExit": lambda: StrExits(),
    "str and repr raise SystemExit": lambda: ReprExits("CUDA out of memory"),
    "the issue's generator throw": lambda: GeneratorStr(),
    "str raises SystemExit for jupyter_gpu only": lambda: Targeted(),
    "BaseException subclass whose str raises GeneratorExit": lambda: Base(),
    "SystemExit itself": lambda: SystemExit(3),
    "KeyboardInterrupt as the cell's error": lambda: KeyboardInterrupt(),
    "huge args": lambda: RuntimeError(*range(100_000)),
    "a huge list as the argument": lambda: RuntimeError(list(range(1_000_000))),
    "an argument whose repr raises": lambda: RuntimeError(Spy(), Spy()),
    "recursive args": _recursive,
    "cause cycle": _cycle,
    "properties for __cause__ and args": lambda: CauseProperty("CUDA out of memory."),
    "metaclass __name__ raises": lambda: NamedExits(),
    "1 MB message": lambda: RuntimeError("CUDA out of memory. " + "7" * 2**20),
}


@pytest.fixture
def loaded(clean: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[InteractiveShell]:
    """This process's shell with the whole extension loaded (every hook), %gpu_watch on."""
    import jupyter_gpu

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    ip = InteractiveShell.instance()
    jupyter_gpu.load_ipython_extension(ip)
    ip.run_line_magic("gpu_watch", "on")
    yield ip
    jupyter_gpu.unload_ipython_extension(ip)


def _ours(ip: InteractiveShell) -> list[tuple[str, Any]]:
    return [
        (event, callback)
        for event in ("pre_run_cell", "post_run_cell")
        for callback in ip.events.callbacks[event]
        if getattr(callback, "__wrapped__", None) is not None
    ]


def test_every_cell_event_of_the_package_is_registered_through_the_guard() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.name == "hooks.py" and path.parent.name == "kernel":
            continue
        assert not re.search(r"events\s*\.\s*register\b", path.read_text()), path


def test_the_loaded_extension_hooks_every_cell_event_through_the_guard(loaded: InteractiveShell) -> None:
    ours = _ours(loaded)
    assert len(ours) == 4, ours  # the after-cell check, the kernel report, %gpu_watch before and after
    assert all(callback.__qualname__.startswith("guarded(") for _, callback in ours)


@pytest.mark.parametrize("name", HOSTILE)
def test_no_hook_lets_a_hostile_error_escape(loaded: InteractiveShell, name: str, capsys: Any) -> None:
    error = HOSTILE[name]()
    result = SimpleNamespace(error_in_exec=error, error_before_exec=None, success=False)
    for event, callback in _ours(loaded):
        callback(result if event == "post_run_cell" else SimpleNamespace(raw_cell="x"))
    loaded.events.trigger("post_run_cell", result)  # as IPython calls them, all at once
    assert Spy.calls == 0


@pytest.mark.parametrize("name", HOSTILE)
def test_the_notes_and_the_recogniser_never_raise_on_hostile_errors(name: str) -> None:
    error = HOSTILE[name]()
    assert isinstance(hooks.error_notes(error), list)
    oom.recognize(error)
    assert Spy.calls == 0


@pytest.mark.parametrize(
    "name",
    [
        "str raises SystemExit",
        "the issue's generator throw",
        "str raises SystemExit for jupyter_gpu only",
        "metaclass __name__ raises",
    ],
)
def test_a_cell_raising_such_an_error_leaves_the_shell_and_its_variables(loaded: InteractiveShell, name: str) -> None:
    loaded.user_ns["make"] = HOSTILE[name]
    loaded.run_cell("kept = 41")
    loaded.run_cell("raise make()")  # before the guard: SystemExit out of run_cell (the kernel exits)
    loaded.run_cell("kept += 1")
    assert loaded.user_ns["kept"] == 42


def test_the_recogniser_reads_the_message_without_str_of_the_users_arguments() -> None:
    assert oom.error_text(RuntimeError(Spy(), "CUDA out of memory.")) == "CUDA out of memory."
    assert oom.error_text(RuntimeError("x" * 2**20)) == "x" * 20_000
    assert oom.error_text(StrExits()) == ""  # an error that cannot print itself says nothing
    assert Spy.calls == 0
    found = oom.recognize(_cycle())
    assert found is not None and found.framework == "PyTorch"


def test_a_guarded_callback_swallows_everything_and_says_so_in_one_line(capsys: Any) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    hooks.guarded(interrupted, "the test hook")()
    hooks.guarded(_exit, "the test hook")()
    hooks.guarded(lambda: (_ for _ in ()).throw(NamedExits()), "the test hook")()
    assert capsys.readouterr().err.splitlines() == [
        "jupyter_gpu: the test hook was interrupted; the cell and its variables are unaffected.",
        "jupyter_gpu: the test hook failed (SystemExit); the cell and its variables are unaffected.",
        "jupyter_gpu: the test hook failed (NamedExits); the cell and its variables are unaffected.",
    ]


def test_a_stderr_that_raises_cannot_get_out_of_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", SimpleNamespace(write=_exit, flush=_exit))
    hooks.guarded(_exit, "the test hook")()


def test_on_and_off_cell_event_register_once_and_remove(clean: Any) -> None:
    ip = InteractiveShell.instance()
    calls: list[int] = []

    def callback(*_: Any) -> None:
        calls.append(1)

    hooks.on_cell_event(ip, "post_run_cell", callback, "the test hook")
    hooks.on_cell_event(ip, "post_run_cell", callback, "the test hook")  # again: no effect
    ip.run_cell("pass")
    hooks.off_cell_event(ip, "post_run_cell", callback)
    hooks.off_cell_event(ip, "post_run_cell", callback)  # again: no effect
    ip.run_cell("pass")
    assert calls == [1]
    assert hooks.registered(ip, "post_run_cell", callback) is None
