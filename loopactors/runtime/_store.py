"""The Store actor: durable state with group commit, a thin shell over a storage backend."""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from ..actors import Actor, ErrorReply, PendingReply
from ..errors import ActorError, LoopsFenced, StoreError
from ..loops import LoopState
from ..storage import PRUNE_BATCH, CommitLatency, PruneReport, StoreBackend, Write
from ._events import EventBus
from ._messages import (
    Commit,
    DueNotifications,
    FindLoopIds,
    Forward,
    GetEvents,
    GetLoop,
    GetLoopOwners,
    GetLoops,
    GetRounds,
    GetRoundSummaries,
    GetStoreStatistics,
    ListLiveLoops,
    ListLoops,
    LoopsFencedOut,
    NextNotificationAt,
    NotificationDone,
    NotificationRetry,
    NotificationsQueued,
    PruneLoops,
    RoundsRecorded,
    SetNodeGateway,
)
from ._retention import keep_pruning
from ._wiring import COORDINATOR, DISPATCHER, NOTIFIER, deliver

TYPE_CHECKING = False
if TYPE_CHECKING:
    import outcome  # trio's own: what a thread's call ended with

__all__ = ["Store"]


#: Commit at once from this many pending writes; below, wait up to COMMIT_DELAY for more.
FLUSH_AT = 2000
COMMIT_DELAY = 0.01
#: The longest a stopping Store waits on a blocking backend for its last commit and close.
STOP_SECONDS = 10.0
#: While the disk is full, a failed commit is tried again this often (seconds).
DISK_FULL_RETRY = 1.0

log = logging.getLogger("loopactors.runtime")


def is_disk_full(exc: BaseException | None) -> bool:
    """``exc`` (or what caused it) says the disk or the database file is full."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(exc, sqlite3.Error) and (
            getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            or "database or disk is full" in str(exc)
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class _FlushNow:
    """The Store's commit-delay timer, sent to itself."""

    __slots__ = ()


class _PruneNext:
    """The rest of a prune, sent to the back of the Store's own mailbox between batches."""

    __slots__ = ("after", "reply", "total")

    def __init__(self, total: PruneReport, after: str, reply: PendingReply | None) -> None:
        self.total = total
        self.after = after
        self.reply = reply


#: How long a prune batch may take (seconds), past the loop in hand: a loop with thousands of
#: events takes milliseconds on its own, a hundred light ones take a few.
PRUNE_BATCH_SECONDS = 0.02


