#!/usr/bin/env bash
# Set up a working environment from a fresh clone: .venv with jupyter_gpu installed editable (its
# JupyterLab extension built by npm from labextension/) plus the extras asked for.
#   scripts/setup.sh [examples|test]     (default: test)
# Idempotent and quick when nothing changed: it reinstalls only when pyproject.toml or the
# extension's sources changed since the last run. pip's output goes to .venv/setup-<extras>.log;
# every 10 s a line says how long it has been running and what it is doing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

# Runs "$@" (pip) with its output in $log, printing every 10 s how long the install has run (since
# $started) and pip's latest step; on failure, the end of the log. A fresh install downloads TensorFlow and builds the
# JupyterLab extension with npm: minutes of silence otherwise.
log=".venv/setup-$extras.log"
with_progress() {
  : > "$log.since"  # packages unpacked after this are counted (scripts/progress_step.sh)
  "$@" >>"$log" 2>&1 &
  local pid=$! next=$((SECONDS - started + 10))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - started)) -ge $next ]; then
      echo "    $((SECONDS - started)) s: $(scripts/progress_step.sh "$log" .venv "$log.since")"
      next=$((next + 10))
    fi
  done
  if ! wait "$pid"; then
    tail -n 30 "$log" >&2
    echo "==> failed: $* (the whole output: $log)" >&2
    return 1
  fi
}

# What the environment is built from: pyproject.toml and the extension's sources, not what a build
# leaves beside them (node_modules, lib, tsconfig.tsbuildinfo), or the next run would install again.
stamp=".venv/.jupyter_gpu-setup-$extras"
inputs=$( { cat pyproject.toml; find labextension \( -path labextension/node_modules -o -path labextension/lib \
            -o -name __pycache__ \) -prune -o -type f ! -name tsconfig.tsbuildinfo -print 2>/dev/null \
            | sort | xargs cat 2>/dev/null; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$inputs" ] || [ ! -f jupyter_gpu/labextension/package.json ]; then
  echo "==> installing jupyter_gpu[$extras] into .venv with pip (first time: a few minutes; pip's output: $log)"
  : > "$log"
  started=$SECONDS
  with_progress .venv/bin/python -m pip install --upgrade pip
  with_progress .venv/bin/python -m pip install -e ".[$extras]"
  echo "==> installed: $(grep '^Successfully installed' "$log" | tail -n 1 | wc -w | awk '{print ($1 > 2 ? $1 - 2 : 0)}') packages new or upgraded"
  echo "$inputs" > "$stamp"
else
  echo "==> .venv is up to date"
fi

# The real-JupyterHub test (tests/browser/test_hub_real.py): the hub's proxy from npm, and a Python
# environment the test's system users can run. .venv may come from a Python under /root (mode 0700
# here), so this one is built from /usr/bin/python3 and made world-readable.
if [ "$extras" = test ] && command -v npm >/dev/null 2>&1; then
  if [ ! -x .venv-hub/proxy/node_modules/.bin/configurable-http-proxy ]; then
    echo "==> installing configurable-http-proxy (npm) into .venv-hub/proxy"
    mkdir -p .venv-hub/proxy
    npm install --silent --no-fund --no-audit --prefix .venv-hub/proxy configurable-http-proxy@5 >/dev/null
  fi
  if [ ! -x .venv-hub/bin/jupyterhub-singleuser ] && [ -x /usr/bin/python3 ]; then
    echo "==> creating .venv-hub (users' servers for the JupyterHub test) from /usr/bin/python3"
    /usr/bin/python3 -m venv .venv-hub
  fi
  # What the users' servers and kernels import (ipywidgets: %gpu_monitor panels in hub kernels;
  # rfc3987: see the test extra in pyproject.toml, 2.6 s of CPU less for each server and the hub).
  # Installed when .venv-hub was just created or lacks one of them (an older .venv-hub had no
  # ipywidgets); the import test keeps reruns quick when nothing is missing.
  if [ -x .venv-hub/bin/python ] && ! .venv-hub/bin/python -c \
       "import jupyterhub, jupyter_server, ipykernel, pynvml, psutil, prometheus_client, traitlets, ipywidgets, rfc3987" \
       2>/dev/null; then
    echo "==> installing the users' packages into .venv-hub (jupyterhub-singleuser, ipykernel, ipywidgets, ...)"
    .venv-hub/bin/python -m pip install --quiet "jupyterhub>=6,<7" "jupyter_server>=2.4" ipykernel \
      "nvidia-ml-py>=12.535" "psutil>=5.9" "prometheus_client>=0.17" "traitlets>=5.9" "ipywidgets>=8.0" \
      "rfc3987>=1.3" 2> >(grep -v "^WARNING: Location" >&2)
    chmod -R a+rX .venv-hub
  fi
fi
