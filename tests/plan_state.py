"""What the magics change in this process, for tests in an in-process IPython shell: the managed
environment variables, the current plan and the pending import hooks (importable as ``plan_state``;
pytest puts tests/ on sys.path). The ``clean`` and ``shell`` fixtures in conftest.py build on it."""

from __future__ import annotations

import os
from typing import Any

from jupyter_gpu import frameworks, plan
from jupyter_gpu.core import import_hooks as _import_hooks
from jupyter_gpu.plan import GpuPlan, current_plan

MANAGED = (
    *frameworks._managed_keys(),
    "JUPYTER_GPU_DEFAULT_SELECT",
    "JUPYTER_GPU_GROWTH",
    "JUPYTER_GPU_DEFAULT_LIMIT",
    "JUPYTER_GPU_MAX_LIMIT",
)


def reset_plan_state() -> None:
    plan.set_current_plan(GpuPlan())
    frameworks.reset_for_tests()


def state() -> tuple[Any, ...]:
    """Everything a magic may change: the plan, the environment, the pending hooks."""
    env = {key: os.environ.get(key) for key in frameworks._managed_keys()}
    hooks = {f.module_name: list(_import_hooks.pending(f.module_name)) for f in frameworks.FRAMEWORKS}
    return current_plan(), env, hooks
