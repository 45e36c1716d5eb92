"""Replay: a recorded round run again as a new loop, and a replay set beside its original.

Pure, no trio (docs/replay.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ReplayError
from ._model import LoopSpec, LoopState, RoundRecord
from ._rules import SEPARATOR

__all__ = ["recorded_prompt", "replay_pair", "replay_spec", "replayed_round"]


def _round(state: LoopState, rounds: Sequence[RoundRecord], number: int) -> RoundRecord:
    found = [r for r in rounds if r.round == number]
    if not found:
        have = ", ".join(str(r.round) for r in rounds) or "none"
        raise ReplayError(
            f"loop {state.loop_id} has no round {number} (its recorded rounds: {have})"
        )
    return found[-1]


def recorded_prompt(state: LoopState, rounds: Sequence[RoundRecord], number: int) -> str:
    """The prompt round ``number`` of the loop was given, as recorded with it.

    A round recorded before prompts were kept is rebuilt from what was: the task, after
    the previous round's output (cut to ``seed_cap``) when it was seeded from it.
    """
    record = _round(state, rounds, number)
    if record.status in ("running", "deferred") or (
        record.status == "cancelled" and not record.started_at
    ):
        raise ReplayError(
            f"round {number} of loop {state.loop_id} is {record.status}: it has no finished "
            "run to compare with; replay a round that completed, failed or timed out"
        )
    if record.prompt:
        return record.prompt
    spec = state.spec
    if record.seed_source == "previous_output":
        before = [r for r in rounds if r.round < number and r.status == "completed"]
        if before and before[-1].output and spec.seed_cap > 0:
            return before[-1].output[-spec.seed_cap :] + SEPARATOR + spec.task
    return spec.task


def replay_spec(
    state: LoopState, rounds: Sequence[RoundRecord], number: int, *, worker: str | None
) -> LoopSpec:
    """The one-round loop that runs round ``number``'s recorded prompt (its seed included)
    again, on ``worker`` (default: the original's), linked to the original."""
    spec = state.spec
    return LoopSpec(
        task=recorded_prompt(state, rounds, number),
        rounds=1,
        mode="fresh",  # the recorded prompt already carries the seed the round had
        objective=spec.objective,
        worker=worker or spec.worker,
        round_timeout=spec.round_timeout,
        replay_of=f"{state.loop_id}:{number}",
    )


def replayed_round(replay: LoopState) -> tuple[str, int]:
    """The loop id and round a replay loop runs again.

    Raises:
        ReplayError: ``replay`` is not a replay.
    """
    link = replay.spec.replay_of
    loop_id, _, number = (link or "").rpartition(":")
    if not link or not loop_id or not number.isdigit():
        raise ReplayError(
            f"loop {replay.loop_id} is not a replay (start one with `loopactors replay "
            "LOOP_ID --round K --worker W`)"
        )
    return loop_id, int(number)


def replay_pair(
    original: LoopState,
    original_rounds: Sequence[RoundRecord],
    replay: LoopState,
    replay_rounds: Sequence[RoundRecord],
) -> tuple[RoundRecord, RoundRecord | None]:
    """The original round and the replay's (``None`` while the replay has not run it).

    Raises:
        ReplayError: ``replay`` is not a replay of ``original``.
    """
    loop_id, number = replayed_round(replay)
    if loop_id != original.loop_id:
        raise ReplayError(
            f"loop {replay.loop_id} replays round {number} of loop {loop_id}, not of "
            f"{original.loop_id}"
        )
    done = [r for r in replay_rounds if r.round == 1]
    return _round(original, original_rounds, number), done[-1] if done else None
