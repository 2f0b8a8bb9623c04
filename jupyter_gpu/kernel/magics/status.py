"""``%gpu_status``: the kernel's GPU plan, each framework's state, and the GPUs with this kernel's usage."""

from __future__ import annotations

from IPython.core.magic import Magics, line_magic, magics_class

from ...core.i18n import _
from ...core.text import wrap
from ...session.report import ORDER_NOTE, gpu_listing, jax_share, summary, threads_report
from ..session import take_snapshot
from .arguments import help_pages_in_language


@help_pages_in_language
@magics_class
class GpuStatusMagics(Magics):
    """``%gpu_status``: what is in effect, read without changing anything."""

    @line_magic
    def gpu_status(self, line: str = "") -> None:
        """Show the kernel's GPU plan, each framework's state and the GPUs with this kernel's usage.

        The plan, threads and placement; for each framework: not imported (waiting for its
        import), imported, GPUs listed, or initialized, and what is actually in effect. "plan
        applied" only when the framework sees (or will see) what the plan says; otherwise "does
        NOT follow the plan" and why. For each visible GPU: memory used and
        free, utilization, and the memory NVML sees this kernel's process (PID) holding, with a
        line starting ``!`` when that is more than the kernel's ``%gpu_limit`` on that GPU plus
        1 GiB for CUDA's own context (the cap binds each framework's allocator, not the context,
        a second framework or code that ignores it; the context took about 0.5 GiB on an H100).

        Example::

            %gpu_status
        """
        from ... import frameworks
        from ...plan import current_plan, kernel_start_fence

        plan = current_plan()
        lines = [_("Plan: {summary}").format(summary=summary(plan))]
        lines += [f"  {line}" for line in jax_share(plan)]
        if frameworks.order_set_by_plan(plan):
            lines.append(f"  {_(ORDER_NOTE)}")
        fence = kernel_start_fence()
        if fence.active:
            lines.append(
                _("GPUs the kernel was started with (by the admin, spawner or kernelspec): {fence}").format(
                    fence=fence.describe()
                )
            )
        lines.append(threads_report(plan))
        snapshot = take_snapshot()
        frameworks.remember_gpus(snapshot.gpus)
        lines.append(_("Frameworks:"))
        lines += [f"  {framework.name}: {text}" for framework, text in frameworks.framework_statuses(snapshot.gpus)]
        keras = frameworks.keras_status()
        if keras is not None:
            lines.append(f"  Keras: {keras}")
        cuda = frameworks.cuda_status()
        if cuda is not None:
            lines.append(f"  CUDA: {cuda}")
        # The plan and the frameworks' lines wrapped to 100 columns; the GPU listing a row per GPU
        print(wrap("\n".join(lines)) + "\n" + gpu_listing(plan, heading=_("GPUs:"), snapshot=snapshot))
