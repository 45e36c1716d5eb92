"""Races and crash windows found in review, each pinned by the test that showed it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from loopactors.actors import SupervisorRef
from loopactors.errors import LoopactorsError
from loopactors.loops._events import LoopStarted
from loopactors.loops._model import LoopSpec, LoopState, RoundRecord
from loopactors.runtime import open_runtime
from loopactors.runtime._breaker import Breaker
from loopactors.runtime._messages import ForgetLedger
from loopactors.runtime._wiring import runner_name
from loopactors.storage import Write, open_backend
from loopactors.testing import inject_crash

from . import race_fns as rv_fns
from . import round_fns
from .conftest import memory_config, sqlite_config


def seed_store(state_dir: Path, writes: list[Write]) -> None:
    backend = open_backend("sqlite", state_dir)
    backend.commit(writes)
    backend.close()


# --- 1. bad input (wrong option type) kills the whole node --------------------------------
async def test_a_wrong_option_type_does_not_kill_the_node(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        try:
            await rt.start("|loop:2| x", max_tokens="100")  # str instead of int
        except LoopactorsError:
            return  # a clear refusal is fine
        await trio.sleep(30)
        # the node must still serve new loops
        ok = rt.handle(await rt.start("|loop:1| still alive"))
        assert (await ok.wait()).phase == "complete"


async def test_a_non_string_worker_does_not_crash_the_coordinator(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config()) as rt:
        coord = rt.node.whereis("coordinator")
        with pytest.raises(LoopactorsError):
            await rt.start(LoopSpec(task="x", worker=123))  # type: ignore[arg-type]
        assert rt.node.whereis("coordinator") == coord, "coordinator was restarted"


# --- 2. reusing the id of a finished loop rewrites its history ----------------------------
async def test_a_finished_loops_id_cannot_be_reused(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        first = rt.handle(await rt.start("|loop:3,fresh| first", loop_id="same"))
        assert (await first.wait()).phase == "complete"
        before = await rt.history("same")
        try:
            second = rt.handle(await rt.start("|loop:1,fresh| second", loop_id="same"))
        except LoopactorsError:
            return
        await second.wait()
        after = await rt.history("same")
        assert after == before, "history of the finished loop was rewritten"


# --- 3. seed_source after recovery of an in-flight inherit round --------------------------
async def test_recovered_round_records_its_real_seed_source(tmp_path: Path) -> None:
    now = time.time()
    state = LoopState(
        loop_id="inh",
        spec=LoopSpec(task="go on", rounds=2, mode="inherit"),
        phase="awaiting_worker",
        round=2,
        completed_rounds=1,
        last_output="round one output",
        created_at=now,
        updated_at=now,
        started_at=now,
    )
    r1 = RoundRecord(loop_id="inh", round=1, status="completed", output="round one output")
    r2 = RoundRecord(
        loop_id="inh", round=2, status="running", seed_source="previous_output", started_at=now
    )
    seed_store(tmp_path, [Write(state=state, round=r1), Write(state=state, round=r2)])
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        final = await rt.handle("inh").wait()
        rounds = await rt.history("inh")
    assert final.phase == "complete"
    assert rounds[1].seed_source == "previous_output", rounds[1]


# --- 4. a child of a finished parent is resumed on restart and runs on --------------------
async def test_a_child_of_a_finished_parent_does_not_run_after_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    parent = LoopState(
        loop_id="parent",
        spec=LoopSpec(task="parent task", rounds=2),
        phase="cancelled",
        round=1,
        created_at=now,
        updated_at=now,
        started_at=now,
    )
    child = LoopState(
        loop_id="child",
        spec=LoopSpec(task="child task", rounds=2, parent_id="parent"),
        phase="dispatching",
        round=1,
        created_at=now + 1,
        updated_at=now + 1,
        started_at=now + 1,
    )
    seed_store(tmp_path, [Write(state=parent), Write(state=child)])
    forgotten: list[str] = []
    real = Breaker.handle

    async def handle(self: Breaker, message: Any) -> Any:
        if isinstance(message, ForgetLedger):
            forgotten.append(message.loop_id)
        return await real(self, message)

    monkeypatch.setattr(Breaker, "handle", handle)
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        final = await rt.handle("child").wait()
        await trio.testing.wait_all_tasks_blocked()
    assert final.phase == "cancelled", f"child of a cancelled parent ended {final.phase}"
    assert forgotten == ["child"]  # and the Breaker drops whatever ledger it kept for it


# --- 5. watchdog fires on a round that only waited for a concurrency slot -----------------
async def test_waiting_for_a_slot_is_not_a_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config(max_concurrent_rounds=1)) as rt:
        handles = [
            rt.handle(
                await rt.start(
                    f"|loop:1| slot {i}", worker="scripted:latency=0.9", round_timeout=1.0
                )
            )
            for i in range(40)
        ]
        statuses = []
        for h in handles:
            await h.wait()
            statuses += [r.status for r in await h.history()]
    assert set(statuses) == {"completed"}, statuses.count("timed_out")


# --- 6. stop racing with the end of the last round crashes the coordinator ----------------
async def test_stop_as_the_last_round_ends_does_not_crash_the_coordinator(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rv_fns.reset()
    async with open_runtime(memory_config()) as rt:
        for i in range(40):
            coord = rt.node.whereis("coordinator")
            h = rt.handle(
                await rt.start(f"|loop:1| race {i}", worker="python:tests.runtime.race_fns:timed")
            )
            while h.loop_id not in rv_fns.STATE["started_at"]:
                await trio.sleep(0.001)
            await trio.sleep_until(rv_fns.STATE["started_at"][h.loop_id] + 1.0)
            await h.stop()
            await trio.testing.wait_all_tasks_blocked()
            assert rt.node.whereis("coordinator") == coord, f"coordinator restarted at try {i}"


# --- 7. a child admitted while its parent is being stopped outlives the parent ------------
async def test_no_child_outlives_a_stopped_parent(autojump_clock: trio.testing.MockClock) -> None:
    rv_fns.reset()
    async with open_runtime(memory_config()) as rt:
        parent = rt.handle(
            await rt.start("|loop:2| parent task", worker="python:tests.runtime.race_fns:parent_fn")
        )
        while not rv_fns.STATE["children"]:
            await trio.sleep(0.01)
        await trio.sleep(0.5)
        assert (await parent.stop()).phase == "cancelled"
        await trio.sleep(0.5)
        loops = await rt.list()
        left = {s.spec.task: s.phase for s in loops}
        live = [s for s in loops if not s.terminal]
        await trio.sleep(10)
        final = {s.spec.task: s.phase for s in await rt.list()}
    assert live == [], f"live after parent stop: {left}; later: {final}"


# --- 8. stop while the runner restarts after a crash -------------------------------------
async def test_stop_while_the_runner_restarts(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        h = rt.handle(await rt.start("|loop:5| crashy", worker="scripted:latency=1"))
        await trio.sleep(1.5)
        coord = rt.node.whereis("coordinator")
        inject_crash(rt.node, runner_name(h.loop_id))
        state = await h.stop()
        final = await h.wait()
        restarted = rt.node.whereis("coordinator") != coord
    assert (state.phase, final.phase, restarted) == ("cancelled", "cancelled", False)


# --- 9. LoopStarted is never published for a loop paused before round 1 and restarted ----
async def test_loop_started_after_resume_of_a_loop_paused_before_round_one(tmp_path: Path) -> None:
    now = time.time()
    state = LoopState(
        loop_id="p1",
        spec=LoopSpec(task="paused early", rounds=1),
        phase="paused",
        round=1,
        created_at=now,
        updated_at=now,
        started_at=now,
    )
    seed_store(tmp_path, [Write(state=state)])
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        await rt.handle("p1").resume()
        await rt.handle("p1").wait()
        log = await rt.stored_events("p1")
    assert any(isinstance(e, LoopStarted) for e in log), [type(e).__name__ for e in log]


async def test_a_failed_start_leaves_no_loop_behind(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        failed: list[str] = []
        for i in range(10):
            task = f"attempt {i}"

            async def start(task: str = task) -> None:
                try:
                    await rt.start(f"|loop:1| {task}")
                except LoopactorsError:
                    failed.append(task)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(start)
                await trio.lowlevel.checkpoint()
                inject_crash(rt.node, "coordinator")
            await trio.sleep(5)
        tasks = {s.spec.task: s.phase for s in await rt.list()}
        ghosts = {t: tasks[t] for t in failed if t in tasks}
    assert ghosts == {}, f"start() raised, yet these loops ran: {ghosts}"


async def test_a_child_whose_parent_ended_while_the_coordinator_was_down_is_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from loopactors.runtime._messages import Commit

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
        # The parent ends without the Coordinator hearing of it (as if it was down then):
        # its runner goes away and its final state is written straight to the store.
        loops = rt.node.whereis("loops")
        assert loops is not None
        await SupervisorRef(loops).terminate_child(parent.loop_id)
        final = (await parent.get()).moved("cancelled", reason="test")
        await rt.node.ref("store").call(Commit(Write(state=final)))
        inject_crash(rt.node, "coordinator")  # it comes back and recovers from the store
        assert (await child.wait()).phase == "cancelled"
        await trio.sleep(30)  # its runner is gone: nothing rewrites the final state
        assert (await child.get()).phase == "cancelled"
