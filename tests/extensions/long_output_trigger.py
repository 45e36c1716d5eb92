"""A breaker trigger from outside the package, as a third party writes one: escalate a loop
whose last output grew past a size (a worker that started dumping logs, say)."""

from __future__ import annotations

from loopactors.loops import LoopState, Trigger, Verdict

#: Characters of the last output at which the trigger fires.
LIMIT = 40


def check(state: LoopState, now: float) -> Verdict | None:
    size = len(state.last_output or "")
    if size >= LIMIT:
        return Verdict(
            trigger="long_output", reason=f"the last output has {size} characters (limit {LIMIT})"
        )
    return None


LONG_OUTPUT = Trigger(
    name="long_output",
    check=check,
    standing=lambda state, now, progress: (len(state.last_output or ""), LIMIT),
)
