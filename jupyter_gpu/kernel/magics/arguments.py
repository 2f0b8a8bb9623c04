"""Reading a magic's line and writing its help: IPython's ``magic_arguments`` in the user's language.

- :func:`parse`: ``parse_argstring`` with every malformed line as one UsageError, argparse's own
  error (``unrecognized arguments: --x``) said in the user's language
  (:func:`jupyter_gpu.core.arguments.translate_error`).
- :func:`help_pages_in_language`: the help pages (``%gpu_select?``) built again with the section
  headings ("positional arguments", "options") in the user's language and Chinese help text wrapped
  between characters, a wide one counting two columns. The ``help=`` texts are marked with ``_`` in
  the decorators, so they are translated when the module is imported: the magics' help speaks the
  language the kernel had when ``%load_ext jupyter_gpu`` ran (``JUPYTER_GPU_LANG``, JupyterLab's
  choice, ``LANG``); ``%config GpuMagics.language`` set later does not rebuild it. The magic's own
  docstring (the long manual under the usage line) stays English (docs/i18n.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicHelpFormatter, parse_argstring

from ...core.arguments import OPTIONALS, POSITIONALS, HelpFormatter, translate_error
from ...core.i18n import _

MagicsClass = TypeVar("MagicsClass", bound=type)


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


def help_pages_in_language(magics: MagicsClass) -> MagicsClass:
    """Rebuild the help page of every magic of a ``Magics`` class made with ``@magic_arguments()``
    (put this decorator above ``@magics_class``) with translated section headings and
    :class:`MagicHelp`; each magic's docstring becomes that page, as IPython's ``construct_parser``
    makes it."""
    for magic in vars(magics).values():
        parser = getattr(magic, "parser", None)
        if parser is None or not getattr(magic, "has_arguments", False):
            continue
        parser.formatter_class = MagicHelp
        parser._positionals.title = _(POSITIONALS)
        parser._optionals.title = _(OPTIONALS)
        magic.__doc__ = parser.format_help()
    return magics
