"""Server extension benchmark: one shared sampler vs jupyterlab-nvdashboard, on simulated GPUs.

Starts a Jupyter Server in this process on 127.0.0.1 (both extensions enabled, 4 simulated A100s),
then drives load from a separate client process (so the clients' CPU does not run on the server's
event loop) and measures, per phase:

- NVML calls per second, counted by the simulated library beneath nvidia-ml-py (every reader in the
  process goes through it, so the count is exact);
- the latency of ``GET jupyter-gpu/snapshot`` as the clients see it (p50/p99/max);
- the server event loop's worst lag: a probe sleeps 5 ms in a loop and records how late it wakes.

Phases (bounded; the whole run takes about a minute and stops by itself):

1. idle server, nobody polls: our NVML calls must be 0;
2. jupyter_gpu, 1 client polling once a second; 3. 50 clients, each once a second (random phase);
4. 50 clients firing together once a second (a synchronized burst: the worst case for latency);
5. nvdashboard, 1 and 50 clients with its two default charts (GPU utilization, GPU memory: one
   websocket each) at 1 s, the same cadence as ours; 6. 50 clients at its frontend's default 100 ms.

Usage::

    .venv/bin/python benchmarks/bench_server.py [--seconds 10] [--clients 50] [--json out.json]

``--scale`` runs the big-machine phases instead (issue 10; no peer needed): scenarios of 8 GPUs x
100, 1,000 and 8,000... processes (``--scale-processes``) with other users' PIDs; each second, 50
clients fire ``GET jupyter-gpu/snapshot`` in the same instant, together with one
``GET api/status`` (jupyter_server's own, cheap endpoint: it measures how long the event loop makes
everybody else wait). Snapshot clients keep the ``ETag`` and send ``If-None-Match``, as browsers do.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import signal
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

GPUS = 4


# ----------------------------------------------------------------------------------------------
# client process


async def _poll_snapshot(url: str, token: str, clients: int, seconds: float, burst: bool) -> dict[str, Any]:
    from tornado.httpclient import AsyncHTTPClient

    AsyncHTTPClient.configure(None, max_clients=clients + 10)
    http = AsyncHTTPClient()
    headers = {"Authorization": f"token {token}"}
    latencies: list[float] = []
    errors = 0
    start = time.monotonic() + 0.2

    async def one(offset: float) -> None:
        nonlocal errors
        tick = 0
        while True:
            due = start + offset + tick
            if due > start + seconds:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            began = time.perf_counter()
            try:
                response = await http.fetch(url, headers=headers, raise_error=False)
                if response.code != 200:
                    errors += 1
            except Exception:
                errors += 1
            latencies.append((time.perf_counter() - began) * 1000)
            tick += 1

    await asyncio.gather(*(one(0.0 if burst else random.random()) for _ in range(clients)))
    return {"latencies_ms": latencies, "errors": errors}


async def _nvdashboard(ws_base: str, token: str, clients: int, seconds: float, frequency_ms: int) -> dict[str, Any]:
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    messages = 0
    sockets = []
    for _ in range(clients):
        for chart in ("gpu_utilization", "gpu_usage"):
            request = HTTPRequest(f"{ws_base}nvdashboard/{chart}", headers={"Authorization": f"token {token}"})
            connection = await websocket_connect(request)
            await connection.write_message(json.dumps({"updateFrequency": frequency_ms, "isPaused": False}))
            sockets.append(connection)

    async def drain(connection: Any) -> None:
        nonlocal messages
        while True:
            message = await connection.read_message()
            if message is None:
                return
            messages += 1

    tasks = [asyncio.ensure_future(drain(connection)) for connection in sockets]
    await asyncio.sleep(seconds)
    for connection in sockets:
        connection.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"messages": messages, "websockets": len(sockets)}


async def _burst(
    base: str, token: str, clients: int, seconds: float, path: str, start: float, with_status: bool
) -> dict[str, Any]:
    """Each second from ``start`` (``time.monotonic()``, the same clock in every process): ``clients``
    requests of ``path``, plus one /api/status request in the same instant when ``with_status``."""
    from tornado.httpclient import AsyncHTTPClient

    AsyncHTTPClient.configure(None, max_clients=clients + 10)
    http = AsyncHTTPClient()
    headers = {"Authorization": f"token {token}"}
    snapshot_ms: list[float] = []
    status_ms: list[float] = []
    codes: dict[str, int] = {}
    etags: dict[int, str] = {}

    async def one(url: str, into: list[float], client: int | None) -> None:
        extra = {"If-None-Match": etags[client]} if client in etags else {}
        began = time.perf_counter()
        try:
            # gzip accepted and left compressed, as a browser's network stack would hand it over:
            # the time measured is the server's and the wire's, not this client's decompression.
            response = await http.fetch(
                url,
                headers={**headers, **extra, "Accept-Encoding": "gzip"},
                decompress_response=False,
                raise_error=False,
                request_timeout=60,
            )
            code = str(response.code)
            if client is not None and response.code == 200:
                etags[client] = response.headers.get("Etag", "")
        except Exception as error:
            code = type(error).__name__
        into.append((time.perf_counter() - began) * 1000)
        codes[code] = codes.get(code, 0) + 1

    tick = 0
    while start + tick < start + seconds:
        await asyncio.sleep(max(0.0, start + tick - time.monotonic()))
        batch = [one(f"http://{base}{path}", snapshot_ms, c) for c in range(clients)]
        if with_status:
            batch.append(one(f"http://{base}api/status", status_ms, None))
        await asyncio.gather(*batch)
        tick += 1
    return {"snapshot_ms": snapshot_ms, "status_ms": status_ms, "codes": codes}


def client_main(spec: dict[str, Any]) -> None:
    if spec["kind"] == "burst":
        result = asyncio.run(
            _burst(
                spec["base"],
                spec["token"],
                spec["clients"],
                spec["seconds"],
                spec["path"],
                spec["start"],
                spec["with_status"],
            )
        )
    elif spec["kind"] == "snapshot":
        result = asyncio.run(
            _poll_snapshot(spec["url"], spec["token"], spec["clients"], spec["seconds"], spec["burst"])
        )
    else:
        result = asyncio.run(
            _nvdashboard(spec["ws_base"], spec["token"], spec["clients"], spec["seconds"], spec["frequency_ms"])
        )
    print(json.dumps(result))


# ----------------------------------------------------------------------------------------------
# server process


class LagProbe:
    """How late the event loop wakes a 5 ms sleeper: the worst since :meth:`reset`."""

    def __init__(self) -> None:
        self.worst_ms = 0.0
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def reset(self) -> None:
        self.worst_ms = 0.0
        self.lags_ms = []

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.005)
            lag_ms = (loop.time() - before - 0.005) * 1000
            self.lags_ms.append(lag_ms)
            self.worst_ms = max(self.worst_ms, lag_ms)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def drive(app: Any, port: int, token: str, args: argparse.Namespace) -> dict[str, Any]:
    from jupyter_gpu import simulate
    from jupyter_gpu.server import GpuService

    service: GpuService = app.web_app.settings[GpuService.SETTINGS_KEY]
    library = simulate.installed()
    assert library is not None
    base = f"127.0.0.1:{port}{app.base_url}"
    probe = LagProbe()
    probe.start()
    results: dict[str, Any] = {
        "gpus": GPUS,
        "seconds": args.seconds,
        "clients": args.clients,
        "interval_s": service.config.interval_s,
        "phases": [],
    }

    async def wait_idle() -> None:
        deadline = time.monotonic() + service.config.linger_s + 10
        while service.sampler.running and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    async def phase(name: str, spec: dict[str, Any] | None, seconds: float) -> dict[str, Any]:
        await asyncio.sleep(0.5)
        calls_before = sum(library.calls.values())
        samples_before = service.sampler.samples_taken
        probe.reset()
        began = time.monotonic()
        out: dict[str, Any] = {}
        if spec is None:
            await asyncio.sleep(seconds)
        elif spec["kind"] == "touch":  # demand without HTTP: the sampler's own cost on the loop
            while time.monotonic() - began < seconds:
                service.sampler.touch()
                await asyncio.sleep(0.5)
        else:
            spec = {**spec, "token": token, "seconds": seconds}
            process = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--client", json.dumps(spec), stdout=asyncio.subprocess.PIPE
            )
            stdout, _ = await asyncio.wait_for(process.communicate(), seconds + 60)
            out = json.loads(stdout)
        elapsed = time.monotonic() - began
        row: dict[str, Any] = {
            "phase": name,
            "nvml_calls_per_s": round((sum(library.calls.values()) - calls_before) / elapsed, 1),
            "samples_per_s": round((service.sampler.samples_taken - samples_before) / elapsed, 2),
            "loop_lag_p99_ms": round(percentile(probe.lags_ms, 99), 2),
            "loop_lag_worst_ms": round(probe.worst_ms, 2),
        }
        if "latencies_ms" in out:
            latencies = out["latencies_ms"]
            row.update(
                requests=len(latencies),
                errors=out["errors"],
                p50_ms=round(statistics.median(latencies), 2),
                p99_ms=round(percentile(latencies, 99), 2),
                max_ms=round(max(latencies), 2),
            )
        if "messages" in out:
            row.update(websockets=out["websockets"], messages_per_s=round(out["messages"] / seconds, 1))
        print(json.dumps(row), file=sys.stderr, flush=True)
        results["phases"].append(row)
        return row

    seconds, clients = args.seconds, args.clients
    snapshot_url = f"http://{base}jupyter-gpu/snapshot"
    await phase("idle server (nobody polls)", None, 3)
    await phase("jupyter_gpu: sampling only (demand recorded in-process, no HTTP)", {"kind": "touch"}, seconds)
    await wait_idle()
    await phase(
        "jupyter_gpu: 1 client, 1 poll/s",
        {"kind": "snapshot", "url": snapshot_url, "clients": 1, "burst": False},
        seconds,
    )
    await phase(
        f"jupyter_gpu: {clients} clients, 1 poll/s each",
        {"kind": "snapshot", "url": snapshot_url, "clients": clients, "burst": False},
        seconds,
    )
    await phase(
        f"jupyter_gpu: {clients} clients, synchronized burst each second",
        {"kind": "snapshot", "url": snapshot_url, "clients": clients, "burst": True},
        seconds,
    )
    await wait_idle()
    await phase("jupyter_gpu: idle again after linger_s", None, 3)
    ws_base = f"ws://{base}"
    for count, frequency in ((1, 1000), (clients, 1000), (clients, 100)):
        await phase(
            f"nvdashboard: {count} client(s), 2 charts, every {frequency} ms",
            {"kind": "nvdashboard", "ws_base": ws_base, "clients": count, "frequency_ms": frequency},
            seconds if frequency == 1000 else max(3.0, seconds / 2),
        )
    results["sampler_samples_taken"] = service.sampler.samples_taken
    results["callback_errors"] = len(library.callback_errors)
    return results


def scale_scenario(gpus: int, per_gpu: int) -> dict[str, Any]:
    """Other users' processes (PIDs that do not exist here), ``per_gpu`` on each of ``gpus`` GPUs."""
    return {
        "gpus": [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81920,
                "utilization": 50,
                "processes": [
                    {
                        "pid": 3_000_000 + g * per_gpu + p,
                        "memory_mib": 1 + p % 7,
                        "user": f"user{p % 50}",
                        "name": "python",
                    }
                    for p in range(per_gpu)
                ],
            }
            for g in range(gpus)
        ]
    }


