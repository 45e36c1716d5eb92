"""The breaker's facts of a large ledger, read with msgspec a chunk at a time (see ``_facts``).

The attempts array is split without decoding (each attempt a view into the text) and the
attempts are decoded 512 at a time from the newest, so every one is still validated, a
huge ledger is never held as objects, and the walk of ``_facts`` takes a chunk at once.
"""

from __future__ import annotations

import mmap
import os
from functools import reduce
from operator import add, attrgetter
from typing import Any

import msgspec
from msgspec import UNSET

from ._facts import BreakerFacts, _facts, _token, _Walk, breaker_facts
from ._model import Attempt, parse_ledger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["read_file_facts", "read_large_facts"]


class _SplitLedger(msgspec.Struct, kw_only=True, rename="camel"):
    """A ledger whose attempts are left undecoded (each a view into the JSON text)."""

    goal: str
    started_at: Any = UNSET
    attempts: list[msgspec.Raw]


_SPLIT = msgspec.json.Decoder(_SplitLedger)
_ATTEMPTS = msgspec.json.Decoder(list[Attempt])
#: Attempts decoded at a time: one decoder call per chunk instead of one per attempt, and
#: never more than a chunk of them held as objects.
_CHUNK = 512
_TOKENS = attrgetter("tokens_used")
_EXACT = 2**53
#: An attempt longer than this (in bytes) sends the file to ``_facts_stream``, which reads
#: it a block at a time: here the file, the attempt's bytes and its decoded error would be
#: held at once (~4x the file on one huge error).
_LONG_ATTEMPT = 1 << 18
_ANONYMOUS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only


def read_file_facts(handle: BinaryIO, threshold: float) -> BreakerFacts:
    """The facts of a regular file's ledger JSON, read from its start:
    :func:`read_large_facts`, or, for a ledger with an attempt longer than 256 KiB,
    ``_facts_stream``'s block reader (the file's bytes freed first)."""
    data = _read_all(handle)
    try:
        raws: list[msgspec.Raw] | None = _SPLIT.decode(data).attempts
    except msgspec.MsgspecError:
        raws = None  # read_large_facts raises the reference's message
    if raws and max(map(len, raws)) > _LONG_ATTEMPT:
        del raws, data
        from ._facts_stream import read_streamed_facts  # noqa: PLC0415 - a rare ledger

        handle.seek(0)
        facts = read_streamed_facts(handle.read, threshold)
        if facts is not None:
            return facts
        handle.seek(0)
        data = _read_all(handle)
        raws = None
    return read_large_facts(data, threshold, raws)


def _read_all(handle: BinaryIO) -> bytes | mmap.mmap:
    """The rest of the file, in an anonymous mapping rather than a bytes object: freeing a
    block of up to 32 MiB from malloc raises glibc's mmap threshold to its size, and the
    block reader's growing buffers then fragment the heap (~2x the file on one 20 MB
    error, docs/benchmarks.md); a mapping is returned to the system as it is."""
    size = os.fstat(handle.fileno()).st_size
    if size <= 0:
        return handle.read()
    # Populated at once: one fault per page of a 19 MB file costs ~6 ms of a ~100 ms check.
    buffer = mmap.mmap(-1, size, flags=_ANONYMOUS | _POPULATE)
    got = handle.readinto(buffer)  # type: ignore[attr-defined]  # an open(..., "rb") file
    rest = handle.read()
    if got != size or rest:  # the file changed size since fstat
        return buffer[:got] + rest
    return buffer


def read_large_facts(
    data: bytes | mmap.mmap, threshold: float, raws: list[msgspec.Raw] | None = None
) -> BreakerFacts:
    """:func:`_facts.read_breaker_facts` with msgspec; whenever msgspec refuses the input,
    :func:`parse_ledger` reads it, which raises the reference's message (and also serves
    text that is only valid once bad UTF-8 bytes are replaced). ``raws``: the attempts of
    ``data`` if already split.
    """
    # Each chunk's tokens as decoded, newest chunk first.
    tokens: list[list[Any]] = []
    walk = _Walk(threshold)
    newest: object = None
    try:
        if raws is None:
            raws = _SPLIT.decode(data).attempts
        for end in range(len(raws), 0, -_CHUNK):
            chunk = _ATTEMPTS.decode(b"[" + b",".join(raws[max(0, end - _CHUNK) : end]) + b"]")
            tokens.append(list(map(_TOKENS, chunk)))
            if end == len(raws):
                newest = chunk[-1].tokens_used
            walk.feed(chunk[::-1])
    except msgspec.MsgspecError:
        ledger = parse_ledger(str(data, "utf-8", errors="replace"))
        return breaker_facts(ledger.attempts, threshold)
    return _facts(len(raws), _total(tokens), newest, walk)


def _total(newest_chunk_first: list[list[Any]]) -> float:
    """The tokens' sum as JavaScript adds them: doubles, one after the other, oldest first."""
    try:
        # The usual ledger: non-negative integers whose sum stays below 2**53. Every partial
        # sum is then an integer a double holds exactly, so the order cannot matter.
        sums = [sum(values) for values in newest_chunk_first]
        exact = sum(sums)
        if (
            type(exact) is int
            and exact < _EXACT
            and all(min(values) >= 0 for values in newest_chunk_first if values)
        ):
            return float(exact)
    except (TypeError, OverflowError):  # an absent or null value; a huge int with a float
        pass
    total = 0.0
    for values in reversed(newest_chunk_first):  # oldest first: addition is not associative
        # One addition after the other, as a loop would (not sum(), which compensates on
        # newer Pythons); adding 0.0 to a sum from +0.0 changes nothing.
        total = reduce(add, map(_token, values), total)
    return total
