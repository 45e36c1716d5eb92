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

No group that passes the exact test is ever missed.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

from ._text import trigrams

__all__ = ["group_signatures"]

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
    return needed


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
_SAMPLE = 2048


def _common_grams(distinct: Sequence[str]) -> frozenset[str]:
    if len(distinct) < 64:
        return frozenset()
    step = max(1, len(distinct) // _SAMPLE)
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


def _short(key: int) -> int:
    """A key cut to 32 bits, never 0 (the empty slot's mark)."""
    return (key & 0xFFFFFFFF) - (1 << 31) or 1


class _KeyIndex:
    """Part keys to groups: a multimap in two flat arrays (open addressing, linear probing).

    A dict of Python ints cost ~100 bytes a key (50 MB for 50,000 heads of ~10 keys); this
    costs 8 bytes a slot. Keys are cut to 32 bits, so two keys may meet: that only ever adds
    a candidate, which the exact test then refuses.
    """

    __slots__ = ("groups", "keys", "mask", "size")

    def __init__(self) -> None:
        self.mask = (1 << 12) - 1
        self.keys = array("i", bytes(4 << 12))  # 0: an empty slot
        self.groups = array("i", bytes(4 << 12))
        self.size = 0

    def add(self, short: int, group: int) -> None:
        if (self.size + 1) * 10 > (self.mask + 1) * 7:  # at most 70% full
            self._grow()
        keys, mask = self.keys, self.mask
        slot = short & mask
        while keys[slot]:
            slot = (slot + 1) & mask
        keys[slot] = short
        self.groups[slot] = group
        self.size += 1

    def _grow(self) -> None:
        old_keys, old_groups = self.keys, self.groups
        slots = (self.mask + 1) * 2
        mask = self.mask = slots - 1
        keys = self.keys = array("i", bytes(4 * slots))
        groups = self.groups = array("i", bytes(4 * slots))
        for short, group in zip(old_keys, old_groups, strict=True):
            if short:
                slot = short & mask
                while keys[slot]:
                    slot = (slot + 1) & mask
                keys[slot] = short
                groups[slot] = group

    def find(self, short: int) -> Sequence[int]:
        """Every group added under ``short`` (a key cut by :func:`_short`)."""
        keys, mask = self.keys, self.mask
        slot = short & mask
        found_key = keys[slot]
        if not found_key:
            return ()  # most keys are met nowhere
        found = []
        while found_key:
            if found_key == short:
                found.append(self.groups[slot])
            slot = (slot + 1) & mask
            found_key = keys[slot]
        return found


def _group_by_parts(signatures: Sequence[str], threshold: float) -> list[int]:
    distinct = list(dict.fromkeys(signatures))
    common = _common_grams(distinct)
    # Heads are kept as text and their grams rebuilt when they are a candidate: sets for every
    # head would cost kilobytes each, and candidates are few.
    heads: list[str] = []
    #: A head's part count and empty parts (it is indexed under that count only); mostly
    #: small ints, which Python shares.
    head_counts: list[int] = []
    head_empty: list[int] = []
    # key -> the groups whose head has that part; a collision only adds a candidate
    index = _KeyIndex()
    group_of: dict[str, int] = {}
    counts_by_size: dict[int, tuple[int, ...]] = {}
    for sig in distinct:
        grams = trigrams(sig)
        size = len(grams)
        hashes = [hash(gram) for gram in grams if gram not in common]
        probe_counts = counts_by_size.get(size)
        if probe_counts is None:
            probe_counts = counts_by_size[size] = _probe_counts(size, threshold)
        parts_by_count = {count: _Parts(hashes, count) for count in probe_counts}
        # group -> agreeing non-empty parts; groups agreeing on two empty parts are sure
        hits: dict[int, int] = {}
        sure: set[int] = set()
        # The index's arrays: replaced when it grows, which only an added head makes it do.
        slots, groups, mask = index.keys, index.groups, index.mask
        for count, parts in parts_by_count.items():
            for key in parts.keys:
                # index.find(key), inlined: this loop runs some ten times per signature.
                slot = key & mask
                found = slots[slot]
                while found:
                    if found == key:
                        group = groups[slot]
                        hits[group] = hits.get(group, 0) + 1
                    slot = (slot + 1) & mask
                    found = slots[slot]
            if parts.empty & (parts.empty - 1):  # two or more empty parts
                for key in parts.empty_pair_keys(count):
                    sure.update(index.find(key))
        for group, n in hits.items():
            if n >= _AGREEING_PARTS:
                sure.add(group)
            else:
                count, empty = head_counts[group], head_empty[group]
                if empty & parts_by_count[count].empty:  # one non-empty and one empty part
                    sure.add(group)
        for group in sorted(sure):
            head = trigrams(heads[group])
            shared = len(head & grams)
            # The same integers and the one division of calculate_similarity.
            if shared / (len(head) + size - shared) >= threshold:
                group_of[sig] = group
                break
        else:
            group = len(heads)
            heads.append(sig)
            group_of[sig] = group
            own = _part_count(size, threshold)
            parts = parts_by_count.get(own) or _Parts(hashes, own)
            head_counts.append(own)
            head_empty.append(parts.empty)
            for key in parts.keys:
                index.add(key, group)
            for key in parts.empty_pair_keys(own):
                index.add(key, group)
    return [group_of[sig] for sig in signatures]
