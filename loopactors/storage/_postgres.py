"""A store in a PostgreSQL database, which several nodes can share (docs/multinode.md).

psycopg 3, synchronous: the Store actor calls this backend in a worker thread, one call at
a time (``StoreKind.blocking``). psycopg takes ~0.7 s to import, so it is imported when a
``postgresql://`` store is opened, never at start-up (tests/cli/test_imports.py).

Rows carry the msgspec-JSON of the committed objects in ``bytea`` (an output may hold NUL,
which ``text`` and ``jsonb`` refuse); the other columns exist to be queried. Ids compare
``COLLATE "C"`` (by their bytes, as SQLite does), so a prefix search is a range on the
primary key whatever the database's collation. Events carry a per-loop ``seq``: the order a
loop's log was appended in, gap-free. A group commit is one statement: one round trip.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._util import closed_on_failure, pid_exists
from ..errors import ConfigError, LeaseLost, StoreError
from ..loops import (
    TERMINAL_PHASES,
    AnyEvent,
    LoopState,
    RoundSummary,
)
from ._base import (
    NodeLease,
    Write,
    queued_by,
)
from ._kinds import Durability, StoreKind, StoreUrl, check_durability
from ._sql import SqlBackend, event_type, latest_rows

if TYPE_CHECKING:
    import psycopg

__all__ = ["KIND", "Lease", "PostgresBackend"]

log = logging.getLogger("loopactors.store")

# Migration N (1-based) brings a schema from version N-1 to N. Append only.
_MIGRATIONS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE loops (
            loop_id text COLLATE "C" PRIMARY KEY,
            phase text NOT NULL,
            created_at float8 NOT NULL,
            updated_at float8 NOT NULL,
            event_seq bigint NOT NULL DEFAULT 0,
            state bytea NOT NULL
        )""",
        "CREATE INDEX loops_by_phase ON loops (phase)",
        "CREATE INDEX loops_by_created ON loops (created_at DESC, loop_id DESC)",
        """CREATE TABLE rounds (
            loop_id text COLLATE "C" NOT NULL,
            round integer NOT NULL,
            status text NOT NULL,
            cost_usd float8 NOT NULL DEFAULT 0,
            record bytea NOT NULL,
            PRIMARY KEY (loop_id, round)
        )""",
        """CREATE TABLE events (
            loop_id text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            type text NOT NULL,
            event bytea NOT NULL,
            PRIMARY KEY (loop_id, seq)
        )""",
        # The notification queue (docs/notifications.md): one row per message and URL.
        """CREATE TABLE notifications (
            id bigserial PRIMARY KEY,
            loop_id text COLLATE "C" NOT NULL,
            next_at float8 NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            notification bytea NOT NULL
        )""",
        "CREATE INDEX notifications_due ON notifications (next_at, id)",
    ),
    # 2: the lease of the node that writes the store, one row per process incarnation (an
    # id is never used again); expiry on the database's clock only.
    (
        """CREATE TABLE nodes (
            node_id text PRIMARY KEY,
            name text NOT NULL,
            host text NOT NULL,
            pid integer NOT NULL,
            boot_id text NOT NULL DEFAULT '',
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            expires_at timestamptz NOT NULL,
            state text NOT NULL DEFAULT 'live',
            dead_at timestamptz,
            dead_by text
        )""",
        "CREATE INDEX nodes_live ON nodes (state) WHERE state = 'live'",
    ),
]

