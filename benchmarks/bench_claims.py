"""``%gpu_select auto`` with a flooded claims directory (issue 23, item 3).

A fresh 1777 directory (like ``/tmp``) is the claims directory. Three cases: empty; 60,000 junk
files with claim-like names in it (what a neighbour can leave without running any process); the
same plus another user's folder of 2,000 junk claims of that user's live process (the cap per
folder; run as root, the other user is ``nobody``). Two
other kernels of this user hold real claims (GPUs 0 and 1) throughout, and every case checks that
``auto`` still sees them (it chooses GPU 2). Prints the median time of ``%gpu_select auto`` (the
whole magic in an IPython shell: snapshot of 4 simulated GPUs, lock, claims read, plan, claim
written), of ``ClaimBoard.load`` alone, and of ``host_reservations`` (what the server's sampling
thread, the panel and ``jupyter-gpu status`` add per sample to show reservations and runs, issue
30), over ``--runs`` repetitions each.

Command: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_claims.py --runs 21``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from jupyter_gpu import simulate  # noqa: E402
from jupyter_gpu.sources.claims import ClaimBoard, host_reservations, user_folder  # noqa: E402


def median_ms(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--junk", type=int, default=60_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jgpu-bench-claims-"))
    claims = work / "claims"
    claims.mkdir()
    claims.chmod(0o1777)
    scenario = work / "gpus.json"
    simulate.write_scenario(scenario, simulate.plausible_gpus(4))
    os.environ.update(JUPYTER_GPU_SIMULATE=str(scenario), JUPYTER_GPU_CLAIMS_DIR=str(claims))
    nobody = 65534  # the hostile folder's owner: another user (needs root), with a live process
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        for user in (None, None, nobody):
            sleepers.append(subprocess.Popen(["sleep", "600"], user=user))
        from IPython.core.interactiveshell import InteractiveShell

        from jupyter_gpu.kernel import magics
        from jupyter_gpu.sources import nvml

        gpus = list(nvml.snapshot().gpus)
        for sleeper, gpu in zip(sleepers[:2], gpus[:2], strict=True):
            board = ClaimBoard(claims)
            board.pid = sleeper.pid
            board.claim([gpu.uuid])
        logging.getLogger("jupyter_gpu.sources.claims").disabled = True  # the refused files' lines
        ip = InteractiveShell.instance()
        magics.register(ip)

        def select() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                ip.run_line_magic("gpu_select", "auto")
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "2", os.environ["CUDA_VISIBLE_DEVICES"]

        def load() -> None:
            assert ClaimBoard(claims).load(gpus) == {0: 1, 1: 1}

        def reservations() -> None:
            found = host_reservations(gpus, directory=str(claims))
            assert {g.uuid for g in gpus[:2]} <= {r.gpu_uuid for r in found if not r.holding}

        def report(case: str) -> None:
            select()  # warm: NVML started, modules imported
            print(
                f"{case}: %gpu_select auto median {median_ms(select, args.runs):.1f} ms, "
                f"ClaimBoard.load median {median_ms(load, args.runs):.1f} ms, "
                f"host_reservations median {median_ms(reservations, args.runs):.1f} ms",
                flush=True,
            )

        report("empty claims directory")
        for number in range(args.junk):
            (claims / f"jupyter-gpu-claim-4242-{number + 2}-{number:016x}.json").write_text("{}")
        report(f"{args.junk} junk files")
        hostile = user_folder(claims, nobody)
        hostile.mkdir(mode=0o755)
        os.chown(hostile, nobody, nobody)
        for number in range(2000):
            path = hostile / f"{sleepers[2].pid}-{number:016x}.json"
            path.write_text(json.dumps({"version": 1}))
            os.chown(path, nobody, nobody)
        report(f"{args.junk} junk files + 2000 junk claims of a live process")
        magics.unregister(ip)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
