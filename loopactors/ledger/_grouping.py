"""Exact first-match grouping of error signatures, without comparing every pair.

loop-context puts each signature into the first group (in creation order) whose signature is
at least ``threshold`` similar, which is quadratic. This finds the very same group with an exact
filter that proposes a few candidate groups, then runs the exact similarity test on those,
lowest index first. Two filters, both standard for set-similarity joins:

- Partitions (thresholds of at least 0.8, the summary's 0.85 included). If Jaccard(A, B) >= t
  then A and B differ in at most ``|B| (1 - t) / t`` elements, so when the trigram universe is
  cut into one more part than that (by hash), A and B agree exactly on at least one part. Each
  group head is indexed under the hash of each of its parts; a new signature looks up its own
  parts for every part count a head of a possible size would use. A key combines several
  grams, so it is selective even when every gram is common (a fixed vocabulary of words), and
  the work per signature does not grow with the number of groups: linear overall.
- Prefixes (lower thresholds, where parts would mostly be empty). If Jaccard(A, B) >= t then
  |A & B| >= ceil(t * max(|A|, |B|)). With every trigram set sorted by one global order (rarest
  first), two sets that overlap in at least ``k`` elements share an element within their first
  ``len - k + 1`` elements; a positional bound (PPJoin) drops most of the groups found.

- Counts (when the parts make more than ``_DENSE_AFTER`` heads candidates: a long text
  shared by every error, distinct tails). Every head's uncommon grams are indexed, so the
  grams a signature shares with each head are counted, not tested; heads of one size and
  common-gram count are refused together (``_DenseIndex``).

No group that passes the exact test is ever missed.
"""

from __future__ import annotations

import itertools
import math
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from ._compact import TextList
from ._text import trigrams, trigrams_of_pieces

__all__ = ["COMMON_SAMPLE", "PartsGrouper", "common_grams", "group_signatures"]

# The filter uses a slightly lower threshold so that float rounding in ``I / U >= t`` can never
# make a pair pass the exact test that the filter rejected.
_SLACK = 1 - 1e-9


def _prefix_length(size: int, threshold: float) -> int:
    return size - math.ceil(size * threshold * _SLACK) + 1


def _mask(bits: Iterable[int], width: int) -> int:
    buf = bytearray(width)
    for bit in bits:
        buf[bit >> 3] |= 1 << (bit & 7)
    return int.from_bytes(buf, "little")


def _group_by_prefix(signatures: Sequence[str], threshold: float) -> list[int]:
    distinct = list(dict.fromkeys(signatures))
    sets = {sig: trigrams(sig) for sig in distinct}
    frequency = Counter(gram for grams in sets.values() for gram in grams)
    # Rarest first gives short, selective prefixes; the tie-break only has to be fixed.
    rank = {gram: i for i, gram in enumerate(sorted(frequency, key=lambda g: (frequency[g], g)))}

    # Sets as bit masks over the ranks: the exact intersection count, many times cheaper.
    width = len(rank) // 8 + 1
    masks = {sig: _mask((rank[gram] for gram in grams), width) for sig, grams in sets.items()}
    heads: list[str] = []
    sizes: list[int] = []
    # gram -> (group, position of the gram in the group head's ordered set)
    index: dict[str, list[tuple[int, int]]] = {}
    # A signature's group never changes once found: later groups have higher indices.
    group_of: dict[str, int] = {}
    for sig in distinct:
        grams = sets[sig]
        size = len(grams)
        ordered = sorted(grams, key=rank.__getitem__)
        prefix = ordered[: _prefix_length(size, threshold)]
        # group -> (common grams met in both prefixes, positions of the last one)
        met: dict[int, tuple[int, int, int]] = {}
        for i, gram in enumerate(prefix):
            for group, j in index.get(gram, ()):
                count = met[group][0] if group in met else 0
                met[group] = (count + 1, i, j)
        candidates = []
        for group, (count, i, j) in met.items():
            # Positional filter: a common gram not met lies after the last met one in the
            # global order (an earlier one would be in both prefixes), so it follows
            # position i in this set and position j in the head's.
            other = sizes[group]
            bound = count + min(size - i - 1, other - j - 1)
            if bound >= math.ceil(max(size, other) * threshold * _SLACK):
                candidates.append(group)
        for group in sorted(candidates):
            head = heads[group]
            common = (masks[head] & masks[sig]).bit_count()
            # The same integers and the one division of calculate_similarity.
            if head == sig or common / (sizes[group] + size - common) >= threshold:
                group_of[sig] = group
                break
        else:
            group = len(heads)
            heads.append(sig)
            sizes.append(size)
            group_of[sig] = group
            for j, gram in enumerate(prefix):
                index.setdefault(gram, []).append((group, j))
    return [group_of[sig] for sig in signatures]


