"""Issue 11 item 1: the out-of-memory explainer in real kernels, with each framework's real exception.

Real ipykernel processes on a simulated shared server (a scenario file rewritten by the test), the
real CPU builds of PyTorch, TensorFlow and JAX. A CPU build cannot run out of GPU memory, so each
test constructs the framework's own out-of-memory class (``torch.cuda.OutOfMemoryError``,
``tf.errors.ResourceExhaustedError``, JAX's ``XlaRuntimeError``) with the message the framework
writes, raises it in a cell, and checks the report under the traceback against the scenario's
numbers. A second kernel, ``train_old.ipynb``, is the user's other kernel holding memory; a real
``jupyter server`` with the extension gives its idle time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernels import Kernel, attach, start
from support import UNDER_LOAD_S, ScenarioFile, flat, wait_until

pytestmark = pytest.mark.frameworks

MIB = 1024**2
TORCH_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.50 GiB is "
    "free. Including non-PyTorch memory, this process has 30.00 GiB memory in use. Of the allocated memory 24.90 GiB "
    "is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
    "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
TF_OOM = (
    "OOM when allocating tensor with shape[1024,1024,1024] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
)
JAX_OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes."


def server_gpus(pid: int | None = None, own: dict[int, int] | None = None, old: int | None = None) -> dict[str, Any]:
    """A shared server: GPU 0 bob's, GPU 1 shared by this kernel, train_old.ipynb and carol; GPUs 2
    and 3 (RTX A6000) nearly free. ``pid``/``own``: this kernel and the MiB it holds per GPU;
    ``old``: the PID of train_old.ipynb."""
    own = own or {}

    def mine(index: int, pid: int | None) -> list[dict[str, Any]]:
        return [{"pid": pid, "memory_mib": own[index], "name": "python"}] if pid and index in own else []

    a100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_reserved_mib": 512}
    a6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140, "memory_reserved_mib": 300}
    return {
        "gpus": [
            {
                **a100,
                "processes": [{"pid": 910001, "memory_mib": 66000, "user": "bob", "name": "python"}, *mine(0, pid)],
            },
            {
                **a100,
                "processes": [
                    *mine(1, pid),
                    *([{"pid": old, "memory_mib": 22528, "name": "python"}] if old else []),
                    {"pid": 910002, "memory_mib": 24576, "user": "carol", "name": "python"},
                ],
            },
            {**a6000, "processes": [*mine(2, pid)]},
            {
                **a6000,
                "processes": [{"pid": 910004, "memory_mib": 2048, "user": "dave", "name": "python"}, *mine(3, pid)],
            },
        ]
    }


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One Jupyter runtime directory for the test's kernels (their connection files and reports)."""
    folder = tmp_path / "runtime"
    folder.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: Path) -> ScenarioFile:
    file = ScenarioFile(tmp_path / "scenario.json", server_gpus())
    monkeypatch.setenv("JUPYTER_GPU_SIMULATE", str(file.path))
    return file


def kernel_named(notebook: str, runtime: Path, autoload: Path | None = None) -> Iterator[Kernel]:
    """A kernel of ``notebook`` whose connection file (and report) lies in the test's ``runtime`` folder,
    as a Jupyter server's kernels' do: the explainer reads its peers' reports from there."""
    env = {"JPY_SESSION_NAME": notebook}
    if autoload is not None:  # the admin's way: the extension loaded in every kernel
        profile = autoload / "profile_default"
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "ipython_kernel_config.py").write_text('c.InteractiveShellApp.extensions = ["jupyter_gpu"]\n')
        env["IPYTHONDIR"] = str(autoload)
    yield from start(env, connection_dir=runtime)


@pytest.fixture
def old_kernel(world: ScenarioFile, runtime: Path) -> Iterator[Kernel]:
    """The user's other kernel, train_old.ipynb, with the extension (so it reports itself)."""
    generator = kernel_named("train_old.ipynb", runtime)
    kernel = next(generator)
    kernel.run("%load_ext jupyter_gpu")
    yield kernel
    generator.close()


