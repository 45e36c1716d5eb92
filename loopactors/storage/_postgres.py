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
import functools
import hashlib
import logging
import math
import os
import random
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._util import closed_on_failure, pid_exists
from ..errors import ConfigError, LeaseLost, LoopsFenced, StoreError
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
from ._kinds import (
    CommandRoutes,
    Durability,
    Placement,
    StoreKind,
    StoreUrl,
    check_durability,
)
from ._sql import SqlBackend, event_type, latest_rows

if TYPE_CHECKING:
    import psycopg

__all__ = ["KIND", "Lease", "PostgresBackend"]

log = logging.getLogger("loopactors.store")

_TERMINAL = sorted(TERMINAL_PHASES)
#: A live loop, as the partial indexes say it (a literal, so the planner matches them).
_LIVE = "phase NOT IN (" + ", ".join(f"'{phase}'" for phase in _TERMINAL) + ")"

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
    # 3: several active nodes. Each loop is owned by one node incarnation (NULL: by none,
    # to be claimed), under a fence moved on at every change of owner; a loop tree moves as
    # one (root_id). Loops already there are owned by nobody: the next node claims them.
    (
        "ALTER TABLE loops ADD COLUMN owner text, ADD COLUMN fence bigint NOT NULL DEFAULT 1, "
        'ADD COLUMN root_id text COLLATE "C"',
        # Each loop's root, up its parents (a parent pruned away: the loop is its own root).
        """WITH RECURSIVE p AS (
            SELECT loop_id, convert_from(state, 'UTF8')::json -> 'spec' ->> 'parent_id' AS parent
            FROM loops
        ), t AS (
            SELECT loop_id, loop_id AS root_id FROM p
            WHERE parent IS NULL OR NOT EXISTS (SELECT 1 FROM loops l WHERE l.loop_id = p.parent)
            UNION ALL
            SELECT p.loop_id, t.root_id FROM p JOIN t ON p.parent = t.loop_id
        )
        UPDATE loops SET root_id = t.root_id FROM t WHERE loops.loop_id = t.loop_id""",
        "UPDATE loops SET root_id = loop_id WHERE root_id IS NULL",
        "ALTER TABLE loops ALTER COLUMN root_id SET NOT NULL",
        # What a claim pass asks of an idle cluster (is any live loop unowned?) reads an
        # empty index; a node's own live loops and a tree's loops are found by index too.
        f"CREATE INDEX loops_unowned ON loops (root_id) WHERE owner IS NULL AND {_LIVE}",
        f"CREATE INDEX loops_live_by_owner ON loops (owner) WHERE {_LIVE}",
        f"CREATE INDEX loops_live_by_root ON loops (root_id) WHERE {_LIVE}",
    ),
    # 4: commands sent to a loop's owner from another node (storage/_pg_commands.py): a row
    # while the command waits for its answer, deleted by its sender once read.
    (
        """CREATE TABLE commands (
            id bigserial PRIMARY KEY,
            loop_id text COLLATE "C" NOT NULL,
            command text NOT NULL,
            stop_mode text NOT NULL,
            sent_by text NOT NULL,
            sent_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            answered_at timestamptz,
            state bytea,
            error_code text,
            error text
        )""",
        "CREATE INDEX commands_waiting ON commands (loop_id) WHERE answered_at IS NULL",
    ),
    # 5: what does not move. A loop tied to one machine's files carries the label a node
    # must have to run it (host:HOSTNAME); NULL: any node may.
    ("ALTER TABLE loops ADD COLUMN affinity text",),
    # 6: a start routed to its parent's owner carries what it starts (the child's id and
    # spec, msgspec JSON); NULL for the other commands.
    ("ALTER TABLE commands ADD COLUMN request bytea",),
    # 7: where each node incarnation's gateway listens (ws://HOST:PORT), set once it is
    # bound; NULL for a runtime with no gateway (embedded, or a command).
    ("ALTER TABLE nodes ADD COLUMN gateway text",),
    # 8: events of every loop relayed to the nodes whose clients follow all loops
    # (storage/_pg_commands.py): each row names the transaction that wrote it (``tx``, from
    # txid_current(): a read finds what became visible since a snapshot by it) and a hash
    # of the node that wrote it (``writer``: a node relays only the others'). NULL in rows
    # written before: never relayed.
    (
        "ALTER TABLE events ADD COLUMN tx int8, ADD COLUMN writer int8",
        "CREATE INDEX events_by_tx ON events (tx)",
    ),
]