#: Below this threshold a part would often hold no gram of a signature's own, and a part
#: that is empty in many sets makes a poor key: the prefix filter is used instead.
_PARTITION_MIN_THRESHOLD = 0.8

#: Parts beyond the pigeonhole minimum: a match then agrees on at least this many parts, and
#: requiring two agreeing parts keeps chance agreements (a part holding only common grams)
#: from making every head with a shared word a candidate.
_AGREEING_PARTS = 2


def group_signatures(signatures: Sequence[str], threshold: float) -> list[int]:
    """The index of the group each signature joins; groups are numbered by creation.

    ``threshold`` must be in (0, 1] (validated by the caller). Equal to the reference's scan:
    a signature joins the first group whose head has ``calculate_similarity >= threshold``,
    and otherwise starts a new group.
    """
    if threshold >= _PARTITION_MIN_THRESHOLD:
        return _group_by_parts(signatures, threshold)
    return _group_by_prefix(signatures, threshold)


# Bounds are widened by this factor so float rounding never narrows them below the exact ones.
_LOOSE = 1 + 1e-9


#: Part counts in use: more parts than needed are fine, and a coarse ladder means a new
#: signature computes keys for one or two counts, not one for every possible head size.
_LADDER = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)


def _part_count(size: int, threshold: float) -> int:
    """Parts for a head of ``size`` grams: the most elements a match can differ in, plus two.

    Jaccard(A, B) >= t means |A ^ B| <= (1 - t) |A | B| and |A | B| <= |B| / t.
    """
    needed = math.floor(size * (1 - threshold) / threshold * _LOOSE) + _AGREEING_PARTS
    for parts in _LADDER:
        if parts >= needed:
            return parts
    # Past the ladder, steps of a quarter: a huge signature (a 20 MB error) then probes two
    # or three counts, not one for every size a match may have (thousands of part lists).
    parts = _LADDER[-1]
    while parts < needed:
        parts += parts // 4
    return parts


def _probe_counts(size: int, threshold: float) -> tuple[int, ...]:
    """The part counts of every head size a match of ``size`` grams can have."""
    # min/max of the two sizes is at least t.
    smallest = math.ceil(size * threshold / _LOOSE)
    largest = math.floor(size / threshold * _LOOSE)
    return tuple(sorted({_part_count(b, threshold) for b in range(smallest, largest + 1)}))


#: A gram in more than this share of the (sampled) signatures is left out of the parts:
#: a part made only of such grams would match most heads. Leaving grams out keeps the
#: filter exact (below); which grams are left out only changes its speed.
_COMMON_SHARE = 8
COMMON_SAMPLE = 2048