@pytest.fixture
def new_kernel(world: ScenarioFile, runtime: Path) -> Iterator[Kernel]:
    generator = kernel_named("oom.ipynb", runtime)
    yield next(generator)
    generator.close()


def pid(kernel: Kernel) -> int:
    return kernel.value("os.getpid()")


def report_of(kernel: Kernel) -> str:
    """The out-of-memory report the last run displayed (its text, as every frontend shows it)."""
    from jupyter_gpu.kernel.oom_offer import OOM_MIME

    (bundle,) = [data for data in kernel.displayed if OOM_MIME in data]
    assert bundle[OOM_MIME]["report"] == bundle["text/plain"]
    return bundle["text/plain"]


def no_report(kernel: Kernel, err: str) -> bool:
    return "jupyter_gpu" not in flat(err) and not kernel.displayed


def leave_stale_reports(runtime: Path, old_pid: int, old_start: int) -> None:
    """What killed kernels leave in a runtime folder, as the full suite once piled up in /tmp (the
    kernels' folder then): 1,100 reports whose names sort before the live kernel's (the explainer
    read the first 1,024 only, lost train_old.ipynb and showed it as "your process PID n"); one of
    a kernel that had train_old.ipynb's PID before PIDs wrapped; one without a start time that
    names carol's PID (no such process here, like a host PID in a container)."""

    def stale(kernel_id: str, pid: int, start: int | None, session: str) -> None:
        report = {
            "version": 1,
            "kernel_id": kernel_id,
            "pid": pid,
            "start_time": start,
            "session": session,
            "nvml_pids": [],
            "gpu_memory": {},
            "frameworks": {},
            "timestamp": time.time() - 3600,
        }
        (runtime / f"jupyter-gpu-kernel-{kernel_id}.json").write_text(json.dumps(report))

    for number in range(1100):
        stale(f"0-stale-{number:04d}", 920_000 + number, old_start - 1 - number, f"stale-{number}.ipynb")
    stale("0-before-the-wrap", old_pid, old_start - 5000, "before_the_wrap.ipynb")
    stale("0-no-start-time", 910002, None, "ghost.ipynb")


