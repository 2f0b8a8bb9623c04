"""Attribution and the memory faces against NVML and PyTorch's own counters; the doctor.

PyTorch's documented counters: ``torch.cuda.max_memory_allocated`` (peak of tensors in use),
``torch.cuda.empty_cache`` ("Release all unoccupied cached memory ... visible in nvidia-smi").
NVML's per-process figure is the pool the driver gave the process (tests/gpu/test_gpu_plan.py).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from real_gpu import MIB, gib, process_memory, ran, run_cli, total_memory, uuid0

pytestmark = pytest.mark.gpu

GIB = 1024**3
SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) (B|KiB|MiB|GiB|TiB)")
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": GIB, "TiB": 1024 * GIB}
NOT_MODELLED = "the simulated GPUs and the CUDA stand-in allocate nothing, so NVML never shows the kernel"


def size(text: str) -> int:
    number, unit = SIZE.fullmatch(text.strip()).groups()  # type: ignore[union-attr]
    return int(float(number) * UNITS[unit])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, token: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@pytest.mark.real_only(NOT_MODELLED)
def test_server_attribution(check, tmp_path: Path) -> None:
    """The server extension maps a kernel's real PID and memory to its kernel and notebook."""
    import kernels

    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_gpu": True}}})
    )
    port, token = free_port(), "gpu-check-token"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--ServerApp.ip=127.0.0.1",
         "--allow-root"],  # GPU machines are often run as root; the server refuses root without it
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                http_json(f"{base}/api/status", token)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)
        session = http_json(
            f"{base}/api/sessions", token, {"path": "check.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        )
        kernel_id = session["kernel"]["id"]
        kernel = kernels.attach(tmp_path / "runtime" / f"kernel-{kernel_id}.json")
        try:
            out, _ = ran(
                kernel, "import os, torch\nx = torch.empty(2**30, dtype=torch.uint8, device='cuda')\nprint(os.getpid())"
            )
            pid = int(out.split()[-1])
            answer, found = _settled_answer(base, token, pid, "kernel_id")
            assert found, f"PID {pid} not among the answer's processes ({answer.get('attribution_note')})"
            process = found[0]
            assert process["kernel_id"] == kernel_id, process
            assert process["notebook"] == "check.ipynb", process
            nvml = process_memory(pid)
            assert nvml is not None and abs(process["memory"] - nvml) <= 64 * MIB, (process["memory"], nvml)
            row = next(k for k in answer["kernels"] if k["kernel_id"] == kernel_id)
            assert row["pid"] == pid and row["gpu_memory"] >= process["memory"], row
            held = gib(process["memory"])
            check.detail(f"PID {pid} -> kernel {kernel_id[:8]} check.ipynb, {held} (NVML {gib(nvml)})")
            check.detail(_run_attribution(base, token, env, tmp_path))
        finally:
            kernel.client.stop_channels()
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _settled_answer(base: str, token: str, pid: int, field: str) -> tuple[dict, list[dict]]:
    """The snapshot once it shows ``pid`` with ``field`` (``kernel_id``, ``run``) and the memory NVML
    shows it holding now (±64 MiB), or after 30 s: the server samples once a second, so the first
    answer naming a process that just started CUDA may be from before its allocation."""
    deadline = time.monotonic() + 30
    while True:
        answer = http_json(f"{base}/jupyter-gpu/snapshot", token)
        found = [p for g in answer["gpus"] for p in g["processes"] if p["pid"] == pid]
        nvml = process_memory(pid)
        settled = found and found[0].get(field) and nvml is not None and abs(found[0]["memory"] - nvml) <= 64 * MIB
        if settled or time.monotonic() > deadline:
            return answer, found
        time.sleep(0.5)


# A script under ``jupyter-gpu run``: 1 GiB on the GPU, its PID on stdout, then it waits for the file
# named by its argument.
HOLDER = """
import os, sys, time, torch
x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
print(os.getpid(), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""
RUN = [sys.executable, "-m", "jupyter_gpu.cli", "run"]


def start_run(arguments: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``jupyter-gpu run ARGUMENTS`` started (``python -m jupyter_gpu.cli``), its output as text pipes."""
    return subprocess.Popen(
        [*RUN, *arguments], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _run_attribution(base: str, token: str, env: dict[str, str], tmp_path: Path) -> str:
    """``jupyter-gpu run --select 0 -- python holder.py`` beside the server: the snapshot marks the
    command's real PID as this user's run, labelled with its script, from the run's claim."""
    holder, stop = tmp_path / "holder.py", tmp_path / "stop-holder"
    holder.write_text(HOLDER)
    run = start_run(["--select", "0", "--", sys.executable, str(holder), str(stop)], env)
    try:
        assert run.stdout is not None
        line = run.stdout.readline()
        assert line.strip().isdigit(), (
            f"the run's command printed {line!r}; run said: {run.stderr.read() if run.stderr else ''}"
        )
        pid = int(line)
        _, found = _settled_answer(base, token, pid, "run")
        assert found, f"the run's PID {pid} is not among the answer's processes"
        assert (found[0].get("run") or {}).get("label") == "holder.py", found[0]
        nvml = process_memory(pid)
        assert nvml is not None and abs(found[0]["memory"] - nvml) <= 64 * MIB, (found[0]["memory"], nvml)
        return f"run PID {pid} -> run holder.py, {gib(found[0]['memory'])} (NVML {gib(nvml)})"
    finally:
        stop.touch()
        try:
            run.communicate(timeout=60)
        finally:
            run.kill()


@pytest.mark.real_only(NOT_MODELLED)
def test_gpu_watch_peak(kernel, check) -> None:
    """``%gpu_watch``: its PyTorch peak is ``max_memory_allocated``; its NVML peak is at least that."""
    ran(kernel, "import time, torch\ntorch.ones(1, device='cuda')\ntorch.cuda.reset_peak_memory_stats()")
    ran(kernel, "%gpu_watch on --interval 0.05")
    out, err = kernel.run("x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')\ndel x\ntime.sleep(0.3)")
    ran(kernel, "%gpu_watch off")
    lines = (line.strip() for line in (out + err).splitlines())
    line = next((line for line in lines if line.startswith("GPU memory of this kernel")), None)
    assert line, out + err
    check.detail(line)
    torch_peak = re.search(r"torch: .*?peak ([0-9.]+ [KMGT]?i?B)", line)
    nvml_peak = re.search(r"peak ([0-9.]+ [KMGT]?i?B) during", line)
    assert torch_peak and nvml_peak, line
    actual = kernel.value("torch.cuda.max_memory_allocated()")
    assert abs(size(torch_peak.group(1)) - actual) <= 0.05 * actual + 0.1 * GIB, (line, actual)
    assert size(nvml_peak.group(1)) >= 0.95 * actual, (line, actual)
    check.figure("torch_max_allocated_gib", round(actual / GIB, 3))


@pytest.mark.real_only(NOT_MODELLED)
def test_gpu_free(kernel, check) -> None:
    """``%gpu_free x`` frees what it says: NVML before and after, and its own numbers."""
    ran(kernel, "import torch, os\nx = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')")
    pid = kernel.value("os.getpid()")
    before = process_memory(pid) or 0
    out, err = kernel.run("%gpu_free x")
    after = process_memory(pid) or 0
    check.detail(" / ".join(line.strip() for line in out.splitlines()[:4]))
    assert before - after >= 1.5 * GIB, f"NVML {gib(before)} -> {gib(after)}"
    said = re.search(r"this kernel ([0-9.]+ [KMGT]?i?B) → ([0-9.]+ [KMGT]?i?B)", out)
    assert said, out + err
    assert abs(size(said.group(1)) - before) <= 0.05 * before + 64 * MIB, (said.group(0), before)
    assert abs(size(said.group(2)) - after) <= 0.05 * after + 64 * MIB, (said.group(0), after)
    check.figure("freed_gib", round((before - after) / GIB, 2))


@pytest.mark.real_only(NOT_MODELLED)
def test_oom_explainer(kernel, check) -> None:
    """A real PyTorch OOM: the explainer names the GPU and its numbers match NVML's."""
    from jupyter_gpu.core.units import format_bytes
    from jupyter_gpu.sources import nvml

    total = nvml.snapshot().gpus[0].memory_total
    # the traceback is the error message; the report is displayed under it (text/plain beside its buttons)
    text = kernel.read(f"import torch\nx = torch.empty({int(total * 1.5)}, dtype=torch.uint8, device='cuda')")
    assert "OutOfMemoryError" in text, text
    assert "ran out of GPU memory" in text, text
    gpu_line = next((line.strip() for line in text.splitlines() if re.match(r"\s*GPU 0 .*total", line)), None)
    assert gpu_line, text
    assert f"{format_bytes(total)} total" in gpu_line, (gpu_line, format_bytes(total))
    # 1.5 x the GPU in one allocation: no freeing can help, and the report says so
    assert "more than the whole memory of any GPU" in text, text
    check.detail(gpu_line.strip())


@pytest.mark.real_only(NOT_MODELLED)
def test_oom_explainer_jax(kernel, check) -> None:
    """A real JAX out-of-memory (growth, 1.5 x the GPU): recognised with its device, named as GPU 0."""
    from jupyter_gpu.sources import nvml

    total = nvml.snapshot().gpus[0].memory_total
    kernel.run("%gpu_select 0 --growth")
    # JAX dispatches asynchronously: `x = jnp.ones(...)` alone ended its cell without any error on the
    # H100 (2026-11-27); block_until_ready() waits for the computation, and its error
    text = kernel.read(
        f"import jax.numpy as jnp\nx = jnp.ones(({int(total * 1.5) // 4},), dtype=jnp.float32).block_until_ready()"
    )
    assert "RESOURCE_EXHAUSTED" in text, text
    assert "jupyter_gpu: JAX cuda:0 ran out of GPU memory" in text, text
    assert re.search(r"GPU 0 .*\(JAX cuda:0\): .* total", text), text
    assert "more than the whole memory of any GPU" in text, text
    check.detail(next(line for line in text.splitlines() if line.startswith("jupyter_gpu: JAX")))


def test_doctor_json(check, tmp_path: Path) -> None:
    """``jupyter-gpu doctor --json`` with ``%gpu_select 0 --growth``: each installed framework with a
    GPU build follows the plan (simulated: PyTorch through the stand-in; JAX has none there)."""
    plan = "%gpu_select 0 --growth"
    if check.real:
        env, only = dict(os.environ), ()
    else:
        from standin_site import child_env, standin_site

        env, only = child_env(standin_site(tmp_path / "site"), "1"), ("--framework", "torch")
    started = time.perf_counter()
    # within the run's 120 s per check: the frameworks get 90 s together (the doctor's own time box)
    done = run_cli("doctor", "--json", "--plan", plan, "--timeout", "90", *only, env=env, timeout=110)
    wall = time.perf_counter() - started
    report = json.loads(done.stdout)
    verdicts = {f["name"]: f["verdict"] for f in report["frameworks"]}
    check.detail(f"exit {done.returncode}; {verdicts}; {report['verdict']}")
    check.figure("doctor_s", round(wall, 1))
    frameworks = [f for f in report["frameworks"] if f["installed"] and f["build"] == "gpu"]
    assert frameworks, verdicts
    for framework in frameworks:
        assert framework["verdict"] == "follows", framework
    assert report["machine"]["gpus"], report["machine"]


# The command ``jupyter-gpu run`` starts: PyTorch's cap as its allocator meets it (real: 3.5 GiB, then
# 1 GiB more; simulated: the fraction the stand-in was given), then it holds its memory until the
# file named by its argument appears, so NVML can be read meanwhile.
RUN_CHILD_REAL = """
import json, os, sys, time, torch
x = torch.empty(int(3.5 * 2**30), dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    refused = False
except torch.cuda.OutOfMemoryError:
    refused = True
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
print(json.dumps({"pid": os.getpid(), "refused": refused, "visible": visible}), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""
RUN_CHILD_SIMULATED = """
import json, os, sys, torch, cuda_standin
torch.cuda.init()
fractions = {str(k): v for k, v in cuda_standin.fractions.items()}
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
print(json.dumps({"pid": os.getpid(), "fractions": fractions, "visible": visible}), flush=True)
"""
RUN_CAP_CONTEXT = 1.5 * GIB  # NVML beyond PyTorch's pool: the CUDA context (tests/gpu/test_gpu_plan.py)


def test_run_cap(check, tmp_path: Path) -> None:
    """``jupyter-gpu run --select 0 --limit 4GiB -- python train.py``, twice: with jupyter_gpu's
    start-up hook in the command's interpreter (``jupyter_gpu_plan.pth`` processed, as an installed
    jupyter_gpu has it) the cap holds and run says so; without it (jupyter_gpu importable, the hook
    not run: a python of another environment) run says the caps cannot be applied, and indeed the
    allocation past the cap succeeds. What run prints and what the allocator does must agree."""
    from standin_site import child_env, plan_site

    script = tmp_path / "train.py"
    script.write_text(RUN_CHILD_REAL if check.real else RUN_CHILD_SIMULATED)
    total = total_memory()
    seen = []
    # Simulated: the development environment has jupyter_gpu installed, so every python of it runs the
    # hook; a python without it is tests/test_cli_run.py's (a bare virtual environment, no PyTorch).
    for hooked in (True, False) if check.real else (True,):
        folder = tmp_path / ("hooked" if hooked else "bare")
        if check.real:
            env = dict(os.environ)
            if hooked:
                env["PYTHONPATH"] = os.pathsep.join([str(plan_site(folder, standin=False)), env.get("PYTHONPATH", "")])
        else:
            env = child_env(plan_site(folder), "1")
        stop = tmp_path / f"stop-{hooked}"
        process = start_run(["--select", "0", "--limit", "4GiB", "--", sys.executable, str(script), str(stop)], env)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            held = process_memory(json.loads(line)["pid"]) if check.real and line else None
            stop.touch()
            _out, err = process.communicate(timeout=60)
        finally:
            process.kill()
        assert line, f"the command printed nothing; run said: {err}"
        child = json.loads(line)
        said = " ".join(err.split())
        assert process.returncode == 0, said
        assert child["visible"] in ("0", uuid0()), child
        if hooked:
            assert "caps are applied in python" in said and "cannot be applied" not in said, said
        else:
            assert "caps cannot be applied in python" in said and "caps are applied in" not in said, said
        if check.real:
            assert held is not None, "NVML does not list the command's PID"
            if hooked:
                assert child["refused"], f"1 GiB past the 4 GiB cap was allocated; NVML: {gib(held)}"
                assert 3.5 * GIB <= held <= 4 * GIB + RUN_CAP_CONTEXT, f"NVML shows the command holding {gib(held)}"
            else:
                assert not child["refused"], "refused past 4 GiB although run said the cap cannot be applied"
                assert held >= 4.5 * GIB, f"NVML shows the command holding {gib(held)}"
            outcome = "refused" if child["refused"] else "allowed"
            seen.append(f"{'hook' if hooked else 'no hook'}: {outcome} 1 GiB past 4 GiB, NVML {gib(held)}")
        else:
            fractions = child["fractions"]
            assert fractions == {"0": pytest.approx(4 * GIB / total, abs=0.001)}, fractions
            seen.append(f"{'hook' if hooked else 'no hook'}: PyTorch fractions {fractions}")
    check.detail("; ".join(seen) + ("; run said so both times" if check.real else "; run said so"))