# One statement, so one round trip, for a whole group commit. It first locks this node's
# own lease row (FOR SHARE), live and unexpired on the database's clock, and writes nothing
# without it: a node declared dead (its row locked FOR UPDATE by the node taking over, which
# therefore waits for a commit in flight) changes nothing from then on. Then the loops' states (each
# loop's event counter moved on by its events in the batch), the rounds (upserted by key),
# and the events numbered from where each loop's counter stood. Arrays go as binary
# parameters (%b): in text psycopg escapes every element, ~4x slower at 1,000 writes.
_COMMIT = """
WITH lease AS (
    SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live'
        AND expires_at > clock_timestamp()
    FOR SHARE
), s AS (
    INSERT INTO loops (loop_id, phase, created_at, updated_at, event_seq, state)
    SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::float8[], %b::int8[],
        %b::bytea[])
    WHERE EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (loop_id) DO UPDATE SET phase = excluded.phase,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        state = excluded.state, event_seq = loops.event_seq + excluded.event_seq
    RETURNING loop_id, event_seq
), r AS (
    INSERT INTO rounds (loop_id, round, status, cost_usd, record)
    SELECT * FROM unnest(%b::text[], %b::int4[], %b::text[], %b::float8[], %b::bytea[])
    WHERE EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (loop_id, round) DO UPDATE SET status = excluded.status,
        cost_usd = excluded.cost_usd, record = excluded.record
    RETURNING 1
), e AS (
    INSERT INTO events (loop_id, seq, type, event)
    SELECT v.loop_id, s.event_seq - v.total + v.n, v.type, v.event
    FROM unnest(%b::text[], %b::int8[], %b::int8[], %b::text[], %b::bytea[])
        AS v (loop_id, n, total, type, event)
    JOIN s USING (loop_id)
    RETURNING 1
), n AS (
    INSERT INTO notifications (loop_id, next_at, notification)
    SELECT * FROM unnest(%b::text[], %b::float8[], %b::bytea[])
    WHERE EXISTS (SELECT 1 FROM lease)
    RETURNING 1
)
SELECT (SELECT count(*) FROM lease), (SELECT count(*) FROM s), (SELECT count(*) FROM r),
    (SELECT count(*) FROM e), (SELECT count(*) FROM n)
"""
_TERMINAL = sorted(TERMINAL_PHASES)

# TEST ONLY, never set in use: LOOPACTORS_TEST_UNFENCED=1 turns fencing off, so that the chaos
# test (tests/storage/test_postgres_chaos.py) can show it catches what fencing prevents.
# Commits and queue changes then skip the lease check, and a node whose lease was taken over
# (or could not be renewed) keeps running instead of stopping: a zombie that writes.
_UNFENCED_VARIABLE = "LOOPACTORS_TEST_UNFENCED"
_LEASE_CHECK = """SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live'
        AND expires_at > clock_timestamp()
    FOR SHARE"""
_COMMIT_UNFENCED = _COMMIT.replace(_LEASE_CHECK, "SELECT 1 WHERE %s::text IS NOT NULL")
assert _COMMIT_UNFENCED != _COMMIT


def _unfenced() -> bool:
    return os.environ.get(_UNFENCED_VARIABLE) == "1"


def _psycopg() -> Any:
    try:
        import psycopg  # noqa: PLC0415 - ~0.7 s: only when a PostgreSQL store is opened
    except ImportError:
        raise ConfigError(
            "a postgresql:// store needs psycopg: pip install 'loopactors[postgres]'"
        ) from None
    return psycopg


