"""One strict reader for untrusted JSON: every file, answer and report another party wrote.

Claim files other users leave in ``/tmp``, kernel reports, a user server's snapshot read by the
hub, the hub service's device snapshot read by a user server, Prometheus's answers: each is read
with :func:`loads` and checked field by field with :class:`Fields`. Both raise only
:class:`WireError` (a ``ValueError``, defined in :mod:`jupyter_gpu.core.errors` and re-exported
here), whose one-line message names the field's path (``gpus[2].processes[0].pid must be a whole
number in 1..4294967295``), so a caller drops that one input with one line and goes on.

The rules, in this one place:

- **Size first**: more than ``max_bytes`` is refused before parsing.
- **UTF-8 only**: bytes that are not UTF-8 (UTF-16, Latin-1, a byte-order mark) are refused.
- **Nesting**: deeper than ``max_depth`` arrays/objects is refused, counted by a scan of the text
  before the parser (which recurses) sees it; a ``RecursionError`` is converted all the same.
- **Numbers**: ``NaN``, ``Infinity``, ``-Infinity`` are not JSON and are refused, and so is a
  float literal too large for a double (``1e400``, which Python reads as infinity). Integers stay
  exact Python integers of any size (up to the interpreter's digit limit): the field helpers compare
  them with their bounds as integers, never through ``float()``, so ``10**400`` is "out of range",
  not an ``OverflowError``.
- **Duplicate keys** in one object are refused: parsers disagree about which one wins, and a
  checked value must be the value used.
- **Booleans are not numbers**: ``true`` is never accepted where a number is asked for.

A reader, in short (a strict one raises; a lenient one wraps a read in :func:`maybe`)::

    data = Fields(loads(raw, max_bytes=64 * 1024, max_depth=8))      # "the data is not a JSON object"
    pid = data.integer("pid", 1, 2**31 - 1)                           # required
    power = data.optional_number("power", 0)                           # None when missing or null
    name = data.text("name", 255, default="GPU")                       # the default when missing
    for gpu in data.objects("gpus", 64, default=[]):                  # each a Fields: "gpus[3].uuid ..."
        uuid = gpu.text("uuid", 128)
    idle_s = maybe(data.number, "idle_s", 0)                          # None instead of an error

A reader's own error type may subclass :class:`WireError` (``ReportError``, ``BadAnswer``,
``PrometheusError``, ``ScenarioError``), so its callers keep catching what they caught.

Pure: the standard library only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any, ParamSpec, TypeGuard, TypeVar

from . import messages
from .errors import WireError  # defined with the package's other exceptions; still wire.WireError

__all__ = [
    "Fields",
    "WireError",
    "finite",
    "integer",
    "loads",
    "maybe",
    "number",
    "text",
]

P = ParamSpec("P")
T = TypeVar("T")

_MISSING: Any = object()
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1


def _check_depth(text: str, max_depth: int) -> None:
    """Refuse more than ``max_depth`` nested arrays/objects (brackets inside strings not counted).

    Without recursion, in time linear in the text: the strings are cut out and the brackets alone
    kept; a few passes remove every innermost ``[]``/``{}`` pair (ordinary data is then empty, or
    nearly), and the depth of what is left is the running sum of +1 per opening and -1 per closing
    bracket, plus the passes made. Unbalanced brackets are not JSON: the parser refuses them, at
    the latest at their first unmatched bracket.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot nest deeper than it has brackets
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    passes = min(max_depth, 4)
    for _ in range(passes):
        brackets = _INNERMOST.sub("", brackets)
    if brackets and max(accumulate(map(_DEPTH_STEP.__getitem__, brackets.encode("ascii")))) > max_depth - passes:
        raise WireError(messages.WIRE_TOO_DEEP.format(levels=max_depth))


def _refuse_constant(name: str) -> Any:
    raise WireError(messages.WIRE_NOT_A_NUMBER.format(name=name))


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise WireError(messages.WIRE_NUMBER_TOO_LARGE.format(literal=literal[:20]))
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise WireError(messages.WIRE_KEY_TWICE.format(key=repr(key[:40])))
            seen.add(key)
    return result