# One statement, so one round trip, for a whole group commit. It first locks this node's
# own lease row (FOR SHARE), live and unexpired on the database's clock, and writes nothing
# without it: a node declared dead (its row locked FOR UPDATE by the node taking over, which
# therefore waits for a commit in flight) changes nothing from then on. Then each loop: one
# this node holds is updated only WHERE it is still this node's under the fence it holds;
# a new one (fence 0 here) is inserted, never over an existing row (the same id admitted on
# two nodes: the first wins). A loop that passes neither is fenced: nothing of it is written
# (its round, events, notifications wait on ``s``), the batch's other loops are. Each loop's
# event counter moves on by its events in the batch, and its events are numbered from where
# the counter stood, each with this transaction's id and this node's hash (writer_of), for
# the relay to other nodes. Arrays go as binary parameters (%b): in text psycopg escapes every
# element, ~4x slower at 1,000 writes.
_COMMIT = """
WITH lease AS (
    SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live'
        AND expires_at > clock_timestamp()
    FOR SHARE
), v AS (
    SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::float8[], %b::int8[],
        %b::bytea[], %b::int8[], %b::text[], %b::text[])
        AS v (loop_id, phase, created_at, updated_at, n, state, fence, root_id, affinity)
    WHERE EXISTS (SELECT 1 FROM lease)
), u AS (
    UPDATE loops SET phase = v.phase, created_at = v.created_at, updated_at = v.updated_at,
        state = v.state, event_seq = loops.event_seq + v.n
    FROM v WHERE v.fence > 0 AND loops.loop_id = v.loop_id
        AND loops.owner = %s AND loops.fence = v.fence
    RETURNING loops.loop_id, loops.event_seq
), i AS (
    INSERT INTO loops (loop_id, phase, created_at, updated_at, event_seq, state, owner, fence,
        root_id, affinity)
    SELECT v.loop_id, v.phase, v.created_at, v.updated_at, v.n, v.state, %s, 1,
        COALESCE((SELECT p.root_id FROM loops p WHERE p.loop_id = v.root_id), v.root_id),
        v.affinity
    FROM v WHERE v.fence = 0
    ON CONFLICT (loop_id) DO NOTHING
    RETURNING loop_id, event_seq
), s AS (
    SELECT * FROM u UNION ALL SELECT * FROM i
), r AS (
    INSERT INTO rounds (loop_id, round, status, cost_usd, record)
    SELECT * FROM unnest(%b::text[], %b::int4[], %b::text[], %b::float8[], %b::bytea[])
        AS x (loop_id, round, status, cost_usd, record)
    WHERE x.loop_id IN (SELECT loop_id FROM s)
    ON CONFLICT (loop_id, round) DO UPDATE SET status = excluded.status,
        cost_usd = excluded.cost_usd, record = excluded.record
    RETURNING 1
), e AS (
    INSERT INTO events (loop_id, seq, type, event, tx, writer)
    SELECT x.loop_id, s.event_seq - x.total + x.n, x.type, x.event, txid_current(), %s
    FROM unnest(%b::text[], %b::int8[], %b::int8[], %b::text[], %b::bytea[])
        AS x (loop_id, n, total, type, event)
    JOIN s USING (loop_id)
    RETURNING 1
), n AS (
    INSERT INTO notifications (loop_id, next_at, notification)
    SELECT * FROM unnest(%b::text[], %b::float8[], %b::bytea[])
        AS x (loop_id, next_at, notification)
    WHERE x.loop_id IN (SELECT loop_id FROM s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM lease),
    (SELECT array_agg(loop_id) FROM v WHERE loop_id NOT IN (SELECT loop_id FROM s)),
    (SELECT array_agg(loop_id) FROM i), (SELECT count(*) FROM r), (SELECT count(*) FROM e),
    (SELECT count(*) FROM n)
"""

# TEST ONLY, never set in use: LOOPACTORS_TEST_UNFENCED=1 turns fencing off, so that the chaos
# test (tests/storage/test_postgres_chaos.py) can show it catches what fencing prevents.
# Commits and queue changes then skip the lease check and the owner and fence of each loop,
# and a node whose lease was taken over (or could not be renewed) keeps running instead of
# stopping: a zombie that writes.
_UNFENCED_VARIABLE = "LOOPACTORS_TEST_UNFENCED"
_LEASE_CHECK = """SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live'
        AND expires_at > clock_timestamp()
    FOR SHARE"""
