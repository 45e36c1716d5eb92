"""Daily dollar budgets per account, shared by every loop of the node (docs/loops.md, Daily
budgets).

An account is a worker kind and a fingerprint of its key and endpoint (never the key). What
each account spent in the current budget day (from the configured reset hour, local time, to
the next) is kept here, in the process: fed by the workers as rounds end, and, when the
runtime starts, from the rounds the store has of the day (each round records its account),
so a restart forgets nothing. A round of an account at or over its budget, or of any account
once the node's total is reached, is deferred to the next reset, as a usage limit is.
"""

from __future__ import annotations

import datetime
import time

import attrs

__all__ = [
    "DailyBudgets",
    "budget_day_start",
    "clear_daily_spend",
    "configure_daily_budgets",
    "daily_hold",
    "daily_spend",
    "next_reset",
    "record_spend",
]


@attrs.frozen
class DailyBudgets:
    """US dollars per account per day, for all accounts together, and the local hour the
    day starts at (0: midnight)."""

    per_account: float | None = None
    total: float | None = None
    reset_hour: int = 0

    @property
    def any(self) -> bool:
        return self.per_account is not None or self.total is not None


def budget_day_start(now: float, reset_hour: int) -> float:
    """The UNIX time the budget day holding ``now`` began (local time)."""
    here = datetime.datetime.fromtimestamp(now).astimezone()
    start = here.replace(hour=reset_hour, minute=0, second=0, microsecond=0)
    if start > here:
        start -= datetime.timedelta(days=1)
    return start.timestamp()


def next_reset(now: float, reset_hour: int) -> float:
    """The UNIX time the next budget day begins (local time)."""
    here = datetime.datetime.fromtimestamp(now).astimezone()
    start = here.replace(hour=reset_hour, minute=0, second=0, microsecond=0)
    if start <= here:
        start += datetime.timedelta(days=1)
    return start.timestamp()


@attrs.define
class _Ledger:
    budgets: DailyBudgets = attrs.field(factory=DailyBudgets)
    #: (kind, account) -> dollars spent in the budget day that began at ``day``.
    spent: dict[tuple[str, str], float] = attrs.field(factory=dict)
    day: float = 0.0

    def roll(self, now: float) -> None:
        """A new budget day: nothing spent in it yet."""
        start = budget_day_start(now, self.budgets.reset_hour)
        if start != self.day:
            self.spent.clear()
            self.day = start


_LEDGER = _Ledger()


def configure_daily_budgets(budgets: DailyBudgets) -> None:
    _LEDGER.budgets = budgets


def clear_daily_spend() -> None:
    """Forget what was spent (a runtime rebuilds it from its store when it starts)."""
    _LEDGER.spent.clear()
    _LEDGER.day = 0.0


def record_spend(kind: str, account: str, cost: float, at: float | None = None) -> None:
    """``cost`` dollars spent by ``kind``/``account`` at ``at`` (UNIX time, default now);
    a spend from an earlier budget day is ignored."""
    _LEDGER.roll(time.time())
    if cost <= 0 or (at is not None and at < _LEDGER.day):
        return
    spent = _LEDGER.spent
    spent[(kind, account)] = spent.get((kind, account), 0.0) + cost


def daily_spend(now: float | None = None) -> tuple[dict[tuple[str, str], float], float]:
    """What each account spent today, and all of them together."""
    _LEDGER.roll(time.time() if now is None else now)
    return dict(_LEDGER.spent), sum(_LEDGER.spent.values())


def daily_hold(kind: str, account: str, now: float | None = None) -> tuple[float, str] | None:
    """``(until, reason)`` when a round of ``kind``/``account`` must wait for the next budget
    day; ``None`` when it may run."""
    budgets = _LEDGER.budgets
    if not budgets.any:
        return None
    now = time.time() if now is None else now
    spent, total = daily_spend(now)
    mine = spent.get((kind, account), 0.0)
    if budgets.per_account is not None and mine >= budgets.per_account:
        why = (
            f"daily budget reached: {kind} account {account} spent ${mine:.4f} of "
            f"${budgets.per_account:.4f} today (daily_cost_usd)"
        )
    elif budgets.total is not None and total >= budgets.total:
        why = (
            f"daily budget reached: the node's accounts spent ${total:.4f} of "
            f"${budgets.total:.4f} today (daily_total_cost_usd)"
        )
    else:
        return None
    return next_reset(now, budgets.reset_hour), why
