"""A loop's rounds seen as a run ledger (loop-context's model). Pure, no trio.

Every finished round is an attempt: its action is the first line of what the worker
said (or of the task), its outcome ``success`` or ``failure``, its error and tokens the
round's. The Breaker checks the ledger before each round with the loop's own thresholds;
``loopactors ledger export`` writes it in loop-context's JSON.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable

import msgspec
from msgspec import UNSET

from ..ledger import Attempt, BreakerConfig, Ledger, breaker_facts
from ..loops import LoopSpec, LoopState, RoundRecord

__all__ = [
    "BreakerStanding",
    "TriggerStanding",
    "attempt_of",
    "breaker_config",
    "breaker_standing",
    "ledger_of",
]

_ACTION_CHARS = 160


def attempt_of(record: RoundRecord, task: str) -> Attempt:
    """The ledger attempt of one finished round."""
    action = _first_line(record.output) or _first_line(task) or task
    timestamp = (
        datetime.datetime.fromtimestamp(record.started_at, datetime.UTC).isoformat()
        if record.started_at
        else None
    )
    return Attempt(
        iteration=record.round,
        timestamp=timestamp if timestamp else UNSET,
        action=action[:_ACTION_CHARS],
        outcome="success" if record.status == "completed" else "failure",
        error=record.error if record.error else UNSET,
        tokens_used=record.tokens,
    )


#: What str.splitlines() splits at (every one of them is also whitespace).
_LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_NOT_SPACE = re.compile(r"\S")


def _first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped ("" if none): as
    ``next(l.strip() for l in text.splitlines() if l.strip())``, without splitting a whole
    (maybe megabytes long) output into lines every round."""
    found = _NOT_SPACE.search(text)
    if found is None:
        return ""
    start = found.start()  # what precedes it on its line is blank
    end = _LINE_BREAK.search(text, start)
    return text[start : len(text) if end is None else end.start()].rstrip()


def ledger_of(state: LoopState, records: Iterable[RoundRecord]) -> Ledger:
    """The loop's ledger: its task as the goal, its finished rounds as attempts."""
    attempts = tuple(
        attempt_of(r, state.spec.task)
        for r in sorted(records, key=lambda r: r.round)
        if r.status != "running"
    )
    started = (
        datetime.datetime.fromtimestamp(state.started_at, datetime.UTC).isoformat()
        if state.started_at
        else None
    )
    return Ledger(goal=state.spec.task, attempts=attempts, started_at=started or UNSET)


def breaker_config(spec: LoopSpec) -> BreakerConfig:
    """The ledger breaker's settings for a loop.

    Its no-progress and token rules use the loop's own limits (which the runtime checks
    first, under the names ``consecutive_failures`` and ``token_budget``), and its iteration
    cap is past the loop's last round, so what it adds is stagnation and frustration.
    """
    return BreakerConfig(
        max_iterations=spec.rounds + 1,
        stagnation_threshold=spec.stagnation_threshold,
        frustration_threshold=spec.frustration_threshold,
        no_progress_threshold=spec.max_consecutive_failures,
        similarity_threshold=spec.similarity_threshold,
        token_budget=spec.max_tokens,
    )


class TriggerStanding(msgspec.Struct, frozen=True, kw_only=True):
    """How far a loop is towards one of the breaker's triggers: it fires at ``limit``."""

    #: The trigger's name as a loop's ``trigger`` gives it (docs/loops.md, "The breaker").
    trigger: str
    value: float
    limit: float


class BreakerStanding(msgspec.Struct, frozen=True, kw_only=True):
    """Every trigger that applies to a loop, in the order the breaker checks them, and the
    one closest to firing (the highest ``value / limit``; the first of equals)."""

    triggers: list[TriggerStanding]
    closest: str


def breaker_standing(
    state: LoopState, records: Iterable[RoundRecord], now: float
) -> BreakerStanding:
    """The breaker as it stands for a loop: the runtime's own rules (``check_before_round``)
    and the run ledger's stagnation and frustration counts, at ``now`` (a UNIX time)."""
    spec = state.spec
    finished = [r for r in records if r.status != "running"]
    done = min(len(finished), spec.rounds)  # rounds run, failed ones too: the cap counts them
    triggers = [
        TriggerStanding(trigger="max_rounds", value=done, limit=spec.rounds),
        TriggerStanding(
            trigger="no_progress", value=state.stale_rounds, limit=spec.stale_rounds_limit
        ),
        TriggerStanding(
            trigger="consecutive_failures",
            value=state.consecutive_failures,
            limit=spec.max_consecutive_failures,
        ),
    ]
    if spec.max_tokens is not None:
        triggers.append(
            TriggerStanding(trigger="token_budget", value=state.tokens_used, limit=spec.max_tokens)
        )
    if spec.max_seconds is not None:
        end = state.updated_at if state.terminal else now
        elapsed = max(0.0, end - state.started_at) if state.started_at else 0.0
        triggers.append(
            TriggerStanding(trigger="deadline", value=round(elapsed, 1), limit=spec.max_seconds)
        )
    # The ledger's triggers fire when the trailing failures reach the threshold and, among
    # them, that many in a row are alike (by error, by action): the alike ones are the count.
    facts = breaker_facts(ledger_of(state, finished).attempts, spec.similarity_threshold)
    triggers.append(
        TriggerStanding(
            trigger="stagnation", value=facts.same_error, limit=spec.stagnation_threshold
        )
    )
    triggers.append(
        TriggerStanding(
            trigger="frustration", value=facts.same_action, limit=spec.frustration_threshold
        )
    )
    closest = max(triggers, key=lambda t: t.value / t.limit if t.limit else 0.0)
    return BreakerStanding(triggers=triggers, closest=closest.trigger)
