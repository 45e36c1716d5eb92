"""Pure per-round rules: the prompt a round gets, the breaker's checks, and what comes next.

No trio, no I/O: the ContextBuilder, the Breaker and the LoopRunner actors call these, and the tests
exercise them directly.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from .._util import backoff_delay
from ._events import AnyEvent, LoopStarted, RoundDeferred, RoundStarted
from ._model import LoopState, RoundRecord
from ._triggers import Verdict, check_before_round

__all__ = [
    "SEPARATOR",
    "Prompt",
    "Verdict",
    "build_prompt",
    "check_before_round",
    "check_feedback",
    "defer_round",
    "deferred_wait",
    "next_phase",
    "normalize_output",
    "round_intent",
    "same_output",
    "stale_rounds_after",
]

#: Between the inherited seed and the task, as in the reference.
SEPARATOR = "\n\n---\n\n"


class Prompt(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    text: str
    seed_source: Literal["task", "previous_output"]
    #: The round's task when it is not the spec's (a plan-driven loop, a prompt file): kept
    #: in the state with the round's intent, so a recovered round runs the same prompt.
    task: str | None = None
    #: A plan-driven loop's plan as read for this round: tasks done and in all.
    tasks_done: int | None = None
    tasks_total: int | None = None


def build_prompt(state: LoopState) -> Prompt:
    """``inherit``: the previous round's worker output, tail-capped, then the separator, then
    the task. ``fresh`` (and round 1, or no successful round yet): the task alone.

    The seed is the worker's own output, never a later read from elsewhere (rolebox's W1).
    """
    spec = state.spec
    seed = state.last_output
    task = spec.task if state.round_task is None else state.round_task
    task += check_feedback(state)
    if spec.mode == "fresh" or not seed or spec.seed_cap <= 0:
        return Prompt(text=task, seed_source="task", task=state.round_task)
    return Prompt(
        text=seed[-spec.seed_cap :] + SEPARATOR + task,
        seed_source="previous_output",
        task=state.round_task,
    )


#: Characters of a failing check's output shown in the next prompt (its end).
CHECK_TAIL = 3000


def check_feedback(state: LoopState) -> str:
    """What follows the task in a round's prompt after the loop's ``until`` check failed
    (docs/loops.md, Verified completion); empty otherwise. A function of the committed state
    alone, so a round dispatched again after a crash gets the same prompt."""
    check = state.last_check
    if state.spec.until is None or check is None or check.passed:
        return ""
    how = f"exited with {check.exit_code}" if check.exit_code is not None else check.error
    tail = check.output[-CHECK_TAIL:].strip("\n")
    shown = f"The end of its output:\n\n```text\n{tail}\n```\n" if tail else "It printed nothing.\n"
    return (
        f"{SEPARATOR}The loop's check `{check.command}` failed after round "
        f"{check.round} ({how}, {check.duration:.1f} s). {shown}"
        "The loop is complete when this check passes."
    )


def round_intent(
    state: LoopState, prompt: Prompt, now: float, *, first: bool
) -> tuple[RoundRecord, list[AnyEvent]]:
    """What round ``state.round``'s intent commits besides the state: its record, still
    ``running``, and its events (the loop's start first, if ``first``)."""
    spec = state.spec
    record = RoundRecord(
        loop_id=state.loop_id,
        round=state.round,
        status="running",
        seed_source=prompt.seed_source,
        started_at=now,
        prompt=prompt.text,
    )
    events: list[AnyEvent] = []
    if first:
        events.append(
            LoopStarted(
                loop_id=state.loop_id,
                at=now,
                rounds=spec.rounds,
                mode=spec.mode,
                worker=spec.worker,
                parent_id=spec.parent_id,
            )
        )
    events.append(
        RoundStarted(
            loop_id=state.loop_id,
            at=now,
            round=state.round,
            rounds=spec.rounds,
            seed_source=prompt.seed_source,
        )
    )
    return record, events


_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b"
)
_DURATION = re.compile(
    r"\b\d+(\.\d+)?\s?(ms|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\b", re.IGNORECASE
)
_COUNTER = re.compile(
    r"\b(round|iteration|iter|step|attempt|run|loop|pass|cycle)(\s*#?\s*)\d+"
    r"(\s*(/|of)\s*\d+)?",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")


def normalize_output(text: str) -> str:
    """Output as the no-progress fuse compares it: timestamps, durations and round counters
    (``round 3``, ``iteration 2/5``) masked, whitespace collapsed, case folded.

    So ``round 3 at 10:02 took 1.5s`` equals ``round 4 at 10:07 took 2s`` (rolebox's W4: a
    round number or a timestamp must not hide a loop that is going nowhere), while other
    numbers, like ``3/10 tests pass`` and ``4/10 tests pass``, still count as progress.
    """
    if _DIGIT.search(text) is not None:  # each mask needs a digit (a round's hot path)
        text = _TIMESTAMP.sub("<time>", text)
        text = _DURATION.sub("<duration>", text)
        text = _COUNTER.sub(_counter_masked, text)
    # split() and strip() break at what `\s` matches, so this is `\s+` -> " ", stripped.
    return " ".join(text.split()).casefold()


def _counter_masked(match: re.Match[str]) -> str:
    return f"{match.group(1)} <n>"


def same_output(previous: str | None, current: str) -> bool:
    if previous is None:
        return False
    return normalize_output(previous) == normalize_output(current)


Next = Literal["complete", "escalated", "cancelled", "paused", "dispatching"]


def next_phase(state: LoopState) -> Next:
    """After round ``state.round`` was recorded: the cap first, then a stop-after-round, then a
    pause, else the next round (the reference's precedence: cap, cancel, then the rest).

    At the cap a loop ends ``complete`` only if a round completed; with none it ends
    ``escalated`` (:func:`no_completed_round`): a loop that did none of its work must not
    read as a success.
    """
    if state.round >= state.spec.rounds:
        return "complete" if state.completed_rounds else "escalated"
    if state.stop_requested is not None:
        return "cancelled"
    if state.pause_requested:
        return "paused"
    return "dispatching"


def no_completed_round(state: LoopState, last_error: str | None) -> Verdict:
    """Why a loop that reached its cap without one completed round escalates (trigger
    ``no_completed_round``), naming the last round's error."""
    rounds = state.round
    if rounds == 1:
        why = f": {last_error}" if last_error else ""
        return Verdict(trigger="no_completed_round", reason=f"its only round did not complete{why}")
    last = f"; the last one: {last_error}" if last_error else ""
    return Verdict(
        trigger="no_completed_round", reason=f"none of its {rounds} rounds completed{last}"
    )


def stale_rounds_after(state: LoopState, *, progress: bool | None, same_output: bool) -> int:
    """The no-progress count after a completed round.

    A worker that measured the workspace (``progress`` not ``None``: the coding-agent CLI
    kinds) is judged by it, so an agent that commits its work never trips the fuse and one
    that touches nothing does; any other worker by its output compared with the last one.
    """
    if progress is not None:
        return 0 if progress else state.stale_rounds + 1
    return state.stale_rounds + 1 if same_output else 0


#: Backoff of a deferral whose limit gave no reset time (the CLI workers give one; this is
#: the runner's own floor): 60 s, doubled each deferral in a row, at most an hour.
DEFER_BACKOFF = 60.0
DEFER_BACKOFF_MAX = 3600.0


def defer_round(
    state: LoopState,
    *,
    until: float | None,
    reason: str,
    now: float,
    tokens: int = 0,
    cost_usd: float = 0.0,
) -> tuple[LoopState, RoundRecord, RoundDeferred]:
    """Round ``state.round`` was held back by a usage or rate limit: the same round runs again
    at ``until`` (or after the backoff when no time was given).

    Not a failure: ``consecutive_failures`` and the ledger are left alone. The round's record
    says ``deferred`` until the round runs again; what the attempt used still counts.
    """
    if until is None or until <= now:
        until = now + backoff_delay(state.deferrals + 1, first=DEFER_BACKOFF, cap=DEFER_BACKOFF_MAX)
    waiting = state.moved("summarizing").moved(
        "dispatching",
        deferred_until=until,
        defer_reason=reason,
        deferrals=state.deferrals + 1,
        tokens_used=state.tokens_used + tokens,
        cost_usd=state.cost_usd + cost_usd,
    )
    record = RoundRecord(
        loop_id=state.loop_id,
        round=state.round,
        status="deferred",
        error=reason,
        tokens=tokens,
        cost_usd=cost_usd,
        started_at=now,
    )
    event = RoundDeferred(
        loop_id=state.loop_id,
        at=now,
        round=state.round,
        rounds=state.spec.rounds,
        until=until,
        reason=reason,
    )
    return waiting, record, event


def deferred_wait(state: LoopState, now: float) -> float | None:
    """Seconds the loop's next round must still wait for a limit to reset, or ``None``."""
    if state.deferred_until is None or state.deferred_until <= now:
        return None
    return state.deferred_until - now
