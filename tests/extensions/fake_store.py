"""A store the package does not know: ``fake:///PATH``, one append-only file of msgspec
JSON lines (each line a committed batch of writes, or a prune), replayed into a
:class:`MemoryBackend` when opened. Written the way a third party would write a store:
nothing under ``loopactors/`` names it; it plugs in through ``storage.register_store`` or
the ``loopactors.stores`` entry-point group (tests/extensions/test_store.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from loopactors.errors import StoreError
from loopactors.loops import AnyEvent, LoopState, RoundRecord
from loopactors.storage import (
    MemoryBackend,
    PruneReport,
    QueuedNotification,
    StoreBackend,
    StoreKind,
    StoreStatistics,
    StoreUrl,
    Write,
)


class _Pruned(msgspec.Struct, tag="pruned"):
    loop_ids: list[str]


class _Batch(msgspec.Struct, tag="batch"):
    writes: list[Write]


class _Done(msgspec.Struct, tag="done"):
    id: int


class _Retry(msgspec.Struct, tag="retry"):
    id: int
    next_at: float
    attempts: int


_Line = _Batch | _Pruned | _Done | _Retry


class FakeBackend(StoreBackend):
    kind = "fake"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.memory = MemoryBackend()
        #: Threads that made a call: the runtime calls a blocking store off its event loop.
        self.threads: set[int] = set()
        decoder = msgspec.json.Decoder(_Line)
        if path.exists():
            for line in path.read_bytes().splitlines():
                self._apply(decoder.decode(line))
        self._file = path.open("ab")

    def _apply(self, line: _Line) -> None:
        # Replayed in order, commits number the queued notifications as they did first.
        if isinstance(line, _Batch):
            self.memory.commit(line.writes)
            return
        if isinstance(line, _Done):
            self.memory.notification_done(line.id)
            return
        if isinstance(line, _Retry):
            self.memory.notification_retry(line.id, line.next_at, line.attempts)
            return
        for loop_id in line.loop_ids:  # a prune replayed: the loops it removed
            self.memory._loops.pop(loop_id, None)
            self.memory._rounds.pop(loop_id, None)
            self.memory._events.pop(loop_id, None)

    def _seen(self) -> None:
        self.threads.add(threading.get_ident())
        if self._file.closed:
            raise StoreError(f"the fake store {self.path} is closed")

    def _log(self, line: _Line) -> None:
        self._file.write(msgspec.json.encode(line) + b"\n")
        self._file.flush()

    def commit(self, writes: Sequence[Write]) -> None:
        self._seen()
        self._log(_Batch(list(writes)))
        self.memory.commit(writes)

    def due_notifications(self, now: float, *, limit: int) -> list[QueuedNotification]:
        self._seen()
        return self.memory.due_notifications(now, limit=limit)

    def next_notification_at(self) -> float | None:
        self._seen()
        return self.memory.next_notification_at()

    def notification_done(self, notification_id: int) -> None:
        self._seen()
        self._log(_Done(notification_id))
        self.memory.notification_done(notification_id)

    def notification_retry(self, notification_id: int, next_at: float, attempts: int) -> None:
        self._seen()
        self._log(_Retry(notification_id, next_at, attempts))
        self.memory.notification_retry(notification_id, next_at, attempts)

    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        self._seen()
        return self.memory.find_loop_ids_ending(suffix, limit=limit)

    def get_loop(self, loop_id: str) -> LoopState | None:
        self._seen()
        return self.memory.get_loop(loop_id)

    def list_loops(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[LoopState]:
        self._seen()
        return self.memory.list_loops(live_only=live_only, limit=limit, after=after)

    def find_loop_ids(self, prefix: str, *, limit: int) -> list[str]:
        self._seen()
        return self.memory.find_loop_ids(prefix, limit=limit)

    def rounds(self, loop_id: str) -> list[RoundRecord]:
        self._seen()
        return self.memory.rounds(loop_id)

    def events(self, loop_id: str) -> list[AnyEvent]:
        self._seen()
        return self.memory.events(loop_id)

    def prune_batch(
        self,
        before: float,
        *,
        after: str = "",
        limit: int = 100,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> tuple[PruneReport, str | None]:
        self._seen()
        kept = set(self.memory._loops)
        report, cursor = self.memory.prune_batch(
            before, after=after, limit=limit, dry_run=dry_run, deadline=deadline
        )
        gone = sorted(kept - set(self.memory._loops))
        if gone:
            self._log(_Pruned(gone))
        return report, cursor

    def statistics(self) -> StoreStatistics:
        self._seen()
        return self.memory.statistics()

    def close(self) -> None:
        self._file.close()


#: Every backend opened, newest last (what the tests look into).
OPENED: list[FakeBackend] = []


def _open(url: StoreUrl, state_dir: Path | None, read_only: bool) -> FakeBackend | None:
    path = Path(url.rest.removeprefix("//"))
    if read_only and not path.exists():
        return None
    backend = FakeBackend(path)
    OPENED.append(backend)
    return backend


def _check(url: StoreUrl) -> str | None:
    return None if url.rest.startswith("///") else "a fake store is fake:///ABSOLUTE/PATH"


KIND = StoreKind(scheme="fake", open=_open, check=_check, blocking=True)
