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

import attrs
import msgspec
from msgspec import UNSET

from ..ledger import Attempt, BreakerConfig, Ledger, breaker_facts
from ..loops import LoopSpec, LoopState, RoundRecord, triggers

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
    #: Its name in words (the trigger table's ``label``), for people.
    label: str = ""
    value: float
    limit: float


class BreakerStanding(msgspec.Struct, frozen=True, kw_only=True):
    """Every trigger that applies to a loop, in the order the breaker checks them, and the
    one closest to firing (the highest ``value / limit``; the first of equals)."""

    triggers: list[TriggerStanding]
    closest: str


@attrs.frozen
class _Progress:
    finished: int
    same_error: int
    same_action: int


def breaker_standing(
    state: LoopState, records: Iterable[RoundRecord], now: float
) -> BreakerStanding:
    """The breaker as it stands for a loop, at ``now`` (a UNIX time): every trigger that
    applies to it, in the breaker's order (``loops.triggers()``), the run ledger's counted
    from its finished rounds."""
    finished = [r for r in records if r.status != "running"]
    facts = breaker_facts(ledger_of(state, finished).attempts, state.spec.similarity_threshold)
    progress = _Progress(
        finished=len(finished), same_error=facts.same_error, same_action=facts.same_action
    )
    standings = []
    for trigger in triggers():
        stood = trigger.standing(state, now, progress) if trigger.standing is not None else None
        if stood is not None:
            value, limit = stood
            label = trigger.label or trigger.name
            standings.append(
                TriggerStanding(trigger=trigger.name, label=label, value=value, limit=limit)
            )
    closest = max(standings, key=lambda t: t.value / t.limit if t.limit else 0.0)
    return BreakerStanding(triggers=standings, closest=closest.trigger)