def test_pytorch_oom_names_the_gpu_holders_and_computed_next_steps(
    world: ScenarioFile, runtime: Path, old_kernel: Kernel, new_kernel: Kernel
) -> None:
    out, err = new_kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\nimport torch")
    assert "GPU 1" in flat(out), err
    world.write(server_gpus(pid(new_kernel), {1: 30720}, old=pid(old_kernel)))
    old_kernel.run("from jupyter_gpu.sources.processes import process_start")
    leave_stale_reports(runtime, pid(old_kernel), old_kernel.value("process_start(os.getpid())"))
    _, err = new_kernel.run(f"raise torch.cuda.OutOfMemoryError({TORCH_OOM!r})")
    assert "OutOfMemoryError: CUDA out of memory" in flat(err) and "jupyter_gpu" not in flat(
        err
    )  # the traceback, as it is
    report = report_of(new_kernel)  # displayed after it
    assert report.splitlines()[0] == "jupyter_gpu: PyTorch cuda:0 ran out of GPU memory; it tried to allocate 2 GiB."
    # 80 GiB total; 30 + 22 + 24 GiB held; 80 - 0.5 reserved - 76 = 3.5 GiB free
    assert "GPU 1 A100-SXM4-80GB [simulated] (PyTorch cuda:0): 80 GiB total, 76 GiB used, 3.5 GiB free." in report
    assert "this kernel (oom.ipynb): 30 GiB (PyTorch: in use 24.9 GiB, reserved 30 GiB)" in report
    assert "your kernel train_old.ipynb: 22 GiB, idle time unknown" in report, report  # its own report names it
    assert "carol: 24 GiB" in report and "bob" not in report  # bob is on GPU 0, not this one
    assert "stale" not in report and "before_the_wrap" not in report and "ghost" not in report
    assert "`%gpu_free` may return 5.1 GiB held by this kernel's cache" in report
    assert "your kernel `train_old.ipynb` holds 22 GiB on GPU 1" in report
    # 30 GiB held + 2 GiB asked: GPU 2 (47.7 GiB free, nobody) first, then GPU 3 (45.7 GiB, dave)
    steps = report[report.index("Next steps:") :]
    assert "GPU 2 has 47.7 GiB free: `%gpu_select 2`, then `%gpu_restart`" in steps
    assert "GPU 3 has 45.7 GiB free (other users work on it)" in steps
    assert steps.index("GPU 2 has") < steps.index("GPU 3 has")
    assert "ran out, not the GPU" not in report  # no limit in the plan
    # The next steps a frontend may offer as buttons: shut the idle kernel down (by its id, from
    # its report), restart on the roomiest GPU with growth (the restart offer's lines), free the cache
    from jupyter_gpu.kernel.oom_offer import OOM_MIME

    offer = next(data for data in new_kernel.displayed if OOM_MIME in data)[OOM_MIME]
    old_id = old_kernel.value("__import__('jupyter_gpu.sources.kernel_reports', fromlist=['x']).kernel_identity()[0]")
    shutdown, restart, *more = offer["actions"]
    assert shutdown == {
        "kind": "shutdown",
        "kernel_id": old_id,
        "label": "train_old.ipynb",
        "memory": 22 << 30,
        "gpu": 1,
        "idle_s": None,
    }
    assert restart["kind"] == "restart" and restart["gpu"] == 2
    assert restart["lines"] == ["%load_ext jupyter_gpu", "%gpu_select 2 --growth"]
    assert [action["kind"] for action in more] in (["restart", "free"], ["free"])
    assert more[-1]["memory"] > 5 << 30


def test_tensorflow_oom_under_a_limit_says_the_limit_ran_out(world: ScenarioFile, new_kernel: Kernel) -> None:
    new_kernel.run("%load_ext jupyter_gpu\n%gpu_select 2\n%gpu_limit 16GiB")
    world.write(server_gpus(pid(new_kernel), {2: 16690}))
    _, err = new_kernel.run(f"import tensorflow as tf\nraise tf.errors.ResourceExhaustedError(None, None, {TF_OOM!r})")
    assert "ResourceExhaustedError" in flat(err)
    report = report_of(new_kernel)
    # 1024**3 floats = 4 GiB, on TensorFlow's /GPU:0 = GPU 2 (the plan)
    assert report.splitlines()[0] == (
        "jupyter_gpu: TensorFlow /GPU:0 ran out of GPU memory; it tried to allocate 4 GiB."
    )
    assert "GPU 2 RTX A6000 [simulated] (TensorFlow /GPU:0): 48 GiB total, 16.3 GiB used, 31.4 GiB free." in report
    assert "This kernel's limit on GPU 2 is 16 GiB (%gpu_limit), and it ran out, not the GPU (31.4 GiB free)." in report
    assert "`%gpu_limit 21GiB`, then `%gpu_restart`" in report  # 16.3 GiB held + 4 GiB asked, rounded up
    # growth off in this plan, but the cap is what ran out: growth only grows up to it (issue 31 item 5)
    assert "--growth" not in report
    assert "%gpu_free" not in report  # TensorFlow's pool is not returned by a cache release