class PostgresBackend(SqlBackend):
    """A store in one PostgreSQL database (the schema its connection's ``search_path``
    names first); see docs/multinode.md."""

    kind = "postgresql"
    placeholder = "%s"
    live_loops_sql = "phase <> ALL(%s)"
    live_loops_params = (_TERMINAL,)
    no_limit = None
    schema = len(_MIGRATIONS)

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        shown: str | None = None,
        node_id: str | None = None,
    ) -> None:
        """Connect (and create, migrate the tables unless ``read_only``). ``shown`` is the
        URL as errors show it (no password). Commits are made under the lease of
        ``node_id`` (a :class:`Lease` this process holds); without one, a writer takes a
        lease of its own for as long as it is open (an offline ``stop`` or ``prune``)."""
        pg = _psycopg()
        self.url = url
        self.shown = shown or url
        self.read_only = read_only
        self._error: type[Exception] = pg.Error
        self._start_codecs()
        self.exists = True
        self.node_id = node_id or ""
        self._own_lease: Lease | None = None
        try:
            # Autocommit: a read is its own statement, a write opens its own transaction.
            self._conn: psycopg.Connection[Any] = pg.connect(
                url, autocommit=True, application_name="loopactors"
            )
        except pg.Error as exc:
            raise StoreError(f"cannot connect to the store {self.shown}: {exc}") from None
        with closed_on_failure(self._conn):
            # A node stalled inside a transaction (a prune's, the queue's) must not hold its
            # lease row locked against a takeover for long: the server ends it.
            with self._reading():
                self._conn.execute("SET idle_in_transaction_session_timeout = '2s'")
            version = self._version()
            if read_only:
                self.exists = version is not None
            else:
                self._migrate()
                if node_id is None:
                    self._own_lease = Lease(url, shown=self.shown, name="command")
                    self.node_id = self._own_lease.node_id

    def _version(self) -> int | None:
        with self._reading():
            row = self._conn.execute("SELECT to_regclass('loopactors_meta') IS NOT NULL").fetchone()
            if not (row and row[0]):
                return None
            found = self._conn.execute(
                "SELECT value FROM loopactors_meta WHERE key = 'schema'"
            ).fetchone()
        version = int(found[0]) if found else 0
        self._check_version(version)
        return version

    def _migrate(self) -> None:
        """Apply the pending migrations in one transaction, one node at a time."""
        conn = self._conn
        try:
            with conn.transaction():
                # Nodes starting together: one migrates, the others wait here, then see it.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('loopactors schema'))")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS loopactors_meta "
                    "(key text PRIMARY KEY, value text NOT NULL)"
                )
                found = conn.execute(
                    "SELECT value FROM loopactors_meta WHERE key = 'schema'"
                ).fetchone()
                version = int(found[0]) if found else 0
                self._check_version(version)
                for statements in _MIGRATIONS[version:]:
                    for statement in statements:
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO loopactors_meta VALUES ('schema', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(len(_MIGRATIONS)),),
                )
        except self._error as exc:
            raise StoreError(f"cannot set up the store {self.shown}: {exc}") from None

    def _commit(self, writes: Sequence[Write]) -> None:
        encode = self._encoder.encode
        states, records = latest_rows(writes)
        counts: dict[str, int] = dict.fromkeys(states, 0)
        numbered: list[tuple[str, int, AnyEvent]] = []
        for write in writes:
            for event in write.events:
                counts[event.loop_id] = n = counts.get(event.loop_id, 0) + 1
                numbered.append((event.loop_id, n, event))
        # An event of a loop with no state in the batch has no row to number it by.
        unknown = {loop_id for loop_id, _, _ in numbered} - states.keys()
        if unknown:
            raise StoreError(
                f"cannot commit {len(writes)} writes to the store {self.shown}: events of "
                f"loops with no state in the commit: {sorted(unknown)}"
            )
        try:
            loops = list(states.values())
            rounds = list(records.values())
            notifications = queued_by(writes)
            params = (
                self.node_id,
                [s.loop_id for s in loops],
                [s.phase for s in loops],
                [s.created_at for s in loops],
                [s.updated_at for s in loops],
                [counts[s.loop_id] for s in loops],
                [encode(s) for s in loops],
                [r.loop_id for r in rounds],
                [r.round for r in rounds],
                [r.status for r in rounds],
                [r.cost_usd for r in rounds],
                [encode(r) for r in rounds],
                [loop_id for loop_id, _, _ in numbered],
                [n for _, n, _ in numbered],
                [counts[loop_id] for loop_id, _, _ in numbered],
                [event_type(e) for _, _, e in numbered],
                [encode(e) for _, _, e in numbered],
                [n.loop_id for n in notifications],
                [n.at for n in notifications],
                [encode(n) for n in notifications],
            )
            statement = _COMMIT_UNFENCED if _unfenced() else _COMMIT
            row = self._conn.execute(statement, params).fetchone()
        except Exception as exc:
            raise StoreError(
                f"cannot commit {len(writes)} writes to the store {self.shown}: {exc}"
            ) from None
        if not (row and row[0]):
            raise LeaseLost(
                f"the lease of {self.node_id} on the store {self.shown} has ended (expired, "
                f"or another node took the store over): {len(writes)} writes not committed"
            )

    def _write_queue(self, statement: str, params: tuple[Any, ...]) -> None:
        try:
            with self._conn.transaction():
                self._lock_lease()
                self._conn.execute(statement, params)
        except self._error as exc:
            raise StoreError(
                f"cannot update the notification queue in {self.shown}: {exc}"
            ) from None

    def _lock_lease(self) -> None:
        """In a transaction: lock this node's lease as a commit does (FOR SHARE), or raise
        :class:`LeaseLost` and write nothing."""
        if _unfenced():
            return
        row = self._conn.execute(
            "SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live' "
            "AND expires_at > clock_timestamp() FOR SHARE",
            (self.node_id,),
        ).fetchone()
        if row is None:
            raise LeaseLost(
                f"the lease of {self.node_id} on the store {self.shown} has ended (expired, "
                "or another node took the store over): nothing written"
            )

    def get_loop(self, loop_id: str) -> LoopState | None:
        with self._reading():
            row = self._conn.execute(
                "SELECT state FROM loops WHERE loop_id = %s", (loop_id,)
            ).fetchone()
            return None if row is None else self._state_decoder.decode(row[0])

    def _states(self, rows: Iterable[tuple[str, Any]]) -> list[LoopState]:
        decode = self._state_decoder.decode
        return [decode(state) for _, state in rows]

    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        # A scan of the ids (no index serves a tail): asked only when no id starts with it.
        query = "SELECT loop_id FROM loops WHERE right(loop_id, %s) = %s ORDER BY loop_id LIMIT %s"
        return self._loop_ids(query, (len(suffix), suffix, limit))

    def round_summaries(self, loop_ids: Sequence[str]) -> dict[str, tuple[RoundSummary, ...]]:
        query = "SELECT loop_id, record FROM rounds WHERE loop_id = ANY(%s) ORDER BY loop_id, round"
        return self._summaries([(query, (list(loop_ids),))])

    @contextlib.contextmanager
    def _prune_transaction(self) -> Iterator[None]:
        with self._conn.transaction():
            self._lock_lease()
            yield

    def nodes(self) -> list[NodeLease]:
        query = (
            "SELECT node_id, host, pid, state, CASE WHEN state = 'live' THEN "
            "extract(epoch FROM expires_at - clock_timestamp())::float8 END, dead_by "
            "FROM nodes ORDER BY started_at DESC LIMIT 20"
        )
        with self._reading():
            return [
                NodeLease(
                    node_id=node_id, host=host, pid=pid, state=state, lease_left=left, dead_by=by
                )
                for node_id, host, pid, state, left, by in self._conn.execute(query)
            ]

    def set_durability(self, durability: Durability) -> None:
        # "normal" keeps the server's synchronous_commit: its default (on) already flushes
        # the WAL at every commit, and off would lose commits to a crash of the server, a
        # weaker promise than normal's elsewhere. "full" asks for the flush at every commit
        # of this session if the server was set to skip it (synchronous_commit = off).
        if check_durability(durability) != "full":
            return
        with self._reading():
            row = self._conn.execute("SHOW synchronous_commit").fetchone()
            if row is not None and row[0] == "off":
                self._conn.execute("SET synchronous_commit = on")

    def close(self) -> None:
        # Under the connection's lock: a close from another thread waits for the call in
        # flight (the Store closes a killed backend from the event loop, see its actor).
        with self._conn.lock:
            self._conn.close()
        if self._own_lease is not None:
            self._own_lease.release()
            self._own_lease = None


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> PostgresBackend | None:
    held = _HELD.get(url.text)
    backend = PostgresBackend(url.text, read_only=read_only, shown=url.redacted, node_id=held)
    if not backend.exists:
        backend.close()
        return None
    return backend


