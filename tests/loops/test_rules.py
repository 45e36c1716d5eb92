"""The pure per-round rules: prompts, output normalisation, the breaker's checks and the
phase that follows a recorded round."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from loopactors.loops import _rules
from loopactors.loops._model import LoopSpec, LoopState
from loopactors.loops._rules import (
    SEPARATOR,
    Prompt,
    Verdict,
    build_prompt,
    check_before_round,
    next_phase,
    no_completed_round,
    normalize_output,
    same_output,
)


def _state(spec: dict[str, Any] | None = None, **fields: Any) -> LoopState:
    return LoopState(loop_id="L1", spec=LoopSpec(task="TASK", **(spec or {})), **fields)


# --- build_prompt -----------------------------------------------------------------------------


def test_separator_is_exact() -> None:
    assert SEPARATOR == "\n\n---\n\n"


def test_round_one_prompt_is_the_task_alone() -> None:
    assert build_prompt(_state(round=1)) == Prompt(text="TASK", seed_source="task")


def test_inherit_without_a_previous_output_is_the_task_alone() -> None:
    assert build_prompt(_state(round=3, last_output=None)) == Prompt(
        text="TASK", seed_source="task"
    )
    assert build_prompt(_state(round=3, last_output="")) == Prompt(text="TASK", seed_source="task")


def test_inherit_with_a_previous_output_puts_it_before_the_task() -> None:
    prompt = build_prompt(_state(round=2, last_output="previous answer"))
    assert prompt == Prompt(text="previous answer\n\n---\n\nTASK", seed_source="previous_output")


def test_inherit_keeps_the_last_seed_cap_characters_of_a_long_seed() -> None:
    seed = "HEAD-" + "x" * 20 + "-TAIL"
    prompt = build_prompt(_state({"seed_cap": 10}, round=2, last_output=seed))
    assert prompt.text == "xxxxx-TAIL" + SEPARATOR + "TASK"
    assert prompt.seed_source == "previous_output"


def test_a_seed_exactly_at_or_below_the_cap_is_kept_whole() -> None:
    exact = build_prompt(_state({"seed_cap": 5}, round=2, last_output="abcde"))
    assert exact.text == "abcde" + SEPARATOR + "TASK"
    short = build_prompt(_state({"seed_cap": 5}, round=2, last_output="ab"))
    assert short.text == "ab" + SEPARATOR + "TASK"


def test_seed_cap_zero_means_the_task_alone() -> None:
    prompt = build_prompt(_state({"seed_cap": 0}, round=2, last_output="previous"))
    assert prompt == Prompt(text="TASK", seed_source="task")


def test_fresh_mode_ignores_the_previous_output() -> None:
    prompt = build_prompt(_state({"mode": "fresh"}, round=4, last_output="previous"))
    assert prompt == Prompt(text="TASK", seed_source="task")


# --- normalize_output / same_output -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Round 3 at 10:02", "round <n> at <time>"),
        ("iteration 2/5 done in 1.5s", "iteration <n> done in <duration>"),
        ("step #4 of 9", "step <n>"),
        ("done 2024-05-01T10:02:03Z", "done <time>"),
        ("done 2024-05-01 10:02:03.123+02:00", "done <time>"),
        ("done 2024-05-01T10:02", "done <time>"),
        ("at 12:34:56 ok", "at <time> ok"),
        ("  a \t b\n\n c  ", "a b c"),
        ("MiXeD CaSe", "mixed case"),
        ("Straße", "strasse"),
        ("42 items, 7 left", "42 items, 7 left"),  # other numbers are progress
        ("", ""),
    ],
)
def test_normalize_output(text: str, expected: str) -> None:
    assert normalize_output(text) == expected


@pytest.mark.parametrize(
    ("previous", "current"),
    [
        ("round 3 at 10:02", "round 4 at 10:07"),
        ("Round 1 of 5", "round 2 of 5"),
        ("built at 2024-01-01T00:00:00Z", "built at 2025-12-31T23:59:59Z"),
        ("elapsed 00:00:01", "elapsed 23:59:59"),
        ("same  text\nhere", "same text here"),
        ("same text", "SAME TEXT"),
        ("round 1: tokens left", "Round 2: tokens left"),
    ],
)
def test_outputs_differing_only_in_masked_parts_are_the_same(previous: str, current: str) -> None:
    assert same_output(previous, current)


@pytest.mark.parametrize(
    ("previous", "current"),
    [
        ("all tests pass", "all tests fail"),
        ("3 errors", "3 warnings"),
        ("step one", "step one, then step two"),
        ("a-b", "a b"),
        ("", "something"),
    ],
)
def test_genuinely_different_outputs_stay_different(previous: str, current: str) -> None:
    assert not same_output(previous, current)


def test_nothing_is_the_same_as_no_previous_output() -> None:
    assert not same_output(None, "")
    assert not same_output(None, "text")


@given(st.text())
@example("round 3 at 10:02")
@example("2024-05-01T10:02:03Z  \u00a0 ABC 12:00")
@example("1:234")
def test_same_output_is_reflexive_and_normalization_idempotent(text: str) -> None:
    assert same_output(text, text)
    once = normalize_output(text)
    assert normalize_output(once) == once


# --- check_before_round -----------------------------------------------------------------------


def test_a_fresh_loop_goes_on() -> None:
    assert check_before_round(_state(), now=1_000.0) is None


def test_max_rounds_boundary() -> None:
    assert check_before_round(_state({"rounds": 3}, round=3), now=0.0) is None
    verdict = check_before_round(_state({"rounds": 3}, round=4), now=0.0)
    assert verdict == Verdict(trigger="max_rounds", reason="round 4 is past the 3 asked for")


def test_no_progress_boundary() -> None:
    spec = {"stale_rounds_limit": 3}
    assert check_before_round(_state(spec, stale_rounds=2), now=0.0) is None
    verdict = check_before_round(_state(spec, stale_rounds=3), now=0.0)
    assert verdict is not None
    assert verdict.trigger == "no_progress"
    assert "3 consecutive rounds" in verdict.reason


def test_consecutive_failures_boundary() -> None:
    spec = {"max_consecutive_failures": 4}
    assert check_before_round(_state(spec, consecutive_failures=3), now=0.0) is None
    verdict = check_before_round(_state(spec, consecutive_failures=4), now=0.0)
    assert verdict == Verdict(
        trigger="consecutive_failures", reason="4 rounds in a row failed or timed out"
    )


def test_token_budget_boundary() -> None:
    spec = {"max_tokens": 1000}
    assert check_before_round(_state(spec, tokens_used=999), now=0.0) is None
    verdict = check_before_round(_state(spec, tokens_used=1000), now=0.0)
    assert verdict == Verdict(trigger="token_budget", reason="1000 tokens used of a budget of 1000")


def test_no_token_budget_means_no_limit() -> None:
    assert check_before_round(_state(tokens_used=10**12), now=0.0) is None


def test_deadline_boundary() -> None:
    spec = {"max_seconds": 60.0}
    assert check_before_round(_state(spec, started_at=1000.0), now=1059.9) is None
    verdict = check_before_round(_state(spec, started_at=1000.0), now=1060.0)
    assert verdict == Verdict(trigger="deadline", reason="60.0 s elapsed of a budget of 60.0 s")


def test_deadline_does_not_count_before_the_loop_started() -> None:
    # started_at == 0 means "not started yet": no time has elapsed.
    assert check_before_round(_state({"max_seconds": 1.0}), now=1e9) is None


def test_no_deadline_means_no_limit() -> None:
    assert check_before_round(_state(started_at=1.0), now=1e9) is None


def test_max_rounds_is_checked_before_the_other_triggers() -> None:
    state = _state(
        {"rounds": 2, "max_tokens": 10, "max_seconds": 1.0, "max_consecutive_failures": 1},
        round=3,
        stale_rounds=5,
        consecutive_failures=5,
        tokens_used=50,
        started_at=1.0,
    )
    verdict = check_before_round(state, now=100.0)
    assert verdict is not None
    assert verdict.trigger == "max_rounds"


# --- next_phase -------------------------------------------------------------------------------


def test_the_last_round_completes_even_with_a_stop_and_a_pause_requested() -> None:
    state = _state(
        {"rounds": 3},
        round=3,
        completed_rounds=1,
        stop_requested="after_round",
        pause_requested=True,
    )
    assert next_phase(state) == "complete"


def test_a_round_past_the_cap_completes() -> None:
    assert next_phase(_state({"rounds": 3}, round=4, completed_rounds=3)) == "complete"


@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_the_cap_with_no_completed_round_escalates(rounds: int) -> None:
    state = _state({"rounds": rounds}, round=rounds, stop_requested="after_round")
    assert next_phase(state) == "escalated"
    verdict = no_completed_round(state, "exit code 1: boom")
    assert verdict.trigger == "no_completed_round"
    if rounds == 1:  # "none of its only round" is not English
        assert verdict.reason == "its only round did not complete: exit code 1: boom"
        assert no_completed_round(state, None).reason == "its only round did not complete"
    else:
        assert (
            verdict.reason
            == f"none of its {rounds} rounds completed; the last one: exit code 1: boom"
        )
        assert no_completed_round(state, None).reason == f"none of its {rounds} rounds completed"


@pytest.mark.parametrize("stop", ["after_round", "now"])
def test_a_stop_before_the_last_round_cancels_even_when_paused(stop: str) -> None:
    state = _state({"rounds": 3}, round=2, stop_requested=stop, pause_requested=True)
    assert next_phase(state) == "cancelled"


def test_a_pause_request_pauses() -> None:
    assert next_phase(_state({"rounds": 3}, round=2, pause_requested=True)) == "paused"


def test_otherwise_the_next_round_is_dispatched() -> None:
    assert next_phase(_state({"rounds": 3}, round=1)) == "dispatching"
    assert next_phase(_state({"rounds": 3}, round=2)) == "dispatching"


def test_numbers_that_are_not_counters_still_count_as_progress() -> None:
    assert not same_output("3/10 tests pass", "4/10 tests pass")
    assert not same_output("coverage 81%", "coverage 84%")
    assert same_output("Round 3 of 9: 3/10 tests pass", "round 4 of 9: 3/10 tests pass")


_MASKED_PIECES = st.sampled_from(
    ["a", "Round", " round ", "3", "12:30", "2026-01-02T10:00", "1.5s", "ms", " ", "\t", "\n",
     "\x1c", "\x85", "\u2028", "\xa0", "\u3000", "\u0663", "x/5", " of ", "#", "\u00df"]
)  # fmt: skip


@given(st.lists(_MASKED_PIECES, max_size=8).map("".join))
def test_normalize_output_is_the_masks_then_whitespace_runs_collapsed(text: str) -> None:
    # What normalize_output does, written the slow way: every mask, then `\s+` -> " ".
    expected = _rules._TIMESTAMP.sub("<time>", text)
    expected = _rules._DURATION.sub("<duration>", expected)
    expected = _rules._COUNTER.sub(lambda m: f"{m.group(1)} <n>", expected)
    expected = re.sub(r"\s+", " ", expected).strip().casefold()
    assert normalize_output(text) == expected
