"""Exact first-match grouping of error signatures, without comparing every pair.

The reference puts each signature into the first group (in creation order) whose signature is
at least ``threshold`` similar, which is quadratic. This finds the very same group using
prefix filtering, a standard exact filter for set-similarity joins:

If Jaccard(A, B) >= t then |A & B| >= ceil(t * max(|A|, |B|)). With every trigram set sorted
by one global order (rarest first), two sets that overlap in at least ``k`` elements share an
element within their first ``len - k + 1`` elements. So each group indexes only its prefix,
a new signature probes only its prefix, and the exact similarity test runs on the few groups
found, lowest index first. A positional bound (PPJoin) drops most of those before the
set intersection. No group that passes the exact test is ever missed.
"""

from __future__ import annotations

import math
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


def group_signatures(signatures: Sequence[str], threshold: float) -> list[int]:
    """The index of the group each signature joins; groups are numbered by creation.

    ``threshold`` must be in (0, 1] (validated by the caller). Equal to the reference's scan:
    a signature joins the first group whose head has ``calculate_similarity >= threshold``,
    and otherwise starts a new group.
    """
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