_OWNER_CHECK = "loops.owner = %s AND loops.fence = v.fence"
_COMMIT_UNFENCED = _COMMIT.replace(_LEASE_CHECK, "SELECT 1 WHERE %s::text IS NOT NULL").replace(
    _OWNER_CHECK, "%s::text IS NOT NULL"
)
assert _COMMIT_UNFENCED.count("IS NOT NULL") == 2


@functools.cache
def writer_of(node_id: str) -> int:
    """The ``writer`` of the events a node incarnation commits: a 64-bit hash of its id (two
    incarnations sharing one: never in practice)."""
    digest = hashlib.blake2b(node_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


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
        holding: Holding | None = None,
    ) -> None:
        """Connect (and create, migrate the tables unless ``read_only``). ``shown`` is the
        URL as errors show it (no password). Commits are made as the node incarnation of
        ``holding`` (a :class:`Lease` this process holds, with the fence of each loop it
        owns) or of ``node_id``; without either, a writer takes a lease of its own for as
        long as it is open (an offline ``stop`` or ``prune``) and takes over, as it writes
        them, loops no live node owns."""
        pg = _psycopg()
        self.url = url
        self.shown = shown or url
        self.read_only = read_only
        self._error: type[Exception] = pg.Error
        self._start_codecs()
        self.exists = True
        if holding is None:
            holding = Holding(node_id or "")
        self.holding = holding
        self._own_lease: Lease | None = None
        try:
            # Autocommit: a read is its own statement, a write opens its own transaction.
            self._conn: psycopg.Connection[Any] = pg.connect(
                url, autocommit=True, application_name="loopactors"
            )
        except pg.Error as exc:
            raise StoreError(f"cannot connect to the store {self.shown}: {exc}") from None
        with closed_on_failure(self._conn):
            from ._pg_arrays import register_arrays  # noqa: PLC0415 - it imports psycopg

            # A commit's arrays are built by the store itself (storage/_pg_arrays.py).
            register_arrays(self._conn)
            self._text_encoding = self._conn.info.encoding
            # A node stalled inside a transaction (a prune's, the queue's) must not hold its
            # lease row locked against a takeover for long: the server ends it.
            with self._reading():
                self._conn.execute("SET idle_in_transaction_session_timeout = '2s'")
            version = self._version()
            if read_only:
                self.exists = version is not None
            else:
                self._migrate()
                if node_id is None and not holding.node_id:
                    self._own_lease = Lease(url, shown=self.shown, name="command")
                    self.holding = self._own_lease.holding

    @property
    def node_id(self) -> str:
        """The node incarnation this backend commits as."""
        return self.holding.node_id

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
        fences = self.holding.fences
        if self._own_lease is not None:
            self._adopt([loop_id for loop_id in states if loop_id not in fences])
        from ._pg_arrays import (  # noqa: PLC0415 - with psycopg, when a store is opened
            bytea_array,
            float8_array,
            int4_array,
            int8_array,
            text_array,
        )

        text = self._text_encoding
        try:
            loops = list(states.values())
            rounds = list(records.values())
            notifications = queued_by(writes)
            params = (
                self.node_id,
                text_array([s.loop_id for s in loops], text),
                text_array([s.phase for s in loops], text),
                float8_array([s.created_at for s in loops]),
                float8_array([s.updated_at for s in loops]),
                int8_array([counts[s.loop_id] for s in loops]),
                bytea_array([encode(s) for s in loops]),
                int8_array([fences.get(s.loop_id, 0) for s in loops]),
                text_array(_roots(loops, fences), text),
                # Admissions only (fence 0): a loop's affinity is set once, where it starts.
                text_array(
                    [None if s.loop_id in fences else self.holding.affinity(s) for s in loops],
                    text,
                ),
                self.node_id,
                self.node_id,
                text_array([r.loop_id for r in rounds], text),
                int4_array([r.round for r in rounds]),
                text_array([r.status for r in rounds], text),
                float8_array([r.cost_usd for r in rounds]),
                bytea_array([encode(r) for r in rounds]),
                writer_of(self.node_id),
                text_array([loop_id for loop_id, _, _ in numbered], text),
                int8_array([n for _, n, _ in numbered]),
                int8_array([counts[loop_id] for loop_id, _, _ in numbered]),
                text_array([event_type(e) for _, _, e in numbered], text),
                bytea_array([encode(e) for _, _, e in numbered]),
                text_array([n.loop_id for n in notifications], text),
                float8_array([n.at for n in notifications]),
                bytea_array([encode(n) for n in notifications]),
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
                f"or another node declared it dead): {len(writes)} writes not committed"
            )
        for loop_id in row[2] or ():
            fences[loop_id] = 1
        fenced = frozenset(row[1] or ())
        for state in loops:
            if state.terminal or state.loop_id in fenced:
                fences.pop(state.loop_id, None)  # written for the last time, or not ours
        if fenced:
            raise LoopsFenced(
                f"{len(fenced)} of {len(loops)} loops of a commit to the store {self.shown} "
                f"are not {self.node_id}'s (another node owns them, or they changed owner "
                f"since): nothing of them written ({', '.join(sorted(fenced)[:5])}"
                f"{', ...' if len(fenced) > 5 else ''})",
                fenced,
            )

    def _adopt(self, loop_ids: list[str]) -> None:
        """An offline writer (its own lease): take over the loops it is about to write that
        no live node owns; refuse, writing nothing, if a live node owns one."""
        if not loop_ids:
            return
        fences = self.holding.fences
        try:
            with self._conn.transaction():
                self._lock_lease()
                for loop_id, fence in self._conn.execute(
                    "UPDATE loops SET owner = %s, fence = fence + 1 WHERE loop_id = ANY(%s) "
                    "AND (owner IS NULL OR NOT EXISTS (SELECT 1 FROM nodes n "
                    "WHERE n.node_id = loops.owner AND n.state = 'live')) "
                    "RETURNING loop_id, fence",
                    (self.node_id, loop_ids),
                ):
                    fences[loop_id] = fence
                owned = self._conn.execute(
                    "SELECT l.loop_id, n.node_id, n.host, n.pid FROM loops l "
                    "JOIN nodes n ON n.node_id = l.owner "
                    "WHERE l.loop_id = ANY(%s) AND l.owner <> %s",
                    (loop_ids, self.node_id),
                ).fetchall()
        except self._error as exc:
            raise StoreError(f"cannot commit to the store {self.shown}: {exc}") from None
        if owned:
            loop_id, node_id, host, pid = owned[0]
            raise StoreError(
                f"loop {loop_id} is run by the live node {node_id} (host {host}, pid {pid}) "
                f"of the store {self.shown}; act on it through a node of the store (--connect "
                "to any of them: a node routes the command to the loop's owner)"
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

    def live_loops(self) -> list[LoopState]:
        """The live loops this node owns (under the fences it holds): what its runtime
        recovers. Loops of other nodes, and unowned ones, are not its to run."""
        fences = self.holding.fences
        with self._reading():
            rows = self._conn.execute(
                f"SELECT loop_id, fence, state FROM loops WHERE owner = %s AND {_LIVE}",
                (self.node_id,),
            ).fetchall()
        decode = self._state_decoder.decode
        return [decode(state) for loop_id, fence, state in rows if fences.get(loop_id) == fence]

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

    def loop_owners(self, loop_ids: Sequence[str]) -> dict[str, str]:
        query = "SELECT loop_id, owner FROM loops WHERE loop_id = ANY(%s) AND owner IS NOT NULL"
        with self._reading():
            return dict(self._conn.execute(query, (list(loop_ids),)).fetchall())

    def nodes(self) -> list[NodeLease]:
        query = (
            "SELECT node_id, host, pid, state, CASE WHEN state = 'live' THEN "
            "extract(epoch FROM expires_at - clock_timestamp())::float8 END, dead_by, "
            f"(SELECT count(*) FROM loops WHERE owner = node_id AND {_LIVE}), gateway "
            "FROM nodes ORDER BY started_at DESC LIMIT 20"
        )
        with self._reading():
            return [
                NodeLease(
                    node_id=node_id,
                    host=host,
                    pid=pid,
                    state=state,
                    lease_left=left,
                    dead_by=by,
                    loops=loops,
                    gateway=gateway,
                )
                for node_id, host, pid, state, left, by, loops, gateway in self._conn.execute(query)
            ]

    def set_gateway(self, url: str) -> None:
        if not self.node_id:
            return
        try:
            self._conn.execute(
                "UPDATE nodes SET gateway = %s WHERE node_id = %s", (url, self.node_id)
            )
        except self._error as exc:
            raise StoreError(f"cannot record this node's gateway in {self.shown}: {exc}") from None

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


def _roots(loops: Sequence[LoopState], fences: dict[str, int]) -> list[str]:
    """For each loop of a commit, where its root is found if it is admitted now: itself (no
    parent), its parent's root if the parent is admitted in the same commit, else its parent
    (whose row names the root)."""
    found: dict[str, str] = {}
    roots: list[str] = []
    for state in loops:
        parent = state.spec.parent_id
        root = state.loop_id if parent is None else found.get(parent, parent)
        found[state.loop_id] = root
        roots.append(root)
    return roots


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> PostgresBackend | None:
    backend = PostgresBackend(
        url.text, read_only=read_only, shown=url.redacted, holding=_HELD.get(url.text)
    )
    if not backend.exists:
        backend.close()
        return None
    return backend


def _anywhere(state: LoopState) -> None:
    return None


class Holding:
    """What this process holds on a store as one node incarnation: its id and the fence of
    each loop it owns (set when it admits or claims the loop). The Store's backends commit
    under it, so a backend reopened after a crash of the Store is the same incarnation
    holding the same loops; the lease keeper adds the loops it claims. It also counts the
    other nodes on the store (:meth:`alone`)."""

    __slots__ = (
        "affinity",
        "fences",
        "heard",
        "heard_when_counted",
        "node_id",
        "peers",
        "valid_until",
    )

    def __init__(
        self, node_id: str, affinity: Callable[[LoopState], str | None] | None = None
    ) -> None:
        self.node_id = node_id
        self.fences: dict[str, int] = {}
        #: What a loop admitted here is tied to (``Placement.affinity``).
        self.affinity = affinity or _anywhere
        #: The live nodes on the store besides this one, as the lease last counted them
        #: (None: not counted).
        self.peers: int | None = None
        #: How many times another node was heard (its notifications, by the routes), and
        #: how many times when the lease's last count was asked: a node heard since then
        #: may not be in the count.
        self.heard = 0
        self.heard_when_counted = 0
        #: Until when (trio's clock) the lease keeper knows the lease cannot have ended.
        self.valid_until = math.inf

    def alone(self) -> bool:
        """No other node is on the store, as far as this one knows: the lease's last count
        found none and none was heard since."""
        return self.peers == 0 and self.heard == self.heard_when_counted


#: The holding of each runtime of this process, by store URL (one runtime per store in a
#: process, as `loopactors node` runs; a store opened here while one runs commits as it).
_HELD: dict[str, Holding] = {}


def _boot_id() -> str:
    """Where this process's pid means something: the machine's boot and the process's pid
    namespace (containers on one kernel, with one host name, each count their own pids).
    Kept in ``nodes.boot_id``; empty where either cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot} {namespace}"


# A node that leaves or is declared dead gives up its live loops at once: owned by nobody,
# under a new fence (a zombie's write fails on it), for the claims of the live nodes.
# Its own statement, after the declaration, so it sees loops a last commit of that node
# inserted while the declaration waited for it (read committed: a snapshot per statement).
_RELEASE = f"""UPDATE loops SET owner = NULL, fence = fence + 1
    WHERE owner = ANY(%s) AND {_LIVE}"""
_DECLARE_DEAD = """UPDATE nodes SET state = 'dead', dead_at = clock_timestamp(), dead_by = %s
    WHERE state = 'live' AND expires_at < clock_timestamp() AND node_id <> %s
    RETURNING node_id"""
#: The first key of the advisory locks on loop trees ("loop" in ASCII); two-key locks never
#: meet the one-key schema locks.
_TREE_LOCKS = 0x6C6F6F70
#: The oldest free trees this node may take, each locked for this transaction, skipping
#: those another claimer holds. A tree is locked by its root id, not its root row: a root
#: that ended may be pruned while a child of it runs. Trees with a loop tied to a label
#: this node lacks wait for a node with it. The lock is tried in the outer query, row by
#: row as LIMIT pulls them from the sorted trees, so only the trees taken are locked.
_FREE_TREES = f"""SELECT root_id FROM (
        SELECT t.root_id FROM (
            SELECT root_id, min(created_at) AS first FROM loops
            WHERE owner IS NULL AND {_LIVE} GROUP BY root_id
        ) t
        WHERE NOT EXISTS (
            SELECT 1 FROM loops c WHERE c.root_id = t.root_id AND c.{_LIVE}
            AND c.affinity IS NOT NULL AND NOT c.affinity = ANY(%s)
        )
        ORDER BY t.first, t.root_id
    ) free
    WHERE pg_try_advisory_xact_lock({_TREE_LOCKS}, hashtext(root_id))
    LIMIT %s"""
#: Channel on which a leaving node says its loops are free (for nodes that LISTEN).
ORPHANS_CHANNEL = "loopactors_orphans"


class Lease:
    """One node incarnation's lease on a store, on a connection of its own (a slow commit
    never delays a renewal). The expiry is on the database's clock; this process never
    compares wall-clock times (docs/multinode.md). Several nodes hold leases on one store
    at once, each owning its own loops; this connection also makes the node's claims."""

    def __init__(
        self,
        url: str,
        *,
        shown: str,
        name: str,
        ttl: float = 10.0,
        placement: Placement | None = None,
    ) -> None:
        pg = _psycopg()
        # The tables first (created or migrated by whichever node comes first).
        PostgresBackend(url, shown=shown, node_id="").close()
        self.shown = shown
        self.ttl = ttl
        self.name = name
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.node_id = f"{name}-{self.host}-{self.pid}-{secrets.token_hex(4)}"
        placement = placement or Placement()
        #: A loop tree is this node's to claim only if each of its loops has no affinity or
        #: one of these.
        self.labels = sorted(placement.labels)
        self.holding = Holding(self.node_id, placement.affinity)
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
        """Join the store: declare dead the nodes whose lease expired, and this node's own
        predecessors whose process is gone (the same name, on this very machine: its host,
        boot and pid namespace), and free their loops; then insert this incarnation's row.
        Live nodes run on alongside. One registration at a time (a transaction-scoped
        lock)."""
        conn = self._conn
        boot = _boot_id()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ' nodes'))")
                live = conn.execute(
                    "SELECT node_id, name, host, pid, boot_id, expires_at > clock_timestamp() "
                    "FROM nodes WHERE state = 'live'"
                ).fetchall()
                here = (self.name, self.host, boot)
                expired = [node_id for node_id, *_, valid in live if not valid]
                gone = [
                    node_id
                    for node_id, name, host, pid, boot_id, valid in live
                    if valid and boot and (name, host, boot_id) == here and not pid_exists(pid)
                ]
                dead = expired + gone
                if dead:
                    conn.execute(
                        "UPDATE nodes SET state = 'dead', dead_at = clock_timestamp(), "
                        "dead_by = %s WHERE node_id = ANY(%s) AND state = 'live'",
                        (self.node_id, dead),
                    )
                    conn.execute(_RELEASE, (dead,))
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
        self.holding.peers = len(live) - len(dead)
        for node_id in expired:
            log.warning("node %s declared dead by %s (its lease expired)", node_id, self.node_id)
        for node_id in gone:
            log.warning(
                "node %s declared dead by %s (its process on this machine is gone)",
                node_id,
                self.node_id,
            )

    def renew(self) -> bool:
        """Move the expiry on by ``ttl``: True, or False once this incarnation was declared
        dead (or left): a renewal never revives it.

        Raises:
            StoreError: the database could not be reached (the caller's clock decides).
        """
        holding = self.holding
        heard = holding.heard  # before the count is asked: a node heard later may be missing
        try:
            with self._lock:
                row = self._conn.execute(
                    "UPDATE nodes SET expires_at = clock_timestamp() + %s * interval '1 second' "
                    "WHERE node_id = %s AND state = 'live' RETURNING (SELECT count(*) "
                    "FROM nodes WHERE state = 'live' AND node_id <> %s)",
                    (self.ttl, self.node_id, self.node_id),
                ).fetchone()
        except self._error as exc:
            raise StoreError(f"cannot renew the lease on the store {self.shown}: {exc}") from None
        if row is None:
            return False
        holding.peers, holding.heard_when_counted = int(row[0]), heard
        return True

    def claim(self, capacity: int) -> list[str]:
        """One claim pass: declare dead the nodes whose lease expired (first finder wins)
        and free their loops, then take this node's fair share of the loop trees no node
        owns: ``ceil(orphan trees / live nodes)`` whole trees, oldest first, as many as fit
        in the room left here (``capacity`` live loops), skipping trees another node is
        claiming right now. The claimed loops' ids (their fences are
        this node's from now on).

        Cheap when there is nothing to claim: two statements on small indexes.

        Raises:
            StoreError: the database could not be reached, or refused the pass.
        """
        me = self.node_id
        try:
            with self._lock, self._conn.transaction():
                conn = self._conn
                mine = conn.execute(
                    "SELECT 1 FROM nodes WHERE node_id = %s AND state = 'live' "
                    "AND expires_at > clock_timestamp() FOR SHARE",
                    (me,),
                ).fetchone()
                if mine is None:
                    return []  # not live (the keeper's renewal says why)
                dead = [row[0] for row in conn.execute(_DECLARE_DEAD, (me, me))]
                if dead:
                    conn.execute(_RELEASE, (dead,))
                    for node_id in dead:
                        log.warning("node %s declared dead by %s (its lease expired)", node_id, me)
                row = conn.execute(
                    f"SELECT count(DISTINCT root_id) FROM loops WHERE owner IS NULL AND {_LIVE}"
                ).fetchone()
                orphans = int(row[0]) if row else 0
                if not orphans:
                    return []
                counted = conn.execute(
                    "SELECT (SELECT count(*) FROM nodes WHERE state = 'live' "
                    "AND expires_at > clock_timestamp()), "
                    f"(SELECT count(*) FROM loops WHERE owner = %s AND {_LIVE})",
                    (me,),
                ).fetchone()
                live_nodes, owned = (int(counted[0]), int(counted[1])) if counted else (1, 0)
                share = min(capacity - owned, math.ceil(orphans / max(live_nodes, 1)))
                if share <= 0:
                    return []
                roots = [r[0] for r in conn.execute(_FREE_TREES, (self.labels, share))]
                # Whole trees, as many as the room left here takes (in loops).
                room, taken = capacity - owned, []
                for root, size in conn.execute(
                    "SELECT root_id, count(*) FROM loops WHERE root_id = ANY(%s) "
                    f"AND owner IS NULL AND {_LIVE} GROUP BY root_id",
                    (roots,),
                ).fetchall():
                    if size <= room:
                        room -= size
                        taken.append(root)
                if not taken:
                    return []
                claimed = conn.execute(
                    "UPDATE loops SET owner = %s, fence = fence + 1 "
                    f"WHERE root_id = ANY(%s) AND owner IS NULL AND {_LIVE} "
                    "RETURNING loop_id, fence",
                    (me, taken),
                ).fetchall()
        except self._error as exc:
            raise StoreError(f"cannot claim loops in the store {self.shown}: {exc}") from None
        fences = self.holding.fences
        for loop_id, fence in claimed:
            fences[loop_id] = fence
        return [loop_id for loop_id, _ in claimed]

    def release(self) -> None:
        """Leave: this node's live loops are free at once for the other nodes to claim, and
        so is its place. Best effort (a node that cannot reach the database leaves its lease
        to expire, and its loops to the node that declares it dead)."""
        # Bounded: a renewal stuck on a dead server holds the connection; then the lease is
        # left to expire (and the connection to the garbage collector).
        if not self._lock.acquire(timeout=2.0):
            return
        try:
            with contextlib.suppress(self._error):
                if not self._conn.closed:
                    with self._conn.transaction():
                        left = self._conn.execute(
                            "UPDATE nodes SET state = 'left', expires_at = clock_timestamp() "
                            "WHERE node_id = %s AND state = 'live'",
                            (self.node_id,),
                        )
                        if left.rowcount == 1:  # else declared dead: its loops were freed
                            self._conn.execute(_RELEASE, ([self.node_id],))
                            self._conn.execute(
                                "SELECT pg_notify(%s, %s)", (ORPHANS_CHANNEL, self.node_id)
                            )
            self._conn.close()
        finally:
            self._lock.release()


