"""The store backend interface: durable loops, rounds and event logs.

Backends are plain blocking objects; the Store actor calls them one call at a time (in the
event loop's thread, or in a worker thread for a kind whose calls wait on a network, see
``StoreKind.blocking``), and batches the writes of many loops into one
:meth:`StoreBackend.commit` (group commit).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import msgspec

from ..errors import StoreError
from ..loops import (
    MATCHES_SHOWN,
    MIN_TAIL,
    AnyEvent,
    LoopState,
    Notification,
    RoundRecord,
    RoundSummary,
    notifications_for,
    resolve_loop_id,
)
from ._kinds import Durability

__all__ = [
    "COMMIT_BUCKETS",
    "DB_FILENAME",
    "CommitLatency",
    "NodeLease",
    "PruneReport",
    "QueuedNotification",
    "StoreBackend",
    "StoreStatistics",
    "Write",
]


#: The SQLite store's file in its directory.
DB_FILENAME = "loopactors.db"


class Write(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One loop's step: its new state, the round it recorded, the events it emitted.

    All three land in the same transaction, so a crash never separates a round record from
    the phase that follows it.
    """

    state: LoopState
    round: RoundRecord | None = None
    events: tuple[AnyEvent, ...] = ()
    #: False for history already acted on elsewhere (``copy_loops``): its events queue no
    #: notifications, which were sent (or queued) where they happened.
    notify: bool = True
    #: ``state`` is what the store already holds (read from it, or written before): a
    #: backend may leave the loop's row alone (a recovery's note changes nothing else).
    state_stored: bool = False


class QueuedNotification(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """A notification waiting in the store's queue: its row id, when it is due next (UNIX
    time) and how many deliveries of it failed so far."""

    id: int
    notification: Notification
    next_at: float
    attempts: int = 0


def queued_by(writes: Sequence[Write]) -> list[Notification]:
    """The notifications a commit of ``writes`` queues (``loops.notifications_for``)."""
    found: list[Notification] = []
    for write in writes:
        if write.notify and write.events and write.state.spec.notify:
            found += notifications_for(
                write.state, write.events, failing_checks=write.state.failing_checks
            )
    return found


class NodeLease(msgspec.Struct, frozen=True, kw_only=True):
    """A node incarnation that held a shared store's lease (docs/multinode.md)."""

    node_id: str
    host: str
    pid: int
    #: ``live`` (holds it), ``left`` (stopped), ``dead`` (declared dead by ``dead_by``).
    state: str
    #: Seconds its lease has left on the database's clock (live ones only).
    lease_left: float | None = None
    dead_by: str | None = None
    #: Live loops it owns (several nodes share a store's loops, docs/multinode.md).
    loops: int = 0
    #: Where its gateway listens (``ws://HOST:PORT``; never a token), None without one.
    gateway: str | None = None


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    loops: int
    live_loops: int
    rounds: int
    events: int
    commits: int
    writes: int
    #: Loops in the store by phase (every phase that has at least one).
    phases: dict[str, int] = {}
    #: Notifications waiting in the queue to be delivered.
    notifications: int = 0
    #: How long the Store actor's group commits took (set by the actor, not the backend).
    commit_seconds: CommitLatency | None = None
    #: The nodes that share the store, newest first (set by the actor from :meth:`nodes`;
    #: empty for a store of one process or file).
    nodes: list[NodeLease] = []


#: Upper bounds (seconds) of the commit latency histogram's buckets; the last is infinite.
COMMIT_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class CommitLatency(msgspec.Struct, frozen=True, kw_only=True):
    """A histogram of commit durations: ``counts[i]`` commits took at most ``bounds[i]``
    seconds and more than the bound before; the last count is those over every bound."""

    bounds: tuple[float, ...] = COMMIT_BUCKETS
    counts: tuple[int, ...] = (0,) * (len(COMMIT_BUCKETS) + 1)
    sum: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, seconds: float) -> CommitLatency:
        """A copy with one more commit of ``seconds``."""
        index = next((i for i, b in enumerate(self.bounds) if seconds <= b), len(self.bounds))
        counts = list(self.counts)
        counts[index] += 1
        return CommitLatency(bounds=self.bounds, counts=tuple(counts), sum=self.sum + seconds)


