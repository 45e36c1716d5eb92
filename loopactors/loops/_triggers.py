"""The breaker's triggers, in one ordered table (docs/loops.md, "The breaker").

Each trigger is its name, the loop option that holds its limit and that limit's default
(written here once: ``LoopSpec`` and the configuration's ``[breaker]`` read them), a pure
check run before each round, and its standing (how far a loop is towards it). The run
ledger's two (stagnation, frustration) are checked by the run ledger, loop-context's rules
exactly (``loopactors.ledger``), after the others: here they have their place in the order,
their limits and their standing. Pure, no trio; a new trigger is one :class:`Trigger` and one
:func:`register_trigger` call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from .._thresholds import FRUSTRATION_THRESHOLD, SIMILARITY_THRESHOLD, STAGNATION_THRESHOLD

if TYPE_CHECKING:
    from ._model import LoopState

__all__ = [
    "LIMIT_DEFAULTS",
    "SIMILARITY_DEFAULT",
    "Progress",
    "Trigger",
    "Verdict",
    "check_before_round",
    "forget_trigger",
    "register_trigger",
    "triggers",
]


class Verdict(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """The breaker's decision to escalate: which trigger fired, and why, in words."""

    trigger: str
    reason: str


class Progress(Protocol):
    """What a trigger's standing may read besides the loop's state: its finished rounds and
    the run ledger's counts of alike trailing failures (by error, by action)."""

    @property
    def finished(self) -> int: ...
    @property
    def same_error(self) -> int: ...
    @property
    def same_action(self) -> int: ...


#: ``(state, now)`` -> a verdict, or ``None`` to go on.
Check = Callable[["LoopState", float], "Verdict | None"]
#: ``(state, now, progress)`` -> ``(value, limit)`` (it fires at the limit), or ``None`` where
#: the trigger does not apply to the loop.
Standing = Callable[["LoopState", float, Progress], "tuple[float, float] | None"]


class Trigger(msgspec.Struct, frozen=True, kw_only=True):
    """One trigger of the breaker."""

    name: str
    check: Check | None
    standing: Standing | None = None
    #: Its name in words, for people (the dashboard's breaker bars); ``""``: the name.
    label: str = ""
    #: The ``LoopSpec`` field that holds its limit, and that field's default.
    limit: str | None = None
    default: float | None = None
    #: Checked by the run ledger (loop-context's rules) rather than by ``check``.
    ledger: bool = False


def _max_rounds(state: LoopState, now: float) -> Verdict | None:
    if state.round > state.spec.rounds:
        return Verdict(
            trigger="max_rounds",
            reason=f"round {state.round} is past the {state.spec.rounds} asked for",
        )
    return None


def _no_progress(state: LoopState, now: float) -> Verdict | None:
    spec = state.spec
    if state.stale_rounds < spec.stale_rounds_limit:
        return None
    if state.progress_measure == "workspace":
        reason = (
            f"the workspace did not change for {state.stale_rounds} consecutive rounds "
            "(no file changed and no new commit)"
        )
    else:
        reason = (
            f"the output did not change for {state.stale_rounds} consecutive rounds "
            "(compared with timestamps, durations and round counters masked)"
        )
    # Named here because toy and test workers whose outputs differ only by a counter meet
    # this rule first: say what lets them run on.
    reason += (
        f"; stale_rounds_limit is {spec.stale_rounds_limit}: raise it to allow more "
        "(run --stale-rounds N, stale_rounds=N in the |loop| text, stale_rounds_limit in "
        "loopactors.toml's [breaker], or the stale_rounds_limit loop option)"
    )
    return Verdict(trigger="no_progress", reason=reason)


def _consecutive_failures(state: LoopState, now: float) -> Verdict | None:
    if state.consecutive_failures >= state.spec.max_consecutive_failures:
        return Verdict(
            trigger="consecutive_failures",
            reason=f"{state.consecutive_failures} rounds in a row failed or timed out",
        )
    return None


def _unverified_claims(state: LoopState, now: float) -> Verdict | None:
    spec = state.spec
    if state.unverified_claims >= spec.max_unverified_claims:
        return Verdict(
            trigger="unverified_claims",
            reason=(
                f"{state.unverified_claims} rounds in a row claimed the objective met while "
                f"the check `{spec.until}` failed (max_unverified_claims is "
                f"{spec.max_unverified_claims})"
            ),
        )
    return None


def _cost_budget(state: LoopState, now: float) -> Verdict | None:
    spec = state.spec
    if spec.max_cost_usd is not None and state.cost_usd >= spec.max_cost_usd:
        return Verdict(
            trigger="cost_budget",
            reason=f"${state.cost_usd:.4f} spent of a budget of ${spec.max_cost_usd:.4f}",
        )
    return None


def _token_budget(state: LoopState, now: float) -> Verdict | None:
    spec = state.spec
    if spec.max_tokens is not None and state.tokens_used >= spec.max_tokens:
        return Verdict(
            trigger="token_budget",
            reason=f"{state.tokens_used} tokens used of a budget of {spec.max_tokens}",
        )
    return None


def _deadline(state: LoopState, now: float) -> Verdict | None:
    spec = state.spec
    elapsed = now - state.started_at if state.started_at else 0.0
    if spec.max_seconds is not None and elapsed >= spec.max_seconds:
        return Verdict(
            trigger="deadline",
            reason=f"{elapsed:.1f} s elapsed of a budget of {spec.max_seconds} s",
        )
    return None


