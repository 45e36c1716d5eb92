"""The circuit breaker and the pure half of the daily budget (docs/ledger.md)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from ._facts import BreakerFacts, breaker_facts
from ._js import as_double, encode_json, format_number, js_number
from ._model import (
    Attempt,
    BreakerConfig,
    BreakerDecision,
    Ledger,
    Trigger,
    validate_breaker_config,
)
from ._rules import breaker_verdict

__all__ = [
    "DailySpend",
    "apply_daily_budget",
    "check_circuit_breaker",
    "decide",
    "decode_daily_spend",
    "encode_daily_spend",
    "newest_attempt_tokens",
    "record_daily_spend",
    "total_tokens",
    "trailing_failure_run",
    "utc_day",
]

_DEFAULT_BREAKER = BreakerConfig()


def total_tokens(ledger: Ledger) -> int | float:
    """Sum of ``tokensUsed``; missing or null count as 0. Summed as doubles, like JS."""
    total = 0.0
    for attempt in ledger.attempts:
        tokens = attempt.tokens_used
        if tokens is not None and tokens is not UNSET:
            total += as_double(tokens)
    return js_number(total)


def trailing_failure_run(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The newest attempts whose outcome is exactly ``failure``, oldest first (docs/ledger.md,
    "Trailing failures")."""
    start = len(attempts)
    while start > 0 and attempts[start - 1].outcome == "failure":
        start -= 1
    return list(attempts[start:])


def _decision(
    iterations: int, tokens: int | float, trigger: Trigger, reason: str
) -> BreakerDecision:
    ok = trigger == "ok"
    return BreakerDecision(
        iterations=iterations,
        tokens_used=tokens,
        should_continue=ok,
        escalate=not ok,
        trigger=trigger,
        reason=reason,
    )


def check_circuit_breaker(
    ledger: Ledger, config: BreakerConfig = _DEFAULT_BREAKER, *, validated: bool = False
) -> BreakerDecision:
    """Continue or escalate; the first trigger that fires wins (docs/ledger.md, "Circuit breaker").

    ``validated``: ``config`` has passed :func:`validate_breaker_config` already (the
    runtime checks a loop's config once, then every round against it)."""
    if not validated:
        validate_breaker_config(config)
    return decide(breaker_facts(ledger.attempts, config.similarity_threshold), config)


def decide(facts: BreakerFacts, config: BreakerConfig = _DEFAULT_BREAKER) -> BreakerDecision:
    """The breaker's rules on a ledger's facts, for a validated ``config`` (docs/ledger.md, "Circuit
    breaker").

    ``facts`` must have been gathered at ``config.similarity_threshold``.
    """
    trigger, reason = breaker_verdict(facts, config)
    return _decision(facts.iterations, facts.tokens_used, trigger, reason)


class DailySpend(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The per-pattern daily state file's content."""

    date: str
    tokens_used_today: int | float


def utc_day(now: float) -> str:
    """The UTC calendar day of a POSIX timestamp as ``YYYY-MM-DD``."""
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d")


def newest_attempt_tokens(ledger: Ledger) -> int | float:
    """The daily delta: the newest attempt's ``tokensUsed``, 0 when absent (docs/ledger.md, "Daily
    budget")."""
    if not ledger.attempts:
        return 0
    tokens = ledger.attempts[-1].tokens_used
    return 0 if tokens is None or tokens is UNSET else tokens


def record_daily_spend(previous: DailySpend | None, today: str, delta: int | float) -> DailySpend:
    """The new state: carry today's total (or start at 0 on a new day) and add ``delta``.

    Only the pure part of the reference's ``recordDailySpend``: the caller reads the state
    file under the lock, calls this and writes the result with :func:`encode_daily_spend`.
    """
    carry: int | float = 0
    if previous is not None and previous.date == today:
        carry = previous.tokens_used_today
    return DailySpend(date=today, tokens_used_today=js_number(as_double(carry) + as_double(delta)))


def decode_daily_spend(data: bytes | str) -> DailySpend | None:
    """Read a state file; anything unreadable is no state, as in the reference."""
    try:
        return msgspec.json.decode(data, type=DailySpend)
    except msgspec.MsgspecError:
        return None


def encode_daily_spend(state: DailySpend) -> str:
    """Pretty JSON with a two-space indent and no trailing newline, as the reference writes."""
    return encode_json(state, indent=2)


def apply_daily_budget(
    decision: BreakerDecision, pattern: str, tokens_used_today: int | float, cap: int | float
) -> BreakerDecision:
    """Escalate with ``daily-budget`` when today's spend reached the cap (docs/ledger.md, "Daily
    budget").

    An escalating decision is returned unchanged: the per-run trigger wins.
    """
    if decision.escalate or not tokens_used_today >= cap:
        return decision
    return msgspec.structs.replace(
        decision,
        should_continue=False,
        escalate=True,
        trigger="daily-budget",
        reason=f'Daily token spend for pattern "{pattern}" reached '
        f"{format_number(tokens_used_today)} (cap {format_number(cap)}). "
        "Escalating to avoid cost blowup.",
    )
