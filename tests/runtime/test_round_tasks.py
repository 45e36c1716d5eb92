"""The Dispatcher runs rounds in tasks it reuses: a round never sees an earlier round's
context variables, a stop still cancels a reused task's round, and idle tasks end with the
runtime."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from loopactors.runtime import Runtime, _dispatcher, open_runtime

from . import round_fns
from .conftest import memory_config

WORKER = "python:tests.runtime.round_fns:set_context_var"


def idle_round_tasks(rt: Runtime) -> int:
    ref = rt.node.whereis("dispatcher")
    assert ref is not None
    actor = ref._cell.actor
    assert isinstance(actor, _dispatcher.Dispatcher)
    return len(actor._idle)


async def test_rounds_reuse_tasks_in_fresh_contexts() -> None:
    round_fns.SEEN_VAR.clear()
    round_fns.ROUND_TASKS.clear()
    async with open_runtime(memory_config()) as rt:
        handles = [await rt.start(f"|loop:4,fresh| job {i}", worker=WORKER) for i in range(3)]
        states = [await h.wait() for h in handles]
    assert [s.phase for s in states] == ["complete"] * 3
    assert len(round_fns.SEEN_VAR) == 12
    # Every round set the variable; none saw a value set by another round.
    assert round_fns.SEEN_VAR == [None] * 12
    # Fewer tasks than rounds: rounds after the first ones ran in tasks already made.
    assert len(set(round_fns.ROUND_TASKS)) < 12


async def test_a_stop_cancels_a_round_running_in_a_reused_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        first = await rt.start("|loop:1| warm up", worker="scripted")
        assert (await first.wait()).phase == "complete"
        assert idle_round_tasks(rt) == 1  # the warm-up round's task waits for the next round
        handle = await rt.start("|loop:3| slow", worker="scripted:latency=60")
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 0  # it took the slow round
        with trio.fail_after(1):
            state = await handle.stop()
        assert state.phase == "cancelled"
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 1  # and is back, ready for the next


async def test_idle_round_tasks_are_capped(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(_dispatcher, "MAX_IDLE_ROUND_TASKS", 2)
    async with open_runtime(memory_config()) as rt:
        handles = [
            await rt.start(f"|loop:1| burst {i}", worker="scripted:latency=1") for i in range(5)
        ]
        for h in handles:
            await h.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert idle_round_tasks(rt) == 2
    # Leaving the block ended the idle tasks with the Dispatcher (the nursery closed).
