"""Where rounds run: the transport interface of the Dispatcher, and the in-process one.

The in-process transport is today's behaviour and the default: the Dispatcher runs each round
on a worker backend in its own nursery and times it. A remote transport (Redis) hands rounds
to worker processes that time them; the Dispatcher then only waits for their results, with
the round's cancel scope still the way a stop arrives.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import trio

from ..workers import RoundRequest, RoundResult, Worker, parse_worker

__all__ = ["InProcessTransport", "RemoteTransport", "RoundTransport"]


class RoundTransport(abc.ABC):
    #: Rounds run in other processes, which time them (see :meth:`run_remote`).
    remote: ClassVar[bool]

    def worker(self, spec: str, *, kill_grace: float) -> Worker:
        """The backend that runs rounds of this spec in this process."""
        return parse_worker(spec, kill_grace=kill_grace)

    @abc.abstractmethod
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Background work for the Dispatcher's lifetime (started in its nursery)."""


class RemoteTransport(RoundTransport):
    """Rounds run in other processes: the Dispatcher hands each over and waits for its result
    (in process, a round's cancel scope is all a stop needs; here it must reach the round)."""

    remote = True

    @abc.abstractmethod
    async def run_remote(self, request: RoundRequest, timeout: float) -> RoundResult:
        """Run the round elsewhere and return its result; cancelling the caller abandons it
        (call :meth:`cancel` to stop it there)."""

    @abc.abstractmethod
    def cancel(self, key: str) -> None:
        """Stop the round with this idempotency key wherever it runs."""


class InProcessTransport(RoundTransport):
    """Rounds run in the node's process (the default)."""

    remote = False

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
