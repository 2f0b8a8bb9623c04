"""A real JupyterHub 6 (LocalProcessSpawner, five system users, DummyAuthenticator) with the
jupyter-gpu service, each user's kernel on simulated GPUs, the console in headless Chromium.

Needs root (useradd, spawning as other users), ``configurable-http-proxy`` (npm) and a Python
environment the users can run (``.venv-hub``, built by ``scripts/setup.sh test`` from
``/usr/bin/python3``: the usual ``.venv`` may come from a Python under ``/root``, which other users
cannot read). Skipped with the reason otherwise. Override the paths with ``JUPYTER_GPU_HUB_VENV``
and ``JUPYTER_GPU_CHP``; by default they are looked for in this checkout, then next to the
virtual environment running the tests (a git worktree shares the main checkout's).

The system users (``JUPYTER_GPU_HUB_TEST_USERS``, default ``jgpu-alice,jgpu-bob,jgpu-carol,jgpu-dave,jgpu-eve``)
are created when missing and removed again (``userdel -r``) at the end; users that existed before are
left. The console and privacy tests are about the first two (``PAIR``: one holds the read scope, the
other nothing); the NVML-flatness tests use all five users' servers, kernels and terminals.

NVML calls are counted across every process of the hub (the service as root, user servers and
kernels as the users) by the simulated library itself: ``JUPYTER_GPU_SIMULATE_CALLS_DIR`` names a
directory (mode 1777) where each process keeps its count (:func:`jupyter_gpu.simulate.calls_in`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from live_processes import free_port
from support import wait_until

from jupyter_gpu import simulate

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]


def _hub_venv() -> Path:
    """This checkout's ``.venv-hub``, else the one beside the venv running pytest (a worktree's)."""
    for candidate in (REPO / ".venv-hub", Path(sys.executable).parents[2] / ".venv-hub"):
        if (candidate / "bin" / "jupyterhub-singleuser").exists():
            return candidate
    return REPO / ".venv-hub"


HUB_VENV = Path(os.environ.get("JUPYTER_GPU_HUB_VENV") or _hub_venv())
CHP = os.environ.get("JUPYTER_GPU_CHP") or str(HUB_VENV / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy")
USERS = tuple(
    os.environ.get("JUPYTER_GPU_HUB_TEST_USERS", "jgpu-alice,jgpu-bob,jgpu-carol,jgpu-dave,jgpu-eve").split(",")
)
assert len(USERS) == 5 and all(USERS), "JUPYTER_GPU_HUB_TEST_USERS: five user names, comma-separated"
PAIR = USERS[:2]  # the console test's two users: alice holds the console's read scope, bob nothing
ADMIN = "jgpu-admin"
TESTER_TOKEN = "jgpu-tester-" + os.urandom(8).hex()
PROMETHEUS_TOKEN = "jgpu-prometheus-" + os.urandom(8).hex()
MIB = 1 << 20


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "a real JupyterHub with LocalProcessSpawner needs root (it creates system users and spawns as them)"
    if not (HUB_VENV / "bin" / "jupyterhub-singleuser").exists():
        return f"no users' Python environment at {HUB_VENV} (scripts/setup.sh test builds it)"
    if not Path(CHP).exists() and not shutil.which("configurable-http-proxy"):
        return f"configurable-http-proxy not found at {CHP} (scripts/setup.sh test installs it with npm)"
    if not shutil.which("useradd"):
        return "useradd is missing"
    closed = next((folder for folder in (REPO, *REPO.parents) if not folder.stat().st_mode & 0o001), None)
    if closed is not None:  # the hub's users import jupyter_gpu from this checkout and run its .venv-hub
        return f"the hub's system users cannot enter {closed} (mode {closed.stat().st_mode & 0o777:o}): clone elsewhere"
    return None


class Hub:
    def __init__(self, url: str, service_url: str, root: Path, scenario: Path, calls_dir: Path) -> None:
        self.url, self.service_url, self.root, self.scenario = url, service_url, root, scenario
        self.calls_dir = calls_dir  # every hub process's NVML call count (JUPYTER_GPU_SIMULATE_CALLS_DIR)
        self.pid = 0

    def api(
        self, method: str, path: str, token: str = TESTER_TOKEN, body: Any = None, timeout: float = 30
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Authorization": f"token {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")
        except (urllib.error.URLError, ConnectionError) as error:  # not listening (yet)
            return 0, str(error)

    def token_for(self, user: str) -> str:
        code, body = self.api("POST", f"/hub/api/users/{user}/tokens", body={"note": "jupyter-gpu test"})
        assert code in (200, 201), body
        return body["token"]


def snippet_under(heading: str) -> str:
    """The first Python block under ``heading`` in docs/jupyterhub.md, as admins read it."""
    text = (REPO / "docs" / "jupyterhub.md").read_text()
    start = text.index("```python\n", text.index(heading)) + len("```python\n")
    return text[start : text.index("```", start)]


def documented_snippets(scenario: Path) -> str:
    """docs/jupyterhub.md's snippets in the order an admin adds them: the copy-paste
    ``jupyterhub_config.py``, simulated GPUs (this test's scenario instead of ``"demo"``), and the
    users' environment (PATH, terminals)."""
    simulation = snippet_under("### Trying it without GPUs")
    assert simulation.count('"demo"') == 2, simulation
    return "\n".join(
        (
            snippet_under("### `jupyterhub_config.py` (copy-paste)"),
            simulation.replace('"demo"', repr(str(scenario))),
            snippet_under("## Environment of the single-user servers: PATH"),
        )
    )


CONFIG = """
import json
c = get_config()  # noqa
c.JupyterHub.bind_url = {proxy_url!r}
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.JupyterHub.db_url = "sqlite:///{root}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{root}/cookie_secret"
c.JupyterHub.pid_file = "{root}/hub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.allow_named_servers = True  # the control's servers beside the users' own (test_nvml_calls_...)
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{{admin!r}}}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# --- what this hub set before: the documented snippets add to it (issue 22: they used to replace it) ---
c.JupyterHub.services = [{{"name": "tester", "api_token": {tester!r}}}]
c.JupyterHub.load_roles = [
    {{"name": "tester", "services": ["tester"],
      "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}}]
c.Spawner.environment = {{"PYTHONPATH": {pythonpath!r}, "JUPYTER_GPU_SIMULATE_CALLS_DIR": {calls_dir!r}}}
c.Spawner.args = ['--ServerApp.jpserver_extensions={{"jupyter_gpu": True}}']

# --- the documented jupyter-gpu snippets (docs/jupyterhub.md), run as written ---
exec(compile({snippet!r}, "docs/jupyterhub.md", "exec"))
assert [s["name"] for s in c.JupyterHub.services] == ["tester", "jupyter-gpu"], c.JupyterHub.services
assert c.Spawner.args[0].startswith("--ServerApp.jpserver_extensions"), c.Spawner.args
assert c.Spawner.environment["PYTHONPATH"] == {pythonpath!r}, c.Spawner.environment
# --- what this machine needs beyond them: its ports and paths, the test's users ---
service = next(s for s in c.JupyterHub.services if s["name"] == "jupyter-gpu")
service["url"] = {service_url!r}
service["command"] += ["--interval", "0.5"]
service["environment"].update({{"PYTHONPATH": {pythonpath!r}, "JUPYTER_GPU_SIMULATE_CALLS_DIR": {calls_dir!r}}})
next(r for r in c.JupyterHub.load_roles if r["name"] == "jupyter-gpu-readers")["users"] = [{alice!r}]
# Usage accounting asks every running server for its snapshot once a minute (docs/jupyterhub.md),
# which wakes the control servers' own samplers (source=nvml): off here, where NVML calls of open
# sidebars are counted (tests/test_hub*.py and test_hub_console.py cover accounting).
service["command"] += ["--usage-db", ""]
# Prometheus, as deploy/prometheus/prometheus.yml documents its token's scopes
c.JupyterHub.services.append({{"name": "prometheus", "api_token": {prometheus!r}}})
c.JupyterHub.load_roles.append({{"name": "prometheus", "services": ["prometheus"],
                                 "scopes": ["access:services!service=jupyter-gpu"]}})
c.Spawner.environment.update({{"PATH": {path!r}, "JUPYTER_GPU_SERVICE_URL": {service_prefix_url!r}}})
c.Spawner.args.append("--JupyterGpuServer.interval_s=0.5")
# Kernels over IPC (a socket file per channel in the user's runtime folder), not TCP: five servers
# starting kernels at once raced for TCP ports (jupyter_client picks a free port, closes it, and the
# kernel binds it later: another kernel had taken it; the kernel's heartbeat died with "Address
# already in use" and the test's client waited 117 s). Nothing this test measures depends on it.
c.Spawner.args.append("--KernelManager.transport=ipc")


def own_sampler_for_nvml_servers(spawner):
    # The control: named servers "nvml-..." sample NVML themselves (source=nvml, today's default)
    if spawner.name.startswith("nvml-"):
        spawner.args = [a for a in spawner.args if not a.startswith("--JupyterGpuServer.source=")]
        spawner.args.append("--JupyterGpuServer.source=nvml")


c.Spawner.pre_spawn_hook = own_sampler_for_nvml_servers
"""


@pytest.fixture(scope="module")
def hub(artifacts: Path) -> Iterator[Hub]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with real_hub(artifacts) as running:
        yield running


@contextlib.contextmanager
def real_hub(artifacts: Path) -> Iterator[Hub]:
    """A real hub with the jupyter-gpu service, its log in ``artifacts/hub-real.log``; the system
    users are created when missing and those created are removed at the end (benchmarks use it too)."""
    created = [user for user in USERS if subprocess.run(["id", user], capture_output=True).returncode != 0]
    try:
        for user in created:
            subprocess.run(["useradd", "-m", user], check=True)
        yield from _run_hub(artifacts)
    finally:
        _remove_users(created)


def _end_stragglers(spawned: list[psutil.Process]) -> None:
    """Kill, by PID, what the hub started and left running (its proxy, its service, users' servers):
    a hub that did not finish its shutdown in time leaves them behind, orphaned, whoever created
    the users. psutil checks each process's start time, so a reused PID is never hit."""
    _, alive = psutil.wait_procs(spawned, timeout=20)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)


