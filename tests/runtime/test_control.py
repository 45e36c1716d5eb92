"""Stop, stop after the round, pause and resume, in every live phase."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from loopactors.loops._events import LoopFinished, RoundFinished
from loopactors.runtime import LoopHandle, Runtime, open_runtime
from tests.hang import HANG

from .conftest import memory_config


async def wait_phase(handle: LoopHandle, phase: str, round_number: int | None = None) -> None:
    while True:
        state = await handle.get()
        if state.phase == phase and (round_number is None or state.round == round_number):
            return
        await trio.sleep(0.01)


async def test_stop_while_a_round_runs_cancels_it_now(
    rt: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = rt.handle(await rt.start("|loop:5| slow", worker="scripted:latency=10"))
    await wait_phase(handle, "awaiting_worker", 2)
    before = trio.current_time()
    with handle.events() as events:
        state = await handle.stop()
        assert trio.current_time() - before < 0.1
        closed = await events.receive()
        finished = await events.receive()
    assert state.phase == "cancelled"
    # The round started is closed on the stream before the loop's end (docs/loops.md).
    assert isinstance(closed, RoundFinished)
    assert (closed.round, closed.status, closed.error) == (2, "cancelled", "stopped")
    assert isinstance(finished, LoopFinished)
    assert [(r.round, r.status) for r in finished.summary] == [(1, "completed"), (2, "cancelled")]
    assert [(r.round, r.status) for r in await handle.history()] == [
        (1, "completed"),
        (2, "cancelled"),
    ]


async def test_stop_between_rounds(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config(inter_round_delay=30.0)) as rt:
        handle = rt.handle(await rt.start("|loop:5| waits between rounds"))
        await wait_phase(handle, "dispatching", 2)  # in the inter-round delay
        state = await handle.stop()
        assert state.phase == "cancelled"
        assert state.completed_rounds == 1


async def test_stop_while_paused(rt: Runtime, autojump_clock: trio.testing.MockClock) -> None:
    handle = rt.handle(await rt.start("|loop:5| pausable", worker="scripted:latency=1"))
    await handle.pause()
    await wait_phase(handle, "paused")
    state = await handle.stop()
    assert state.phase == "cancelled"


async def test_stop_right_after_start(rt: Runtime) -> None:
    handle = rt.handle(await rt.start("|loop:5| barely started", worker="scripted:latency=1"))
    state = await handle.stop()
    assert state.phase == "cancelled"
    assert state.completed_rounds == 0


async def test_stop_after_this_round(rt: Runtime, autojump_clock: trio.testing.MockClock) -> None:
    handle = rt.handle(await rt.start("|loop:5| finish this one", worker="scripted:latency=10"))
    await wait_phase(handle, "awaiting_worker", 2)
    state = await handle.stop(after_round=True)
    assert state.phase == "awaiting_worker"
    assert state.stop_requested == "after_round"
    final = await handle.wait()
    assert final.phase == "cancelled"
    assert [r.status for r in await handle.history()] == ["completed", "completed"]


async def test_pause_lets_the_round_finish_then_resume_continues(
    rt: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = rt.handle(await rt.start("|loop:4| pause me", worker="scripted:latency=10"))
    await wait_phase(handle, "awaiting_worker", 2)
    state = await handle.pause()
    assert state.pause_requested
    await wait_phase(handle, "paused")
    paused = await handle.get()
    assert paused.completed_rounds == 2
    assert paused.round == 3
    await trio.sleep(100)  # nothing is dispatched while paused
    assert (await handle.get()).completed_rounds == 2
    await handle.resume()
    final = await handle.wait()
    assert final.phase == "complete"
    assert [r.round for r in await handle.history()] == [1, 2, 3, 4]


async def test_resume_before_the_pause_took_effect_cancels_it(
    rt: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = rt.handle(await rt.start("|loop:3| changed my mind", worker="scripted:latency=10"))
    await wait_phase(handle, "awaiting_worker", 1)
    await handle.pause()
    state = await handle.resume()
    assert not state.pause_requested
    assert (await handle.wait()).phase == "complete"


async def test_pause_between_rounds_takes_effect_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(inter_round_delay=30.0)) as rt:
        handle = rt.handle(await rt.start("|loop:3| delayed"))
        await wait_phase(handle, "dispatching", 2)
        state = await handle.pause()
        assert state.phase == "paused"
        await trio.sleep(100)
        assert (await handle.get()).phase == "paused"
        await handle.resume()
        assert (await handle.wait()).phase == "complete"


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdin.read()
print(os.getpid(), flush=True)
open(sys.argv[1], "w").write(str(os.getpgrp()))
time.sleep(60)
"""


async def test_stop_kills_a_subprocess_that_ignores_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    pgid_file = tmp_path / "pgid"
    # A grace no loaded machine outlasts between two statements: the group is seen alive
    # right after the stop, and killed once the grace is over.
    config = memory_config(kill_grace=3.0)
    async with open_runtime(config) as rt:
        import sys

        handle = rt.handle(
            await rt.start(
                "|loop:3| never ends", worker=f"command:{sys.executable} {script} {pgid_file}"
            )
        )
        while not pgid_file.exists() or not pgid_file.read_text():
            await trio.sleep(0.01)
        pgid = int(pgid_file.read_text())
        state = await handle.stop()
        assert state.phase == "cancelled"
        os.killpg(pgid, 0)  # the loop is cancelled at once, the group still in its grace...
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:  # ...and the process group killed after the grace
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            await trio.sleep(0.05)
        else:
            os.killpg(pgid, signal.SIGKILL)
            pytest.fail("the stubborn process group survived the stop")
