"""Crash and resume: a node killed at each phase resumes on the same SQLite file, and every
round ends up recorded exactly once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.loops._events import (
    LoopFinished,
    LoopInterrupted,
    LoopRecovered,
    LoopWaiting,
    RoundFinished,
    RoundStarted,
)
from loopactors.loops._model import LoopSpec, LoopState, Phase, RoundRecord
from loopactors.runtime import Runtime, open_runtime
from loopactors.storage import SqliteBackend, Write, open_backend
from tests.hang import HANG

from ..postgres import store_url
from .conftest import sqlite_config


async def run_until(
    state_dir: Path, text: str, kill_when: str, store: str = "sqlite", **options: Any
) -> str:
    """Start a loop, then kill the node (no graceful stop) at the moment ``kill_when``."""
    loop_id = ""
    with trio.CancelScope() as scope:
        config = sqlite_config(state_dir, shutdown_grace=0.0, store=store)
        async with open_runtime(config) as rt:
            with rt.subscribe() as events:
                handle = rt.handle(await rt.start(text, **options))
                loop_id = handle.loop_id
                async for event in events:
                    started = isinstance(event, RoundStarted) and event.round == 2
                    if kill_when == "round 2 started" and started:
                        scope.cancel()
                    if kill_when == "between rounds" and isinstance(event, RoundFinished):
                        scope.cancel()
    return loop_id


async def finish(
    state_dir: Path, loop_id: str, store: str = "sqlite"
) -> tuple[LoopState, list[RoundRecord], Runtime]:
    async with open_runtime(sqlite_config(state_dir, store=store)) as rt:
        final = await rt.handle(loop_id).wait()
        return final, await rt.history(loop_id), rt


def assert_each_round_once(rounds: list[RoundRecord], total: int) -> None:
    assert [r.round for r in rounds] == list(range(1, total + 1))
    assert all(r.status == "completed" for r in rounds), [r.status for r in rounds]


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest) -> str:
    """Each durable built-in store's URL (a fresh PostgreSQL schema)."""
    return store_url(request, request.param)


async def test_killed_while_a_round_runs(tmp_path: Path, durable: str) -> None:
    loop_id = await run_until(
        tmp_path,
        "|loop:4,fresh| survive",
        "round 2 started",
        store=durable,
        worker="scripted:latency=0.05",
    )
    async with open_runtime(sqlite_config(tmp_path, store=durable)) as rt:
        assert (await rt.get(loop_id)).phase == "awaiting_worker"
    final, rounds, _ = await finish(tmp_path, loop_id, durable)
    assert final.phase == "complete"
    assert_each_round_once(rounds, 4)


async def test_killed_between_rounds(tmp_path: Path, durable: str) -> None:
    loop_id = await run_until(
        tmp_path, "|loop:3| survive", "between rounds", store=durable, inter_round_delay=0.5
    )
    final, rounds, _ = await finish(tmp_path, loop_id, durable)
    assert final.phase == "complete"
    assert_each_round_once(rounds, 3)


def seed_store(state_dir: Path, state: LoopState, rounds: list[RoundRecord]) -> None:
    backend = open_backend("sqlite", state_dir)
    backend.commit([Write(state=state, round=r) for r in rounds] or [Write(state=state)])
    backend.close()


def done(loop_id: str, number: int) -> RoundRecord:
    return RoundRecord(
        loop_id=loop_id,
        round=number,
        status="completed",
        output=f"out {'o' * number}",
        started_at=time.time(),
        duration=0.1,
    )


PHASES: list[tuple[Phase, int, int]] = [
    # (committed phase, round, completed rounds before it)
    ("activating", 1, 0),
    ("dispatching", 2, 1),
    ("awaiting_worker", 2, 1),
    ("summarizing", 2, 2),
    ("finalizing", 3, 3),
]


@pytest.mark.parametrize(("phase", "round_number", "completed"), PHASES)
async def test_resume_from_each_committed_phase(
    tmp_path: Path, phase: Phase, round_number: int, completed: int
) -> None:
    loop_id = f"crashed-in-{phase}"
    now = time.time()
    state = LoopState(
        loop_id=loop_id,
        spec=LoopSpec(task="resume me", rounds=3, worker="scripted"),
        phase=phase,
        round=round_number,
        completed_rounds=completed,
        last_output=f"out {'o' * completed}" if completed else None,
        created_at=now,
        updated_at=now,
        started_at=now if phase != "activating" else 0.0,
    )
    records = [done(loop_id, n) for n in range(1, completed + 1)]
    if phase == "awaiting_worker":
        records.append(
            RoundRecord(loop_id=loop_id, round=round_number, status="running", started_at=now)
        )
    seed_store(tmp_path, state, records)
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        final = await rt.handle(loop_id).wait()
        rounds = await rt.history(loop_id)
        log = await rt.stored_events(loop_id)
    assert final.phase == "complete"
    assert_each_round_once(rounds, 3)
    recovered = [e for e in log if isinstance(e, LoopRecovered)]
    if phase == "activating":
        assert recovered == []  # nothing had started: it simply starts
    else:
        assert [e.phase for e in recovered] == [phase]
    # The final event sums up every round, those before the crash included.
    [finished] = [e for e in log if isinstance(e, LoopFinished)]
    assert [(r.round, r.status) for r in finished.summary] == [(n, "completed") for n in (1, 2, 3)]


