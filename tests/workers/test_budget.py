"""The daily budgets' pure parts: the budget day, and when an account must wait."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from loopactors.workers._budget import (
    DailyBudgets,
    budget_day_start,
    clear_daily_spend,
    configure_daily_budgets,
    daily_hold,
    daily_spend,
    next_reset,
    record_spend,
)


def local(hour: int, minute: int = 0, day: int = 10) -> float:
    return datetime.datetime(2026, 3, day, hour, minute).astimezone().timestamp()


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    clear_daily_spend()
    yield
    configure_daily_budgets(DailyBudgets())
    clear_daily_spend()


def test_a_budget_day_starts_at_the_reset_hour_local_time() -> None:
    assert budget_day_start(local(10), 0) == local(0)
    assert next_reset(local(10), 0) == local(0, day=11)
    assert budget_day_start(local(3, 59), 4) == local(4, day=9)  # still yesterday's day
    assert next_reset(local(3, 59), 4) == local(4)
    assert budget_day_start(local(4), 4) == local(4)
    assert next_reset(local(4), 4) == local(4, day=11)


def test_an_account_over_its_budget_waits_for_the_reset_others_go_on() -> None:
    configure_daily_budgets(DailyBudgets(per_account=1.0, total=1.5, reset_hour=0))
    record_spend("claude", "a", 0.6)
    assert daily_hold("claude", "a") is None
    record_spend("claude", "a", 0.4)
    held = daily_hold("claude", "a")
    assert held is not None
    assert held[1] == (
        "daily budget reached: claude account a spent $1.0000 of $1.0000 today (daily_cost_usd)"
    )
    assert daily_hold("codex", "b") is None  # another account
    record_spend("codex", "b", 0.5)
    total = daily_hold("codex", "b")
    assert total is not None
    assert "the node's accounts spent $1.5000 of $1.5000 today (daily_total_cost_usd)" in total[1]
    spent, all_of_them = daily_spend()
    assert spent == {("claude", "a"): 1.0, ("codex", "b"): 0.5}
    assert all_of_them == 1.5


def test_no_budget_holds_nothing_and_yesterdays_spend_does_not_count() -> None:
    record_spend("claude", "a", 100.0)
    assert daily_hold("claude", "a") is None
    configure_daily_budgets(DailyBudgets(per_account=1.0))
    clear_daily_spend()
    record_spend("claude", "a", 5.0, at=budget_day_start(local(12), 0) - 1e6)
    assert daily_hold("claude", "a") is None
