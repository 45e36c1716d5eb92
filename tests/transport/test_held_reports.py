"""Reports nobody waits for are held, bounded, for a round dispatched again after its node
came back (docs/scale-out.md, "Guarantees")."""

from __future__ import annotations

import time

import pytest

from loopactors.transport import _node
from loopactors.transport._node import RedisTransport
from loopactors.transport._wire import RoundReport, encode
from loopactors.workers import RoundResult


def report(key: str, status: str = "completed") -> str:
    result = RoundResult(status=status, output=f"output of {key}")  # type: ignore[arg-type]
    return encode(RoundReport(key=key, result=result, worker="w")).decode()


def test_reports_nobody_waits_for_are_held_but_cancelled_runs_are_not() -> None:
    transport = RedisTransport("redis://127.0.0.1:1")
    transport._take_report(report("a:1"))
    transport._take_report(report("a:2", "failed"))
    transport._take_report(report("b:1", "cancelled"))
    assert list(transport._held) == ["a:1", "a:2"]
    assert transport._held["a:1"][0].output == "output of a:1"
    assert transport.statistics() == {"awaited": 0, "reports_dropped": 1, "reports_held": 2}


def test_held_reports_are_bounded_by_count_and_age(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = RedisTransport("redis://127.0.0.1:1")
    monkeypatch.setattr(_node, "HELD_MAX", 3)
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    for n in range(5):
        transport._take_report(report(f"loop:{n}"))
    assert list(transport._held) == ["loop:2", "loop:3", "loop:4"]  # the oldest went
    now[0] += _node.HELD_SECONDS + 1
    transport._take_report(report("loop:9"))
    assert list(transport._held) == ["loop:9"]  # too old, all but the newest
    assert transport.reports_dropped == 5
