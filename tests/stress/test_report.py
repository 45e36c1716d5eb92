"""The invariants, checked over store contents made by hand (no runtime)."""

from __future__ import annotations

from typing import Any

from loopactors.loops._events import AnyEvent, RoundFinished
from loopactors.loops._model import LoopSpec, LoopState, Phase, RoundRecord, RoundStatus
from loopactors.stress import StoredLoop, StressReport, check_loops, render_report
from loopactors.stress._report import InvariantCheck, percentile

SPEC = LoopSpec(task="t", rounds=3)


def loop(
    phase: Phase,
    rounds: list[tuple[int, RoundStatus]],
    *,
    completed: int | None = None,
    events: list[AnyEvent] | None = None,
) -> StoredLoop:
    done = sum(1 for _, status in rounds if status == "completed")
    state = LoopState(
        loop_id=f"l-{phase}",
        spec=SPEC,
        phase=phase,
        completed_rounds=done if completed is None else completed,
    )
    records = tuple(RoundRecord(loop_id=state.loop_id, round=n, status=s) for n, s in rounds)
    if events is None:
        events = [finished(state.loop_id, n) for n, s in rounds if s == "completed"]
    return StoredLoop(state=state, rounds=records, events=tuple(events))


def finished(loop_id: str, number: int) -> RoundFinished:
    return RoundFinished(
        loop_id=loop_id, at=0.0, round=number, rounds=3, status="completed", duration=0.1
    )


def violated(loops: list[StoredLoop], **kwargs: Any) -> dict[str, tuple[str, ...]]:
    return {c.name: c.examples for c in check_loops(loops, rounds=3, **kwargs) if not c.ok}


def test_healthy_loops_hold_every_invariant() -> None:
    loops = [
        loop("complete", [(1, "completed"), (2, "completed"), (3, "completed")]),
        loop("cancelled", [(1, "completed"), (2, "cancelled")]),
        loop("error", [(1, "completed"), (2, "failed")]),
    ]
    checks = check_loops(loops, rounds=3, expected_loops=3)
    assert all(c.ok for c in checks)
    assert {c.name for c in checks} >= {"not_live", "complete_has_every_round", "all_stored"}


def test_a_complete_loop_missing_a_round_is_caught() -> None:
    found = violated([loop("complete", [(1, "completed"), (3, "completed")], completed=3)])
    assert "complete_has_every_round" in found
    assert "completed_count" in found


def test_a_live_loop_and_a_running_round_are_caught() -> None:
    found = violated([loop("awaiting_worker", [(1, "running")]), loop("error", [(1, "running")])])
    assert found["not_live"] == ("l-awaiting_worker: left in phase awaiting_worker",)
    assert "none_running" in found


def test_a_round_reported_twice_in_the_event_log_is_caught() -> None:
    twice = loop(
        "complete",
        [(1, "completed"), (2, "completed"), (3, "completed")],
        events=[finished("l-complete", 1), finished("l-complete", 1)],
    )
    assert violated([twice]) == {
        "finished_once": ("l-complete: rounds [1] reported completed twice in the event log",)
    }


def test_a_cancelled_loop_with_a_hole_and_a_missing_loop_are_caught() -> None:
    found = violated([loop("cancelled", [(1, "completed"), (3, "completed")])], expected_loops=2)
    assert "cancelled_keeps_rounds" in found
    assert found["all_stored"] == ("1 loops in the store, 2 started",)
    [stored] = [c for c in check_loops([], rounds=3, expected_loops=200) if c.name == "all_stored"]
    assert (stored.checked, stored.violations) == (200, 200)


def test_every_loop_started_is_counted_as_checked() -> None:
    loops = [loop("complete", [(1, "completed"), (2, "completed"), (3, "completed")])] * 200
    [stored] = [
        c for c in check_loops(loops, rounds=3, expected_loops=200) if c.name == "all_stored"
    ]
    assert (stored.checked, stored.ok) == (200, True)
    assert "every loop started is in the store (200 checked)" in render_report(
        report_of(check_loops(loops, rounds=3, expected_loops=200))
    )


def test_percentile_by_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(n) for n in range(1, 101)], 0.99) == 99.0
    assert percentile([5.0], 0.99) == 5.0


def report_of(checks: list[InvariantCheck]) -> StressReport:
    return StressReport(
        loops=1, rounds_per_loop=3, worker="scripted", store="memory", crash_rate=0.0,
        stop_rate=0.0, seed=1, seconds=1.0, rounds_completed=1, rounds_per_s=1.0,
        p50_transition_ms=None, p99_transition_ms=None, peak_rss_mb=10.0, faults_injected=0,
        actor_restarts=0, phases={"complete": 1}, invariants=tuple(checks), ok=False,
    )  # fmt: skip


def test_the_report_says_what_failed() -> None:
    checks = check_loops([loop("complete", [(1, "completed")])], rounds=3, expected_loops=1)
    text = render_report(report_of(checks))
    assert "FAIL every complete loop has rounds 1..M, each once" in text
    assert "l-complete: complete with rounds [1]" in text
    assert text.endswith("INVARIANTS VIOLATED")
