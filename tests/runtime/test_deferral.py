"""Usage limits: a deferred round is not a failure, waits for the reset (across a pause or a
restart), and a stop ends the wait at once. Plus the workspace no-progress rule."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from loopactors.loops import (
    LoopSpec,
    LoopState,
    RoundDeferred,
    check_before_round,
    defer_round,
    deferred_wait,
    stale_rounds_after,
)
from loopactors.runtime import open_runtime
from tests.hang import HANG

from . import defer_fns
from .conftest import memory_config, sqlite_config

LIMITED_ONCE = "python:tests.runtime.defer_fns:limited_once"
ALWAYS = "python:tests.runtime.defer_fns:always_limited"


@pytest.fixture(autouse=True)
def _calls() -> None:
    defer_fns.CALLS.clear()
    defer_fns.WAIT["seconds"] = 0.4


def waiting_state() -> LoopState:
    return LoopState(loop_id="l", spec=LoopSpec(task="t", rounds=3), phase="awaiting_worker")


def test_defer_round_keeps_the_round_and_counts_no_failure() -> None:
    state = waiting_state()
    after, record, event = defer_round(
        state, until=1000.0, reason="limit", now=900.0, tokens=5, cost_usd=0.5
    )
    assert (after.phase, after.round, after.consecutive_failures) == ("dispatching", 1, 0)
    assert (after.deferred_until, after.defer_reason, after.deferrals) == (1000.0, "limit", 1)
    assert (after.tokens_used, after.cost_usd) == (5, 0.5)
    assert (record.status, record.round, record.error) == ("deferred", 1, "limit")
    assert (event.until, event.reason, event.round) == (1000.0, "limit", 1)
    assert deferred_wait(after, 950.0) == 50.0
    assert deferred_wait(after, 1000.0) is None


def test_a_deferral_without_a_time_backs_off_doubling_to_an_hour() -> None:
    state = waiting_state()
    waits = []
    for _ in range(8):
        state, _, event = defer_round(state, until=None, reason="429", now=0.0)
        waits.append(event.until)
        state = state.moved("awaiting_worker")
    assert waits == [60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]


def test_workspace_progress_decides_no_progress_for_agent_kinds() -> None:
    state = msgspec_replace(waiting_state(), stale_rounds=1)
    assert stale_rounds_after(state, progress=True, same_output=True) == 0
    assert stale_rounds_after(state, progress=False, same_output=False) == 2
    assert stale_rounds_after(state, progress=None, same_output=True) == 2
    assert stale_rounds_after(state, progress=None, same_output=False) == 0
    stale = msgspec_replace(state, stale_rounds=2, progress_measure="workspace")
    verdict = check_before_round(stale, 0.0)
    assert verdict is not None
    assert "workspace did not change" in verdict.reason


def msgspec_replace(state: LoopState, **changes: object) -> LoopState:
    import msgspec

    return msgspec.structs.replace(state, **changes)


async def test_a_deferred_round_runs_again_at_the_reset_and_is_no_failure() -> None:
    seen: list[object] = []
    async with open_runtime(memory_config(), observer=seen.append) as rt:
        handle = rt.handle(await rt.start("|loop:2| work", worker=LIMITED_ONCE))
        final = await handle.wait()
        history = await handle.history()
    deferred = [e for e in seen if isinstance(e, RoundDeferred)]
    assert len(deferred) == 1
    calls = defer_fns.CALLS
    assert [r for _, r, _ in calls] == [1, 1, 2]
    assert calls[1][2] >= deferred[0].until  # not before the reset
    assert final.phase == "complete"
    assert final.consecutive_failures == 0
    assert final.tokens_used == 7 + 10 + 10
    assert final.cost_usd == pytest.approx(0.01)
    assert final.deferred_until is None
    assert [(r.round, r.status) for r in history] == [(1, "completed"), (2, "completed")]


async def test_stop_during_the_wait_acts_at_once() -> None:
    async with open_runtime(memory_config()) as rt:
        # Subscribed before the start: the round may be deferred before start() returns.
        with rt.subscribe() as events, trio.fail_after(HANG):
            handle = rt.handle(await rt.start("|loop:2| work", worker=ALWAYS))
            async for event in events:
                if isinstance(event, RoundDeferred) and event.loop_id == handle.loop_id:
                    break
        state = await handle.get()
        assert state.deferred_until is not None
        assert state.deferred_until > time.time() + 3000
        with trio.fail_after(HANG):
            final = await handle.stop()
    assert final.phase == "cancelled"
    assert len(defer_fns.CALLS) == 1


async def test_pause_during_the_wait_then_resume_still_waits_for_the_reset() -> None:
    defer_fns.WAIT["seconds"] = 0.6
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:1| work", worker=LIMITED_ONCE))
        await handle.wait_phase("dispatching")
        while (await handle.get()).deferred_until is None:
            await trio.sleep(0.01)
        paused = await handle.pause()
        assert paused.phase == "paused"
        resumed = await handle.resume()
        until = resumed.deferred_until
        assert until is not None
        final = await handle.wait()
    assert final.phase == "complete"
    assert defer_fns.CALLS[-1][2] >= until


async def test_the_wait_survives_a_restart(tmp_path: Path) -> None:
    defer_fns.WAIT["seconds"] = 1.0
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        handle = rt.handle(await rt.start("|loop:1| work", worker=LIMITED_ONCE))
        while (await handle.get()).deferred_until is None:
            await trio.sleep(0.01)
        loop_id = handle.loop_id
    # The runtime is gone (as after a crash, the wait is only in the store).
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        state = await rt.get(loop_id)
        until = state.deferred_until
        assert until is not None
        final = await rt.handle(loop_id).wait()
    assert final.phase == "complete"
    assert [r for _, r, _ in defer_fns.CALLS] == [1, 1]
    assert defer_fns.CALLS[-1][2] >= until


async def test_no_progress_uses_the_workspace_for_agent_kinds() -> None:
    async with open_runtime(memory_config()) as rt:
        idle = rt.handle(
            await rt.start("|loop:5| a", worker="python:tests.runtime.defer_fns:idle_agent")
        )
        busy = rt.handle(
            await rt.start("|loop:4| b", worker="python:tests.runtime.defer_fns:committing_agent")
        )
        idle_final, busy_final = await idle.wait(), await busy.wait()
    assert idle_final.phase == "escalated"
    assert idle_final.trigger == "no_progress"
    assert "workspace did not change" in (idle_final.reason or "")
    assert busy_final.phase == "complete"  # the same reply each round, but it commits


def test_status_shows_the_cost_and_until_when_a_loop_waits() -> None:
    from rich.console import Console

    from loopactors.cli._progress import final_table

    state = msgspec_replace(
        waiting_state(),
        phase="dispatching",
        cost_usd=0.125,
        deferred_until=time.mktime((2030, 1, 2, 3, 4, 5, 0, 0, -1)),
        defer_reason="usage limit reached",
    )
    console = Console(width=200, record=True)
    console.print(final_table([state]))
    text = console.export_text()
    assert "$0.1250" in text
    assert "waiting until 2030-01-02 03:04:05" in text


def test_status_shows_no_wait_whose_time_passed() -> None:
    """A loop paused in its inter-round delay keeps the delay's due time; once that time has
    passed the loop waits for its resume, not for the clock."""
    from rich.console import Console

    from loopactors.cli._progress import final_table

    state = msgspec_replace(
        waiting_state(),
        phase="paused",
        deferred_until=time.time() - 60,
        defer_reason="inter-round delay of 30s",
    )
    console = Console(width=200, record=True)
    console.print(final_table([state]))
    assert "waiting until" not in console.export_text()
