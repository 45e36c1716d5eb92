"""Caps, concurrency slots, the breaker on live loops, and child loops."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from loopactors.errors import AdmissionRefused
from loopactors.runtime import open_runtime

from . import round_fns
from .conftest import memory_config


async def test_the_live_loop_cap_refuses_with_a_clear_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(max_live_loops=3)) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:2| {i}", worker="scripted:latency=1"))
            for i in range(3)
        ]
        with pytest.raises(AdmissionRefused, match=r"3 live loops \(max_live_loops = 3\)"):
            await rt.start("|loop:2| one too many")
        await handles[0].wait()
        # A finished loop frees its place.
        extra = rt.handle(await rt.start("|loop:1| now there is room"))
        assert (await extra.wait()).phase == "complete"


async def test_concurrency_slots_bound_rounds_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    round_fns.RUNNING.update(now=0, peak=0)
    async with open_runtime(memory_config(max_concurrent_rounds=2)) as rt:
        handles = [
            rt.handle(
                await rt.start(
                    f"|loop:2| {i}", worker="python:tests.runtime.round_fns:slow_counted"
                )
            )
            for i in range(5)
        ]
        for handle in handles:
            assert (await handle.wait()).phase == "complete"
    assert round_fns.RUNNING["peak"] == 2


async def test_per_kind_slots(autojump_clock: trio.testing.MockClock) -> None:
    round_fns.RUNNING.update(now=0, peak=0)
    config = memory_config(max_concurrent_per_kind={"python": 1})
    async with open_runtime(config) as rt:
        handles = [
            rt.handle(
                await rt.start(
                    f"|loop:2| {i}", worker="python:tests.runtime.round_fns:slow_counted"
                )
            )
            for i in range(3)
        ]
        for handle in handles:
            await handle.wait()
    assert round_fns.RUNNING["peak"] == 1


async def test_the_no_progress_fuse_escalates(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        # Outputs differ only by round number and time of day: no progress.
        handle = rt.handle(
            await rt.start("|loop:10| spin", worker="python:tests.runtime.round_fns:constant")
        )
        final = await handle.wait()
    assert final.phase == "escalated"
    assert final.trigger == "no_progress"
    assert final.completed_rounds == 3  # A, A (stale 1), A (stale 2): the 4th never starts


async def test_consecutive_failures_escalate() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:10| always fails", worker="scripted:fail_every=1"))
        final = await handle.wait()
        assert final.phase == "escalated"
        assert final.trigger == "consecutive_failures"
        assert [r.status for r in await handle.history()] == ["failed"] * 3


async def test_failed_rounds_are_recorded_and_the_loop_goes_on() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:4| flaky", worker="scripted:fail_every=2"))
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "complete"
    assert [r.status for r in history] == ["completed", "failed", "completed", "failed"]
    assert history[1].error is not None


async def test_the_token_budget_escalates() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| expensive",
                worker="python:tests.runtime.round_fns:spend",
                max_tokens=1000,
            )
        )
        final = await handle.wait()
    assert final.phase == "escalated"
    assert final.trigger == "token_budget"
    assert final.tokens_used == 1200


async def test_the_round_timeout_is_recorded(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start("|loop:1| too slow", worker="scripted:latency=50", round_timeout=5)
        )
        await handle.wait()
        [record] = await handle.history()
    assert record.status == "timed_out"
    assert record.error is not None
    assert "timeout of 5" in record.error


async def test_the_wall_clock_budget_escalates() -> None:
    # A wall-clock budget survives restarts, so it is measured in real time, not trio's.
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| slow and steady", worker="scripted:latency=0.1", max_seconds=0.25
            )
        )
        final = await handle.wait()
    assert final.phase == "escalated"
    assert final.trigger == "deadline"


async def test_child_loops_live_in_their_parents_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        parent = rt.handle(
            await rt.start(
                "|loop:3| parent task", worker="python:tests.runtime.round_fns:spawn_child"
            )
        )
        while parent.loop_id not in round_fns.CHILDREN:
            await trio.sleep(0.1)
        [started] = round_fns.CHILDREN[parent.loop_id]
        child = rt.handle(started)
        child_state = await child.get()
        assert child_state.spec.parent_id == parent.loop_id
        await parent.stop()
        assert (await child.wait()).phase == "cancelled"  # stopped with its parent


async def test_a_child_repeating_an_ancestors_task_is_refused() -> None:
    async with open_runtime(memory_config()) as rt:
        parent = rt.handle(
            await rt.start(
                "|loop:1| same thing", worker="python:tests.runtime.round_fns:spawn_same_task"
            )
        )
        await parent.wait()
        [record] = await parent.history()
    assert record.output.startswith("refused: identical task already looping in ancestor chain")


async def test_the_tree_cap() -> None:
    async with open_runtime(memory_config(max_tree_loops=1)) as rt:
        parent = rt.handle(
            await rt.start("|loop:1| lonely", worker="python:tests.runtime.round_fns:spawn_other")
        )
        await parent.wait()
        [record] = await parent.history()
    assert "loop tree budget exhausted" in record.output


async def test_the_watchdog_ends_a_round_that_never_reports(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The worker ignores cancellation, so neither the timeout nor a cancel ends it: only the
    # loop's own watchdog does (rolebox's W18: a lost completion must not hang the loop).
    async with open_runtime(memory_config(shutdown_grace=1.0)) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:1| deaf", worker="python:tests.runtime.round_fns:deaf", round_timeout=10
            )
        )
        final = await handle.wait()
        [record] = await handle.history()
        assert (final.phase, final.trigger) == ("escalated", "no_completed_round")
        assert record.status == "timed_out"
        assert record.error is not None
        assert "no result reached the loop" in record.error
        assert trio.current_time() == pytest.approx(40.0, abs=1.0)  # timeout 10 + grace 30


async def test_the_watchdog_times_a_later_round_from_its_own_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A runner keeps one watchdog timer pending rather than one per round: the timer armed
    # in round 1 goes off at 40 s, while round 3 (started at 10 s) is due only at 50 s.
    async with open_runtime(memory_config(shutdown_grace=1.0)) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:3,fresh| deaf later",
                worker="python:tests.runtime.round_fns:deaf_from_round_3",
                round_timeout=10,
            )
        )
        final = await handle.wait()
        records = await handle.history()
        assert final.phase == "complete"
        assert [r.status for r in records] == ["completed", "completed", "timed_out"]
        assert trio.current_time() == pytest.approx(50.0, abs=1.0)  # 2 x 5 s, then 10 + 30


async def test_one_runtime_per_state_directory(tmp_path: Path) -> None:
    from loopactors.errors import StoreError

    from .conftest import sqlite_config

    async with open_runtime(sqlite_config(tmp_path)):
        with pytest.raises(StoreError, match="in use by another loopactors runtime"):
            async with open_runtime(sqlite_config(tmp_path)):
                pytest.fail("a second runtime must not open")
    async with open_runtime(sqlite_config(tmp_path)):
        pass  # released when the first one closed


async def test_a_worker_can_end_the_loop_when_its_objective_is_met() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                '|loop iterations=10 objective="all tests pass"| fix the tests',
                worker="scripted:done_at=3",
            )
        )
        final = await handle.wait()
        assert final.phase == "complete"
        assert final.completed_rounds == 3
        assert final.reason == "objective met in round 3"
        assert final.spec.objective == "all tests pass"


async def test_a_command_worker_sees_the_objective_and_can_report_it_met(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        "cat >/dev/null\n"
        'echo "working on: $LOOPACTORS_OBJECTIVE"\n'
        """echo '{"loopactors": {"tokens": 3, "done": true}}'\n"""
    )
    script.chmod(0o755)
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start('|loop iterations=5 objective="ship it"| go', worker=f"command:{script}")
        )
        final = await handle.wait()
        [record] = await handle.history()
    assert final.phase == "complete"
    assert final.reason == "objective met in round 1"
    assert record.output == "working on: ship it\n"
    assert record.tokens == 3