class Store(Actor[Any]):
    """Durable state with group commit, and the side effects that wait for it.

    Commits are not done one by one: their writes collect while the mailbox drains, then go
    to the backend as one transaction. Only then are the batch's events published, its
    forwards sent and its callers answered. Throughput comes from batching, and nothing that
    depends on a write happens before the write is durable (no debounce window to lose,
    rolebox's W13). A transaction that fails crashes the Store: its supervisor restarts the
    runtime behind it, which recovers from what is durable.

    A full disk is the exception: the batch is kept and tried again every
    :data:`DISK_FULL_RETRY` seconds, its callers wait (a loop runner waits for its round's
    intent before it dispatches, so nothing new runs and nothing runs again), reads are
    refused with the reason, and all goes on once a commit succeeds.
    """

    mailbox_size = 16_384
    uses_nursery = True  # for the commit-delay timer, the retention task, prune batches
    #: The most loops removed per transaction (and per turn of the mailbox) by a prune.
    prune_batch_size = PRUNE_BATCH

    def __init__(
        self,
        open_backend: Callable[[], StoreBackend],
        bus: EventBus,
        *,
        shared: bool = False,
        blocking: bool = False,
        retention_days: float | None = None,
        tell_recorded: bool = False,
    ) -> None:
        """``open_backend`` is called at each (re)start. A ``shared`` backend (the in-memory
        one, which must outlive a restart of this actor) is not closed when it stops. A
        ``blocking`` backend (one whose calls wait on a server) is called in a worker thread,
        one call at a time, so the event loop never waits on it. With
        ``retention_days``, finished loops older than that are pruned at the start and
        then periodically (see :mod:`._retention`). With ``tell_recorded`` (a remote
        transport), the keys of the rounds each commit recorded go to the Dispatcher."""
        self._open_backend = open_backend
        self._tell_recorded = tell_recorded
        self._bus = bus
        self._shared = shared
        self._blocking = blocking
        self._retention_days = retention_days
        self.backend: StoreBackend
        self._batch: list[Write] = []
        #: Callers waiting for the batch, and what it forwards once durable, by loop (a
        #: shared store may fence some loops of a batch: theirs are told, not done).
        self._waiting: list[tuple[str, PendingReply]] = []
        self._forwards: list[tuple[str, tuple[Forward, ...]]] = []
        #: The last state of each loop in ``_batch``: what a read of it returns.
        self._batched_states: dict[str, LoopState] = {}
        self._flush_due = False
        self.commit_latency = CommitLatency()
        #: Since when commits fail because the disk is full (None: they do not).
        self._full_since: float | None = None
        self._stopping = False

    async def on_start(self) -> None:
        self.backend = await self._run(self._open_backend)
        if not self._shared:
            self.nursery.start_soon(self._close_when_killed, self.backend)
        if self._retention_days is not None:
            self.nursery.start_soon(keep_pruning, self.ref, self._retention_days)

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is _FlushNow:
            self._flush_due = False
            await self._flush()
            return None
        if self._full_since is not None and kind is not Commit:
            await self._flush()  # one more try: the space may be back
        if self._full_since is not None and kind is not Commit:
            return ErrorReply(
                StoreError(
                    f"the disk holding the store is full: {len(self._batch)} writes wait to be "
                    "committed, and nothing is read or dispatched until there is space again"
                )
            )
        if kind is _PruneNext:
            await self._flush()
            await self._prune(message.total, message.after, message.reply)
            return None
        if kind is Commit:
            self._batch.append(message.write)
            state = message.write.state
            self._batched_states[state.loop_id] = state
            if message.then:
                self._forwards.append((state.loop_id, message.then))
            if self.in_call:
                self._waiting.append((state.loop_id, self.defer_reply()))
            return None
        backend = self.backend
        if kind is GetLoop:
            # A loop's state is read without a flush, which would only commit the batch
            # early (a loop waited on through its handle is read twice: a flush per read was
            # a transaction each, see docs/benchmarks.md). Its last state in the batch is
            # what the store holds after the flush; a final one is answered once durable.
            batched = self._batched_states.get(message.loop_id)
            if batched is None:
                return await self._run(backend.get_loop, message.loop_id)
            if not batched.terminal:
                return batched
        await self._flush()  # a read sees every write queued before it
        if kind is GetLoop:
            return await self._run(backend.get_loop, message.loop_id)
        if kind is GetLoops:
            return await self._run(_get_loops, backend, message.loop_ids)
        if kind is ListLoops:
            return await self._run(
                lambda: backend.list_loops(
                    live_only=message.live_only, limit=message.limit, after=message.after
                )
            )
        if kind is ListLiveLoops:
            return await self._run(backend.live_loops)
        if kind is FindLoopIds:
            return await self._run(
                lambda: backend.matching_loop_ids(message.prefix, limit=message.limit)
            )
        if kind is GetRounds:
            return await self._run(backend.rounds, message.loop_id)
        if kind is GetRoundSummaries:
            return await self._run(backend.round_summaries, message.loop_ids)
        if kind is GetEvents:
            return await self._run(backend.events, message.loop_id)
        if kind is GetStoreStatistics:
            stats = await self._run(backend.statistics)
            nodes = await self._run(backend.nodes)
            return msgspec.structs.replace(stats, commit_seconds=self.commit_latency, nodes=nodes)
        if kind is GetLoopOwners:
            return await self._run(backend.loop_owners, message.loop_ids)
        if kind is SetNodeGateway:
            return await self._run(backend.set_gateway, message.url)
        if kind is DueNotifications:
            return await self._run(
                lambda: backend.due_notifications(message.now, limit=message.limit)
            )
        if kind is NextNotificationAt:
            return await self._run(backend.next_notification_at)
        if kind is NotificationDone:
            return await self._run(backend.notification_done, message.notification_id)
        if kind is NotificationRetry:
            return await self._run(
                backend.notification_retry,
                message.notification_id,
                message.next_at,
                message.attempts,
            )
        if kind is PruneLoops:
            total = PruneReport(before=message.before, dry_run=message.dry_run)
            await self._prune(total, "", self.defer_reply() if self.in_call else None)
            return None
        return ErrorReply(TypeError(f"the store does not accept {kind.__name__}"))

    async def _prune(self, total: PruneReport, after: str, reply: PendingReply | None) -> None:
        """One batch of a prune (at most PRUNE_BATCH loops removed, PRUNE_SCAN looked at, and
        PRUNE_BATCH_SECONDS past the loop in hand), then the rest at the back of the
        mailbox: commits and reads are served between batches, so a prune of a large store
        never holds the runtime up. The caller is answered with the total at the end.
        """
        backend = self.backend
        try:
            report, cursor = await self._run(
                lambda: backend.prune_batch(
                    total.before,
                    after=after,
                    limit=self.prune_batch_size,
                    dry_run=total.dry_run,
                    deadline=time.perf_counter() + PRUNE_BATCH_SECONDS,
                )
            )
        except StoreError as exc:
            # That batch was rolled back whole (earlier ones stay done): refused, no crash.
            if reply is not None:
                reply.fail(StoreError(f"{exc}{total.so_far()}"))
            return
        total = total.plus(report)
        if cursor is None:
            if reply is not None:
                reply.reply(total)
            return
        if reply is not None and reply.done:
            return  # the caller gave up (timed out, cancelled): so does the prune
        self.nursery.start_soon(self._prune_later, _PruneNext(total, cursor, reply))

    async def _close_when_killed(self, backend: StoreBackend) -> None:
        # A kill (cancellation from outside) skips on_stop: the backend's connection is
        # closed here all the same (a second close, after on_stop's, does nothing).
        try:
            await trio.sleep_forever()
        finally:
            backend.close()

    async def _prune_later(self, rest: _PruneNext) -> None:
        # From another task, a cast joins the back of the mailbox (a self-cast would jump
        # the queue). The Store gone, the caller's pending reply fails with it.
        with contextlib.suppress(ActorError):
            await self.ref.cast(rest)

    async def on_drained(self) -> None:
        batch = len(self._batch)
        if not batch or self._flush_due or self._full_since is not None:
            return  # a full disk: the retry timer flushes
        if self._shared or batch >= FLUSH_AT or self._waiting:
            await self._flush()  # in memory it is free; a full batch or a caller goes now
            return
        # A small batch waits a moment for company: a SQLite transaction costs about the
        # same for 10 writes as for 1,000 on nearby pages. Nobody has been told "done" yet,
        # so the wait loses nothing.
        self._flush_due = True
        self.nursery.start_soon(self._flush_after, COMMIT_DELAY)

    async def _flush_after(self, seconds: float) -> None:
        await trio.sleep(seconds)
        with contextlib.suppress(ActorError):
            await self.ref.cast(_FlushNow())

    async def on_stop(self, reason: BaseException | None) -> None:
        self._stopping = True  # a last flush that finds the disk full fails, it does not wait
        # A blocking backend is shielded: a stop by cancellation still commits what it holds
        # and closes it, as an inline backend does with no checkpoint to be cancelled at;
        # bounded, so a server that no longer answers cannot hold the stop up.
        with trio.move_on_after(STOP_SECONDS if self._blocking else math.inf) as scope:
            scope.shield = self._blocking
            try:
                await self._flush()
            finally:
                if not self._shared and hasattr(self, "backend"):
                    await self._run(self.backend.close)

    async def _flush(self) -> None:
        if not self._batch:
            return
        writes, waiting, forwards = self._batch, self._waiting, self._forwards
        self._batch, self._waiting, self._forwards = [], [], []
        batched_states, self._batched_states = self._batched_states, {}
        started = time.perf_counter()
        fenced: frozenset[str] = frozenset()
        try:
            await self._run(self.backend.commit, writes)
        except LoopsFenced as exc:
            # The batch's other loops are committed; these were not, and are not this
            # node's: their callers fail, their runners stop (the Coordinator sees to it).
            log.error("%s: their runners stop", exc)  # noqa: TRY400 - an outcome, not a crash
            fenced = exc.loop_ids
            for loop_id, pending in waiting:
                if loop_id in fenced:
                    pending.fail(exc)
        except StoreError as exc:
            if is_disk_full(exc) and not self._stopping:
                # Keep everything, in order, for the next try; nobody is told "done".
                self._batch, self._waiting = writes + self._batch, waiting + self._waiting
                self._forwards = forwards + self._forwards
                self._batched_states = batched_states | self._batched_states
                self._disk_full(exc)
                return
            for _, pending in waiting:
                pending.fail(exc)
            raise
        self.commit_latency = self.commit_latency.observe(time.perf_counter() - started)
        if self._full_since is not None:
            log.warning(
                "the store commits again after %.0f s of a full disk; %d writes committed",
                time.monotonic() - self._full_since,
                len(writes),
            )
            self._full_since = None
        publish = self._bus.publish
        queued = False
        for write in writes:
            if fenced and write.state.loop_id in fenced:
                continue
            for event in write.events:
                publish(event)
            queued = queued or bool(write.events and write.state.spec.notify)
        for _, pending in waiting:
            pending.reply(None)  # a fenced one failed above: a second answer does nothing
        node = self.node
        for loop_id, then in forwards:
            if fenced and loop_id in fenced:
                continue
            for forward in then:
                await deliver(node, forward.name, forward.message)
        if queued:  # the Notifier delivers what this commit queued
            await deliver(node, NOTIFIER, NotificationsQueued())
        if self._tell_recorded:
            recorded = tuple(
                f"{write.state.loop_id}:{write.round.round}"
                for write in writes
                if write.round is not None and write.state.loop_id not in fenced
            )
            if recorded:
                await deliver(node, DISPATCHER, RoundsRecorded(recorded))
        if fenced:
            await deliver(node, COORDINATOR, LoopsFencedOut(fenced))

    def _disk_full(self, exc: StoreError) -> None:
        if self._full_since is None:
            self._full_since = time.monotonic()
            log.error(
                "disk full: %s; nothing more is dispatched and the writes wait; retrying "
                "every %g s (free some space; a stop now loses only what was not committed)",
                exc,
                DISK_FULL_RETRY,
            )
        if not self._flush_due:
            self._flush_due = True
            self.nursery.start_soon(self._flush_after, DISK_FULL_RETRY)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._blocking:
            # A call that waits on a server: in a worker thread, finished even if this task
            # is cancelled (the Store makes one call at a time, and a commit half-sent must
            # be known to have ended before the next one starts).
            return await _in_thread(fn, *args)
        # In the event loop's own thread, on purpose. SQLite releases the GIL for every row
        # it steps, so a worker thread waits for the GIL behind the busy event loop at each
        # row: measured at ~130 us per write in a thread against ~25 us here. A commit blocks
        # the loop for at most FLUSH_AT writes (~50 ms); at that load everything waits on
        # the Store anyway.
        return fn(*args)


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in one of trio's cached worker threads; the caller waits for it to end
    even if cancelled (a cancellation is raised at its next checkpoint). What
    ``trio.to_thread.run_sync`` does without its thread limiter, context copy and calls
    back into trio: 37 us of CPU per call against 70 to 105 us (docs/benchmarks.md), paid
    at every commit and read of a store on a server."""
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result: outcome.Outcome[Any]) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(lambda: fn(*args), deliver)
    return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)


def _get_loops(backend: StoreBackend, loop_ids: tuple[str, ...]) -> list[LoopState]:
    found = (backend.get_loop(loop_id) for loop_id in loop_ids)
    return [state for state in found if state is not None]
