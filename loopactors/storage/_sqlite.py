"""The durable backend: one SQLite file in WAL mode, written by group commit.

Rows carry the msgspec-JSON of the committed objects; the other columns exist only to be
queried (phase, order, counts). The schema is versioned with ``PRAGMA user_version``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from .._util import closed_on_failure, private_dirs
from ..errors import StoreError
from ..loops import (
    TERMINAL_PHASES,
    LoopState,
    RoundSummary,
)
from ._base import (
    DB_FILENAME,
    Write,
    queued_by,
)
from ._kinds import Durability, StoreKind, StoreUrl, check_durability
from ._sql import SqlBackend, event_type, latest_rows

__all__ = ["KIND", "SqliteBackend"]

log = logging.getLogger("loopactors.store")


def _refuse_empty(path: Path) -> None:
    """A zero-length database file is not a store (SQLite would take it for a new one)."""
    wal = path.with_name(path.name + "-wal")
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0 and not (wal.exists() and wal.stat().st_size > 0):
            raise StoreError(
                f"{path} is an empty file (0 bytes), not a loopactors store: move it away "
                "(or delete it) to start an empty store there, or restore it from a backup"
            )


def _warn_if_readable(path: Path) -> None:
    """An existing store others can read is left as it is, and said once (docs/security.md)."""
    try:
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (path.parent, path)}
    except OSError:
        return
    if any(mode & 0o077 for mode in modes.values()):
        shown = ", ".join(f"{p} is {mode:04o}" for p, mode in modes.items())
        log.warning(
            "other users can read the state directory or its store (%s); it holds round "
            "outputs and transcripts: make it private with `chmod 700 %s && chmod 600 %s*`",
            shown,
            path.parent,
            path,
        )


# Migration N (1-based) brings a file from user_version N-1 to N. Append only: a released
# migration is never edited. Statements, not scripts: executescript() would commit midway.
_MIGRATIONS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE loops (
            loop_id TEXT PRIMARY KEY,
            phase TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            state BLOB NOT NULL
        )""",
        "CREATE INDEX loops_by_phase ON loops (phase)",
        """CREATE TABLE rounds (
            loop_id TEXT NOT NULL,
            round INTEGER NOT NULL,
            status TEXT NOT NULL,
            record BLOB NOT NULL,
            PRIMARY KEY (loop_id, round)
        )""",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            loop_id TEXT NOT NULL,
            type TEXT NOT NULL,
            event BLOB NOT NULL
        )""",
        "CREATE INDEX events_by_loop ON events (loop_id, seq)",
    ),
    # 2: what each round cost (coding-agent CLI kinds), queryable without decoding records.
    ("ALTER TABLE rounds ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0",),
    # 3: the notification queue (docs/notifications.md): one row per message and URL.
    (
        """CREATE TABLE notifications (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            loop_id TEXT NOT NULL,
            next_at REAL NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            notification BLOB NOT NULL
        )""",
        "CREATE INDEX notifications_due ON notifications (next_at, id)",
    ),
]

_UPSERT_LOOP = """
    INSERT INTO loops (loop_id, phase, created_at, updated_at, state) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (loop_id) DO UPDATE SET phase = excluded.phase,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        state = excluded.state
"""
_UPSERT_ROUND = """
    INSERT INTO rounds (loop_id, round, status, record, cost_usd) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (loop_id, round) DO UPDATE SET status = excluded.status, record = excluded.record,
        cost_usd = excluded.cost_usd
"""
_APPEND_EVENT = "INSERT INTO events (loop_id, type, event) VALUES (?, ?, ?)"
_QUEUE_NOTIFICATION = "INSERT INTO notifications (loop_id, next_at, notification) VALUES (?, ?, ?)"
_TERMINAL = tuple(sorted(TERMINAL_PHASES))
_NOT_TERMINAL = f"phase NOT IN ({', '.join('?' * len(_TERMINAL))})"
#: Loop ids per query of round_summaries: below SQLITE_MAX_VARIABLE_NUMBER of every version.
_IDS_PER_QUERY = 500


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that never writes. A WAL file in a read-only directory cannot get the
    shared-memory file SQLite wants next to it; then, if no write-ahead log is left over (a
    clean shutdown checkpoints it away), the file is opened as immutable, which needs none."""
    uri = path.resolve().as_uri()
    if not path.exists():
        raise sqlite3.OperationalError(f"no such file: {path}")
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.OperationalError:
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise
    else:
        return conn
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)


