"""The event bus (per-loop and all-loop subscriptions, bounded queues, gaps, publishing that
never blocks) and the exact progress note of each loop event."""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

from loopactors.loops import CheckRecord
from loopactors.loops._events import (
    AnyEvent,
    LoopEvent,
    LoopFinished,
    LoopInterrupted,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopStarted,
    RoundFinished,
    RoundStarted,
    RoundSummary,
    event_decoder,
)
from loopactors.runtime._events import EventBus, Gap, Subscription
from tests.hang import HANG


def _event(loop_id: str, n: int) -> LoopPaused:
    return LoopPaused(loop_id=loop_id, at=float(n), round=n)


def _drain(sub: Subscription) -> list[AnyEvent | Gap]:
    """Everything queued right now, without waiting."""
    got: list[AnyEvent | Gap] = []
    while True:
        try:
            got.append(sub.receive_nowait())
        except trio.WouldBlock:
            return got


# --- routing ----------------------------------------------------------------------------------


async def test_per_loop_and_all_loop_subscriptions_get_the_right_events() -> None:
    bus = EventBus()
    only_a = bus.subscribe("A")
    only_b = bus.subscribe("B")
    also_a = bus.subscribe("A")
    everything = bus.subscribe()
    assert bus.subscribers == 4

    a1, b1, c1, a2 = _event("A", 1), _event("B", 2), _event("C", 3), _event("A", 4)
    for event in (a1, b1, c1, a2):
        bus.publish(event)

    assert _drain(only_a) == [a1, a2]
    assert _drain(also_a) == [a1, a2]
    assert _drain(only_b) == [b1]
    assert _drain(everything) == [a1, b1, c1, a2]


async def test_receive_and_async_iteration_yield_events_in_order() -> None:
    bus = EventBus()
    sub = bus.subscribe("A")
    events = [_event("A", n) for n in range(3)]
    for event in events:
        bus.publish(event)

    assert await sub.receive() == events[0]
    rest: list[AnyEvent | Gap] = []
    async for item in sub:
        rest.append(item)
        if len(rest) == 2:
            break
    assert rest == events[1:]


async def test_a_reader_waiting_on_an_empty_queue_is_woken_by_publish() -> None:
    bus = EventBus()
    sub = bus.subscribe("A")
    got: list[AnyEvent | Gap] = []

    async def reader() -> None:
        got.append(await sub.receive())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        bus.publish(_event("A", 1))
    assert got == [_event("A", 1)]


async def test_publishing_with_no_subscribers_is_fine() -> None:
    bus = EventBus()
    bus.publish(_event("A", 1))
    assert bus.subscribers == 0


# --- bounded queues and gaps ------------------------------------------------------------------


async def test_a_subscriber_that_falls_behind_gets_a_gap_then_later_events() -> None:
    bus = EventBus()
    sub = bus.subscribe("A", queue_size=2)
    events = [_event("A", n) for n in range(10)]
    for event in events:
        bus.publish(event)

    assert await sub.receive() == events[0]
    assert await sub.receive() == events[1]
    assert sub.delivered == 2
    assert sub.missed == 8
    # Everything queued has been read: the count comes at once, not with the next event.
    assert await sub.receive() == Gap(missed=8, loop_id="A")
    assert sub.missed == 0
    assert _drain(sub) == []

    later = [_event("A", n) for n in range(10, 13)]
    bus.publish(later[0])
    assert await sub.receive() == later[0]

    bus.publish(later[1])
    bus.publish(later[2])
    assert _drain(sub) == later[1:]


async def test_an_all_loop_subscriber_gap_has_no_loop_id() -> None:
    bus = EventBus()
    sub = bus.subscribe(queue_size=1)
    for n in range(4):
        bus.publish(_event(f"L{n}", n))
    assert _drain(sub) == [_event("L0", 0), Gap(missed=3, loop_id=None)]
    bus.publish(_event("L9", 9))
    assert _drain(sub) == [_event("L9", 9)]