def _claim(lease: Lease, capacity: int) -> list[str]:
    """A claim pass of the lease keeper; a failure is tried again at the next renewal."""
    try:
        claimed = lease.claim(capacity)
    except StoreError as exc:
        log.warning("%s; trying again at the next renewal", exc)
        return []
    if claimed:
        log.info("%s claimed %d loops", lease.node_id, len(claimed))
    return claimed


def _taken_over(lease: Lease) -> bool:
    try:
        return not lease.renew()
    except StoreError:
        return False  # the database cannot tell now: the runtime's own error stands


@contextlib.asynccontextmanager
async def _hold(
    url: StoreUrl, ttl: float, stop_margin: float, capacity: int, placement: Placement
) -> AsyncIterator[AsyncIterator[list[str]]]:
    """Hold a lease on the store while the block runs, renewed every ``ttl``/5 (jittered) in
    a worker thread, each renewal followed by a claim pass (:meth:`Lease.claim`, at most
    ``capacity`` live loops here). Yields the batches of loops claimed while the block runs
    (those claimed as it starts are the node's already: its recovery reads them). If the
    lease is not renewed for long enough that it could expire within ``stop_margin``
    seconds (what stopping the rounds takes), or a renewal is refused (the node was
    declared dead), the block is cancelled and :class:`LeaseLost` raised from it. On the
    way out the node leaves, freeing its loops at once."""
    import trio  # noqa: PLC0415 - the storage package itself runs no event loop

    lease = await trio.to_thread.run_sync(
        lambda: Lease(
            url.text, shown=url.redacted, name=placement.name, ttl=ttl, placement=placement
        )
    )
    _HELD[url.text] = lease.holding
    log.info("node %s holds a lease on the store %s (%g s)", lease.node_id, url.redacted, ttl)
    lost: list[str] = []
    # Counted from when a renewal was sent, on the monotonic clock: the database set the
    # expiry later than that, so this end is never after the database's.
    valid_for = max(ttl * 0.8 - stop_margin, ttl * 0.4)
    if _unfenced():
        log.warning("%s=1: fencing is off (test only), this node never stops", _UNFENCED_VARIABLE)
        valid_for = math.inf
    send, receive = trio.open_memory_channel[list[str]](math.inf)

    async def claim(*, announce: bool = True) -> None:
        claimed = await trio.to_thread.run_sync(_claim, lease, capacity, abandon_on_cancel=True)
        if claimed and announce:
            send.send_nowait(claimed)

    try:
        await claim(announce=False)  # the runtime's recovery reads them
        async with trio.open_nursery() as nursery:

            async def keep() -> None:
                await _keep(lease, url.redacted, valid_for, claim, lost)
                nursery.cancel_scope.cancel()

            nursery.start_soon(keep)
            yield receive
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
        send.close()
        _HELD.pop(url.text, None)
        lease.release()
    if lost:
        log.error("%s: stopping (nothing more is committed)", lost[0])
        raise LeaseLost(lost[0])


