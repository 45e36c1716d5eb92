"""Every message the runtime's actors exchange: one file to read the protocol.

Frozen msgspec Structs. Inside a process they travel as objects; only the store and the
websocket gateway encode anything.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .loops._model import LoopSpec, LoopState, StopMode
from .storage._base import Write
from .workers._base import RoundRequest, RoundResult

__all__ = [
    "Advance",
    "BuildPrompt",
    "CancelRound",
    "CheckRound",
    "Commit",
    "ControlLoop",
    "Dispatch",
    "GetEvents",
    "GetLoop",
    "GetRounds",
    "GetStoreStatistics",
    "ListLoops",
    "LoopEnded",
    "RoundDone",
    "Schedule",
    "StartLoop",
]

# -- Store -----------------------------------------------------------------------------------


class Commit(msgspec.Struct, frozen=True):
    """Make ``write`` durable; the reply (None) comes once its batch's transaction committed."""

    write: Write


class GetLoop(msgspec.Struct, frozen=True):
    loop_id: str


class ListLoops(msgspec.Struct, frozen=True, kw_only=True):
    live_only: bool = False
    limit: int | None = None


class GetRounds(msgspec.Struct, frozen=True):
    loop_id: str


class GetEvents(msgspec.Struct, frozen=True):
    loop_id: str


class GetStoreStatistics(msgspec.Struct, frozen=True):
    pass


# -- Breaker and Compactor -------------------------------------------------------------------


class CheckRound(msgspec.Struct, frozen=True):
    """Reply: a ``Verdict`` to escalate, or None to go on."""

    state: LoopState
    now: float


class BuildPrompt(msgspec.Struct, frozen=True):
    """Reply: a ``Prompt``."""

    state: LoopState


# -- Dispatcher ------------------------------------------------------------------------------


class Dispatch(msgspec.Struct, frozen=True):
    """Run one round; the result goes to the loop's runner as :class:`RoundDone`.

    Dispatching a key that is already running attaches to that run (idempotency key).
    """

    request: RoundRequest
    timeout: float
    context: Any = None


class CancelRound(msgspec.Struct, frozen=True):
    key: str


class RoundDone(msgspec.Struct, frozen=True):
    loop_id: str
    round: int
    result: RoundResult


# -- Timers ----------------------------------------------------------------------------------


class Schedule(msgspec.Struct, frozen=True):
    """Cast ``message`` to the actor registered as ``name`` at trio time ``deadline``."""

    deadline: float
    name: str
    message: Any


# -- Coordinator and LoopRunners -------------------------------------------------------------


class StartLoop(msgspec.Struct, frozen=True, kw_only=True):
    """Reply: the committed initial ``LoopState``."""

    spec: LoopSpec
    loop_id: str | None = None


class ControlLoop(msgspec.Struct, frozen=True, kw_only=True):
    """Reply: the loop's ``LoopState`` after the command took effect."""

    loop_id: str
    command: Literal["stop", "pause", "resume", "status"]
    stop_mode: StopMode = "now"


class LoopEnded(msgspec.Struct, frozen=True):
    """A runner tells the Coordinator its loop reached a terminal phase."""

    state: LoopState


class Advance(msgspec.Struct, frozen=True):
    """Wake a runner to take its next step; ``epoch`` makes stale wake-ups harmless."""

    epoch: int
