#!/usr/bin/env bash
# Set everything up from a fresh clone and run the whole test suite: lint (ruff; eslint, prettier
# and stylelint for the extension and the hub console), the extension's TypeScript unit tests (these
# two beside pytest), unit and kernel tests, server tests, browser tests (Debian's chromium,
# installed here if missing), the Prometheus checks (Debian's prometheus, installed here if missing
# when root) and the example notebooks under nbval, in three parallel workers. Extra arguments go to
# pytest.
#   scripts/test.sh [-x -k sidebar ...]
#   scripts/test.sh -m "not browser and not hub and not slow"     the quick loop (README: Development)
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's packages the tests need: chromium (the browser tests) and prometheus (promtool and the
# server: the deploy/prometheus checks and the scrape integration test). One apt-get run for both.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's ${missing[*]} for the tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  elif [ "${missing[0]}" = chromium ]; then
    echo "The browser tests need Debian's chromium: sudo apt-get install ${missing[*]}" >&2
    exit 1
  else
    echo "Note: without promtool (sudo apt-get install prometheus) the deploy/prometheus tests are skipped" >&2
  fi
fi

scripts/setup.sh test
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> mypy"
.venv/bin/mypy
# pip's build of the extension (scripts/setup.sh) leaves labextension/node_modules behind, but it
# skips npm entirely when the shipped bundle already matches the sources: install from the lockfile
# then, or when an older node_modules lacks the lint and test tools.
if [ ! -x labextension/node_modules/.bin/eslint ] || [ ! -x labextension/node_modules/.bin/vitest ]; then
  (cd labextension && npm ci --no-audit --no-fund)
fi
echo "==> JupyterLab's catalogs of the extension (jupyter_gpu/locale/*/lab.po -> jupyter_gpu.json)"
# pip's build writes them too; this keeps them in step with a .po edited since (docs/i18n.md).
.venv/bin/python -m jupyter_gpu.core.i18n >/dev/null
# The extension's lint and unit tests (about 35 s of CPU) run beside pytest, whose workers wait on
# kernels, servers and browsers for much of their time: their output comes after pytest's, and
# either failing fails the command (benchmarks/README.md, "The quick loop").
labextension_log=.venv/labextension-checks.log
echo "==> labextension lint and unit tests, beside pytest (output: $labextension_log, shown after pytest)"
(cd labextension && npm run --silent lint:check && npm test --silent) >"$labextension_log" 2>&1 &
labextension_pid=$!
trap 'kill "$labextension_pid" 2>/dev/null || true' EXIT
echo "==> pytest"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
# Byte-compile the package and the tests' helpers once: the suite starts hundreds of kernels,
# servers and command lines that import them, and where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines) each of them would compile every module again (0.9 s of CPU a kernel with
# jupyter_gpu loaded against 0.7 s; benchmarks/README.md).
.venv/bin/python -m compileall -q jupyter_gpu tests >/dev/null
# Three workers by default (pytest-xdist, --dist loadfile: a module's tests and a notebook's cells
# stay on one worker), on two cores too: the workers wait on kernels, servers and browsers for much
# of their time, so a third keeps the cores busy (78 % of two cores busy, against 55 % with two), and
# every wait is on the event itself, so the workers' own load slows the run without failing it
# (JUPYTER_GPU_TEST_WORKERS=0: one process; benchmarks/README.md, issue 28).
status=0
.venv/bin/python -m pytest -n "${JUPYTER_GPU_TEST_WORKERS:-3}" --dist loadfile --nbval tests example_notebooks "$@" \
  || status=$?
echo "==> labextension lint and unit tests (run beside pytest)"
if wait "$labextension_pid"; then
  grep -E "Test Files|Tests " "$labextension_log" || tail -n 5 "$labextension_log"
else
  cat "$labextension_log"
  echo "==> failed: the extension's lint or unit tests (above)" >&2
  [ "$status" -ne 0 ] || status=1
fi
trap - EXIT
exit "$status"
