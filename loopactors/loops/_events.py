"""A loop's progress as typed events, and their human-readable notes.

Events are tagged msgspec Structs (``type`` field): they are appended to the store's event log,
fanned out to subscribers, printed by ``loopactors run --json`` and sent over the websocket as
they are. ``note()`` keeps the ``[loop-progress ...]`` wording (docs/loops.md).
"""

from __future__ import annotations

import time
from typing import ClassVar

import msgspec

from .._util import count_of
from ._model import CheckRecord, Mode, Phase, RoundStatus

__all__ = [
    "STATE_EVENTS",
    "AgentStep",
    "Gap",
    "LoopEvent",
    "LoopFinished",
    "LoopInterrupted",
    "LoopPaused",
    "LoopRecovered",
    "LoopResumed",
    "LoopStarted",
    "LoopWaiting",
    "RoundDeferred",
    "RoundFinished",
    "RoundStarted",
    "RoundSummary",
    "RoundWaiting",
    "event_decoder",
]


class Gap(msgspec.Struct, frozen=True, kw_only=True, tag="gap", tag_field="type"):
    """``missed`` events were dropped because this subscriber fell behind (not an event of a
    loop: a subscription yields it between events; the runtime's fan-out makes it)."""

    missed: int
    loop_id: str | None = None
    #: Of the ``missed``, those never stored (``agent_step``, ``round_waiting``).
    unstored: int = 0

    @property
    def type(self) -> str:
        """``"gap"``: the wire's tag, as on every event."""
        return "gap"

    def note(self) -> str:
        return f"[loop-progress {self.missed} events missed: the reader fell behind]"


class RoundSummary(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    round: int
    status: RoundStatus
    duration: float | None = None


class LoopEvent(msgspec.Struct, gc=False, frozen=True, kw_only=True, tag_field="type"):
    loop_id: str
    at: float

    @property
    def type(self) -> str:
        """The event's wire tag (``"round_finished"``, ...): what ``--json`` and the protocol
        show as its ``type`` field, so ``event.type == "loop_finished"`` reads as it does there
        (``isinstance`` works as well)."""
        return str(type(self).__struct_config__.tag)

    #: The words of its note, formatted with the event as ``e``; an event whose note needs
    #: more than its fields words it in its own :meth:`note`.
    _note: ClassVar[str] = ""

    def note(self) -> str:
        """The human-readable progress note (each event type words its own)."""
        return f"[loop-progress {self._note.format(e=self) or type(self).__name__}]"


def _secs(duration: float | None) -> str:
    return "?" if duration is None else f"{duration:.1f}"


class LoopStarted(LoopEvent, frozen=True, kw_only=True, tag="loop_started"):
    rounds: int
    mode: Mode
    worker: str
    parent_id: str | None = None

    def note(self) -> str:
        return f"[loop-progress loop started: {count_of(self.rounds, 'round')}, {self.mode} mode]"


class RoundStarted(LoopEvent, frozen=True, kw_only=True, tag="round_started"):
    round: int
    rounds: int
    seed_source: str
    _note: ClassVar[str] = "round {e.round}/{e.rounds} started"


class RoundFinished(LoopEvent, frozen=True, kw_only=True, tag="round_finished"):
    round: int
    rounds: int
    status: RoundStatus
    duration: float | None
    tokens: int = 0
    error: str | None = None
    #: What the round cost in US dollars (coding-agent CLI kinds report it; 0 otherwise).
    cost_usd: float = 0.0
    #: Workspace progress (coding-agent CLI kinds): files changed and new commits.
    files_changed: int | None = None
    commits: int | None = None
    #: A plan-driven loop's tasks done and in all after the round.
    tasks_done: int | None = None
    tasks_total: int | None = None
    #: The loop's ``until`` check after the round, and whether the round claimed the
    #: objective met while it failed.
    check: CheckRecord | None = None
    unverified_claim: bool = False

    def note(self) -> str:
        tasks = "" if self.tasks_total is None else f", tasks {self.tasks_done}/{self.tasks_total}"
        text = (
            f"[loop-progress round {self.round}/{self.rounds} {self.status}, "
            f"duration={_secs(self.duration)}s{tasks}]"
        )
        if self.check is not None:
            check = self.check
            if check.passed:
                verdict = "passed"
            elif check.exit_code is None:  # timed out, or ended by a signal: the error says
                verdict = f"failed ({check.error or 'no exit code'})"
            else:
                verdict = f"failed (exit {check.exit_code})"
            claim = ", the claim of done is unverified" if self.unverified_claim else ""
            text += f" check {verdict}{claim}"
        return text if self.error is None else f"{text} {self.error}"


class RoundDeferred(LoopEvent, frozen=True, kw_only=True, tag="round_deferred"):
    """The provider's usage or rate limit said "not now": the same round runs again at
    ``until`` (a UNIX time). Not a failure: the breaker does not count it."""

    round: int
    rounds: int
    until: float
    reason: str

    def note(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.until))
        return (
            f"[loop-progress round {self.round}/{self.rounds} deferred until {when}: {self.reason}]"
        )