def loads(data: bytes | str, *, max_bytes: int, max_depth: int = 32) -> Any:
    """The JSON value in ``data`` (UTF-8 bytes, or text), under the rules of the module docstring.

    Raises :class:`WireError` only (too large, not UTF-8, not JSON, nested too deeply, NaN or
    Infinity, a float beyond a double, a duplicate key, an integer of more digits than Python
    converts).
    """
    if isinstance(data, str):
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise WireError(messages.WIRE_SURROGATES) from None
        text = data
    else:
        size = len(data)
        if size <= max_bytes:
            try:
                text = bytes(data).decode("utf-8")
            except UnicodeDecodeError as error:
                raise WireError(messages.WIRE_NOT_UTF8.format(position=error.start)) from None
    if size > max_bytes:
        raise WireError(messages.WIRE_TOO_LARGE.format(most=max_bytes))
    _check_depth(text, max_depth)
    try:
        return json.loads(
            text, parse_constant=_refuse_constant, parse_float=_float, object_pairs_hook=_unique, strict=True
        )
    except WireError:
        raise
    except json.JSONDecodeError as error:
        raise WireError(messages.WIRE_NOT_JSON.format(reason=error.msg, position=error.pos)) from None
    except RecursionError:
        raise WireError(messages.WIRE_NESTED) from None
    except ValueError:  # the only other ValueError: an integer of more digits than int() reads
        raise WireError(messages.WIRE_HUGE_INTEGER) from None


# -- values


def _kind(value: Any) -> str:
    """What ``value`` is, for an error message (a number as itself, unless it is very long): English
    words of :mod:`.messages`, which translates them where the message is shown."""
    if type(value) in messages.KINDS:
        return messages.KINDS[type(value)]
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else messages.KIND_BIG_INTEGER.format(bits=value.bit_length())
    if isinstance(value, float):
        return repr(value)
    return type(value).__name__


