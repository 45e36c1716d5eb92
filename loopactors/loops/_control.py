"""The one vocabulary for acting on loops, wherever they live (docs/architecture.md).

``start``, ``get``, ``list``, ``history``, ``stop``, ``pause``, ``resume``, ``subscribe`` (and
``wait``) mean the same on an embedded ``runtime.Runtime``, on a node over the wire
(``client.NodeClient``), on a round's own view of its loop's children (``workers.RoundContext``)
and, for what reads (:class:`LoopReader`), on a store no runtime runs (``loopactors status``).
Written here, the lowest package all of them import, as protocols only: nothing runs here.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterable
    from contextlib import AbstractAsyncContextManager

    from ._events import AnyEvent, Gap
    from ._model import LoopSpec, LoopState, RoundRecord

__all__ = ["LoopControl", "LoopReader"]


class LoopReader(Protocol):
    """What every place that keeps loops answers. A loop id may be a unique prefix of one
    (a round's view takes whole ids only)."""

    async def get(self, loop_id: str) -> LoopState:
        """The loop's state; raises ``LoopNotFound`` for an unknown id."""
        ...

    async def list(
        self, *, live_only: bool = False, limit: int | None = None
    ) -> builtins.list[LoopState]:
        """Loops, newest first (only the live ones with ``live_only``), at most ``limit``."""
        ...

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        """The loop's rounds in order, each output cut to ``output_head`` characters if
        given (a node cuts them anyway: it never sends whole outputs in one frame)."""
        ...


class LoopControl(LoopReader, Protocol):
    """Loops that run somewhere: start them, steer them, follow them. Every command
    answers with the loop's state once its effect is durable."""

    async def start(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | None = None,
        loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        """Start a loop from ``|loop...|`` text or a ``LoopSpec`` (``options``: its fields);
        its first state, as admitted."""
        ...

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        """Stop now (the round in flight is cancelled), or after the round in flight."""
        ...

    async def pause(self, loop_id: str) -> LoopState:
        """Let the round in flight finish, then dispatch nothing until :meth:`resume`."""
        ...

    async def resume(self, loop_id: str) -> LoopState: ...

    async def wait(self, loop_id: str) -> LoopState:
        """Wait until the loop is in a terminal phase; its final state."""
        ...

    def subscribe(
        self, loop_id: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterable[AnyEvent | Gap]]:
        """Live events of one loop, or of every loop (``None``), from now on:
        ``async with control.subscribe(loop_id) as events: async for event in events``.
        A subscriber that falls behind gets a ``Gap`` in place of what it missed."""
        ...