async def test_a_paused_loop_stays_paused_across_a_restart(tmp_path: Path) -> None:
    now = time.time()
    state = LoopState(
        loop_id="paused-one",
        spec=LoopSpec(task="wait for me", rounds=2),
        phase="paused",
        round=2,
        completed_rounds=1,
        last_output="out o",
        created_at=now,
        updated_at=now,
        started_at=now,
    )
    seed_store(tmp_path, state, [done("paused-one", 1)])
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        handle = rt.handle("paused-one")
        await trio.sleep(0.2)
        assert (await handle.get()).phase == "paused"
        await handle.resume()
        assert (await handle.wait()).phase == "complete"
        assert_each_round_once(await handle.history(), 2)


async def told_waiting(rt: Runtime, loop_id: str) -> None:
    """Until the loop's ``LoopWaiting`` is in its log (subscribed first: none is missed)."""
    with rt.subscribe(loop_id) as live:
        if any(isinstance(e, LoopWaiting) for e in await rt.stored_events(loop_id)):
            return
        async for event in live:
            if isinstance(event, LoopWaiting):
                return


async def test_a_loop_whose_worker_cannot_be_built_waits_then_goes_on(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\nsleep 30\n")
    script.chmod(0o755)
    loop_id = ""
    # Round 1 runs the script for real, then the node dies mid-round.
    with trio.CancelScope() as scope:
        async with open_runtime(sqlite_config(tmp_path, shutdown_grace=0.0, kill_grace=0.1)) as rt:
            handle = rt.handle(
                await rt.start("|loop:2,fresh| uses a script", worker=f"command:{script}")
            )
            loop_id = handle.loop_id
            while (await handle.get()).phase != "awaiting_worker":
                await trio.sleep(0.01)
            scope.cancel()
    script.unlink()  # the worker is gone when the node comes back
    config = sqlite_config(tmp_path, worker_retry=0.05)
    async with open_runtime(config) as rt:
        handle = rt.handle(loop_id)
        await told_waiting(rt, handle.loop_id)
        waiting = await handle.get()
        assert waiting.reason is not None
        # It waits, saying why, in its committed phase: nothing ended, nothing is lost.
        assert waiting.phase in ("activating", "dispatching", "awaiting_worker")
        assert waiting.round == 1
        assert waiting.reason.startswith(f"waiting for its worker: 'command:{script}' cannot")
        assert str(script) in waiting.reason
        await trio.sleep(0.3)  # several looks later, still waiting, and said once
        assert (await handle.get()).phase == waiting.phase
        told = [e for e in await rt.stored_events(loop_id) if isinstance(e, LoopWaiting)]
        assert len(told) == 1
        assert told[0].reason == waiting.reason
        # The program is back: the next look finds it, and the loop runs to its end.
        script.write_text('#!/bin/sh\ncat >/dev/null\necho "did $LOOPACTORS_ROUND"\n')
        script.chmod(0o755)
        final = await handle.wait()
        log = await rt.stored_events(loop_id)
    assert (final.phase, final.completed_rounds, final.reason) == ("complete", 2, None)
    assert not any(isinstance(e, LoopInterrupted) for e in log)
    assert [e.phase for e in log if isinstance(e, LoopRecovered)] == [waiting.phase] * (
        waiting.phase != "activating"
    )


async def test_only_a_stop_ends_a_loop_waiting_for_its_worker(tmp_path: Path) -> None:
    now = time.time()
    state = LoopState(
        loop_id="waits",
        spec=LoopSpec(task="needs a program", rounds=3, worker="command:/nonexistent/agent"),
        phase="awaiting_worker",
        round=1,
        created_at=now,
        updated_at=now,
        started_at=now,
        agent_session="session-1",
    )
    running = RoundRecord(loop_id="waits", round=1, status="running", started_at=now)
    seed_store(tmp_path, state, [running])
    async with open_runtime(sqlite_config(tmp_path, worker_retry=0.05)) as rt:
        handle = rt.handle("waits")
        await told_waiting(rt, handle.loop_id)
        waiting = await handle.get()
        assert waiting.reason is not None
        assert waiting.agent_session == "session-1"  # kept while it waits
        await trio.sleep(0.3)  # looked at again and again: still there
        assert (await handle.get()).phase == "awaiting_worker"
        stopped = await handle.stop()
        history = await handle.history()
    assert stopped.phase == "cancelled"
    assert [(r.round, r.status) for r in history] == [(1, "cancelled")]


async def test_resume_runs_every_live_loop(tmp_path: Path) -> None:
    ids = []
    for i in range(3):
        ids.append(
            await run_until(
                tmp_path,
                f"|loop:3,fresh| loop {i}",
                "round 2 started",
                worker="scripted:latency=0.05",
            )
        )
    # Each new node resumed the loops the previous one left behind; the last one finishes
    # whatever is still live.
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        await rt.wait_all()
        assert await rt.list(live_only=True) == []
        for loop_id in ids:
            assert (await rt.get(loop_id)).phase == "complete"
            assert_each_round_once(await rt.history(loop_id), 3)


async def test_recovered_runners_start_in_batches(tmp_path: Path, monkeypatch: Any) -> None:
    # Many live loops are asked of the loop supervisor a batch at a time (each batch within
    # the call timeout); every one of them resumes, whatever the batch size.
    from loopactors.runtime import _coordinator

    monkeypatch.setattr(_coordinator, "RECOVERY_BATCH", 2)
    backend = open_backend("sqlite", tmp_path)
    ids = [f"batch{i}" for i in range(5)]
    backend.commit(
        [
            Write(
                state=LoopState(
                    loop_id=loop_id,
                    spec=LoopSpec(task=f"task {loop_id}", rounds=2, mode="fresh"),
                    phase="dispatching",
                    created_at=time.time(),
                )
            )
            for loop_id in ids
        ]
    )
    backend.close()
    recovered = []
    config = sqlite_config(tmp_path)

    def observe(event: Any) -> None:
        if isinstance(event, LoopRecovered):
            recovered.append(event.loop_id)

    async with open_runtime(config, observer=observe) as rt:
        await rt.wait_all()
        for loop_id in ids:
            assert (await rt.get(loop_id)).phase == "complete"
    assert sorted(recovered) == ids


async def test_a_start_recovers_from_one_read_of_the_store(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # At a runtime's start no runner is alive, so the Coordinator's snapshot of the live
    # loops is the truth: the runners take it, and their rounds read for all of them at
    # once, instead of each reading its loop and its rounds again.
    now = time.time()
    ids = [f"many{i:02d}" for i in range(12)]
    writes = []
    for loop_id in ids:
        state = LoopState(
            loop_id=loop_id,
            spec=LoopSpec(
                task=f"task {loop_id}", rounds=3, mode="fresh", worker="scripted:latency=0.3"
            ),
            phase="awaiting_worker",
            round=2,
            completed_rounds=1,
            created_at=now,
            updated_at=now,
            started_at=now,
        )
        writes.append(Write(state=state, round=done(loop_id, 1)))
        running = RoundRecord(loop_id=loop_id, round=2, status="running", started_at=now)
        writes.append(Write(state=state, round=running))
    backend = open_backend("sqlite", tmp_path)
    backend.commit(writes)
    backend.close()
    reads: list[str] = []
    for method in ("get_loop", "rounds", "round_summaries"):
        original = getattr(SqliteBackend, method)

        def counted(self: Any, *args: Any, _name: str = method, _fn: Any = original) -> Any:
            reads.append(_name)
            return _fn(self, *args)

        monkeypatch.setattr(SqliteBackend, method, counted)
    recovered: list[str] = []
    everyone = trio.Event()

    def observe(event: Any) -> None:
        if isinstance(event, LoopRecovered):
            recovered.append(event.loop_id)
            if len(recovered) == len(ids):
                everyone.set()

    async with open_runtime(sqlite_config(tmp_path), observer=observe) as rt:
        with trio.fail_after(HANG):
            await everyone.wait()
        assert reads == ["round_summaries"]
        await rt.wait_all()
        for loop_id in ids:
            assert (await rt.get(loop_id)).phase == "complete"
            assert_each_round_once(await rt.history(loop_id), 3)
            log = await rt.stored_events(loop_id)
            [finished] = [e for e in log if isinstance(e, LoopFinished)]
            assert [r.round for r in finished.summary] == [1, 2, 3]


async def test_a_recovery_that_changes_no_state_writes_only_its_note(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # A round in flight is dispatched again: the state stays as the store holds it, so the
    # recovery's commit carries its note and leaves the loop's row alone.
    now = time.time()
    spec = LoopSpec(task="noted", rounds=1, mode="fresh", worker="scripted:latency=60")
    state = LoopState(
        loop_id="noted",
        spec=spec,
        phase="awaiting_worker",
        round=1,
        created_at=now,
        updated_at=now,
        started_at=now,
    )
    seed_store(
        tmp_path, state, [RoundRecord(loop_id="noted", round=1, status="running", started_at=now)]
    )
    writes: list[Write] = []
    original = SqliteBackend.commit

    def spy(self: SqliteBackend, batch: Any) -> None:
        writes.extend(batch)
        original(self, batch)

    monkeypatch.setattr(SqliteBackend, "commit", spy)
    recovered = trio.Event()

    def observe(event: Any) -> None:
        if isinstance(event, LoopRecovered):
            recovered.set()

    async with open_runtime(sqlite_config(tmp_path), observer=observe) as rt:
        with trio.fail_after(HANG):
            await recovered.wait()
        assert await rt.get("noted") == state
        await rt.stop("noted")
    [write] = [w for w in writes if any(isinstance(e, LoopRecovered) for e in w.events)]
    assert write.state_stored
    assert write.state == state