#: Loops removed per transaction by a prune, and loops looked at per batch: a batch keeps
#: the store (and, in a runtime, the Store actor, which handles other messages between
#: batches) busy for tens of milliseconds at most, however large the store.
PRUNE_BATCH = 100
PRUNE_SCAN = 2_000


class PruneReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`StoreBackend.prune` removed, or with ``dry_run`` would have removed."""

    #: Finished loops whose last change was before this (epoch seconds).
    before: float
    dry_run: bool = False
    loops: int = 0
    rounds: int = 0
    events: int = 0

    @property
    def removed_any(self) -> bool:
        return bool(self.loops or self.rounds or self.events)

    def so_far(self) -> str:
        """``; before that, this prune removed ...`` when earlier batches did something."""
        return f"; before that, this prune {self.note()}" if self.removed_any else ""

    def plus(self, other: PruneReport) -> PruneReport:
        """The counts of both (a prune done in batches)."""
        return msgspec.structs.replace(
            self,
            loops=self.loops + other.loops,
            rounds=self.rounds + other.rounds,
            events=self.events + other.events,
        )

    def note(self) -> str:
        """One line for people: ``removed 3 loops, 12 rounds, 40 events``."""
        verb = "would remove" if self.dry_run else "removed"
        counts = ((self.loops, "loop"), (self.rounds, "round"), (self.events, "event"))
        return f"{verb} " + ", ".join(f"{n} {what}{'s' * (n != 1)}" for n, what in counts)


def summary_of(record: RoundRecord) -> RoundSummary:
    """What a loop's final event says of one of its rounds."""
    return RoundSummary(round=record.round, status=record.status, duration=record.duration)


def check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"a prune batch takes at least 1 loop, got limit={limit!r}")