def finite(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite number (an int of any size, or a finite float; not a bool).
    Never raises (``math.isfinite(10**400)`` raises ``OverflowError``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def integer(value: Any, where: str, low: int, high: int) -> int:
    """``value`` as a whole number in ``low..high`` (a JSON integer; ``true`` and ``2.0`` are not)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise WireError(messages.FIELD_WHOLE_IN_RANGE.format(field=where, low=low, high=high, kind=_kind(value)))
    return value


def number(value: Any, where: str, low: float = -math.inf, high: float = math.inf) -> float:
    """``value`` as a finite float in ``low..high`` (an int of any size is compared exactly first)."""
    if not finite(value) or not low <= value <= high:
        if math.isfinite(low) or math.isfinite(high):
            template, bounds = messages.FIELD_FINITE_IN_RANGE, {"low": f"{low:g}", "high": f"{high:g}"}
        else:
            template, bounds = messages.FIELD_NOT_FINITE_NUMBER, {}
        raise WireError(template.format(field=where, kind=_kind(value), **bounds))
    try:
        return float(value)
    except OverflowError:  # an int beyond any double, with no upper bound asked for
        raise WireError(messages.FIELD_DOUBLE_RANGE.format(field=where)) from None


def text(value: Any, where: str, max_chars: int, min_chars: int = 1) -> str:
    """``value`` as a string of ``min_chars..max_chars`` characters."""
    if not isinstance(value, str) or not min_chars <= len(value) <= max_chars:
        raise WireError(
            messages.FIELD_STRING_LENGTH.format(field=where, least=min_chars, most=max_chars, kind=_kind(value))
        )
    return value


def maybe(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """``read(*args, **kwargs)``, or None when it raises :class:`WireError`: for lenient readers that
    drop one bad field and keep the rest (``maybe(fields.number, "idle_s", 0)``)."""
    try:
        return read(*args, **kwargs)
    except WireError:
        return None


# -- objects


class Fields:
    """Typed reads of one JSON object's fields; every failure a :class:`WireError` naming the path.

    ``where`` is the object's path (``"gpus[2]"``; empty at the top). A missing field takes the
    ``default`` when one is given (returned as is, unchecked), else is an error; the ``optional_``
    reads return None for a missing field or ``null``.
    """

    def __init__(self, data: Any, where: str = "") -> None:
        if not isinstance(data, dict):
            raise WireError(messages.FIELD_NOT_AN_OBJECT.format(field=where or "the data", kind=_kind(data)))
        self.data: dict[str, Any] = data
        self.where = where

    def path(self, name: str) -> str:
        """The path of field ``name``, as error messages name it."""
        return f"{self.where}.{name}" if self.where else name

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        """The field's value, unchecked (a missing field without a default is an error)."""
        if name in self.data:
            return self.data[name]
        if default is _MISSING:
            raise WireError(messages.FIELD_MISSING.format(field=self.path(name)))
        return default

    def integer(self, name: str, low: int, high: int, default: Any = _MISSING) -> int:
        """A whole number in ``low..high``."""
        if name not in self.data and default is not _MISSING:
            return default  # type: ignore[no-any-return]
        return integer(self.raw(name), self.path(name), low, high)

    def optional_integer(self, name: str, low: int, high: int) -> int | None:
        """A whole number in ``low..high``, or None for a missing field or null."""
        value = self.data.get(name)
        return None if value is None else integer(value, self.path(name), low, high)

    def number(self, name: str, low: float = -math.inf, high: float = math.inf, default: Any = _MISSING) -> float:
        """A finite number in ``low..high``, as a float."""
        if name not in self.data and default is not _MISSING:
            return default  # type: ignore[no-any-return]
        return number(self.raw(name), self.path(name), low, high)

    def optional_number(self, name: str, low: float = -math.inf, high: float = math.inf) -> float | None:
        """A finite number in ``low..high``, or None for a missing field or null."""
        value = self.data.get(name)
        return None if value is None else number(value, self.path(name), low, high)

    def text(self, name: str, max_chars: int, min_chars: int = 1, default: Any = _MISSING) -> str:
        """A string of ``min_chars..max_chars`` characters."""
        if name not in self.data and default is not _MISSING:
            return default  # type: ignore[no-any-return]
        return text(self.raw(name), self.path(name), max_chars, min_chars)

    def optional_text(self, name: str, max_chars: int, min_chars: int = 0) -> str | None:
        """A string of ``min_chars..max_chars`` characters, or None for a missing field or null."""
        value = self.data.get(name)
        return None if value is None else text(value, self.path(name), max_chars, min_chars)

    def boolean(self, name: str, default: Any = _MISSING) -> bool:
        """``true`` or ``false`` (not 0 or 1)."""
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise WireError(messages.FIELD_NOT_BOOL.format(field=self.path(name), kind=_kind(value)))
        return value

    def items(self, name: str, max_items: int, default: Any = _MISSING) -> list[Any]:
        """A list of at most ``max_items`` entries (unchecked; see :meth:`objects`)."""
        value = self.raw(name, default)
        if not isinstance(value, list) or len(value) > max_items:
            raise WireError(
                messages.FIELD_LIST_TOO_LONG.format(field=self.path(name), most=max_items, kind=_kind(value))
            )
        return value

    def objects(self, name: str, max_items: int, default: Any = _MISSING) -> Iterator[Fields]:
        """The entries of a list of at most ``max_items`` objects, each as :class:`Fields`."""
        where = self.path(name)
        for i, item in enumerate(self.items(name, max_items, default)):
            yield Fields(item, f"{where}[{i}]")

    def mapping(self, name: str, max_items: int, max_key_chars: int = 256, default: Any = _MISSING) -> dict[str, Any]:
        """An object of at most ``max_items`` entries whose keys have at most ``max_key_chars``
        characters (values unchecked)."""
        value = self.raw(name, default)
        if not isinstance(value, dict) or len(value) > max_items:
            raise WireError(
                messages.FIELD_OBJECT_TOO_LARGE.format(field=self.path(name), most=max_items, kind=_kind(value))
            )
        for key in value:
            if len(key) > max_key_chars:
                raise WireError(messages.FIELD_KEYS_TOO_LONG.format(field=self.path(name), most=max_key_chars))
        return value

    def fields(self, name: str) -> Fields:
        """The field's object, as :class:`Fields` (its errors name ``where.name.field``)."""
        return Fields(self.raw(name), self.path(name))
