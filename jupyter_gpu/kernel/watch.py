"""How much GPU memory one cell took: the pure core of ``%gpu_watch`` (no IPython here).

A :class:`CellWatch` measures the GPU memory NVML attributes to one process (the kernel) over a
stretch of code: :meth:`~CellWatch.start` before the cell, a background sampler while it runs (the
kernel's main thread is never blocked by sampling), :meth:`~CellWatch.stop` after it. The result, a
:class:`CellReport`, gives the change over the cell and the peak during it, summed over the GPUs
where the process holds memory, and renders as one line.

NVML sees what the driver gives the process: what the framework's allocator *reserved*, plus the
CUDA context. Frameworks count what tensors *use*; where a framework is already initialized in the
process its own counters are added to the report:

- PyTorch: ``torch.cuda.memory_allocated()`` / ``max_memory_allocated()`` when
  ``torch.cuda.is_initialized()``;
- JAX: ``memory_stats()`` of the GPU devices when ``jax._src.xla_bridge.backends_are_initialized()``;
- TensorFlow: ``tf.config.experimental.get_memory_info()`` when the eager context exists.

Measuring never imports or initializes a framework: each probe looks in ``sys.modules`` first and
checks the framework's "already initialized" state, which has no side effects.

The peak is the largest value seen by the sampler (every ``interval_s`` seconds) or, for a
framework, its own peak counter when that rose during the cell. A spike shorter than the interval can
escape NVML sampling.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.i18n import _
from ..core.messages import shown
from ..core.snapshot import Snapshot
from ..core.units import format_bytes
from ..frameworks import FRAMEWORKS, Framework
from ..sources.sampler import Sampler

SAMPLER_NAME = "jupyter-gpu-watch"

# (current bytes, peak-so-far bytes) of one framework, summed over its GPUs; None = not initialized
FrameworkProbe = Callable[[], "tuple[int, int] | None"]


def format_change(value: int) -> str:
    """``+1.5 GiB``, ``-300 MiB``, ``±0 MiB``."""
    if value == 0:
        return "±0 MiB"
    sign = "+" if value > 0 else "-"
    return sign + format_bytes(abs(value))


# -- framework counters: only where a framework initialized its GPUs by itself


def framework_probe(framework: Framework) -> FrameworkProbe:
    """(bytes in use, peak) summed over ``framework``'s GPUs, or None before it initialized them.

    The adapter looks in ``sys.modules`` and at the framework's own initialized flag: measuring never
    imports or initializes a framework, and a counter that fails reads as None.
    """

    def probe() -> tuple[int, int] | None:
        try:
            devices = framework.memory_by_device()
        except Exception:
            return None
        if not devices:
            return None
        return sum(d.in_use for d in devices.values()), sum(d.peak for d in devices.values())

    return probe


FRAMEWORK_PROBES: dict[str, FrameworkProbe] = {
    framework.module_name: framework_probe(framework) for framework in FRAMEWORKS
}


# -- the report


@dataclass(frozen=True)
class FrameworkMemory:
    """One framework's own count of its GPU memory over a cell (bytes)."""

    framework: str
    before: int | None
    after: int
    peak: int


@dataclass(frozen=True)
class CellReport:
    """GPU memory NVML attributes to ``pid`` over one cell (bytes, summed over GPUs)."""

    pid: int
    nvml_available: bool
    before: int = 0
    after: int = 0
    peak: int = 0
    gpus: tuple[int, ...] = ()
    samples: int = 0
    duration_s: float = 0.0
    error: str | None = None
    frameworks: tuple[FrameworkMemory, ...] = field(default=())

    @property
    def change(self) -> int:
        """``after - before`` in bytes."""
        return self.after - self.before

    def line(self) -> str:
        """The one-line report shown after the cell."""
        if not self.nvml_available:
            text = _("GPU memory of this kernel (PID {pid}): not measured, NVML unavailable: {reason}").format(
                pid=self.pid, reason=shown(self.error) or _("unknown reason")
            )
        elif self.before == self.after == self.peak == 0:
            text = _("GPU memory of this kernel (PID {pid}): none held").format(pid=self.pid)
        else:
            figures = {
                "pid": self.pid,
                "change": format_change(self.change),
                "before": format_bytes(self.before),
                "after": format_bytes(self.after),
                "peak": format_bytes(self.peak),
            }
            if self.gpus:
                text = _(
                    "GPU memory of this kernel (PID {pid}): {change} over the cell ({before} → {after}), "
                    "peak {peak} during the cell on GPU {gpus}"
                ).format(**figures, gpus=",".join(str(i) for i in self.gpus))
            else:
                text = _(
                    "GPU memory of this kernel (PID {pid}): {change} over the cell ({before} → {after}), "
                    "peak {peak} during the cell"
                ).format(**figures)
        for framework in self.frameworks:
            if framework.before is None:
                text += " · " + _("{framework}: {size} in use (initialized during the cell), peak {peak}").format(
                    framework=framework.framework, size=format_bytes(framework.after), peak=format_bytes(framework.peak)
                )
            else:
                text += " · " + _("{framework}: {change} in use, peak {peak}").format(
                    framework=framework.framework,
                    change=format_change(framework.after - framework.before),
                    peak=format_bytes(framework.peak),
                )
        return text


