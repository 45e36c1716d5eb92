"""Both store backends against the StoreBackend contract; SQLite durability and schema rules."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from loopactors.errors import AmbiguousLoopId, ConfigError, LoopNotFound, StoreError
from loopactors.loops._events import (
    AnyEvent,
    LoopFinished,
    LoopInterrupted,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopStarted,
    RoundFinished,
    RoundStarted,
    RoundSummary,
)
from loopactors.loops._model import LoopSpec, LoopState, Phase, RoundRecord, RoundStatus
from loopactors.storage import (
    MemoryBackend,
    SqliteBackend,
    StoreBackend,
    StoreStatistics,
    Write,
    _sqlite,
    open_backend,
)

from ..postgres import STORES, store_url

SPEC = LoopSpec(task="tidy the docs", rounds=3)


def state(
    loop_id: str, phase: Phase = "dispatching", *, created_at: float = 1.0, rnd: int = 1
) -> LoopState:
    return LoopState(
        loop_id=loop_id, spec=SPEC, phase=phase, round=rnd, created_at=created_at, updated_at=2.0
    )


def record(
    loop_id: str, rnd: int, status: RoundStatus = "completed", output: str = ""
) -> RoundRecord:
    return RoundRecord(loop_id=loop_id, round=rnd, status=status, output=output)


def started(loop_id: str, rnd: int) -> RoundStarted:
    return RoundStarted(loop_id=loop_id, at=float(rnd), round=rnd, rounds=3, seed_source="task")


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    store = open_backend(store_url(request, request.param), tmp_path)
    yield store
    store.close()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "loopactors.db"


def test_open_backend_kinds(tmp_path: Path) -> None:
    assert isinstance(open_backend("memory", None), MemoryBackend)
    store = open_backend("sqlite", tmp_path / "a" / "b")
    try:
        assert isinstance(store, SqliteBackend)
        assert store.kind == "sqlite"
        assert (tmp_path / "a" / "b" / "loopactors.db").is_file()
    finally:
        store.close()


def test_open_backend_refuses_unknown_kind_and_missing_dir() -> None:
    with pytest.raises(ConfigError, match=r"unknown store 'redis'; accepted: sqlite, sqlite:DIR"):
        open_backend("redis", None)
    with pytest.raises(ConfigError, match=r"unknown store 'mysql://\*\*\*@host/db'"):
        open_backend("mysql://me:secret@host/db", None)  # the password is not shown
    with pytest.raises(StoreError, match="state directory"):
        open_backend("sqlite", None)


def test_empty_store(backend: StoreBackend) -> None:
    assert backend.get_loop("nope") is None
    assert backend.list_loops() == []
    assert backend.rounds("nope") == []
    assert backend.events("nope") == []
    assert backend.statistics() == StoreStatistics(
        loops=0, live_loops=0, rounds=0, events=0, commits=0, writes=0
    )


def test_commit_and_read_back(backend: StoreBackend) -> None:
    write = Write(state=state("a"), round=record("a", 1, output="hi"), events=(started("a", 1),))
    backend.commit([write])
    assert backend.get_loop("a") == write.state
    assert backend.rounds("a") == [write.round]
    assert backend.events("a") == [started("a", 1)]


def test_state_is_replaced(backend: StoreBackend) -> None:
    backend.commit([Write(state=state("a"))])
    backend.commit([Write(state=state("a", "complete", rnd=4))])
    assert backend.get_loop("a") == state("a", "complete", rnd=4)
    assert backend.list_loops() == [state("a", "complete", rnd=4)]


def test_round_upserted_once_by_key(backend: StoreBackend) -> None:
    backend.commit([Write(state=state("a"), round=record("a", 1, "running"))])
    # The same round re-run after recovery, under the same (loop_id, round) key.
    backend.commit([Write(state=state("a"), round=record("a", 1, "completed", "done"))])
    assert backend.rounds("a") == [record("a", 1, "completed", "done")]
    assert backend.statistics().rounds == 1


def test_rounds_ordered_by_number(backend: StoreBackend) -> None:
    for n in (3, 1, 2):
        backend.commit([Write(state=state("a"), round=record("a", n))])
    backend.commit([Write(state=state("b"), round=record("b", 9))])
    assert [r.round for r in backend.rounds("a")] == [1, 2, 3]


def test_round_summaries_of_many_loops_in_one_read(backend: StoreBackend) -> None:
    # More loops than one SQLite query takes ids, each with its rounds out of order.
    ids = [f"loop-{i:04d}" for i in range(1_200)]
    writes = []
    for i, loop_id in enumerate(ids):
        for n in (3, 1, 2)[: i % 4]:
            rec = msgspec.structs.replace(
                record(loop_id, n, "failed" if n == 2 else "completed", output="x" * n),
                duration=n / 10,
            )
            writes.append(Write(state=state(loop_id), round=rec))
    backend.commit(writes)
    asked = [*ids[::-1], "no-such-loop"]
    summaries = backend.round_summaries(asked)
    expected = {
        loop_id: tuple(
            RoundSummary(round=r.round, status=r.status, duration=r.duration)
            for r in backend.rounds(loop_id)
        )
        for loop_id in ids
        if backend.rounds(loop_id)
    }
    assert summaries == expected
    assert summaries["loop-0003"] == (
        RoundSummary(round=1, status="completed", duration=0.1),
        RoundSummary(round=2, status="failed", duration=0.2),
        RoundSummary(round=3, status="completed", duration=0.3),
    )
    assert "loop-0000" not in summaries  # no rounds: left out
    assert backend.round_summaries([]) == {}


def test_live_loops_are_the_live_ones_in_any_order(backend: StoreBackend) -> None:
    phases: list[Phase] = ["dispatching", "complete", "paused", "cancelled", "awaiting_worker"]
    backend.commit(
        [Write(state=state(f"l{i}", phase, created_at=float(i))) for i, phase in enumerate(phases)]
    )
    live = backend.live_loops()
    assert sorted(s.loop_id for s in live) == ["l0", "l2", "l4"]
    assert sorted(live, key=lambda s: s.loop_id) == sorted(
        backend.list_loops(live_only=True), key=lambda s: s.loop_id
    )


def test_several_writes_per_loop_in_one_batch(backend: StoreBackend) -> None:
    batch = [
        Write(state=state("a", rnd=1), round=record("a", 1, "running"), events=(started("a", 1),)),
        Write(state=state("b"), events=(started("b", 1),)),
        Write(state=state("a", rnd=2), round=record("a", 1), events=(started("a", 2),)),
        Write(state=state("a", "paused", rnd=2), events=(LoopPaused(loop_id="a", at=3, round=2),)),
    ]
    backend.commit(batch)
    assert backend.get_loop("a") == state("a", "paused", rnd=2)
    assert backend.rounds("a") == [record("a", 1)]
    assert backend.events("a") == [
        started("a", 1),
        started("a", 2),
        LoopPaused(loop_id="a", at=3, round=2),
    ]
    assert backend.events("b") == [started("b", 1)]
    stats = backend.statistics()
    assert (stats.loops, stats.rounds, stats.events) == (2, 1, 4)
    assert (stats.commits, stats.writes) == (1, 4)


def test_a_write_of_the_state_the_store_holds_appends_its_events(backend: StoreBackend) -> None:
    recovered = LoopRecovered(loop_id="a", at=3.0, phase="dispatching", round=1)
    backend.commit([Write(state=state("a"), events=(started("a", 1),))])
    backend.commit([Write(state=state("a"), events=(recovered,), state_stored=True)])
    # Written earlier in the same commit, then saved again unchanged; and the other way round.
    backend.commit(
        [
            Write(state=state("b", rnd=2), events=(started("b", 2),)),
            Write(state=state("b", rnd=2), state_stored=True),
            Write(state=state("c"), state_stored=True),
            Write(state=state("c", rnd=2)),
        ]
    )
    assert backend.get_loop("a") == state("a")
    assert backend.events("a") == [started("a", 1), recovered]
    assert backend.get_loop("b") == state("b", rnd=2)
    assert backend.get_loop("c") == state("c", rnd=2)


def test_sqlite_leaves_the_row_of_a_stored_state_alone(sqlite_path: Path) -> None:
    store = SqliteBackend(sqlite_path)
    try:
        store.commit([Write(state=state("a"), events=(started("a", 1),))])
        before = store._conn.total_changes
        recovered = LoopRecovered(loop_id="a", at=3.0, phase="dispatching", round=1)
        store.commit([Write(state=state("a"), events=(recovered,), state_stored=True)])
        assert store._conn.total_changes - before == 1  # the event's row only
        assert store.events("a") == [started("a", 1), recovered]
    finally:
        store.close()


def test_events_append_in_order_across_commits(backend: StoreBackend) -> None:
    for n in range(1, 6):
        backend.commit([Write(state=state("a"), events=(started("a", n),))])
    backend.commit([Write(state=state("a"), events=(started("a", 6), started("a", 7)))])
    assert [cast(RoundStarted, e).round for e in backend.events("a")] == list(range(1, 8))


def test_events_decode_to_their_classes(backend: StoreBackend) -> None:
    events: tuple[AnyEvent, ...] = (
        LoopStarted(loop_id="a", at=1, rounds=3, mode="fresh", worker="scripted"),
        started("a", 1),
        RoundFinished(
            loop_id="a", at=2, round=1, rounds=3, status="failed", duration=0.5, error="x"
        ),
        LoopPaused(loop_id="a", at=3, round=2),
        LoopResumed(loop_id="a", at=4, round=2),
        LoopRecovered(loop_id="a", at=5, phase="dispatching", round=2),
        LoopInterrupted(loop_id="a", at=6, round=2, rounds=3, reason="worker gone"),
        LoopFinished(
            loop_id="a",
            at=7,
            phase="escalated",
            rounds=3,
            completed_rounds=1,
            summary=(RoundSummary(round=1, status="failed", duration=0.5),),
            reason="too many failures",
            trigger="failures",
        ),
    )
    backend.commit([Write(state=state("a"), events=events)])
    back = backend.events("a")
    assert back == list(events)
    assert [type(e) for e in back] == [type(e) for e in events]


def test_list_loops_order_filter_and_limit(backend: StoreBackend) -> None:
    phases: list[Phase] = ["dispatching", "complete", "paused", "error", "awaiting_worker"]
    backend.commit(
        [Write(state=state(f"l{i}", p, created_at=float(i))) for i, p in enumerate(phases)]
    )
    assert [s.loop_id for s in backend.list_loops()] == ["l4", "l3", "l2", "l1", "l0"]
    assert [s.loop_id for s in backend.list_loops(live_only=True)] == ["l4", "l2", "l0"]
    assert [s.loop_id for s in backend.list_loops(limit=2)] == ["l4", "l3"]
    assert [s.loop_id for s in backend.list_loops(live_only=True, limit=2)] == ["l4", "l2"]
    assert backend.list_loops(limit=0) == []
    assert backend.statistics().live_loops == 3
    with pytest.raises(ValueError, match="limit"):
        backend.list_loops(limit=-1)


def test_find_loop_ids_by_prefix(backend: StoreBackend) -> None:
    ids = ["6b0c11", "6b0c12", "6b0d", "6b", "7a", "6b0c11-child", "é9"]
    backend.commit([Write(state=state(i, "complete", created_at=1.0)) for i in ids])
    assert backend.find_loop_ids("6b0c", limit=10) == ["6b0c11", "6b0c11-child", "6b0c12"]
    assert backend.find_loop_ids("6b", limit=2) == ["6b", "6b0c11"]
    assert backend.find_loop_ids("7a", limit=10) == ["7a"]
    assert backend.find_loop_ids("é", limit=10) == ["é9"]
    assert backend.find_loop_ids("x", limit=10) == []
    assert backend.find_loop_ids("", limit=3) == ["6b", "6b0c11", "6b0c11-child"]


def test_list_loops_ties_broken_by_id(backend: StoreBackend) -> None:
    backend.commit([Write(state=state(i, created_at=5.0)) for i in ("b", "c", "a")])
    assert [s.loop_id for s in backend.list_loops()] == ["c", "b", "a"]


def test_list_loops_after_a_cursor_pages_without_gaps_or_repeats(backend: StoreBackend) -> None:
    created = {"a": 1.0, "b": 2.0, "c": 2.0, "d": 3.0, "e": 4.0}
    backend.commit([Write(state=state(i, created_at=t)) for i, t in created.items()])
    pages: list[list[str]] = []
    after: tuple[float, str] | None = None
    while True:
        page = backend.list_loops(limit=2, after=after)
        if not page:
            break
        pages.append([s.loop_id for s in page])
        after = (page[-1].created_at, page[-1].loop_id)
    assert pages == [["e", "d"], ["c", "b"], ["a"]]
    assert [s.loop_id for s in backend.list_loops(after=(2.0, "c"), live_only=True)] == ["b", "a"]


def test_statistics_count_commits_and_writes(backend: StoreBackend) -> None:
    backend.commit([Write(state=state("a")), Write(state=state("b"))])
    backend.commit([Write(state=state("a", "complete"), round=record("a", 1))])
    backend.commit([])  # nothing to do: not a commit
    assert backend.statistics() == StoreStatistics(
        loops=2,
        live_loops=1,
        rounds=1,
        events=0,
        commits=2,
        writes=3,
        phases={"complete": 1, "dispatching": 1},
    )


def test_closed_store_refuses(backend: StoreBackend) -> None:
    backend.commit([Write(state=state("a"))])
    backend.close()
    with pytest.raises(StoreError):
        backend.get_loop("a")
    with pytest.raises(StoreError):
        backend.commit([Write(state=state("b"))])


def test_usable_from_another_thread(backend: StoreBackend) -> None:
    # The Store actor calls the backend through trio.to_thread.
    seen: list[LoopState | None] = []

    def work() -> None:
        backend.commit([Write(state=state("a"))])
        seen.append(backend.get_loop("a"))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [state("a")]


# -- SQLite only ---------------------------------------------------------------------------------


def test_sqlite_survives_reopen(sqlite_path: Path) -> None:
    store = SqliteBackend(sqlite_path)
    store.commit([Write(state=state("a"), round=record("a", 1), events=(started("a", 1),))])
    store.close()
    store = SqliteBackend(sqlite_path)
    try:
        store.commit([Write(state=state("a", rnd=2), events=(started("a", 2),))])
        assert store.get_loop("a") == state("a", rnd=2)
        assert store.rounds("a") == [record("a", 1)]
        assert store.events("a") == [started("a", 1), started("a", 2)]
        # Counters are per open; counts are of the file.
        assert store.statistics() == StoreStatistics(
            loops=1,
            live_loops=1,
            rounds=1,
            events=2,
            commits=1,
            writes=1,
            phases={"dispatching": 1},
        )
    finally:
        store.close()


def test_sqlite_file_settings(sqlite_path: Path) -> None:
    SqliteBackend(sqlite_path).close()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (len(_sqlite._MIGRATIONS),)
    conn.close()


def _assert_untouched(store: StoreBackend) -> None:
    assert store.get_loop("a") == state("a")
    assert store.get_loop("new") is None
    assert store.rounds("a") == [record("a", 1)]
    assert store.events("a") == [started("a", 1)]
    stats = store.statistics()
    assert (stats.loops, stats.rounds, stats.events, stats.commits) == (1, 1, 1, 1)


def test_sqlite_commit_is_atomic_when_a_state_fails_to_encode(sqlite_path: Path) -> None:
    store = SqliteBackend(sqlite_path)
    try:
        store.commit([Write(state=state("a"), round=record("a", 1), events=(started("a", 1),))])
        unencodable = msgspec.structs.replace(state("bad"), last_output=cast(Any, object()))
        batch = [
            Write(state=state("a", "complete"), round=record("a", 2), events=(started("a", 2),)),
            Write(state=state("new"), round=record("new", 1)),
            Write(state=unencodable),
        ]
        with pytest.raises(StoreError, match="cannot commit 3 writes") as info:
            store.commit(batch)
        assert isinstance(info.value.__cause__, TypeError)
        _assert_untouched(store)
        store.commit([Write(state=state("new"))])
        assert store.get_loop("new") == state("new")
    finally:
        store.close()


def test_sqlite_commit_is_atomic_when_an_event_fails(
    sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteBackend(sqlite_path)
    try:
        store.commit([Write(state=state("a"), round=record("a", 1), events=(started("a", 1),))])
        real = store._encoder

        class FailsOnThirdEvent:
            def __init__(self) -> None:
                self.events = 0

            def encode(self, obj: object) -> bytes:
                if isinstance(obj, RoundStarted):
                    self.events += 1
                    if self.events == 3:
                        raise RuntimeError("disk on fire")
                return real.encode(obj)

        monkeypatch.setattr(store, "_encoder", FailsOnThirdEvent())
        events = tuple(started("a", n) for n in (2, 3, 4))
        with pytest.raises(StoreError, match="disk on fire"):
            store.commit([Write(state=state("new"), round=record("a", 2), events=events)])
        monkeypatch.undo()
        _assert_untouched(store)
        store.commit([Write(state=state("a"), events=(started("a", 2),))])
        assert store.events("a") == [started("a", 1), started("a", 2)]
    finally:
        store.close()


def test_sqlite_refuses_newer_schema(sqlite_path: Path) -> None:
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    newest = len(_sqlite._MIGRATIONS)
    with pytest.raises(
        StoreError, match=rf"newer loopactors \(schema 99, this one reads up to {newest}\)"
    ):
        SqliteBackend(sqlite_path)


def test_sqlite_refuses_a_file_that_is_not_a_database(sqlite_path: Path) -> None:
    sqlite_path.write_bytes(b"definitely not sqlite\n" * 100)
    with pytest.raises(StoreError, match="not an SQLite database") as info:
        SqliteBackend(sqlite_path)
    assert str(sqlite_path) in str(info.value)


def test_sqlite_migrates_an_empty_version_0_file(sqlite_path: Path) -> None:
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute("CREATE TABLE unrelated (x)")  # makes a real file at user_version 0
        conn.execute("DROP TABLE unrelated")
    conn.close()
    store = SqliteBackend(sqlite_path)
    try:
        store.commit([Write(state=state("a"), round=record("a", 1), events=(started("a", 1),))])
        assert store.get_loop("a") == state("a")
    finally:
        store.close()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (len(_sqlite._MIGRATIONS),)
    conn.close()


def test_sqlite_pending_migrations_apply_in_one_transaction(
    sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    SqliteBackend(sqlite_path).close()
    current = len(_sqlite._MIGRATIONS)
    broken = ("CREATE TABLE extra (x)", "CREATE TABLE loops (x)")  # second one fails
    monkeypatch.setattr(_sqlite, "_MIGRATIONS", [*_sqlite._MIGRATIONS, broken])
    with pytest.raises(StoreError, match="already exists"):
        SqliteBackend(sqlite_path)
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (current,)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "extra" not in tables
    conn.close()

    good = ("CREATE TABLE extra (x)",)
    monkeypatch.setattr(_sqlite, "_MIGRATIONS", [*_sqlite._MIGRATIONS[:current], good])
    SqliteBackend(sqlite_path).close()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (current + 1,)
    conn.close()


def test_sqlite_migration_2_adds_round_cost_to_a_version_1_file(sqlite_path: Path) -> None:
    with sqlite3.connect(sqlite_path) as conn:  # a file as version 1 left it
        for statement in _sqlite._MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    store = SqliteBackend(sqlite_path)
    try:
        costly = msgspec.structs.replace(record("a", 1), cost_usd=0.25)
        store.commit([Write(state=state("a"), round=costly, events=())])
        assert store.rounds("a")[0].cost_usd == 0.25
    finally:
        store.close()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("SELECT cost_usd FROM rounds").fetchall() == [(0.25,)]
    conn.close()


def test_a_loop_is_found_by_the_tail_of_its_id(backend: StoreBackend) -> None:
    ids = ["692d8a1b-0f3e5a7c9b1d2e4f", "692d8a1b-77aa00c4e2b1d9a3", "692d8a1c-5be2c0d4e2b1d9a3"]
    backend.commit([Write(state=state(i, "complete", created_at=1.0)) for i in ids])
    assert backend.find_loop_ids_ending("9b1d2e4f", limit=10) == [ids[0]]
    assert backend.find_loop_ids_ending("e2b1d9a3", limit=10) == ids[1:]
    assert backend.find_loop_ids_ending("é", limit=10) == []
    assert backend.resolve_loop_id("9b1d2e4f") == ids[0]
    assert backend.resolve_loop_id("c4e2b1d9a3") == ids[1]
    with pytest.raises(AmbiguousLoopId, match="loop id tail 'e2b1d9a3' matches several"):
        backend.resolve_loop_id("e2b1d9a3")
    # A prefix wins over a tail, and a tail shorter than MIN_TAIL names nothing.
    assert backend.resolve_loop_id("692d8a1c") == ids[2]
    assert backend.matching_loop_ids("2e4f", limit=10) == []
    with pytest.raises(LoopNotFound):
        backend.resolve_loop_id("d2e4f")
