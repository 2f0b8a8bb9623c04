"""How long the hub service's console answer takes when user servers hang (issue 12 audit, h19).

200 user servers answer (one kernel each), plus 0 or 12 that accept the connection and never
answer (``tests/hub_fake.py``'s stand-in hub and servers; 4 simulated GPUs holding the kernels'
processes). Each run forces a fresh gather (no cached answers). Prints the median console answer
time over ``--runs`` requests for each case.

Command: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_hub_hung.py --runs 5``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support import ScenarioFile  # noqa: E402

from jupyter_gpu import simulate  # noqa: E402


async def measure(runs: int, scenario: ScenarioFile) -> None:
    import test_hub
    from hub_fake import scenario_of, user_snapshot

    run = await test_hub.start(interval_s=0.05)
    test_hub.people(run.hub)
    for i in range(200):
        run.hub.snapshots[f"user{i:03d}"] = user_snapshot(f"user{i:03d}", 1, gpu=i % 4, mib=1)
    scenario.write(scenario_of(run.hub.snapshots))
    for hung in (0, 12):
        run.hub.hang = {f"hung{i:02d}" for i in range(hung)}
        times = []
        for _ in range(runs):
            run.service._servers = None
            start = time.perf_counter()
            code, _ = await run.call("api/console", "admin-token")
            times.append(time.perf_counter() - start)
            assert code == 200
        print(
            f"202 answering servers + {hung} hung: console answer median "
            f"{statistics.median(times) * 1000:.0f} ms ({[round(t * 1000) for t in times]} ms)",
            flush=True,
        )
    run.service.sampler.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    scenario = ScenarioFile(Path(tempfile.mkdtemp()) / "gpus.json", simulate.plausible_gpus(4))
    os.environ[simulate.ENV_VAR] = str(scenario.path)
    asyncio.run(measure(args.runs, scenario))


if __name__ == "__main__":
    main()
