#!/usr/bin/env bash
# Set up a working environment from a fresh clone: .venv with jupyter_gpu installed editable (its
# JupyterLab extension built by npm from labextension/) plus the extras asked for.
#   scripts/setup.sh [examples|test]     (default: test)
# Idempotent and quick when nothing changed: it reinstalls only when pyproject.toml or the
# extension's sources changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

stamp=".venv/.jupyter_gpu-setup-$extras"
inputs=$( { cat pyproject.toml; find labextension -path labextension/node_modules -prune -o \
            -path labextension/lib -prune -o -type f -print 2>/dev/null | sort | xargs cat 2>/dev/null; } \
          | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$inputs" ] || [ ! -f jupyter_gpu/labextension/package.json ]; then
  echo "==> installing jupyter_gpu[$extras] into .venv (builds the JupyterLab extension with npm)"
  .venv/bin/python -m pip install --quiet --upgrade pip 2> >(grep -v "^WARNING: Location" >&2)
  .venv/bin/python -m pip install --quiet -e ".[$extras]" 2> >(grep -v "^WARNING: Location" >&2)
  echo "$inputs" > "$stamp"
else
  echo "==> .venv is up to date"
fi
