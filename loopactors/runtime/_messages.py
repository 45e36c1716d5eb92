"""Every message the runtime's actors exchange: one file to read the protocol.

(The gateway's own messages are in ``gateway/_messages.py``.)

Frozen msgspec Structs. Inside a process they travel as objects; only the store and the
websocket gateway encode anything.

Those that hold only data (strings, numbers, other such Structs) are made with ``gc=False``:
they cannot be part of a reference cycle, and the garbage collector need not track the
several of them every round makes (fewer and shorter collections with 10,000 loops). Those
with an ``Any`` field stay tracked, and so do those that hold one (``Commit`` holds
``Forward``s): an ``Any`` may be a mutable object that refers back, and a cycle through an
untracked Struct is never collected.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..agent import Entry, FullPlan, MicroPlan
from ..ledger import Attempt, Ledger
from ..loops import LoopSpec, LoopState, Prompt, StopMode, Verdict
from ..storage import Write
from ..workers import RoundRequest, RoundResult

__all__ = [
    "Admitted",
    "Advance",
    "ApplyCompaction",
    "BuildPrompt",
    "CancelRound",
    "CancelTimers",
    "CheckRound",
    "Commit",
    "ControlLoop",
    "Dispatch",
    "DueNotifications",
    "Escalate",
    "FindLoopIds",
    "ForgetLedger",
    "Forward",
    "GetContextBuilderStatistics",
    "GetEvents",
    "GetLoop",
    "GetLoopOwners",
    "GetLoops",
    "GetNotifierStatistics",
    "GetRoundSummaries",
    "GetRounds",
    "GetStoreStatistics",
    "GetTimersStatistics",
    "ListLiveLoops",
    "ListLoops",
    "LoopEnded",
    "LoopsClaimed",
    "LoopsFencedOut",
    "NextNotificationAt",
    "NotificationDone",
    "NotificationRetry",
    "NotificationsQueued",
    "PromptReady",
    "PruneLoops",
    "RecordAttempt",
    "RoundDone",
    "RoundWhere",
    "RoundsRecorded",
    "Schedule",
    "SetNodeGateway",
    "StartLoop",
    "WhereIsRound",
]

# -- Store -----------------------------------------------------------------------------------


class Forward(msgspec.Struct, frozen=True):
    """Cast ``message`` to the actor registered as ``name``."""

    name: str
    message: Any


class Commit(msgspec.Struct, frozen=True):
    """Make ``write`` durable, then act on it.

    Once the batch holding it has committed, the Store publishes the write's events and
    sends each ``then`` forward, and (if this came as a ``call``) replies. So a side effect
    that rides on a commit can never happen before the commit is durable, and the sender
    need not wait for it.
    """

    write: Write
    then: tuple[Forward, ...] = ()


class GetLoop(msgspec.Struct, frozen=True):
    loop_id: str


class GetLoops(msgspec.Struct, frozen=True):
    """Reply: the states of these loops, in this order (a loop not in the store is left out)."""

    loop_ids: tuple[str, ...]


class ListLoops(msgspec.Struct, frozen=True, kw_only=True):
    live_only: bool = False
    #: The ``created_at`` and ``loop_id`` of the last loop of the previous page.
    after: tuple[float, str] | None = None
    limit: int | None = None


class ListLiveLoops(msgspec.Struct, frozen=True):
    """Reply: every live loop's state, in no particular order (a recovery's read)."""


class FindLoopIds(msgspec.Struct, frozen=True):
    """Reply: the ids starting with ``prefix``, sorted, at most ``limit``."""

    prefix: str
    limit: int


class GetRounds(msgspec.Struct, frozen=True):
    loop_id: str


class GetRoundSummaries(msgspec.Struct, frozen=True):
    """Reply: the round summaries of each of these loops that has rounds, by loop id."""

    loop_ids: tuple[str, ...]


class GetEvents(msgspec.Struct, frozen=True):
    loop_id: str


class GetStoreStatistics(msgspec.Struct, frozen=True):
    pass


class GetLoopOwners(msgspec.Struct, frozen=True):
    """Reply: the node incarnation owning each of these loops that a node owns (a shared
    store; empty on a store of one node)."""

    loop_ids: tuple[str, ...]


class SetNodeGateway(msgspec.Struct, frozen=True):
    """Record where this node's gateway listens, in a shared store's row of the node."""

    url: str


class PruneLoops(msgspec.Struct, frozen=True):
    """Remove the finished loops last updated before ``before`` (epoch seconds), with their
    rounds and events (only count them if ``dry_run``). Answered with a ``PruneReport``."""

    before: float
    dry_run: bool = False


# -- Breaker and ContextBuilder -------------------------------------------------------------


class DueNotifications(msgspec.Struct, gc=False, frozen=True):
    """The Notifier asks the Store for up to ``limit`` notifications due at ``now`` (UNIX)."""

    now: float
    limit: int


class NextNotificationAt(msgspec.Struct, gc=False, frozen=True):
    """When the earliest queued notification is due (``None``: the queue is empty)."""


class NotificationDone(msgspec.Struct, gc=False, frozen=True):
    """Take a notification off the queue: delivered, or dropped for its age."""

    notification_id: int


class NotificationRetry(msgspec.Struct, gc=False, frozen=True):
    """A delivery failed: the notification is due again at ``next_at`` (UNIX)."""

    notification_id: int
    next_at: float
    attempts: int


class NotificationsQueued(msgspec.Struct, gc=False, frozen=True):
    """The Store committed new notifications: the Notifier looks at its queue now."""


class GetNotifierStatistics(msgspec.Struct, gc=False, frozen=True):
    pass


class CheckRound(msgspec.Struct, gc=False, frozen=True):
    """To the Breaker, before round ``state.round``. It answers the loop's runner with
    :class:`Escalate`, or passes the loop on to the ContextBuilder (:class:`BuildPrompt`)."""

    state: LoopState
    now: float
    epoch: int


class BuildPrompt(msgspec.Struct, gc=False, frozen=True):
    """To the ContextBuilder; it answers the loop's runner with :class:`PromptReady`. ``ledger``
    is set when the loop asked for the ledger's context block in its prompts."""

    state: LoopState
    epoch: int
    ledger: Ledger | None = None


