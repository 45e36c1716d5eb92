"""The Timers actor: messages delivered at their deadline, in order; a receiver's timers
cancelled at once when it ends, so the heap holds live loops' timers only (rolebox's W21)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.actors import Actor, open_node
from loopactors.loops._events import LoopRecovered
from loopactors.runtime import open_runtime
from loopactors.runtime._messages import CancelTimers, GetTimersStatistics, Schedule
from loopactors.runtime._timers import Timers

from .conftest import memory_config


class Inbox(Actor[Any]):
    def __init__(self, seen: list[tuple[float, Any]]) -> None:
        self.seen = seen

    async def handle(self, message: Any) -> None:
        self.seen.append((trio.current_time(), message))


async def test_timers_go_off_at_their_deadlines_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[float, Any]] = []
    async with open_node() as node:
        timers = await node.spawn(Timers, name="timers")
        await node.spawn(lambda: Inbox(seen), name="inbox")
        start = trio.current_time()
        for delay, label in [(3.0, "c"), (1.0, "a"), (2.0, "b"), (1.0, "a2")]:
            await timers.cast(Schedule(start + delay, "inbox", label))
        await trio.sleep(5)
        assert [m for _, m in seen] == ["a", "a2", "b", "c"]
        assert [round(t - start) for t, _ in seen] == [1, 1, 2, 3]
        assert await timers.call(GetTimersStatistics()) == {"pending": 0, "heap": 0}


async def test_cancelled_timers_never_go_off_and_leave_the_heap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[float, Any]] = []
    async with open_node() as node:
        timers = await node.spawn(Timers, name="timers")
        for name in ("keep", *(f"gone-{i}" for i in range(10))):
            await node.spawn(lambda: Inbox(seen), name=name)
        start = trio.current_time()
        for i in range(10):
            await timers.cast(Schedule(start + 100 + i, f"gone-{i}", f"never {i}"))
        await timers.cast(Schedule(start + 50, "keep", "kept"))
        assert await timers.call(GetTimersStatistics()) == {"pending": 11, "heap": 11}
        for i in range(4):
            await timers.cast(CancelTimers(f"gone-{i}"))
        # Fewer than half cancelled: marked, still in the heap, no longer pending.
        assert await timers.call(GetTimersStatistics()) == {"pending": 7, "heap": 11}
        for i in range(4, 10):
            await timers.cast(CancelTimers(f"gone-{i}"))
            stats = await timers.call(GetTimersStatistics())
            # Past half, the heap is rebuilt without them: they never outnumber the pending.
            assert stats["heap"] - stats["pending"] <= stats["pending"]
        assert stats["pending"] == 1
        await timers.cast(CancelTimers("nobody"))  # nothing pending for it: nothing happens
        await trio.sleep(200)
        # The receivers of the cancelled timers were alive all along: only "kept" arrived.
        assert [m for _, m in seen] == ["kept"]
        assert await timers.call(GetTimersStatistics()) == {"pending": 0, "heap": 0}


async def test_a_cancelled_timer_left_in_the_heap_is_skipped_and_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[float, Any]] = []
    async with open_node() as node:
        timers = await node.spawn(Timers, name="timers")
        await node.spawn(lambda: Inbox(seen), name="a")
        await node.spawn(lambda: Inbox(seen), name="b")
        start = trio.current_time()
        await timers.cast(Schedule(start + 1, "a", "one"))
        await timers.cast(Schedule(start + 2, "a", "two"))
        await timers.cast(Schedule(start + 0.5, "b", "cancelled, due first"))
        await timers.cast(Schedule(start + 1000, "b", "cancelled, due last"))
        await timers.cast(CancelTimers("b"))
        # Two cancelled of four: not more than half, so they stay in the heap, marked.
        assert await timers.call(GetTimersStatistics()) == {"pending": 2, "heap": 4}
        await trio.sleep(3)
        # The one due first reached the top of the heap and was skipped, although "b" lives.
        assert [m for _, m in seen] == ["one", "two"]
        # The pending ones went off; the other cancelled one does not wait 1,000 s in the heap.
        assert await timers.call(GetTimersStatistics()) == {"pending": 0, "heap": 0}


async def test_an_ended_loop_leaves_no_timer_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = memory_config(round_timeout=600.0, inter_round_delay=30.0)
    async with open_runtime(config) as rt:
        timers = rt.node.ref("timers")
        done = rt.handle(await rt.start("|loop:2| finishes", worker="scripted"))
        stopped = rt.handle(
            await rt.start("|loop:3| stopped mid-round", worker="scripted:latency=100")
        )
        await trio.sleep(1)
        # Each loop has its watchdog pending (and the first its inter-round delay).
        assert (await timers.call(GetTimersStatistics()))["pending"] >= 2
        await stopped.stop()
        assert (await done.wait()).phase == "complete"
        await trio.testing.wait_all_tasks_blocked()
        # The watchdogs were due in 630 s; they are gone now, not when they go off.
        assert (await timers.call(GetTimersStatistics()))["pending"] == 0


async def test_a_full_timers_mailbox_holds_runners_back_instead_of_crashing_them(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(Timers, "mailbox_size", 1)
    async with open_runtime(memory_config(inter_round_delay=1.0)) as rt:
        with rt.subscribe() as events:
            handles = [
                rt.handle(await rt.start(f"|loop:3| burst {i}", worker="scripted:latency=2"))
                for i in range(30)
            ]
            states = [await h.wait() for h in handles]
            await trio.testing.wait_all_tasks_blocked()
            # Every ended runner's cancellation got through the one-slot mailbox too.
            timers = await rt.node.ref("timers").call(GetTimersStatistics())
            seen = []
            with contextlib.suppress(trio.WouldBlock):
                while True:
                    seen.append(events.receive_nowait())
    assert [s.phase for s in states] == ["complete"] * 30
    # No runner crashed and came back: a recovery would have said so.
    assert not [e for e in seen if isinstance(e, LoopRecovered)]
    assert timers == {"pending": 0, "heap": 0}