def _elapsed(state: LoopState, now: float) -> float:
    end = state.updated_at if state.terminal else now
    return round(max(0.0, end - state.started_at) if state.started_at else 0.0, 1)


_BUILT_IN = (
    Trigger(
        name="max_rounds",
        label="rounds",
        check=_max_rounds,
        # Rounds run, failed ones too: the cap counts them.
        standing=lambda s, now, p: (min(p.finished, s.spec.rounds), s.spec.rounds),
    ),
    Trigger(
        name="no_progress",
        label="no progress (same output)",
        check=_no_progress,
        standing=lambda s, now, p: (s.stale_rounds, s.spec.stale_rounds_limit),
        limit="stale_rounds_limit",
        default=2,
    ),
    Trigger(
        name="consecutive_failures",
        label="consecutive failures",
        check=_consecutive_failures,
        standing=lambda s, now, p: (s.consecutive_failures, s.spec.max_consecutive_failures),
        limit="max_consecutive_failures",
        default=3,
    ),
    Trigger(
        name="unverified_claims",
        label="unverified claims",
        check=_unverified_claims,
        standing=lambda s, now, p: (
            (s.unverified_claims, s.spec.max_unverified_claims) if s.spec.until else None
        ),
        limit="max_unverified_claims",
        default=3,
    ),
    Trigger(
        name="cost_budget",
        label="cost budget ($)",
        check=_cost_budget,
        standing=lambda s, now, p: (
            (round(s.cost_usd, 4), s.spec.max_cost_usd) if s.spec.max_cost_usd is not None else None
        ),
        limit="max_cost_usd",
    ),
    Trigger(
        name="token_budget",
        label="token budget",
        check=_token_budget,
        standing=lambda s, now, p: (
            (s.tokens_used, s.spec.max_tokens) if s.spec.max_tokens is not None else None
        ),
        limit="max_tokens",
    ),
    Trigger(
        name="deadline",
        label="time budget (s)",
        check=_deadline,
        standing=lambda s, now, p: (
            (_elapsed(s, now), s.spec.max_seconds) if s.spec.max_seconds is not None else None
        ),
        limit="max_seconds",
    ),
    # The run ledger's: they fire when the trailing failures reach the threshold and, among
    # them, that many in a row are alike (by error, by action): the alike ones are the count.
    Trigger(
        name="stagnation",
        label="stagnation (same error)",
        check=None,
        standing=lambda s, now, p: (p.same_error, s.spec.stagnation_threshold),
        limit="stagnation_threshold",
        default=STAGNATION_THRESHOLD,
        ledger=True,
    ),
    Trigger(
        name="frustration",
        label="frustration (same action)",
        check=None,
        standing=lambda s, now, p: (p.same_action, s.spec.frustration_threshold),
        limit="frustration_threshold",
        default=FRUSTRATION_THRESHOLD,
        ledger=True,
    ),
)

#: Each limit's default, by the loop option that holds it (``LoopSpec`` and the
#: configuration's ``[breaker]`` read them from here).
LIMIT_DEFAULTS: dict[str, float] = {
    t.limit: t.default for t in _BUILT_IN if t.limit is not None and t.default is not None
}
#: How alike two errors or actions must be to count as the same (the run ledger's triggers).
SIMILARITY_DEFAULT = SIMILARITY_THRESHOLD

_triggers: list[Trigger] = list(_BUILT_IN)
_checks: tuple[Check, ...] = ()


def _refresh() -> None:
    global _checks  # noqa: PLW0603 - rebuilt on registration only: the per-round path reads it
    _checks = tuple(t.check for t in _triggers if t.check is not None and not t.ledger)


_refresh()


def triggers() -> tuple[Trigger, ...]:
    """Every trigger, in the order the breaker checks them."""
    return tuple(_triggers)


def register_trigger(trigger: Trigger, *, before: str | None = None) -> None:
    """Add a trigger, checked before the one named ``before`` (default: after every
    trigger but the run ledger's, which come last).

    Raises:
        ValueError: its name is taken, or ``before`` names no trigger.
    """
    names = [t.name for t in _triggers]
    if trigger.name in names:
        raise ValueError(f"breaker trigger {trigger.name!r} is already registered")
    if before is None:
        index = next((i for i, t in enumerate(_triggers) if t.ledger), len(_triggers))
    elif before in names:
        index = names.index(before)
    else:
        raise ValueError(f"no breaker trigger {before!r}; the triggers: {', '.join(names)}")
    _triggers.insert(index, trigger)
    _refresh()


def forget_trigger(name: str) -> None:
    """Undo :func:`register_trigger` (a test's own trigger); the built-in ones stay."""
    if any(t.name == name for t in _BUILT_IN):
        raise ValueError(f"{name!r} is a built-in trigger")
    _triggers[:] = [t for t in _triggers if t.name != name]
    _refresh()


def check_before_round(state: LoopState, now: float) -> Verdict | None:
    """The loop breaker, run before each round: the first trigger (in order) that fires, or
    ``None`` to go on. The run ledger's are checked after these, by the runtime's Breaker."""
    for check in _checks:
        verdict = check(state, now)
        if verdict is not None:
            return verdict
    return None
