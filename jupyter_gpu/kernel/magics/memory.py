"""``%gpu_free``: give GPU memory back without restarting the kernel (the work is :mod:`jupyter_gpu.kernel.free`)."""

from __future__ import annotations

from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ...core.i18n import _
from .. import free
from .arguments import help_pages_in_language, parse


@help_pages_in_language
@magics_class
class GpuMemoryMagics(Magics):
    """``%gpu_free``: drop what keeps framework memory alive, release the frameworks' caches, report."""

    @magic_arguments()
    @argument(
        "names",
        nargs="*",
        help=_("your variables to delete as well (e.g. model optimizer); no other variable of yours is touched"),
    )
    @argument("--dry-run", action="store_true", help=_("list what would be dropped and released; change nothing"))
    @line_magic
    def gpu_free(self, line: str) -> None:
        """Give GPU memory back without restarting the kernel.

        Drops what keeps framework arrays alive after an error or a finished experiment, then
        measures what came back:

        1. IPython's output cache (``Out``, and ``_``, ``__``, ``___``, ``_N`` while they hold what IPython
           put there: a ``_2`` or ``_`` you assigned stays);
        2. the last error's traceback (``sys.last_traceback``/``last_value``): the frames of a
           failed cell keep every local, tensors included;
        3. the variables you name (``%gpu_free model optimizer``), and no other of yours;
        4. ``gc.collect()``, then each framework that is *already imported and initialized* gives
           its cache back: PyTorch ``torch.cuda.empty_cache()``, Keras ``clear_session()``, JAX
           ``jax.clear_caches()``. No framework is imported or initialized by this magic.

        It reports per GPU what NVML shows this kernel holding before and after ("GPU 1: this
        kernel 9.8 GiB → 1.2 GiB"), each framework's own counters, the arrays that were freed (and
        those still referenced elsewhere), and the process's resident memory (CPU arrays).

        What cannot come back is said: TensorFlow never returns its memory pool to the driver (with
        or without growth; only a restart does), and JAX keeps its preallocated pool.

        Examples::

            %gpu_free --dry-run       # what would be dropped, nothing changed
            %gpu_free                 # output cache, last traceback, caches
            %gpu_free model optimizer # and these two variables
        """
        args = parse(self.gpu_free, line)
        print(free.free_memory(self.shell, args.names, dry_run=args.dry_run))