async def drive_scale(app: Any, port: int, token: str, args: argparse.Namespace, path: str) -> dict[str, Any]:
    from jupyter_gpu import simulate
    from jupyter_gpu.server import GpuService

    service: GpuService = app.web_app.settings[GpuService.SETTINGS_KEY]
    base = f"127.0.0.1:{port}{app.base_url}"
    probe = LagProbe()
    probe.start()
    if os.environ.get("BENCH_GC"):  # diagnose: how long the cyclic garbage collector pauses everything
        import gc

        pauses: dict[str, Any] = {}

        def timing(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                pauses["t"] = time.perf_counter()
            else:
                ms = (time.perf_counter() - pauses["t"]) * 1000
                if ms > 20:
                    print(
                        f"gc generation {info['generation']}: {ms:.0f} ms, collected {info['collected']}",
                        file=sys.stderr,
                        flush=True,
                    )

        gc.callbacks.append(timing)
        import collections

        def census() -> None:
            objects = gc.get_objects()
            top = collections.Counter(type(o).__name__ for o in objects).most_common(8)
            print(f"gc: {len(objects)} tracked objects; {top}", file=sys.stderr, flush=True)

        asyncio.get_running_loop().call_later(6, census)
    if os.environ.get("BENCH_GC_FREEZE"):  # diagnose: start-up objects out of the collector's way
        import gc

        gc.freeze()
    if os.environ.get("BENCH_SWITCH_INTERVAL"):  # diagnose: the GIL's switch interval (default 5 ms)
        sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL"]))
    if os.environ.get("BENCH_SLOW_CALLBACKS"):  # diagnose: log every loop step longer than 50 ms
        import logging

        logging.basicConfig()
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 0.05
    results: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds, "phases": []}
    phases: list[tuple[int, str]] = [(per_gpu, "jupyter-gpu/snapshot") for per_gpu in args.scale_processes]
    if args.control:  # the same burst of jupyter_server's own cheapest endpoint: the framework's floor
        phases.insert(0, (args.scale_processes[0], "api/status"))
    for per_gpu, endpoint in phases:
        simulate.write_scenario(path, scale_scenario(8, per_gpu))
        service.sampler.touch()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the first sample of the new scenario
            latest = service.sampler.latest
            if latest is not None and sum(len(g.processes) for g in latest.gpus) == 8 * per_gpu:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        builds = getattr(service, "builds", 0)  # (getattr: the same script measures older versions)
        probe.reset()
        # Two client processes fire at the same instants: the burst, and the /api/status probe on
        # its own (so its latency is the server's, not the burst client's own queue of responses).
        start = time.monotonic() + 1.0
        common = {"kind": "burst", "base": base, "token": token, "seconds": args.seconds, "start": start}
        per_process = -(-args.clients // args.client_processes)
        specs = [
            {
                **common,
                "clients": min(per_process, args.clients - i * per_process),
                "path": endpoint,
                "with_status": False,
            }
            for i in range(args.client_processes)
        ]
        specs.append({**common, "clients": 0, "path": endpoint, "with_status": True})
        profiler = None
        if os.environ.get("BENCH_PROFILE"):  # diagnose: where the event loop's time goes
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--client", json.dumps(spec), stdout=asyncio.subprocess.PIPE
            )
            for spec in specs
        ]
        outputs = [json.loads((await asyncio.wait_for(p.communicate(), args.seconds + 120))[0]) for p in processes]
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.environ["BENCH_PROFILE"])
        codes: dict[str, int] = {}
        for output in outputs:
            for code, count in output["codes"].items():
                codes[code] = codes.get(code, 0) + count
        out = {
            "snapshot_ms": [ms for output in outputs[:-1] for ms in output["snapshot_ms"]],
            "status_ms": outputs[-1]["status_ms"],
            "codes": codes,
        }
        snap, status = out["snapshot_ms"], out["status_ms"]
        answer = getattr(service, "_answer", None)
        body = answer.body if answer is not None else b""
        row = {
            "burst_of": endpoint,
            "gpus": 8,
            "processes": 8 * per_gpu,
            "answer_kib": round(len(body) / 1024, 1),
            "requests": len(snap) + len(status),
            "codes": out["codes"],
            "snapshot_p50_ms": round(statistics.median(snap), 1),
            "snapshot_p99_ms": round(percentile(snap, 99), 1),
            "snapshot_max_ms": round(max(snap), 1),
            "status_p50_ms": round(statistics.median(status), 1),
            "status_p99_ms": round(percentile(status, 99), 1),
            "status_max_ms": round(max(status), 1),
            "answers_built": getattr(service, "builds", 0) - builds,
            "samples": service.sampler.samples_taken,
            "loop_lag_p99_ms": round(percentile(probe.lags_ms, 99), 1),
            "loop_lag_worst_ms": round(probe.worst_ms, 1),
        }
        print(json.dumps(row), file=sys.stderr, flush=True)
        results["phases"].append(row)
    return results


