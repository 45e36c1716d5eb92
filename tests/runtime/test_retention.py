"""Pruning finished loops through the runtime: `Runtime.prune` and `retention_days`."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.errors import ConfigError, LoopNotFound, StoreError
from loopactors.loops._events import LoopFinished
from loopactors.loops._model import LoopSpec, LoopState, Phase, RoundRecord
from loopactors.runtime import Runtime, open_runtime
from loopactors.runtime._messages import Commit
from loopactors.runtime._retention import CHECK_EVERY, DAY, retention_interval
from loopactors.runtime._store import Store
from loopactors.storage import MemoryBackend, PruneReport, SqliteBackend, Write, open_backend
from tests.hang import HANG

from .conftest import memory_config, sqlite_config

SPEC = LoopSpec(task="an old task", rounds=2, worker="scripted")


def finished_long_ago(loop_id: str, days: float, phase: Phase = "complete") -> Write:
    """A loop that ended ``days`` ago, with one round and its final event."""
    ended = time.time() - days * DAY
    state = LoopState(
        loop_id=loop_id, spec=SPEC, phase=phase, round=1, created_at=ended, updated_at=ended
    )
    return Write(
        state=state,
        round=RoundRecord(loop_id=loop_id, round=1, status="completed", output="old"),
        events=(
            LoopFinished(loop_id=loop_id, at=ended, phase=phase, rounds=2, completed_rounds=1),
        ),
    )


def test_retention_interval() -> None:
    assert retention_interval(30) == CHECK_EVERY == 3_600
    assert retention_interval(0.01) == pytest.approx(86.4)  # a tenth of a short retention
    assert retention_interval(0.001) == 60  # never more often than once a minute


async def finish_two(rt: Runtime) -> list[str]:
    done = [rt.handle(await rt.start(f"|loop:2| task {n}")) for n in range(2)]
    for handle in done:
        await handle.wait()
    ended = max([(await handle.get()).updated_at for handle in done])
    while time.time() <= ended:  # the cutoff is strict: let the wall clock move past the end
        await trio.sleep(0.001)
    return [handle.loop_id for handle in done]


async def test_prune_removes_finished_loops_and_keeps_live_ones(rt: Runtime) -> None:
    finished = await finish_two(rt)
    paused = rt.handle(await rt.start("|loop:5| paused", worker="scripted:latency=0.05"))
    await paused.pause()
    await paused.wait_phase("paused")

    recent = await rt.prune(3_600)
    assert (recent.loops, recent.rounds, recent.events) == (0, 0, 0)
    assert recent.before == pytest.approx(time.time() - 3_600, abs=60)
    dry = await rt.prune(0, dry_run=True)
    assert (dry.loops, dry.rounds, dry.dry_run) == (2, 4, True)
    assert dry.events > 0
    assert len(await rt.list()) == 3  # a dry run removes nothing

    report = await rt.prune(0)
    assert (report.loops, report.rounds, report.events) == (dry.loops, dry.rounds, dry.events)
    assert not report.dry_run
    for loop_id in finished:
        with pytest.raises(LoopNotFound):
            await rt.history(loop_id)
        with pytest.raises(LoopNotFound):
            await rt.stored_events(loop_id)
    assert [s.loop_id for s in await rt.list()] == [paused.loop_id]
    assert (await paused.get()).phase == "paused"
    await paused.resume()
    assert (await paused.wait()).phase == "complete"
    assert len(await paused.history()) == 5


async def test_prune_an_empty_store(rt: Runtime) -> None:
    report = await rt.prune(0)
    assert (report.loops, report.rounds, report.events) == (0, 0, 0)


@pytest.mark.parametrize(
    "older_than", [-1, -0.5, math.nan, math.inf, 10**400, 4e9, "5", None, True]
)
async def test_prune_refuses_a_bad_age(rt: Runtime, older_than: object) -> None:
    with pytest.raises(ConfigError, match="older_than must be"):
        await rt.prune(older_than)  # type: ignore[arg-type]


async def test_retention_prunes_at_start_on_sqlite(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopactors.runtime")
    backend = open_backend("sqlite", tmp_path)
    backend.commit([finished_long_ago("old", 10), finished_long_ago("recent", 2, "error")])
    backend.close()
    async with open_runtime(sqlite_config(tmp_path, retention_days=7)) as rt:
        with trio.fail_after(HANG):
            while (await rt.store_statistics()).loops > 1:
                await trio.sleep(0.01)
        assert [s.loop_id for s in await rt.list()] == ["recent"]
        with pytest.raises(LoopNotFound):
            await rt.history("old")
        assert len(await rt.history("recent")) == 1
    lines = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert lines == ["retention_days=7: removed 1 loop, 1 round, 1 event"]


async def test_retention_prunes_periodically(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopactors.runtime")
    async with open_runtime(memory_config(retention_days=1)) as rt:
        store = rt.node.ref("store")
        await trio.sleep(1)  # the prune at start has run: it found nothing, and said nothing
        await store.call(Commit(finished_long_ago("old", 3)))
        await store.call(Commit(finished_long_ago("young", 0.5)))
        await trio.sleep(CHECK_EVERY - 2)
        assert {s.loop_id for s in await rt.list()} == {"old", "young"}  # not yet
        await trio.sleep(2)
        assert [s.loop_id for s in await rt.list()] == ["young"]
        await trio.sleep(10 * CHECK_EVERY)  # later prunes find nothing more, say nothing
        assert [s.loop_id for s in await rt.list()] == ["young"]
    lines = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert lines == ["retention_days=1: removed 1 loop, 1 round, 1 event"]


def count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The limit of each SQLite prune batch run from now on, in order."""
    batches: list[int] = []
    real = SqliteBackend.prune_batch

    def counted(self: SqliteBackend, before: float, **options: Any) -> Any:
        batches.append(options["limit"])
        return real(self, before, **options)

    monkeypatch.setattr(SqliteBackend, "prune_batch", counted)
    return batches


