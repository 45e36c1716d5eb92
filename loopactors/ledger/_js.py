"""ECMAScript semantics loop-context relies on: whitespace, number-to-text and JSON output.

loop-context is TypeScript, so its observable text follows JavaScript rules that Python's
defaults do not (``str.strip``, ``repr(1500.0)``, ``json.dumps``). Everything here is pure.
"""

from __future__ import annotations

import abc
import math
import sys
from json.encoder import encode_basestring  # json.dumps(text, ensure_ascii=False), minus its set-up

TYPE_CHECKING = False  # typing itself is not loaded by ``context --check``
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, TypeGuard

# Nothing here imports msgspec or decimal: ``loopactors context --check`` on a small ledger
# loads neither (docs/benchmarks.md, start-up).

__all__ = [
    "WHITESPACE",
    "WS_CLASS",
    "LongText",
    "as_double",
    "encode_json",
    "encode_plain_json",
    "format_number",
    "is_integer",
    "is_number",
    "js_number",
    "js_string",
    "trim",
    "trim_end",
    "trim_start",
    "truthy_number",
    "write_json",
]

#: The ECMAScript WhiteSpace + LineTerminator set (J1). Python's own set adds U+001C-U+001F
#: and U+0085 and lacks U+FEFF, so it cannot be used.
WHITESPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
#: The same set as the body of a regex character class.
WS_CLASS = r"\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

_MAX_SAFE = 2**53


def trim(text: str) -> str:
    return text.strip(WHITESPACE)


def trim_start(text: str) -> str:
    return text.lstrip(WHITESPACE)


def trim_end(text: str) -> str:
    return text.rstrip(WHITESPACE)


def is_number(value: object) -> TypeGuard[int | float]:
    """``typeof value === "number"``: bool is an int subclass in Python but not a number."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_double(value: int | float) -> float:
    """The double JavaScript would hold (an int past the double range becomes Infinity)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def is_integer(value: object) -> TypeGuard[int | float]:
    """``Number.isInteger``: a finite number with no fraction (a number, so the type narrows)."""
    if not is_number(value):
        return False
    x = as_double(value)
    return math.isfinite(x) and x.is_integer()


def truthy_number(value: int | float) -> bool:
    """JavaScript truthiness of a number (J7): 0 and NaN are false (Python finds NaN true)."""
    return not math.isnan(value) and value != 0


def js_number(value: int | float) -> int | float:
    """A double as the most natural Python number: exact integers become ``int``.

    Keeps ``msgspec.json.encode`` output equal to ``JSON.stringify`` for the usual values
    (``1500`` not ``1500.0``); beyond 2**53 the float is kept and ``encode_json`` is needed.
    """
    x = as_double(value)
    if math.isfinite(x) and x.is_integer() and abs(x) < _MAX_SAFE:
        return int(x)
    return x


