"""The built-in scenarios ``JUPYTER_GPU_SIMULATE`` names: ``N`` idle GPUs, ``demo`` (moving) and
``demo-still``. Plain dictionaries in the scenario schema (:mod:`jupyter_gpu.simulate.scenario`),
read by :class:`~jupyter_gpu.simulate.scenario.ScenarioSource` like any scenario file.
"""

from __future__ import annotations

from typing import Any

from ..core import messages
from ..core.errors import ScenarioError


def plausible_gpus(count: int) -> dict[str, Any]:
    """A scenario of ``count`` idle A100 80GB GPUs with nothing running."""
    if count < 0:
        raise ScenarioError(messages.SCENARIO_NEGATIVE_COUNT)
    return {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 0,
                "temperature": 32 + i,
                "power_w": 58 + i,
                "power_limit_w": 400,
            }
            for i in range(count)
        ]
    }


DEMO_LOOP_S = 900
"""The moving demo repeats every 15 minutes: a training job starts, runs (with a validation dip at
minutes 5 and 10) and ends; a kernel computes for five minutes, then sits idle holding its memory."""

DEMO_STILL = "demo-still"
"""The ``JUPYTER_GPU_SIMULATE`` value of the demo standing still (tests, stored notebook outputs)."""


def demo_scenario(moving: bool = True) -> dict[str, Any]:
    """A shared server: 4 GPUs of 2 models, other users' processes, one busy GPU.

    With ``moving`` (``JUPYTER_GPU_SIMULATE=demo``) its figures move over a 15-minute loop
    (:data:`DEMO_LOOP_S`) counted from the Unix epoch, so every process (server, kernels,
    ``jupyter-gpu status``) shows the same figures at the same moment:

    - GPU 0: bob's training job. Its memory ramps from 2 GiB to about 72 GiB in the first minute,
      utilization to about 96 % with a dip to 40 % (validation) at minutes 5 and 10; half a minute
      before the loop ends the job ends (memory, utilization and power drop), and the loop starts
      the next one.
    - GPU 1: carol's kernel computes (about 60 %) for five minutes, then goes idle: utilization
      0 %, its memory held.
    - GPU 2 stays idle and empty; GPU 3's desktop (dave's Xorg) flickers around 3 %.

    Without ``moving`` (``demo-still``) the figures are the still ones written here.
    """
    scenario: dict[str, Any] = {
        "driver_version": "550.54.15",
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 97,
                "memory_utilization": 61,
                "temperature": 71,
                "power_w": 372,
                "power_limit_w": 400,
                "clock_sm_mhz": 1410,
                "clock_memory_mhz": 1593,
                "unsupported": ["fan_speed"],  # an SXM module: cooled by the chassis, no fan of its own
                "processes": [{"pid": 910001, "memory_mib": 76000, "user": "bob", "name": "python"}],
            },
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_total_mib": 81920,
                "memory_reserved_mib": 512,
                "utilization": 12,
                "memory_utilization": 5,
                "temperature": 44,
                "power_w": 96,
                "power_limit_w": 400,
                "clock_sm_mhz": 1095,
                "clock_memory_mhz": 1593,
                "ecc_uncorrected": 2,
                "unsupported": ["fan_speed"],
                "processes": [
                    {"pid": 910002, "memory_mib": 18432, "user": "carol", "name": "python"},
                    {"pid": 910003, "memory_mib": 2048, "user": "carol", "name": "python"},
                ],
            },
            {
                "name": "NVIDIA RTX A6000",
                "memory_total_mib": 49140,
                "memory_reserved_mib": 300,
                "utilization": 0,
                "temperature": 33,
                "power_w": 22,
                "power_limit_w": 300,
                "fan_speed": 30,
                "clock_sm_mhz": 210,
                "clock_memory_mhz": 405,
                "unsupported": ["ecc"],  # RTX A6000s ship with ECC off
            },
            {
                "name": "NVIDIA RTX A6000",
                "memory_total_mib": 49140,
                "memory_reserved_mib": 300,
                "utilization": 3,
                "temperature": 36,
                "power_w": 31,
                "power_limit_w": 300,
                "fan_speed": 34,
                "clock_sm_mhz": 420,
                "clock_memory_mhz": 810,
                "unsupported": ["ecc"],
                "processes": [{"pid": 910004, "memory_mib": 1200, "user": "dave", "name": "Xorg", "type": "graphics"}],
            },
        ],
    }
    if moving:
        _add_demo_motion(scenario)
    return scenario


def _add_demo_motion(scenario: dict[str, Any]) -> None:
    """The moving demo's tracks (see :func:`demo_scenario`); GPU 2 stays as it is."""
    loop = {"loop_s": DEMO_LOOP_S}
    end = DEMO_LOOP_S - 30  # the training job ends half a minute before the loop starts the next
    busy = [[0, 0], [15, 35], [60, 96], [295, 96], [300, 40], [320, 96], [595, 96], [600, 40], [620, 96]]
    training, kernel, _idle, desktop = scenario["gpus"]
    scenario["motion_start"] = 0
    training["motion"] = {
        **loop,
        "utilization": {"points": [*busy, [end, 96], [end + 10, 0]], "jitter": 0.03},
        "memory_utilization": {"points": [[0, 0], [60, 61], [end, 61], [end + 10, 0]], "jitter": 0.08},
        "temperature": {"points": [[0, 45], [180, 71], [end, 72], [DEMO_LOOP_S, 47]], "jitter": 0.01},
        "power_w": {"points": [[0, 70], [60, 372], [end, 372], [end + 10, 70]], "jitter": 0.04},
    }
    training["processes"][0]["motion"] = {
        **loop,
        "memory_mib": {
            "points": [[0, 2048], [20, 30000], [60, 72000], [end, 74000], [end + 10, 2048]],
            "jitter": 0.01,
        },
    }
    kernel["motion"] = {
        **loop,
        "utilization": {"points": [[0, 62], [300, 58], [310, 0]], "jitter": 0.08},
        "memory_utilization": {"points": [[0, 30], [300, 28], [310, 0]], "jitter": 0.08},
        "temperature": {"points": [[0, 52], [60, 60], [300, 60], [480, 44]], "jitter": 0.01},
        "power_w": {"points": [[0, 180], [300, 170], [310, 62]], "jitter": 0.05},
    }
    kernel["processes"][0]["motion"] = {**loop, "memory_mib": {"points": [[0, 14336], [240, 18432]]}}
    desktop["motion"] = {
        **loop,
        "utilization": {"points": [[0, 3]], "jitter": 0.5},
        "power_w": {"points": [[0, 31]], "jitter": 0.1},
    }
