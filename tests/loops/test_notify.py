"""Which events notify whom, what they say, and notification URLs shown without secrets."""

from __future__ import annotations

import pytest

from loopactors.loops import (
    NOTIFY_EVENTS,
    LoopFinished,
    LoopSpec,
    LoopState,
    RoundDeferred,
    RoundFinished,
    RoundStarted,
    check_notify,
    notifications_for,
    redact_notify_url,
)

HOOK = "json://127.0.0.1:9/hook"
MAIL = "mailto://localhost:25?to=ops@example.com&from=loops@example.com&smtp=127.0.0.1"


def state(**spec: object) -> LoopState:
    return LoopState(
        loop_id="L1",
        spec=LoopSpec(task="fix the tests\nmore detail", rounds=5, **spec),  # type: ignore[arg-type]
        cost_usd=0.25,
    )


def finished(phase: str = "complete", trigger: str | None = None) -> LoopFinished:
    return LoopFinished(
        loop_id="L1",
        at=100.0,
        phase=phase,  # type: ignore[arg-type]
        rounds=5,
        completed_rounds=3,
        reason="why" if trigger else None,
        trigger=trigger,
    )


def test_a_loop_without_urls_notifies_nobody() -> None:
    assert notifications_for(state(), [finished()]) == []


def test_a_finished_loop_notifies_every_url_once() -> None:
    found = notifications_for(state(notify=(HOOK, MAIL)), [finished()])
    assert [(n.url, n.event) for n in found] == [(HOOK, "loop_finished"), (MAIL, "loop_finished")]
    note = found[0]
    assert note.title == "loop L1 complete"
    assert "fix the tests" in note.body
    assert "more detail" not in note.body
    assert "3/5 rounds completed, $0.2500" in note.body
    assert note.at == 100.0


@pytest.mark.parametrize(
    ("phase", "word"),
    [("cancelled", "cancelled"), ("escalated", "escalated"), ("error", "failed")],
)
def test_every_ending_says_how_it_ended(phase: str, word: str) -> None:
    trigger = "no_progress" if phase == "escalated" else None
    (note,) = notifications_for(state(notify=(HOOK,)), [finished(phase, trigger)])
    assert note.title == f"loop L1 {word}"
    if trigger:
        assert "trigger no_progress: why" in note.body


@pytest.mark.parametrize("trigger", ["cost_budget", "token_budget", "deadline"])
def test_a_budget_escalation_is_budget_reached(trigger: str) -> None:
    (note,) = notifications_for(state(notify=(HOOK,)), [finished("escalated", trigger)])
    assert note.event == "budget_reached"
    # Not asked for: it still tells whoever asked for finished loops.
    (note,) = notifications_for(
        state(notify=(HOOK,), notify_on=("loop_finished",)), [finished("escalated", trigger)]
    )
    assert note.event == "loop_finished"
    assert (
        notifications_for(
            state(notify=(HOOK,), notify_on=("round_deferred",)), [finished("escalated", trigger)]
        )
        == []
    )


def test_a_deferral_says_until_when() -> None:
    event = RoundDeferred(loop_id="L1", at=5.0, round=2, rounds=5, until=3600.0, reason="limit")
    (note,) = notifications_for(state(notify=(HOOK,)), [event])
    assert note.event == "round_deferred"
    assert "waits until" in note.title
    assert "round 2/5 deferred until" in note.body
    assert note.body.endswith(": limit")


def test_only_the_events_asked_for_notify() -> None:
    deferred = RoundDeferred(loop_id="L1", at=5.0, round=2, rounds=5, until=9.0, reason="x")
    started = RoundStarted(loop_id="L1", at=1.0, round=1, rounds=5, seed_source="task")
    only_deferred = state(notify=(HOOK,), notify_on=("round_deferred",))
    found = notifications_for(only_deferred, [started, deferred, finished()])
    assert [n.event for n in found] == ["round_deferred"]


def test_a_failing_check_notifies_once_at_the_count() -> None:
    spec = state(notify=(HOOK,), notify_check_failures=2)
    done = RoundFinished(loop_id="L1", at=1.0, round=3, rounds=5, status="completed", duration=1.0)
    assert notifications_for(spec, [done], failing_checks=1) == []
    (note,) = notifications_for(spec, [done], failing_checks=2)
    assert note.event == "check_failing"
    assert "2 rounds in a row" in note.title
    assert notifications_for(spec, [done], failing_checks=3) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("json://127.0.0.1:8080/hook", "json://127.0.0.1:8080/***"),
        ("json://user:secret@127.0.0.1:8080/x?token=abc", "json://***@127.0.0.1:8080/***?***"),
        ("jsons://example.com", "jsons://example.com"),
        (MAIL, "mailto://localhost:25?***"),
        ("slack://TokenA/TokenB/TokenC", "slack://***"),
        ("tgram://123456:ABCDEF/987", "tgram://***"),
        ("no scheme at all", "***"),
        ("json://host:notaport/x", "json://***"),
    ],
)
def test_urls_are_shown_without_their_secrets(url: str, shown: str) -> None:
    assert redact_notify_url(url) == shown
    for secret in ("secret", "TokenB", "ABCDEF", "ops@example.com", "token=abc"):
        assert secret not in redact_notify_url(url)


def test_check_notify_names_what_is_wrong() -> None:
    assert check_notify((HOOK, MAIL), NOTIFY_EVENTS, 3) == []
    problems = check_notify(("user:pw@host",), ("loop_finished", "sometimes"), 0)
    assert len(problems) == 3
    assert "is not a URL" in problems[0]
    assert "pw" not in problems[0]
    assert "unknown notify event(s) sometimes; accepted: loop_finished" in problems[1]
    assert "notify_check_failures must be >= 1, got 0" in problems[2]
