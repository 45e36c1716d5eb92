"""PostgreSQL arrays in binary, built here for a group commit's parameters.

psycopg dumps a Python list parameter element by element, looking up each list's element
type and dumper on every call: ~12 us per list of 11 elements, about 250 us per commit of
the ~20 lists a commit sends (docs/benchmarks.md). The arrays here are built once, in the
array's binary wire format (one dimension, lower bound 1), by one ``struct`` call for
numbers and a join for text and bytes, and handed over as they are (~1-3 us each).

Imported with psycopg, only when a ``postgresql://`` store is opened.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from psycopg import Connection
from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format

__all__ = [
    "BinaryArray",
    "bytea_array",
    "float8_array",
    "int4_array",
    "int8_array",
    "register_arrays",
    "text_array",
]

# ndim, has NULLs, element oid, then (for one dimension) its length and lower bound.
_HEAD = struct.Struct("!iiIii")
_EMPTY = struct.Struct("!iiI")
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)

# Element oids and array oids (pg_type), fixed since PostgreSQL 8.
_TEXT, _TEXT_ARRAY = 25, 1009
_BYTEA, _BYTEA_ARRAY = 17, 1001
_INT4, _INT4_ARRAY = 23, 1007
_INT8, _INT8_ARRAY = 20, 1016
_FLOAT8, _FLOAT8_ARRAY = 701, 1022


class BinaryArray(bytes):
    """An array in PostgreSQL's binary format; each subclass is one element type."""

    __slots__ = ()


class _TextArray(BinaryArray):
    __slots__ = ()


class _ByteaArray(BinaryArray):
    __slots__ = ()


class _Int4Array(BinaryArray):
    __slots__ = ()


class _Int8Array(BinaryArray):
    __slots__ = ()


class _Float8Array(BinaryArray):
    __slots__ = ()


def _sized(oid: int, items: Sequence[bytes | None]) -> bytes:
    """Elements each preceded by its length (-1: NULL)."""
    if not items:
        return _EMPTY.pack(0, 0, oid)
    pack = _LENGTH.pack
    parts = [b""]
    has_null = 0
    for item in items:
        if item is None:
            parts.append(_NULL)
            has_null = 1
        else:
            parts.append(pack(len(item)))
            parts.append(item)
    parts[0] = _HEAD.pack(1, has_null, oid, len(items), 1)
    return b"".join(parts)


def _fixed(oid: int, code: str, size: int, values: Sequence[float]) -> bytes:
    """Numbers of one fixed size, each preceded by it: one ``struct`` call for all.

    Raises:
        ValueError: a value the type cannot hold (an int beyond its bits, not a number).
    """
    n = len(values)
    if not n:
        return _EMPTY.pack(0, 0, oid)
    args: list[float] = [size] * (2 * n)
    args[1::2] = values
    try:
        return _HEAD.pack(1, 0, oid, n, 1) + struct.pack("!" + ("i" + code) * n, *args)
    except (struct.error, OverflowError, TypeError) as exc:
        kind = {"i": "int4", "q": "int8", "d": "float8"}[code]
        raise ValueError(f"a value does not fit a PostgreSQL {kind}: {exc}") from None


def text_array(items: Sequence[str | None], encoding: str) -> BinaryArray:
    """A ``text[]`` (None: NULL), encoded as the connection's client encoding says."""
    return _TextArray(
        _sized(_TEXT, [None if item is None else item.encode(encoding) for item in items])
    )


def bytea_array(items: Sequence[bytes]) -> BinaryArray:
    return _ByteaArray(_sized(_BYTEA, items))


def int4_array(values: Sequence[int]) -> BinaryArray:
    return _Int4Array(_fixed(_INT4, "i", 4, values))


def int8_array(values: Sequence[int]) -> BinaryArray:
    return _Int8Array(_fixed(_INT8, "q", 8, values))


def float8_array(values: Sequence[float]) -> BinaryArray:
    return _Float8Array(_fixed(_FLOAT8, "d", 8, values))


def _dumper(array_oid: int) -> type[Dumper]:
    class _ArrayDumper(Dumper):
        format = Format.BINARY
        oid = array_oid

        def dump(self, obj: object) -> Buffer:
            assert isinstance(obj, BinaryArray)
            return obj

    return _ArrayDumper


_DUMPERS: tuple[tuple[type[BinaryArray], type[Dumper]], ...] = (
    (_TextArray, _dumper(_TEXT_ARRAY)),
    (_ByteaArray, _dumper(_BYTEA_ARRAY)),
    (_Int4Array, _dumper(_INT4_ARRAY)),
    (_Int8Array, _dumper(_INT8_ARRAY)),
    (_Float8Array, _dumper(_FLOAT8_ARRAY)),
)


def register_arrays(conn: Connection[object]) -> None:
    """Let ``conn`` send the arrays built here as parameters (binary: ``%b``)."""
    for cls, dumper in _DUMPERS:
        conn.adapters.register_dumper(cls, dumper)
