"""The pure parts of code loops: slug, state machine, gates, verdicts, orchestration, hand-off,
events that rebuild the state. No git, no event loop."""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from pathlib import Path

import msgspec
import pytest

from loopactors.codeloop import (
    CodeLedger,
    CodeLoopState,
    HandOff,
    Orchestration,
    check_slug,
    parse_deadline,
    parse_orchestration,
    parse_verdict,
    rebuild_state,
    render_handoff,
)
from loopactors.codeloop._events import (
    CodeRoundFinished,
    GateTripped,
    Initialized,
    RoundStarted,
    SettingsChanged,
    StatusChanged,
)
from loopactors.codeloop._gates import check_gates, check_settings, is_progress, parse_approvals
from loopactors.codeloop._model import check_status
from loopactors.codeloop._orchestration import render_orchestration
from loopactors.errors import (
    CodeLoopStateError,
    OrchestrationError,
    SelfReviewRefused,
    SlugError,
)

PY = shlex.quote(sys.executable)
NOW = dt.datetime(2026, 11, 30, 3, 0, tzinfo=dt.UTC)


def state(**changes: object) -> CodeLoopState:
    fields: dict[str, object] = {"slug": "s", "objective": "o", "attendance": "attended"}
    fields.update(changes)
    return CodeLoopState(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "slug", ["..", "../x", "a/b", "A", "a_b", "-a", "a-", "a--b", "", ".loop", "x" * 65]
)
def test_slugs_that_could_leave_the_ledger_or_are_not_kebab_case_are_refused(slug: str) -> None:
    with pytest.raises(SlugError, match="kebab-case"):
        check_slug(slug)
    with pytest.raises(SlugError):
        CodeLedger(Path("/repo"), slug)


def test_good_slugs() -> None:
    assert check_slug("fix-flaky-tests-2") == "fix-flaky-tests-2"
    assert CodeLedger(Path("/repo"), "a1").dir == Path("/repo/.loop/a1")


def test_round_walk_and_illegal_moves() -> None:
    for a, b in [
        ("ready", "running"),
        ("running", "validating"),
        ("validating", "reviewing"),
        ("reviewing", "ready"),
        ("reviewing", "waiting_review"),
        ("reviewing", "completed"),
        ("reviewing", "blocked"),
        ("ready", "paused"),
        ("paused", "ready"),
        ("blocked", "ready"),
    ]:
        assert check_status(a, b) == b  # type: ignore[arg-type]
    with pytest.raises(CodeLoopStateError, match="cannot go from ready to reviewing"):
        check_status("ready", "reviewing")
    with pytest.raises(CodeLoopStateError, match="cannot go from blocked to running"):
        check_status("blocked", "running")
    with pytest.raises(CodeLoopStateError, match="cannot go from paused to running"):
        check_status("paused", "running")
    with pytest.raises(CodeLoopStateError, match="never changes again"):
        check_status("completed", "ready")
    with pytest.raises(CodeLoopStateError, match="never changes again"):
        check_status("stopped", "stopped")


def test_deadline_needs_a_zone_and_is_compared_for_real() -> None:
    assert parse_deadline("2026-12-01T06:00:00Z") == dt.datetime(2026, 12, 1, 6, tzinfo=dt.UTC)
    with pytest.raises(OrchestrationError, match="no time zone"):
        parse_deadline("2026-12-01T06:00:00")
    with pytest.raises(OrchestrationError, match="not an ISO-8601"):
        parse_deadline("tomorrow morning")
    gate = check_gates(state(deadline="2026-11-30T04:00:00+02:00"), NOW)
    assert gate is not None
    assert (gate.name, gate.status) == ("deadline", "waiting_review")
    assert check_gates(state(deadline="2026-11-30T04:00:00Z"), NOW) is None


def test_max_rounds_no_progress_and_attended_approvals_gates() -> None:
    assert check_gates(state(round=2, max_rounds=3), NOW) is None
    gate = check_gates(state(round=3, max_rounds=3), NOW)
    assert gate is not None
    assert gate.name == "max_rounds"
    gate = check_gates(state(no_progress_rounds=2), NOW)
    assert gate is not None
    assert (gate.name, gate.status) == ("no_progress", "blocked")
    gate = check_gates(state(pending_approvals=("drop table",)), NOW)
    assert gate is not None
    assert gate.name == "approval"
    # Unattended: approvals are queued, the loop goes on.
    assert check_gates(state(attendance="unattended", pending_approvals=("x",)), NOW) is None