async def _keep(
    lease: Lease,
    shown: str,
    valid_for: float,
    claim: Callable[[], Awaitable[None]],
    lost: list[str],
) -> None:
    """Renew ``lease`` every fifth of its ttl (jittered: nodes started together do not
    claim in step), each renewal followed by a ``claim`` pass, until it is lost: refused
    (declared dead), or not renewed for ``valid_for`` seconds. Returns then, having said
    why in ``lost``."""
    import trio  # noqa: PLC0415 - the storage package itself runs no event loop

    unfenced = _unfenced()
    valid_until = lease.holding.valid_until = trio.current_time() + valid_for
    while True:
        with trio.move_on_at(valid_until) as waiting:
            await trio.sleep(lease.ttl / 5 * random.uniform(0.5, 1.0))
            sent = trio.current_time()
            try:
                renewed = await trio.to_thread.run_sync(lease.renew, abandon_on_cancel=True)
            except StoreError as exc:
                log.warning("%s; retrying", exc)
                continue
            if not renewed and unfenced:
                continue  # a zombie, on purpose: what fencing must catch
            if not renewed:
                lost.append(
                    f"the lease of {lease.node_id} on the store {shown} "
                    "was taken over by another node"
                )
                return
            valid_until = lease.holding.valid_until = sent + valid_for
            await claim()
        if waiting.cancelled_caught:
            lost.append(
                f"the lease of {lease.node_id} on the store {shown} could "
                f"not be renewed for {valid_for:.1f} s"
            )
            return


