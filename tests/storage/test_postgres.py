"""The PostgreSQL store beyond the shared contract (test_backends.py runs that on it too):
what its rows hold, its per-loop event numbering, its schema rules, two nodes' connections
on one database, and errors that never show a password."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import msgspec
import psycopg
import pytest

from loopactors.errors import ConfigError, StoreError
from loopactors.loops._events import RoundStarted
from loopactors.loops._model import LoopSpec, LoopState, RoundRecord
from loopactors.storage import (
    StoreBackend,
    Write,
    check_store,
    open_backend,
    open_store,
    store_kind,
)
from loopactors.storage._postgres import PostgresBackend

SPEC = LoopSpec(task="tidy the docs", rounds=3)


def state(loop_id: str, rnd: int = 1) -> LoopState:
    return LoopState(
        loop_id=loop_id, spec=SPEC, phase="dispatching", round=rnd, created_at=1.0, updated_at=2.0
    )


def started(loop_id: str, rnd: int) -> RoundStarted:
    return RoundStarted(loop_id=loop_id, at=float(rnd), round=rnd, rounds=3, seed_source="task")


@pytest.fixture
def store(postgres_url: str) -> Iterator[StoreBackend]:
    backend = open_backend(postgres_url, None)
    yield backend
    backend.close()


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def test_outputs_with_nul_and_any_unicode_round_trip(store: StoreBackend) -> None:
    output = "before\x00after \u2603 \U0001f600 \ud7ff"
    record = RoundRecord(loop_id="a", round=1, status="completed", output=output)
    store.commit([Write(state=state("a"), round=record)])
    assert store.rounds("a")[0].output == output


def test_events_are_numbered_per_loop_without_gaps_across_commits(
    store: StoreBackend, postgres_url: str
) -> None:
    store.commit(
        [
            Write(state=state("a", 1), events=(started("a", 1),)),
            Write(state=state("b", 1), events=(started("b", 1),)),
            Write(state=state("a", 2), events=(started("a", 2), started("a", 3))),
        ]
    )
    store.commit([Write(state=state("a", 4), events=(started("a", 4),)), Write(state=state("c"))])
    rows = _rows(postgres_url, "SELECT loop_id, seq, type FROM events ORDER BY loop_id, seq")
    assert rows == [
        ("a", 1, "round_started"),
        ("a", 2, "round_started"),
        ("a", 3, "round_started"),
        ("a", 4, "round_started"),
        ("b", 1, "round_started"),
    ]
    assert [e.round for e in store.events("a") if isinstance(e, RoundStarted)] == [1, 2, 3, 4]
    counters = _rows(postgres_url, "SELECT loop_id, event_seq FROM loops ORDER BY loop_id")
    assert counters == [("a", 4), ("b", 1), ("c", 0)]


def test_a_commit_is_all_or_nothing(store: StoreBackend, postgres_url: str) -> None:
    store.commit([Write(state=state("a"), events=(started("a", 1),))])
    # An event of a loop the commit has no state for cannot be numbered: nothing lands.
    with pytest.raises(StoreError, match="no state in the commit"):
        store.commit([Write(state=state("b"), events=(started("b", 1), started("zzz", 1)))])
    assert store.get_loop("b") is None
    assert _rows(postgres_url, "SELECT count(*) FROM events") == [(1,)]


def test_prefix_search_compares_bytes_whatever_the_collation(store: StoreBackend) -> None:
    ids = ["abc", "abC", "ab-c", "ab_c", "ab%c", "ab\u00e9", "abd", "b"]
    store.commit([Write(state=state(i)) for i in ids])
    assert store.find_loop_ids("ab", limit=10) == sorted(i for i in ids if i.startswith("ab"))
    assert store.find_loop_ids("ab%", limit=10) == ["ab%c"]  # no LIKE wildcard
    assert store.find_loop_ids("ab_", limit=10) == ["ab_c"]


def test_writers_starting_together_migrate_once_and_each_owns_what_it_writes(
    postgres_url: str,
) -> None:
    opened: list[StoreBackend] = []
    refused: list[StoreError] = []

    def open_one() -> None:
        try:
            opened.append(open_backend(postgres_url, None))
        except StoreError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # All migrated or waited for the one that did; each holds a lease of its own.
    assert len(opened) == 4, refused
    assert _rows(postgres_url, "SELECT value FROM loopactors_meta") == [
        (str(PostgresBackend.schema),)
    ]
    assert _rows(postgres_url, "SELECT count(*) FROM nodes WHERE state = 'live'") == [(4,)]
    reader = open_store(postgres_url, None, read_only=True)  # readers are never refused
    assert reader is not None
    try:
        opened[0].commit([Write(state=state("a"))])
        assert reader.get_loop("a") == state("a")
        # A live writer's loop is not another's to write.
        with pytest.raises(StoreError, match=r"loop a is run by the live node command-"):
            opened[1].commit([Write(state=state("a", 2))])
        assert reader.get_loop("a") == state("a")
    finally:
        reader.close()
        for backend in opened:
            backend.close()
    # Its writer gone, the loop is free: the next writer takes it over as it writes it.
    again = open_backend(postgres_url, None)
    again.commit([Write(state=state("a", 2))])
    assert again.get_loop("a") == state("a", 2)
    again.close()


def test_a_newer_schema_is_refused(store: StoreBackend, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE loopactors_meta SET value = '99' WHERE key = 'schema'")
    newest = PostgresBackend.schema
    with pytest.raises(
        StoreError, match=rf"newer loopactors \(schema 99, this one reads up to {newest}\)"
    ):
        open_backend(postgres_url, None)
    with pytest.raises(StoreError, match="newer loopactors"):
        open_store(postgres_url, None, read_only=True)


def test_read_only_open_of_an_empty_database_finds_no_store_and_creates_nothing(
    postgres_url: str,
) -> None:
    assert open_store(postgres_url, None, read_only=True) is None
    tables = "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
    assert _rows(postgres_url, tables) == [(0,)]


def test_errors_never_show_the_password(postgres_server: object) -> None:
    url = "postgresql://loop:hunter2@/nosuchdb?host=/nonexistent-socket-dir"
    with pytest.raises(StoreError) as caught:
        open_backend(url, None)
    assert "hunter2" not in str(caught.value)
    assert "***" in str(caught.value)
    with pytest.raises(ConfigError) as bad:
        check_store("postgresql:loop:hunter2@host/db")
    assert "PostgreSQL store is a URL" in str(bad.value)


def test_the_kind_runs_off_the_event_loop_and_keeps_its_data_outside(postgres_url: str) -> None:
    kind = store_kind(postgres_url)
    assert kind.blocking
    assert not kind.in_process
    assert not kind.local_files
    backend = open_backend(postgres_url, None)
    assert isinstance(backend, PostgresBackend)
    backend.close()


def test_without_psycopg_a_clear_error_names_the_extra(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'loopactors\[postgres\]'"):
        open_backend(postgres_url, None)


def test_a_store_of_one_writer_migrates_to_owned_loops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 2 (one node at a time) to 3: every loop owned by nobody, fence 1, its root
    found up its parents (one whose parent was pruned is its own root)."""
    from loopactors.storage import _postgres

    monkeypatch.setattr(_postgres, "_MIGRATIONS", _postgres._MIGRATIONS[:2])
    monkeypatch.setattr(PostgresBackend, "schema", 2)
    old = PostgresBackend(postgres_url, node_id="")
    encode = msgspec.json.encode
    rows = []
    for loop_id, parent in (("r", None), ("c", "r"), ("g", "c"), ("o", "pruned"), ("s", None)):
        spec = LoopSpec(task=loop_id, rounds=3, parent_id=parent)
        rows.append((loop_id, encode(msgspec.structs.replace(state(loop_id), spec=spec))))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for loop_id, body in rows:
            conn.execute(
                "INSERT INTO loops (loop_id, phase, created_at, updated_at, state) "
                "VALUES (%s, 'dispatching', 1, 2, %s)",
                (loop_id, body),
            )
    old.close()
    monkeypatch.undo()
    PostgresBackend(postgres_url, node_id="").close()
    assert _rows(postgres_url, "SELECT value FROM loopactors_meta") == [
        (str(PostgresBackend.schema),)
    ]
    found = _rows(postgres_url, "SELECT loop_id, root_id, owner, fence FROM loops ORDER BY 1")
    assert found == [
        ("c", "r", None, 1),
        ("g", "r", None, 1),
        ("o", "o", None, 1),
        ("r", "r", None, 1),
        ("s", "s", None, 1),
    ]