async def test_a_slow_subscriber_does_not_affect_a_fast_one() -> None:
    bus = EventBus()
    slow = bus.subscribe("A", queue_size=1)
    fast = bus.subscribe("A", queue_size=100)
    events = [_event("A", n) for n in range(20)]
    for event in events:
        bus.publish(event)
    assert _drain(fast) == events
    assert _drain(slow) == [events[0], Gap(missed=19, loop_id="A")]


async def test_a_subscriber_that_frees_one_slot_gets_the_gap_and_the_next_event() -> None:
    bus = EventBus()
    sub = bus.subscribe("A", queue_size=2)
    for n in range(5):
        bus.publish(_event("A", n))
    assert await sub.receive() == _event("A", 0)  # one slot free, event 1 still queued

    bus.publish(_event("A", 5))
    assert _drain(sub) == [_event("A", 1), Gap(missed=3, loop_id="A"), _event("A", 5)]
    bus.publish(_event("A", 6))
    assert _drain(sub) == [_event("A", 6)]


async def test_a_queue_of_one_that_keeps_up_after_falling_behind_gets_events_again() -> None:
    # Regression: the gap used to take the only slot and the event was dropped (and counted in
    # a new gap) every time, so such a subscriber never received another event.
    bus = EventBus()
    sub = bus.subscribe("A", queue_size=1)
    for n in range(5):
        bus.publish(_event("A", n))
    assert await sub.receive() == _event("A", 0)

    bus.publish(_event("A", 5))
    assert _drain(sub) == [Gap(missed=4, loop_id="A"), _event("A", 5)]
    for n in range(6, 10):
        bus.publish(_event("A", n))
        assert _drain(sub) == [_event("A", n)]
    assert sub.missed == 0


async def test_a_full_queue_counts_events_instead_of_queueing_them() -> None:
    bus = EventBus()
    sub = bus.subscribe("A", queue_size=3)
    for n in range(10):
        bus.publish(_event("A", n))
    assert sub.missed == 7
    assert await sub.receive() == _event("A", 0)  # one place free
    for n in range(10, 20):
        bus.publish(_event("A", n))
    # The pending gap takes the free place with the event after it; the rest are counted.
    assert _drain(sub) == [
        _event("A", 1),
        _event("A", 2),
        Gap(missed=7, loop_id="A"),
        _event("A", 10),
        Gap(missed=9, loop_id="A"),
    ]
    assert sub.missed == 0


async def test_the_bus_queue_size_is_the_default_for_subscribers() -> None:
    bus = EventBus(queue_size=3)
    sub = bus.subscribe("A")
    for n in range(5):
        bus.publish(_event("A", n))
    assert sub.missed == 2
    assert _drain(sub) == [*(_event("A", n) for n in range(3)), Gap(missed=2, loop_id="A")]


async def test_publish_never_blocks_even_when_every_queue_is_full() -> None:
    bus = EventBus()
    subs = [bus.subscribe("A", queue_size=1), bus.subscribe(queue_size=2)]
    with trio.testing.assert_no_checkpoints():
        for n in range(1000):
            bus.publish(_event("A", n))
    assert [s.missed for s in subs] == [999, 998]


@pytest.mark.parametrize("size", [0, -1])
async def test_a_queue_size_below_one_is_rejected(size: int) -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match="queue_size must be >= 1"):
        bus.subscribe("A", queue_size=size)
    with pytest.raises(ValueError, match="queue_size must be >= 1"):
        EventBus(queue_size=size).subscribe()
    assert bus.subscribers == 0


# --- closing ----------------------------------------------------------------------------------


async def test_closing_a_subscription_removes_it() -> None:
    bus = EventBus()
    per_loop = bus.subscribe("A")
    other = bus.subscribe("A")
    everything = bus.subscribe()
    assert bus.subscribers == 3

    per_loop.close()
    assert bus.subscribers == 2
    everything.close()
    assert bus.subscribers == 1

    bus.publish(_event("A", 1))  # does not touch the closed ones
    assert _drain(other) == [_event("A", 1)]
    other.close()
    assert bus.subscribers == 0
    bus.publish(_event("A", 2))


