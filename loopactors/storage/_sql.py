"""What the SQL stores (SQLite, PostgreSQL) read and write alike, written once.

A backend sets :attr:`SqlBackend.placeholder` (``?`` or ``%s``) and the test of a live loop
(``live_loops_sql`` with its parameters); the queries here are written with ``?`` and
rewritten once per class. It keeps its own connection, transactions and what differs: the
commit, how it decodes the loops it lists, the transaction a prune removes loops in.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import msgspec

from ..errors import StoreError
from ..loops import (
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
)

__all__ = ["SqlBackend", "event_type", "latest_rows"]


def latest_rows(
    writes: Sequence[Write], *, changed_only: bool = False
) -> tuple[dict[str, LoopState], dict[tuple[str, int], RoundRecord]]:
    """The rows a commit writes: the last state of each loop wins, as does the last record of
    each round (one row each). With ``changed_only``, states the store already holds
    (``Write.state_stored``) are left out: the row holds them, or an earlier write of the
    same commit writes them."""
    if changed_only:
        states = {w.state.loop_id: w.state for w in writes if not w.state_stored}
    else:
        states = {w.state.loop_id: w.state for w in writes}
    records = {(r.loop_id, r.round): r for w in writes if (r := w.round) is not None}
    return states, records


_QUERIES = {
    "due": (
        "SELECT id, notification, next_at, attempts FROM notifications "
        "WHERE next_at <= ? ORDER BY next_at, id LIMIT ?"
    ),
    "next": "SELECT min(next_at) FROM notifications",
    "done": "DELETE FROM notifications WHERE id = ?",
    "retry": "UPDATE notifications SET next_at = ?, attempts = ? WHERE id = ?",
    "rounds": "SELECT record FROM rounds WHERE loop_id = ? ORDER BY round",
    # A range on the primary key (text compares by its bytes: SQLite's UTF-8, PostgreSQL's
    # "C" collation; nothing sorts after U+10FFFF): an index seek, not a scan of every id.
    "ids_from": (
        "SELECT loop_id FROM loops WHERE loop_id >= ? AND loop_id < ? ORDER BY loop_id LIMIT ?"
    ),
    "events": "SELECT event FROM events WHERE loop_id = ? ORDER BY seq",
    "counts": """SELECT (SELECT count(*) FROM loops),
            (SELECT count(*) FROM loops WHERE {live}),
            (SELECT count(*) FROM rounds), (SELECT count(*) FROM events),
            (SELECT count(*) FROM notifications)""",
    "phases": "SELECT phase, count(*) FROM loops GROUP BY phase",
    # No ORDER BY: SQLite's sorter would copy every row, state included (40% of the read for
    # 50,000 loops).
    "live": "SELECT loop_id, state FROM loops WHERE {live}",
    # The loops a prune batch looks at: the next ones by primary key from the cursor, each
    # with whether it is due (finished, and last changed before the cutoff). A batch reads
    # at most PRUNE_SCAN rows, however few of them are due.
    "prune_scan": (
        "SELECT loop_id, NOT ({live}) AND updated_at < ? FROM loops "
        "WHERE loop_id > ? ORDER BY loop_id LIMIT ?"
    ),
    # A loop's rounds and events: counted by a dry run, removed by a prune.
    "count_rounds": "SELECT count(*) FROM rounds WHERE loop_id = ?",
    "count_events": "SELECT count(*) FROM events WHERE loop_id = ?",
    "delete_rounds": "DELETE FROM rounds WHERE loop_id = ?",
    "delete_events": "DELETE FROM events WHERE loop_id = ?",
    # A loop that came back to life meanwhile (another node) stays.
    "delete_loop": "DELETE FROM loops WHERE loop_id = ? AND NOT ({live})",
}


def event_type(event: AnyEvent) -> str:
    """The tag an event is stored under (its row's ``type``)."""
    return str(type(event).__struct_config__.tag)


class SqlBackend(StoreBackend):
    """A :class:`StoreBackend` over a DB-API connection (``_conn``)."""

    #: The driver's parameter placeholder.
    placeholder: ClassVar[str]
    #: A condition true of a live loop, and its parameters.
    live_loops_sql: ClassVar[str]
    live_loops_params: ClassVar[tuple[Any, ...]]
    #: The ``LIMIT`` that sets none.
    no_limit: ClassVar[int | None]
    #: The schema this code writes (its number of migrations): a newer store is refused.
    schema: ClassVar[int]
    _sql: ClassVar[dict[str, str]]

    _conn: Any
    #: The driver's error class, and how errors name the store.
    _error: type[Exception]
    shown: str
    _encoder: msgspec.json.Encoder
    _state_decoder: msgspec.json.Decoder[LoopState]
    _round_decoder: msgspec.json.Decoder[RoundRecord]
    #: A record's summary fields only: the output and transcript are skipped, not built.
    _summary_decoder: msgspec.json.Decoder[RoundSummary]
    _notification_decoder: msgspec.json.Decoder[Notification]
    _commits: int
    _writes: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "placeholder" in cls.__dict__:
            cls._sql = {
                name: query.replace("?", cls.placeholder).replace("{live}", cls.live_loops_sql)
                for name, query in _QUERIES.items()
            }

    def _start_codecs(self) -> None:
        """In ``__init__``: the encoder, the decoders and the commit counters."""
        self._encoder = msgspec.json.Encoder()
        self._state_decoder = msgspec.json.Decoder(LoopState)
        self._round_decoder = msgspec.json.Decoder(RoundRecord)
        self._summary_decoder = msgspec.json.Decoder(RoundSummary)
        self._notification_decoder = msgspec.json.Decoder(Notification)
        self._commits = 0
        self._writes = 0

    def _check_version(self, version: int) -> None:
        if version > self.schema:
            raise StoreError(
                f"the store {self.shown} was written by a newer loopactors "
                f"(schema {version}, this one reads up to {self.schema})"
            )

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Where a read runs: the driver's errors (and a row that does not decode) become a
        :class:`StoreError`."""
        try:
            yield
        except (self._error, msgspec.DecodeError) as exc:
            raise StoreError(f"cannot read the store {self.shown}: {exc}") from exc

    def commit(self, writes: Sequence[Write]) -> None:
        if not writes:
            return
        self._commit(writes)
        self._commits += 1
        self._writes += len(writes)

    @abc.abstractmethod
    def _commit(self, writes: Sequence[Write]) -> None:
        """Write ``writes`` (at least one) in one transaction, or raise :class:`StoreError`
        having written nothing."""

    @abc.abstractmethod
    def _write_queue(self, statement: str, params: tuple[Any, ...]) -> None:
        """Run one statement on the notification queue in its own transaction."""

    @abc.abstractmethod
    def _prune_transaction(self) -> AbstractContextManager[None]:
        """The transaction a prune batch removes its loops in."""

    @abc.abstractmethod
    def _states(self, rows: Iterable[tuple[str, Any]]) -> list[LoopState]:
        """The loops of rows of ``loop_id, state`` (read in :meth:`_reading`)."""

    def list_loops(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[LoopState]:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be None or >= 0, not {limit}")
        mark = self.placeholder
        conditions = [self.live_loops_sql] if live_only else []
        params: list[Any] = list(self.live_loops_params) if live_only else []
        if after is not None:
            conditions.append(f"(created_at, loop_id) < ({mark}, {mark})")
            params += after
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        params.append(self.no_limit if limit is None else limit)
        query = (
            f"SELECT loop_id, state FROM loops {where} "
            f"ORDER BY created_at DESC, loop_id DESC LIMIT {mark}"
        )
        with self._reading():
            return self._states(self._conn.execute(query, params))

    def live_loops(self) -> list[LoopState]:
        with self._reading():
            return self._states(self._conn.execute(self._sql["live"], self.live_loops_params))

    def due_notifications(self, now: float, *, limit: int) -> list[QueuedNotification]:
        decode = self._notification_decoder.decode
        with self._reading():
            return [
                QueuedNotification(id=i, notification=decode(n), next_at=at, attempts=attempts)
                for i, n, at, attempts in self._conn.execute(self._sql["due"], (now, limit))
            ]

    def next_notification_at(self) -> float | None:
        with self._reading():
            row = self._conn.execute(self._sql["next"]).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def notification_done(self, notification_id: int) -> None:
        self._write_queue(self._sql["done"], (notification_id,))

    def notification_retry(self, notification_id: int, next_at: float, attempts: int) -> None:
        self._write_queue(self._sql["retry"], (next_at, attempts, notification_id))

    def _loop_ids(self, query: str, params: tuple[Any, ...]) -> list[str]:
        with self._reading():
            return [loop_id for (loop_id,) in self._conn.execute(query, params)]

    def find_loop_ids(self, prefix: str, *, limit: int) -> list[str]:
        return self._loop_ids(self._sql["ids_from"], (prefix, prefix + "\U0010ffff", limit))

    def _summaries(self, reads: Iterable[tuple[str, Any]]) -> dict[str, tuple[RoundSummary, ...]]:
        """The round summaries in the rows ``loop_id, record`` (in round order) that each
        query reads with its parameters."""
        decode = self._summary_decoder.decode
        found: dict[str, list[RoundSummary]] = {}
        with self._reading():
            for query, params in reads:
                for loop_id, record in self._conn.execute(query, params):
                    found.setdefault(loop_id, []).append(decode(record))
        return {loop_id: tuple(summaries) for loop_id, summaries in found.items()}

    def rounds(self, loop_id: str) -> list[RoundRecord]:
        decode = self._round_decoder.decode
        with self._reading():
            rows = self._conn.execute(self._sql["rounds"], (loop_id,))
            return [decode(record) for (record,) in rows]

    def events(self, loop_id: str) -> list[AnyEvent]:
        decode = event_decoder.decode
        with self._reading():
            return [
                decode(event) for (event,) in self._conn.execute(self._sql["events"], (loop_id,))
            ]

    def statistics(self) -> StoreStatistics:
        with self._reading():
            row = self._conn.execute(self._sql["counts"], self.live_loops_params).fetchone()
            loops, live, rounds, events, queued = row
            phases = dict(self._conn.execute(self._sql["phases"]).fetchall())
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
        execute, sql, live = self._conn.execute, self._sql, self.live_loops_params
        taken: list[str] = []
        rounds = events = 0
        try:
            scanned = execute(sql["prune_scan"], (*live, before, after, PRUNE_SCAN)).fetchall()
            due = [loop_id for loop_id, is_due in scanned if is_due][:limit]
            # Loop by loop, so that a deadline can end the batch early: a loop with many
            # thousands of events takes milliseconds on its own.
            with contextlib.nullcontext() if dry_run or not due else self._prune_transaction():
                for loop_id in due:
                    if taken and deadline is not None and time.perf_counter() > deadline:
                        break
                    if dry_run:
                        counts = [
                            execute(sql[name], (loop_id,)).fetchone()[0]
                            for name in ("count_rounds", "count_events")
                        ]
                    else:
                        counts = [
                            execute(sql[name], (loop_id,)).rowcount
                            for name in ("delete_rounds", "delete_events")
                        ]
                        execute(sql["delete_loop"], (loop_id, *live))
                    rounds += counts[0]
                    events += counts[1]
                    taken.append(loop_id)
        except self._error as exc:
            action = "count what to prune in" if dry_run else "prune"
            raise StoreError(f"cannot {action} the store {self.shown}: {exc}") from exc
        report = PruneReport(
            before=before, dry_run=dry_run, loops=len(taken), rounds=rounds, events=events
        )
        if sum(1 for _, is_due in scanned if is_due) > len(taken):
            return report, taken[-1]  # the due loops after it are taken by the next batch
        return report, (scanned[-1][0] if len(scanned) == PRUNE_SCAN else None)
