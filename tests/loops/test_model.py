"""The loop domain model: the phase transition table, terminal phases that never change,
``LoopState.moved()``, and the msgspec wire form of specs and states."""

from __future__ import annotations

import time
import typing

import msgspec
import pytest

from loopactors.errors import IllegalTransition
from loopactors.loops import _model
from loopactors.loops._model import (
    LIVE_PHASES,
    TERMINAL_PHASES,
    LoopSpec,
    LoopState,
    Phase,
    RoundRecord,
    check_transition,
    is_terminal,
)

ALL_PHASES: tuple[Phase, ...] = typing.get_args(Phase)

# The transition table, written out independently of the module: every live phase may also
# stay where it is, and go to error, cancelled or interrupted.
_ANYTIME: frozenset[Phase] = frozenset({"error", "cancelled", "interrupted"})
EXPECTED_FORWARD: dict[Phase, frozenset[Phase]] = {
    "activating": frozenset({"dispatching", "paused", "escalated"}),
    "dispatching": frozenset({"awaiting_worker", "escalated", "paused"}),
    "awaiting_worker": frozenset({"summarizing"}),
    "summarizing": frozenset({"dispatching", "finalizing", "paused", "escalated"}),
    "paused": frozenset({"dispatching", "finalizing", "escalated"}),
    "finalizing": frozenset({"complete", "escalated"}),
}


def _legal(current: Phase) -> frozenset[Phase]:
    return EXPECTED_FORWARD[current] | _ANYTIME | {current}


LEGAL_PAIRS = sorted((c, n) for c in EXPECTED_FORWARD for n in _legal(c))
ILLEGAL_LIVE_PAIRS = sorted(
    (c, n) for c in EXPECTED_FORWARD for n in ALL_PHASES if n not in _legal(c)
)
TERMINAL_PAIRS = sorted((t, n) for t in TERMINAL_PHASES for n in ALL_PHASES)


def _state(phase: Phase = "activating", **changes: typing.Any) -> LoopState:
    return LoopState(loop_id="L1", spec=LoopSpec(task="do it"), phase=phase, **changes)


def test_phases_are_split_into_live_and_terminal() -> None:
    assert set(ALL_PHASES) == LIVE_PHASES | TERMINAL_PHASES
    assert not LIVE_PHASES & TERMINAL_PHASES
    assert set(EXPECTED_FORWARD) == LIVE_PHASES
    assert {"complete", "cancelled", "interrupted", "escalated", "error"} == TERMINAL_PHASES


@pytest.mark.parametrize("phase", ALL_PHASES)
def test_is_terminal_and_state_terminal_agree(phase: Phase) -> None:
    assert is_terminal(phase) is (phase in TERMINAL_PHASES)
    assert _state(phase).terminal is (phase in TERMINAL_PHASES)


@pytest.mark.parametrize(("current", "new"), LEGAL_PAIRS)
def test_every_legal_transition_is_allowed(current: Phase, new: Phase) -> None:
    assert check_transition(current, new) == new


def test_the_illegal_list_covers_hand_picked_cases() -> None:
    # A few hand-picked ones, so the generated list is known to cover the interesting cases.
    for pair in [
        ("activating", "awaiting_worker"),
        ("activating", "complete"),
        ("dispatching", "summarizing"),
        ("dispatching", "complete"),
        ("awaiting_worker", "dispatching"),
        ("awaiting_worker", "paused"),
        ("awaiting_worker", "escalated"),
        ("awaiting_worker", "complete"),
        ("summarizing", "awaiting_worker"),
        ("summarizing", "complete"),
        ("paused", "awaiting_worker"),
        ("paused", "complete"),
        ("finalizing", "dispatching"),
        ("finalizing", "paused"),
        ("finalizing", "activating"),
    ]:
        assert pair in ILLEGAL_LIVE_PAIRS


@pytest.mark.parametrize(("current", "new"), ILLEGAL_LIVE_PAIRS)
def test_every_other_transition_from_a_live_phase_is_illegal(current: Phase, new: Phase) -> None:
    with pytest.raises(IllegalTransition, match=f"cannot go from {current} to {new}"):
        check_transition(current, new)


def test_illegal_transition_message_lists_the_allowed_phases() -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition("awaiting_worker", "complete")
    assert str(info.value) == (
        "a loop cannot go from awaiting_worker to complete; from awaiting_worker it can go to "
        "cancelled, error, interrupted, summarizing"
    )


