"""The in-process backend: dicts, gone with the process. For tests, demos and ``--store memory``."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import StoreError
from ..loops import TERMINAL_PHASES, AnyEvent, LoopState, RoundRecord
from ._base import (
    PRUNE_BATCH,
    PruneReport,
    QueuedNotification,
    StoreBackend,
    StoreStatistics,
    Write,
    check_limit,
    queued_by,
)
from ._kinds import StoreKind, StoreUrl

__all__ = ["KIND", "MemoryBackend"]


class MemoryBackend(StoreBackend):
    """Keeps the committed objects themselves: states are frozen Structs, so nothing is copied."""

    kind = "memory"

    def __init__(self) -> None:
        self._loops: dict[str, LoopState] = {}
        self._rounds: dict[str, dict[int, RoundRecord]] = {}
        self._events: dict[str, list[AnyEvent]] = {}
        self._notifications: dict[int, QueuedNotification] = {}
        self._next_id = 1
        self._commits = 0
        self._writes = 0
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed")

    def commit(self, writes: Sequence[Write]) -> None:
        self._check_open()
        if not writes:
            return
        # Plain dict and list updates of typed objects cannot fail half-way, so applying in
        # order is already all-or-nothing; later writes of a loop replace earlier ones.
        loops, rounds, events = self._loops, self._rounds, self._events
        for write in writes:
            state = write.state
            loops[state.loop_id] = state
            record = write.round
            if record is not None:
                rounds.setdefault(record.loop_id, {})[record.round] = record
            for event in write.events:
                events.setdefault(event.loop_id, []).append(event)
        for notification in queued_by(writes):
            queued = QueuedNotification(
                id=self._next_id, notification=notification, next_at=notification.at
            )
            self._notifications[self._next_id] = queued
            self._next_id += 1
        self._commits += 1
        self._writes += len(writes)

    def due_notifications(self, now: float, *, limit: int) -> list[QueuedNotification]:
        self._check_open()
        due = sorted(
            (q for q in self._notifications.values() if q.next_at <= now),
            key=lambda q: (q.next_at, q.id),
        )
        return due[:limit]

    def next_notification_at(self) -> float | None:
        self._check_open()
        return min((q.next_at for q in self._notifications.values()), default=None)

    def notification_done(self, notification_id: int) -> None:
        self._check_open()
        self._notifications.pop(notification_id, None)

    def notification_retry(self, notification_id: int, next_at: float, attempts: int) -> None:
        self._check_open()
        queued = self._notifications.get(notification_id)
        if queued is not None:
            self._notifications[notification_id] = QueuedNotification(
                id=queued.id, notification=queued.notification, next_at=next_at, attempts=attempts
            )

    def get_loop(self, loop_id: str) -> LoopState | None:
        self._check_open()
        return self._loops.get(loop_id)

    def list_loops(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[LoopState]:
        self._check_open()
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be None or >= 0, not {limit}")
        states: Iterable[LoopState] = self._loops.values()
        if live_only:
            states = (s for s in states if s.phase not in TERMINAL_PHASES)
        if after is not None:
            states = (s for s in states if (s.created_at, s.loop_id) < after)
        # loop_id breaks ties the same way the SQLite backend's ORDER BY does.
        ordered = sorted(states, key=lambda s: (s.created_at, s.loop_id), reverse=True)
        return ordered if limit is None else ordered[:limit]

    def find_loop_ids(self, prefix: str, *, limit: int) -> list[str]:
        self._check_open()
        return sorted(i for i in self._loops if i.startswith(prefix))[:limit]

    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        self._check_open()
        return sorted(i for i in self._loops if i.endswith(suffix))[:limit]

    def rounds(self, loop_id: str) -> list[RoundRecord]:
        self._check_open()
        by_round = self._rounds.get(loop_id, {})
        return [by_round[n] for n in sorted(by_round)]

    def events(self, loop_id: str) -> list[AnyEvent]:
        self._check_open()
        return list(self._events.get(loop_id, ()))

    def prune_batch(
        self,
        before: float,
        *,
        after: str = "",
        limit: int = PRUNE_BATCH,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> tuple[PruneReport, str | None]:
        self._check_open()
        check_limit(limit)
        # In memory a batch costs microseconds a loop: every loop past the cursor is looked
        # at at once, and the deadline is not needed.
        candidates = sorted(
            s.loop_id
            for s in self._loops.values()
            if s.loop_id > after and s.phase in TERMINAL_PHASES and s.updated_at < before
        )
        doomed = candidates[:limit]
        report = PruneReport(
            before=before,
            dry_run=dry_run,
            loops=len(doomed),
            rounds=sum(len(self._rounds.get(loop_id, ())) for loop_id in doomed),
            events=sum(len(self._events.get(loop_id, ())) for loop_id in doomed),
        )
        if not dry_run:
            for loop_id in doomed:
                del self._loops[loop_id]
                self._rounds.pop(loop_id, None)
                self._events.pop(loop_id, None)
        return report, (doomed[-1] if len(candidates) > limit else None)

    def statistics(self) -> StoreStatistics:
        self._check_open()
        return StoreStatistics(
            loops=len(self._loops),
            live_loops=sum(s.phase not in TERMINAL_PHASES for s in self._loops.values()),
            rounds=sum(map(len, self._rounds.values())),
            events=sum(map(len, self._events.values())),
            commits=self._commits,
            writes=self._writes,
            phases=dict(collections.Counter(s.phase for s in self._loops.values())),
            notifications=len(self._notifications),
        )

    def close(self) -> None:
        self._closed = True
        self._loops, self._rounds, self._events = {}, {}, {}


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> MemoryBackend | None:
    # Read offline there is nothing: the loops lived in a process that has ended.
    return None if read_only else MemoryBackend()


KIND = StoreKind(scheme="memory", open=_open, in_process=True, blocking=False)