class AgentStep(LoopEvent, frozen=True, kw_only=True, tag="agent_step"):
    """A tool call a coding-agent CLI made during a round: live only, not stored."""

    round: int
    tool: str
    detail: str = ""

    def note(self) -> str:
        return f"[loop-progress round {self.round} {self.tool} {self.detail}]".replace(" ]", "]")


class RoundWaiting(LoopEvent, frozen=True, kw_only=True, tag="round_waiting"):
    """A round dispatched to remote workers that no live worker can take (none serves its
    kind): said after a short grace, live only, not stored. The round still waits for one."""

    round: int
    reason: str
    _note: ClassVar[str] = "round {e.round} waiting: {e.reason}"


class LoopPaused(LoopEvent, frozen=True, kw_only=True, tag="loop_paused"):
    round: int
    _note: ClassVar[str] = "loop paused before round {e.round}"


class LoopResumed(LoopEvent, frozen=True, kw_only=True, tag="loop_resumed"):
    round: int
    _note: ClassVar[str] = "loop resumed at round {e.round}"


class LoopRecovered(LoopEvent, frozen=True, kw_only=True, tag="loop_recovered"):
    """The runtime restarted and picked the loop up from its last committed step."""

    phase: Phase
    round: int
    _note: ClassVar[str] = "loop recovered after restart in {e.phase} at round {e.round}"


class LoopInterrupted(LoopEvent, frozen=True, kw_only=True, tag="loop_interrupted"):
    """Sent the moment a loop is found impossible to resume (never only on the next message)."""

    round: int
    rounds: int
    reason: str
    _note: ClassVar[str] = "loop interrupted by restart at round {e.round}/{e.rounds}: {e.reason}"


class LoopWaiting(LoopEvent, frozen=True, kw_only=True, tag="loop_waiting"):
    """A recovered loop whose worker cannot be built (a program not on PATH, a module that
    does not import) waits in its phase, with ``reason``, rather than end: the runtime looks
    again now and then and goes on once it can; only a stop ends it. Sent when it begins."""

    round: int
    rounds: int
    reason: str
    _note: ClassVar[str] = "loop waiting at round {e.round}/{e.rounds}: {e.reason}"


class LoopFinished(LoopEvent, frozen=True, kw_only=True, tag="loop_finished"):
    phase: Phase
    rounds: int
    completed_rounds: int
    summary: tuple[RoundSummary, ...] = ()
    reason: str | None = None
    trigger: str | None = None

    def note(self) -> str:
        rounds = ", ".join(f"r{r.round}({_secs(r.duration)}s,{r.status})" for r in self.summary)
        head = _FINISHED.get(self.phase, "error: {e.reason}").format(e=self)
        return f"[loop-progress {head}]\nRounds: {rounds}"


#: The words of a finished loop's note, by its phase (any other: an error).
_FINISHED = {
    "complete": "loop complete",
    "cancelled": "loop cancelled",
    "escalated": "escalated: {e.trigger}: {e.reason}",
    "interrupted": "loop interrupted: {e.reason}",
}


AnyEvent = (
    LoopStarted
    | RoundStarted
    | RoundFinished
    | RoundDeferred
    | AgentStep
    | RoundWaiting
    | LoopPaused
    | LoopResumed
    | LoopRecovered
    | LoopInterrupted
    | LoopWaiting
    | LoopFinished
)

event_decoder = msgspec.json.Decoder(AnyEvent)

#: The events that go with a change of the loop's stored state: every kind but the live-only
#: ``AgentStep`` and ``RoundWaiting``.
STATE_EVENTS: tuple[type[LoopEvent], ...] = (
    LoopStarted,
    RoundStarted,
    RoundFinished,
    RoundDeferred,
    LoopPaused,
    LoopResumed,
    LoopRecovered,
    LoopInterrupted,
    LoopWaiting,
    LoopFinished,
)
