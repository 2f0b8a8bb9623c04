#!/usr/bin/env bash
# The main job: set everything up, then open JupyterLab on the examples (working copies of
# example_notebooks/ in .venv/examples) with every face of
# jupyter_gpu (magics, notebook panel, server extension, sidebar); Notebook 7 is served too. On a
# machine without an NVIDIA driver it shows the simulated 'demo' GPUs, whose figures move (a
# training job, a kernel going idle). Extra arguments go to `jupyter lab`.
#   scripts/lab.sh [--ServerApp.port=9999 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh examples

if [ -z "${JUPYTER_GPU_SIMULATE:-}" ] && \
   ! .venv/bin/python -c "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')" 2>/dev/null; then
  export JUPYTER_GPU_SIMULATE=demo
  echo "==> no NVIDIA driver on this machine: showing simulated GPUs (JUPYTER_GPU_SIMULATE=demo, moving over 15 minutes)"
fi

# The examples open from working copies in .venv/examples (scripts/examples_copy.sh): running them
# and autosave change the copies, never example_notebooks/, so the checkout stays as it was cloned.
# Checkpoints go to .venv/checkpoints (FileCheckpoints joins an absolute checkpoint_dir as it is).
examples=$(scripts/examples_copy.sh .venv/examples)
echo "==> the examples open from $examples (copies: example_notebooks/ stays as cloned)"
args=(--no-browser --ServerApp.root_dir="$examples"
      --FileCheckpoints.checkpoint_dir="$PWD/.venv/checkpoints"
      --ServerApp.ip="${JUPYTER_GPU_LAB_IP:-127.0.0.1}" --ServerApp.port="${JUPYTER_GPU_LAB_PORT:-8888}")
if [ "$(id -u)" = 0 ]; then args+=(--allow-root); fi
echo "==> starting JupyterLab; open the URL it prints below (the GPU icon is in the left sidebar;"
echo "    the same URL with /tree instead of /lab opens Notebook 7)"
exec .venv/bin/jupyter lab "${args[@]}" "$@"
