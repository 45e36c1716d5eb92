"""The loop domain: specs, states, round records, phases and their legal transitions.

Pure data and pure functions; no trio. Every type here is a frozen msgspec Struct, so the same
objects travel between actors, are committed by the store and cross the wire unchanged. They
hold only data, so they are made with ``gc=False``: never part of a reference cycle, they need
no tracking by the garbage collector (a busy runtime makes several every round).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..errors import IllegalTransition, LoopNotFound
from ._triggers import LIMIT_DEFAULTS, SIMILARITY_DEFAULT

__all__ = [
    "DEFAULT_ROUNDS",
    "LIVE_PHASES",
    "MAX_ROUNDS",
    "ROUNDS_CEILING",
    "TERMINAL_PHASES",
    "CheckRecord",
    "LoopSpec",
    "LoopState",
    "Mode",
    "Phase",
    "RoundRecord",
    "RoundStatus",
    "StopMode",
    "WorkerSpec",
    "check_transition",
    "is_terminal",
    "output_heads",
]

DEFAULT_ROUNDS = 5
#: The default cap on a loop's rounds (the node's ``max_rounds``), and the highest cap a
#: node may set.
MAX_ROUNDS = 50
ROUNDS_CEILING = 1_000_000
SCHEMA_VERSION = 1

Mode = Literal["inherit", "fresh"]
Phase = Literal[
    "activating",
    "dispatching",
    "awaiting_worker",
    "summarizing",
    "finalizing",
    "paused",
    "complete",
    "cancelled",
    "interrupted",
    "escalated",
    "error",
]
#: ``deferred``: a usage or rate limit held the round back; it runs again (same number).
RoundStatus = Literal["running", "completed", "failed", "timed_out", "cancelled", "deferred"]
StopMode = Literal["now", "after_round"]

TERMINAL_PHASES: frozenset[Phase] = frozenset(
    {"complete", "cancelled", "interrupted", "escalated", "error"}
)
LIVE_PHASES: frozenset[Phase] = frozenset(
    {"activating", "dispatching", "awaiting_worker", "summarizing", "finalizing", "paused"}
)

# Every phase may also go to `error` (a bug or a broken worker) and, while live, to
# `cancelled` (a stop) and `interrupted` (cannot resume): those are added below.
_FORWARD: dict[Phase, frozenset[Phase]] = {
    "activating": frozenset({"dispatching", "paused", "escalated"}),
    "dispatching": frozenset({"awaiting_worker", "escalated", "paused"}),
    "awaiting_worker": frozenset({"summarizing"}),
    "summarizing": frozenset({"dispatching", "finalizing", "paused", "escalated"}),
    "paused": frozenset({"dispatching", "finalizing", "escalated"}),
    "finalizing": frozenset({"complete", "escalated"}),
}


def is_terminal(phase: Phase) -> bool:
    return phase in TERMINAL_PHASES


def check_transition(current: Phase, new: Phase) -> Phase:
    """Return ``new`` if ``current -> new`` is legal, else raise :class:`IllegalTransition`.

    A terminal phase never changes: that is what keeps a finished loop from being rewritten
    (rolebox's W10). Staying in the same live phase is allowed (a re-commit after recovery).
    """
    if current in TERMINAL_PHASES:
        raise IllegalTransition(f"loop is already {current}; it cannot become {new}")
    if new == current or new in ("error", "cancelled", "interrupted"):
        return new
    if new in _FORWARD[current]:
        return new
    allowed = sorted(_FORWARD[current] | {"error", "cancelled", "interrupted"})
    raise IllegalTransition(
        f"a loop cannot go from {current} to {new}; from {current} it can go to "
        f"{', '.join(allowed)}"
    )


class WorkerSpec(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """A worker spec read once: the kind it names and the options that kind parses
    (``command:./agent.sh --fast`` -> ``command``, ``./agent.sh --fast``). The one place a
    spec's text is split; what a kind accepts is the kind's (:mod:`loopactors.workers`)."""

    text: str
    kind: str
    options: str = ""

    @classmethod
    def parse(cls, text: str) -> WorkerSpec:
        kind, _, options = text.partition(":")
        return cls(text=text, kind=kind, options=options)


class LoopSpec(msgspec.Struct, gc=False, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the user asked for: fixed for the life of the loop."""

    @property
    def worker_spec(self) -> WorkerSpec:
        """:attr:`worker` read (derived, so stored loops read as they were written)."""
        return WorkerSpec.parse(self.worker)

    task: str
    rounds: int = DEFAULT_ROUNDS
    mode: Mode = "inherit"
    objective: str | None = None
    #: Worker spec, e.g. ``scripted``, ``command:./agent.sh --fast``, ``python:pkg.mod:fn``.
    worker: str = "scripted"
    #: Seconds one round may take before it is cancelled and recorded ``timed_out``.
    round_timeout: float = 900.0
    #: Seconds between the end of a round and the start of the next.
    inter_round_delay: float = 0.0
    #: Tail of the previous round's output kept in an ``inherit`` prompt.
    seed_cap: int = 8000
    #: Budgets checked by the breaker before each round (``None``: no limit).
    max_tokens: int | None = None
    max_seconds: float | None = None
    max_consecutive_failures: int = int(LIMIT_DEFAULTS["max_consecutive_failures"])
    #: Identical outputs (after normalisation) in a row that trip the no-progress fuse.
    stale_rounds_limit: int = int(LIMIT_DEFAULTS["stale_rounds_limit"])
    #: The run ledger's breaker (loop-context's rules): the same error this many times in a
    #: row (stagnation), the same action this many times in a row (frustration), compared
    #: with this similarity.
    stagnation_threshold: int = int(LIMIT_DEFAULTS["stagnation_threshold"])
    frustration_threshold: int = int(LIMIT_DEFAULTS["frustration_threshold"])
    similarity_threshold: float = SIMILARITY_DEFAULT
    #: Append the ledger's "Loop Context (managed)" block to each round's prompt.
    inject_ledger: bool = False
    owner: str | None = None
    parent_id: str | None = None
    #: Always False now: rounds above the node's ``max_rounds`` are refused at admission. Kept
    #: so that loops stored when such rounds were clamped to 50 still read.
    clamped: bool = False
    #: Notification URLs (apprise's forms: json://, mailto://, ntfy://, slack://, ...), the
    #: events that go to them (empty: every one, ``loops.NOTIFY_EVENTS``), and after how many
    #: failing ``until`` checks in a row ``check_failing`` goes out (docs/notifications.md).
    notify: tuple[str, ...] = ()
    notify_on: tuple[str, ...] = ()
    notify_check_failures: int = 3
    #: A plan file (absolute path): a Markdown checklist or a prd.json; each round's prompt
    #: names its next open task, and the loop completes when every task is done
    #: (docs/plans.md).
    plan: str | None = None
    #: A file (absolute path) the task is read from at the start of every round.
    prompt_file: str | None = None
    #: ``LOOP_ID:ROUND`` of the round this loop replays (``loopactors replay``).
    replay_of: str | None = None
    #: The loop's check (a shell command, run in the workspace after every completed round):
    #: exit 0 completes the loop; anything else goes into the next round's prompt. Its own
    #: timeout in seconds, and how many claims of "done" in a row it may refute before the
    #: breaker escalates (trigger ``unverified_claims``). See docs/loops.md, Verified completion.
    until: str | None = None
    until_timeout: float = 600.0
    max_unverified_claims: int = int(LIMIT_DEFAULTS["max_unverified_claims"])
    #: US dollars the loop may spend: at or over it, no round starts (trigger ``cost_budget``).
    max_cost_usd: float | None = None


class CheckRecord(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """What the loop's ``until`` check said after a round."""

    command: str
    #: The exit code; ``None`` when it did not exit by itself (timed out, or stopped).
    exit_code: int | None
    duration: float
    #: Its stdout and stderr together, capped like a round's output (the end is kept).
    output: str = ""
    #: Why it has no exit code, or could not run (``timed out after 600 s``).
    error: str | None = None
    #: The round it ran after (set when the round is recorded).
    round: int = 0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


class RoundRecord(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One round as the store keeps it; (loop_id, round) is unique."""

    loop_id: str
    round: int
    status: RoundStatus
    #: Where the prompt's seed came from: ``task`` (fresh or round 1) or ``previous_output``.
    seed_source: Literal["task", "previous_output"] = "task"
    output: str = ""
    error: str | None = None
    tokens: int = 0
    started_at: float = 0.0
    duration: float | None = None
    #: The worker's transcript of the round (agent worker), as plain data; empty otherwise.
    transcript: tuple[dict[str, Any], ...] = ()
    #: US dollars the round cost (coding-agent CLI kinds), and the CLI's session id.
    cost_usd: float = 0.0
    session_id: str | None = None
    #: The CLI session's running cost total after the round (Claude Code's
    #: ``total_cost_usd``), when the CLI reports one; ``cost_usd`` is then the difference.
    session_cost_usd: float | None = None
    #: Workspace progress (coding-agent CLI kinds): files changed, new commits.
    files_changed: int | None = None
    commits: int | None = None
    #: The prompt the worker was given (what ``loopactors replay`` runs again).
    prompt: str = ""
    #: A plan-driven loop's tasks done and in all, read from the plan after the round.
    tasks_done: int | None = None
    tasks_total: int | None = None
    #: The loop's ``until`` check after the round (``None``: no check, or the round did not
    #: complete), and whether the round claimed the objective met while the check failed.
    check: CheckRecord | None = None
    unverified_claim: bool = False
    #: The account the round ran on (``KIND:FINGERPRINT``), for the daily budgets.
    account: str | None = None


class LoopState(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """Everything needed to resume a loop from its last committed step."""

    loop_id: str
    spec: LoopSpec
    phase: Phase = "activating"
    #: The round in flight, or the next one to run (1-based).
    round: int = 1
    completed_rounds: int = 0
    #: The last successful round's output: the seed of the next ``inherit`` prompt.
    last_output: str | None = None
    stale_rounds: int = 0
    consecutive_failures: int = 0
    tokens_used: int = 0
    #: US dollars the loop's rounds cost so far (coding-agent CLI kinds).
    cost_usd: float = 0.0
    #: The coding-agent CLI session of the last round: an ``inherit`` round resumes it.
    agent_session: str | None = None
    #: That session's running cost total after its last round (``None``: not reported):
    #: the next round's cost is its new total less this.
    agent_session_cost: float | None = None
    #: Set while a usage or rate limit holds the loop's next round back: the UNIX time it
    #: runs again, why, and how many deferrals in a row (for the backoff).
    deferred_until: float | None = None
    defer_reason: str | None = None
    deferrals: int = 0
    #: The task of the round in flight when it is not ``spec.task`` (a plan-driven loop, or
    #: one whose task is read from a file each round); ``None`` otherwise.
    round_task: str | None = None
    #: A plan-driven loop's tasks done and in all, as of its last round (or its start).
    tasks_done: int | None = None
    tasks_total: int | None = None
    #: What the no-progress fuse compared last: the outputs, or the workspace (coding-agent
    #: CLI kinds measure files changed and new commits).
    progress_measure: Literal["output", "workspace"] = "output"
    stop_requested: StopMode | None = None
    pause_requested: bool = False
    #: Why the loop ended in error, escalated or interrupted; the breaker's trigger if any.
    reason: str | None = None
    trigger: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: Wall-clock time the loop first started running (budget ``max_seconds``).
    started_at: float = 0.0
    #: The ``until`` check after the last completed round (the next prompt shows a failure),
    #: how many rounds in a row it failed, and how many claims of "done" in a row it refuted.
    last_check: CheckRecord | None = None
    failing_checks: int = 0
    unverified_claims: int = 0
    schema: int = SCHEMA_VERSION

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def moved(self, phase: Phase, **changes: object) -> LoopState:
        """A copy in ``phase`` (checked) with ``changes`` applied and ``updated_at`` now."""
        check_transition(self.phase, phase)
        return msgspec.structs.replace(self, phase=phase, updated_at=time.time(), **changes)

    if not TYPE_CHECKING:  # hidden from mypy: it would accept any attribute of a state

        def __getattr__(self, name: str) -> Any:
            # Only for a name not found. Runtime.start returned a LoopHandle until it
            # returned this: say how the handle's verbs are reached now.
            if name in _HANDLE_VERBS:
                raise AttributeError(
                    f"a LoopState has no {name!r}: Runtime.start returns the loop's state now, "
                    f"not a LoopHandle; use rt.handle(state).{name}(...) or the runtime's verb "
                    "with state.loop_id (docs/embedding.md, Former names)",
                    name=name,
                    obj=self,
                )
            raise AttributeError(
                f"'LoopState' object has no attribute {name!r}", name=name, obj=self
            )


#: LoopHandle's verbs, which code written for a former Runtime.start may call on a state.
_HANDLE_VERBS = frozenset(
    ("get", "status", "stop", "pause", "resume", "history", "events", "wait", "wait_phase")
)


def round_of(loop_id: str, rounds: Sequence[RoundRecord], number: int) -> RoundRecord:
    """Round ``number`` among a loop's ``rounds``.

    Raises:
        LoopNotFound: it has no such round; the message says which rounds it has.
    """
    for record in rounds:
        if record.round == number:
            return record
    have = f"rounds 1..{len(rounds)}" if rounds else "no recorded rounds yet"
    raise LoopNotFound(f"loop {loop_id!r} has no round {number} ({have})")


def output_heads(
    state: LoopState, rounds: list[RoundRecord], head: int | None
) -> tuple[LoopState, list[RoundRecord]]:
    """The loop and its rounds with each output and prompt (and the loop's ``last_output``)
    cut to its first ``head`` characters; unchanged when ``head`` is None. A node answers
    ``history`` and ``status`` so: a frame must stay small whatever a worker printed."""
    if head is None:
        return state, rounds
    if head < 0:
        raise ValueError(f"an output head must be >= 0, got {head}")
    last = state.last_output
    if last is not None and len(last) > head:
        state = msgspec.structs.replace(state, last_output=last[:head])
    cut = [_round_head(r, head) for r in rounds]
    last_check = state.last_check
    if last_check is not None and len(last_check.output) > head:
        state = msgspec.structs.replace(state, last_check=_check_tail(last_check, head))
    return state, cut


def _round_head(record: RoundRecord, head: int) -> RoundRecord:
    if len(record.output) > head or len(record.prompt) > head:
        record = msgspec.structs.replace(
            record, output=record.output[:head], prompt=record.prompt[:head]
        )
    if record.check is not None and len(record.check.output) > head:
        # A check's end says what failed: its tail is kept.
        record = msgspec.structs.replace(record, check=_check_tail(record.check, head))
    return record


def _check_tail(check: CheckRecord, keep: int) -> CheckRecord:
    return msgspec.structs.replace(check, output=check.output[-keep:] if keep else "")
