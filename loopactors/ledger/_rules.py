"""The breaker's rules and the config checks, on plain values (docs/ledger.md).

Nothing here needs msgspec: ``loopactors context --check`` on a small ledger runs the rules
without loading it (docs/benchmarks.md, start-up). ``_model`` and ``_breaker`` wrap these in
the public Structs (:class:`BreakerConfig`, :class:`BreakerDecision`).
"""

from __future__ import annotations

from .._thresholds import FRUSTRATION_THRESHOLD, SIMILARITY_THRESHOLD, STAGNATION_THRESHOLD
from ..errors import ConfigError
from ._js import format_number, is_integer, is_number, js_string

TYPE_CHECKING = False  # typing itself is not loaded by ``context --check``
if TYPE_CHECKING:
    from typing import TypeAlias

    from ._facts import BreakerFacts
    from ._model import BreakerConfig, Trigger

    #: What the rules read: a breaker config, as the public Struct or as plain attributes.
    Limits: TypeAlias = "BreakerConfig | BreakerLimits"


__all__ = [
    "FRUSTRATION_THRESHOLD",
    "SIMILARITY_THRESHOLD",
    "STAGNATION_THRESHOLD",
    "BreakerLimits",
    "assert_positive_integer",
    "assert_similarity_threshold",
    "breaker_verdict",
    "check_limits",
]


#: loop-context's defaults (docs/ledger.md, "Config checks"), written once: BreakerConfig,
#: PruneConfig, BreakerLimits, the summary and `loopactors context` read them from here
#: (the stagnation, frustration and similarity ones, shared with the breaker's triggers,
#: from ``loopactors._thresholds``).
MAX_ITERATIONS = 10
NO_PROGRESS_THRESHOLD = 5
MAX_TRACE_LINES = 8
WINDOW = 5


class BreakerLimits:
    """A breaker config as plain attributes, with :class:`BreakerConfig`'s names and defaults."""

    __slots__ = (
        "frustration_threshold",
        "max_iterations",
        "no_progress_threshold",
        "similarity_threshold",
        "stagnation_threshold",
        "token_budget",
    )

    def __init__(
        self,
        *,
        max_iterations: int = MAX_ITERATIONS,
        stagnation_threshold: int = STAGNATION_THRESHOLD,
        frustration_threshold: int = FRUSTRATION_THRESHOLD,
        no_progress_threshold: int = NO_PROGRESS_THRESHOLD,
        similarity_threshold: float = SIMILARITY_THRESHOLD,
        token_budget: int | None = None,
    ) -> None:
        self.max_iterations = max_iterations
        self.stagnation_threshold = stagnation_threshold
        self.frustration_threshold = frustration_threshold
        self.no_progress_threshold = no_progress_threshold
        self.similarity_threshold = similarity_threshold
        self.token_budget = token_budget


def assert_similarity_threshold(value: object, label: str = "similarityThreshold") -> None:
    """A similarity threshold (docs/ledger.md, "Config checks"): a number with ``0 < value <= 1``;
    the message hints at percentages."""
    if is_number(value) and 0 < value <= 1:
        return
    why = ""
    if is_number(value) and value > 1:
        why = (
            " Similarity is at most 1.0, so no two errors would ever match and the "
            "stagnation rule would never fire."
        )
        if is_integer(value) and value <= 100:
            percent = format_number(value)
            why += f" If you meant {percent}%, use {format_number(value / 100)}."
    raise ConfigError(
        f"{label} must be a fraction greater than 0 and at most 1 (default "
        f"{SIMILARITY_THRESHOLD}); "
        f"got {js_string(value)}.{why}"
    )


def assert_positive_integer(value: object, label: str) -> None:
    """A limit (docs/ledger.md, "Config checks"): an integral number of at least 1 (so not NaN,
    Infinity or 2.5)."""
    if is_integer(value) and value >= 1:
        return
    raise ConfigError(
        f"{label} must be a positive integer; got {js_string(value)}. "
        "An invalid value would switch this rule off."
    )


def check_limits(config: Limits) -> None:
    """The first failing check raises :class:`ConfigError` (docs/ledger.md, "Config checks")."""
    assert_positive_integer(config.max_iterations, "maxIterations")
    assert_positive_integer(config.stagnation_threshold, "stagnationThreshold")
    assert_positive_integer(config.frustration_threshold, "frustrationThreshold")
    assert_positive_integer(config.no_progress_threshold, "noProgressThreshold")
    if config.token_budget is not None:
        assert_positive_integer(config.token_budget, "tokenBudget")
    assert_similarity_threshold(config.similarity_threshold)


def breaker_verdict(facts: BreakerFacts, config: Limits) -> tuple[Trigger, str]:
    """The first rule that fires, as ``(trigger, reason)``; ``("ok", ...)`` when none does.

    For a checked ``config``; ``facts`` must have been gathered at its similarity threshold.
    """
    tokens = facts.tokens_used
    run = facts.failure_run

    if run and run >= config.stagnation_threshold:
        count = facts.same_error
        if count >= config.stagnation_threshold:
            return (
                "stagnation",
                f"Same error repeated {count}\u00d7 in a row (threshold "
                f'{format_number(config.stagnation_threshold)}): "{facts.last_signature}". '
                "Escalating instead of retrying.",
            )

    if run and run >= config.frustration_threshold:
        count = facts.same_action
        if count >= config.frustration_threshold:
            return (
                "frustration",
                "Semantic looping detected: agent repeated highly similar action "
                f"{count}\u00d7 in a row (threshold {format_number(config.frustration_threshold)})"
                f': "{js_string(facts.last_action)}". Escalating.',
            )

    if run >= config.no_progress_threshold:
        return (
            "no-progress",
            f"{run} consecutive failures with no progress (threshold "
            f"{format_number(config.no_progress_threshold)}). Escalating.",
        )

    budget = config.token_budget
    if budget is not None and tokens >= budget:
        return (
            "token-budget",
            f"Token budget reached ({format_number(tokens)} \u2265 {format_number(budget)}). "
            "Escalating to avoid cost blowup.",
        )

    if facts.iterations >= config.max_iterations:
        return (
            "max-iterations",
            f"Iteration cap reached ({facts.iterations} \u2265 "
            f"{format_number(config.max_iterations)}). Escalating.",
        )

    return "ok", "Within limits \u2014 cleared to continue."