# -- the measurement


def own_memory(snapshot: Snapshot, pid: int) -> tuple[int, tuple[int, ...]]:
    """(bytes ``pid`` holds on all GPUs, indices of those GPUs) in ``snapshot``."""
    total = 0
    gpus = []
    for gpu, process in snapshot.processes_of(pid):
        total += process.memory or 0
        gpus.append(gpu.index)
    return total, tuple(sorted(set(gpus)))


class CellWatch:
    """Measure one process's GPU memory from :meth:`start` to :meth:`stop` (one cell).

    ``take`` reads a snapshot (default: :func:`jupyter_gpu.sources.nvml.snapshot`); ``interval_s`` is the
    background sampling period while the cell runs (the thread exists only between start and stop).
    ``probes`` maps a framework name to its probe (default :data:`FRAMEWORK_PROBES`).
    """

    def __init__(
        self,
        pid: int | None = None,
        interval_s: float = 0.2,
        take: Callable[[], Snapshot] | None = None,
        probes: dict[str, FrameworkProbe] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        if take is None:  # the host's sample: this kernel's server, the hub service, else NVML here
            from ..sources.host import default_host_sample

            take = default_host_sample()
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self._take = take
        self._probes = FRAMEWORK_PROBES if probes is None else probes
        self._lock = threading.Lock()
        self._sampler: Sampler | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._started = 0.0
        self._before: Snapshot | None = None
        self._before_bytes = 0
        self._peak = 0
        self._gpus: set[int] = set()
        self._samples = 0
        self._error: str | None = None
        self._framework_before: dict[str, tuple[int, int] | None] = {}
        self._framework_peak: dict[str, int] = {}

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._unsubscribe is not None

    def start(self) -> None:
        """Take the "before" sample and start sampling in the background."""
        if self.running:
            self.cancel()
        self._reset()
        self._started = time.monotonic()
        snapshot = self._take()
        self._before = snapshot
        self._record(snapshot)
        self._before_bytes = own_memory(snapshot, self.pid)[0] if snapshot.nvml_available else 0
        self._framework_before = {name: probe() for name, probe in self._probes.items()}
        if snapshot.nvml_available:
            self._sampler = Sampler(self.interval_s, take=self._take, linger_s=0.0, name=SAMPLER_NAME)
            self._unsubscribe = self._sampler.subscribe(self._record)
        else:
            self._unsubscribe = lambda: None

    def _record(self, snapshot: Snapshot) -> None:
        # Main thread at start/stop, the sampler thread in between.
        with self._lock:
            self._samples += 1
            if not snapshot.nvml_available:
                self._error = snapshot.error
                return
            held, gpus = own_memory(snapshot, self.pid)
            self._peak = max(self._peak, held)
            self._gpus.update(gpus)

    def cancel(self) -> None:
        """Stop sampling without a report (the background thread ends)."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        sampler, self._sampler = self._sampler, None
        if unsubscribe is not None:
            unsubscribe()
        if sampler is not None:
            sampler.close(timeout=2.0)

    def stop(self) -> CellReport:
        """Take the "after" sample, stop the background sampler and report."""
        if not self.running:
            raise RuntimeError("CellWatch.stop() without start()")
        self.cancel()
        snapshot = self._take()
        self._record(snapshot)
        frameworks = []
        for name, probe in self._probes.items():
            after = probe()
            if after is None:
                continue
            before = self._framework_before.get(name)
            current, peak_counter = after
            peak = max(current, before[0] if before else 0)
            if before is None or peak_counter > before[1]:  # the counter's peak was reached in the cell
                peak = max(peak, peak_counter)
            frameworks.append(FrameworkMemory(name, None if before is None else before[0], current, peak))
        with self._lock:
            if self._before is None or not self._before.nvml_available or not snapshot.nvml_available:
                error = self._error or (snapshot.error if not snapshot.nvml_available else None)
                return CellReport(
                    self.pid,
                    False,
                    error=error,
                    samples=self._samples,
                    duration_s=time.monotonic() - self._started,
                    frameworks=tuple(frameworks),
                )
            after_bytes = own_memory(snapshot, self.pid)[0]
            return CellReport(
                pid=self.pid,
                nvml_available=True,
                before=self._before_bytes,
                after=after_bytes,
                peak=max(self._peak, self._before_bytes, after_bytes),
                gpus=tuple(sorted(self._gpus)),
                samples=self._samples,
                duration_s=time.monotonic() - self._started,
                frameworks=tuple(frameworks),
            )