#: The lease each runtime of this process holds, by store URL: its Store's backends commit
#: under it (a backend reopened after a crash of the Store is the same incarnation).
_HELD: dict[str, str] = {}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class Lease:
    """One node incarnation's lease on a store, on a connection of its own (a slow commit
    never delays a renewal). The expiry is on the database's clock; this process never
    compares wall-clock times (docs/multinode.md)."""

    def __init__(self, url: str, *, shown: str, name: str, ttl: float = 10.0) -> None:
        pg = _psycopg()
        # The tables first (created or migrated by whichever node comes first).
        PostgresBackend(url, shown=shown, node_id="").close()
        self.shown = shown
        self.ttl = ttl
        self.name = name
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.node_id = f"{name}-{self.host}-{self.pid}-{secrets.token_hex(4)}"
        self._error: type[Exception] = pg.Error
        # One call at a time (a renewal in a thread, the release at the end); not the
        # connection's own lock, which each of its calls takes.
        self._lock = threading.Lock()
        try:
            self._conn = pg.connect(url, autocommit=True, application_name="loopactors lease")
        except pg.Error as exc:
            raise StoreError(f"cannot connect to the store {shown}: {exc}") from None
        with closed_on_failure(self._conn):
            self._register()

    def _register(self) -> None:
        """Take the store: declare dead a holder whose lease expired (or whose process is
        gone, on this very machine), refuse while a live one holds it, then insert this
        incarnation's row. One registration at a time (a transaction-scoped lock)."""
        conn = self._conn
        boot = _boot_id()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ' nodes'))")
                live = conn.execute(
                    "SELECT node_id, host, pid, boot_id, expires_at > clock_timestamp(), "
                    "extract(epoch FROM expires_at - clock_timestamp()) "
                    "FROM nodes WHERE state = 'live'"
                ).fetchall()
                for node_id, host, pid, boot_id, valid, left in live:
                    gone = host == self.host and boot_id == boot and boot and not pid_exists(pid)
                    if valid and not gone:
                        raise StoreError(
                            f"the store {self.shown} is in use by another loopactors runtime "
                            f"({node_id}, its lease ends in {max(left, 0):.1f} s unless "
                            "renewed); stop it first, act on its loops with --connect URL, "
                            "or start again once its lease has ended"
                        )
                    conn.execute(
                        "UPDATE nodes SET state = 'dead', dead_at = clock_timestamp(), "
                        "dead_by = %s WHERE node_id = %s AND state = 'live'",
                        (self.node_id, node_id),
                    )
                # Incarnations that ended over a day ago are history nobody reads.
                conn.execute(
                    "DELETE FROM nodes WHERE state <> 'live' "
                    "AND expires_at < clock_timestamp() - interval '1 day'"
                )
                conn.execute(
                    "INSERT INTO nodes (node_id, name, host, pid, boot_id, expires_at) "
                    "VALUES (%s, %s, %s, %s, %s, clock_timestamp() + %s * interval '1 second')",
                    (self.node_id, self.name, self.host, self.pid, boot, self.ttl),
                )
        except self._error as exc:
            raise StoreError(f"cannot take a lease on the store {self.shown}: {exc}") from None

    def renew(self) -> bool:
        """Move the expiry on by ``ttl``: True, or False once this incarnation was declared
        dead (or left): a renewal never revives it.

        Raises:
            StoreError: the database could not be reached (the caller's clock decides).
        """
        try:
            with self._lock:
                done = self._conn.execute(
                    "UPDATE nodes SET expires_at = clock_timestamp() + %s * interval '1 second' "
                    "WHERE node_id = %s AND state = 'live'",
                    (self.ttl, self.node_id),
                )
        except self._error as exc:
            raise StoreError(f"cannot renew the lease on the store {self.shown}: {exc}") from None
        return bool(done.rowcount == 1)

    def release(self) -> None:
        """Leave: the store is free at once for the next node. Best effort (a node that
        cannot reach the database leaves its lease to expire)."""
        # Bounded: a renewal stuck on a dead server holds the connection; then the lease is
        # left to expire (and the connection to the garbage collector).
        if not self._lock.acquire(timeout=2.0):
            return
        try:
            with contextlib.suppress(self._error):
                if not self._conn.closed:
                    self._conn.execute(
                        "UPDATE nodes SET state = 'left', expires_at = clock_timestamp() "
                        "WHERE node_id = %s AND state = 'live'",
                        (self.node_id,),
                    )
            self._conn.close()
        finally:
            self._lock.release()


