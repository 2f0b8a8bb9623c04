"""Reading a magic's line and writing its help: IPython's ``magic_arguments`` in the user's language.

- :func:`parse`: ``parse_argstring`` with every malformed line as one UsageError, argparse's own
  error (``unrecognized arguments: --x``) said in the user's language
  (:func:`jupyter_gpu.core.arguments.translate_error`).
- :func:`help_in_language`: the help page ``%gpu_select?`` shows, built again with the section
  headings ("positional arguments", "options") in the user's language and Chinese help text wrapped
  between characters, a wide one counting two columns. The ``help=`` texts are marked with ``_`` in
  the decorators, so they are translated when the module is imported: the magics' help speaks the
  language the kernel had when ``%load_ext jupyter_gpu`` ran (``JUPYTER_GPU_LANG``, JupyterLab's
  choice, ``LANG``); ``%config GpuMagics.language`` set later does not rebuild it. The magic's own
  docstring (the long manual under the usage line) stays English (docs/i18n.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicHelpFormatter, parse_argstring

from ...core.arguments import OPTIONALS, POSITIONALS, HelpFormatter, translate_error
from ...core.i18n import _

Magic = TypeVar("Magic", bound=Callable[..., Any])


def parse(magic: Any, line: str) -> Any:
    """``parse_argstring`` with every malformed line (an unclosed quote too) as a one-line UsageError."""
    try:
        return parse_argstring(magic, line)
    except UsageError as error:
        raise UsageError(translate_error(str(error))) from None
    except (ValueError, OverflowError) as error:
        raise UsageError(
            _("cannot read the arguments {line}: {error}").format(line=repr(line.strip()), error=error)
        ) from None


class MagicHelp(HelpFormatter, MagicHelpFormatter):
    """IPython's magic help layout (``::`` and ``%magic`` for the usage, the docstring dedented), with
    :class:`jupyter_gpu.core.arguments.HelpFormatter`'s headings and CJK-aware wrapping."""

    def add_usage(
        self, usage: str | None, actions: Iterable[Any], groups: Iterable[Any], prefix: str | None = None
    ) -> None:
        MagicHelpFormatter.add_usage(self, usage, actions, groups)  # IPython's "%name" prefix, no "usage:"


def help_in_language(magic: Magic) -> Magic:
    """Rebuild the help of a magic made with ``@magic_arguments()`` (put this decorator above it)
    with translated section headings and :class:`MagicHelp`; its docstring becomes that page, as
    IPython's ``construct_parser`` makes it."""
    parser = magic.parser  # type: ignore[attr-defined]
    parser.formatter_class = MagicHelp
    parser._positionals.title = _(POSITIONALS)
    parser._optionals.title = _(OPTIONALS)
    magic.__doc__ = parser.format_help()
    return magic
