"""JAX: everything is read when its GPU backend is created (the first ``jax.devices()`` or operation).

- Selection: ``CUDA_VISIBLE_DEVICES`` (``jax_cuda_visible_devices`` stays ``all``: it is relative to
  what CUDA shows).
- Growth: ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (JAX otherwise takes 75 % of each GPU up front).
- Limits: ``XLA_CLIENT_MEM_FRACTION``, one share for every GPU, so the smallest share of the planned
  GPUs is used; the deprecated ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is removed meanwhile (JAX refuses
  both together). Several sizes per GPU are summed (JAX has no logical GPUs). The memory fraction
  binds JAX's BFC and ``cuda_async`` allocators only: with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform``
  XLA uses the plain device allocator and no fraction (XLA ``se_gpu_pjrt_client.cc``,
  ``GetStreamExecutorGpuDeviceAllocator``), which :meth:`Jax.env_conflicts` says.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..core.i18n import N_, _
from ..plan import GpuPlan
from .base import DeviceMemory, Environment, Framework, State, visible_order

_GPU_PLATFORMS = ("cuda", "rocm", "gpu")

_OLD_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"


class Jax(Framework):
    name = "JAX"
    module_name = "jax"
    env_keys = (
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_CLIENT_MEM_FRACTION",
        _OLD_FRACTION,
        "XLA_PYTHON_CLIENT_ALLOCATOR",
    )

    gpu_build_hint = N_("this jaxlib has no GPU support: pip install 'jax[cuda12]' and restart the kernel")

    def state(self) -> State:
        """Only a GPU backend counts as initialized: a CPU-only computation leaves the GPU untouched."""
        if self.module_name not in sys.modules:
            return State.NOT_IMPORTED
        bridge = sys.modules.get("jax._src.xla_bridge")
        if bridge is not None and bridge.backends_are_initialized():
            backends = getattr(bridge, "_backends", {})
            if any(platform in _GPU_PLATFORMS for platform in backends):
                return State.INITIALIZED
            return State.CPU_ONLY
        return State.IMPORTED

    _seen_visible = "all"

    def _visible_flag(self) -> str:
        """``jax_cuda_visible_devices`` ('all', or CUDA ordinals: positions among what CUDA shows);
        ``jax.distributed.initialize(local_device_ids=...)`` sets it too. Read when the GPU backend is made."""
        bridge = sys.modules.get("jax._src.xla_bridge")
        flag = getattr(bridge, "CUDA_VISIBLE_DEVICES", None)
        value = getattr(flag, "value", "all")
        return value if isinstance(value, str) else "all"

    def visible_positions(self) -> list[int] | None:
        value = self._visible_flag().strip()
        if value == "all":
            return None
        try:
            return [int(entry) for entry in value.split(",")]
        except ValueError:
            return None  # JAX itself refuses it when it makes the backend

    @property
    def settings_touched(self) -> bool:
        """Whether code changed ``jax_cuda_visible_devices`` since the last look (a cheap flag read)."""
        return self.module_name in sys.modules and self._visible_flag() != self._seen_visible

    @settings_touched.setter
    def settings_touched(self, _value: bool) -> None:
        self._seen_visible = self._visible_flag()

    def cpu_only_reason(self) -> str:
        """``jax_platforms`` (``JAX_PLATFORMS`` or ``jax.config.update``) without a GPU platform is a
        choice of the code, not a CPU-only jaxlib."""
        config = getattr(sys.modules.get("jax"), "config", None)
        platforms = getattr(config, "jax_platforms", None) if config is not None else None
        if (
            isinstance(platforms, str)
            and platforms.strip()
            and not any(p.strip() in _GPU_PLATFORMS for p in platforms.split(","))
        ):
            return _(
                "the code set jax_platforms={platforms} (JAX_PLATFORMS or jax.config.update), so JAX "
                "made no GPU backend; to use the GPU, leave jax_platforms unset and restart the kernel"
            ).format(platforms=repr(platforms))
        return _(self.gpu_build_hint)

    def built_with_gpu(self) -> bool | None:
        return False if self.state() is State.CPU_ONLY else None  # a GPU backend shows itself by initializing

    def observe(self, module: ModuleType) -> None:
        self.observed = True
        bridge: Any = sys.modules.get("jax._src.xla_bridge")
        if bridge is None or getattr(bridge.backends, "_jupyter_gpu_wrapped", False):
            return
        original = bridge.backends

        def backends() -> Any:
            if getattr(bridge, "_backends", None):
                return original()
            from ..core.visibility import CudaEnv

            before = CudaEnv.now()
            result = original()
            if any(platform in _GPU_PLATFORMS for platform in result):
                from ..core.visibility import record_cuda_start
                from .base import starting_call

                record_cuda_start(before, self.name, starting_call("jax"))
            return result

        backends._jupyter_gpu_wrapped = True  # type: ignore[attr-defined]
        bridge.backends = backends

    def memory_by_device(self) -> dict[str, DeviceMemory]:
        """``bytes_in_use`` and ``peak_bytes_in_use`` of each GPU device, keyed ``cuda:<id>``."""
        if self.state() is not State.INITIALIZED:
            return {}
        devices = {}
        for platform, backend in sys.modules["jax._src.xla_bridge"].backends().items():
            if platform not in ("cuda", "rocm", "gpu"):
                continue
            for device in backend.local_devices():
                stats = device.memory_stats() or {}
                in_use = int(stats.get("bytes_in_use", 0))
                peak = int(stats.get("peak_bytes_in_use", in_use))
                devices[f"cuda:{device.id}"] = DeviceMemory(in_use=in_use, peak=peak)
        return devices

    def release(self) -> tuple[str, str] | None:
        """``jax.clear_caches()``: compiled functions and their constants; arrays go with their last reference."""
        if self.state() is not State.INITIALIZED:
            return None
        sys.modules["jax"].clear_caches()
        preallocated = (
            os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() != "false"
            and os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() != "platform"
        )
        pool = (
            _(
                "JAX preallocated its pool (75 % of the GPU unless XLA_PYTHON_CLIENT_PREALLOCATE=false): freed "
                "arrays are reused by JAX, the pool is not returned to the driver; only a restart returns it"
            )
            if preallocated
            else _(
                "freed arrays go back to JAX's allocator, which keeps what it grew for reuse "
                "(XLA_PYTHON_CLIENT_ALLOCATOR=platform returns it at once, slowly)"
            )
        )
        return "jax.clear_caches()", pool

    def environment(self, plan: GpuPlan, baseline: Mapping[str, str | None]) -> Environment:
        planned = [plan.memory_fraction(index) for index in visible_order(plan)]
        fractions = [fraction for fraction in planned if fraction is not None]
        env: Environment = {
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false" if plan.growth else baseline.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "XLA_CLIENT_MEM_FRACTION": baseline.get("XLA_CLIENT_MEM_FRACTION"),
            _OLD_FRACTION: baseline.get(_OLD_FRACTION),
        }
        if fractions:
            # Rounded down so the cap never exceeds the planned limit.
            env["XLA_CLIENT_MEM_FRACTION"] = f"{int(min(fractions) * 1000) / 1000:.3f}"
            env[_OLD_FRACTION] = None
        return env

    def env_conflicts(self, plan: GpuPlan, env: Mapping[str, str | None]) -> list[str]:
        """What jaxlib's ``make_gpu_client`` (``jaxlib/xla_client.py``) will make of the variables."""
        conflicts = []
        preallocate = env.get("XLA_PYTHON_CLIENT_PREALLOCATE")
        allocator = (env.get("XLA_PYTHON_CLIENT_ALLOCATOR") or "default").lower()
        if plan.growth and preallocate not in ("false", "False", "0") and allocator != "platform":
            conflicts.append(
                (
                    _(
                        "XLA_PYTHON_CLIENT_PREALLOCATE is unset, so JAX takes 75% of each GPU at start "
                        "(the plan's growth needs 'false')"
                    )
                    if preallocate is None
                    else _(
                        "XLA_PYTHON_CLIENT_PREALLOCATE is {value}, so JAX takes 75% of each GPU at start "
                        "(the plan's growth needs 'false')"
                    )
                ).format(value=repr(preallocate))
            )
        planned = self.environment(plan, {}).get("XLA_CLIENT_MEM_FRACTION")
        if planned is None:
            return conflicts
        fraction, old = env.get("XLA_CLIENT_MEM_FRACTION"), env.get(_OLD_FRACTION)
        if old and fraction:
            conflicts.append(
                _(
                    "{old} is set next to XLA_CLIENT_MEM_FRACTION, and JAX refuses "
                    "both (ValueError: XLA_CLIENT_MEM_FRACTION is specified together with "
                    "{old_name}) when it starts the GPU"
                ).format(old=f"{_OLD_FRACTION}={old!r}", old_name=_OLD_FRACTION)
            )
        elif (fraction or old) != planned:
            said = (
                f"XLA_CLIENT_MEM_FRACTION={fraction!r}"
                if fraction
                else f"{_OLD_FRACTION}={old!r}"
                if old
                else _("XLA_CLIENT_MEM_FRACTION unset")
            )
            conflicts.append(
                _("JAX reads {setting}, not the plan's {planned}").format(setting=said, planned=repr(planned))
            )
        if allocator == "platform":
            conflicts.append(
                _(
                    "XLA_PYTHON_CLIENT_ALLOCATOR='platform': JAX's platform allocator has no memory "
                    "fraction, so the memory limit does not hold for JAX (unset it, or use 'bfc')"
                )
            )
        return conflicts

    def in_effect(self) -> str:
        jax = sys.modules.get("jax")
        parts = []
        if jax is not None and self.state() is State.INITIALIZED:
            parts.append(_("devices {devices}").format(devices=", ".join(str(device) for device in jax.devices())))
        for key in self.env_keys:
            if os.environ.get(key):
                parts.append(f"{key}={os.environ[key]}")
        return ", ".join(parts) or _("defaults")


JAX = Jax()