@pytest.mark.parametrize(("terminal", "new"), TERMINAL_PAIRS)
def test_a_terminal_phase_never_changes(terminal: Phase, new: Phase) -> None:
    # Not even to itself, and not to error: a finished loop is never rewritten.
    with pytest.raises(IllegalTransition, match=f"already {terminal}; it cannot become {new}"):
        check_transition(terminal, new)


def test_moved_applies_the_phase_and_changes_and_stamps_updated_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1234.5)
    before = _state("summarizing", created_at=10.0, updated_at=10.0, round=2)

    after = before.moved("dispatching", round=3, completed_rounds=2, last_output="out")

    assert after.phase == "dispatching"
    assert after.round == 3
    assert after.completed_rounds == 2
    assert after.last_output == "out"
    assert after.updated_at == 1234.5
    assert after.created_at == 10.0
    # The original is a frozen value and is left alone.
    assert before.phase == "summarizing"
    assert before.round == 2
    assert before.updated_at == 10.0


def test_moved_to_the_same_live_phase_still_stamps_updated_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "time", lambda: 99.0)
    after = _state("paused").moved("paused")
    assert after.phase == "paused"
    assert after.updated_at == 99.0


def test_moved_validates_the_transition() -> None:
    state = _state("awaiting_worker")
    with pytest.raises(IllegalTransition):
        state.moved("complete")
    finished = _state("complete")
    with pytest.raises(IllegalTransition):
        finished.moved("error", reason="late failure")
    assert finished.reason is None


def test_moved_rejects_an_unknown_field() -> None:
    with pytest.raises(TypeError):
        _state("activating").moved("dispatching", no_such_field=1)


def test_loop_spec_defaults() -> None:
    spec = LoopSpec(task="t")
    assert spec.rounds == _model.DEFAULT_ROUNDS
    assert spec.mode == "inherit"
    assert spec.worker == "scripted"
    assert spec.seed_cap == 8000
    assert spec.max_tokens is None
    assert spec.max_seconds is None


def test_loop_spec_decodes_from_json() -> None:
    spec = msgspec.json.decode(
        b'{"task": "write", "rounds": 3, "mode": "fresh", "max_tokens": 500}', type=LoopSpec
    )
    assert spec == LoopSpec(task="write", rounds=3, mode="fresh", max_tokens=500)


def test_loop_spec_rejects_unknown_fields_from_json() -> None:
    with pytest.raises(msgspec.ValidationError, match="bogus"):
        msgspec.json.decode(b'{"task": "write", "bogus": 1}', type=LoopSpec)


def test_loop_spec_rejects_a_missing_task_and_a_bad_mode() -> None:
    with pytest.raises(msgspec.ValidationError, match="task"):
        msgspec.json.decode(b'{"rounds": 3}', type=LoopSpec)
    with pytest.raises(msgspec.ValidationError, match="mode"):
        msgspec.json.decode(b'{"task": "t", "mode": "sideways"}', type=LoopSpec)


def test_loop_state_rejects_unknown_fields_in_its_nested_spec() -> None:
    raw = b'{"loop_id": "L1", "spec": {"task": "t", "extra": true}}'
    with pytest.raises(msgspec.ValidationError, match="extra"):
        msgspec.json.decode(raw, type=LoopState)


def test_loop_state_round_trips_through_json() -> None:
    state = LoopState(
        loop_id="L7",
        spec=LoopSpec(
            task="improve the essay",
            rounds=8,
            mode="fresh",
            objective="clarity",
            worker="command:./agent.sh --fast",
            max_tokens=10_000,
            max_seconds=120.5,
            owner="ana",
            parent_id="L1",
            clamped=True,
        ),
        phase="paused",
        round=4,
        completed_rounds=3,
        last_output="draft\nwith ünïcödé and\ttabs",
        stale_rounds=1,
        consecutive_failures=2,
        tokens_used=4321,
        stop_requested="after_round",
        pause_requested=True,
        reason="why",
        trigger="no_progress",
        created_at=1.5,
        updated_at=2.5,
        started_at=1.75,
    )
    decoded = msgspec.json.decode(msgspec.json.encode(state), type=LoopState)
    assert decoded == state
    assert decoded.spec == state.spec


def test_default_loop_state_round_trips_through_json() -> None:
    state = _state()
    assert msgspec.json.decode(msgspec.json.encode(state), type=LoopState) == state


def test_round_record_round_trips_through_json() -> None:
    record = RoundRecord(
        loop_id="L1",
        round=2,
        status="timed_out",
        seed_source="previous_output",
        output="partial",
        error="took too long",
        tokens=12,
        started_at=3.0,
        duration=None,
    )
    assert msgspec.json.decode(msgspec.json.encode(record), type=RoundRecord) == record
