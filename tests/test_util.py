"""Helpers shared by the package: the garbage collector's pause during a recovery."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from loopactors._util import gc_paused


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector, it is as it was afterwards."""
    enabled = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
        else:
            gc.disable()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_a_pause_turns_the_collector_off_and_back_on(collector: None) -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_end_with_the_last(collector: None) -> None:
    gc.enable()
    first, second = gc_paused(), gc_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second one still runs
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector: None) -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_what_the_pause_made_moves_to_the_oldest_generation_and_is_still_collected(
    collector: None,
) -> None:
    gc.collect()
    gc.enable()
    with gc_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        assert gc.get_count()[0] > 0
    assert gc.get_count()[0] == 0  # the youngest generation holds none of it
    assert gc.get_freeze_count() == 0
    first = weakref.ref(a)
    del a, b
    gc.collect()
    assert first() is None


def test_objects_the_process_froze_stay_frozen(collector: None) -> None:
    gc.enable()
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    with gc_paused():
        Node()
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()