FAKE_KERNEL = "jupyter-gpu-bench-stand-in"


def install_stand_in_kernelspec(data_dir: str) -> None:
    """A kernelspec whose program is ``sleep`` (``sh`` execs it: one PID): jupyter_server starts,
    tracks and stops it like any kernel (provisioner, PID, sessions, events, shutdown), at a
    fraction of ipykernel's start-up."""
    folder = os.path.join(data_dir, "kernels", FAKE_KERNEL)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "kernel.json"), "w") as file:
        json.dump(
            {
                "argv": ["sh", "-c", "exec sleep 3600", "stand-in", "{connection_file}"],
                "display_name": "stand-in",
                "language": "none",
            },
            file,
        )


async def drive_kernels(app: Any, port: int, token: str, args: argparse.Namespace, path: str) -> dict[str, Any]:
    """Start and stop kernels one after another; count wrong attributions, watch RSS and threads.

    Per cycle: start a kernel through ``POST api/sessions``, put its PID on a GPU, wait for a
    snapshot attributing it; ``DELETE`` it and fetch the snapshot at once (a deleted kernel must be
    gone); then give its PID to another user's process (``ns_last_pid``) and check the next sample
    shows that process as the other user's. Any process attributed to a kernel that is not this
    server's current kernel with that PID, or shown as ``own`` while it is not, counts as wrong.
    """
    import psutil

    from jupyter_gpu import simulate
    from jupyter_gpu.server import GpuService

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from support import spawn_at_pid

    service: GpuService | None = app.web_app.settings.get(GpuService.SETTINGS_KEY)  # None: --control
    me = psutil.Process()
    base = f"http://127.0.0.1:{port}{app.base_url}"
    from tornado.httpclient import AsyncHTTPClient

    http = AsyncHTTPClient()
    headers = {"Authorization": f"token {token}"}
    counts = {
        "cycles": 0,
        "real_kernels": 0,
        "wrong": 0,
        "attributed": 0,
        "reused_pids": 0,
        "reuse_not_achieved": 0,
        "deleted_still_shown": 0,
    }
    wrong_examples: list[str] = []
    memory: list[tuple[int, float, int]] = []

    async def get(url: str) -> dict[str, Any]:
        response = await http.fetch(base + url, headers=headers)
        return json.loads(response.body)

    def check(data: dict[str, Any], note: str) -> None:
        kernels = {k["kernel_id"]: k["pid"] for k in data["kernels"]}
        for gpu in data["gpus"]:
            for process in gpu["processes"]:
                bad = (
                    (process["kernel_id"] is not None and kernels.get(process["kernel_id"]) != process["pid"])
                    or (process["own"] and process["kernel_id"] is None)
                    or (process.get("user") == "mallory" and (process["own"] or process["kernel_id"]))
                )
                if bad:
                    counts["wrong"] += 1
                    if len(wrong_examples) < 5:
                        wrong_examples.append(f"{note}: {json.dumps(process)}")

    async def until(predicate: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            data = await get("jupyter-gpu/snapshot")
            check(data, "poll")
            if predicate(data) or time.monotonic() > deadline:
                return data
            await asyncio.sleep(0.02)

    def scenario(processes: list[dict[str, Any]]) -> None:
        simulate.write_scenario(path, {"gpus": [{"processes": processes}, {}]})

    for cycle in range(args.kernels):
        real = cycle < args.real_kernels
        body = {
            "path": f"bench/n{cycle}.ipynb",
            "type": "notebook",
            "kernel": {"name": "python3" if real else FAKE_KERNEL},
        }
        response = await http.fetch(base + "api/sessions", method="POST", body=json.dumps(body), headers=headers)
        session = json.loads(response.body)
        kernel_id = session["kernel"]["id"]
        pid = app.kernel_manager.get_kernel(kernel_id).provisioner.pid
        if service is None:  # control run without jupyter_gpu: the same kernel and PID churn only
            await asyncio.sleep(0.2)
            await http.fetch(base + f"api/sessions/{session['id']}", method="DELETE", headers=headers)
            await asyncio.sleep(0.03)
            intruder = spawn_at_pid(pid, ["sleep", "30"], tries=5)
            if intruder is not None:
                await asyncio.sleep(0.2)
                intruder.kill()
                intruder.wait()
            counts["cycles"] += 1
            counts["real_kernels"] += real
            if cycle % max(1, args.kernels // 20) == 0 or cycle == args.kernels - 1:
                memory.append((cycle, round(me.memory_info().rss / 2**20, 1), me.num_threads()))
                print(
                    json.dumps({"cycle": cycle, "rss_mib": memory[-1][1], "threads": memory[-1][2]}),
                    file=sys.stderr,
                    flush=True,
                )
            continue
        scenario([{"pid": pid, "memory_mib": 100}])
        data = await until(
            lambda d, pid=pid: any(p["pid"] == pid and p["kernel_id"] for g in d["gpus"] for p in g["processes"])
        )
        counts["attributed"] += any(
            p["pid"] == pid and p["kernel_id"] == kernel_id for g in data["gpus"] for p in g["processes"]
        )
        await http.fetch(base + f"api/sessions/{session['id']}", method="DELETE", headers=headers)
        data = await get("jupyter-gpu/snapshot")  # right after the DELETE returned
        check(data, "after DELETE")
        if any(k["kernel_id"] == kernel_id for k in data["kernels"]) or any(
            p["kernel_id"] == kernel_id for g in data["gpus"] for p in g["processes"]
        ):
            counts["deleted_still_shown"] += 1
        # Another user's process takes the dead kernel's PID
        await asyncio.sleep(0.03)
        intruder = spawn_at_pid(pid, ["sleep", "30"], tries=5)
        if intruder is None:
            counts["reuse_not_achieved"] += 1
        else:
            counts["reused_pids"] += 1
            scenario([{"pid": pid, "memory_mib": 100, "user": "mallory"}])
            await until(
                lambda d, pid=pid: any(
                    p["pid"] == pid and p["user"] == "mallory" for g in d["gpus"] for p in g["processes"]
                )
            )
            intruder.kill()
            intruder.wait()
        counts["cycles"] += 1
        counts["real_kernels"] += real
        if cycle % max(1, args.kernels // 20) == 0 or cycle == args.kernels - 1:
            memory.append((cycle, round(me.memory_info().rss / 2**20, 1), me.num_threads()))
            print(
                json.dumps({"cycle": cycle, "rss_mib": memory[-1][1], "threads": memory[-1][2], **counts}),
                file=sys.stderr,
                flush=True,
            )
    if service is None:
        return {"counts": counts, "rss_threads": memory}
    from jupyter_gpu.sources.nvml import default_reader

    return {
        "counts": counts,
        "wrong_examples": wrong_examples,
        "rss_threads": memory,
        "ancestry_cache": len(service._ancestry),
        "report_cache": len(service._report_reader._cache),
        "identity_cache": len(default_reader().processes._identities),
        "kernel_table": len(service._table.kernels),
    }


def server_main(args: argparse.Namespace) -> dict[str, Any]:
    extra = (240 * len(args.scale_processes) if args.scale else 0) + 3 * args.kernels + 30 * args.real_kernels
    signal.alarm(int(args.seconds * 8 + 180 + extra))  # stops by itself, whatever happens
    work = tempfile.mkdtemp(prefix="bench-server-")
    for name in ("CONFIG", "DATA", "RUNTIME"):
        os.environ[f"JUPYTER_{name}_DIR"] = os.path.join(work, name.lower())
    os.environ["JUPYTER_GPU_SIMULATE"] = str(GPUS)
    scenario_path = os.path.join(work, "scenario.json")
    from jupyter_gpu import simulate

    if args.scale or args.kernels:
        simulate.write_scenario(scenario_path, scale_scenario(8, 1))
        os.environ["JUPYTER_GPU_SIMULATE"] = scenario_path
    if args.kernels:
        install_stand_in_kernelspec(os.environ["JUPYTER_DATA_DIR"])

    simulate.install_from_environment()  # before nvdashboard's module-level nvmlInit()

    from jupyter_server.serverapp import ServerApp
    from tornado.ioloop import IOLoop
    from traitlets.config import Config

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    token = os.urandom(8).hex()
    config = Config()
    config.ServerApp.jpserver_extensions = {
        "jupyter_gpu": not (args.kernels and args.control),
        "jupyterlab_nvdashboard": not (args.scale or args.kernels),
    }
    config.KernelManager.shutdown_wait_time = 0.5  # stand-in kernels do not answer shutdown requests

    config.IdentityProvider.token = token
    config.JupyterGpuServer.interval_s = 0.1 if args.kernels else 1.0
    config.JupyterGpuServer.linger_s = 3.0
    app = ServerApp.instance(
        config=config,
        ip="127.0.0.1",
        port=port,
        port_retries=0,
        open_browser=False,
        allow_root=True,
        root_dir=work,
        log_level="WARN",
    )
    app.initialize(argv=[])
    outcome: dict[str, Any] = {}

    async def run() -> None:
        try:
            if args.kernels:
                outcome.update(await drive_kernels(app, port, token, args, scenario_path))
            elif args.scale:
                outcome.update(await drive_scale(app, port, token, args, scenario_path))
            else:
                outcome.update(await drive(app, port, token, args))
        finally:
            app.stop()

    IOLoop.current().add_callback(run)
    app.start()
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load phase")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--scale", action="store_true", help="big-machine phases (issue 10) instead")
    parser.add_argument(
        "--client-processes",
        type=int,
        default=5,
        help="with --scale: the burst's clients are spread over this many processes "
        "(like separate browsers; one process would queue 50 answers itself)",
    )
    parser.add_argument(
        "--kernels",
        type=int,
        default=0,
        help="start and stop this many kernels, counting wrong attributions (issue 10)",
    )
    parser.add_argument(
        "--real-kernels",
        type=int,
        default=20,
        help="with --kernels: how many of them are real ipykernels (the rest: stand-ins)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="with --scale, first a burst of /api/status alone (the framework's own cost); "
        "with --kernels, the same kernel churn without jupyter_gpu (RSS baseline)",
    )
    parser.add_argument(
        "--scale-processes", type=int, nargs="+", default=[100, 1000], help="processes per GPU (8 GPUs) for --scale"
    )
    args = parser.parse_args()
    if args.client:
        client_main(json.loads(args.client))
        return
    if not (args.scale or args.kernels) and importlib.util.find_spec("jupyterlab_nvdashboard") is None:
        parser.error("the peer jupyterlab-nvdashboard is not installed: .venv/bin/pip install -e '.[bench]'")
    results = server_main(args)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
