"""A client's subscription to a node's events: a bounded queue fed by the client's reader."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from ..errors import ConnectionLost, RemoteError
from ..loops import AnyEvent
from ..runtime import Gap
from ._protocol import Unsubscribe, Unsubscribed

if TYPE_CHECKING:
    from ._client import NodeClient

__all__ = ["RemoteSubscription"]


class RemoteSubscription:
    """Events of one loop (or all) from a node: ``async for``; ``async with`` unsubscribes.

    Events queue here up to ``queue_size``; past it they are counted and handed over as one
    :class:`~loopactors.runtime.Gap`, as the node does for a client that falls behind.
    """

    def __init__(
        self, client: NodeClient, loop_id: str | None, queue_size: int, *, replay: bool = False
    ) -> None:
        self.client = client
        self.loop_id = loop_id
        self.replay = replay
        self.subscription = ""
        self.queue_size = queue_size
        self._send, self._recv = trio.open_memory_channel[AnyEvent | Gap](queue_size + 1)
        self.missed = 0
        self.closed = False
        # With replay, what was seen is skipped when a reconnect replays the loop again.
        self._seen: set[AnyEvent] | None = set() if replay else None

    def _offer(self, item: AnyEvent | Gap) -> None:
        if self.closed:
            return
        if isinstance(item, Gap):
            self.missed += item.missed
            return
        if self._seen is not None:
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

    async def __aenter__(self) -> RemoteSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
