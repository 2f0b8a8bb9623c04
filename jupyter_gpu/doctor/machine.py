"""The doctor's first part: the machine, read in well under a second, never raising.

NVML through :mod:`jupyter_gpu.sources.nvml` (driver, NVML and CUDA driver versions, each GPU's
UUID, PCI bus id and MIG mode); what NVML lets this user see of other processes (counts only: other
users' command lines never leave the reader); the CUDA variables; container hints; the fence and
the admin's settings; whether the server extension and the hub service answer (each asked once,
with a short timeout).
"""

from __future__ import annotations

import getpass
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from ..core.i18n import N_
from ..core.snapshot import Snapshot
from ..core.units import format_bytes
from ..plan import Fence
from .report import Finding, Machine, MachineGpu, Service

#: Seconds each service is given to answer.
SERVICE_TIMEOUT_S = 0.3
ADMIN_VARIABLES = (
    "JUPYTER_GPU_MAX_LIMIT",
    "JUPYTER_GPU_DEFAULT_SELECT",
    "JUPYTER_GPU_DEFAULT_LIMIT",
    "JUPYTER_GPU_GROWTH",
    "JUPYTER_GPU_SHOW_OTHER_NAMES",
)
VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")


def container_hint(root: str = "/") -> str | None:
    """Why this looks like a container (None: it does not)."""
    for marker, what in ((".dockerenv", "Docker"), ("run/.containerenv", "Podman")):
        if os.path.exists(os.path.join(root, marker)):
            return f"{what} (/{marker} exists)"
    try:
        with open(os.path.join(root, "proc/1/cgroup"), encoding="utf-8", errors="replace") as cgroup:
            text = cgroup.read(65536)
    except OSError:
        text = ""
    for word in ("kubepods", "docker", "containerd", "lxc"):
        if word in text:
            return f"{word} (in /proc/1/cgroup)"
    return None


def process_counts(snapshot: Snapshot, own_user: str | None) -> dict[str, int]:
    """GPU processes NVML lists, counted by owner (never named: other users' are not ours to show)."""
    processes = [process for gpu in snapshot.gpus for process in gpu.processes]
    yours = sum(1 for p in processes if p.user is not None and p.user == own_user)
    unknown = sum(1 for p in processes if p.user is None)
    return {
        "total": len(processes),
        "yours": yours,
        "other_users": len(processes) - yours - unknown,
        "unknown_owner": unknown,
    }


#: Memory a GPU may use with no process listed (the driver's and the display's own, beyond ``reserved``).
UNLISTED_SLACK_BYTES = 512 * 1024**2


def unlisted_memory(snapshot: Snapshot) -> list[str]:
    """One note per GPU whose used memory is far more than its listed processes hold: processes NVML
    does not show this user (another container or PID namespace, or no permission to see them)."""
    notes: list[str] = []
    for gpu in snapshot.gpus:
        if gpu.error:
            continue
        listed = sum(process.memory or 0 for process in gpu.processes)
        hidden = gpu.memory_used - listed
        if hidden > UNLISTED_SLACK_BYTES:
            notes.append(
                Finding.said(
                    N_(
                        "GPU {index}: {size} in use by processes NVML does not list here (another container or "
                        "PID namespace, or no permission to see them): jupyter_gpu cannot say whose"
                    ),
                    index=gpu.index,
                    size=format_bytes(hidden),
                )
            )
    return notes


def server_extension(runtime_dir: str | None = None) -> Service:
    """Whether a Jupyter server of this user runs and its ``jupyter-gpu/snapshot`` answers.

    Found and asked as every face asks it (:mod:`jupyter_gpu.sources.host`): only this user's own
    runtime files (regular files, never through a link), each server's own token sent over
    ``http://`` only to a listener of this user."""
    from ..sources.host import HostSample
    from ..sources.remote import BadAnswer
    from ..sources.servers import running_servers, runtime_folder

    name = "Server extension"
    folder = Path(runtime_dir) if runtime_dir is not None else runtime_folder()
    servers = running_servers(folder, ancestors_only=False)
    if not servers:
        return Service(name, "not running", "no Jupyter server of yours is running on this machine")
    sample = HostSample(runtime_dir=folder, timeout_s=SERVICE_TIMEOUT_S)
    problems = []
    for server in servers:
        try:
            sample.ask_server(server)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return Service(name, "no answer", f"the server at {server.url} runs without jupyter_gpu's extension")
            if error.code in (401, 403):
                return Service(
                    name, "no answer", f"the server at {server.url} refused its own token (HTTP {error.code})"
                )
            problems.append(f"the server at {server.url} answered HTTP {error.code}")
        except (OSError, BadAnswer) as error:
            problems.append(f"the server at {server.url} did not answer usably ({getattr(error, 'reason', error)})")
        else:
            return Service(name, "answers", server.url)
    return Service(name, "no answer", "; ".join(problems))


