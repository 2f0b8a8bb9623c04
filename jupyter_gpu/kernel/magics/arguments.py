"""Reading a magic's line: IPython's ``magic_arguments`` with every malformed line as one UsageError."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring


def parse(magic: Any, line: str) -> Any:
    """``parse_argstring`` with every malformed line (an unclosed quote too) as a one-line UsageError."""
    try:
        return parse_argstring(magic, line)
    except UsageError:
        raise
    except (ValueError, OverflowError) as error:
        raise UsageError(f"cannot read the arguments {line.strip()!r}: {error}") from None
