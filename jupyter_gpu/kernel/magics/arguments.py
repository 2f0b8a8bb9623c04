"""Reading a magic's line: IPython's ``magic_arguments`` with every malformed line as one UsageError."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from ...core.i18n import _


def parse(magic: Any, line: str) -> Any:
    """``parse_argstring`` with every malformed line (an unclosed quote too) as a one-line UsageError."""
    try:
        return parse_argstring(magic, line)
    except UsageError:
        raise
    except (ValueError, OverflowError) as error:
        raise UsageError(
            _("cannot read the arguments {line}: {error}").format(line=repr(line.strip()), error=error)
        ) from None
