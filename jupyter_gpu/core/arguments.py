"""argparse in the user's language: the one parser class every command line of jupyter_gpu uses.

argparse writes its own words ("usage:", "options", "positional arguments", "show this help message
and exit", its error lines) through the standard library's gettext domain, which has no Chinese.
:class:`ArgumentParser` and its formatters put them through :mod:`jupyter_gpu.core.i18n` instead::

    from jupyter_gpu.core.arguments import ArgumentParser
    from jupyter_gpu.core.i18n import _

    parser = ArgumentParser(prog="jupyter-gpu", description=_("See the GPUs of this machine ..."))

- the section titles and the ``-h`` help are translated when a parser is made (subparsers made by
  ``add_subparsers().add_parser`` are this class too, with :class:`HelpFormatter` by default);
- the ``usage:`` prefix through :class:`HelpFormatter` (and :class:`RawDescriptionHelpFormatter`);
- an error argparse raises (``invalid choice: 'x' (choose from ...)``, ``the following arguments are
  required: ...``) is matched against :data:`ARGPARSE_MESSAGES`, argparse's own templates, and said
  again with the translated one (:func:`translate_error`); one it does not know stays as it is;
- a help text with Chinese (wide) characters is wrapped at any character boundary, a wide one
  counting two columns (argparse's wrapping breaks only at spaces and counts code points).

The command's own help texts are the caller's: mark them with ``_`` where the parser is built.
Pure: the standard library and :mod:`jupyter_gpu.core.i18n`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from .i18n import N_, _
from .text import columns, fill

__all__ = [
    "ArgumentParser",
    "HelpFormatter",
    "RawDescriptionHelpFormatter",
    "columns",
    "translate_error",
    "wrap_columns",
]

#: argparse's own messages (Python 3.10-3.13, ``%``-templates as argparse writes them) -> ours,
#: with ``{name}`` placeholders in the order of argparse's (``%s`` is ``{0}`` ... by position).
ARGPARSE_MESSAGES: tuple[tuple[str, str], ...] = (
    ("argument %(argument_name)s: %(message)s", N_("argument {argument_name}: {message}")),
    ("invalid choice: %(value)r (choose from %(choices)s)", N_("invalid choice: {value} (choose from {choices})")),
    ("invalid %(type)s value: %(value)r", N_("invalid {type} value: {value}")),
    ("the following arguments are required: %s", N_("the following arguments are required: {arguments}")),
    ("one of the arguments %s is required", N_("one of the arguments {arguments} is required")),
    ("not allowed with argument %s", N_("not allowed with argument {argument}")),
    ("unrecognized arguments: %s", N_("unrecognized arguments: {arguments}")),
    ("ambiguous option: %(option)s could match %(matches)s", N_("ambiguous option: {option} could match {matches}")),
    ("ignored explicit argument %r", N_("ignored explicit argument {argument}")),
    ("expected one argument", N_("expected one argument")),
    ("expected at most one argument", N_("expected at most one argument")),
    ("expected at least one argument", N_("expected at least one argument")),
    ("unexpected option string: %s", N_("unexpected option string: {option}")),
)
USAGE = N_("usage: ")
POSITIONALS = N_("positional arguments")
OPTIONALS = N_("options")
HELP = N_("show this help message and exit")
ERROR = N_("{prog}: error: {message}")
HEADING = N_("{heading}:")

_FIELD = re.compile(r"%\((\w+)\)[sr]|%[sr]")
_NAMED = re.compile(r"\{(\w+)\}")


def _pattern(template: str) -> re.Pattern[str]:
    """argparse's ``%``-template as a regular expression, each field a group in its order."""
    parts = _FIELD.split(template)
    pieces = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pieces.append(re.escape(part))
        else:
            pieces.append("(.+?)")
    return re.compile("".join(pieces).replace(re.escape("%%"), "%"), re.DOTALL)


_TEMPLATES = [(_pattern(english), ours) for english, ours in ARGPARSE_MESSAGES]


def translate_error(message: str) -> str:
    """``message`` (one of argparse's errors) in the user's language; an unknown one unchanged.

    ``argument X: inner`` translates ``inner`` too. English gives ``message`` back as it is."""
    for pattern, ours in _TEMPLATES:
        match = pattern.fullmatch(message)
        if match is None:
            continue
        names = _NAMED.findall(ours)
        values = list(match.groups())
        if ours == ARGPARSE_MESSAGES[0][1]:
            values[1] = translate_error(values[1])
        return _(ours).format(**dict(zip(names, values, strict=True)))
    return message


def wrap_columns(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` (one paragraph) in lines of at most ``width`` columns, lines after the first
    starting with ``indent``: :func:`jupyter_gpu.core.text.fill` (spaces, and between CJK characters)."""
    return fill(text, width, indent)


def _lines(text: str, width: int) -> list[str] | None:
    """``text`` broken for a CJK reader, or None when it has no wide character (argparse's own way)."""
    if columns(text) == len(text):
        return None
    return fill(text, max(width, 10))


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter in the user's language: the ``usage:`` prefix, CJK-aware wrapping."""

    def add_usage(
        self, usage: str | None, actions: Iterable[argparse.Action], groups: Iterable[Any], prefix: str | None = None
    ) -> None:
        super().add_usage(usage, actions, groups, _(USAGE) if prefix is None else prefix)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headings: list[str] = []

    def start_section(self, heading: str | None) -> None:
        if heading:
            self._headings.append(heading)
        super().start_section(heading)

    def format_help(self) -> str:
        """argparse's page, each section's heading followed by the colon of the user's language."""
        text = super().format_help()
        for heading in self._headings:
            text = text.replace(f"\n{heading}:\n", "\n" + _(HEADING).format(heading=heading) + "\n")
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _lines(text, width) or super()._split_lines(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = _lines(text, width - len(indent))
        if lines is None:
            return super()._fill_text(text, width, indent)
        return "\n".join(indent + line for line in lines)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` that leaves the description and epilog as written (line breaks kept)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return argparse.RawDescriptionHelpFormatter._fill_text(self, text, width, indent)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` speaking the user's language (the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._positionals.title = _(POSITIONALS)
        self._optionals.title = _(OPTIONALS)
        for action in self._actions:
            if isinstance(action, argparse._HelpAction):
                action.help = _(HELP)

    def error(self, message: str) -> NoReturn:
        """Usage and ``PROG: error: MESSAGE`` (translated) on stderr, exit status 2."""
        self.print_usage(sys.stderr)
        self.exit(2, _(ERROR).format(prog=self.prog, message=translate_error(message)) + "\n")