async def test_closing_twice_is_harmless() -> None:
    bus = EventBus()
    sub = bus.subscribe("A")
    sub.close()
    sub.close()
    assert bus.subscribers == 0


async def test_a_subscription_is_a_context_manager() -> None:
    bus = EventBus()
    with bus.subscribe("A") as sub:
        assert bus.subscribers == 1
        bus.publish(_event("A", 1))
        assert await sub.receive() == _event("A", 1)
    assert bus.subscribers == 0
    with pytest.raises(trio.ClosedResourceError):
        await sub.receive()


# --- event notes ------------------------------------------------------------------------------


def test_loop_started_note() -> None:
    event = LoopStarted(loop_id="L", at=0.0, rounds=5, mode="inherit", worker="scripted")
    assert event.note() == "[loop-progress loop started: 5 rounds, inherit mode]"
    one = msgspec.structs.replace(event, rounds=1)
    assert one.note() == "[loop-progress loop started: 1 round, inherit mode]"


def test_round_started_note() -> None:
    event = RoundStarted(loop_id="L", at=0.0, round=2, rounds=5, seed_source="previous_output")
    assert event.note() == "[loop-progress round 2/5 started]"


def test_round_finished_note() -> None:
    event = RoundFinished(loop_id="L", at=0.0, round=2, rounds=5, status="completed", duration=1.26)
    assert event.note() == "[loop-progress round 2/5 completed, duration=1.3s]"


def test_round_finished_note_with_an_error_and_unknown_duration() -> None:
    event = RoundFinished(
        loop_id="L", at=0.0, round=3, rounds=5, status="failed", duration=None, error="boom"
    )
    assert event.note() == "[loop-progress round 3/5 failed, duration=?s] boom"


@pytest.mark.parametrize(
    ("exit_code", "error", "says"),
    [
        (0, None, "check passed"),
        (1, None, "check failed (exit 1)"),
        (None, "timed out after 600 s", "check failed (timed out after 600 s)"),
    ],
)
def test_round_finished_note_says_the_check_without_a_bare_none(
    exit_code: int | None, error: str | None, says: str
) -> None:
    check = CheckRecord(command="pytest -q", exit_code=exit_code, duration=1.0, error=error)
    event = RoundFinished(
        loop_id="L", at=0.0, round=2, rounds=5, status="completed", duration=1.26, check=check
    )
    assert event.note() == f"[loop-progress round 2/5 completed, duration=1.3s] {says}"
    assert "None" not in event.note()


def test_loop_paused_note() -> None:
    assert LoopPaused(loop_id="L", at=0.0, round=3).note() == (
        "[loop-progress loop paused before round 3]"
    )


def test_loop_resumed_note() -> None:
    assert LoopResumed(loop_id="L", at=0.0, round=3).note() == (
        "[loop-progress loop resumed at round 3]"
    )


def test_loop_recovered_note() -> None:
    event = LoopRecovered(loop_id="L", at=0.0, phase="awaiting_worker", round=4)
    assert event.note() == (
        "[loop-progress loop recovered after restart in awaiting_worker at round 4]"
    )


def test_loop_interrupted_note() -> None:
    event = LoopInterrupted(loop_id="L", at=0.0, round=2, rounds=5, reason="worker is gone")
    assert event.note() == (
        "[loop-progress loop interrupted by restart at round 2/5: worker is gone]"
    )


SUMMARY = (
    RoundSummary(round=1, status="completed", duration=0.5),
    RoundSummary(round=2, status="failed", duration=None),
)


