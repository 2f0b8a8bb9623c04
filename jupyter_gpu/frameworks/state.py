"""What the frameworks package remembers in one kernel process: one :class:`KernelGpuState`, :data:`KERNEL`.

Every observation that outlives a call lives here (the plan applied, the variables written, the
warnings given, the frameworks checked), so one :meth:`KernelGpuState.reset` forgets them all.
Frameworks are named here, never held: the adapters build on this module, not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Protocol

from ..core import import_hooks
from ..core.visibility import CudaEnv, Gpu, forget_cuda_start
from ..plan import GpuPlan


class WatchedFramework(Protocol):
    """What the kernel state needs of a framework: its names, whether it started CUDA, its hook."""

    @property
    def name(self) -> str: ...

    @property
    def module_name(self) -> str: ...

    def cuda_started(self) -> bool: ...

    def hook(self, module: ModuleType) -> None: ...


class KernelGpuState:
    """The kernel's memory of its GPU plan and of what it saw the frameworks do (one per process)."""

    def __init__(self) -> None:
        #: every framework jupyter_gpu manages, in order (set once by :mod:`jupyter_gpu.frameworks`)
        self.frameworks: tuple[WatchedFramework, ...] = ()
        self._forget()

    def reset(self) -> None:
        """Forget every observation (plan applied, CUDA's start, warnings, GPUs seen) and cancel the
        pending post-import hooks: as if no magic had run. For tests in one process only."""
        self._forget()
        forget_cuda_start()
        for framework in self.frameworks:
            import_hooks.cancel(framework.module_name, framework.hook)

    def _forget(self) -> None:
        self.baseline: dict[str, str | None] = {}  # each managed variable as the kernel started with it
        self.applied: dict[str, GpuPlan] = {}  # framework name -> the plan its calls were made for
        self.plan_active = False  # a plan was applied: post-import hooks apply it
        self.gpus: tuple[Gpu, ...] = ()  # every GPU NVML saw at the last magic (for the after-cell check)
        self.written: CudaEnv | None = None  # the selection variables as jupyter_gpu last wrote or found them
        self.warned: set[str] = set()  # every warning given once
        self.last_states: tuple[str, ...] = ()  # each framework's State at the last after-cell check
        self.checked: set[tuple[str, str]] = set()  # (framework name, State) already compared with the plan
        self.unwatched: list[str] = []  # frameworks imported before jupyter_gpu watched (CUDA may have started unseen)
        self.written_env: dict[str, str | None] = {}  # each framework variable as the last plan left it
        self.selection_changed = False  # the after-cell check saw the selection variables differ from ``written``
        self.missed: list[str] = []  # imported while code had changed the selection variables: the plan's calls wait

    def remember_gpus(self, gpus: Sequence[Gpu]) -> None:
        """Keep the GPUs of the last snapshot, so checks after a cell need no NVML call."""
        if gpus:
            self.gpus = tuple(gpus)

    def gpus_or_read(self, read_gpus: Callable[[], Sequence[Gpu]] | None) -> tuple[Gpu, ...]:
        """The GPUs last seen, else those ``read_gpus`` reads now (kept), else none."""
        if not self.gpus and read_gpus is not None:
            self.remember_gpus(read_gpus())
        return self.gpus


#: the one kernel state of this process
KERNEL = KernelGpuState()
