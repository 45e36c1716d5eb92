"""A store in a PostgreSQL database, which several nodes can share (docs/multinode.md).

psycopg 3, synchronous: the Store actor calls this backend in a worker thread, one call at
a time (``StoreKind.blocking``). psycopg takes ~0.7 s to import, so it is imported when a
``postgresql://`` store is opened, never at start-up (tests/test_cli_imports.py).

Rows carry the msgspec-JSON of the committed objects in ``bytea`` (an output may hold NUL,
which ``text`` and ``jsonb`` refuse); the other columns exist to be queried. Ids compare
``COLLATE "C"`` (by their bytes, as SQLite does), so a prefix search is a range on the
primary key whatever the database's collation. Events carry a per-loop ``seq``: the order a
loop's log was appended in, gap-free. A group commit is one statement: one round trip.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ConfigError, StoreError
from ..loops import (
    TERMINAL_PHASES,
    AnyEvent,
    LoopState,
    Notification,
    RoundRecord,
    RoundSummary,
    event_decoder,
)
from ._base import (
    PRUNE_BATCH,
    PRUNE_SCAN,
    PruneReport,
    QueuedNotification,
    StoreBackend,
    StoreStatistics,
    Write,
    check_limit,
    queued_by,
)
from ._kinds import StoreKind, StoreUrl

if TYPE_CHECKING:
    import psycopg

__all__ = ["KIND", "PostgresBackend"]

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
]

# One statement, so one round trip, for a whole group commit: the loops' states (each
# loop's event counter moved on by its events in the batch), the rounds (upserted by key),
# and the events numbered from where each loop's counter stood. Arrays go as binary
# parameters (%b): in text psycopg escapes every element, ~4x slower at 1,000 writes.
_COMMIT = """
WITH s AS (
    INSERT INTO loops (loop_id, phase, created_at, updated_at, event_seq, state)
    SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::float8[], %b::int8[],
        %b::bytea[])
    ON CONFLICT (loop_id) DO UPDATE SET phase = excluded.phase,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        state = excluded.state, event_seq = loops.event_seq + excluded.event_seq
    RETURNING loop_id, event_seq
), r AS (
    INSERT INTO rounds (loop_id, round, status, cost_usd, record)
    SELECT * FROM unnest(%b::text[], %b::int4[], %b::text[], %b::float8[], %b::bytea[])
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
    RETURNING 1
)
SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM r), (SELECT count(*) FROM e),
    (SELECT count(*) FROM n)