class ApplyCompaction(msgspec.Struct, frozen=True):
    """An agent asks the ContextBuilder to apply a compaction ``plan`` (micro, or full with its
    summary already written) to ``view`` (the transcript's entries the plan was made on).
    The reply is the applied view (a tuple of entries); the agent commits it against
    ``plan.revision``."""

    plan: MicroPlan | FullPlan
    view: tuple[Entry, ...]


class GetContextBuilderStatistics(msgspec.Struct, frozen=True):
    """The ContextBuilder's counters since it (re)started, by name: ``prompts_built`` (the
    prompts that read files or carry the ledger's block; the Breaker builds the others) and
    ``compactions_applied``."""


class RecordAttempt(msgspec.Struct, gc=False, frozen=True):
    """A runner tells the Breaker how a round went (one attempt of the loop's ledger)."""

    loop_id: str
    attempt: Attempt


class ForgetLedger(msgspec.Struct, frozen=True):
    """The loop ended: the Breaker drops its ledger (the store keeps the rounds)."""

    loop_id: str


class Escalate(msgspec.Struct, gc=False, frozen=True):
    round: int
    epoch: int
    verdict: Verdict


class PromptReady(msgspec.Struct, gc=False, frozen=True):
    round: int
    epoch: int
    prompt: Prompt


# -- Dispatcher ------------------------------------------------------------------------------


class Dispatch(msgspec.Struct, gc=False, frozen=True):
    """Run one round; the result goes to the loop's runner as :class:`RoundDone`.

    Dispatching a key that is already running attaches to that run (idempotency key).
    """

    request: RoundRequest
    timeout: float


class WhereIsRound(msgspec.Struct, frozen=True):
    """Asked by a runner whose watchdog fired. Reply: :class:`RoundWhere`."""

    key: str


class RoundWhere(msgspec.Struct, frozen=True):
    """Neither queued nor running (``running_for`` None) means the Dispatcher lost it."""

    queued: bool = False
    running_for: float | None = None


class CancelRound(msgspec.Struct, frozen=True):
    key: str


class RoundsRecorded(msgspec.Struct, frozen=True):
    """The Store to the Dispatcher, after a commit (with a remote transport only): these
    rounds' records are durable, by key; their transport lets go of their reports, which
    it kept until now for a node that takes the loop over (``RoundTransport.recorded``)."""

    keys: tuple[str, ...]


class RoundDone(msgspec.Struct, gc=False, frozen=True):
    loop_id: str
    round: int
    result: RoundResult


# -- Timers ----------------------------------------------------------------------------------


class Schedule(msgspec.Struct, frozen=True):
    """Cast ``message`` to the actor registered as ``name`` at trio time ``deadline``."""

    deadline: float
    name: str
    message: Any


class CancelTimers(msgspec.Struct, gc=False, frozen=True):
    """Drop every timer pending for ``name`` (its receiver has ended)."""

    name: str


class GetTimersStatistics(msgspec.Struct, gc=False, frozen=True):
    """How many timers are pending. Reply: a dict of counts."""


# -- Coordinator and LoopRunners -------------------------------------------------------------


class StartLoop(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """Reply: the committed initial ``LoopState``."""

    spec: LoopSpec
    loop_id: str | None = None
    #: Look the id up in the store first (an id chosen by the caller may be in use; the
    #: same spec under a used id gets that loop, another spec is refused).
    check_existing: bool = False


class ControlLoop(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """Reply: the loop's ``LoopState`` after the command took effect."""

    loop_id: str
    command: Literal["stop", "pause", "resume", "status"]
    stop_mode: StopMode = "now"


class Admitted(msgspec.Struct, frozen=True):
    """The Store tells the Coordinator a new loop's first state is durable."""

    loop_id: str


class LoopEnded(msgspec.Struct, gc=False, frozen=True):
    """A runner tells the Coordinator its loop reached a terminal phase."""

    state: LoopState


class LoopsClaimed(msgspec.Struct, frozen=True):
    """This node took these loops over from a node that died or left (a shared store,
    docs/multinode.md): the Coordinator recovers those it does not run yet."""

    loop_ids: tuple[str, ...]


class LoopsFencedOut(msgspec.Struct, frozen=True):
    """The Store tells the Coordinator these loops' writes were fenced (they are not this
    node's): their runners stop, their admissions are answered."""

    loop_ids: frozenset[str]


class Advance(msgspec.Struct, frozen=True):
    """Wake a runner to take its next step; ``epoch`` makes stale wake-ups harmless."""

    epoch: int
