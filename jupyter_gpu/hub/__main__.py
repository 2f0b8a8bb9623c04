"""``python -m jupyter_gpu.hub``: the jupyter-gpu JupyterHub service (started by the hub).

Its ``--help`` and one-line errors are in the language ``--language`` names (else
``JUPYTER_GPU_LANG``, else the standard variables); ``--language`` is also the console's language
for a browser whose page does not ask for another (``?lang=``). The service's log stays English.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from urllib.parse import urlparse

from ..core import i18n
from ..core.arguments import ArgumentParser
from ..core.i18n import _


def _prometheus_problem(args: argparse.Namespace) -> str | None:
    """A one-line error for bad Prometheus options (None: fine)."""
    if args.prometheus_token_file and not args.prometheus_url:
        return _("--prometheus-token-file needs --prometheus-url")
    if args.prometheus_url:
        url = urlparse(args.prometheus_url)
        if url.scheme not in ("http", "https") or not url.netloc or url.query or url.fragment:
            return _("--prometheus-url {url}: give the http(s) URL of Prometheus, e.g. http://prometheus:9090").format(
                url=repr(args.prometheus_url)
            )
    if args.prometheus_token_file:
        try:
            with open(args.prometheus_token_file, encoding="utf-8") as file:
                if not file.read(4096).strip():
                    return _("--prometheus-token-file {file}: the file is empty").format(
                        file=args.prometheus_token_file
                    )
        except OSError as error:
            return f"--prometheus-token-file: {error.strerror}: {args.prometheus_token_file}"
    if not args.idle_after > 0:
        return _("--idle-after must be positive")
    if "{name}" not in args.system_user:
        return _("--system-user {template}: the template must contain {placeholder}").format(
            template=repr(args.system_user), placeholder="{name}"
        )
    return None


DEFAULT_USAGE_DB = "jupyter_gpu_usage.sqlite"


def language_asked(argv: list[str]) -> str | None:
    """The value of ``--language`` in ``argv`` (looked for before the parser is built, so that its
    ``--help`` is in that language too), or None."""
    for position, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("--language="):
            return arg.partition("=")[2]
        if arg == "--language" and position + 1 < len(argv):
            return argv[position + 1]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    asked = language_asked(argv)
    with i18n.language_forced(asked) if asked else contextlib.nullcontext():
        checked = _arguments(argv)
    if isinstance(checked, int):
        return checked
    # From here on the service's own words are its log's: English. Each console request is
    # answered in its asker's language (hub.page.request_language, i18n.language_forced).
    i18n.set_language(i18n.SOURCE_LANGUAGE)
    return _serve(checked)


def _arguments(argv: list[str]) -> argparse.Namespace | int:
    """The parsed command line, or the exit status after its one-line error (in the language asked)."""
    parser = ArgumentParser(
        prog="python -m jupyter_gpu.hub",
        description=_(
            "The jupyter-gpu JupyterHub service: GPU console at /services/<name>/ and one NVML "
            "sampler for every user server of the host. Run it from c.JupyterHub.services."
        ),
    )
    parser.add_argument(
        "--language",
        metavar="LANG",
        help=_(
            "the language of the console and of this help (zh_CN, en; default: $JUPYTER_GPU_LANG, "
            "else each browser's Accept-Language); a console page's ?lang= still chooses its own"
        ),
    )
    parser.add_argument(
        "--proxy-url",
        default=os.environ.get("JUPYTER_GPU_PROXY_URL", ""),
        help=_(
            "ignored (kept so that older configurations still start): the service no longer asks "
            "user servers anything; they report to it (--report-interval)"
        ),
    )
    parser.add_argument(
        "--report-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help=_(
            "how often each user server reports its kernels to the service (told in every answer; "
            "a server silent for two intervals is shown as stale; default %(default)s)"
        ),
    )
    parser.add_argument("--interval", type=float, default=1.0, help=_("seconds between two NVML samples"))
    parser.add_argument(
        "--linger",
        type=float,
        default=90.0,
        help=_("keep sampling this long after the last request (then no NVML calls at all)"),
    )
    parser.add_argument(
        "--prometheus-url",
        metavar="URL",
        help=_(
            "read every node's GPUs and kernels from this Prometheus (its HTTP API, e.g. "
            "http://prometheus.monitoring:9090) instead of local NVML and the user servers"
        ),
    )
    parser.add_argument(
        "--prometheus-token-file",
        metavar="FILE",
        help=_("a file holding a bearer token for --prometheus-url (read at each query)"),
    )
    parser.add_argument(
        "--prometheus-account",
        default="prometheus",
        metavar="USER",
        help=_(
            "the account Prometheus runs as when --prometheus-url is http:// on this host: the bearer "
            "token goes only to a listener of this account, root or the service's own (default: prometheus)"
        ),
    )
    parser.add_argument(
        "--idle-after",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help=_(
            "with --prometheus-url: flag kernels idle this long (the user servers' "
            "c.JupyterGpuServer.idle_threshold_s, default %(default)s)"
        ),
    )
    parser.add_argument(
        "--host-label",
        metavar="NAME",
        help=_(
            "the host label of jupyter_gpu_gpu_info on /metrics (default: $JUPYTER_GPU_HOST, "
            "else the host name; give user servers the same c.JupyterGpuServer.host_label)"
        ),
    )
    parser.add_argument(
        "--system-user",
        default="{name}",
        metavar="TEMPLATE",
        help=_(
            "the system account owning a hub user's processes, {name} standing for the "
            "hub user name (default %(default)s; The Littlest JupyterHub: jupyter-{name}). "
            "GPU memory is attributed to a user only through processes NVML shows owned "
            "by that account"
        ),
    )
    parser.add_argument(
        "--usage-db",
        metavar="FILE",
        help=_(
            "the SQLite file of usage accounting and the GPU history (relative to the service's "
            "working directory, c.JupyterHub.services' cwd; default {file}, and without "
            "accounting if that cannot be opened; created 0600, never through a symbolic link; an empty "
            "value turns accounting off)"
        ).format(file=DEFAULT_USAGE_DB),
    )
    parser.add_argument(
        "--usage-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help=_(
            "seconds between two usage samples, each one transaction: a crash loses at most one (default %(default)s)"
        ),
    )
    args = parser.parse_args(argv)
    problem = _prometheus_problem(args)
    if problem:
        print(f"python -m jupyter_gpu.hub: {problem}", file=sys.stderr)
        return 2
    missing = [
        name
        for name in ("JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL")
        if not os.environ.get(name)
    ]
    if missing:
        print(
            "python -m jupyter_gpu.hub: "
            + _("{variables} not set: run it from c.JupyterHub.services").format(variables=", ".join(missing)),
            file=sys.stderr,
        )
        return 2
    if args.interval <= 0 or args.linger <= 0 or not args.usage_interval > 0 or not 1 <= args.report_interval <= 600:
        print(
            "python -m jupyter_gpu.hub: "
            + _("--interval, --linger and --usage-interval must be positive, --report-interval 1 to 600"),
            file=sys.stderr,
        )
        return 2
    return args


def _serve(args: argparse.Namespace) -> int:
    """Run the service until the hub stops it."""
    from tornado.ioloop import IOLoop

    from .app import HubService, make_app
    from .reports import MAX_REPORT_BYTES
    from .store import StoreError

    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/jupyter-gpu/")

    def service_with(usage_db: str | None) -> HubService:
        return HubService(
            os.environ["JUPYTERHUB_API_URL"],
            os.environ["JUPYTERHUB_API_TOKEN"],
            args.proxy_url,
            interval_s=args.interval,
            linger_s=args.linger,
            prometheus_url=args.prometheus_url,
            prometheus_token_file=args.prometheus_token_file,
            prometheus_account=args.prometheus_account,
            idle_after_s=args.idle_after,
            host=args.host_label,
            system_user=args.system_user,
            usage_db=usage_db,
            usage_interval_s=args.usage_interval,
            report_interval_s=args.report_interval,
            language=args.language,
        )

    try:
        service = service_with(DEFAULT_USAGE_DB if args.usage_db is None else args.usage_db or None)
    except StoreError as error:
        if args.usage_db is not None:  # the file asked for: a one-line error, nothing started
            print(f"python -m jupyter_gpu.hub: {error}", file=sys.stderr)
            return 2
        logging.getLogger("jupyter_gpu.hub").warning("jupyter-gpu: no usage accounting: %s (see --usage-db)", error)
        service = service_with(None)
    app = make_app(service, prefix)
    # A report larger than this is cut by tornado unread; up to it, refused and counted (413).
    app.listen(url.port or 80, url.hostname or "127.0.0.1", max_body_size=4 * MAX_REPORT_BYTES)
    logging.getLogger("jupyter_gpu.hub").info(
        "jupyter-gpu console at %s (%s)",
        prefix,
        f"every node from Prometheus at {args.prometheus_url}"
        if args.prometheus_url
        else f"user servers report every {args.report_interval:g} s",
    )
    if service.accountant is not None:
        IOLoop.current().add_callback(service.accountant.start)
    # The hub stops its services with SIGINT, then SIGTERM after its interrupt_timeout (10 s). A hub
    # started as a background job of a script (`jupyterhub &` in an entry point, no job control)
    # hands its services an ignored SIGINT, and every stop or restart of the hub would wait those
    # 10 s for this one. The service is never a terminal's job: the hub's SIGINT always stops it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        IOLoop.current().start()
    except KeyboardInterrupt:  # the hub's SIGINT
        pass
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