def test_jax_oom_with_the_extension_autoloaded(world: ScenarioFile, tmp_path: Path, runtime: Path) -> None:
    generator = kernel_named("jax.ipynb", runtime, autoload=tmp_path / "ipython")
    kernel = next(generator)
    try:
        out, err = kernel.run("%gpu_select 0")  # autoloaded: no %load_ext
        assert "GPU 0" in flat(out), err
        world.write(server_gpus(pid(kernel), {0: 8192}))
        _, err = kernel.run(f"from jax._src.lib import xla_client\nraise xla_client.XlaRuntimeError({JAX_OOM!r})")
        assert "RESOURCE_EXHAUSTED" in flat(err)
        report = report_of(kernel)
        assert report.splitlines()[0] == "jupyter_gpu: JAX ran out of GPU memory; it tried to allocate 16 GiB."
        # JAX names no device; the plan has one GPU: GPU 0. 66000 + 8192 MiB used, 7 GiB free
        assert "GPU 0 A100-SXM4-80GB [simulated]: 80 GiB total, 72.5 GiB used, 7 GiB free." in report
        assert "this kernel (jax.ipynb): 8 GiB" in report and "bob: 64.5 GiB" in report
        # 8 + 16 GiB needed: GPU 2 (47.7 GiB, nobody) before GPU 1 (55.5 GiB, carol); two offers at most
        steps = report[report.index("Next steps:") :]
        assert steps.index("GPU 2 has 47.7 GiB free:") < steps.index("GPU 1 has 55.5 GiB free (other users work on it)")
        assert "GPU 3 has" not in steps
        kernel.run("%config GpuMagics.explain_oom = False")
        _, err = kernel.run(f"raise xla_client.XlaRuntimeError({JAX_OOM!r})")
        assert "RESOURCE_EXHAUSTED" in flat(err) and no_report(kernel, err)  # opted out
    finally:
        generator.close()


def test_cells_without_an_error_load_nothing_and_other_errors_get_no_report(
    world: ScenarioFile, new_kernel: Kernel
) -> None:
    new_kernel.run("%load_ext jupyter_gpu\nimport sys\nx = 1")
    assert new_kernel.value("'jupyter_gpu.kernel.oom' in sys.modules") is False
    _, err = new_kernel.run("raise RuntimeError('CUDA error: device-side assert triggered')")
    assert no_report(new_kernel, err)
    _, err = new_kernel.run("class OutOfMemoryError(Exception): pass\nraise OutOfMemoryError('host RAM')")
    assert no_report(new_kernel, err)  # a look-alike name outside the frameworks is not a GPU error


# -- the server extension: idle time of the user's other kernels ------------------------------------


class Server:
    def __init__(self, process: subprocess.Popen, url: str, token: str) -> None:
        self.process, self.url, self.token = process, url, token

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        return json.loads(text) if text else None

    def kernel(self, notebook: str, runtime: Path) -> Kernel:
        session = self.api(
            "POST", "api/sessions", {"path": notebook, "type": "notebook", "kernel": {"name": "python3"}}
        )
        # attach: asks again when a loaded host's missed heartbeat calls the starting kernel dead
        kernel = attach(runtime / f"kernel-{session['kernel']['id']}.json", timeout_s=UNDER_LOAD_S)
        kernel.run("import json, os")
        return kernel


