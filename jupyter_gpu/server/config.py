"""The server extension's settings: ``c.JupyterGpuServer.<name>`` in ``jupyter_server_config.py``."""

from __future__ import annotations

from traitlets import Bool, Float, Unicode, validate
from traitlets.config import Configurable


class JupyterGpuServer(Configurable):
    """Settings of the jupyter_gpu server extension (GPU snapshot endpoint and Prometheus gauges).

    Example ``jupyter_server_config.py``::

        c.JupyterGpuServer.interval_s = 2
        c.JupyterGpuServer.idle_threshold_s = 1800
        c.JupyterGpuServer.show_other_users = False
    """

    enabled = Bool(
        True,
        config=True,
        help="Serve jupyter-gpu/snapshot and the Prometheus gauges. False loads nothing at all.",
    )

    language = Unicode(
        "",
        config=True,
        help="""The language of the messages this server's users read ('zh_CN', 'en'). '' (the
        default): JUPYTER_GPU_LANG, else the language chosen in JupyterLab's Settings → Language,
        else LANGUAGE/LC_ALL/LC_MESSAGES/LANG. API fields, metrics and the log stay English
        (docs/i18n.md).""",
    )

    interval_s = Float(
        1.0,
        config=True,
        help="""Seconds between two GPU samples. One background thread per server reads NVML once per
        interval however many browsers poll; NVML is never read on the server's event loop.""",
    )

    linger_s = Float(
        90.0,
        config=True,
        help="""Keep sampling this many seconds after the last request for the snapshot or the last
        Prometheus scrape, then stop: an idle server makes no NVML calls at all. Set it above your
        Prometheus scrape_interval, or each scrape sees the sample taken after the previous one.""",
    )

    idle_threshold_s = Float(
        3600.0,
        config=True,
        help="""A kernel that has run no cell for this many seconds while one of its processes holds
        GPU memory is reported as idle ("idle": true), for the sidebar to highlight and admins to
        act on (widget updates, such as an open %gpu_monitor panel's, are not cells). Nothing is
        shut down automatically (see cull_idle_after_s).""",
    )

    show_other_users = Bool(
        True,
        config=True,
        help="""Show processes of other users in the snapshot. They carry only their PID, user and GPU
        memory (never their program name or command line, which are not even read). False leaves them
        out; their memory still counts in each GPU's memory_used.""",
    )

    prometheus = Bool(
        True,
        config=True,
        help="""Add jupyter_gpu_* gauges to the server's own /metrics endpoint (which
        ServerApp.authenticate_prometheus protects). A scrape counts as demand, like a poll.""",
    )

    prometheus_notebook_labels = Bool(
        False,
        config=True,
        help="""Label the per-kernel gauges with notebook paths even when /metrics is public
        (ServerApp.authenticate_prometheus = False). Paths often say what people work on
        ("secret-project/payroll-2026.ipynb"), so in that mode the notebook label is left empty
        unless this is True. With authentication on (the default), the label always carries the path.""",
    )

    wait_s = Float(
        2.0,
        config=True,
        help="""When a request wakes an idle sampler, wait up to this many seconds for a fresh sample
        before answering with the last one (marked stale). A hung NVML call never holds a request
        longer than this.""",
    )

    history_s = Float(
        900.0,
        config=True,
        help="""Seconds of per-GPU utilization and memory history kept for jupyter-gpu/history (what the
        sidebar's charts open with). Fixed memory: about 11 bytes per GPU and sample (15 minutes at
        1 s on 8 GPUs: under 100 KB), at most 3600 samples per GPU. Times when nobody polled, and
        the sampler therefore slept, are gaps.""",
    )

    source = Unicode(
        "nvml",
        config=True,
        help="""Where GPU figures come from. "nvml" (default): this server reads NVML itself.
        "hub-service": the host's jupyter-gpu JupyterHub service (URL in $JUPYTER_GPU_SERVICE_URL, else
        http://127.0.0.1:10101/services/jupyter-gpu/), so one sampler serves every user server of the
        host; this server only adds its own kernels' attribution. An http(s) URL: that service. When the
        service cannot be reached, this server reads NVML itself and says so in the snapshot's warnings.""",
    )

    @validate("source")
    def _source(self, proposal: dict) -> str:
        from ..sources.remote import resolve_source

        resolve_source(proposal["value"])  # ValueError with one line for anything else
        return proposal["value"]

    service_account = Unicode(
        "root",
        config=True,
        help="""With source "hub-service" or an http:// URL: the local account the jupyter-gpu service
        runs as (a name or a uid; "root", the default, is what a hub-managed service runs as when
        the hub runs as root). This server sends its JUPYTERHUB_API_TOKEN (which also opens this
        user's server) in each request to the service, so it first checks, in /proc/net/tcp, that
        the socket it connected to is owned by this account: while the service is down, another
        local user listening on its port gets no request and no token, and the snapshot's warnings
        say who was listening. An http:// address that is not on this host cannot be checked and
        is refused. https:// URLs are checked by TLS instead (no account check). "": no check, the
        token goes to whoever listens on the service's address.""",
    )

    report_to_hub = Bool(
        True,
        config=True,
        help="""On JupyterHub (JUPYTERHUB_API_TOKEN set) with the jupyter-gpu service known (source
        "hub-service" or a URL, or $JUPYTER_GPU_SERVICE_URL): push this server's kernel table (kernel
        ids, notebooks, idle clocks, the kernels' PIDs) to the service every interval it asks for, with
        this server's own token, to the service's proven socket (see service_account). The admin
        console and usage accounting read these reports; an admin's "Shut down" comes back in the
        service's answer and is carried out here, logged with the admin's name. The service never
        sends anything to this server. False: no report (the console shows no kernels for this user).""",
    )

    cull_idle_after_s = Float(
        0.0,
        config=True,
        help="""Shut down a kernel that holds GPU memory and has run no cell for this many seconds
        (0, the default: never). Kernels running a cell and kernels holding no GPU memory are never
        culled; each cull is logged with the user, notebook, GPUs and memory freed. While it is on, the
        server samples the GPUs continuously (one NVML sample per interval_s), polled or not.""",
    )

    cull_warn_s = Float(
        300.0,
        config=True,
        help="""With cull_idle_after_s set: this many seconds before a kernel is culled, the snapshot
        marks it (kernels[].cull_warning, cull_in_s) and JupyterLab shows a countdown in the GPU
        sidebar and status bar, and a notification. 0: no warning.""",
    )

    host_label = Unicode(
        "",
        config=True,
        help="""The host label of the jupyter_gpu_gpu_info Prometheus series (the machine the GPUs are
        in). Empty: $JUPYTER_GPU_HOST, else the host name (in a Kubernetes pod that is the pod's
        name: pass the node's name, e.g. from the downward API's spec.nodeName, in JUPYTER_GPU_HOST).""",
    )

    @validate("cull_idle_after_s", "cull_warn_s")
    def _not_negative(self, proposal: dict) -> float:
        value = proposal["value"]
        if not value >= 0:
            raise ValueError(f"{proposal['trait'].name} must be 0 (off) or positive, not {value}")
        return value

    @validate("interval_s", "linger_s", "wait_s", "history_s")
    def _positive(self, proposal: dict) -> float:
        value = proposal["value"]
        if value <= 0:
            raise ValueError(f"{proposal['trait'].name} must be positive, not {value}")
        return value
