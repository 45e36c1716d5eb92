"""Replay, pure: the prompt a recorded round had, the loop that runs it again, and a replay
set beside its original."""

from __future__ import annotations

import pytest

from loopactors.errors import ReplayError
from loopactors.loops import (
    LoopSpec,
    LoopState,
    RoundRecord,
    recorded_prompt,
    replay_pair,
    replay_spec,
    replayed_round,
)

SPEC = LoopSpec(task="tidy", rounds=3, worker="claude", objective="tidy", round_timeout=60.0)
ORIGINAL = LoopState(loop_id="L1", spec=SPEC)


def record(number: int, **fields: object) -> RoundRecord:
    fields.setdefault("status", "completed")
    fields.setdefault("started_at", 1.0)
    return RoundRecord(loop_id="L1", round=number, **fields)  # type: ignore[arg-type]


ROUNDS = [
    record(1, output="first answer", prompt="tidy"),
    record(2, output="second", prompt="first answer\n\n---\n\ntidy", seed_source="previous_output"),
]


def test_the_recorded_prompt_is_replayed_with_its_seed() -> None:
    assert recorded_prompt(ORIGINAL, ROUNDS, 2) == "first answer\n\n---\n\ntidy"
    spec = replay_spec(ORIGINAL, ROUNDS, 2, worker="codex")
    assert (spec.task, spec.rounds, spec.mode) == ("first answer\n\n---\n\ntidy", 1, "fresh")
    assert (spec.worker, spec.objective, spec.round_timeout) == ("codex", "tidy", 60.0)
    assert spec.replay_of == "L1:2"
    assert replay_spec(ORIGINAL, ROUNDS, 1, worker=None).worker == "claude"


def test_a_round_recorded_before_prompts_were_kept_is_rebuilt() -> None:
    old = [
        record(1, output="x" * 20),
        record(2, output="y", seed_source="previous_output"),
        record(3),
    ]
    capped = LoopState(loop_id="L1", spec=LoopSpec(task="tidy", rounds=3, seed_cap=5))
    assert recorded_prompt(capped, old, 1) == "tidy"
    assert recorded_prompt(capped, old, 2) == "xxxxx\n\n---\n\ntidy"
    assert recorded_prompt(capped, old, 3) == "tidy"


@pytest.mark.parametrize(
    ("rounds", "number", "message"),
    [
        (ROUNDS, 7, r"loop L1 has no round 7 \(its recorded rounds: 1, 2\)"),
        ([], 1, r"has no round 1 \(its recorded rounds: none\)"),
        ([record(1, status="running")], 1, "round 1 of loop L1 is running"),
        ([record(1, status="deferred")], 1, "is deferred"),
        ([record(1, status="cancelled", started_at=0.0)], 1, "is cancelled"),
    ],
)
def test_a_round_that_cannot_be_replayed_is_refused(
    rounds: list[RoundRecord], number: int, message: str
) -> None:
    with pytest.raises(ReplayError, match=message):
        replay_spec(ORIGINAL, rounds, number, worker=None)


def test_a_replay_is_paired_with_its_original_round() -> None:
    replay = LoopState(loop_id="R1", spec=replay_spec(ORIGINAL, ROUNDS, 2, worker="codex"))
    assert replayed_round(replay) == ("L1", 2)
    was, now = replay_pair(ORIGINAL, ROUNDS, replay, [])
    assert (was.round, now) == (2, None)
    ran = RoundRecord(loop_id="R1", round=1, status="completed", output="other")
    assert replay_pair(ORIGINAL, ROUNDS, replay, [ran])[1] == ran
    other = LoopState(loop_id="L9", spec=SPEC)
    with pytest.raises(ReplayError, match="replays round 2 of loop L1, not of L9"):
        replay_pair(other, ROUNDS, replay, [])
    with pytest.raises(ReplayError, match="loop L1 is not a replay"):
        replay_pair(ORIGINAL, ROUNDS, ORIGINAL, ROUNDS)
