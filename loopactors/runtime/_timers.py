"""The Timers actor: messages delivered at a deadline, for every loop's runner."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import trio

from ..actors import Actor, ErrorReply
from ..errors import ActorError
from ._messages import CancelTimers, GetTimersStatistics, Schedule

__all__ = ["Timers"]


class Timers(Actor[Any]):
    """Delivers messages at a deadline: one task and one heap for every loop's timers.

    Loop runners use it for inter-round delays and round watchdogs instead of sleeping in a
    handler (which would block a stop) or owning a task each (which would cost memory).
    A timer's message carries an epoch, so a timer that is no longer wanted is ignored by its
    receiver. A runner that exits (its loop ended, or it crashed) cancels all of its timers
    (:class:`CancelTimers`), so nothing waits for an ended loop (rolebox's W21): a cancelled
    timer is marked, and the heap is rebuilt without them once they are more than half of
    it, so they never outnumber the pending ones.
    """

    uses_nursery = True
    mailbox_size = 16_384

    def __init__(self) -> None:
        self._heap: list[_Timer] = []
        self._by_name: dict[str, list[_Timer]] = {}
        self._cancelled = 0  # marked entries still in the heap
        self._seq = itertools.count()
        self._changed = trio.Event()

    async def on_start(self) -> None:
        self.nursery.start_soon(self._fire)

    @property
    def pending(self) -> int:
        return len(self._heap) - self._cancelled

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is Schedule:
            earliest = self._heap[0].deadline if self._heap else None
            timer = _Timer(message.deadline, next(self._seq), message.name, message.message)
            heapq.heappush(self._heap, timer)
            self._by_name.setdefault(message.name, []).append(timer)
            if earliest is None or message.deadline < earliest:
                self._changed.set()
            return None
        if kind is CancelTimers:
            for timer in self._by_name.pop(message.name, ()):
                timer.cancelled = True
                self._cancelled += 1
            self._compact()
            return None
        if kind is GetTimersStatistics:
            return {"pending": self.pending, "heap": len(self._heap)}
        return ErrorReply(TypeError(f"timers do not accept {kind.__name__}"))

    async def _fire(self) -> None:
        node = self.node
        while True:
            if not self._heap:
                await self._changed.wait()
            else:
                with trio.move_on_at(self._heap[0].deadline):
                    await self._changed.wait()
            self._changed = trio.Event()
            heap = self._heap  # read after the wait: a cancellation may have rebuilt it
            now = trio.current_time()
            while heap and heap[0].deadline <= now:
                timer = heapq.heappop(heap)
                if timer.cancelled:
                    self._cancelled -= 1
                    continue
                self._forget(timer)
                ref = node.whereis(timer.name)
                if ref is None:
                    continue  # its receiver is gone: nobody needs the wake-up
                try:
                    ref.cast_nowait(timer.message)
                except ActorError:
                    self.nursery.start_soon(self._deliver_later, timer.name, timer.message)
            self._compact()  # timers that went off may leave the cancelled ones a majority

    def _compact(self) -> None:
        """Rebuild the heap without its cancelled timers once they are more than half of it,
        so they never outnumber the pending ones."""
        if self._cancelled > len(self._heap) // 2:
            self._heap = [t for t in self._heap if not t.cancelled]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _forget(self, timer: _Timer) -> None:
        timers = self._by_name.get(timer.name)
        if timers is not None:
            timers.remove(timer)
            if not timers:
                del self._by_name[timer.name]

    async def _deliver_later(self, name: str, payload: Any) -> None:
        ref = self.node.whereis(name)
        if ref is not None:
            try:
                await ref.cast(payload)
            except ActorError:
                return


class _Timer:
    """One pending timer; ordered by deadline, then by when it was scheduled."""

    __slots__ = ("cancelled", "deadline", "message", "name", "seq")

    def __init__(self, deadline: float, seq: int, name: str, message: Any) -> None:
        self.deadline = deadline
        self.seq = seq
        self.name = name
        self.message = message
        self.cancelled = False

    def __lt__(self, other: _Timer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)
