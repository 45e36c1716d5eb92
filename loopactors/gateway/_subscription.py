"""A client's subscriptions to a node: its events (a bounded queue fed by the client's
reader) or, coalesced, the latest states of the loops that changed (docs/protocol.md)."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Self

import trio

from ..errors import ConnectionLost, RemoteError
from ..loops import AnyEvent, LoopState
from ..runtime import Gap
from ._protocol import Subscribe, Unsubscribe, Unsubscribed

if TYPE_CHECKING:
    from ._client import NodeClient

__all__ = ["RemoteStates", "RemoteSubscription"]


class _Remote(abc.ABC):
    """What both kinds share: the node's subscription id, ``aclose``, ``async with``."""

    def __init__(self, client: NodeClient, loop_id: str | None) -> None:
        self.client = client
        self.loop_id = loop_id
        self.subscription = ""
        self.closed = False

    @abc.abstractmethod
    def _subscribe_request(self) -> Subscribe:
        """The request that opens (or, after a reconnect, renews) it on the node."""

    @abc.abstractmethod
    def _end(self) -> None:
        """No more comes: the iteration ends once what came is taken."""

    async def aclose(self) -> None:
        """Unsubscribe (if still connected) and end the iteration."""
        if self.closed:
            return
        self.closed = True
        self.client._subscriptions.pop(self.subscription, None)
        self._end()
        if self.client.connected:
            with contextlib.suppress(RemoteError, ConnectionLost):
                await self.client._request(
                    Unsubscribe(id=0, subscription=self.subscription), Unsubscribed
                )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class RemoteSubscription(_Remote):
    """Events of one loop (or all) from a node: ``async for``; ``async with`` unsubscribes.

    Events queue here up to ``queue_size``; past it they are counted and handed over as one
    :class:`~loopactors.runtime.Gap`, as the node does for a client that falls behind.
    """

    def __init__(
        self, client: NodeClient, loop_id: str | None, queue_size: int, *, replay: bool = False
    ) -> None:
        super().__init__(client, loop_id)
        self.replay = replay
        self.queue_size = queue_size
        self._send, self._recv = trio.open_memory_channel[AnyEvent | Gap](queue_size + 1)
        self.missed = 0
        #: With replay: the place in the loop's log of the last event received. A reconnect
        #: subscribes again after it, so nothing is missed or repeated.
        self.seq = 0
        # A node that numbers no events (an older one) replays them all on a reconnect:
        # then what was seen is skipped here.
        self._seen: set[AnyEvent] | None = set() if replay else None

    def _subscribe_request(self) -> Subscribe:
        after = self.seq if self.replay else 0
        return Subscribe(id=0, loop_id=self.loop_id, replay=self.replay, after=after)

    def _offer(self, item: AnyEvent | Gap, seq: int | None = None) -> None:
        if self.closed:
            return
        if isinstance(item, Gap):
            self.missed += item.missed
            return
        if seq is not None:
            if seq <= self.seq:
                return
            self.seq = seq
            self._seen = None
        elif self._seen is not None:
            if item in self._seen:
                return
            self._seen.add(item)
        if self._send.statistics().current_buffer_used >= self.queue_size:
            self.missed += 1
            return
        if self.missed:
            self._send.send_nowait(Gap(missed=self.missed, loop_id=self.loop_id))
            self.missed = 0
        self._send.send_nowait(item)

    def _pending_gap(self) -> bool:
        return self.missed > 0 and self._recv.statistics().current_buffer_used == 0

    def _end(self) -> None:
        self._send.close()

    def __aiter__(self) -> AsyncIterator[AnyEvent | Gap]:
        return self

    async def __anext__(self) -> AnyEvent | Gap:
        if self._pending_gap():
            await trio.lowlevel.checkpoint()
            if self._pending_gap():  # say what was missed now, not only with a later event
                gap = Gap(missed=self.missed, loop_id=self.loop_id)
                self.missed = 0
                return gap
        try:
            return await self._recv.receive()
        except trio.EndOfChannel:
            if self.closed:
                raise StopAsyncIteration from None
            raise ConnectionLost(f"the connection to {self.client.url} closed") from None


class RemoteStates(_Remote):
    """The latest state of each loop that changed, in batches: ``async for states in
    watch`` gives a list of :class:`LoopState` at a time; ``async with`` unsubscribes.

    The node sends, at most every ``every`` seconds, the state of each loop that changed
    (a ``coalesce`` subscription). States wait here keyed by loop, newest kept, so a reader
    slower than the node never falls behind and never meets a ``Gap``: a loop that changed
    many times since the last batch comes once, as it is now. After a reconnect, the loops
    that changed while disconnected (or whose last change had not been sent yet) are read
    again, so the watch misses no change and shows none twice.
    """

    def __init__(
        self, client: NodeClient, loop_id: str | None, every: float, opened_at: float
    ) -> None:
        super().__init__(client, loop_id)
        self.every = every
        #: The node's clock when the watch was opened: a loop not changed since is not news.
        self.opened_at = opened_at
        self._waiting: dict[str, LoopState] = {}
        self._shown: dict[str, float] = {}  # loop id -> the updated_at last handed over
        self._arrived = trio.Event()
        self._ended = False
        #: Why the watch ended, when a catch-up after a reconnect was refused (raised then).
        self.failure: RemoteError | None = None

    def _subscribe_request(self) -> Subscribe:
        return Subscribe(id=0, loop_id=self.loop_id, coalesce=self.every)

    def _offer_states(self, states: list[LoopState]) -> None:
        if self.closed:
            return
        for state in states:
            waiting = self._waiting.get(state.loop_id)
            if waiting is None or waiting.updated_at <= state.updated_at:
                self._waiting[state.loop_id] = state
        if self._waiting:
            self._arrived.set()

    async def _catch_up(self) -> None:
        """After a reconnect: read the watched loop, or every loop in the node's store a page
        at a time, and offer each state newer than the one handed over (for a loop not
        handed over yet: changed since the watch was opened)."""
        if self.loop_id is not None:
            self._offer_newer([await self.client.get(self.loop_id)])
            return
        async for page in self.client.loop_pages():
            self._offer_newer(page)

    def _offer_newer(self, states: list[LoopState]) -> None:
        # Strictly newer: a page read before a states frame may arrive after it.
        self._offer_states(
            [s for s in states if s.updated_at > self._shown.get(s.loop_id, self.opened_at)]
        )

    def _end(self) -> None:
        self._ended = True
        self._arrived.set()

    def __aiter__(self) -> AsyncIterator[list[LoopState]]:
        return self

    async def __anext__(self) -> list[LoopState]:
        while not self._waiting:
            if self._ended:
                if self.failure is not None:
                    raise self.failure
                if self.closed:
                    raise StopAsyncIteration
                raise ConnectionLost(f"the connection to {self.client.url} closed")
            self._arrived = trio.Event()
            await self._arrived.wait()
        await trio.lowlevel.checkpoint()  # a checkpoint on every path, as trio expects
        batch = list(self._waiting.values())
        self._waiting.clear()
        for state in batch:
            self._shown[state.loop_id] = state.updated_at
        return batch