def format_number(value: int | float) -> str:
    """``Number.prototype.toString()`` (J5)."""
    x = as_double(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"  # also -0
    sign = "-" if x < 0 else ""
    # repr() gives the shortest round-tripping digits, the same digits JavaScript picks:
    # "1500.0", "1.5e-07", "1e+22". n is where the decimal point goes after the digits.
    mantissa_text, _, exponent_text = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa_text.partition(".")
    all_digits = whole + fraction
    stripped = all_digits.lstrip("0")
    n = len(whole) - (len(all_digits) - len(stripped)) + int(exponent_text or 0)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def js_string(value: object) -> str:
    """``String(value)`` for the values a config or template can hold."""
    if value is None:
        return "null"
    if _is_unset(value):
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return format_number(value)
    return str(value)


def _is_unset(value: object) -> bool:
    """Whether ``value`` is ``msgspec.UNSET`` (which cannot exist before msgspec is loaded)."""
    msgspec = sys.modules.get("msgspec")
    return msgspec is not None and value is msgspec.UNSET


def encode_json(value: Any, indent: int | None = 2) -> str:
    """``JSON.stringify(value, null, indent)`` (J6) for Structs and builtins.

    Numbers follow J5 (non-finite ones print ``null``), non-ASCII text is written raw and
    unset Struct fields are omitted, as JavaScript omits ``undefined`` keys.
    """
    import msgspec  # noqa: PLC0415 - only for Structs; see encode_plain_json

    return _encode(msgspec.to_builtins(value), indent, 0)


class LongText(abc.ABC):
    """A string too long to hold as one: :func:`write_json` writes it a piece at a time."""

    __slots__ = ()

    @abc.abstractmethod
    def pieces(self) -> Iterator[str]:
        """The text, a piece at a time."""


def write_json(value: Any, write: Callable[[str], object], indent: int | None = 2) -> None:
    """``write(encode_json(value, indent))``, written a piece at a time.

    A Struct's or dict's fields and a list's elements are encoded one at a time, so a large
    value (a summary of 50,000 groups) is never held as builtins or as one string.
    """
    _JsonWriter(write, indent).value(value, 0)


class _JsonWriter:
    """:func:`_encode`'s output (the layout of :func:`_join`), piece by piece."""

    def __init__(self, write: Callable[[str], object], indent: int | None) -> None:
        import msgspec  # noqa: PLC0415 - only for Structs

        self.write = write
        self.indent = indent
        self.msgspec = msgspec
        #: A Struct type's (JSON name, attribute) pairs: msgspec.structs.fields is slow.
        self.fields: dict[type, list[tuple[str, str]]] = {}

    def value(self, value: Any, level: int) -> None:
        msgspec = self.msgspec
        if isinstance(value, msgspec.Struct):
            fields = self.fields.get(type(value))
            if fields is None:
                fields = self.fields[type(value)] = [
                    (field.encode_name, field.name) for field in msgspec.structs.fields(value)
                ]
            unset = msgspec.UNSET
            value = {
                key: item for key, name in fields if (item := getattr(value, name)) is not unset
            }
        if isinstance(value, dict) and value:
            space = "" if self.indent is None else " "
            keys = [f"{encode_basestring(k)}:{space}" for k in value]
            self.items(keys, list(value.values()), "{}", level)
        elif isinstance(value, list | tuple) and value:
            self.items([""] * len(value), value, "[]", level)
        elif isinstance(value, LongText):
            write = self.write
            write('"')
            for piece in value.pieces():
                write(encode_basestring(piece)[1:-1])
            write('"')
        else:
            self.write(_encode(msgspec.to_builtins(value), self.indent, level))

    def items(self, prefixes: list[str], values: Sequence[Any], brackets: str, level: int) -> None:
        indent = self.indent
        inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
        for i, (prefix, item) in enumerate(zip(prefixes, values, strict=True)):
            self.write((brackets[0] if i == 0 else ",") + inner + prefix)
            self.value(item, level + 1)
        end = "" if indent is None else "\n" + " " * (indent * level)
        self.write(end + brackets[1])


def encode_plain_json(value: Any, indent: int | None = 2) -> str:
    """:func:`encode_json` for a value made of dicts, lists, strings, numbers, bools and None."""
    return _encode(value, indent, 0)


def _encode(value: Any, indent: int | None, level: int) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        x = as_double(value)
        return format_number(x) if math.isfinite(x) else "null"
    if isinstance(value, str):
        return encode_basestring(value)
    if isinstance(value, dict):
        items = [f"{encode_basestring(k)}:" for k in value]
        parts = [
            f"{key}{'' if indent is None else ' '}{_encode(v, indent, level + 1)}"
            for key, v in zip(items, value.values(), strict=True)
        ]
        return _join(parts, "{", "}", indent, level)
    if isinstance(value, list | tuple):
        return _join([_encode(v, indent, level + 1) for v in value], "[", "]", indent, level)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _join(parts: list[str], open_: str, close: str, indent: int | None, level: int) -> str:
    if not parts:
        return open_ + close
    if indent is None:
        return open_ + ",".join(parts) + close
    inner = "\n" + " " * (indent * (level + 1))
    return open_ + inner + ("," + inner).join(parts) + "\n" + " " * (indent * level) + close
