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
  docstring (the long manual under the usage line) is translated the same way: it is a message of
  its face's catalog (context :data:`jupyter_gpu.core.i18n.HELP_PAGE`, extracted by
  ``scripts/i18n.py update``), and a docstring without a translation stays English (docs/i18n.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicHelpFormatter, parse_argstring

from ...core.arguments import OPTIONALS, POSITIONALS, HelpFormatter, translate_error
from ...core.i18n import HELP_PAGE, _, pgettext

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
    """IPython's magic help layout (``::`` and ``%magic`` for the usage, the docstring dedented and
    kept as written), with :class:`jupyter_gpu.core.arguments.HelpFormatter`'s headings and CJK-aware
    wrapping of the arguments' help."""

    def add_usage(
        self, usage: str | None, actions: Iterable[Any], groups: Iterable[Any], prefix: str | None = None
    ) -> None:
        MagicHelpFormatter.add_usage(self, usage, actions, groups)  # IPython's "%name" prefix, no "usage:"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """The manual (the description) as written, in every language: a translation's line breaks
        are made by hand for a pager (docs/i18n.md), as the English docstring's are."""
        return MagicHelpFormatter._fill_text(self, text, width, indent)


def manual(docstring: str) -> str:
    """A magic's docstring in the user's language: its translation (the catalog's message is the
    :func:`inspect.cleandoc`-ed docstring), else the docstring exactly as written."""
    translated = pgettext(HELP_PAGE, inspect.cleandoc(docstring))
    return docstring if translated == inspect.cleandoc(docstring) else translated


#: The attribute that keeps a magic's docstring as written (English), the source of :func:`help_page`.
SOURCE = "english_manual"


def help_page(magic: Any) -> str:
    """The help page (``%gpu_select?``) of one magic in the current language: its manual
    (:func:`manual` of the docstring as written), and for a magic made with ``@magic_arguments()``
    the usage line and the arguments' help under it, with translated headings, laid out by
    :class:`MagicHelp` as IPython's ``construct_parser`` lays them out."""
    source = getattr(magic, SOURCE, None) or magic.__doc__ or ""  # SOURCE: set by help_pages_in_language
    parser = getattr(magic, "parser", None)
    if parser is None or not getattr(magic, "has_arguments", False):
        return manual(source) if source else source
    parser.description = manual(source) if source else None
    parser.formatter_class = MagicHelp
    parser._positionals.title = _(POSITIONALS)
    parser._optionals.title = _(OPTIONALS)
    return str(parser.format_help())


def help_pages_in_language(magics: MagicsClass) -> MagicsClass:
    """Put the help page of every magic of a ``Magics`` class in the user's language
    (:func:`help_page`; put this decorator above ``@magics_class``)."""
    names = {name for table in getattr(magics, "magics", {}).values() for name in table.values()}
    for name in sorted(names):
        magic = vars(magics).get(name)
        if magic is None:
            continue
        if not hasattr(magic, SOURCE):  # the docstring as written: IPython put the page there already
            parser = getattr(magic, "parser", None)
            setattr(magic, SOURCE, parser.description if parser is not None else magic.__doc__)
        magic.__doc__ = help_page(magic)
    return magics