def test_unattended_needs_a_deadline_or_max_rounds() -> None:
    with pytest.raises(OrchestrationError, match="unattended loop needs a deadline"):
        check_settings(attendance="unattended", max_rounds=None, deadline=None)
    check_settings(attendance="unattended", max_rounds=3, deadline=None)
    check_settings(attendance="attended", max_rounds=None, deadline=None)
    with pytest.raises(OrchestrationError, match="max rounds"):
        check_settings(attendance="attended", max_rounds=0, deadline=None)
    with pytest.raises(OrchestrationError, match="attendance"):
        check_settings(attendance="nightly", max_rounds=1, deadline=None)


def test_progress_is_a_merge_or_validation_newly_passing() -> None:
    assert is_progress(merged=True, validation_passed=True, last_validation_passed=True)
    assert is_progress(merged=False, validation_passed=True, last_validation_passed=False)
    assert not is_progress(merged=False, validation_passed=True, last_validation_passed=True)
    assert not is_progress(merged=False, validation_passed=False, last_validation_passed=False)
    assert not is_progress(merged=False, validation_passed=None, last_validation_passed=False)


def test_verdicts() -> None:
    verdict = parse_verdict("looks fine\n  verdict: APPROVE \nsmall, tested")
    assert verdict.approved
    assert verdict.reason == "small, tested"
    verdict = parse_verdict("VERDICT: reject\ntoo big")
    assert (verdict.approved, verdict.reason) == (False, "too big")
    assert parse_verdict("I approve of this").reason == "no verdict"
    assert not parse_verdict("I approve of this").approved
    assert parse_verdict("").reason == "no verdict"
    assert "conflicting" in parse_verdict("VERDICT: approve\nVERDICT: reject").reason
    assert "unknown verdict" in parse_verdict("VERDICT: maybe").reason
    assert parse_approvals("x\nNEEDS-APPROVAL: push to prod\n") == ["push to prod"]


def orchestration(
    executor: str = f"command:{PY} -c pass",
    reviewer: str = "scripted:output=VERDICT: approve",
    validate: str = "python -m pytest",
) -> Orchestration:
    return Orchestration(executor=executor, reviewer=reviewer, validate=validate)


def test_orchestration_renders_and_parses_back() -> None:
    o = orchestration().check()
    text = render_orchestration(o, slug="fix-it", objective="fix it")
    assert "loop/fix-it/candidate" in text
    assert "Nothing is pushed" in text
    assert parse_orchestration(text, slug="fix-it") == o


def test_orchestration_refuses_self_review_and_bad_fields() -> None:
    with pytest.raises(SelfReviewRefused, match="is the executor"):
        orchestration(reviewer=f"command: {PY}  -c pass").check()
    with pytest.raises(OrchestrationError, match="reviewer"):
        orchestration(reviewer="nope:x").check()
    with pytest.raises(OrchestrationError, match="validation command is required"):
        orchestration(validate="  ").check()
    text = render_orchestration(orchestration(), slug="a", objective="o")
    with pytest.raises(OrchestrationError, match="lacks reviewer"):
        parse_orchestration(text.replace("- reviewer:", "- critic:"), slug="a")
    with pytest.raises(OrchestrationError, match="no ## Contract"):
        parse_orchestration(text, slug="b")
    with pytest.raises(OrchestrationError, match="twice"):
        parse_orchestration(
            text.replace("- reviewer:", "- executor: scripted\n- reviewer:"), slug="a"
        )
    with pytest.raises(OrchestrationError, match="phases"):
        parse_orchestration(text.replace("phases: milestone", "phases: sprint"), slug="a")
    with pytest.raises(OrchestrationError, match="needs a planner"):
        parse_orchestration(text.replace("blueprint: PLAN.md", "blueprint: planner"), slug="a")


