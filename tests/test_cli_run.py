"""``jupyter-gpu run -- COMMAND``: the plan for one command (issue 30, items 1 and 5).

Every run is a real ``python -m jupyter_gpu.cli run`` process on simulated GPUs (the scenario file of
the ``scenario`` fixture, which children see too), and its command a real child: what the child sees
(``os.environ``), its exit status through ``run``, signals sent to ``run``, and the claim ``auto``
leaves, read from the claims board as the kernels read it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from support import as_from_a_terminal, flat, wait_until

from jupyter_gpu import simulate
from jupyter_gpu.sources.claims import ClaimBoard, user_folder

GIB_MIB = 1024
PRINT_ENV = (
    "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('CUDA_', 'TF_FORCE', 'XLA_', 'JUPYTER_GPU_PLAN'))}), flush=True)"
)
# A child that says it is ready (its PID on stdout), then waits for a signal: it exits 10 + the signal's
# number on SIGINT, SIGTERM, SIGHUP, or when the file named by its first argument appears.
WAITER = """
import os, signal, sys, time
def stop(signum, frame):
    print("got", signum, flush=True)
    sys.exit(10 + signum)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, stop)
print(os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid(), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
"""


@pytest.fixture
def four(scenario: Any) -> Any:
    """Four idle simulated A100s in the scenario file (children read it)."""
    scenario.write(simulate.plausible_gpus(4))
    return scenario


@pytest.fixture
def env(tmp_path: Path, four: Any) -> dict[str, str]:
    """The runs' environment: this test's GPUs and claims folder, no defaults, no fence, no server."""
    values = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTER_GPU_DEFAULT", "JUPYTER_GPU_GROWTH", "JUPYTER_GPU_MAX_LIMIT", "CUDA_"))
        and key not in ("NVIDIA_VISIBLE_DEVICES", "JUPYTER_GPU_SERVICE_URL", "JUPYTER_GPU_PLAN")
    }
    values["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")  # no Jupyter server of this user is asked
    return values


def claims_dir() -> Path:
    return Path(os.environ["JUPYTER_GPU_CLAIMS_DIR"])


def claim_files() -> list[Path]:
    folder = user_folder(claims_dir(), os.getuid())
    return sorted(folder.glob("*.json")) if folder.exists() else []


def run(args: list[str], env: dict[str, str], **popen: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.cli", "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=as_from_a_terminal,
        **popen,
    )


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpu.cli", "run", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )


def ready(process: subprocess.Popen[str]) -> tuple[str, int]:
    """The waiting child's first line: (its CUDA_VISIBLE_DEVICES, its PID)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the command did not start: {process.stderr.read() if process.stderr else ''}"
    visible, pid = line.split()
    return visible, int(pid)


def test_the_command_sees_the_plan_and_run_prints_the_mapping_as_gpu_select(env: dict[str, str]) -> None:
    done = run(["--select", "2", "--growth", "--limit", "10%", "--", sys.executable, "-c", PRINT_ENV], env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["CUDA_VISIBLE_DEVICES"] == "2" and seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert seen["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and seen["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert float(seen["XLA_CLIENT_MEM_FRACTION"]) == pytest.approx(0.1, abs=0.01)  # JAX's share of the cap
    # %gpu_select's words (session.report), on stderr: the command's stdout is its own
    assert "GPU 2 (A100-SXM4-80GB [simulated], 79.5 GiB free) → TensorFlow /GPU:0, PyTorch cuda:0, JAX cuda:0" in (
        done.stderr
    )
    assert "Memory growth on: allocated on demand." in flat(done.stderr)
    assert "GPU 2: at most 8 GiB of 80 GiB" in flat(done.stderr)
    assert "Caps are cooperative" in flat(done.stderr)
    python = os.path.basename(sys.executable)
    assert f"The TensorFlow and PyTorch caps are applied in {python} when it imports them" in flat(done.stderr)
    assert "JUPYTER_GPU_PLAN" in seen  # the caps travel to the command's start-up hook (docs/children.md)
    assert "Programs this kernel starts" not in flat(done.stderr)  # the kernel's caveat is not run's


def test_defaults_come_from_the_environment_and_the_options_replace_them(env: dict[str, str]) -> None:
    env = {**env, "JUPYTER_GPU_DEFAULT_SELECT": "3", "JUPYTER_GPU_GROWTH": "1"}
    seen = json.loads(run(["--", sys.executable, "-c", PRINT_ENV], env).stdout)
    assert seen["CUDA_VISIBLE_DEVICES"] == "3" and seen["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    seen = json.loads(run(["--select", "1", "--no-growth", "--", sys.executable, "-c", PRINT_ENV], env).stdout)
    assert seen["CUDA_VISIBLE_DEVICES"] == "1" and seen.get("TF_FORCE_GPU_ALLOW_GROWTH") != "true"


def test_nothing_asked_touches_nothing(env: dict[str, str]) -> None:
    done = run(["--", sys.executable, "-c", PRINT_ENV], {**env, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.returncode == 0 and json.loads(done.stdout) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert "no GPU plan asked for" in done.stderr and done.stderr.count("\n") == 1


def test_the_admin_ceiling_and_the_start_fence_bind_a_run(env: dict[str, str]) -> None:
    fenced = {**env, "CUDA_VISIBLE_DEVICES": "1,2"}  # the GPUs assigned when run starts
    done = run(["--select", "3", "--", sys.executable, "-c", "pass"], fenced)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    seen = json.loads(run(["--select", "all", "--", sys.executable, "-c", PRINT_ENV], fenced).stdout)
    assert seen["CUDA_VISIBLE_DEVICES"] == "1,2"
    ceiling = {**env, "JUPYTER_GPU_MAX_LIMIT": "4GiB"}
    done = run(["--select", "0", "--limit", "8GiB", "--", sys.executable, "-c", "pass"], ceiling)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "ceiling" in done.stderr, done.stderr
    done = run(["--select", "0", "--", sys.executable, "-c", PRINT_ENV], ceiling)
    assert "GPU 0: at most 4 GiB of 80 GiB" in flat(done.stderr) and "admin ceiling" in flat(done.stderr)


def test_the_exit_status_is_the_commands(env: dict[str, str]) -> None:
    assert run(["--select", "0", "--", sys.executable, "-c", "raise SystemExit(7)"], env).returncode == 7
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    # killed by SIGTERM: run ends by SIGTERM too (a shell shows 143)
    assert run(["--select", "0", "--", sys.executable, "-c", killed], env).returncode == -signal.SIGTERM


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_run_reaches_the_command_and_the_claim_lives_exactly_as_long(
    env: dict[str, str], tmp_path: Path, signum: int
) -> None:
    process = start(["--select", "auto", "--", sys.executable, "-c", WAITER, str(tmp_path / "never")], env)
    try:
        visible, _child = ready(process)
        # while the command runs: run's claim on the GPU auto chose, which other processes count as load
        files = claim_files()
        assert [f.name.split("-")[0] for f in files] == [str(process.pid)]
        # a run's claim: held for the command's life, named by what it runs (shown to its user only)
        (claim,) = ClaimBoard(claims_dir()).claims()
        assert (claim.kind, claim.label) == ("run", f"{os.path.basename(sys.executable)} -c")
        snapshot = _snapshot()
        assert ClaimBoard(claims_dir()).load(snapshot.gpus) == {int(visible): 1}
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert f"got {signum}" in out  # forwarded once
    assert process.returncode == 10 + signum, err  # the command's own status
    assert claim_files() == []


def test_a_signal_run_started_ignoring_stays_ignored_by_both(env: dict[str, str], tmp_path: Path) -> None:
    """``nohup jupyter-gpu run ... &``: SIGHUP ignored at start is not forwarded (the command ignores it too)."""
    args = [sys.executable, "-m", "jupyter_gpu.cli", "run", "--select", "0", "--"]
    process = subprocess.Popen(
        [*args, sys.executable, "-c", WAITER, str(tmp_path / "stop")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: (as_from_a_terminal(), signal.signal(signal.SIGHUP, signal.SIG_IGN)),  # what nohup does
    )
    try:
        ready(process)
        process.send_signal(signal.SIGHUP)
        process.send_signal(signal.SIGTERM)  # a signal that is forwarded, after it: SIGHUP went nowhere
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert "got 1\n" not in out and f"got {signal.SIGTERM}" in out, out + err
    assert process.returncode == 10 + signal.SIGTERM


def test_run_called_from_python_hands_its_callers_signal_handlers_back(
    four: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cli.main(["run", ...])`` from Python (a script, a test) forwards signals only while COMMAND
    runs: afterwards the caller's own handlers are back, so its Ctrl-C and SIGTERM work again."""
    from jupyter_gpu import cli
    from jupyter_gpu.cli_run import FORWARDED

    for name in (
        "JUPYTER_GPU_DEFAULT_SELECT",
        "JUPYTER_GPU_DEFAULT_LIMIT",
        "JUPYTER_GPU_GROWTH",
        "JUPYTER_GPU_MAX_LIMIT",
    ):
        monkeypatch.delenv(name, raising=False)
    environment = dict(os.environ)
    before = {signum: signal.getsignal(signum) for signum in FORWARDED}
    mine = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        callers = {signum: signal.getsignal(signum) for signum in FORWARDED}
        assert cli.main(["run", "--", "true"]) == 0  # no plan: nothing put in this process's environment
        assert {signum: signal.getsignal(signum) for signum in FORWARDED} == callers
    finally:
        signal.signal(signal.SIGUSR1, mine)
    assert {signum: signal.getsignal(signum) for signum in FORWARDED} == before
    assert dict(os.environ) == environment  # the workers' later kernels start with it


def test_run_tells_a_ctrl_c_typed_in_its_terminal_from_one_sent_to_it() -> None:
    """A Ctrl-C typed in the terminal reached the command already (same foreground group): run does not
    send it again. It can tell: its terminal's foreground group is its own. Without a terminal, or on
    one that is not its controlling terminal, a SIGINT was sent to run alone and is forwarded (above)."""
    import fcntl
    import pty
    import termios

    ask = [sys.executable, "-c", "from jupyter_gpu.cli_run import _terminal_sent_it; print(_terminal_sent_it())"]

    def answer(stdin: int, controlling: bool) -> str:
        done = subprocess.run(
            ask,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
            preexec_fn=(lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)) if controlling else None,
        )
        return done.stdout.strip() or done.stderr

    master, slave = pty.openpty()
    try:
        assert answer(slave, controlling=True) == "True"  # the foreground of its own terminal
        assert answer(slave, controlling=False) == "False"  # a terminal, but not its own
        assert answer(subprocess.DEVNULL, controlling=False) == "False"  # no terminal (nohup, a service)
    finally:
        os.close(master)
        os.close(slave)


def test_the_claim_goes_when_the_command_is_killed(env: dict[str, str], tmp_path: Path) -> None:
    process = start(["--select", "auto:2", "--", sys.executable, "-c", WAITER, str(tmp_path / "never")], env)
    try:
        visible, child = ready(process)
        assert len(visible.split(",")) == 2 and len(claim_files()) == 2
        os.kill(child, signal.SIGKILL)
        process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
    assert claim_files() == []


def test_run_killed_with_sigkill_leaves_a_claim_that_readers_ignore(env: dict[str, str], tmp_path: Path) -> None:
    process = start(["--select", "auto", "--", sys.executable, "-c", WAITER, str(tmp_path / "stop")], env)
    child = None
    try:
        _visible, child = ready(process)
        process.kill()  # SIGKILL: no clean-up in run
        process.wait(timeout=60)
        left = claim_files()
        assert [f.name.split("-")[0] for f in left] == [str(process.pid)]  # the file is still there...
        assert ClaimBoard(claims_dir()).load(_snapshot().gpus) == {}  # ...and counts for nothing
    finally:
        (tmp_path / "stop").touch()  # the orphaned command ends
        if child is not None:
            wait_until(lambda: not Path(f"/proc/{child}").exists(), what="the command to end")
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


def _snapshot() -> Any:
    from jupyter_gpu.sources.nvml import snapshot

    return snapshot()


BAD = [
    (["--select", "9"], "there is no GPU 9"),
    (["--select", "1,x"], "no GPU has a UUID starting with 'x'"),
    (["--limit", "3XB"], "malformed size '3XB'"),
    (["--select", "auto", "--min-free", "900GiB"], "900 GiB"),  # no GPU fits, and no --wait
    (["--select", "1", "--wait", "5m"], "--wait needs --select auto"),
    (["--select", "auto", "--wait", "soon"], "is not a duration"),
    (["--min-free", "8GiB"], "--min-free needs --select auto"),
    (["--growth", "--no-growth"], "not allowed with argument"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("options, words", BAD)
def test_a_bad_request_is_one_line_status_2_and_the_command_never_starts(
    env: dict[str, str], tmp_path: Path, options: list[str], words: str
) -> None:
    made = tmp_path / "made"
    done = run([*options, "--", sys.executable, "-c", f"open({str(made)!r}, 'w')"], env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("jupyter-gpu run: "), done.stderr
    assert words in done.stderr
    assert not made.exists() and claim_files() == []


@pytest.mark.parametrize(
    "argv, words",
    [([], "no COMMAND given"), (["--"], "no COMMAND given"), (["--", "no-such-command-30"], "command not found")],
)
def test_a_missing_or_unknown_command_is_one_line_status_2(env: dict[str, str], argv: list[str], words: str) -> None:
    done = run(["--select", "auto", *argv], env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert claim_files() == []


def test_a_command_that_is_not_python_gets_the_environment_and_one_line_about_caps(env: dict[str, str]) -> None:
    done = run(["--select", "1", "--limit", "4GiB", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], env)
    assert done.returncode == 0 and done.stdout == "1\n"
    assert flat(done.stderr).count("Caps cannot be applied to sh: it is not a Python interpreter") == 1
    # ...but the plan travels on: a Python program the script starts applies the caps at import
    assert "Python programs it starts get them through JUPYTER_GPU_PLAN" in flat(done.stderr)


def test_a_script_started_by_a_shell_command_inherits_the_plans_caps(env: dict[str, str]) -> None:
    from jupyter_gpu.plan.carry import PLAN_VARIABLE, plan_from_environment
    from jupyter_gpu.session.child import PLAN_VARIABLE as named_by_run

    assert named_by_run == PLAN_VARIABLE
    show = f'{sys.executable} -c \'import os; print(os.environ.get("{PLAN_VARIABLE}", ""))\''
    done = run(["--select", "1", "--limit", "4GiB", "--", "sh", "-c", show], env)
    assert done.returncode == 0, done.stderr
    carried = plan_from_environment(done.stdout.strip())
    assert carried.plan.limits_bytes == {1: (4 * 1024**3,)}, carried


def bare_python(folder: Path) -> Path:
    """A virtual environment's python without jupyter_gpu (nor anything else) installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    return folder / "bin" / "python"


def test_a_python_without_jupyter_gpu_is_told_the_caps_cannot_reach_it(env: dict[str, str], tmp_path: Path) -> None:
    # The common slip on a hub: jupyter-gpu from the server's environment, the program in a conda or
    # venv python of its own. Saying "applied" there would be a cap the user trusts and nothing enforces.
    python = bare_python(tmp_path / "venv")
    done = run(["--select", "1", "--limit", "4GiB", "--", str(python), "-c", PRINT_ENV], env)
    assert done.returncode == 0, done.stderr
    said = flat(done.stderr)
    assert (
        f"The TensorFlow and PyTorch caps cannot be applied in python: its interpreter ({python}) does not run "
        "jupyter_gpu's start-up hook" in said
    )
    assert "Install jupyter_gpu in that environment, or cap the frameworks in the program." in said
    assert "caps are applied in" not in said
    seen = json.loads(done.stdout)  # the environment part still reaches it
    assert seen["CUDA_VISIBLE_DEVICES"] == "1" and "JUPYTER_GPU_PLAN" in seen


def test_python_started_without_site_is_told_the_caps_cannot_reach_it(env: dict[str, str]) -> None:
    done = run(["--select", "1", "--limit", "4GiB", "--", sys.executable, "-u", "-S", "-c", "pass"], env)
    assert done.returncode == 0, done.stderr
    assert "caps cannot be applied in" in flat(done.stderr) and "caps are applied in" not in flat(done.stderr)


def test_a_scripts_interpreter_is_the_one_its_first_line_finds_on_the_commands_path(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python\nprint('trained')\n")
    script.chmod(0o755)
    bare = bare_python(tmp_path / "venv")
    for folder, applied in [(bare.parent, False), (Path(sys.executable).parent, True)]:
        done = run(["--select", "1", "--limit", "4GiB", "--", str(script)], {**env, "PATH": f"{folder}:/usr/bin:/bin"})
        assert done.returncode == 0 and done.stdout == "trained\n", done.stderr
        said = flat(done.stderr)
        assert ("The TensorFlow and PyTorch caps are applied in train when it imports them" in said) is applied, said
        assert (f"its interpreter ({bare}) does not run" in said) is not applied, said


def test_an_interpreter_that_cannot_be_asked_is_said_so_and_the_command_still_has_its_say(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("#!/opt/nowhere/python3\nprint('trained')\n")
    script.chmod(0o755)
    done = run(["--select", "1", "--limit", "4GiB", "--", str(script)], env)
    said = flat(done.stderr)
    assert (
        "Could not tell whether train.py's interpreter (/opt/nowhere/python3) runs jupyter_gpu's start-up hook" in said
    )
    assert done.returncode == 2 and "cannot be started" in done.stderr  # as before: the system cannot start it


def test_an_environment_that_prints_at_start_does_not_confuse_the_question(env: dict[str, str], tmp_path: Path) -> None:
    python = bare_python(tmp_path / "venv")
    site_packages = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    (site_packages / "sitecustomize.py").write_text("print('welcome to the lab cluster')\n")
    done = run(["--select", "1", "--limit", "4GiB", "--", str(python), "-c", "pass"], env)
    assert done.returncode == 0, done.stderr
    assert "caps cannot be applied in python: its interpreter" in flat(done.stderr)
    assert done.stdout == "welcome to the lab cluster\n"  # the command's own start, not the question's


def test_a_python_that_answers_nonsense_is_could_not_tell(env: dict[str, str], tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Python is not installed; ask your administrator'\n")
    fake.chmod(0o755)
    done = run(["--select", "1", "--limit", "4GiB", "--", str(fake), "train.py"], env)
    said = flat(done.stderr)
    assert "Could not tell whether python3's interpreter" in said, said
    assert "(it answered 'Python is not installed; ask your administrator')" in said, said


def test_the_question_to_the_interpreter_is_asked_outside_the_callers_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another user's folder with a planted sitecustomize, and a relative PYTHONPATH entry that would
    # find it there: the question itself must not run it (the command, started there, is the user's).
    from jupyter_gpu.session.child import plan_hook_in

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "sitecustomize.py").write_text(f"open({str(shared / 'imported')!r}, 'w').close()\n")
    monkeypatch.chdir(shared)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    env = {**os.environ, "PYTHONPATH": ".", "JUPYTER_GPU_PLAN": '{"v": 1}'}
    answer = plan_hook_in([sys.executable, "train.py"], sys.executable, env)
    assert answer.runs is True, answer  # this environment's own hook, from its site-packages
    assert not (shared / "imported").exists()
    assert list(temporary.iterdir()) == []  # the private folder it was asked in is gone


@pytest.mark.parametrize("options, asked", [(["--growth"], False), (["--limit", "4GiB"], True)])
def test_the_interpreter_is_asked_only_when_there_is_a_cap(
    env: dict[str, str], tmp_path: Path, options: list[str], asked: bool
) -> None:
    # A python3 that notes every -c it is started with (the question), and runs nothing else
    asks = tmp_path / "asked"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && echo asked >> {asks}\nexit 0\n')
    fake.chmod(0o755)
    done = run(["--select", "1", *options, "--", str(fake), "train.py"], env)
    assert done.returncode == 0, done.stderr
    assert asks.exists() is asked, done.stderr
    if asked:
        assert asks.read_text() == "asked\n"  # once per run


@pytest.mark.parametrize(
    "arguments, flags",
    [
        (["train.py", "-S"], []),
        (["-u", "-S", "train.py"], ["-S"]),
        (["-I", "-c", "pass", "-S"], ["-I"]),
        (["-Su", "train.py"], ["-S"]),
        (["-sc", "pass"], ["-s"]),
        (["-W", "error", "-E", "train.py"], ["-E"]),
        (["-Werror", "-I", "train.py"], ["-I"]),
        (["-X", "dev", "-m", "pkg", "-S"], []),
        (["-OO", "--", "-S"], []),
        (["-", "-S"], []),
    ],
)
def test_the_probe_is_started_with_the_commands_start_up_options(arguments: list[str], flags: list[str]) -> None:
    from jupyter_gpu.session.child import _start_up_flags

    assert _start_up_flags(arguments) == flags


def test_python_is_told_by_name_or_by_its_first_line(tmp_path: Path) -> None:
    from jupyter_gpu.session.child import is_python_command

    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    venv_script = tmp_path / "tool"
    venv_script.write_text(f"#!{sys.executable}\nimport sys\n")
    shell = tmp_path / "job.sh"
    shell.write_text("#!/bin/sh\npython train.py\n")
    binary = tmp_path / "pythonic-tool"
    binary.write_bytes(b"\x7fELF\x02\x01python")
    for path, python in [
        ("/usr/bin/python3", True),
        ("/opt/py/bin/python3.11", True),
        ("/usr/bin/python", True),
        (str(script), True),
        (str(venv_script), True),
        (str(shell), False),
        (str(binary), False),
        ("/bin/sh", False),
        (str(tmp_path / "missing"), False),
    ]:
        assert is_python_command(path) is python, path


def test_two_runs_and_a_kernel_choosing_at_once_take_three_different_idle_gpus(
    env: dict[str, str], tmp_path: Path, clean: Any
) -> None:
    from jupyter_gpu.session.plan_session import PlanSession, Settings

    clean.write(simulate.plausible_gpus(4))
    runs = [
        start(["--select", "auto", "--", sys.executable, "-c", WAITER, str(tmp_path / "stop")], env) for _ in range(2)
    ]
    kernel = PlanSession(Settings(claims=True, claims_dir=str(claims_dir())))  # what a kernel's %gpu_select runs
    try:
        plan = kernel.change("%gpu_select", selection="auto")
        assert plan is not None and plan.selected_indices is not None
        chosen = [int(ready(process)[0]) for process in runs] + list(plan.selected_indices)
        assert len(set(chosen)) == 3, chosen
    finally:
        kernel.release_claims()
        (tmp_path / "stop").touch()
        for process in runs:
            process.communicate(timeout=60)
    assert claim_files() == []


def test_wait_starts_the_command_once_a_gpu_frees_up(env: dict[str, str], four: Any) -> None:
    def busy(data: dict[str, Any], free_gpu_1: bool = False) -> None:
        data["gpus"] = data["gpus"][:2]
        data["gpus"][0]["processes"] = [{"pid": 910001, "memory_mib": 70 * GIB_MIB, "user": "bob", "name": "python"}]
        data["gpus"][1]["processes"] = (
            [] if free_gpu_1 else [{"pid": 910002, "memory_mib": 60 * GIB_MIB, "user": "carol", "name": "python"}]
        )

    four.update(busy)
    process = start(["--select", "auto:1", "--wait", "2m", "--", sys.executable, "-c", PRINT_ENV], env)
    try:
        assert process.stderr is not None
        waiting = process.stderr.readline()  # the progress line, as the magic's (not a terminal: once a minute)
        assert waiting.startswith("jupyter-gpu run: Waiting for auto:1 without other users' work — GPU 0: ")
        assert "carol 60 GiB" in waiting and "(Ctrl-C to stop; the command starts once the GPUs fit)" in waiting
        four.update(lambda data: busy(data, free_gpu_1=True))
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert json.loads(out)["CUDA_VISIBLE_DEVICES"] == "1"
    assert "for auto:1: the GPUs fit now." in err
    assert claim_files() == []


def test_an_interrupted_wait_starts_nothing_and_exits_130(env: dict[str, str], four: Any, tmp_path: Path) -> None:
    four.update(lambda data: data["gpus"][0].update(processes=[{"pid": 910001, "memory_mib": 1024, "user": "bob"}]))
    four.update(lambda data: data.update(gpus=data["gpus"][:1]))
    made = tmp_path / "made"
    process = start(["--select", "auto", "--wait", "1h", "--", sys.executable, "-c", f"open({str(made)!r}, 'w')"], env)
    try:
        assert process.stderr is not None
        assert process.stderr.readline().startswith("jupyter-gpu run: Waiting for auto without other users' work")
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err.endswith("(interrupted); nothing was changed\n") and "jupyter-gpu run: stopped waiting for auto" in err
    assert not made.exists() and claim_files() == []


def test_a_ctrl_c_as_the_gpus_are_taken_ends_run_with_130_the_claim_removed(env: dict[str, str]) -> None:
    """The interrupt lands between the plan and its claim (a real SIGINT, raised there): the selection
    is made whole, then run ends as interrupted before COMMAND starts, without claiming that nothing
    was changed, and its claim goes with it."""
    script = (
        "import signal, sys\n"
        "from jupyter_gpu.session import plan_session\n"
        "claim = plan_session.PlanSession._claim\n"
        "def interrupted_then_claimed(self, board, plan):\n"
        "    signal.raise_signal(signal.SIGINT)\n"
        "    return claim(self, board, plan)\n"
        "plan_session.PlanSession._claim = interrupted_then_claimed\n"
        "from jupyter_gpu import cli\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    made = Path(env["JUPYTER_RUNTIME_DIR"]).parent / "made"
    done = subprocess.run(
        [sys.executable, "-c", script, "run", "--select", "auto", "--wait", "1h", "--", "touch", str(made)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "jupyter-gpu run: interrupted\n"
    assert not made.exists() and claim_files() == []


def test_help_is_the_manual(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_gpu.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for words in (
        "What is capped",
        "cannot",
        "Python interpreter",
        "cooperative",
        "JUPYTER_GPU_DEFAULT_SELECT",
        "exit status",
        "SIGKILL",
        "jupyter-gpu run --select 1 -- python your_file.py",
    ):
        assert words in text, words


def test_a_runs_claim_is_named_by_the_script_it_runs() -> None:
    from jupyter_gpu.session.child import run_label

    assert run_label(["python", "-u", "train.py", "--epochs", "3"]) == "train.py"
    assert run_label(["/opt/py/bin/python3.11", "-W", "ignore", "jobs/b.py"]) == "b.py"
    assert run_label(["python3", "-m", "pkg.train"]) == "pkg.train"
    assert run_label(["python", "-c", "pass"]) == "python -c"
    assert run_label(["./train.sh", "python", "x.py"]) == "train.sh"  # not python: its own name
    assert run_label(["/venv/bin/train", "-m", "x"]) == "train"  # a console script's arguments are its own


def test_the_waits_last_line_is_written_in_any_language() -> None:
    """Under nohup (no terminal) the wait's line is written once a minute, and its last line always:
    the last line is known by its type, not by its English words."""
    import io

    from jupyter_gpu.cli_run import _Progress
    from jupyter_gpu.core import i18n
    from jupyter_gpu.session.wait import FinalLine

    err = io.StringIO()
    progress = _Progress(err)
    with i18n.language_forced("zh_CN"):
        for second in range(3):
            progress(None, f"等待 {second} 秒")
        progress(
            None, FinalLine(i18n._("Waited {waited} for {spec}: the GPUs fit now.").format(waited="3 s", spec="auto:1"))
        )
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and "auto:1" in lines[-1] and "Waited" not in lines[-1]
