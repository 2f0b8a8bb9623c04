#!/usr/bin/env bash
# The release check for "installs without node", end to end with pip's own build isolation:
#   1. build the sdist from this checkout (npm builds the extension if its sources changed);
#   2. in a fresh venv, with no node or npm on PATH, `pip install` that sdist (dependencies from the
#      index, build backend in pip's isolated build environment);
#   3. check that JupyterLab sees the extension and that its files are the sdist's, byte for byte.
# Takes a minute or two (downloads the build backend and the dependencies). The fast version of this
# check runs in the test suite (tests/test_labextension_build.py, marked slow).
#
#   scripts/check_sdist_without_node.sh [python]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/builder"
"$work/builder/bin/pip" install --quiet build
(cd "$repo" && "$work/builder/bin/python" -m build --sdist --outdir "$work/dist")
sdist="$(ls "$work"/dist/jupyter_gpu-*.tar.gz)"

"$python" -m venv "$work/venv"
mkdir "$work/bin"  # PATH: the venv and the basic tools, but no node/npm
for tool in sh bash env uname git tar gzip tee grep diff rm mkdir ls cat; do
  if command -v "$tool" >/dev/null; then ln -s "$(command -v "$tool")" "$work/bin/$tool"; fi
done
export PATH="$work/venv/bin:$work/bin"
if command -v npm >/dev/null || command -v node >/dev/null; then echo "npm/node still on PATH" >&2; exit 1; fi
"$work/venv/bin/pip" install --quiet "$sdist" jupyterlab

"$work/venv/bin/jupyter" labextension list 2>&1 | tee "$work/list.txt"
grep -q "jupyter-gpu v0.1.0 .*enabled.*OK" "$work/list.txt"
mkdir "$work/unpacked" && tar xzf "$sdist" -C "$work/unpacked"
diff -r "$work"/unpacked/jupyter_gpu-*/jupyter_gpu/labextension/static \
        "$work/venv/share/jupyter/labextensions/jupyter-gpu/static"
echo "OK: the sdist installed without node; the installed extension is the sdist's bundle."
