"""Build the JupyterLab extension during ``pip install`` only when it is needed and possible.

Called by hatch-jupyter-builder (``build-function`` in ``pyproject.toml``) with the project root as
the working directory, for the sdist and for the wheel:

- the built extension (``jupyter_gpu/labextension``) records a SHA-256 of the sources it was built
  from (``labextension/src``, ``style``, ``schema``, ``package.json``, ``package-lock.json``,
  ``tsconfig.json``, ``webpack.config.js``) in ``build-source.sha256``;
- when that digest matches the sources, nothing is built (an sdist ships its bundle, so installing
  it needs no node at all);
- when the sources changed (or there is no bundle yet) and npm is on ``PATH``, it installs the
  build tools exactly as ``package-lock.json`` says (``npm ci`` where there is no ``node_modules``
  yet, ``npm install --no-save`` otherwise: neither writes the lockfile, so a build never leaves
  the checkout changed) and runs ``npm run build:prod``;
- when the sources changed but npm is missing, a shipped bundle is used with a warning; with no
  bundle at all the build stops with one line saying to install Node.js.

``JUPYTER_GPU_BUILD_LABEXTENSION=always`` rebuilds regardless; ``=never`` never runs npm (like
``HATCH_JUPYTER_BUILDER_SKIP_NPM=1``). Content digests, not mtimes: an sdist's or a checkout's mtimes
say nothing about which sources a bundle came from.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

SOURCES = ("src", "style", "schema", "package.json", "package-lock.json", "tsconfig.json", "webpack.config.js")
STAMP = "build-source.sha256"
ENV = "JUPYTER_GPU_BUILD_LABEXTENSION"

log = logging.getLogger("jupyter_gpu.build")


def source_digest(package_dir: Path) -> str:
    """SHA-256 over the relative paths and contents of every source file of the extension."""
    digest = hashlib.sha256()
    files: list[Path] = []
    for name in SOURCES:
        path = package_dir / name
        if path.is_dir():
            files.extend(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            files.append(path)
    for path in sorted(files, key=lambda p: p.relative_to(package_dir).as_posix()):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def decide(package_dir: Path, output_dir: Path, npm_found: bool, mode: str = "") -> str:
    """``"build"``, ``"skip"`` (bundle up to date, or npm disabled) or ``"shipped"`` (stale bundle,
    no npm); raises ``RuntimeError`` when there is neither a bundle nor npm."""
    has_bundle = (output_dir / "package.json").is_file() and (output_dir / "static").is_dir()
    if mode == "never":
        return "skip"
    stamp = output_dir / STAMP
    current = has_bundle and stamp.is_file() and stamp.read_text().strip() == source_digest(package_dir)
    if mode != "always" and current:
        return "skip"
    if npm_found:
        return "build"
    if has_bundle:
        return "shipped"
    raise RuntimeError(
        "jupyter_gpu: the JupyterLab extension is not built and npm is not on PATH: install Node.js "
        "(>= 20.19) and retry, or install a wheel or sdist of jupyter_gpu, which ship the built extension.")


def build_translations() -> None:
    """JupyterLab's catalogs of the extension (``jupyter_gpu/locale/<lang>/LC_MESSAGES/jupyter_gpu.json``)
    from each language's ``lab.po``: cheap, no npm, on every build (docs/i18n.md)."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        from jupyter_gpu.core.i18n import write_lab_catalogs
    finally:
        sys.path.pop(0)
    for path in write_lab_catalogs():
        log.info("jupyter_gpu: wrote %s", path)


def build(target_name: str, version: str, path: str = "labextension", output: str = "jupyter_gpu/labextension",
          build_cmd: str = "build:prod", npm: Any = None, **_: Any) -> None:
    """The hatch-jupyter-builder build function (see the module docstring)."""
    build_translations()
    package_dir = Path(path).resolve()
    output_dir = Path(output).resolve()
    mode = os.environ.get(ENV, "").strip().lower()
    if os.environ.get("HATCH_JUPYTER_BUILDER_SKIP_NPM") == "1":
        mode = "never"
    npm_cmd = npm or ["npm"]
    if isinstance(npm_cmd, str):
        npm_cmd = [npm_cmd]
    action = decide(package_dir, output_dir, shutil.which(npm_cmd[0]) is not None, mode)
    if action == "skip":
        log.info("jupyter_gpu: the built JupyterLab extension matches its sources; not rebuilding")
        return
    if action == "shipped":
        log.warning("jupyter_gpu: npm not found; installing the shipped JupyterLab extension, which was "
                    "built from other sources than these (install Node.js to rebuild it)")
        return
    from hatch_jupyter_builder.utils import normalize_cmd, run

    npm_cmd = normalize_cmd(npm_cmd)
    if "--skip-npm" in sys.argv:  # hatch-jupyter-builder's own switch, as npm_builder honours it
        log.info("jupyter_gpu: --skip-npm given; not building the JupyterLab extension")
        return
    fresh = not (package_dir / "node_modules").is_dir()
    log.info("jupyter_gpu: installing the JupyterLab extension's build tools with npm (%s)",
             "npm ci" if fresh else "npm install --no-save")
    run([*npm_cmd, "ci"] if fresh else [*npm_cmd, "install", "--no-save"], cwd=str(package_dir))
    run([*npm_cmd, "run", build_cmd], cwd=str(package_dir))
    (output_dir / STAMP).write_text(source_digest(package_dir) + "\n")
