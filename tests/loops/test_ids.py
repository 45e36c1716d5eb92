"""Loop ids given by a person: the whole id or a unique prefix."""

from __future__ import annotations

import pytest

from loopactors.errors import AmbiguousLoopId, LoopNotFound
from loopactors.loops import MATCHES_SHOWN, resolve_loop_id


def test_a_unique_prefix_or_the_whole_id_names_the_loop() -> None:
    assert resolve_loop_id("6b0c", ["6b0c11aa"]) == "6b0c11aa"
    assert resolve_loop_id("6b0c11aa", ["6b0c11aa"]) == "6b0c11aa"
    # The whole id wins over the longer ids it is a prefix of.
    assert resolve_loop_id("6b", ["6b", "6b0c", "6b0d"]) == "6b"


def test_no_match_and_an_empty_prefix_are_not_found() -> None:
    with pytest.raises(LoopNotFound, match="no loop 'zz' in the store"):
        resolve_loop_id("zz", [])
    with pytest.raises(LoopNotFound, match="no loop '' in the store"):
        resolve_loop_id("", ["a", "b"])


def test_an_ambiguous_prefix_lists_the_matches() -> None:
    with pytest.raises(AmbiguousLoopId) as info:
        resolve_loop_id("6b", ["6b0c", "6b0d"], where="/srv/state")
    assert str(info.value) == (
        "loop id prefix '6b' matches several loops in /srv/state: 6b0c, 6b0d; give more of the id"
    )
    assert isinstance(info.value, LoopNotFound)  # callers that catch not-found still do
    many = [f"6b{i:02}" for i in range(MATCHES_SHOWN + 1)]
    with pytest.raises(AmbiguousLoopId, match=r"6b09 and more; give more"):
        resolve_loop_id("6b", many)