def common_grams(distinct: Sequence[str]) -> frozenset[str]:
    """The grams common in (a sample of at most about ``COMMON_SAMPLE`` of) ``distinct``."""
    if len(distinct) < 64:
        return frozenset()
    step = max(1, len(distinct) // COMMON_SAMPLE)
    sample = distinct[::step]
    frequency = Counter(gram for sig in sample for gram in trigrams(sig))
    return frozenset(g for g, n in frequency.items() if n * _COMMON_SHARE > len(sample))


class _Parts:
    """A gram set cut into ``count`` parts by hash: keys of its non-empty parts, empty parts.

    Grams left out (common ones) are in no part. Two sets within the pigeonhole bound agree
    exactly on at least two parts once common grams are left out, too: a common gram on one
    side only is one of the at most ``count - 2`` differing elements, and common grams on
    both sides differ in nothing.
    """

    __slots__ = ("empty", "keys")

    def __init__(self, hashes: Sequence[int], count: int) -> None:
        sums = [0] * count
        for h in hashes:
            sums[h % count] += h
        # A part whose hashes sum to 0 counts as empty: two sets that agree on a part still
        # agree on its being "empty", so at worst a head becomes a candidate needlessly.
        # _short, inlined (this runs for every part of every signature).
        self.keys = [
            (hash((count, part, total)) & 0xFFFFFFFF) - (1 << 31) or 1
            for part, total in enumerate(sums)
            if total
        ]
        #: Bit ``i`` set: part ``i`` holds no gram.
        self.empty = sum(1 << part for part, total in enumerate(sums) if not total)

    def empty_pair_keys(self, count: int) -> list[int]:
        """One key per pair of empty parts: two agreeing parts may both be empty."""
        empty = [part for part in range(count) if self.empty >> part & 1]
        return [
            _short(hash((count, -1, first, second)))
            for i, first in enumerate(empty)
            for second in empty[i + 1 :]
        ]


#: At most this many empty parts are looked up by their pairs (C(12, 2) = 66 keys); a set
#: with more (most of its grams common ones) makes every head of that part count a candidate.
_EMPTY_PARTS_LISTED = 12


def _short(key: int) -> int:
    """A key cut to 32 bits, never 0 (the empty slot's mark)."""
    return (key & 0xFFFFFFFF) - (1 << 31) or 1


#: The index starts with 2**_LOW_BITS buckets. A bucket's number is a key's low bits, so an
#: entry keeps only the next 16 (enough to double the buckets up to 2**28).
_LOW_BITS = 12
_MARK_BITS = 16


class _KeyIndex:
    """Part keys to groups: a chained hash table in flat arrays, one entry per key added.

    A dict of Python ints cost ~100 bytes a key (50 MB for 50,000 heads of ~12 keys), an
    open-addressing table 8 bytes a slot at most 70% full, with the old and the new table
    side by side while it grew (docs/benchmarks.md); this costs 6 bytes a key and a bucket
    (4 bytes) for every 1.5 to 3 keys, and grows only its bucket array (shorter chains cost
    a bucket array twice the size, longer ones time). A group adds its keys together, so an
    entry's group is found from where each group's entries begin. Keys are cut to 32 bits,
    and an entry tells only their low 28 apart: two keys may meet, which only ever adds a
    candidate, which the exact test then refuses.
    """

    __slots__ = ("bits", "buckets", "firsts", "marks", "mask", "nexts")

    def __init__(self) -> None:
        self.bits = _LOW_BITS
        self.mask = (1 << _LOW_BITS) - 1
        #: The newest entry of each bucket; entries count from 1, so 0 ends a chain.
        self.buckets = array("i", bytes(4 << _LOW_BITS))
        #: Bits 12 to 27 of each entry's key (its bucket holds the lower ones).
        self.marks = array("H", [0])
        self.nexts = array("i", [0])
        #: The first entry of each group, ascending.
        self.firsts = array("i")

    def add_group(self, keys: Iterable[int]) -> None:
        """The keys of the next group (groups are added in order)."""
        marks, nexts, buckets, mask = self.marks, self.nexts, self.buckets, self.mask
        self.firsts.append(len(marks))
        for short in keys:
            bucket = short & mask
            nexts.append(buckets[bucket])
            buckets[bucket] = len(marks)
            marks.append(short >> _LOW_BITS & 0xFFFF)
        if len(marks) > 3 * (mask + 1) and self.bits < _LOW_BITS + _MARK_BITS:
            self._grow()

    def _grow(self) -> None:
        """Twice the buckets: each entry moves by the next bit of its key, from its mark."""
        bit = self.bits
        old = self.buckets
        self.bits += 1
        self.mask = (1 << self.bits) - 1
        buckets = self.buckets = array("i", bytes(4 << self.bits))
        marks, nexts = self.marks, self.nexts
        shift = bit - _LOW_BITS
        for bucket in range(len(old)):
            entry = old[bucket]
            while entry:
                following = nexts[entry]
                moved = bucket | (marks[entry] >> shift & 1) << bit
                nexts[entry] = buckets[moved]
                buckets[moved] = entry
                entry = following

    def group(self, entry: int) -> int:
        return bisect_right(self.firsts, entry) - 1

    def find(self, short: int) -> list[int]:
        """Every group added under ``short`` (a key cut by :func:`_short`)."""
        marks, nexts = self.marks, self.nexts
        mark = short >> _LOW_BITS & 0xFFFF
        found = []
        entry = self.buckets[short & self.mask]
        while entry:
            if marks[entry] == mark:
                found.append(self.group(entry))
            entry = nexts[entry]
        return found


def _append(values: array[int], value: int, wider: str = "i") -> array[int]:
    """``values`` with ``value`` appended, as integers of the ``wider`` type once it does not
    fit: a head's numbers take 2 bytes each while they can, which matters for 50,000 heads
    (docs/benchmarks.md)."""
    try:
        values.append(value)
    except OverflowError:
        values = array(wider, values)
        values.append(value)
    return values


class PartsGrouper:
    """:func:`group_signatures`, one signature at a time: through the parts for thresholds
    of at least 0.8, below that by counting shared grams from the first signature on
    (:class:`_DenseIndex`, exact at any threshold; the prefix filter needs every signature
    first, to rank the grams).

    ``common`` grams are left out of the parts (see :func:`common_grams`); which ones only
    changes the speed, never a group. Group heads are kept as UTF-8 text in one buffer and
    their grams rebuilt when they are a candidate: sets for every head would cost kilobytes
    each, and candidates are few.
    """

    __slots__ = (
        "_common_bit",
        "_counts_by_size",
        "_dense",
        "_head_cmasks",
        "_head_counts",
        "_head_empty",
        "_head_sizes",
        "_head_uncommon",
        "_index",
        "_many_empty",
        "_wide_empty",
        "common",
        "heads",
        "long_heads",
        "threshold",
    )

    def __init__(self, threshold: float, common: frozenset[str] = frozenset()) -> None:
        self.threshold = threshold
        self.common = common
        self.heads = TextList()
        #: Heads kept elsewhere (an empty text in ``heads``): their signature's pieces.
        self.long_heads: dict[int, Callable[[], Iterable[str]]] = {}
        #: A bit for each common gram, and each head's size, common grams (as those bits)
        #: and count of other grams: an exact bound that spares most exact tests.
        self._common_bit = {gram: bit for bit, gram in enumerate(sorted(common))}
        self._head_sizes = array("H")  # widened by _append past 65,535 (a huge error)
        self._head_cmasks: list[int] = []
        self._head_uncommon = array("H")
        #: A head's part count and empty parts (it is indexed under that count only).
        self._head_counts = array("H")
        #: Empty parts of heads of at most 64 parts (most), and of the others.
        self._head_empty = array("H")  # widened past 16 parts
        self._wide_empty: dict[int, int] = {}
        #: Heads with too many empty parts to index their pairs, by part count.
        self._many_empty: dict[int, list[int]] = {}
        # key -> the groups whose head has that part; a collision only adds a candidate
        self._index = _KeyIndex()
        self._counts_by_size: dict[int, tuple[int, ...]] = {}
        #: Set once the parts make too many heads candidates (see :class:`_DenseIndex`),
        #: or at once below the parts' threshold (a part would mostly be empty).
        self._dense: _DenseIndex | None = None
        if threshold < _PARTITION_MIN_THRESHOLD:
            self._dense = _DenseIndex(self)

    def release_index(self) -> None:
        """Drop the index (no more :meth:`add`): the heads are all a summary still needs."""
        self._index = _KeyIndex()
        self._counts_by_size.clear()
        self._many_empty.clear()
        self._head_cmasks.clear()
        self._dense = None

    def _agreeing_empty_parts(self, count: int, parts: _Parts, sure: set[int]) -> None:
        """Add to ``sure`` the heads of ``count`` parts that may share two empty parts with
        ``parts`` (a superset: the exact test decides)."""
        for group in self._many_empty.get(count, ()):
            empty = self._head_empty[group] if count <= 64 else self._wide_empty[group]
            if (empty & parts.empty).bit_count() >= _AGREEING_PARTS:
                sure.add(group)
        if parts.empty.bit_count() > _EMPTY_PARTS_LISTED:
            # Pairs of empty parts would be many keys (quadratic in the empty parts): every
            # head of this part count is a candidate instead.
            counts = self._head_counts
            sure.update(g for g in range(len(counts)) if counts[g] == count)
            return
        for key in parts.empty_pair_keys(count):
            sure.update(self._index.find(key))

    def _agreeing(
        self, hits: dict[int, int], parts_by_count: dict[int, _Parts], sure: set[int]
    ) -> None:
        """Add to ``sure`` the heads of ``hits`` (agreeing non-empty parts) that agree on
        two parts, counting one empty part both have."""
        for group, n in hits.items():
            if n >= _AGREEING_PARTS:
                sure.add(group)
                continue
            count = self._head_counts[group]
            parts = parts_by_count.get(count)
            if parts is None:
                # Two keys met (an entry tells only 28 bits of a key apart): a head of a
                # part count no size within reach uses cannot be similar enough.
                continue
            empty = self._head_empty[group] if count <= 64 else self._wide_empty[group]
            if empty & parts.empty:  # one non-empty and one empty part
                sure.add(group)

    def _common_mask(self, grams: frozenset[str]) -> int:
        bits = self._common_bit
        return _mask((bits[gram] for gram in grams if gram in bits), len(bits) // 8 + 1)

    def _first_similar(self, sure: set[int], grams: frozenset[str], cmask: int) -> int | None:
        """The first of ``sure`` whose head is similar enough to ``grams``, or None.

        An exact bound first: the common grams both share (bit masks) plus the fewer
        uncommon grams of the two. A candidate even that many shared grams cannot make
        similar enough is refused without rebuilding its head's grams.
        """
        threshold = self.threshold
        size = len(grams)
        uncommon = size - cmask.bit_count()
        sizes, cmasks, uncommons = self._head_sizes, self._head_cmasks, self._head_uncommon
        for group in sorted(sure):
            other = sizes[group]
            bound = (cmask & cmasks[group]).bit_count() + min(uncommon, uncommons[group])
            # I / (|A| + |B| - I) grows with I, and so does its correctly rounded value.
            if bound / (other + size - bound) < threshold:
                continue
            head = self.head_grams(group)
            shared = len(head & grams)
            # The same integers and the one division of calculate_similarity.
            if shared / (len(head) + size - shared) >= threshold:
                return group
        return None

    def head_grams(self, group: int) -> frozenset[str]:
        pieces = self.long_heads.get(group)
        if pieces is None:
            return trigrams(self.heads[group])
        return trigrams_of_pieces(pieces())

    def add(
        self,
        sig: str,
        grams: frozenset[str] | None = None,
        pieces: Callable[[], Iterable[str]] | None = None,
    ) -> int:
        """The group ``sig`` joins: the first whose head is similar enough, or a new one.

        A huge signature comes as ``pieces`` (a new iterator of its pieces at each call) and
        its ``grams`` instead (``sig`` is then empty): the grouper never holds it whole.
        """
        threshold = self.threshold
        if grams is None:
            grams = trigrams(sig)
        size = len(grams)
        common = self.common
        if self._dense is not None:
            return self._add_dense(sig, grams, pieces)
        hashes = [hash(gram) for gram in grams if gram not in common]
        probe_counts = self._counts_by_size.get(size)
        if probe_counts is None:
            probe_counts = self._counts_by_size[size] = _probe_counts(size, threshold)
        parts_by_count = {count: _Parts(hashes, count) for count in probe_counts}
        # group -> agreeing non-empty parts; groups agreeing on two empty parts are sure
        hits: dict[int, int] = {}
        sure: set[int] = set()
        index = self._index
        # The index's arrays: the bucket array is replaced when it grows, which only an
        # added head makes it do.
        buckets, marks, nexts, mask = index.buckets, index.marks, index.nexts, index.mask
        for count, parts in parts_by_count.items():
            for key in parts.keys:
                # index.find(key), inlined: this loop runs some ten times per signature.
                mark = key >> _LOW_BITS & 0xFFFF
                entry = buckets[key & mask]
                while entry:
                    if marks[entry] == mark:
                        group = index.group(entry)
                        hits[group] = hits.get(group, 0) + 1
                    entry = nexts[entry]
            if parts.empty & (parts.empty - 1):  # two or more empty parts
                self._agreeing_empty_parts(count, parts, sure)
        self._agreeing(hits, parts_by_count, sure)
        if len(sure) > _DENSE_AFTER:
            self._dense = _DenseIndex(self)
            return self._add_dense(sig, grams, pieces)
        cmask = self._common_mask(grams)
        found = self._first_similar(sure, grams, cmask)
        if found is not None:
            return found
        group = self._new_head(sig, size, cmask, pieces)
        own = _part_count(size, threshold)
        parts = parts_by_count.get(own) or _Parts(hashes, own)
        self._head_counts = _append(self._head_counts, own)
        self._head_empty = _append(self._head_empty, parts.empty if own <= 64 else 0, "Q")
        if own > 64:
            self._wide_empty[group] = parts.empty
        if parts.empty.bit_count() > _EMPTY_PARTS_LISTED:
            # Not indexed by its pairs of empty parts (too many): a signature with two empty
            # parts checks such heads' empty parts directly (``add``).
            self._many_empty.setdefault(own, []).append(group)
            index.add_group(parts.keys)
        else:
            index.add_group([*parts.keys, *parts.empty_pair_keys(own)])
        return group

    def _new_head(
        self, sig: str, size: int, cmask: int, pieces: Callable[[], Iterable[str]] | None
    ) -> int:
        group = len(self.heads)
        self.heads.append(sig)
        if pieces is not None:
            self.long_heads[group] = pieces
        self._head_sizes = _append(self._head_sizes, size)
        self._head_cmasks.append(cmask)
        self._head_uncommon = _append(self._head_uncommon, size - cmask.bit_count())
        return group

    def _add_dense(
        self, sig: str, grams: frozenset[str], pieces: Callable[[], Iterable[str]] | None
    ) -> int:
        dense = self._dense
        assert dense is not None
        cmask = dense.common_mask(grams)
        found = dense.first_similar(grams, cmask)
        if found is not None:
            return found
        group = self._new_head(sig, len(grams), cmask, pieces)
        dense.add(group, grams, cmask)
        return group


#: Candidates from the parts past which the grouper switches to :class:`_DenseIndex`.
_DENSE_AFTER = 64
#: A gram held by fewer heads than this never becomes common in :class:`_DenseIndex`.
_PROMOTE_MIN = 64


class _DenseIndex:
    """The exact similarity of a signature with every head, from counts instead of tests.

    Common grams are counted with the heads' bit masks, the others through an index from
    each uncommon gram to the heads that hold it: both are exact, so a head's shared grams
    ``I`` are known without rebuilding its grams. Heads are also filed by (size, common
    grams): for all heads of one (size, common) pair, ``I`` is at most the fewer common
    grams of the two plus the uncommon grams shared, so a whole pair is refused at once
    unless some head shares enough uncommon grams, which the index's counts tell. Used for
    errors whose common grams make most heads candidates for the parts (a long shared text
    with distinct tails just below the threshold): an exact test per pair was quadratic.
    Costs an index entry per uncommon gram of each head (docs/ledger.md).

    Which grams are common is decided again as heads come: a gram held by more than
    :data:`_PROMOTE_MIN` heads and more than one head in 32 becomes common, its heads' masks
    get its bit and its entries leave the index (a bit for every head then costs no more
    than the index's 4-byte entries). The sample of the first errors may have missed a text
    that later errors all share (the first 2,048 were about something else): counting its
    grams through the index cost every head per gram, quadratic again.
    """

    __slots__ = ("by_size", "common", "common_bit", "grouper", "postings")

    def __init__(self, grouper: PartsGrouper) -> None:
        self.grouper = grouper
        self.postings: dict[str, array[int]] = {}
        #: The grouper's common grams and those found common since (their bits follow).
        self.common = set(grouper.common)
        self.common_bit = dict(grouper._common_bit)
        #: size -> common grams -> heads
        self.by_size: dict[int, dict[int, list[int]]] = {}
        for group in range(len(grouper.heads)):
            self.add(group, grouper.head_grams(group))

    def common_mask(self, grams: frozenset[str]) -> int:
        bits = self.common_bit
        return _mask((bits[gram] for gram in grams if gram in bits), len(bits) // 8 + 1)

    def add(self, group: int, grams: frozenset[str], cmask: int | None = None) -> None:
        """File head ``group``; ``cmask``: its mask over the grams common now, if known."""
        g = self.grouper
        postings, common = self.postings, self.common
        if cmask is None:
            # A head filed after a promotion (the index is built from the heads in order)
            # lacks the promoted grams' bits.
            cmask = g._head_cmasks[group] = self.common_mask(grams)
            g._head_uncommon[group] = len(grams) - cmask.bit_count()
        crowded = max(_PROMOTE_MIN, len(g._head_sizes) // 32)
        promote = []
        for gram in grams:
            if gram not in common:
                found = postings.get(gram)
                if found is None:
                    found = postings[gram] = array("i")
                found.append(group)
                if len(found) > crowded:
                    promote.append(gram)
        size = g._head_sizes[group]
        csize = size - g._head_uncommon[group]
        self.by_size.setdefault(size, {}).setdefault(csize, []).append(group)
        if promote:
            self._promote(promote)

    def _promote(self, grams: list[str]) -> None:
        """Make ``grams`` common: a bit in the masks of the heads holding each, out of the
        index, and the heads filed again by their common count."""
        g = self.grouper
        cmasks, uncommons = g._head_cmasks, g._head_uncommon
        for gram in grams:
            bit = 1 << len(self.common_bit)
            self.common_bit[gram] = len(self.common_bit)
            self.common.add(gram)
            for group in self.postings.pop(gram):
                cmasks[group] |= bit
                uncommons[group] -= 1
        self.by_size.clear()
        sizes = g._head_sizes
        for group in range(len(sizes)):
            size = sizes[group]
            self.by_size.setdefault(size, {}).setdefault(size - uncommons[group], []).append(group)

    def first_similar(self, grams: frozenset[str], cmask: int) -> int | None:
        g = self.grouper
        threshold, common, postings = g.threshold, self.common, self.postings
        size = len(grams)
        csize = cmask.bit_count()
        uncommon = size - csize
        shared = Counter(
            itertools.chain.from_iterable(
                postings.get(gram, ()) for gram in grams if gram not in common
            )
        )
        most = max(shared.values(), default=0)
        candidates: list[int] = []
        # (size, common) of a head -> the fewest uncommon grams it must share to pass.
        needs: dict[tuple[int, int], int] = {}
        smallest = math.ceil(size * threshold / _LOOSE)
        largest = math.floor(size / threshold * _LOOSE)
        in_reach: Iterable[int] = range(smallest, largest + 1)
        if largest - smallest >= len(self.by_size):
            # A low threshold reaches many sizes: the sizes the heads have are fewer.
            in_reach = [other for other in self.by_size if smallest <= other <= largest]
        for other in in_reach:
            by_common = self.by_size.get(other)
            if by_common is None:
                continue
            for ccount, heads in by_common.items():
                both = min(csize, ccount)
                cap = min(uncommon, other - ccount)
                need = _fewest(both, cap, size + other, threshold)
                if need is None:
                    continue  # even every uncommon gram shared is not enough
                if need <= 0:
                    candidates.extend(heads)
                elif need <= most:
                    needs[other, ccount] = need
        if needs:
            low = min(needs.values())
            sizes, uncommons = g._head_sizes, g._head_uncommon
            for group, count in shared.items():
                if count >= low:
                    other = sizes[group]
                    need = needs.get((other, other - uncommons[group]))
                    if need is not None and count >= need:
                        candidates.append(group)
        cmasks = g._head_cmasks
        sizes = g._head_sizes
        for group in sorted(candidates):
            common_shared = (cmask & cmasks[group]).bit_count() + shared.get(group, 0)
            # The same integers and the one division of calculate_similarity.
            if common_shared / (sizes[group] + size - common_shared) >= threshold:
                return group
        return None


def _fewest(both: int, cap: int, total: int, threshold: float) -> int | None:
    """The fewest shared uncommon grams ``s`` (at most ``cap``) for which ``I = both + s``
    passes ``I / (total - I) >= threshold``, or None. The test is the exact one on the
    bound, and ``I / (total - I)`` never falls as ``I`` grows (nor does its rounded value),
    so every ``s`` below the answer fails."""
    if (both + cap) / (total - both - cap) < threshold:
        return None
    # An estimate from the real-valued bound, then exact steps on the float test.
    s = max(0, min(cap, math.ceil(threshold * total / (1 + threshold)) - both))
    while s > 0 and (both + s - 1) / (total - both - s + 1) >= threshold:
        s -= 1
    while (both + s) / (total - both - s) < threshold:
        s += 1
    return s


def _group_by_parts(signatures: Sequence[str], threshold: float) -> list[int]:
    distinct = list(dict.fromkeys(signatures))
    grouper = PartsGrouper(threshold, common_grams(distinct))
    # A signature's group never changes once found: later groups have higher indices.
    group_of = {sig: grouper.add(sig) for sig in distinct}
    return [group_of[sig] for sig in signatures]