def _taken_over(lease: Lease) -> bool:
    try:
        return not lease.renew()
    except StoreError:
        return False  # the database cannot tell now: the runtime's own error stands


@contextlib.asynccontextmanager
async def _hold(url: StoreUrl, ttl: float, stop_margin: float) -> AsyncIterator[None]:
    """Hold a lease on the store while the block runs, renewed every ``ttl``/5 in a worker
    thread. If it is not renewed for long enough that it could expire within
    ``stop_margin`` seconds (what stopping the rounds takes), or a renewal is refused (the
    store was taken over), the block is cancelled and :class:`LeaseLost` raised from it."""
    import trio  # noqa: PLC0415 - the storage package itself runs no event loop

    lease = await trio.to_thread.run_sync(
        lambda: Lease(url.text, shown=url.redacted, name="node", ttl=ttl)
    )
    _HELD[url.text] = lease.node_id
    lost: list[str] = []
    # Counted from when a renewal was sent, on the monotonic clock: the database set the
    # expiry later than that, so this end is never after the database's.
    valid_for = max(ttl * 0.8 - stop_margin, ttl * 0.4)
    unfenced = _unfenced()
    if unfenced:
        log.warning("%s=1: fencing is off (test only), this node never stops", _UNFENCED_VARIABLE)
        valid_for = math.inf
    try:
        async with trio.open_nursery() as nursery:

            async def keep() -> None:
                valid_until = trio.current_time() + valid_for
                while True:
                    with trio.move_on_at(valid_until) as waiting:
                        await trio.sleep(ttl / 5)
                        sent = trio.current_time()
                        try:
                            renewed = await trio.to_thread.run_sync(
                                lease.renew, abandon_on_cancel=True
                            )
                        except StoreError as exc:
                            log.warning("%s; retrying", exc)
                            continue
                        if not renewed and unfenced:
                            continue  # a zombie, on purpose: what fencing must catch
                        if not renewed:
                            lost.append(
                                f"the lease of {lease.node_id} on the store {url.redacted} "
                                "was taken over by another node"
                            )
                            nursery.cancel_scope.cancel()
                            return
                        valid_until = sent + valid_for
                    if waiting.cancelled_caught:
                        lost.append(
                            f"the lease of {lease.node_id} on the store {url.redacted} could "
                            f"not be renewed for {valid_for:.1f} s"
                        )
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(keep)
            yield
            nursery.cancel_scope.cancel()
    except Exception as exc:
        # The runtime failed before the keeper's next renewal: its commits were fenced (the
        # Store crashed on LeaseLost until its supervisor gave up)? Then that is the reason.
        # So it is when the keeper had already found the lease lost: a node paused past its
        # lease wakes up to connections the server ended, and fails on them as it stops.
        if not lost:
            if not await trio.to_thread.run_sync(_taken_over, lease):
                raise
            # Said as the keeper says it: which of the two notices first is a race.
            lost.append(
                f"the lease of {lease.node_id} on the store {url.redacted} "
                "was taken over by another node"
            )
        log.error("%s: stopping (nothing more is committed)", lost[0])  # noqa: TRY400 - the cause is raised
        raise LeaseLost(lost[0]) from exc
    finally:
        _HELD.pop(url.text, None)
        lease.release()
    if lost:
        log.error("%s: stopping (nothing more is committed)", lost[0])
        raise LeaseLost(lost[0])


def _check(url: StoreUrl) -> str | None:
    if not url.rest.startswith("//"):
        return (
            "a PostgreSQL store is a URL: postgresql://USER:PASSWORD@HOST:PORT/DB "
            "(or postgresql:///DB?host=/SOCKET/DIR)"
        )
    return None


#: A database server: its calls wait on the network, so the Store makes them in a thread;
#: a runtime holds a lease on it while it runs (:func:`_hold`).
KIND = StoreKind(scheme="postgresql", open=_open, check=_check, blocking=True, hold=_hold)