async def test_a_large_prune_goes_in_batches_and_the_store_serves_others_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "prune_batch_size", 3)
    batches = count_batches(monkeypatch)
    backend = open_backend("sqlite", tmp_path)
    backend.commit([finished_long_ago(f"old-{n:02}", 10) for n in range(40)])
    backend.commit([finished_long_ago("kept", 0.1)])
    backend.close()
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        read_after: list[int] = []

        async def prune() -> None:
            report = await rt.prune(DAY)
            assert (report.loops, report.rounds, report.events) == (40, 40, 40)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prune)
            while not batches:  # the prune has begun
                await trio.lowlevel.checkpoint()
            await rt.store_statistics()
            read_after.append(len(batches))
        assert batches == [3] * 14  # 40 loops, 3 a batch
        # The read, sent after the first batch, was answered long before the last one.
        assert read_after[0] <= 3
        assert [s.loop_id for s in await rt.list()] == ["kept"]


async def test_a_dry_run_goes_in_batches_through_the_store_and_removes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "prune_batch_size", 4)
    backend = open_backend("sqlite", tmp_path)
    backend.commit([finished_long_ago(f"old-{n:02}", 10) for n in range(10)])
    backend.close()
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        report = await rt.prune(DAY, dry_run=True)
        assert (report.dry_run, report.loops, report.rounds, report.events) == (True, 10, 10, 10)
        assert (await rt.store_statistics()).loops == 10


async def test_a_prune_whose_caller_gave_up_stops_after_the_batch_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "prune_batch_size", 2)
    batches = count_batches(monkeypatch)
    backend = open_backend("sqlite", tmp_path)
    backend.commit([finished_long_ago(f"old-{n:02}", 10) for n in range(40)])
    backend.close()
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.prune, DAY)
                while not batches:
                    await trio.lowlevel.checkpoint()
                scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert len(batches) <= 2  # not the 20 a whole prune takes
        assert (await rt.store_statistics()).loops >= 36


async def test_a_prune_sees_the_writes_queued_before_it(rt: Runtime) -> None:
    # Cast, not called: the write waits in the Store's batch when the prune arrives.
    await rt.node.ref("store").cast(Commit(finished_long_ago("just queued", 3)))
    report = await rt.prune(DAY)
    assert report.loops == 1
    assert await rt.list() == []


async def test_no_retention_keeps_everything(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(memory_config()) as rt:
        await rt.node.ref("store").call(Commit(finished_long_ago("old", 3_000)))
        await trio.sleep(100 * CHECK_EVERY)
        assert [s.loop_id for s in await rt.list()] == ["old"]


def fail_once(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make the memory backend's next prune batch fail as a broken disk would; record the
    calls."""
    calls: list[float] = []
    real = MemoryBackend.prune_batch

    def prune_batch(
        self: MemoryBackend, before: float, **options: Any
    ) -> tuple[PruneReport, str | None]:
        calls.append(before)
        if len(calls) == 1:
            raise StoreError("cannot prune the store: disk on fire")
        return real(self, before, **options)

    monkeypatch.setattr(MemoryBackend, "prune_batch", prune_batch)
    return calls


async def test_a_failed_prune_is_refused_and_the_store_goes_on(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await rt.node.ref("store").call(Commit(finished_long_ago("old", 3)))
    store = rt.node.whereis("store")
    fail_once(monkeypatch)
    with pytest.raises(StoreError, match="disk on fire"):
        await rt.prune(DAY)
    assert rt.node.whereis("store") is store  # refused, not crashed: no restart
    assert [s.loop_id for s in await rt.list()] == ["old"]
    assert (await rt.prune(DAY)).loops == 1


async def test_retention_logs_a_failed_prune_and_tries_again(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="loopactors.runtime")
    calls = fail_once(monkeypatch)
    async with open_runtime(memory_config(retention_days=1)) as rt:
        await rt.node.ref("store").call(Commit(finished_long_ago("old", 3)))
        await trio.sleep(1)  # the first prune failed
        assert [s.loop_id for s in await rt.list()] == ["old"]
        await trio.sleep(CHECK_EVERY)
        assert await rt.list() == []
    assert len(calls) == 2
    lines = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert lines == [
        f"retention: cannot prune the store: disk on fire; trying again in {CHECK_EVERY:.0f} s",
        "retention_days=1: removed 1 loop, 1 round, 1 event",
    ]