def hub_service() -> Service:
    """Whether the hub service (``JUPYTER_GPU_SERVICE_URL``, under JupyterHub) answers ``api/devices``.

    Asked as the server extension asks it (:class:`jupyter_gpu.sources.remote.RemoteSource`): over
    ``http://`` the user's token goes only to a listener owned by the service's account (``root``)."""
    from ..sources.remote import SERVICE_URL_ENV, BadAnswer, RemoteSource, resolve_source

    name = "Hub service"
    if not (os.environ.get(SERVICE_URL_ENV) or os.environ.get("JUPYTERHUB_API_TOKEN")):
        return Service(name, "not configured", f"{SERVICE_URL_ENV} and JUPYTERHUB_API_TOKEN unset: no JupyterHub")
    url = resolve_source("hub-service") or ""
    source = RemoteSource(
        url, fallback=lambda: Snapshot(nvml_available=False, timestamp=0.0), timeout_s=SERVICE_TIMEOUT_S
    )
    try:
        source.fetch()
    except urllib.error.HTTPError as error:
        return Service(name, "no answer", f"{url} answered HTTP {error.code}")
    except (OSError, BadAnswer) as error:
        reason = getattr(error, "reason", error)
        return Service(name, "no answer", f"{url}: {reason}")
    return Service(name, "answers", url)


def read_machine(
    fence: Fence, start_env: Mapping[str, str] | None = None, services: bool = True
) -> tuple[Machine, Snapshot]:
    """The machine part of the report, and the snapshot it was read from. The CUDA variables are
    shown as this process started with them (``start_env``; default: as they are now): what the
    user's shell, the spawner or the kernelspec set, before any plan wrote its own."""
    from ..sources.nvml import driver_facts, snapshot

    started = time.monotonic()
    shot = snapshot()
    facts = driver_facts()
    gpus = tuple(
        MachineGpu(
            index=gpu.index,
            name=gpu.name,
            uuid=gpu.uuid,
            pci_bus_id=gpu.pci_bus_id,
            mig_mode=gpu.mig_mode,
            memory_total=gpu.memory_total,
            error=gpu.error,
        )
        for gpu in shot.gpus
    )
    try:
        own_user: str | None = getpass.getuser()
    except (KeyError, OSError):
        own_user = None
    counts = process_counts(shot, own_user) if shot.nvml_available else {}
    problems: list[str] = []
    notes = list(shot.warnings)
    container = container_hint()
    nvidia_visible = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    if counts.get("unknown_owner"):
        notes.append(
            Finding.said(
                N_(
                    "{count} GPU process(es) NVML lists have no owner in this PID namespace (a container sees "
                    "the host's PIDs): the server attributes memory from the kernels' own reports"
                ),
                count=counts["unknown_owner"],
            )
        )
    if container and nvidia_visible not in (None, "all"):
        notes.append(
            Finding.said(
                N_(
                    "NVIDIA_VISIBLE_DEVICES was used by the container runtime on the host: inside, NVML numbers "
                    "the GPUs it was given from 0"
                )
            )
        )
    notes += unlisted_memory(shot) if shot.nvml_available else []
    for gpu in shot.gpus:
        if gpu.error:
            problems.append(Finding.said(N_("GPU {index} cannot be read: {error}"), index=gpu.index, error=gpu.error))
    admin = {key: os.environ[key] for key in ADMIN_VARIABLES if os.environ.get(key)}
    machine = Machine(
        nvml_available=shot.nvml_available,
        nvml_error=shot.error,
        simulated=shot.simulated,
        driver_version=shot.driver_version,
        nvml_version=facts.nvml_version,
        cuda_driver_version=facts.cuda_driver_version,
        gpus=gpus,
        processes=counts,
        environment={key: (os.environ if start_env is None else start_env).get(key) for key in VARIABLES},
        container=container,
        fence=fence.describe() if fence.active else None,
        admin=admin,
        services=(server_extension(), hub_service()) if services else (),
        problems=tuple(problems),
        notes=tuple(notes),
        elapsed_s=time.monotonic() - started,
    )
    return machine, shot