def _check(url: StoreUrl) -> str | None:
    if not url.rest.startswith("//"):
        return (
            "a PostgreSQL store is a URL: postgresql://USER:PASSWORD@HOST:PORT/DB "
            "(or postgresql:///DB?host=/SOCKET/DIR)"
        )
    return None


def _routes(url: StoreUrl, timeout: float) -> AbstractAsyncContextManager[CommandRoutes]:
    from ._pg_commands import open_routes  # noqa: PLC0415 - it imports this module

    return open_routes(url, timeout)


#: A database server: its calls wait on the network, so the Store makes them in a thread;
#: a runtime holds a lease on it while it runs (:func:`_hold`).
def _lease_valid(url: StoreUrl) -> bool:
    """Whether this process's lease on the store cannot have ended yet by its own clock
    (``StoreKind.lease_valid``): False once the keeper's deadline passed, or with no lease
    held (the runtime is stopping)."""
    import trio  # noqa: PLC0415 - the storage package itself runs no event loop

    holding = _HELD.get(url.text)
    return holding is not None and trio.current_time() < holding.valid_until


KIND = StoreKind(
    scheme="postgresql",
    open=_open,
    check=_check,
    blocking=True,
    hold=_hold,
    commands=_routes,
    lease_valid=_lease_valid,
)