def test_handoff_renders_every_field() -> None:
    handoff = HandOff(
        slug="s",
        objective="o",
        status="waiting_review",
        rounds=3,
        merged_rounds=1,
        max_rounds=3,
        deadline=None,
        active_gate="max_rounds",
        reason="3 of 3 rounds are done",
        candidate_branch="loop/s/candidate",
        candidate_commit="abcdef0123456789",
        base="main",
        diff_stat=" a.py | 2 +-\n",
        rounds_table=(),
        last_validation_passed=True,
        pending_approvals=("rotate the key",),
        rejected_branches=("loop/s/r002",),
        next_action="review",
    )
    text = render_handoff(handoff)
    for needle in (
        "status: waiting_review (gate max_rounds",
        "rounds: 3 of 3, 1 merged",
        "a.py | 2 +-",
        "- rotate the key",
        "`loop/s/r002`",
        "validation: passing",
        "next action: review",
        "Not pushed, not merged into main.",
    ):
        assert needle in text


def test_events_rebuild_the_state_and_refuse_what_does_not_apply(tmp_path: Path) -> None:
    ledger = CodeLedger(tmp_path, "s")
    first = state(slug="s", round=0, max_rounds=5)
    s = ledger.record(
        None, Initialized(at=1, actor="u", prev_status=None, status="ready", round=0, state=first)
    )
    s = ledger.record(
        s,
        RoundStarted(
            at=2,
            actor="o",
            prev_status="ready",
            status="running",
            round=1,
            branch="loop/s/r001",
            commit="c0",
        ),
    )
    s = ledger.record(
        s, StatusChanged(at=3, actor="o", prev_status="running", status="validating", round=1)
    )
    s = ledger.record(
        s,
        CodeRoundFinished(
            at=4,
            actor="o",
            prev_status="validating",
            status="ready",
            round=1,
            merged=False,
            validation_passed=False,
            verdict=None,
            progress=False,
            no_progress_rounds=1,
            last_validation_passed=False,
            merged_rounds=0,
            candidate_commit="c0",
            pending_approvals=("x",),
        ),
    )
    s = ledger.record(
        s,
        GateTripped(
            at=5,
            actor="o",
            prev_status="ready",
            status="blocked",
            round=1,
            active_gate="no_progress",
            reason="r",
        ),
    )
    s = ledger.record(
        s,
        SettingsChanged(
            at=6,
            actor="u",
            prev_status="blocked",
            status="blocked",
            round=1,
            max_rounds=9,
            deadline=None,
        ),
    )
    s = ledger.record(
        s, StatusChanged(at=7, actor="u", prev_status="blocked", status="ready", round=1)
    )
    assert rebuild_state(ledger.read_events()) == s == ledger.read_state()
    assert (s.max_rounds, s.no_progress_rounds, s.pending_approvals, s.round) == (9, 0, (), 1)
    with pytest.raises(CodeLoopStateError, match="does not apply"):
        ledger.record(
            s, StatusChanged(at=8, actor="u", prev_status="paused", status="ready", round=1)
        )
    with pytest.raises(CodeLoopStateError, match="cannot go from ready to reviewing"):
        ledger.record(
            s, StatusChanged(at=8, actor="u", prev_status="ready", status="reviewing", round=1)
        )
    assert ledger.read_state() == s  # a refused event is not written


def test_a_snapshot_behind_the_log_is_rebuilt_from_it(tmp_path: Path) -> None:
    ledger = CodeLedger(tmp_path, "s")
    s = ledger.record(
        None,
        Initialized(
            at=1, actor="u", prev_status=None, status="ready", round=0, state=state(slug="s")
        ),
    )
    old = ledger.state_path.read_bytes()
    s = ledger.record(
        s, StatusChanged(at=2, actor="u", prev_status="ready", status="paused", round=0)
    )
    ledger.state_path.write_bytes(old)  # as if the process died between log and snapshot
    assert ledger.read_state() == s
    # A last line cut short by a crash is ignored.
    with ledger.runs_path.open("ab") as handle:
        handle.write(b'{"type":"transition","at":3')
    assert ledger.read_state() == s
    assert msgspec.json.decode(ledger.state_path.read_bytes())["status"] == "ready"