@pytest.fixture
def server(world: ScenarioFile, runtime: Path, tmp_path: Path) -> Iterator[Server]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = "oom-test-token"
    ipython = tmp_path / "ipython"
    (ipython / "profile_default").mkdir(parents=True)
    (ipython / "profile_default" / "ipython_kernel_config.py").write_text(
        'c.InteractiveShellApp.extensions = ["jupyter_gpu"]\n'
    )
    root = tmp_path / "notebooks"
    root.mkdir()
    env = {**os.environ, "IPYTHONDIR": str(ipython), "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--JupyterGpuServer.interval_s=0.2",
            "--JupyterGpuServer.idle_threshold_s=1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(process, f"http://127.0.0.1:{port}/", token)
    try:

        def up() -> bool:
            try:
                server.api("GET", "api/status")
                return True
            except OSError:
                return False

        wait_until(up, what="jupyter server", interval_s=0.2)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_idle_kernel_by_notebook_and_idle_time_from_the_server(
    world: ScenarioFile, server: Server, runtime: Path
) -> None:
    old = server.kernel("train_old.ipynb", runtime)
    new = server.kernel("oom.ipynb", runtime)
    out, err = new.run("%gpu_select 1\nimport torch")  # the extension was autoloaded by the server's kernels
    assert "GPU 1" in flat(out), err
    world.write(server_gpus(pid(new), {1: 30720}, old=pid(old)))

    # train_old.ipynb stays idle beyond the server's 1 s threshold: wait until the server says so
    def old_is_idle() -> bool:
        kernels = server.api("GET", "jupyter-gpu/snapshot")["kernels"]
        return any(k["notebook"] == "train_old.ipynb" and k["idle"] for k in kernels)

    wait_until(old_is_idle, what="the server to count train_old.ipynb idle")
    _, err = new.run(f"raise torch.cuda.OutOfMemoryError({TORCH_OOM!r})")
    report = report_of(new)
    assert "your kernel train_old.ipynb: 22 GiB, idle for " in report, report
    idle = report.split("your kernel train_old.ipynb: 22 GiB, idle for ")[1].split(" s")[0]
    assert int(idle) >= 1
    assert "your idle kernel `train_old.ipynb` holds 22 GiB on GPU 1" in report
    assert "this kernel (oom.ipynb): 30 GiB" in report


def test_19_7_every_next_step_succeeds_when_followed_literally(world: ScenarioFile, new_kernel: Kernel) -> None:
    """%gpu_limit 50GiB on GPU 1 (80 GiB): GPU 2 (48 GiB) has room for what the kernel needs, but
    `%gpu_select 2` alone would be refused (the limit is more than GPU 2 has). The report offers a
    way the planner accepts, and each printed magic, run as printed in the same kernel, succeeds."""
    import re

    new_kernel.run("%load_ext jupyter_gpu\n%gpu_select 1\n%gpu_limit 50GiB\nimport torch")
    world.write(server_gpus(pid(new_kernel), {1: 30720}))  # NVML shows this kernel on GPU 1: changes now wait
    _, err = new_kernel.run(f"raise torch.cuda.OutOfMemoryError({TORCH_OOM!r})")
    steps = report_of(new_kernel)[report_of(new_kernel).index("Next steps:") :]
    assert "GPU 2 has 47.7 GiB free: `%gpu_limit 47GiB`, `%gpu_select 2`, then `%gpu_restart`" in steps, steps
    assert "free: `%gpu_select 2`, then" not in steps  # the one that cannot work
    offered = [line for line in steps.splitlines() if "%gpu_" in line]
    assert offered, steps
    for line in offered:
        magics = re.findall(r"`(%gpu_[a-z]+[^`]*)`", line)
        assert magics, line
        for magic in magics:
            _, err = new_kernel.run(magic)
            # refused as too late (a warning: the restart applies it) is fine; refused as wrong is not
            assert "UsageError" not in flat(err) and "Error:" not in flat(err), (line, magic, err)
        new_kernel.run("%gpu_select 1\n%gpu_limit 50GiB")  # back to the plan of the report for the next line
    _, err = new_kernel.run("%gpu_limit 47GiB\n%gpu_select 2")
    assert "UsageError" not in flat(err), err
    new_kernel.run(
        "from jupyter_gpu.kernel import magics as _m\nfrom jupyter_gpu.plan import plan_magics, build_plan\n"
        "from jupyter_gpu.sources.nvml import snapshot as _snapshot\n"
        "_pending = list(_m._registered.values())[0][0].session.pending_request"
    )
    # What %gpu_restart applies in the new kernel: GPU 2 under 47 GiB, and the planner accepts it
    assert new_kernel.value("plan_magics(_pending)") == ["%load_ext jupyter_gpu", "%gpu_select 2", "%gpu_limit 47GiB"]
    assert new_kernel.value("build_plan(_pending, _snapshot()).memory_limit_bytes(2)") == 47 * 1024**3
