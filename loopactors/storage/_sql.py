"""What the SQL stores (SQLite, PostgreSQL) read and write alike, written once.

A backend sets :attr:`SqlBackend.placeholder` (``?`` or ``%s``) and the test of a live loop
(``live_loops_sql`` with its parameters); the queries here are written with ``?`` and
rewritten once per class. It keeps its own connection, transactions and what differs: the
commit, the listing, the prune.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import msgspec

from ..errors import StoreError
from ..loops import AnyEvent, LoopState, Notification, RoundRecord, event_decoder
from ._base import QueuedNotification, StoreBackend, StoreStatistics, Write

__all__ = ["SqlBackend", "latest_rows"]


def latest_rows(
    writes: Sequence[Write],
) -> tuple[dict[str, LoopState], dict[tuple[str, int], RoundRecord]]:
    """The rows a commit writes: the last state of each loop wins, as does the last record of
    each round (one row each)."""
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
    "events": "SELECT event FROM events WHERE loop_id = ? ORDER BY seq",
    "counts": """SELECT (SELECT count(*) FROM loops),
            (SELECT count(*) FROM loops WHERE {live}),
            (SELECT count(*) FROM rounds), (SELECT count(*) FROM events),
            (SELECT count(*) FROM notifications)""",
    "phases": "SELECT phase, count(*) FROM loops GROUP BY phase",
}


class SqlBackend(StoreBackend):
    """A :class:`StoreBackend` over a DB-API connection (``_conn``)."""

    #: The driver's parameter placeholder.
    placeholder: ClassVar[str]
    #: A condition true of a live loop, and its parameters.
    live_loops_sql: ClassVar[str]
    live_loops_params: ClassVar[tuple[Any, ...]]
    _sql: ClassVar[dict[str, str]]

    _conn: Any
    #: The driver's error class, and how errors name the store.
    _error: type[Exception]
    shown: str
    _round_decoder: msgspec.json.Decoder[RoundRecord]
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

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Where a read runs: the driver's errors (and a row that does not decode) become a
        :class:`StoreError`."""
        try:
            yield
        except (self._error, msgspec.DecodeError) as exc:
            raise StoreError(f"cannot read the store {self.shown}: {exc}") from exc

    @abc.abstractmethod
    def _write_queue(self, statement: str, params: tuple[Any, ...]) -> None:
        """Run one statement on the notification queue in its own transaction."""

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
