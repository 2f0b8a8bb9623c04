#!/usr/bin/env bash
# The GPU check (issue 29, docs/real-gpu.md): tests/gpu/ as one command, and its report.
#
#   scripts/gpu-check.sh OUT_DIR              on a machine with an NVIDIA driver (offline is fine):
#                                             OUT_DIR/gpu-report.json and OUT_DIR/gpu-report.md
#   scripts/gpu-check.sh --simulated OUT_DIR  the same checks over one simulated GPU and the CUDA
#                                             stand-in (tests/standin); what they cannot model is skipped
#   scripts/gpu-check.sh --fetch-wheels [DIR] (online) what a bare GPU machine lacks, as wheels for
#                                             CPython 3.12 manylinux x86_64, into DIR (.gpu-wheels/)
#
# The real run installs .gpu-wheels/ into a temporary folder (never into the machine's environment)
# and loads jupyter_gpu from this tree (PYTHONPATH: no build, no npm). The whole run is time-boxed
# (GPU_CHECK_TIME_BOX_S, 450 s by default); a run cut off still leaves the checks it finished.
# GPU_CHECK_PYTHON picks the interpreter (default: python3; --simulated: .venv/bin/python if present).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHEELS=${GPU_CHECK_WHEELS:-.gpu-wheels}
# The GPU machines' Python; another only to rehearse the offline install on a machine without 3.12.
WHEELS_PYTHON=${GPU_CHECK_WHEELS_PYTHON:-3.12}
MAX_WHEELS_MIB=48
# What tests/gpu needs beyond a bare GPU machine's python3 (PyTorch, JAX, CuPy, nvidia-ml-py, numpy,
# psutil, pytest, prometheus-client): the kernel and server checks.
NEEDED=(ipykernel jupyter_client jupyter_server pytest-timeout)
# Installed there already (and pytest's own dependencies): their wheels are dropped after the fetch,
# so the machine's own versions stay in use.
PRESENT=(numpy psutil pytest pluggy iniconfig prometheus_client nvidia_ml_py)

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

fetch_wheels() {
  local dir=${1:-$WHEELS}
  rm -rf "$dir" && mkdir -p "$dir"
  python3 -m pip download --quiet --dest "$dir" --only-binary=:all: \
    --python-version "$WHEELS_PYTHON" --implementation cp --abi "cp${WHEELS_PYTHON/./}" --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any "${NEEDED[@]}"
  local name
  for name in "${PRESENT[@]}"; do rm -f "$dir/$name"-[0-9]*.whl; done
  local size
  size=$(du -sm "$dir" | cut -f1)
  echo "==> $(ls "$dir" | wc -l) wheels, ${size} MiB in $dir"
  ls "$dir" | sed 's/-py[0-9].*$//; s/-cp[0-9].*$//' | awk -F- '{print $1}' | sort | uniq -d | grep . \
    && { echo "more than one version of the packages above" >&2; exit 1; }
  if [ "$size" -gt "$MAX_WHEELS_MIB" ]; then
    echo "the wheels take ${size} MiB, more than ${MAX_WHEELS_MIB} MiB" >&2
    exit 1
  fi
}

mode=real
case "${1:-}" in
  --fetch-wheels) fetch_wheels "${2:-}"; exit 0 ;;
  --simulated) mode=simulated; shift ;;
  -h|--help|"") usage ;;
esac
[ $# -eq 1 ] || usage
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/jupyter-gpu-check.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

if [ "$mode" = simulated ]; then
  PY=${GPU_CHECK_PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
  export JUPYTER_GPU_CHECK_MODE=simulated JUPYTER_GPU_SIMULATE=1
  export PYTHONPATH="$ROOT:$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
else
  PY=${GPU_CHECK_PYTHON:-python3}
  unset JUPYTER_GPU_CHECK_MODE JUPYTER_GPU_SIMULATE
  SITE="$SCRATCH/site"
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "==> installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
    if ! "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl 2>"$SCRATCH/pip.err"; then
      # No pip there (or it refused): a wheel is a zip file; unpacked, it imports the same.
      echo "    (pip: $(tail -1 "$SCRATCH/pip.err"); unpacking the wheels instead)"
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$SITE" "$WHEELS"/*.whl
    fi
  else
    echo "==> no wheels in $WHEELS (scripts/gpu-check.sh --fetch-wheels, online): using what is installed"
  fi
  export PYTHONPATH="$ROOT:$ROOT/tests:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  # The kernels' runtime and IPython folders stay in the scratch folder, not in the machine's home.
  export JUPYTER_RUNTIME_DIR="$SCRATCH/runtime" JUPYTER_DATA_DIR="$SCRATCH/data" IPYTHONDIR="$SCRATCH/ipython"
fi

TIME_BOX=${GPU_CHECK_TIME_BOX_S:-450}
echo "==> tests/gpu ($mode), at most ${TIME_BOX} s; report in $OUT"
status=0
# SIGINT at the time box: pytest stops, writes the report (marked incomplete), and exits; SIGKILL 20 s later.
# addopts replaced: the suite's own (e.g. xdist's -n) may name plugins a bare GPU machine does not have.
timeout --signal=INT --kill-after=20 "$TIME_BOX" \
  "$PY" -m pytest tests/gpu -p gpu_report --gpu-report "$OUT" -m gpu -q -p no:cacheprovider \
  -o timeout=120 -o "addopts=-ra --strict-markers" --basetemp "$SCRATCH/pytest" || status=$?
if [ ! -s "$OUT/gpu-report.json" ]; then
  echo "no report was written (pytest exit status $status)" >&2
  exit 1
fi
cat "$OUT/gpu-report.md"
exit "$status"
