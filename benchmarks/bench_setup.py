"""The main job's second start: ``scripts/setup.sh examples`` when nothing changed (issue 21 item 8).

``scripts/lab.sh`` runs it before every start; once ``.venv`` is set up it only hashes
``pyproject.toml`` and the extension's sources against the stamp of the last install. Run from a
checkout that ``scripts/lab.sh`` has set up once:

    .venv/bin/python benchmarks/bench_setup.py [--runs 9]

Prints the median, fastest and slowest wall time of the runs, and fails if any run installed
(a run must print ``==> .venv is up to date``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        result = subprocess.run(["scripts/setup.sh", "examples"], cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - started)
        if "==> .venv is up to date" not in result.stdout:
            raise SystemExit(f"setup.sh installed instead of finding .venv up to date:\n{result.stdout}")
    print(
        f"scripts/setup.sh examples, nothing changed: median {statistics.median(times) * 1000:.0f} ms "
        f"(fastest {min(times) * 1000:.0f}, slowest {max(times) * 1000:.0f}; {args.runs} runs)"
    )


if __name__ == "__main__":
    main()
