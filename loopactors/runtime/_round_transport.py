"""The interface of a round transport, owned by the runtime: the Dispatcher hands each round
to one and waits for its result (docs/architecture.md, "Where a change goes")."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import trio

from ..workers import RoundContext, RoundRequest, RoundResult

__all__ = ["RoundRun", "RoundTransport"]


class RoundRun:
    """One round as the Dispatcher hands it to a transport: its cancel scope (a stop
    arrives through it), and :meth:`begin`, which a transport that times its rounds here
    calls once the round holds what it waited for (until then the round counts as queued)."""

    __slots__ = ("_factory", "_node", "began", "began_at", "scope", "timeout")

    def __init__(
        self,
        scope: trio.CancelScope,
        timeout: float,
        factory: Callable[[Any, str, int], RoundContext] | None,
        node: Any,
        now: float,
    ) -> None:
        self.scope = scope
        self.timeout = timeout
        self._factory = factory
        self._node = node
        #: ``trio.current_time()`` when the round began (``None``: queued), and
        #: ``time.monotonic()`` then (until then: when it was handed over).
        self.began: float | None = None
        self.began_at = now

    def begin(self, now: float, monotonic: float) -> None:
        """The round starts now: its timeout runs from here."""
        self.began = now
        self.began_at = monotonic
        self.scope.deadline = now + self.timeout

    def context(self, request: RoundRequest) -> RoundContext | None:
        """The round's view of the runtime (``None`` where no runtime is)."""
        if self._factory is None:
            return None
        return self._factory(self._node, request.loop_id, request.round)


class RoundTransport(abc.ABC):
    """Runs the Dispatcher's rounds, here or elsewhere."""

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Background work for the Dispatcher's lifetime (started in its nursery)."""
        task_status.started()

    @abc.abstractmethod
    async def run(self, request: RoundRequest, run: RoundRun) -> RoundResult | None:
        """Run the round and return its result; ``None`` when ``run.scope`` was cancelled
        (a stop, or its deadline) before one came. A ``duration`` in the result is the one
        measured where the round ran."""

    #: Whether :meth:`serving` can tell: the Dispatcher then watches each round for one that
    #: no live worker can take (docs/scale-out.md).
    knows_workers: bool = False

    async def serving(self, kind: str) -> bool | None:
        """Whether a live worker runs rounds of this kind now (``None``: cannot tell)."""
        return None

    def run_at_once(self, request: RoundRequest) -> RoundResult | None:
        """The round's result on the spot when it needs no waiting (``Worker.run_at_once``);
        ``None``: it runs through :meth:`run`."""
        return None

    def start_wait(
        self, request: RoundRequest
    ) -> tuple[float, Callable[[RoundRequest, bool], RoundResult | None]] | None:
        """For a round that only waits before its result is ready (``Worker.waits_only``)
        and can begin now (its slots free): how long it waits, and how it ends. The
        Dispatcher holds it as a timer and calls the second with the request once it is due
        or ended: what the round held is let go, and with ``True`` its result is returned
        (with ``False``, ``None``: it was cancelled or timed out). ``None``: it runs through
        :meth:`run`."""
        return None

    def recorded(self, keys: tuple[str, ...]) -> None:  # noqa: B027 - nothing kept here
        """These rounds' records are durable (keys ``loop_id:round``): what the transport
        kept of their results for a node that might take their loops over may go."""

    def cancel(self, key: str) -> None:  # noqa: B027 - a round run here has nothing more
        """Stop the round with this idempotency key wherever it runs (its cancel scope is
        cancelled too, which is all a round run here needs)."""
