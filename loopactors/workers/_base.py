"""What runs one round: the worker interface, its request and its result.

A worker is ``prompt in -> RoundResult out``. The Dispatcher owns time: it runs each worker in
a cancel scope with the round's timeout, measures the duration and turns a timeout into
``timed_out``. A worker only has to return (completed or failed) and let cancellation through.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal, Protocol

import msgspec

# At run time, not only for type checkers: msgspec resolves RoundRequest's annotations (so
# the transport can decode one) in this module.
from ..loops import Mode

__all__ = ["RoundContext", "RoundRequest", "RoundResult", "Worker", "WorkerStatus"]

WorkerStatus = Literal["completed", "failed", "timed_out", "cancelled"]


class RoundRequest(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    loop_id: str
    round: int
    rounds: int
    mode: Mode
    #: The full prompt for this round (seed + separator + task, or the task alone).
    prompt: str
    #: The loop's task text, without any seed.
    task: str
    #: The worker spec string the loop was started with.
    worker: str
    #: What the loop is for, if the user said (``objective="..."``): a worker that finds it
    #: met reports ``done`` and the loop completes early.
    objective: str | None = None
    #: Working directory for the round (a code loop's worktree); ``None``: the process's own.
    cwd: str | None = None
    #: Extra environment for the round (a code loop's ``LOOPACTORS_WORKTREE`` and friends).
    env: dict[str, str] = msgspec.field(default_factory=dict)

    #: Idempotency key ``loop_id:round``: the same round dispatched again has the same key.
    @property
    def key(self) -> str:
        return f"{self.loop_id}:{self.round}"


class RoundResult(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    status: WorkerStatus
    output: str = ""
    error: str | None = None
    tokens: int = 0
    duration: float = 0.0
    #: The worker says the loop's objective is met: the loop completes after this round.
    done: bool = False
    #: What the round said and did, as plain data (the agent worker's conversation: one
    #: entry per message with its flags); kept with the round record. Empty for other workers.
    transcript: tuple[dict[str, Any], ...] = ()


class RoundContext(Protocol):
    """What a round may do besides returning output: start child loops.

    The runtime implements it; a child loop started through it lives in its parent's scope.
    """

    async def start_child(self, text: str, **options: Any) -> Any: ...


class Worker(abc.ABC):
    """Runs one round. Subclasses set ``kind`` and implement :meth:`run`."""

    kind: ClassVar[str]

    @abc.abstractmethod
    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        """Run the round. Must let ``trio.Cancelled`` through (that is how a stop arrives)."""