class SqliteBackend(SqlBackend):
    """A store in one SQLite file; see DESIGN.md section 4 for the durability contract."""

    kind = "sqlite"
    placeholder = "?"
    live_loops_sql = _NOT_TERMINAL
    live_loops_params = _TERMINAL
    no_limit = -1
    schema = len(_MIGRATIONS)

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        """Open (and create, migrate) the file; ``read_only`` opens it only to read: nothing
        is created, migrated or written, so a store on a read-only disk can be read."""
        self.path = path
        self.shown = str(path)
        self._error = sqlite3.Error
        self.read_only = read_only
        self._start_codecs()
        #: Loops whose row did not decode, each said once.
        self._undecodable: set[str] = set()
        if path.exists():
            _refuse_empty(path)
            if not read_only:
                _warn_if_readable(path)
        elif not read_only:
            try:  # created 0600 here: SQLite gives its WAL and shared memory the same mode
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot create the store {path}: {exc}") from exc
        try:
            # The Store actor calls in from worker threads, one call at a time, hence no
            # same-thread check. No implicit transactions: commit() issues its own.
            self._conn = (
                _connect_read_only(path)
                if read_only
                else sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {path}: {exc}") from exc
        with closed_on_failure(self._conn):
            if read_only:
                self._check_readable()
            else:
                self._open()

    def _open(self) -> None:
        conn = self._conn
        try:
            # Refuse a newer file before touching it (journal mode included).
            self._check_version(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute("PRAGMA journal_mode = WAL")
            # In WAL mode NORMAL syncs at checkpoints, not at every commit: a committed
            # transaction survives a crash or SIGKILL of this process (it is in the OS's
            # cache); only an OS crash or power loss may drop the last ones, never corrupt.
            # durability = "full" syncs the WAL at every commit (set_durability).
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("PRAGMA busy_timeout = 5000")
            self._migrate()
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
                raise StoreError(f"{self.path} is not an SQLite database") from exc
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc

    def _check_readable(self) -> None:
        try:
            self._check_version(self._conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
                raise StoreError(f"{self.path} is not an SQLite database") from exc
            raise StoreError(f"cannot read the store {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        """Apply the pending migrations in one transaction: a file is at one version or the next."""
        conn = self._conn
        if conn.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS):
            return
        with self._transaction():
            # Read again under the write lock: another process may have migrated meanwhile.
            version: int = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            for statements in _MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {len(_MIGRATIONS)}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            # A failed COMMIT may already have ended the transaction; a broken connection
            # must not hide the original error.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            raise

    def set_durability(self, durability: Durability) -> None:
        # A connection's own setting, not the file's: every open says it again.
        level = "FULL" if check_durability(durability) == "full" else "NORMAL"
        try:
            self._conn.execute(f"PRAGMA synchronous = {level}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot set durability on the store {self.path}: {exc}") from exc

    def _commit(self, writes: Sequence[Write]) -> None:
        encode = self._encoder.encode
        # A recovery's note leaves the state as the row holds it: not encoded and written
        # again (half of what recovering a loop wrote).
        states, records = latest_rows(writes, changed_only=True)
        try:
            with self._transaction():
                # Generators, not lists: rows are encoded as SQLite consumes them.
                executemany = self._conn.executemany
                executemany(
                    _UPSERT_LOOP,
                    (
                        (s.loop_id, s.phase, s.created_at, s.updated_at, encode(s))
                        for s in states.values()
                    ),
                )
                executemany(
                    _UPSERT_ROUND,
                    (
                        (r.loop_id, r.round, r.status, encode(r), r.cost_usd)
                        for r in records.values()
                    ),
                )
                executemany(
                    _APPEND_EVENT,
                    ((e.loop_id, event_type(e), encode(e)) for w in writes for e in w.events),
                )
                executemany(
                    _QUEUE_NOTIFICATION,
                    ((n.loop_id, n.at, encode(n)) for n in queued_by(writes)),
                )
        except Exception as exc:
            raise StoreError(
                f"cannot commit {len(writes)} writes to the store {self.path}: {exc}"
            ) from exc

    def _write_queue(self, statement: str, params: tuple[Any, ...]) -> None:
        try:
            with self._transaction():
                self._conn.execute(statement, params)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot update the notification queue in {self.path}: {exc}") from exc

    def get_loop(self, loop_id: str) -> LoopState | None:
        with self._reading():
            row = self._conn.execute(
                "SELECT state FROM loops WHERE loop_id = ?", (loop_id,)
            ).fetchone()
            if row is None:
                return None
            state = self._decode_state(loop_id, row[0])
            if state is None:
                raise StoreError(
                    f"the store's row of loop {loop_id!r} does not decode (see the log); "
                    "the loop is left out until it is repaired or pruned"
                )
            return state

    def _decode_state(self, loop_id: str, data: bytes | str) -> LoopState | None:
        """A loop's row, or None (logged once, naming the loop) when it does not decode: one
        bad row never stops the node or hides the other loops."""
        try:
            return self._state_decoder.decode(data)
        except msgspec.MsgspecError as exc:
            if loop_id not in self._undecodable:
                self._undecodable.add(loop_id)
                log.error(  # noqa: TRY400 - the reason is in the line; no traceback
                    "the store's row of loop %r does not decode (%s): the loop is skipped "
                    "(left as it is in %s; stop it or prune it once repaired)",
                    loop_id,
                    exc,
                    self.path,
                )
            return None

    def _states(self, rows: Iterable[tuple[str, Any]]) -> list[LoopState]:
        found = [self._decode_state(loop_id, state) for loop_id, state in rows]
        return [state for state in found if state is not None]

    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        # A scan of the ids (no index serves a tail): asked only when no id starts with it.
        query = "SELECT loop_id FROM loops WHERE substr(loop_id, ?) = ? ORDER BY loop_id LIMIT ?"
        return self._loop_ids(query, (-len(suffix), suffix, limit))

    def round_summaries(self, loop_ids: Sequence[str]) -> dict[str, tuple[RoundSummary, ...]]:
        chunks = (loop_ids[i : i + _IDS_PER_QUERY] for i in range(0, len(loop_ids), _IDS_PER_QUERY))
        return self._summaries(
            (
                "SELECT loop_id, record FROM rounds "
                f"WHERE loop_id IN ({', '.join('?' * len(chunk))}) ORDER BY loop_id, round",
                chunk,
            )
            for chunk in chunks
        )

    def _prune_transaction(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction()

    def close(self) -> None:
        self._conn.close()


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> SqliteBackend | None:
    directory = KIND.local_dir(url, state_dir or Path())
    assert directory is not None
    if read_only:
        if directory.exists() and not directory.is_dir():
            raise StoreError(f"the state directory {directory} is not a directory")
        if not directory.exists():
            raise StoreError(
                f"no state directory {directory} (give the one a runtime used: --state DIR)"
            )
        if not (directory / DB_FILENAME).exists():
            return None
        return SqliteBackend(directory / DB_FILENAME, read_only=True)
    try:
        private_dirs(directory)
    except OSError as exc:
        raise StoreError(f"cannot create the state directory {directory}: {exc}") from exc
    return SqliteBackend(directory / DB_FILENAME)


#: One file in the state directory (or the directory ``sqlite:DIR`` names), written inline:
#: SQLite is faster on the event loop's thread than in a worker thread (runtime/_store.py).
KIND = StoreKind(
    scheme="sqlite",
    open=_open,
    local_files=(DB_FILENAME,),
    blocking=False,
)