class StoreBackend(abc.ABC):
    """Durable state. Every method is blocking; none is called concurrently with another."""

    kind: str

    @abc.abstractmethod
    def commit(self, writes: Sequence[Write]) -> None:
        """Apply every write in one transaction, all or nothing.

        A loop's state is replaced; a round record is upserted by ``(loop_id, round)`` (so a
        round re-run under the same idempotency key is recorded once); events are appended
        to the loop's log in order; the notifications they make (:func:`queued_by`) join the
        notification queue, due at once.
        """

    @abc.abstractmethod
    def due_notifications(self, now: float, *, limit: int) -> list[QueuedNotification]:
        """Up to ``limit`` queued notifications due at ``now`` (UNIX time), oldest first."""

    @abc.abstractmethod
    def next_notification_at(self) -> float | None:
        """When the earliest queued notification is due, or ``None`` when none is queued."""

    @abc.abstractmethod
    def notification_done(self, notification_id: int) -> None:
        """Take a notification off the queue (delivered, or dropped)."""

    @abc.abstractmethod
    def notification_retry(self, notification_id: int, next_at: float, attempts: int) -> None:
        """A delivery failed: due again at ``next_at`` after ``attempts`` failures."""

    @abc.abstractmethod
    def get_loop(self, loop_id: str) -> LoopState | None: ...

    @abc.abstractmethod
    def list_loops(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[LoopState]:
        """Loops, newest first (by ``created_at``, then ``loop_id``); only non-terminal ones if
        ``live_only``; with ``after`` (a loop's ``created_at`` and ``loop_id``, the last of the
        previous page) only the loops that come after it."""

    def live_loops(self) -> list[LoopState]:
        """Every live (non-terminal) loop, in no particular order: what a recovery reads,
        which orders them itself (sorting the rows in the store costs more than that)."""
        return self.list_loops(live_only=True)

    @abc.abstractmethod
    def find_loop_ids(self, prefix: str, *, limit: int) -> list[str]:
        """The ids of the loops whose id starts with ``prefix``, sorted, at most ``limit``
        (see ``loops.resolve_loop_id``)."""

    @abc.abstractmethod
    def find_loop_ids_ending(self, suffix: str, *, limit: int) -> list[str]:
        """The ids of the loops whose id ends with ``suffix``, sorted, at most ``limit``."""

    def matching_loop_ids(self, given: str, *, limit: int) -> list[str]:
        """The ids ``given`` may name: those starting with it, else (for a ``given`` of at
        least ``MIN_TAIL`` characters) those ending with it, as tables show ids by their tail.
        """
        found = self.find_loop_ids(given, limit=limit)
        if found or len(given) < MIN_TAIL:
            return found
        return self.find_loop_ids_ending(given, limit=limit)

    def resolve_loop_id(self, given: str, *, where: str = "the store") -> str:
        """The id of the one loop whose id is ``given``, starts with it, or else ends with it
        (a prefix or a tail copied from a table will do).

        Raises:
            LoopNotFound: none does.
            AmbiguousLoopId: several do (the message lists them).
        """
        matches = self.matching_loop_ids(given, limit=MATCHES_SHOWN + 1)
        return resolve_loop_id(given, matches, where=where)

    @abc.abstractmethod
    def rounds(self, loop_id: str) -> list[RoundRecord]:
        """A loop's round records, by round number."""

    def round_summaries(self, loop_ids: Sequence[str]) -> dict[str, tuple[RoundSummary, ...]]:
        """The rounds of several loops at once, each as its summary, by round number; a
        loop without rounds is left out. What a recovery needs of every loop it resumes
        (the summaries its final event carries): a backend answers it with one read where
        it can, not one per loop."""
        found: dict[str, tuple[RoundSummary, ...]] = {}
        for loop_id in loop_ids:
            rounds = self.rounds(loop_id)
            if rounds:
                found[loop_id] = tuple(summary_of(r) for r in rounds)
        return found

    @abc.abstractmethod
    def events(self, loop_id: str) -> list[AnyEvent]:
        """A loop's event log, in the order it was appended."""

    @abc.abstractmethod
    def prune_batch(
        self,
        before: float,
        *,
        after: str = "",
        limit: int = PRUNE_BATCH,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> tuple[PruneReport, str | None]:
        """Remove up to ``limit`` terminal loops last updated before ``before`` (epoch
        seconds), with their rounds and events, in one transaction; with ``dry_run`` only
        count them. Loops are looked at in ``loop_id`` order from past ``after``, at most
        :data:`PRUNE_SCAN` of them; the second value is where the next batch starts,
        ``None`` once every loop was looked at. Past ``deadline`` (a ``time.perf_counter()``
        value) the batch ends after the loop in hand (at least one is taken).

        A live loop (paused included) is never removed, however old: only a loop in one of
        ``TERMINAL_PHASES`` is. ``updated_at`` of a terminal loop is when it ended.
        """

    def prune(self, before: float, *, dry_run: bool = False) -> PruneReport:
        """:meth:`prune_batch` until done. Each batch is one transaction: a crash leaves
        every loop with all of its rounds and events, or none of them."""
        total = PruneReport(before=before, dry_run=dry_run)
        after: str | None = ""
        while after is not None:
            try:
                report, after = self.prune_batch(before, after=after, dry_run=dry_run)
            except StoreError as exc:
                raise StoreError(f"{exc}{total.so_far()}") from exc
            total = total.plus(report)
        return total

    def loop_owners(self, loop_ids: Sequence[str]) -> dict[str, str]:
        """The node incarnation owning each of these loops, where a node owns it (a shared
        store's loops; a store of one process or file has no owners)."""
        return {}

    def nodes(self) -> list[NodeLease]:
        """The node incarnations that held this store, newest first (a shared store's
        leases; a store of one process or file has none)."""
        return []

    @abc.abstractmethod
    def statistics(self) -> StoreStatistics: ...

    def set_gateway(self, url: str) -> None:  # noqa: B027 - optional
        """Record where this node's gateway listens (``ws://HOST:PORT``), for the other
        nodes of a shared store; a store of one process or file has no nodes to tell."""

    def set_durability(self, durability: Durability) -> None:  # noqa: B027 - optional
        """Push each later commit to disk as ``durability`` says. A store with one way of
        committing (memory keeps nothing; a server decides for itself) ignores it."""

    @abc.abstractmethod
    def close(self) -> None: ...
