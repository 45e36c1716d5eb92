"""Many short texts in a few flat buffers (the summary's memory, docs/benchmarks.md).

A Python string costs ~50 bytes besides its text, and a set or dict of them ~40 more per
entry; the summary of a large ledger keeps a text per group and per distinct action, so it
keeps them here instead, UTF-8 encoded back to back (``surrogatepass``: any ``str``
round-trips).
"""

from __future__ import annotations

import codecs
from array import array
from collections.abc import Callable, Iterator

__all__ = ["TextList", "TextSet"]

_MAX_END = 0xFFFFFFFF
_BLOCK = 1 << 16


class TextList:
    """An append-only list of texts in one byte buffer."""

    __slots__ = ("_data", "_ends")

    def __init__(self) -> None:
        self._data = bytearray()
        #: Where each text ends in ``_data`` (it starts where the one before ends); 4 bytes
        #: each until the texts pass 4 GiB.
        self._ends = array("I")

    def append(self, text: str) -> None:
        if len(text) <= _BLOCK:
            self._data += text.encode("utf-8", "surrogatepass")
        else:
            # A block at a time: an encoded copy of a long text beside the buffer would double
            # it (UTF-8 encodes each code point alone, so the blocks join to the same bytes).
            for start in range(0, len(text), _BLOCK):
                self._data += text[start : start + _BLOCK].encode("utf-8", "surrogatepass")
        end = len(self._data)
        if end > _MAX_END and self._ends.typecode == "I":
            self._ends = array("q", self._ends)
        self._ends.append(end)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> str:
        ends = self._ends
        start = ends[index - 1] if index else 0
        # Decoded from a view: a slice of the buffer would be a second copy of a long text.
        with memoryview(self._data) as view:
            return str(view[start : ends[index]], "utf-8", "surrogatepass")

    def write(self, index: int, write: Callable[[str], object]) -> None:
        """``write(self[index])``, a block at a time (no decoded copy of a long text)."""
        ends = self._ends
        start = ends[index - 1] if index else 0
        end = ends[index]
        if end - start <= _BLOCK:
            write(self[index])
            return
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        with memoryview(self._data) as view:
            for at in range(start, end, _BLOCK):
                piece = view[at : min(at + _BLOCK, end)]
                write(decoder.decode(piece, final=at + _BLOCK >= end))
                piece.release()


class TextSet:
    """Distinct texts (and ``None``) in first-seen order: ``dict.fromkeys`` in flat buffers.

    A chained hash table in arrays: ``_buckets[hash & mask]`` is the newest entry of a
    bucket (1-based, 0 ends a chain) and ``_next`` the one before it; a text is compared
    only when the 32-bit hashes agree.
    """

    __slots__ = ("_buckets", "_hashes", "_mask", "_next", "_texts", "none_at")

    def __init__(self) -> None:
        self._texts = TextList()
        self._hashes = array("i", [0])  # entry 0 ends every chain
        self._next = array("i", [0])
        self._mask = (1 << 10) - 1
        self._buckets = array("i", bytes(4 << 10))
        #: Where ``None`` comes in the order (-1: never added).
        self.none_at = -1

    def add(self, text: str | None) -> None:
        if text is None:
            if self.none_at < 0:
                self.none_at = len(self)
            return
        short = (hash(text) & 0xFFFFFFFF) - (1 << 31)
        buckets, bucket = self._buckets, short & self._mask
        entry = buckets[bucket]
        if entry:
            hashes, nexts = self._hashes, self._next
            while entry:
                if hashes[entry] == short and self._texts[entry - 1] == text:
                    return
                entry = nexts[entry]
        self._texts.append(text)
        self._hashes.append(short)
        self._next.append(buckets[bucket])
        entry = buckets[bucket] = len(self._hashes) - 1
        if entry > 2 * (self._mask + 1):
            self._grow()

    def _grow(self) -> None:
        slots = (self._mask + 1) * 4
        mask = self._mask = slots - 1
        buckets = self._buckets = array("i", bytes(4 * slots))
        hashes, nexts = self._hashes, self._next
        for entry in range(1, len(hashes)):
            bucket = hashes[entry] & mask
            nexts[entry] = buckets[bucket]
            buckets[bucket] = entry

    def __len__(self) -> int:
        return len(self._texts) + (self.none_at >= 0)

    def __iter__(self) -> Iterator[str | None]:
        texts, none_at = self._texts, self.none_at
        for index in range(len(texts)):
            if index == none_at:
                yield None
            yield texts[index]
        if none_at == len(texts):
            yield None
