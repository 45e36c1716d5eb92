"""The Dispatcher runs rounds in tasks it reuses: a round never sees an earlier round's
context variables, a stop still cancels a reused task's round, and idle tasks end with the
runtime. A round whose worker answers on the spot, or only waits before it answers, runs in no
task at all."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from loopactors.runtime import Runtime, _dispatcher, open_runtime
from loopactors.runtime._messages import CancelRound, WhereIsRound

from . import round_fns
from .conftest import memory_config

WORKER = "python:tests.runtime.round_fns:set_context_var"
ONE_SECOND = "python:tests.runtime.round_fns:one_second"
ONE_MINUTE = "python:tests.runtime.round_fns:one_minute"


def dispatcher_of(rt: Runtime) -> _dispatcher.Dispatcher:
    ref = rt.node.whereis("dispatcher")
    assert ref is not None
    actor = ref._cell.actor
    assert isinstance(actor, _dispatcher.Dispatcher)
    return actor


def idle_round_tasks(rt: Runtime) -> int:
    return len(dispatcher_of(rt)._idle)


async def test_rounds_reuse_tasks_in_fresh_contexts() -> None:
    round_fns.SEEN_VAR.clear()
    round_fns.ROUND_TASKS.clear()
    round_fns.ROUND_TASK_NAMES.clear()
    async with open_runtime(memory_config()) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:4,fresh| job {i}", worker=WORKER)) for i in range(3)
        ]
        states = [await h.wait() for h in handles]
    assert [s.phase for s in states] == ["complete"] * 3
    assert len(round_fns.SEEN_VAR) == 12
    # Every round set the variable; none saw a value set by another round.
    assert round_fns.SEEN_VAR == [None] * 12
    # Fewer tasks than rounds: rounds after the first ones ran in tasks already made.
    assert len(set(round_fns.ROUND_TASKS)) < 12
    # Each named after the round it runs, reused or not (task dumps stay readable).
    ids = [h.loop_id for h in handles]
    assert sorted(round_fns.ROUND_TASK_NAMES) == sorted(
        f"round {loop_id}:{n}" for loop_id in ids for n in range(1, 5)
    )


async def test_a_stop_cancels_a_round_running_in_a_reused_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        # Not a scripted worker: its round would run in no task (below).
        first = rt.handle(await rt.start("|loop:1| warm up", worker=ONE_SECOND))
        assert (await first.wait()).phase == "complete"
        assert idle_round_tasks(rt) == 1  # the warm-up round's task waits for the next round
        handle = rt.handle(await rt.start("|loop:3| slow", worker=ONE_MINUTE))
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 0  # it took the slow round
        with trio.fail_after(1):
            state = await handle.stop()
        assert state.phase == "cancelled"
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 1  # and is back, ready for the next


async def test_idle_round_tasks_are_capped_and_end_with_the_runtime(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(_dispatcher, "MAX_IDLE_ROUND_TASKS", 2)
    with trio.fail_after(60):  # idle tasks that outlived the Dispatcher would hang the exit
        async with open_runtime(memory_config()) as rt:
            handles = [
                rt.handle(await rt.start(f"|loop:1| burst {i}", worker=ONE_SECOND))
                for i in range(5)
            ]
            for h in handles:
                await h.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert idle_round_tasks(rt) == 2
            tasks = list(dispatcher_of(rt)._idle)
    assert all(task.coro.cr_frame is None for task in tasks)  # ended: their coroutines closed


async def test_an_idle_round_task_keeps_nothing_of_its_last_round() -> None:
    big_task = "x" * 100_000
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start(f"|loop:1| {big_task}", worker=WORKER))
        assert (await handle.wait()).phase == "complete"
        await trio.testing.wait_all_tasks_blocked()
        dispatcher = dispatcher_of(rt)
        [task] = dispatcher._idle
        parked = task.coro.cr_frame
        assert parked is not None
        assert parked.f_locals["job"] is None
        assert "dispatch" not in parked.f_locals
        assert "scope" not in parked.f_locals
        # Not the last round's context (where the worker set a variable): the Dispatcher's.
        assert task.context is dispatcher._context
        assert task.context.get(round_fns.ROUND_VAR) is None


async def test_a_cancelled_key_is_remembered_for_a_while_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(round_timeout=5.0)) as rt:
        dispatcher = rt.node.ref("dispatcher")
        # A stop that overtook its round's Dispatch: the round is not run when it arrives.
        await dispatcher.cast(CancelRound("early:1"))
        swallowed = rt.handle(
            await rt.start("|loop:1| overtaken", loop_id="early", worker="scripted")
        )
        await swallowed.wait()
        [record] = await rt.history("early")
        assert record.status == "timed_out"  # the runner's watchdog found it lost
        # A key cancelled longer ago than CANCELLED_TTL is forgotten: a loop that uses the
        # id again (after the first was pruned) runs its rounds.
        await dispatcher.cast(CancelRound("again:1"))
        await trio.sleep(_dispatcher.CANCELLED_TTL + 1)
        handle = rt.handle(await rt.start("|loop:1| later", loop_id="again", worker="scripted"))
        await handle.wait()
        [record] = await rt.history("again")
        assert record.status == "completed"


async def test_a_round_answered_on_the_spot_runs_in_no_task() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:3,fresh| at once", worker="scripted:fail_every=2"))
        final = await handle.wait()
        history = await handle.history()
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 0  # no round task was ever made
        assert dispatcher_of(rt).rounds_started == 3
    assert final.phase == "complete"
    assert [r.status for r in history] == ["completed", "failed", "completed"]
    assert history[1].error == "scripted failure: round 2 (fail_every=2)"
    assert history[0].output == "round 1 of 3: birch"


async def test_a_round_answered_on_the_spot_waits_for_a_concurrency_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(max_concurrent_rounds=1)) as rt:
        slow = rt.handle(await rt.start("|loop:1| holds the slot", worker="scripted:latency=5"))
        await trio.testing.wait_all_tasks_blocked()
        fast = rt.handle(await rt.start("|loop:1| at once", worker="scripted"))
        await trio.testing.wait_all_tasks_blocked()
        assert (await fast.get()).phase == "awaiting_worker"  # queued behind the slow one
        assert (await fast.wait()).phase == "complete"
        assert (await slow.get()).phase == "complete"  # the slot came free first
        [record] = await fast.history()
    assert record.status == "completed"


def round_task_names() -> list[str]:
    """The names of the tasks that run a round now (named ``round KEY``)."""
    names: list[str] = []
    root = trio.lowlevel.current_root_task()
    assert root is not None
    todo = [root]
    while todo:
        task = todo.pop()
        names.append(task.name)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return [name for name in names if name.startswith("round ")]


async def test_a_round_that_only_waits_runs_in_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:2,fresh| wait {i}", worker="scripted:latency=30"))
            for i in range(3)
        ]
        await trio.testing.wait_all_tasks_blocked()
        dispatcher = dispatcher_of(rt)
        assert len(dispatcher._waits) == 3  # three rounds in flight, as heap entries
        assert round_task_names() == []
        started = trio.current_time()
        finals = [await h.wait() for h in handles]
        elapsed = trio.current_time() - started
        history = await handles[0].history()
        assert idle_round_tasks(rt) == 0  # no round task was ever made
        assert dispatcher.rounds_started == 6
        assert dispatcher._waits == []
    assert [s.phase for s in finals] == ["complete"] * 3
    assert 60 <= elapsed < 61  # two rounds of 30 s each, one after the other
    assert [(r.status, r.output) for r in history] == [
        ("completed", "round 1 of 2: birch"),
        ("completed", "round 2 of 2: cedar"),
    ]


@pytest.mark.parametrize("worker", ["scripted:latency=60", ONE_MINUTE])
async def test_a_round_that_only_waits_times_out_as_a_round_task_does(
    worker: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime(memory_config(round_timeout=5.0)) as rt:
        started = trio.current_time()
        handle = rt.handle(await rt.start("|loop:1| too slow", worker=worker))
        final = await handle.wait()
        elapsed = trio.current_time() - started
        [record] = await handle.history()
    assert final.phase == "escalated"  # its one round failed
    assert record.status == "timed_out"
    assert record.error == "round took longer than its timeout of 5.0 s"
    assert 5 <= elapsed < 6


async def test_a_waiting_round_is_running_for_the_watchdog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        state = await rt.start("|loop:1| waits", worker="scripted:latency=100")
        await trio.sleep(10)
        where = await rt.node.ref("dispatcher").call(WhereIsRound(f"{state.loop_id}:1"))
    assert not where.queued
    assert where.running_for is not None
    assert 10 <= where.running_for < 11


async def test_a_stop_ends_a_waiting_round_and_frees_its_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(max_concurrent_rounds=1)) as rt:
        slow = rt.handle(await rt.start("|loop:3| slow", worker="scripted:latency=600"))
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):
            stopped = await slow.stop()
        [record] = await slow.history()
        # The one slot is free again: the next round takes it at once.
        started = trio.current_time()
        fast = rt.handle(await rt.start("|loop:1| next", worker="scripted:latency=1"))
        assert (await fast.wait()).phase == "complete"
        assert trio.current_time() - started < 2
        dispatcher = dispatcher_of(rt)
        assert dispatcher._running == {}
    assert stopped.phase == "cancelled"
    assert record.status == "cancelled"


async def test_ended_waiting_rounds_leave_the_heap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:1| wait {i}", worker="scripted:latency=600"))
            for i in range(6)
        ]
        await trio.testing.wait_all_tasks_blocked()
        dispatcher = dispatcher_of(rt)
        for handle in handles[:3]:
            await handle.stop()
        # Stopped rounds stay in the heap until they are due, or until they are more than
        # half of it: then it is rebuilt without them.
        assert (len(dispatcher._waits), dispatcher._dropped) == (6, 3)
        await handles[3].stop()
        assert (len(dispatcher._waits), dispatcher._dropped) == (2, 0)
        await handles[4].stop()
        assert (len(dispatcher._waits), dispatcher._dropped) == (2, 1)
        assert (await handles[5].wait()).phase == "complete"
        assert (len(dispatcher._waits), dispatcher._dropped) == (0, 0)
