"""Retention: both backends remove finished old loops, with their rounds and events, and
nothing else."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from loopactors.errors import StoreError
from loopactors.loops._events import LoopFinished, RoundStarted
from loopactors.loops._model import (
    TERMINAL_PHASES,
    LoopSpec,
    LoopState,
    Phase,
    RoundRecord,
)
from loopactors.storage import PruneReport, SqliteBackend, StoreBackend, Write, open_backend
from loopactors.storage import _sql as sql_backend

from ..postgres import STORES, store_url

SPEC = LoopSpec(task="tidy the docs", rounds=3)
OLD, CUTOFF, RECENT = 100.0, 1_000.0, 5_000.0
LIVE_PHASES = sorted(set(get_args(Phase)) - TERMINAL_PHASES)


def write(loop_id: str, phase: Phase, updated_at: float, rounds: int = 2) -> list[Write]:
    """A loop with ``rounds`` rounds, each with an event, and a final event if terminal."""
    state = LoopState(
        loop_id=loop_id, spec=SPEC, phase=phase, round=rounds, created_at=1.0, updated_at=1.0
    )
    steps = [
        Write(
            state=state,
            round=RoundRecord(loop_id=loop_id, round=n, status="completed", output=f"r{n}"),
            events=(RoundStarted(loop_id=loop_id, at=1.0, round=n, rounds=3, seed_source="task"),),
        )
        for n in range(1, rounds + 1)
    ]
    final: tuple[LoopFinished, ...] = ()
    if phase in TERMINAL_PHASES:
        final = (
            LoopFinished(loop_id=loop_id, at=1.0, phase=phase, rounds=3, completed_rounds=rounds),
        )
    last = LoopState(
        loop_id=loop_id,
        spec=SPEC,
        phase=phase,
        round=rounds,
        created_at=1.0,
        updated_at=updated_at,
    )
    return [*steps, Write(state=last, events=final)]


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    store = open_backend(store_url(request, request.param), tmp_path)
    yield store
    store.close()


def fill(backend: StoreBackend) -> None:
    """Old finished loops in every terminal phase, old live ones, recent finished ones."""
    writes: list[Write] = []
    for phase in sorted(TERMINAL_PHASES):
        writes += write(f"old-{phase}", phase, OLD)
        writes += write(f"new-{phase}", phase, RECENT)
    for phase in LIVE_PHASES:  # paused included: never removed, however old
        writes += write(f"live-{phase}", phase, OLD)
    backend.commit(writes)


def test_prune_removes_old_finished_loops_with_their_rounds_and_events(
    backend: StoreBackend,
) -> None:
    fill(backend)
    before = backend.statistics()
    kept = {s.loop_id: s for s in backend.list_loops() if not s.loop_id.startswith("old-")}
    kept_rounds = {loop_id: backend.rounds(loop_id) for loop_id in kept}
    kept_events = {loop_id: backend.events(loop_id) for loop_id in kept}

    report = backend.prune(CUTOFF)

    finished = len(TERMINAL_PHASES)
    # Each old finished loop had 2 rounds and 3 events (2 round starts and its end).
    assert report == PruneReport(
        before=CUTOFF, loops=finished, rounds=2 * finished, events=3 * finished
    )
    assert report.removed_any
    for phase in TERMINAL_PHASES:
        assert backend.get_loop(f"old-{phase}") is None
        assert backend.rounds(f"old-{phase}") == []
        assert backend.events(f"old-{phase}") == []
    assert {s.loop_id: s for s in backend.list_loops()} == kept
    assert {loop_id: backend.rounds(loop_id) for loop_id in kept} == kept_rounds
    assert {loop_id: backend.events(loop_id) for loop_id in kept} == kept_events
    after = backend.statistics()
    assert after.loops == before.loops - finished
    assert after.live_loops == before.live_loops == len(LIVE_PHASES)
    assert after.rounds == before.rounds - 2 * finished
    assert after.events == before.events - 3 * finished


def test_paused_and_live_loops_are_never_pruned(backend: StoreBackend) -> None:
    fill(backend)
    report = backend.prune(float("inf"))  # everything finished, whenever it finished
    assert report.loops == 2 * len(TERMINAL_PHASES)
    assert sorted(s.phase for s in backend.list_loops()) == LIVE_PHASES
    assert "paused" in LIVE_PHASES
    assert backend.rounds("live-paused") != []


def test_dry_run_removes_nothing_and_counts_the_same(backend: StoreBackend) -> None:
    fill(backend)
    before = backend.statistics()
    dry = backend.prune(CUTOFF, dry_run=True)
    assert dry.dry_run
    assert backend.statistics() == before
    assert backend.get_loop("old-complete") is not None
    assert backend.prune(CUTOFF, dry_run=True) == dry  # and counting again changes nothing
    real = backend.prune(CUTOFF)
    assert (real.loops, real.rounds, real.events) == (dry.loops, dry.rounds, dry.events)
    assert (real.loops, real.rounds, real.events) == (5, 10, 15)
    assert not real.dry_run


def test_the_cutoff_is_strict(backend: StoreBackend) -> None:
    backend.commit(write("a", "complete", CUTOFF))
    assert backend.prune(CUTOFF).loops == 0  # updated exactly at the cutoff: kept
    assert backend.prune(CUTOFF + 0.001).loops == 1


def test_prune_again_and_on_an_empty_store_removes_nothing(backend: StoreBackend) -> None:
    empty = backend.prune(CUTOFF)
    assert empty == PruneReport(before=CUTOFF)
    assert not empty.removed_any
    fill(backend)
    backend.prune(CUTOFF)
    assert backend.prune(CUTOFF) == PruneReport(before=CUTOFF)


def test_a_pruned_loop_id_can_be_used_again(backend: StoreBackend) -> None:
    backend.commit(write("a", "complete", OLD, rounds=3))
    backend.prune(CUTOFF)
    backend.commit(write("a", "dispatching", RECENT, rounds=1))
    assert [r.round for r in backend.rounds("a")] == [1]
    assert len(backend.events("a")) == 1  # none of the old loop's events come back


def test_prune_batches_walk_the_loops_in_id_order(backend: StoreBackend) -> None:
    for n in range(7):
        backend.commit(write(f"old-{n}", "complete", OLD, 1))
        backend.commit(write(f"old-{n}-live", "paused", OLD, 1))  # between them, never taken
        backend.commit(write(f"old-{n}-recent", "complete", RECENT, 1))
    # A dry run walks the same batches and removes nothing.
    counted, cursor = backend.prune_batch(CUTOFF, limit=3, dry_run=True)
    assert (counted.loops, cursor) == (3, "old-2")
    assert backend.statistics().loops == 21
    sizes, cursor = [], ""
    while cursor is not None:
        report, cursor = backend.prune_batch(CUTOFF, after=cursor, limit=3)
        sizes.append(report.loops)
        assert report.rounds == report.loops
        assert report.events == 2 * report.loops
    assert sizes == [3, 3, 1]
    left = {s.loop_id for s in backend.list_loops()}
    assert left == {f"old-{n}-{kind}" for n in range(7) for kind in ("live", "recent")}


def test_closed_store_refuses_to_prune(backend: StoreBackend) -> None:
    backend.close()
    with pytest.raises(StoreError):
        backend.prune(CUTOFF)


def test_report_note() -> None:
    assert PruneReport(before=1.0, loops=1, rounds=2, events=0).note() == (
        "removed 1 loop, 2 rounds, 0 events"
    )
    assert PruneReport(before=1.0, dry_run=True).note() == (
        "would remove 0 loops, 0 rounds, 0 events"
    )


# -- SQLite only ---------------------------------------------------------------------------------


def test_sqlite_prune_is_durable(tmp_path: Path) -> None:
    store = SqliteBackend(tmp_path / "loopactors.db")
    fill(store)
    store.prune(CUTOFF)
    store.close()
    store = SqliteBackend(tmp_path / "loopactors.db")
    try:
        assert store.get_loop("old-complete") is None
        assert store.get_loop("new-complete") is not None
        assert store.statistics().loops == len(TERMINAL_PHASES) + len(LIVE_PHASES)
    finally:
        store.close()


def test_sqlite_prune_is_all_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "loopactors.db"
    store = SqliteBackend(path)
    fill(store)
    before = store.statistics()
    # Another connection holds the write lock past the busy timeout: the prune fails whole.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    store._conn.execute("PRAGMA busy_timeout = 50")
    try:
        with pytest.raises(StoreError, match=rf"cannot prune the store {path}: .*locked"):
            store.prune(CUTOFF)
        assert store.statistics() == before
        assert not store._conn.in_transaction
    finally:
        other.execute("ROLLBACK")
        other.close()
    try:
        assert store.prune(CUTOFF).loops == len(TERMINAL_PHASES)
    finally:
        store.close()


def test_sqlite_prune_fails_midway_and_rolls_back(tmp_path: Path) -> None:
    path = tmp_path / "loopactors.db"
    store = SqliteBackend(path)
    fill(store)
    before = store.statistics()
    # A trigger makes the last DELETE fail after rounds and events were already deleted.
    store._conn.execute(
        "CREATE TEMP TRIGGER refuse BEFORE DELETE ON loops "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    try:
        with pytest.raises(StoreError, match="disk on fire") as info:
            store.prune(CUTOFF)
        assert str(path) in str(info.value)
        assert store.statistics() == before
    finally:
        store.close()


def test_sqlite_many_loops_in_one_prune(tmp_path: Path) -> None:
    # More loops than a batch (500 ids, under SQLite's historical 999-parameter limit).
    store = SqliteBackend(tmp_path / "loopactors.db")
    try:
        store.commit([w for n in range(1_500) for w in write(f"l{n}", "complete", OLD, 1)])
        assert store.prune(CUTOFF, dry_run=True).loops == 1_500
        assert store.prune(CUTOFF) == PruneReport(
            before=CUTOFF, loops=1_500, rounds=1_500, events=3_000
        )
        assert store.statistics().loops == 0
    finally:
        store.close()


def test_sqlite_a_batch_reads_a_bounded_number_of_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_backend, "PRUNE_SCAN", 5)
    store = SqliteBackend(tmp_path / "loopactors.db")
    try:
        for n in range(12):  # recent finished loops, not due, before the due ones in id order
            store.commit(write(f"a-recent-{n:02}", "complete", RECENT, 1))
        for n in range(3):
            store.commit(write(f"z-old-{n}", "complete", OLD, 1))
        cursors, total = [], 0
        cursor: str | None = ""
        while cursor is not None:
            report, cursor = store.prune_batch(CUTOFF, after=cursor, limit=2)
            cursors.append(cursor)
            total += report.loops
        # Five loops looked at per batch: the due ones at the end are still all found.
        assert cursors == ["a-recent-04", "a-recent-09", "z-old-1", None]
        assert total == 3
        assert store.statistics().loops == 12
    finally:
        store.close()


@pytest.mark.parametrize("dry_run", [True, False])
def test_sqlite_prune_stays_under_an_old_sqlite_parameter_limit(
    tmp_path: Path, dry_run: bool
) -> None:
    # SQLite before 3.32 allows 999 parameters a statement (still the system library of
    # some distributions); a full batch of ids fits.
    store = SqliteBackend(tmp_path / "loopactors.db")
    store._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    try:
        store.commit([w for n in range(600) for w in write(f"l{n:03}", "complete", OLD, 1)])
        assert store.prune(CUTOFF, dry_run=dry_run).loops == 600
    finally:
        store.close()


def test_an_exact_multiple_of_the_batch_is_pruned_whole(backend: StoreBackend) -> None:
    for n in range(6):
        backend.commit(write(f"old-{n}", "complete", OLD, 1))
    report, cursor = backend.prune_batch(CUTOFF, limit=3)
    assert (report.loops, cursor) == (3, "old-2")
    report, cursor = backend.prune_batch(CUTOFF, after="old-2", limit=3)
    assert report.loops == 3
    assert backend.prune_batch(CUTOFF, after=cursor or "", limit=3)[0].loops == 0
    assert backend.statistics().loops == 0


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_a_batch_takes_at_least_one_loop(backend: StoreBackend, limit: object) -> None:
    with pytest.raises(ValueError, match="at least 1 loop"):
        backend.prune_batch(CUTOFF, limit=limit)  # type: ignore[arg-type]


def test_a_failure_in_a_later_batch_says_what_the_earlier_ones_removed(
    backend: StoreBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        backend.commit(write(f"old-{n}", "complete", OLD, 1))
    real = type(backend).prune_batch
    calls = []

    def prune_batch(self: StoreBackend, before: float, **options: object) -> object:
        calls.append(options)
        if len(calls) == 2:
            raise StoreError("cannot prune the store: disk on fire")
        return real(self, before, **{**options, "limit": 2})  # type: ignore[arg-type]

    monkeypatch.setattr(type(backend), "prune_batch", prune_batch)
    with pytest.raises(StoreError) as info:
        backend.prune(CUTOFF)
    assert str(info.value) == (
        "cannot prune the store: disk on fire; "
        "before that, this prune removed 2 loops, 2 rounds, 4 events"
    )


def test_a_batch_past_its_deadline_ends_after_the_loop_in_hand(backend: StoreBackend) -> None:
    for n in range(3):
        backend.commit(write(f"old-{n}", "complete", OLD, 2))
    sizes: list[int] = []
    cursor: str | None = ""
    while cursor is not None:
        report, cursor = backend.prune_batch(CUTOFF, after=cursor, deadline=0.0)  # long past
        sizes.append(report.loops)
        assert report.rounds == 2 * report.loops
    # One loop a batch on a database (at least one is always taken); in memory a batch
    # costs microseconds a loop, and takes them all.
    assert sizes == ([3] if backend.kind == "memory" else [1, 1, 1])
    assert backend.statistics().loops == 0
