"""A crash of any runtime actor is survived: supervision restarts it, recovery resumes the
loops, and every round is still recorded exactly once."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from loopactors.actors import SupervisorRef
from loopactors.runtime import open_runtime
from loopactors.runtime._wiring import runner_name
from loopactors.testing import inject_crash

from .conftest import memory_config

ACTORS = [
    "store",
    "breaker",
    "context_builder",
    "dispatcher",
    "timers",
    "loops",
    "coordinator",
    "runner",
]


@pytest.mark.parametrize("victim", ACTORS)
async def test_a_crash_of_each_runtime_actor_is_survived(
    victim: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime(memory_config(inter_round_delay=0.5)) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:5,fresh| loop {i}", worker="scripted:latency=1"))
            for i in range(3)
        ]
        await trio.sleep(2.2)  # mid-way: about round 2 of each
        name = runner_name(handles[0].loop_id) if victim == "runner" else victim
        inject_crash(rt.node, name)
        await trio.testing.wait_all_tasks_blocked()
        for handle in handles:
            final = await handle.wait()
            assert final.phase == "complete", final
            rounds = await handle.history()
            assert [r.round for r in rounds] == [1, 2, 3, 4, 5]
            assert all(r.status == "completed" for r in rounds)
        root = await rt.node.supervisor.statistics()
        loops = rt.node.whereis("loops")
        assert loops is not None
        restarts = root.restarts + (await SupervisorRef(loops).statistics()).restarts
        assert restarts >= 1


async def test_the_coordinator_restarting_adopts_live_runners(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:4| keep going", worker="scripted:latency=1"))
        await trio.sleep(1.5)
        runner = rt.node.whereis(runner_name(handle.loop_id))
        inject_crash(rt.node, "coordinator")
        await trio.testing.wait_all_tasks_blocked()
        assert rt.node.whereis(runner_name(handle.loop_id)) == runner  # not restarted
        assert (await handle.wait()).phase == "complete"
        # Commands reach it through the new coordinator.
        again = rt.handle(await rt.start("|loop:2| after", worker="scripted:latency=1"))
        await trio.sleep(0.5)
        assert (await again.stop()).phase == "cancelled"


async def test_a_loop_whose_runner_keeps_crashing_ends_in_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from loopactors.runtime._runner import MAX_RUNNER_RESTARTS

    async with open_runtime(memory_config()) as rt:
        victim = rt.handle(await rt.start("|loop:5| poisoned", worker="scripted:latency=100"))
        bystander = rt.handle(await rt.start("|loop:2| healthy", worker="scripted:latency=1"))
        for _ in range(MAX_RUNNER_RESTARTS + 1):
            await trio.sleep(0.5)
            inject_crash(rt.node, runner_name(victim.loop_id))
            await trio.testing.wait_all_tasks_blocked()
        final = await victim.wait()
        assert final.phase == "error"
        assert final.reason == f"its runner crashed {MAX_RUNNER_RESTARTS + 1} times within 60 s"
        [record] = await victim.history()
        assert record.status == "failed"  # the round in flight is closed, not left running
        assert (await bystander.wait()).phase == "complete"


async def test_a_runner_crashing_because_a_service_is_down_does_not_give_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Found by `loopactors stress --crash-rate`: while the breaker (or store, dispatcher,
    timers) restarted, busy runners crashed on its absence, restarted at once, crashed again,
    and within milliseconds ended their loops in error. Such crashes are not the loop's
    fault: they no longer count towards MAX_RUNNER_RESTARTS."""
    from loopactors.errors import ActorNotRunning
    from loopactors.runtime._runner import MAX_RUNNER_RESTARTS

    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:3| keep going", worker="scripted:latency=100"))
        for _ in range(MAX_RUNNER_RESTARTS + 3):
            await trio.sleep(0.5)
            inject_crash(
                rt.node,
                runner_name(handle.loop_id),
                ActorNotRunning("no live actor is registered as 'breaker'"),
            )
            await trio.testing.wait_all_tasks_blocked()
        final = await handle.wait()
        assert final.phase == "complete", final
        assert [r.round for r in await handle.history()] == [1, 2, 3]


async def test_a_recovery_snapshot_that_went_stale_does_not_run_a_round_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Found by `loopactors stress --crash-rate`: a restarted Coordinator read the live loops,
    and while it started their runners one by one, one loop's runner finished it and exited;
    its runner, started from the stale snapshot, ran the last round a second time (the event
    log said "round 4 completed" twice). A recovered runner now reloads its loop first."""
    from loopactors.loops import RoundFinished

    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:2| short", worker="scripted:latency=1"))
        await trio.sleep(0.5)
        stale = await handle.get()
        assert stale.phase == "awaiting_worker"
        assert (await handle.wait()).phase == "complete"
        # What the restarted Coordinator does for a loop it read as live and finds no runner
        # for, with the snapshot it read before the loop finished.
        coordinator = rt.node.whereis("coordinator")
        loops = rt.node.whereis("loops")
        assert coordinator is not None
        assert loops is not None
        spec = coordinator._cell.actor._runner_spec(stale, recovered=True)  # type: ignore[union-attr]
        await SupervisorRef(loops).start_child(spec)
        await trio.sleep(10)
        assert (await handle.get()).phase == "complete"
        events = await rt.stored_events(handle.loop_id)
        assert [e.round for e in events if isinstance(e, RoundFinished)] == [1, 2]