"""
_TERMINAL = sorted(TERMINAL_PHASES)


def _event_type(event: AnyEvent) -> str:
    return str(type(event).__struct_config__.tag)


def _psycopg() -> Any:
    try:
        import psycopg  # noqa: PLC0415 - ~0.7 s: only when a PostgreSQL store is opened
    except ImportError:
        raise ConfigError(
            "a postgresql:// store needs psycopg: pip install 'loopactors[postgres]'"
        ) from None
    return psycopg


class PostgresBackend(StoreBackend):
    """A store in one PostgreSQL database (the schema its connection's ``search_path``
    names first); see docs/multinode.md."""

    kind = "postgresql"

    def __init__(self, url: str, *, read_only: bool = False, shown: str | None = None) -> None:
        """Connect (and create, migrate the tables unless ``read_only``). ``shown`` is the
        URL as errors show it (no password)."""
        pg = _psycopg()
        self.url = url
        self.shown = shown or url
        self.read_only = read_only
        self._error: type[Exception] = pg.Error
        self._encoder = msgspec.json.Encoder()
        self._state_decoder = msgspec.json.Decoder(LoopState)
        self._round_decoder = msgspec.json.Decoder(RoundRecord)
        self._summary_decoder = msgspec.json.Decoder(RoundSummary)
        self._notification_decoder = msgspec.json.Decoder(Notification)
        self._commits = 0
        self._writes = 0
        self.exists = True
        try:
            # Autocommit: a read is its own statement, a write opens its own transaction.
            self._conn: psycopg.Connection[Any] = pg.connect(
                url, autocommit=True, application_name="loopactors"
            )
        except pg.Error as exc:
            raise StoreError(f"cannot connect to the store {self.shown}: {exc}") from None
        try:
            version = self._version()
            if read_only:
                self.exists = version is not None
            else:
                self._migrate()
                self._take_store()
        except BaseException:
            self._conn.close()
            raise

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

    def _check_version(self, version: int) -> None:
        if version > len(_MIGRATIONS):
            raise StoreError(
                f"the store {self.shown} was written by a newer loopactors "
                f"(schema {version}, this one reads up to {len(_MIGRATIONS)})"
            )

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

    def _take_store(self) -> None:
        """One writer per store (schema), as the SQLite store's directory lock makes it: two
        nodes would both resume every live loop. A session lock, so it goes with the
        connection, also when the process dies. (Loops shared by several nodes need
        ownership of each loop: docs/multinode.md.)"""
        try:
            row = self._conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(current_schema() || ' loopactors store'))"
            ).fetchone()
        except self._error as exc:
            raise StoreError(f"cannot lock the store {self.shown}: {exc}") from None
        if not (row and row[0]):
            raise StoreError(
                f"the store {self.shown} is in use by another loopactors runtime (a node, or a "
                "command changing it); stop it first, or act on its loops with --connect URL"
            )

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except (self._error, msgspec.DecodeError) as exc:
            raise StoreError(f"cannot read the store {self.shown}: {exc}") from None

    def commit(self, writes: Sequence[Write]) -> None:
        if not writes:
            return
        encode = self._encoder.encode
        # Last state of each loop wins, as does the last record of each round: one row each.
        states = {w.state.loop_id: w.state for w in writes}
        records = {(r.loop_id, r.round): r for w in writes if (r := w.round) is not None}
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
                [_event_type(e) for _, _, e in numbered],
                [encode(e) for _, _, e in numbered],
                [n.loop_id for n in notifications],
                [n.at for n in notifications],
                [encode(n) for n in notifications],
            )
            self._conn.execute(_COMMIT, params)
        except Exception as exc:
            raise StoreError(
                f"cannot commit {len(writes)} writes to the store {self.shown}: {exc}"
            ) from None
        self._commits += 1
        self._writes += len(writes)

    def due_notifications(self, now: float, *, limit: int) -> list[QueuedNotification]:
        decode = self._notification_decoder.decode
        query = (
            "SELECT id, notification, next_at, attempts FROM notifications "
            "WHERE next_at <= %s ORDER BY next_at, id LIMIT %s"
        )
        with self._reading():
            return [
                QueuedNotification(id=i, notification=decode(n), next_at=at, attempts=attempts)
                for i, n, at, attempts in self._conn.execute(query, (now, limit))
            ]

    def next_notification_at(self) -> float | None:
        with self._reading():
            row = self._conn.execute("SELECT min(next_at) FROM notifications").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def notification_done(self, notification_id: int) -> None:
        self._write_queue("DELETE FROM notifications WHERE id = %s", (notification_id,))

    def notification_retry(self, notification_id: int, next_at: float, attempts: int) -> None:
        self._write_queue(
            "UPDATE notifications SET next_at = %s, attempts = %s WHERE id = %s",
            (next_at, attempts, notification_id),
        )

    def _write_queue(self, statement: str, params: tuple[Any, ...]) -> None:
        try:
            self._conn.execute(statement, params)
        except self._error as exc:
            raise StoreError(
                f"cannot update the notification queue in {self.shown}: {exc}"
            ) from None

    def get_loop(self, loop_id: str) -> LoopState | None:
        with self._reading():
            row = self._conn.execute(
                "SELECT state FROM loops WHERE loop_id = %s", (loop_id,)
            ).fetchone()
            return None if row is None else self._state_decoder.decode(row[0])

    def list_loops(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[LoopState]:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be None or >= 0, not {limit}")
        conditions = ["phase <> ALL(%s)"] if live_only else []
        params: list[Any] = [_TERMINAL] if live_only else []
        if after is not None:
            conditions.append("(created_at, loop_id) < (%s, %s)")
            params += after
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        params.append(limit)
        query = f"SELECT state FROM loops {where} ORDER BY created_at DESC, loop_id DESC LIMIT %s"
        decode = self._state_decoder.decode
        with self._reading():
            return [decode(state) for (state,) in self._conn.execute(query, params)]

    def live_loops(self) -> list[LoopState]:
        decode = self._state_decoder.decode
        query = "SELECT state FROM loops WHERE phase <> ALL(%s)"
        with self._reading():
            return [decode(state) for (state,) in self._conn.execute(query, (_TERMINAL,))]

    def find_loop_ids(self, prefix: str, *, limit: int) -> list[str]:
        # A range on the primary key ("C" collation: by bytes; nothing sorts after
        # U+10FFFF): an index seek, as in SQLite.
        query = (
            "SELECT loop_id FROM loops WHERE loop_id >= %s AND loop_id < %s "
            "ORDER BY loop_id LIMIT %s"
        )
        with self._reading():
            rows = self._conn.execute(query, (prefix, prefix + "\U0010ffff", limit))
            return [loop_id for (loop_id,) in rows]

    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        # A scan of the ids (no index serves a tail): asked only when no id starts with it.
        query = "SELECT loop_id FROM loops WHERE right(loop_id, %s) = %s ORDER BY loop_id LIMIT %s"
        with self._reading():
            rows = self._conn.execute(query, (len(suffix), suffix, limit))
            return [loop_id for (loop_id,) in rows]

    def rounds(self, loop_id: str) -> list[RoundRecord]:
        decode = self._round_decoder.decode
        query = "SELECT record FROM rounds WHERE loop_id = %s ORDER BY round"
        with self._reading():
            return [decode(record) for (record,) in self._conn.execute(query, (loop_id,))]

    def round_summaries(self, loop_ids: Sequence[str]) -> dict[str, tuple[RoundSummary, ...]]:
        decode = self._summary_decoder.decode
        found: dict[str, list[RoundSummary]] = {}
        query = "SELECT loop_id, record FROM rounds WHERE loop_id = ANY(%s) ORDER BY loop_id, round"
        with self._reading():
            for loop_id, record in self._conn.execute(query, (list(loop_ids),)):
                found.setdefault(loop_id, []).append(decode(record))
        return {loop_id: tuple(summaries) for loop_id, summaries in found.items()}

    def events(self, loop_id: str) -> list[AnyEvent]:
        decode = event_decoder.decode
        query = "SELECT event FROM events WHERE loop_id = %s ORDER BY seq"
        with self._reading():
            return [decode(event) for (event,) in self._conn.execute(query, (loop_id,))]

    def prune_batch(
        self,
        before: float,
        *,
        after: str = "",
        limit: int = PRUNE_BATCH,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> tuple[PruneReport, str | None]:
        check_limit(limit)
        conn = self._conn
        taken: list[str] = []
        rounds = events = 0
        scan = (
            "SELECT loop_id, phase = ANY(%s) AND updated_at < %s FROM loops "
            "WHERE loop_id > %s ORDER BY loop_id LIMIT %s"
        )
        try:
            scanned = conn.execute(scan, (_TERMINAL, before, after, PRUNE_SCAN)).fetchall()
            due = [loop_id for loop_id, is_due in scanned if is_due][:limit]
            with contextlib.nullcontext() if dry_run else conn.transaction():
                for loop_id in due:
                    if taken and deadline is not None and time.perf_counter() > deadline:
                        break
                    if dry_run:
                        row = conn.execute(
                            "SELECT (SELECT count(*) FROM rounds WHERE loop_id = %s), "
                            "(SELECT count(*) FROM events WHERE loop_id = %s)",
                            (loop_id, loop_id),
                        ).fetchone()
                        assert row is not None
                        counts = [row[0], row[1]]
                    else:
                        counts = [
                            conn.execute(
                                f"DELETE FROM {table} WHERE loop_id = %s", (loop_id,)
                            ).rowcount
                            for table in ("rounds", "events")
                        ]
                        # A loop that came back to life meanwhile (another node) stays.
                        conn.execute(
                            "DELETE FROM loops WHERE loop_id = %s AND phase = ANY(%s)",
                            (loop_id, _TERMINAL),
                        )
                    rounds += counts[0]
                    events += counts[1]
                    taken.append(loop_id)
        except self._error as exc:
            action = "count what to prune in" if dry_run else "prune"
            raise StoreError(f"cannot {action} the store {self.shown}: {exc}") from None
        report = PruneReport(
            before=before, dry_run=dry_run, loops=len(taken), rounds=rounds, events=events
        )
        if sum(1 for _, is_due in scanned if is_due) > len(taken):
            return report, taken[-1]
        return report, (scanned[-1][0] if len(scanned) == PRUNE_SCAN else None)

    def statistics(self) -> StoreStatistics:
        query = """SELECT (SELECT count(*) FROM loops),
            (SELECT count(*) FROM loops WHERE phase <> ALL(%s)),
            (SELECT count(*) FROM rounds), (SELECT count(*) FROM events),
            (SELECT count(*) FROM notifications)"""
        with self._reading():
            row = self._conn.execute(query, (_TERMINAL,)).fetchone()
            assert row is not None
            loops, live, rounds, events, queued = row
            phases = dict(
                self._conn.execute("SELECT phase, count(*) FROM loops GROUP BY phase").fetchall()
            )
        return StoreStatistics(
            loops=loops,
            live_loops=live,
            rounds=rounds,
            events=events,
            commits=self._commits,
            writes=self._writes,
            phases=phases,
            notifications=queued,
        )

    def close(self) -> None:
        # Under the connection's lock: a close from another thread waits for the call in
        # flight (the Store closes a killed backend from the event loop, see its actor).
        with self._conn.lock:
            self._conn.close()


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> PostgresBackend | None:
    backend = PostgresBackend(url.text, read_only=read_only, shown=url.redacted)
    if not backend.exists:
        backend.close()
        return None
    return backend


def _check(url: StoreUrl) -> str | None:
    if not url.rest.startswith("//"):
        return (
            "a PostgreSQL store is a URL: postgresql://USER:PASSWORD@HOST:PORT/DB "
            "(or postgresql:///DB?host=/SOCKET/DIR)"
        )
    return None


#: A database server: its calls wait on the network, so the Store makes them in a thread.
KIND = StoreKind(scheme="postgresql", open=_open, check=_check, blocking=True)
