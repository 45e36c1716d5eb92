"""The lease a node holds on a PostgreSQL store, and the fence every commit passes through:
deterministic, two incarnations on one database, expiry on the database's clock only."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import msgspec
import psycopg
import pytest
import trio

from loopactors.errors import LeaseLost, StoreError
from loopactors.loops import LoopSpec, LoopState
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.storage import Write, open_store, parse_store
from loopactors.storage._postgres import Lease, PostgresBackend, _hold


def state(loop_id: str, rnd: int) -> LoopState:
    return LoopState(
        loop_id=loop_id,
        spec=LoopSpec(task="t", rounds=50),
        phase="dispatching",
        round=rnd,
        created_at=1.0,
        updated_at=2.0,
    )


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def expire(url: str, node_id: str) -> None:
    """The lease ran out, as seen by the database (no waiting)."""
    sql(
        url,
        "UPDATE nodes SET expires_at = clock_timestamp() - interval '1 s' WHERE node_id = %s",
        (node_id,),
    )


def lease(url: str) -> Lease:
    return Lease(url, shown="the test store", name="node")


def test_a_second_node_is_refused_while_the_first_holds_its_lease(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()  # the tables
    first = lease(postgres_url)
    try:
        with pytest.raises(
            StoreError, match=rf"in use by another loopactors runtime \({first.node_id}"
        ):
            lease(postgres_url)
    finally:
        first.release()
    lease(postgres_url).release()  # left: free at once, no waiting out the lease


def test_a_zombie_commit_after_a_takeover_changes_nothing(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    store_a.commit([Write(state=state("x", 1))])
    expire(postgres_url, a.node_id)  # a stalls past its lease (SIGSTOP, a VM pause)
    b = lease(postgres_url)  # declares a dead and takes the store
    store_b = PostgresBackend(postgres_url, node_id=b.node_id)
    store_b.commit([Write(state=state("x", 2))])
    # a wakes up: its commit is fenced, and its renewal never revives it.
    with pytest.raises(LeaseLost, match="has ended"):
        store_a.commit([Write(state=state("x", 99)), Write(state=state("y", 1))])
    assert not a.renew()
    assert store_b.get_loop("x") == state("x", 2)
    assert store_b.get_loop("y") is None
    assert sql(
        postgres_url, "SELECT state, dead_by FROM nodes WHERE node_id = %s", (a.node_id,)
    ) == [("dead", b.node_id)]
    assert b.renew()
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


def test_an_expired_lease_not_yet_taken_over_may_still_be_renewed(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    expire(postgres_url, a.node_id)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    with pytest.raises(LeaseLost):  # expired: no commit, renewed or not yet
        store_a.commit([Write(state=state("x", 1))])
    assert a.renew()  # whoever acts first wins: here the holder
    store_a.commit([Write(state=state("x", 1))])
    with pytest.raises(StoreError, match="in use"):
        lease(postgres_url)
    store_a.close()
    a.release()


def test_lease_decisions_never_read_the_wall_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    real = time.time
    for jump in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda jump=jump: real() + jump)
        a = lease(postgres_url)
        store_a = PostgresBackend(postgres_url, node_id=a.node_id)
        assert a.renew()
        store_a.commit([Write(state=state("x", 1))])
        with pytest.raises(StoreError, match="in use"):
            lease(postgres_url)
        store_a.close()
        a.release()


def test_a_restart_on_the_same_machine_takes_over_from_its_dead_predecessor_at_once(
    postgres_url: str,
) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has any more
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    sql(
        postgres_url,
        "INSERT INTO nodes (node_id, name, host, pid, boot_id, expires_at) "
        "VALUES ('killed', 'node', %s, %s, %s, clock_timestamp() + interval '1 hour')",
        (socket.gethostname(), gone.pid, boot),
    )
    successor = lease(postgres_url)  # no waiting out the hour
    assert sql(postgres_url, "SELECT state FROM nodes WHERE node_id = 'killed'") == [("dead",)]
    successor.release()
    # On another machine, a live-looking lease is respected whatever its pid.
    sql(
        postgres_url,
        "INSERT INTO nodes (node_id, name, host, pid, boot_id, expires_at) "
        "VALUES ('elsewhere', 'node', 'another-host', %s, %s, "
        "clock_timestamp() + interval '1 hour')",
        (gone.pid, boot),
    )
    with pytest.raises(StoreError, match=r"in use by another loopactors runtime \(elsewhere"):
        lease(postgres_url)


def test_incarnations_that_ended_over_a_day_ago_are_forgotten(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    sql(
        postgres_url,
        "INSERT INTO nodes (node_id, name, host, pid, expires_at, state) VALUES "
        "('old', 'node', 'h', 1, clock_timestamp() - interval '2 days', 'left'), "
        "('recent', 'node', 'h', 1, clock_timestamp() - interval '1 hour', 'dead')",
    )
    taker = lease(postgres_url)
    names = sql(postgres_url, "SELECT node_id FROM nodes ORDER BY node_id")
    assert names == sorted([("recent",), (taker.node_id,)])
    taker.release()


async def test_a_runtime_taken_over_stops_with_lease_lost_and_writes_nothing_more(
    postgres_url: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(
        store=postgres_url,
        state_dir=tmp_path,
        lease_ttl=1.0,
        kill_grace=0.0,
        inter_round_delay=0.05,
        shutdown_grace=5.0,
    )
    with pytest.raises(LeaseLost, match="taken over by another node"):
        async with open_runtime(config) as rt:
            handle = rt.handle(await rt.start("|loop:50| long work"))
            with rt.subscribe(handle.loop_id) as events:
                async for _ in events:
                    break  # it runs
            # Another node declares this one dead (its lease expired, as the taker saw it).
            await trio.to_thread.run_sync(
                sql, postgres_url, "UPDATE nodes SET state = 'dead' WHERE state = 'live'"
            )
            [(seq_at_death,)] = await trio.to_thread.run_sync(
                sql, postgres_url, "SELECT event_seq FROM loops"
            )
            await trio.sleep_forever()  # cancelled by the lease keeper's next renewal
    # Nothing it committed after being declared dead reached the store; a successor resumes
    # the loop from there.
    [(seq_after,)] = sql(postgres_url, "SELECT event_seq FROM loops")
    assert seq_after == seq_at_death
    reader = open_store(postgres_url, None, read_only=True)
    assert reader is not None
    assert not reader.get_loop(handle.loop_id).terminal  # type: ignore[union-attr]
    reader.close()
    async with open_runtime(config.replace(lease_ttl=10.0)) as rt:
        assert (await rt.get(handle.loop_id)).round >= 1


async def test_a_runtime_failing_as_it_stops_for_its_lost_lease_says_lease_lost(
    postgres_url: str,
) -> None:
    """A node paused past its lease wakes up to connections the server ended: what fails
    on them while its runtime stops is not the reason it stops."""
    with pytest.raises(LeaseLost, match="taken over by another node") as caught:
        async with _hold(parse_store(postgres_url), ttl=1.0, stop_margin=0.0):
            await trio.to_thread.run_sync(
                sql, postgres_url, "UPDATE nodes SET state = 'dead' WHERE state = 'live'"
            )
            try:
                await trio.sleep_forever()  # cancelled by the lease keeper's next renewal
            finally:
                raise StoreError("server closed the connection unexpectedly")
    assert "server closed the connection" in repr(caught.value.__cause__)


async def test_a_second_runtime_on_the_store_is_refused(postgres_url: str, tmp_path: Path) -> None:
    config = RuntimeConfig(store=postgres_url, state_dir=tmp_path / "a", shutdown_grace=5.0)
    async with open_runtime(config):
        with pytest.raises(StoreError, match="in use by another loopactors runtime"):
            async with open_runtime(config.replace(state_dir=tmp_path / "b")):
                pass
    async with open_runtime(config.replace(state_dir=tmp_path / "b")):
        pass  # the first left: the store is free at once


def test_a_zombie_prunes_nothing_and_touches_no_notification(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    finished = msgspec.structs.replace(state("old", 1), phase="complete", updated_at=1.0)
    store_a.commit([Write(state=finished)])
    sql(
        postgres_url,
        "INSERT INTO notifications (loop_id, next_at, notification) VALUES ('old', 0, '{}')",
    )
    expire(postgres_url, a.node_id)
    b = lease(postgres_url)
    with pytest.raises(LeaseLost):
        store_a.prune_batch(time.time())
    with pytest.raises(LeaseLost):
        store_a.notification_done(1)
    assert sql(postgres_url, "SELECT count(*) FROM loops") == [(1,)]
    assert sql(postgres_url, "SELECT count(*) FROM notifications") == [(1,)]
    store_b = PostgresBackend(postgres_url, node_id=b.node_id)
    report, _ = store_b.prune_batch(time.time())  # the holder may
    assert report.loops == 1
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


def test_a_transaction_stalled_on_the_lease_row_loses_to_the_server_timeout(
    postgres_url: str,
) -> None:
    """A node frozen inside a transaction (SIGSTOP mid-prune) holds its lease row locked
    FOR SHARE; the server ends that session (``idle_in_transaction_session_timeout``, 2 s),
    so a takeover waits for that, not for as long as the node stays frozen."""
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    store_a.commit([Write(state=state("x", 1))])
    expire(postgres_url, a.node_id)
    connection = store_a._conn  # the stall is in the store's own connection
    connection.execute("BEGIN")
    connection.execute("SELECT 1 FROM nodes WHERE node_id = %s FOR SHARE", (a.node_id,))
    # ... and a stops here, in its transaction, holding the row.
    b = lease(postgres_url)  # waits on the row lock until the server ends a's session
    assert sql(
        postgres_url, "SELECT state, dead_by FROM nodes WHERE node_id = %s", (a.node_id,)
    ) == [("dead", b.node_id)]
    with pytest.raises(StoreError):  # a wakes: its session is gone, it writes nothing
        store_a.commit([Write(state=state("x", 99))])
    store_b = PostgresBackend(postgres_url, node_id=b.node_id)
    assert store_b.get_loop("x") == state("x", 1)
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()
