"""Fan-out of loop events to subscribers, each with a bounded queue.

Not an actor: publishing is a synchronous ``send_nowait`` per subscriber, so a slow subscriber
can never slow a loop. When a subscriber's queue is full its events are counted, not queued,
and it receives one :class:`Gap` with the count as soon as it has room again.
"""

from __future__ import annotations

import abc
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Self

import trio

from ..loops import STATE_EVENTS, AnyEvent, Gap

__all__ = ["STATE_EVENTS", "Changes", "EventBus", "Gap", "Subscription", "Watch"]

DEFAULT_QUEUE_SIZE = 1000

log = logging.getLogger("loopactors.runtime")


class _ClosedOnExit(abc.ABC):
    """A ``with`` block closes it."""

    __slots__ = ()

    @abc.abstractmethod
    def close(self) -> None:
        """Stop receiving and let go of what was queued."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Subscription(_ClosedOnExit):
    """An async iterator of events (and gaps); close it, or use it as a context manager."""

    def __init__(self, bus: EventBus, loop_id: str | None, queue_size: int) -> None:
        self._bus = bus
        self.loop_id = loop_id
        self.queue_size = queue_size
        # One place more than the queue size, for a pending Gap: a gap and the event after it
        # must go in together, or a subscriber of queue_size 1 would only ever get gaps.
        self._send, self._recv = trio.open_memory_channel[AnyEvent | Gap](queue_size + 1)
        self.missed = 0
        #: Of the missed events, those never stored (agent steps): a gap says how many, so a
        #: replay's numbering of the loop's log moves by the others only.
        self.unstored = 0
        self.delivered = 0
        self._queued = 0  # items in the channel (cheaper than its statistics() per event)

    def _offer(self, event: AnyEvent) -> None:
        if self._queued >= self.queue_size:
            self._drop(event)
            return
        try:
            if self.missed:
                gap = Gap(missed=self.missed, loop_id=self.loop_id, unstored=self.unstored)
                self._send.send_nowait(gap)
                self._queued += 1
                self.missed = self.unstored = 0
            self._send.send_nowait(event)
            self._queued += 1
            self.delivered += 1
        except trio.WouldBlock:
            self._drop(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._bus._remove(self)

    def __aiter__(self) -> AsyncIterator[AnyEvent | Gap]:
        return self

    async def __anext__(self) -> AnyEvent | Gap:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def receive(self) -> AnyEvent | Gap:
        if self._pending_gap():
            await trio.lowlevel.checkpoint()
            if self._pending_gap():  # an event published meanwhile queues the gap itself
                return self._take_gap()
        item = await self._recv.receive()
        self._queued -= 1
        return item

    def receive_nowait(self) -> AnyEvent | Gap:
        """The next queued event; raises ``trio.WouldBlock`` when none is queued."""
        if self._pending_gap():
            return self._take_gap()
        item = self._recv.receive_nowait()
        self._queued -= 1
        return item

    def _pending_gap(self) -> bool:
        # Events were dropped after everything queued has been read: say so now, rather
        # than only when a later event comes (there may be none, e.g. after a loop's end).
        return self.missed > 0 and self._queued == 0

    def _drop(self, event: AnyEvent) -> None:
        self.missed += 1
        if not isinstance(event, STATE_EVENTS):
            self.unstored += 1

    def _take_gap(self) -> Gap:
        gap = Gap(missed=self.missed, loop_id=self.loop_id, unstored=self.unstored)
        self.missed = self.unstored = 0
        return gap

    def close(self) -> None:
        self._bus._remove(self)
        self._send.close()
        self._recv.close()

    # ``async with`` too: how a node's client subscribes (loops.LoopControl.subscribe).
    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class Watch(_ClosedOnExit):
    """Wakes one waiter when an event of a loop (of the given kinds) is published.

    What :meth:`LoopHandle.wait` needs, at a fraction of a subscription's cost: no queue and
    no copy of the events, only a flag that is set; the waiter reads the store when woken.
    """

    __slots__ = ("_bus", "_kinds", "_woken", "loop_id")

    def __init__(self, bus: EventBus, loop_id: str, kinds: tuple[type, ...] | None) -> None:
        self._bus = bus
        self.loop_id = loop_id
        self._kinds = kinds
        self._woken = trio.Event()

    def _offer(self, event: AnyEvent) -> None:
        if self._kinds is None or isinstance(event, self._kinds):
            self._woken.set()

    async def wait(self) -> None:
        """Until an event of interest was published since the last wait (or the watch began)."""
        await self._woken.wait()
        self._woken = trio.Event()

    def close(self) -> None:
        self._bus._unwatch(self)


class Changes(_ClosedOnExit):
    """The ids of the loops that had an event since they were last taken: what a view of
    many loops needs (it reads their states), at a cost bounded by the number of loops.

    Unlike a :class:`Subscription` it never falls behind: a loop that changes a thousand
    times between two :meth:`take` calls is in the set once. ``kinds`` are the event types
    that count (None: all).
    """

    __slots__ = ("_bus", "_changed", "_ids", "_kinds", "loop_id")

    def __init__(self, bus: EventBus, loop_id: str | None, kinds: tuple[type, ...] | None) -> None:
        self._bus = bus
        self.loop_id = loop_id
        self._kinds = kinds
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest change first
        self._changed = trio.Event()

    def _offer(self, event: AnyEvent) -> None:
        if self._kinds is None or isinstance(event, self._kinds):
            self._ids[event.loop_id] = None
            self._changed.set()

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def missed(self) -> int:
        """Always 0 (for a caller that treats it like a :class:`Subscription`)."""
        return 0

    def mark(self, loop_ids: Iterable[str]) -> None:
        """Count these loops as changed again (their states could not be read)."""
        for loop_id in loop_ids:
            self._ids[loop_id] = None
        if self._ids:
            self._changed.set()

    async def wait(self) -> None:
        """Until some loop changed that was not taken yet."""
        if not self._ids:
            if self._changed.is_set():
                self._changed = trio.Event()
            await self._changed.wait()

    def take(self, limit: int | None = None) -> list[str]:
        """The ids changed since the last take (the oldest ``limit`` of them), forgotten."""
        if limit is None or limit >= len(self._ids):
            ids = list(self._ids)
            self._ids.clear()
        else:
            ids = list(itertools.islice(self._ids, limit))
            for loop_id in ids:
                del self._ids[loop_id]
        return ids

    def close(self) -> None:
        self._bus._unchange(self)


class EventBus:
    def __init__(
        self,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        observer: Callable[[AnyEvent], None] | None = None,
    ) -> None:
        self.queue_size = queue_size
        self.observer = observer
        self._by_loop: dict[str, list[Subscription]] = {}
        self._all: list[Subscription] = []
        self._watches: dict[str, list[Watch]] = {}
        self._changes: list[Changes] = []
        #: The subscriptions and changes of every loop that want other nodes' loops too (a
        #: store shared by several nodes): the relay hands them those loops' events.
        self._cluster: list[Subscription | Changes] = []
        #: Called with every event published (a shared store's relay tells the other nodes).
        self.taps: list[Callable[[AnyEvent], None]] = []
        #: Called when a loop gets a subscriber or a watch here, or every loop gets one that
        #: wants other nodes' loops too (the relay looks at once).
        self.on_follow: Callable[[], None] | None = None

    def followed(self) -> set[str]:
        """The loops subscribed to, watched, or whose changes are asked for, one by one."""
        followed = self._by_loop.keys() | self._watches.keys()
        followed.update(c.loop_id for c in self._changes if c.loop_id is not None)
        return followed

    def cluster_wanted(self) -> bool:
        """Something here follows every loop, other nodes' included."""
        return bool(self._cluster)

    def relay_followed(self, event: AnyEvent) -> None:
        """An event of a loop another node runs, for those following that loop here (not
        the subscribers of every loop: :meth:`relay_cluster` hands them theirs)."""
        loop_id = event.loop_id
        for watch in self._watches.get(loop_id, ()):
            watch._offer(event)
        for sub in tuple(self._by_loop.get(loop_id, ())):
            sub._offer(event)
        for changes in self._changes:
            if changes.loop_id == loop_id:
                changes._offer(event)

    def relay_cluster(self, event: AnyEvent) -> None:
        """An event of a loop another node runs, for those following every loop with
        ``cluster``."""
        for follower in tuple(self._cluster):
            follower._offer(event)

    def subscribe(
        self, loop_id: str | None = None, *, queue_size: int | None = None, cluster: bool = False
    ) -> Subscription:
        """Events of one loop, or of every loop when ``loop_id`` is None (with ``cluster``,
        those other nodes of a shared store run too)."""
        size = self.queue_size if queue_size is None else queue_size
        if size < 1:
            raise ValueError(f"queue_size must be >= 1, got {size}")
        sub = Subscription(self, loop_id, size)
        if loop_id is None:
            self._all.append(sub)
            if cluster:
                self._cluster.append(sub)
                if self.on_follow is not None:
                    self.on_follow()
        else:
            self._by_loop.setdefault(loop_id, []).append(sub)
            if self.on_follow is not None:
                self.on_follow()
        return sub

    def watch(self, loop_id: str, kinds: tuple[type, ...] | None = None) -> Watch:
        """A :class:`Watch` on one loop's events (of ``kinds``, or all); close it after use."""
        watch = Watch(self, loop_id, kinds)
        self._watches.setdefault(loop_id, []).append(watch)
        if self.on_follow is not None:
            self.on_follow()
        return watch

    def changes(
        self,
        loop_id: str | None = None,
        kinds: tuple[type, ...] | None = None,
        *,
        cluster: bool = False,
    ) -> Changes:
        """A :class:`Changes` of one loop, or of every loop (with ``cluster``, those other
        nodes of a shared store run too); close it after use."""
        changes = Changes(self, loop_id, kinds)
        self._changes.append(changes)
        if loop_id is None and cluster:
            self._cluster.append(changes)
        if (loop_id is not None or cluster) and self.on_follow is not None:
            self.on_follow()
        return changes

    def _unchange(self, changes: Changes) -> None:
        if changes in self._changes:
            self._changes.remove(changes)
        if changes in self._cluster:
            self._cluster.remove(changes)

    def _unwatch(self, watch: Watch) -> None:
        watches = self._watches.get(watch.loop_id)
        if watches and watch in watches:
            watches.remove(watch)
            if not watches:
                del self._watches[watch.loop_id]

    def publish(self, event: AnyEvent) -> None:
        watches = self._watches.get(event.loop_id)
        if watches is not None:
            for watch in watches:
                watch._offer(event)
        for sub in self._by_loop.get(event.loop_id, ()):
            sub._offer(event)
        for sub in self._all:
            sub._offer(event)
        for changes in self._changes:
            if changes.loop_id is None or changes.loop_id == event.loop_id:
                changes._offer(event)
        for tap in self.taps:
            tap(event)
        if self.observer is not None:
            try:
                self.observer(event)
            except Exception:  # an observer's bug must not crash the Store that publishes
                log.exception("event observer failed on %s", type(event).__name__)

    def _remove(self, sub: Subscription) -> None:
        if sub.loop_id is None:
            if sub in self._all:
                self._all.remove(sub)
            if sub in self._cluster:
                self._cluster.remove(sub)
            return
        subs = self._by_loop.get(sub.loop_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._by_loop[sub.loop_id]

    @property
    def subscribers(self) -> int:
        return len(self._all) + sum(len(s) for s in self._by_loop.values()) + len(self._changes)
