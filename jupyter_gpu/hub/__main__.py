"""``python -m jupyter_gpu.hub``: the jupyter-gpu JupyterHub service (started by the hub)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from urllib.parse import urlparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_gpu.hub",
        description="The jupyter-gpu JupyterHub service: GPU console at /services/<name>/ and one NVML "
                    "sampler for every user server of the host. Run it from c.JupyterHub.services.")
    parser.add_argument("--proxy-url", default=os.environ.get("JUPYTER_GPU_PROXY_URL", "http://127.0.0.1:8000"),
                        help="where the service reaches user servers: the hub's proxy (default "
                             "%(default)s, c.JupyterHub.bind_url)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two NVML samples")
    parser.add_argument("--linger", type=float, default=90.0,
                        help="keep sampling this long after the last request (then no NVML calls at all)")
    args = parser.parse_args(argv)
    missing = [name for name in ("JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL")
               if not os.environ.get(name)]
    if missing:
        print(f"python -m jupyter_gpu.hub: {', '.join(missing)} not set: run it from c.JupyterHub.services",
              file=sys.stderr)
        return 2
    if args.interval <= 0 or args.linger <= 0:
        print("python -m jupyter_gpu.hub: --interval and --linger must be positive", file=sys.stderr)
        return 2

    from tornado.ioloop import IOLoop

    from .app import HubService, make_app

    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/jupyter-gpu/")
    service = HubService(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"], args.proxy_url,
                         interval_s=args.interval, linger_s=args.linger)
    app = make_app(service, prefix)
    app.listen(url.port or 80, url.hostname or "127.0.0.1")
    logging.getLogger("jupyter_gpu.hub").info("jupyter-gpu console at %s (user servers through %s)",
                                              prefix, args.proxy_url)
    try:
        IOLoop.current().start()
    except KeyboardInterrupt:  # the hub stops its services with SIGINT
        pass
    finally:
        service.sampler.close(timeout=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
