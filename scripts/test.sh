#!/usr/bin/env bash
# Set everything up from a fresh clone and run the whole test suite: lint, unit and kernel tests,
# server tests, browser tests (Debian's chromium, installed here if missing), the Prometheus checks
# (Debian's prometheus, installed here if missing when root) and the example
# notebooks under nbval. Extra arguments go to pytest.
#   scripts/test.sh [-x -k sidebar ...]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "The browser tests need Debian's chromium: sudo apt-get install chromium" >&2
    exit 1
  fi
fi

# promtool and prometheus (deploy/prometheus checks and the scrape integration test): Debian's package.
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's prometheus (promtool) for the deploy/prometheus tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  else
    echo "Note: without promtool (sudo apt-get install prometheus) the deploy/prometheus tests are skipped" >&2
  fi
fi

scripts/setup.sh test
echo "==> ruff"
.venv/bin/ruff check .
echo "==> pytest"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
exec .venv/bin/python -m pytest --nbval tests example_notebooks "$@"