@pytest.mark.parametrize(
    ("phase", "reason", "trigger", "head"),
    [
        ("complete", None, None, "[loop-progress loop complete]"),
        ("cancelled", None, None, "[loop-progress loop cancelled]"),
        (
            "escalated",
            "2 rounds in a row failed or timed out",
            "consecutive_failures",
            "[loop-progress escalated: consecutive_failures: "
            "2 rounds in a row failed or timed out]",
        ),
        ("interrupted", "cannot resume", None, "[loop-progress loop interrupted: cannot resume]"),
        ("error", "worker crashed", None, "[loop-progress error: worker crashed]"),
    ],
)
def test_loop_finished_note(phase: str, reason: str | None, trigger: str | None, head: str) -> None:
    event = msgspec.convert(
        {
            "loop_id": "L",
            "at": 0.0,
            "phase": phase,
            "rounds": 2,
            "completed_rounds": 1,
            "summary": [msgspec.to_builtins(s) for s in SUMMARY],
            "reason": reason,
            "trigger": trigger,
        },
        LoopFinished,
    )
    assert event.note() == f"{head}\nRounds: r1(0.5s,completed), r2(?s,failed)"


def test_the_base_event_note_names_the_class() -> None:
    assert LoopEvent(loop_id="L", at=0.0).note() == "[loop-progress LoopEvent]"


ALL_EVENTS: list[AnyEvent] = [
    LoopStarted(loop_id="L", at=1.0, rounds=5, mode="fresh", worker="w", parent_id="P"),
    RoundStarted(loop_id="L", at=1.0, round=1, rounds=5, seed_source="task"),
    RoundFinished(loop_id="L", at=1.0, round=1, rounds=5, status="timed_out", duration=2.0),
    LoopPaused(loop_id="L", at=1.0, round=2),
    LoopResumed(loop_id="L", at=1.0, round=2),
    LoopRecovered(loop_id="L", at=1.0, phase="paused", round=2),
    LoopInterrupted(loop_id="L", at=1.0, round=2, rounds=5, reason="r"),
    LoopFinished(
        loop_id="L", at=1.0, phase="complete", rounds=2, completed_rounds=2, summary=SUMMARY
    ),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_events_round_trip_through_the_tagged_decoder(event: AnyEvent) -> None:
    data = msgspec.json.encode(event)
    assert msgspec.json.decode(data)["type"] == type(event).__struct_config__.tag
    decoded = event_decoder.decode(data)
    assert decoded == event
    assert type(decoded) is type(event)


async def test_changes_hold_each_changed_loop_once_oldest_first() -> None:
    bus = EventBus(queue_size=1)
    changes = bus.changes()
    one = bus.changes("b")
    for n in range(1000):  # far more events than any queue: nothing is dropped
        bus.publish(_event("b" if n % 2 else "a", n))
    bus.publish(_event("c", 1))
    assert len(changes) == 3
    assert changes.missed == 0
    assert changes.take(2) == ["a", "b"]  # by their first change since the last take
    assert changes.take() == ["c"]
    assert changes.take() == []
    assert one.take() == ["b"]
    assert bus.subscribers == 2
    changes.close()
    one.close()
    assert bus.subscribers == 0
    bus.publish(_event("a", 1))  # closed: no longer offered
    assert changes.take() == []


async def test_changes_wait_wakes_on_a_change_of_an_event_kind_that_counts() -> None:
    bus = EventBus()
    with bus.changes(kinds=(LoopPaused,)) as changes:
        bus.publish(LoopResumed(loop_id="x", at=1.0, round=1))  # not a kind that counts
        with trio.move_on_after(0.1) as scope:
            await changes.wait()
        assert scope.cancelled_caught
        async with trio.open_nursery() as nursery:
            nursery.start_soon(changes.wait)
            await trio.testing.wait_all_tasks_blocked()
            bus.publish(_event("x", 1))
        assert changes.take() == ["x"]
        changes.mark(["y", "z"])  # put back (e.g. their states could not be read)
        with trio.fail_after(HANG):
            await changes.wait()
        assert changes.take() == ["y", "z"]
