"""A loop's rounds seen as a run ledger (loop-context's model). Pure, no trio.

Every finished round is an attempt: its action is the first line of what the worker
said (or of the task), its outcome ``success`` or ``failure``, its error and tokens the
round's. The Breaker checks the ledger before each round with the loop's own thresholds;
``loopactors ledger export`` writes it in loop-context's JSON.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from msgspec import UNSET

from ..ledger import Attempt, BreakerConfig, Ledger
from ..loops import LoopSpec, LoopState, RoundRecord

__all__ = ["attempt_of", "breaker_config", "ledger_of"]

_ACTION_CHARS = 160


def attempt_of(record: RoundRecord, task: str) -> Attempt:
    """The ledger attempt of one finished round."""
    head = next((line.strip() for line in record.output.splitlines() if line.strip()), "")
    action = head or next((line.strip() for line in task.splitlines() if line.strip()), task)
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
