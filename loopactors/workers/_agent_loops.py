"""The agent worker's window on the runtime: child loops of the round's loop, and their ends.

:class:`RoundLoops` is the one loop vocabulary (``loops.LoopControl``) for the agent's loop
tools in one round, limited to the direct children of the round's loop, each running the round's
own worker spec or one the operator allows (``_confine``). From the first child on it also
watches them: when a child started in this round finishes, a waking ``defer`` message tells the
agent, and while any is still running the agent's idle wait holds the round open (bounded by
the agent's ``idle_wait``, then a hand-off).
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..agent import MessageQueue, QueuedMessage
from ..errors import LoopNotFound
from ..loops import Gap, LoopControl, LoopFinished, LoopSpec, LoopState, RoundRecord
from ._base import LoopEvents, RoundContext
from ._confine import confined_child_worker

__all__ = ["RoundLoops"]


@attrs.define
class RoundLoops:
    #: The round's way to the runtime (the round's loop, its children, their events).
    context: RoundContext
    #: Where the watcher runs (the round's nursery), and the agent's inbox it reports to.
    nursery: trio.Nursery
    queue: MessageQueue
    #: The round's own worker spec: what a child loop the model starts runs, unless the model
    #: names one of the operator's ``child_workers`` that does not widen it.
    spec: str
    watching: bool = False
    #: Children started in this round and not finished yet.
    live: set[str] = attrs.field(factory=set)
    #: Children this round stopped itself: their end needs no message.
    stopped: set[str] = attrs.field(factory=set)
    #: Every loop seen finishing during the round (a child may finish before its start returns).
    ended: set[str] = attrs.field(factory=set)

    def pending(self) -> bool:
        return bool(self.live)

    async def start(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | None = None,
        loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        if not self.watching:  # subscribed before the first child starts: no end is missed
            self.watching = True
            await self.nursery.start(self.watch)
        asked = worker if worker is not None or isinstance(loop, str) else loop.worker
        chosen = confined_child_worker(self.spec, asked, self.context.child_workers)
        state = await self.context.start(loop, worker=chosen, loop_id=loop_id, **options)
        if not (state.terminal or state.loop_id in self.ended):
            self.live.add(state.loop_id)
        return state

    async def get(self, loop_id: str) -> LoopState:
        """The child's state; ``LoopNotFound`` for a loop that is not a child of this one."""
        state = await self.context.get(loop_id)
        if state.spec.parent_id != self.context.loop_id:
            raise LoopNotFound(f"{loop_id!r} is not a child loop of {self.context.loop_id}")
        return state

    async def list(
        self, *, live_only: bool = False, limit: int | None = None
    ) -> builtins.list[LoopState]:
        loops = await self.context.list(live_only=live_only)
        children = [state for state in loops if state.spec.parent_id == self.context.loop_id]
        return children if limit is None else children[:limit]

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        state = await self.get(loop_id)
        return await self.context.history(state.loop_id, output_head=output_head)

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        state = await self.get(loop_id)
        self.stopped.add(state.loop_id)
        state = await self.context.stop(state.loop_id, after_round=after_round)
        self.live.discard(state.loop_id)
        return state

    async def pause(self, loop_id: str) -> LoopState:
        return await self.context.pause((await self.get(loop_id)).loop_id)

    async def resume(self, loop_id: str) -> LoopState:
        return await self.context.resume((await self.get(loop_id)).loop_id)

    async def wait(self, loop_id: str) -> LoopState:
        return await self.context.wait((await self.get(loop_id)).loop_id)

    def subscribe(self, loop_id: str | None = None) -> LoopEvents:
        return self.context.subscribe(loop_id)

    def _finished(self, loop_id: str, text: str) -> None:
        self.live.discard(loop_id)
        if loop_id not in self.stopped:
            self.queue.push(QueuedMessage(kind="defer", text=text, source="background"))

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tell the agent when a child it started finishes (runs until cancelled)."""
        async with self.context.subscribe() as events:
            task_status.started()  # subscribed before any child can start
            async for event in events:
                if isinstance(event, LoopFinished):
                    self.ended.add(event.loop_id)
                    if event.loop_id in self.live:
                        self._finished(
                            event.loop_id,
                            f"Child loop {event.loop_id} finished: {event.phase}, "
                            f"{event.completed_rounds}/{event.rounds} rounds completed"
                            + (f" ({event.reason})" if event.reason else "")
                            + ". Read its result with loop_output.",
                        )
                elif isinstance(event, Gap):  # events were dropped: ask directly
                    for loop_id in builtins.list(self.live):
                        state = await self.get(loop_id)
                        if state.terminal:
                            self._finished(
                                loop_id,
                                f"Child loop {loop_id} finished: {state.phase}. "
                                "Read its result with loop_output.",
                            )


if TYPE_CHECKING:  # the loop tools' view speaks the one vocabulary (checked by mypy)
    _control: type[LoopControl] = RoundLoops