def _remove_users(created: list[str]) -> None:
    """``userdel -r`` the users this test created, once the processes the hub started are gone
    (userdel refuses a user with running processes; :func:`_end_stragglers` has run); users that
    existed before the test are not touched. Another run of this test on the machine at the same
    time (same user names) keeps processes of those users alive: their userdel fails and is
    reported, the others are still removed."""
    if not created:
        return
    failed = []
    for user in created:  # every one tried, so one refusal leaves no other user behind
        result = subprocess.run(["userdel", "-r", user], capture_output=True, text=True)
        if result.returncode not in (0, 12):  # 12: the home directory could not be removed (gone)
            failed.append(f"userdel -r {user} failed: {result.stderr.strip()}")
    assert not failed, "; ".join(failed)


def _run_hub(artifacts: Path) -> Iterator[Hub]:
    spawned: list[psutil.Process] = []
    root = Path("/tmp") / f"jupyter-gpu-hub-test-{os.getpid()}"
    root.mkdir(mode=0o755, exist_ok=True)
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps(simulate.plausible_gpus(2)))
    scenario.chmod(0o644)
    calls_dir = root / "nvml-calls"
    calls_dir.mkdir(exist_ok=True)
    calls_dir.chmod(0o1777)  # written by the service (root) and by the users' servers and kernels
    bin_dir = root / "bin"  # jupyter-gpu, as pip installs it (the users import jupyter_gpu from this checkout)
    bin_dir.mkdir(mode=0o755, exist_ok=True)
    command = bin_dir / "jupyter-gpu"
    command.write_text(
        f"#!{HUB_VENV / 'bin' / 'python'}\nimport sys\nfrom jupyter_gpu.cli import main\nsys.exit(main())\n"
    )
    command.chmod(0o755)
    proxy_port, service_port = free_port(), free_port()
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    chp = CHP if Path(CHP).exists() else shutil.which("configurable-http-proxy")
    (root / "jupyterhub_config.py").write_text(
        CONFIG.format(
            proxy_url=proxy_url,
            hub_port=free_port(),
            proxy_api_port=free_port(),
            chp=chp,
            root=root,
            admin=ADMIN,
            singleuser=str(HUB_VENV / "bin" / "jupyterhub-singleuser"),
            service_url=f"http://127.0.0.1:{service_port}",
            python=sys.executable,
            pythonpath=str(REPO),
            scenario=str(scenario),
            alice=USERS[0],
            tester=TESTER_TOKEN,
            prometheus=PROMETHEUS_TOKEN,
            snippet=documented_snippets(scenario),
            calls_dir=str(calls_dir),
            # the documented PATH's "/opt/jupyterhub/bin": where this machine has jupyter-gpu and the hub's tools
            path=f"{bin_dir}:{HUB_VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            service_prefix_url=f"http://127.0.0.1:{service_port}/services/jupyter-gpu/",
        )
    )
    log = open(artifacts / "hub-real.log", "wb")  # noqa: SIM115
    jupyterhub = Path(sys.executable).with_name("jupyterhub")
    process = subprocess.Popen(
        [str(jupyterhub), "-f", str(root / "jupyterhub_config.py")],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    hub = Hub(proxy_url, f"{proxy_url}/services/jupyter-gpu/", root, scenario, calls_dir)
    hub.pid = process.pid
    try:
        wait_until(lambda: hub.api("GET", "/hub/api/")[0] == 200, 60, "the hub to answer")
        yield hub
    finally:
        for user in USERS:
            code, model = hub.api("GET", f"/hub/api/users/{user}")
            for name in (model.get("servers") or {}) if code == 200 else ():
                hub.api("DELETE", f"/hub/api/users/{user}/servers/{name}" if name else f"/hub/api/users/{user}/server")
        try:
            spawned.extend(psutil.Process(process.pid).children(recursive=True))
        except psutil.Error:
            pass
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        _end_stragglers(spawned)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _start_servers_and_kernels(hub: Hub) -> dict[str, dict[str, Any]]:
    for user in PAIR:
        hub.api("POST", f"/hub/api/users/{user}")  # 201, or 409 when the hub knows the user already
        code, body = hub.api("POST", f"/hub/api/users/{user}/server")
        assert code in (201, 202, 400), body  # 400: already running
    wait_until(
        lambda: all(
            (hub.api("GET", f"/hub/api/users/{u}")[1].get("servers", {}).get("", {}).get("ready")) for u in PAIR
        ),
        120,
        "both user servers to be ready",
    )
    sessions = {}
    for user in PAIR:
        code, body = hub.api(
            "POST",
            f"/user/{user}/api/sessions",
            body={"path": f"{user}-training.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert code == 201, body
        sessions[user] = body
    pids: dict[str, int] = {}

    def kernel_pids() -> bool:
        for user in PAIR:
            code, snapshot = hub.api("GET", f"/user/{user}/jupyter-gpu/snapshot")
            if code != 200:
                return False
            for kernel in snapshot["kernels"]:
                if kernel["kernel_id"] == sessions[user]["kernel"]["id"] and kernel["pid"]:
                    pids[user] = kernel["pid"]
        return len(pids) == len(PAIR)

    wait_until(kernel_pids, 60, "both kernels' PIDs")
    scenario = simulate.plausible_gpus(2)
    for index, user in enumerate(PAIR):
        scenario["gpus"][index]["processes"] = [{"pid": pids[user], "memory_mib": 4096 * (index + 1), "user": user}]
    hub.scenario.write_text(json.dumps(scenario))
    return sessions


def test_console_shows_both_users_kernels_and_keeps_privacy(hub: Hub, page: Any, artifacts: Path) -> None:
    sessions = _start_servers_and_kernels(hub)
    hub.api("POST", f"/hub/api/users/{ADMIN}")
    admin_token = hub.token_for(ADMIN)

    def console_ready() -> Any:
        code, data = hub.api("GET", "/services/jupyter-gpu/api/console", token=admin_token)
        if code != 200:
            return None
        users = {u["name"]: u for u in data["users"]}
        # NVML's memory by owner, and the kernels from each server's next report (every 5 s)
        if all(users.get(u, {}).get("gpu_memory") and users[u]["kernels"] for u in PAIR):
            return data
        return None

    data = wait_until(console_ready, 60, "both users' GPU kernels in the console, from their servers' reports")
    users = {u["name"]: u for u in data["users"]}
    assert users[USERS[0]]["memory_by_gpu"] == {"0": 4096 * MIB}
    assert users[USERS[1]]["memory_by_gpu"] == {"1": 8192 * MIB}
    assert users[USERS[1]]["kernels"][0]["notebook"] == f"{USERS[1]}-training.ipynb"

    # User servers took their GPU data from the service: no fallback warning
    for user in PAIR:
        code, snapshot = hub.api("GET", f"/user/{user}/jupyter-gpu/snapshot")
        assert code == 200 and not [w for w in snapshot["warnings"] if "jupyter-gpu service" in w], snapshot

    # alice holds the read scope: figures of everybody, bob's notebook and kernel id withheld
    alice_token, bob_token = hub.token_for(USERS[0]), hub.token_for(USERS[1])
    code, data = hub.api("GET", "/services/jupyter-gpu/api/console", token=alice_token)
    assert code == 200, data
    bob = next(u for u in data["users"] if u["name"] == USERS[1])
    assert bob["gpu_memory"] == 8192 * MIB
    assert all(k["notebook"] is None and k["kernel_id"] is None for k in bob["kernels"])
    assert f"{USERS[1]}-training" not in json.dumps(data)
    # bob holds no console scope: nothing; and his token cannot read alice's server
    code, body = hub.api("GET", "/services/jupyter-gpu/api/console", token=bob_token)
    assert code == 403 and "training" not in str(body)
    code, body = hub.api("GET", f"/user/{USERS[0]}/jupyter-gpu/snapshot", token=bob_token)
    assert code in (403, 404) or "training" not in str(body)
    assert code != 200

    # The admin's browser: hub login, then the console (hub OAuth) shows both users, text only
    page.goto(hub.url + "/hub/login?next=/services/jupyter-gpu/")
    page.fill("#username_input", ADMIN)
    page.fill("#password_input", "any")
    page.click("#login_submit")
    page.wait_for_url(hub.service_url)
    page.wait_for_selector(f"tr.jg-user[data-user='{USERS[0]}']")
    page.wait_for_selector(f"tr.jg-user[data-user='{USERS[1]}']")
    text = page.inner_text("#jg-users")
    assert f"{USERS[0]}-training.ipynb" in text and f"{USERS[1]}-training.ipynb" in text
    assert page.locator(".jg-gpu").count() == 2
    page.screenshot(path=str(artifacts / "hub-console.png"))

    # The admin shuts bob's kernel down from the console; the service log says who
    page.locator(f"tr[data-user='{USERS[1]}'] button").first.click()
    kernel_id = sessions[USERS[1]]["kernel"]["id"]
    wait_until(
        lambda: all(k["id"] != kernel_id for k in hub.api("GET", f"/user/{USERS[1]}/api/kernels")[1]),
        30,
        "bob's kernel to be shut down",
    )
    # the service queued it (nothing sent to bob's server); bob's server carried it out, naming the admin
    asked = f"{ADMIN} asked for the shutdown of kernel {kernel_id} of user {USERS[1]}"
    done = (
        f"kernel {kernel_id} ({USERS[1]}-training.ipynb) of {USERS[1]} shut down at the request of hub admin {ADMIN!r}"
    )
    for line in (asked, done):
        wait_until(lambda line=line: line in (artifacts / "hub-real.log").read_text(errors="replace"), 20, line)
    assert page.errors == []


# -- the push (issue 27): a hostile user, and a user server that records every header it receives

HOSTILE, RECORDER, VICTIM = USERS[2], USERS[3], USERS[4]
RECORDING_CONFIG = """
import json, os
_jg_path = os.path.expanduser("~/received-headers.jsonl")

def _jg_record(handler):
    with open(_jg_path, "a") as out:
        out.write(json.dumps([handler.request.method, handler.request.path, dict(handler.request.headers)]) + "\\n")

c.ServerApp.tornado_settings = {"log_function": _jg_record}
"""


def _push(hub: Hub, token: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(
        hub.service_url + "api/report", data=body, method="POST", headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def _recording_server(hub: Hub) -> Path:
    """The recorder's ~/.jupyter config logs every request's headers (as a user may), then its server starts."""
    account = pwd.getpwnam(RECORDER)
    folder = Path(account.pw_dir) / ".jupyter"
    folder.mkdir(exist_ok=True)
    config = folder / "jupyter_server_config.py"
    config.write_text(RECORDING_CONFIG)
    for path in (folder, config):
        os.chown(path, account.pw_uid, account.pw_gid)
    start_servers(hub, ((RECORDER, ""), (VICTIM, "")))
    return Path(account.pw_dir) / "received-headers.jsonl"


def test_push_flow_believes_nobody_about_others_and_no_credential_reaches_a_user_server(hub: Hub) -> None:
    """Five users' servers report with their own tokens. The recorder's server logs every header it
    receives while the console is read, accounting would run, and the admin shuts one of its kernels
    down; each recorded credential, tried on the victim's server, gets 403. The hostile user pushes
    malformed, oversized, too frequent and lying reports: each dropped and counted, none believed."""
    recorded = _recording_server(hub)
    _start_servers_and_kernels(hub)  # alice's and bob's kernels on the simulated GPUs
    admin_token, recorder_token = hub.token_for(ADMIN), hub.token_for(RECORDER)
    code, model = hub.api("POST", f"/user/{RECORDER}/api/kernels", token=recorder_token, body={"name": "python3"})
    assert code == 201, model

    def reported() -> Any:
        code, data = hub.api("GET", "/services/jupyter-gpu/api/console", token=admin_token)
        users = {u["name"]: u for u in data["users"]} if code == 200 else {}
        kernels = users.get(RECORDER, {}).get("kernels", [])
        return data if any(k["kernel_id"] == model["id"] for k in kernels) else None

    wait_until(reported, 60, "the recorder's kernel in the console, from its server's report")
    code, body = hub.api(
        "DELETE", f"/services/jupyter-gpu/api/users/{RECORDER}/kernels/{model['id']}", token=admin_token
    )
    assert code == 202, body
    wait_until(
        lambda: all(
            k["id"] != model["id"] for k in hub.api("GET", f"/user/{RECORDER}/api/kernels", token=recorder_token)[1]
        ),
        60,
        "the recorder's server to carry out the admin's shutdown",
    )

    # the hostile user: her own token, reports under a server name of her own (her real server reports too)
    hub.api("POST", f"/hub/api/users/{HOSTILE}")  # a hub user (201, or 409 when known already)
    hostile = hub.token_for(HOSTILE)
    alice_pid = json.loads(hub.scenario.read_text())["gpus"][0]["processes"][0]["pid"]
    assert _push(hub, hostile, b"x" * (2 << 20))[0] == 413
    assert _push(hub, hostile, b'{"server": "h", "kernels": [{"kernel_id": "../x"}]}')[0] == 422
    good = json.dumps({"server": "h", "kernels": [{"kernel_id": "mine", "pids": []}]}).encode()
    assert _push(hub, hostile, good)[0] == 200
    assert _push(hub, hostile, good)[0] == 429
    lie = json.dumps({"server": "h", "kernels": [{"kernel_id": "stolen", "pids": [alice_pid]}]}).encode()

    def taken() -> int | None:
        code, _ = _push(hub, hostile, lie)
        return None if code == 429 else code

    # the next interval: pushed again until the service takes it (429 until half an interval passed)
    code = wait_until(taken, what="the service to take the hostile user's next report", interval_s=0.25)
    assert code in (200, 422)  # 422 when the service's sample was fresh at receipt; else refused at use
    code, data = hub.api("GET", "/services/jupyter-gpu/api/console", token=admin_token)
    assert code == 200, data
    users = {u["name"]: u for u in data["users"]}
    assert users[USERS[0]]["memory_by_gpu"] == {"0": 4096 * MIB}  # alice's memory stays alice's
    assert not any(k["kernel_id"] == "stolen" for k in users[HOSTILE]["kernels"]), users[HOSTILE]
    assert users[HOSTILE]["memory_by_gpu"] == {}
    dropped = data["reports_dropped"]
    assert dropped["oversized"] >= 1 and dropped["malformed"] >= 1 and dropped["too_frequent"] >= 1, dropped
    assert dropped["lying"] >= 1, dropped

    # every credential the recorder's server received, tried on the victim's server: 403 everywhere
    credentials = set()
    for line in recorded.read_text().splitlines():
        _, _, headers = json.loads(line)
        for name, value in headers.items():
            if name.lower() in ("authorization", "cookie", "x-xsrftoken"):
                credentials.add((name, value))
    assert credentials, "the recorder's server received no credential at all: the test proves nothing"
    for name, value in sorted(credentials):
        for method, path in (("GET", "api/contents"), ("GET", "api/kernels"), ("POST", "api/kernels")):
            request = urllib.request.Request(
                f"{hub.url}/user/{VICTIM}/{path}",
                method=method,
                data=b"{}" if method == "POST" else None,
                headers={name: value},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status = response.status
            except urllib.error.HTTPError as error:
                status = error.code
            assert status == 403, (name, value[:12] + "...", method, path, status)


def test_user_servers_serve_the_services_sample(hub: Hub) -> None:
    """User servers on hub-service serve the service's devices and never fell back to their own NVML
    (the NVML call count itself: test_nvml_calls_stay_flat_with_1_2_and_5_user_servers_polled)."""
    start_servers(hub, tuple((user, "") for user in USERS))
    code, devices = hub.api("GET", "/services/jupyter-gpu/api/devices", token=hub.token_for(USERS[0]))
    assert code == 200 and len(devices["gpus"]) == 2
    for user in USERS:
        code, snapshot = hub.api("GET", f"/user/{user}/jupyter-gpu/snapshot")
        assert code == 200
        assert [g["uuid"] for g in snapshot["gpus"]] == [g["uuid"] for g in devices["gpus"]]
        assert not [w for w in snapshot["warnings"] if "unreachable" in w]


async def _run_in_terminal(
    hub: Hub, user: str, terminal: str, command: str, timeout_s: float = 60, until: str = r"exit-status-\d+"
) -> str:
    """Type ``command`` into a JupyterLab terminal of ``user`` (its websocket, through the hub's
    proxy, as the browser does) and return what the terminal shows until ``until`` (a regular
    expression; by default ``exit-status-<n>``, echoed when the command ends). The websocket is then
    closed; a command still running goes on, as in a browser tab that was closed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = hub.url.replace("http://", "ws://") + f"/user/{user}/terminals/websocket/{terminal}"
    connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {TESTER_TOKEN}"}))
    shown = ""
    try:
        connection.write_message(json.dumps(["stdin", f"{command}; echo exit-status-$?\r"]))
        deadline = time.monotonic() + timeout_s
        while not re.search(until, shown):
            message = await asyncio.wait_for(connection.read_message(), max(0.1, deadline - time.monotonic()))
            assert message is not None, f"the terminal closed; it showed: {shown}"
            kind, *content = json.loads(message)
            if kind == "stdout":
                shown += content[0]
    finally:
        connection.close()
    return shown


def test_a_users_terminal_finds_jupyter_gpu(hub: Hub) -> None:
    """Issue 22 item 4: with docs/jupyterhub.md's PATH and terminal settings, ``jupyter-gpu status``
    runs in a JupyterLab terminal of a user whose login shell is Debian's /bin/sh (whose
    /etc/profile resets PATH for login shells)."""
    user = USERS[0]
    start_servers(hub, ((user, ""),))
    code, terminal = hub.api("POST", f"/user/{user}/api/terminals")
    assert code == 200, terminal
    try:
        # on a thread of its own: the browser tests' Playwright keeps an event loop in this one
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            shown = pool.submit(
                asyncio.run, _run_in_terminal(hub, user, terminal["name"], "jupyter-gpu status")
            ).result()
    finally:
        hub.api("DELETE", f"/user/{user}/api/terminals/{terminal['name']}")
    assert "exit-status-0" in shown and "not found" not in shown, shown
    # the table fits 80 columns: the name column gives way ("NVIDIA A100-SXM4-80GB [simul…")
    assert "NVIDIA A100-SXM4-80GB" in shown and "(simulated GPUs)" in shown, shown


def _scrape(hub: Hub, path: str, token: str | None) -> tuple[int, dict[str, list[Any]]]:
    """GET a /metrics page as Prometheus does (a Bearer token); its families by name."""
    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(hub.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {}
    families: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        families.setdefault(family.name, []).extend(family.samples)
    return 200, families


def test_prometheus_reads_the_service_alone_and_its_token_opens_no_user_server(hub: Hub) -> None:
    """The shipped scrape job's token (deploy/prometheus/prometheus.yml: access:services!service=
    jupyter-gpu only) on a real hub: the service's /metrics has the host's GPUs once and the kernel
    families; the token opens no user server, /metrics included (issue 27: the old config's
    access:servers token, sent to every user server, opened every other one)."""
    start_servers(hub, tuple((user, "") for user in USERS))
    code, service = _scrape(hub, "/services/jupyter-gpu/metrics", PROMETHEUS_TOKEN)
    assert code == 200
    assert len(service["jupyter_gpu_gpu_info"]) == 2 and len(service["jupyter_gpu_memory_used_bytes"]) == 2
    assert service["jupyter_gpu_nvml_up"][0].value == 1
    assert "jupyter_gpu_kernel_memory_used_bytes" in service  # every user's kernels, from their reports
    for user in USERS:
        assert _scrape(hub, f"/user/{user}/metrics", PROMETHEUS_TOKEN)[0] == 403, user
        assert _scrape(hub, f"/user/{user}/api/contents", PROMETHEUS_TOKEN)[0] == 403, user
    # Without the service's access scope (the tester service), or without a token: refused
    assert _scrape(hub, "/services/jupyter-gpu/metrics", TESTER_TOKEN)[0] == 403
    assert _scrape(hub, "/services/jupyter-gpu/metrics", None)[0] == 403


# -- NVML calls per second across the hub's processes, 1, 2 and 5 user servers with sidebars open

SERVERS = tuple((user, "") for user in USERS)  # the five users' own servers
CONTROL = ((USERS[0], "nvml-a"), (USERS[1], "nvml-b"))  # named servers on source=nvml (pre_spawn_hook in CONFIG)
WINDOW_S = 6.0  # about 12 samples of the service (interval 0.5 s) per measurement


def _server_path(user: str, name: str) -> str:
    return f"/user/{user}/{name + '/' if name else ''}"


def start_servers(hub: Hub, servers: tuple[tuple[str, str], ...]) -> None:
    for user, name in servers:
        hub.api("POST", f"/hub/api/users/{user}")  # 201, or 409 when the hub knows the user already
        code, body = hub.api(
            "POST", f"/hub/api/users/{user}/servers/{name}" if name else f"/hub/api/users/{user}/server"
        )
        assert code in (201, 202, 400), body  # 400: already running

    def ready() -> bool:
        for user, name in servers:
            code, model = hub.api("GET", f"/hub/api/users/{user}")
            if code != 200 or not (model.get("servers") or {}).get(name, {}).get("ready"):
                return False
        return True

    wait_until(ready, 180, f"{len(servers)} user servers to be ready", interval_s=0.5)


def process_label(pid: int) -> str:
    """Which hub process a PID is, for the failure message: service, user server or kernel."""
    try:
        process = psutil.Process(pid)
        cmdline, environ = " ".join(process.cmdline()), process.environ()
    except psutil.Error:
        return f"{pid} (exited)"
    who = f"{environ.get('JUPYTERHUB_USER', '')}/{environ.get('JUPYTERHUB_SERVER_NAME', '')}"
    if "jupyter_gpu.hub" in cmdline:
        return f"{pid} service"
    if "jupyterhub-singleuser" in cmdline:
        return f"{pid} server {who}"
    if "ipykernel" in cmdline:
        return f"{pid} kernel {who}"
    return f"{pid} {cmdline[:80]}"


def calls_while_polled(
    hub: Hub, servers: tuple[tuple[str, str], ...], window_s: float = WINDOW_S, *, samplers: int = 1
) -> tuple[float, dict[int, int]]:
    """NVML calls per second across every process of the hub while a client polls each server's
    snapshot once per second (an open sidebar), and the window's calls per PID. The window starts
    once ``samplers`` processes (the service, and each polled server that samples for itself) are
    reading NVML (``samplers_running``)."""
    before = simulate.calls_by_process(hub.calls_dir)
    with sidebars_open(hub, servers) as answers:
        samplers_running(hub, before, answers, servers, samplers)
        return calls_during(hub, window_s)


def samplers_running(
    hub: Hub, before: dict[tuple[int, int], int], answers: list[tuple[str, int]], servers: Any, samplers: int
) -> None:
    """Wait until every polled server has answered a sidebar (so its sampler, or the service's it
    asks, has run) and ``samplers`` processes have read NVML since ``before`` (their timers run):
    the event a measurement window starts from, instead of a fixed warm-up."""
    wanted = {f"{user}/{name}" for user, name in servers}

    def running() -> bool:
        answered = {who for who, code in list(answers) if code == 200}
        after = simulate.calls_by_process(hub.calls_dir)
        reading = [key for key, count in after.items() if count > before.get(key, 0)]
        return answered >= wanted and len(reading) >= samplers

    wait_until(running, what=f"{len(servers)} polled servers answered and {samplers} sampler(s) reading NVML")


@contextlib.contextmanager
def sidebars_open(hub: Hub, servers: tuple[tuple[str, str], ...]) -> Iterator[list[tuple[str, int]]]:
    """A client polls each server's snapshot once per second (an open JupyterLab sidebar) while
    the block runs, which gets the answers so far (``"user/name"``, status); every answer must
    have been a 200."""
    stop = threading.Event()
    answers: list[tuple[str, int]] = []

    def sidebar(user: str, name: str) -> None:
        while True:
            answers.append(
                (f"{user}/{name}", hub.api("GET", _server_path(user, name) + "jupyter-gpu/snapshot", timeout=10)[0])
            )
            if stop.wait(1.0):
                return

    threads = [threading.Thread(target=sidebar, args=server, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    try:
        yield answers
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
    failed = [answer for answer in answers if answer[1] != 200]
    assert not failed and len(answers) >= len(servers), f"a polled server did not answer: {failed}"


def calls_during(hub: Hub, window_s: float) -> tuple[float, dict[int, int]]:
    """NVML calls per second across every process of the hub over the next ``window_s`` seconds,
    and the window's calls per PID (processes that made none are left out)."""
    before, began = simulate.calls_by_process(hub.calls_dir), time.monotonic()
    time.sleep(window_s)
    after, ended = simulate.calls_by_process(hub.calls_dir), time.monotonic()
    window = {key[0]: count - before.get(key, 0) for key, count in after.items() if count != before.get(key, 0)}
    return sum(window.values()) / (ended - began), window


def service_pid(hub: Hub) -> int:
    for child in psutil.Process(hub.pid).children(recursive=True):
        if "jupyter_gpu.hub" in " ".join(child.cmdline()):
            return child.pid
    raise AssertionError("the jupyter-gpu service is not running")


def test_nvml_calls_stay_flat_with_1_2_and_5_user_servers_polled(hub: Hub) -> None:
    """Issue 12: with ``source = "hub-service"``, NVML calls per second across every process of a
    real hub (the service as root, user servers and kernels as five system users) are the same with
    1, 2 and 5 user servers (one per user) whose sidebars are open, and all of them are the
    service's. The control, 2 more servers sampling for themselves (``source = "nvml"``, named
    servers of the first two users), multiplies them.

    Tolerance: calls/s with N servers within 25 % of calls/s with 1. The service samples on a timer
    (every 0.5 s plus the sample's own duration, plus the reader's MIG re-check every 5 s), so a
    6-second window holds 12 +- 1 samples (+-8 %), and a busier 2-core machine lengthens the period
    (fewer samples, never more). One user server sampling for itself adds as many calls as the
    service (+100 % per server), far outside it; the control shows it."""
    start_servers(hub, SERVERS + CONTROL)  # at once (faster); a server nobody polls does not sample
    service = service_pid(hub)
    rates, windows = {}, {}
    for count in (1, 2, 5):
        rates[count], windows[count] = calls_while_polled(hub, SERVERS[:count])
    described = {n: {process_label(pid): calls for pid, calls in w.items()} for n, w in windows.items()}
    print(f"NVML calls/s across the hub's processes: {rates}; per process: {described}")
    assert rates[1] > 0, "the service made no NVML calls while a sidebar was open"
    for count in (1, 2, 5):
        # Nobody but the service read NVML (no user server fell back to its own sampler) ...
        assert set(windows[count]) == {service}, described[count]
        # ... and the rate is the same with 1, 2 and 5 servers polled
        assert 0.75 <= rates[count] / rates[1] <= 1.25, (rates, described)

    # The control: 2 servers on their own samplers, polled too, each reads NVML and the calls multiply
    try:
        rate, window = calls_while_polled(hub, (SERVERS[0], *CONTROL), samplers=1 + len(CONTROL))
        described_control = {process_label(pid): calls for pid, calls in window.items()}
        print(f"control (2 servers on source=nvml): {rate:.1f} calls/s; per process: {described_control}")
        own = [pid for pid in window if pid != service]
        assert len(own) == 2 and all(window[pid] > 0.5 * window[service] for pid in own), described_control
        assert rate / rates[1] >= 2.0, (rate, rates, described_control)
    finally:
        for user, name in CONTROL:
            hub.api("DELETE", f"/hub/api/users/{user}/servers/{name}")


# -- NVML calls per host with the five users' panels and terminals open (issue 22)

PANEL_WINDOW_S = 10.0  # about 20 samples of the service per measurement: each one more or less is 5 %
PANEL_STATE = (
    "import json\n"
    "from jupyter_gpu.panel import widget as _jg_widget\n"
    "_jg = _jg_widget.open_panels()\n"
    "print(json.dumps([[p.updates, p.last_snapshot and p.last_snapshot.extra.get('source'), p.status.value]"
    " for p in _jg]))"
)


def _users_kernel(hub: Hub, user: str) -> tuple[str, Any]:
    """A kernel started through ``user``'s server REST API (the user's own token, as a notebook
    does): its id, and a client of it attached through its connection file (the kernel runs as the
    user; the test, as root, reads the file in the user's runtime folder)."""
    from kernels import attach

    code, model = hub.api("POST", f"/user/{user}/api/kernels", token=hub.token_for(user), body={"name": "python3"})
    assert code == 201, model
    home = Path(pwd.getpwnam(user).pw_dir)
    found = wait_until(
        lambda: next(home.rglob(f"kernel-{model['id']}.json"), None), 60, f"{user}'s kernel's connection file"
    )
    return model["id"], attach(found)


def _panel_state(kernel: Any) -> list[list[Any]]:
    """Each open panel of the kernel: [updates, the sample's source, its status line (HTML)]."""
    out, err = kernel.run(PANEL_STATE)
    assert out, err
    return json.loads(out.strip().splitlines()[-1])


def _jupyter_gpu_watches(user: str) -> list[psutil.Process]:
    """``jupyter-gpu status --watch`` processes of ``user`` (the terminals' commands) running now."""
    found = []
    for process in psutil.process_iter(["username", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if process.info["username"] == user and "jupyter-gpu status --watch" in cmdline:
            found.append(process)
    return found


def test_nvml_calls_stay_flat_with_five_users_panels_and_terminals(hub: Hub) -> None:
    """Issue 22: NVML calls per second across every process of the real hub, with the service alone
    (the five users' servers running, a kernel started in each, one JupyterLab sidebar open: the
    service samples only while somebody asks), then a ``%gpu_monitor`` panel in one user's kernel,
    in all five, then besides a JupyterLab terminal per user running ``jupyter-gpu status --watch 1``:
    flat, at most 10 % above the service alone, and every call the service's (no panel, terminal or
    user server read NVML). The panels say where their sample came from ("from the server" or "from
    the hub", not "NVML read here") and so do the terminals.

    Tolerance: a 10-second window holds 20 +- 1 of the service's samples (+-5 %); a busier machine
    lengthens the service's period (fewer calls, never more). One panel reading NVML itself would add
    one more sampler (+100 %), far outside it."""
    start_servers(hub, SERVERS)
    service = service_pid(hub)
    kernels: list[Any] = []
    kernel_ids: list[tuple[str, str]] = []
    terminals: list[tuple[str, str]] = []
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(_close_panels_and_terminals, hub, kernels, kernel_ids, terminals)
        for user, _ in SERVERS:
            kernel_id, kernel = _users_kernel(hub, user)
            kernel_ids.append((user, kernel_id))
            kernels.append(kernel)
        before = simulate.calls_by_process(hub.calls_dir)
        answers = cleanup.enter_context(sidebars_open(hub, SERVERS[:1]))
        # the sidebar's server asks the service, whose sampler runs
        samplers_running(hub, before, answers, SERVERS[:1], 1)
        rates, windows = {}, {}
        rates["service alone"], windows["service alone"] = calls_during(hub, PANEL_WINDOW_S)
        for label, opened in (("1 panel", kernels[:1]), ("5 panels", kernels[1:])):
            for kernel in opened:
                out, err = kernel.run("%load_ext jupyter_gpu\n%gpu_monitor --interval 1")
                assert not err and kernel.displayed, (out, err)
                # a panel watched in a browser: this test drives the kernel over ZMQ, which the
                # server does not count as a connection, so the panel would pause after 10 s
                kernel.run("from jupyter_gpu.panel import widget\nwidget.open_panels()[-1].unconnected.grace_s = 1e9")
            wait_until(
                lambda opened=opened: all(_panel_state(k)[0][0] > 0 for k in opened), 60, "the panels' first sample"
            )
            rates[label], windows[label] = calls_during(hub, PANEL_WINDOW_S)
        shown = {}
        for user, _ in SERVERS:
            code, terminal = hub.api("POST", f"/user/{user}/api/terminals")
            assert code == 200, terminal
            terminals.append((user, terminal["name"]))
            # on a thread of its own: the browser tests' Playwright keeps an event loop in this one
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                shown[user] = pool.submit(
                    asyncio.run,
                    _run_in_terminal(
                        hub,
                        user,
                        terminal["name"],
                        "jupyter-gpu status --watch 1",
                        until=r"Sample:[^\r\n]*\s+\S",
                    ),
                ).result()
        rates["5 panels + 5 terminals"], windows["5 panels + 5 terminals"] = calls_during(hub, PANEL_WINDOW_S)
        described = {n: {process_label(pid): calls for pid, calls in w.items()} for n, w in windows.items()}
        figures = ", ".join(f"{label} {rate:.1f}/s" for label, rate in rates.items())
        print(f"NVML calls/s across the hub's processes: {figures}; per process: {described}")

        # the terminals' commands ran through the window, and took the server's or the hub's sample
        for user, _ in SERVERS:
            assert _jupyter_gpu_watches(user), f"{user}'s terminal command ended: {shown[user]}"
            said = re.search(r"Sample:\s+from\s+the\s+(Jupyter\s+server|jupyter-gpu\s+service)", shown[user])
            assert said, shown[user]
            print(f"{user}'s terminal: Sample: from the {' '.join(said[1].split())}")
        # every panel took the host sample and its status line says where from
        for kernel in kernels:
            [[updates, source, status]] = _panel_state(kernel)
            print(f"panel: {updates} updates, source {source}")
            assert updates > 0 and source in ("jupyter-server", "hub-service"), (updates, source, status)
            assert ("from the server" if source == "jupyter-server" else "from the hub") in status, status
        assert rates["service alone"] > 0, "the service made no NVML calls"
        for label, window in windows.items():
            assert set(window) == {service}, (label, described[label])  # nobody but the service read NVML
            # Flat, not equal: the service's own rate moves with where a window's edges fall (one or
            # two of ~20 samples; the reader's 5-second re-reads of names and power limits landing in
            # it twice or three times): 28.2 against 31.2/s (+10.6 %) in a whole run, nobody but the
            # service reading. So the bound is the servers-polled test's; eleven viewers that read
            # NVML themselves would multiply the rate, not add a tenth.
            assert rates[label] <= 1.25 * rates["service alone"], figures


def _close_panels_and_terminals(
    hub: Hub, kernels: list[Any], kernel_ids: list[tuple[str, str]], terminals: list[tuple[str, str]]
) -> None:
    for user, name in terminals:
        hub.api("DELETE", f"/user/{user}/api/terminals/{name}")
    for kernel in kernels:
        kernel.client.stop_channels()
    for user, kernel_id in kernel_ids:
        hub.api("DELETE", f"/user/{user}/api/kernels/{kernel_id}")
