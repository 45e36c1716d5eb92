from __future__ import annotations

from typing import Any

import msgspec
import pytest

from loopactors.errors import ConfigError
from loopactors.ledger import (
    Attempt,
    BreakerConfig,
    Ledger,
    LedgerError,
    PruneConfig,
    assert_positive_integer,
    assert_similarity_threshold,
    parse_ledger,
    validate_breaker_config,
    validate_prune_config,
)

INVALID = "Invalid ledger: expected { goal: string, attempts: Attempt[] }."
FRACTION = "must be a fraction greater than 0 and at most 1 (default 0.85); got"
NEVER = (
    " Similarity is at most 1.0, so no two errors would ever match and the stagnation rule "
    "would never fire."
)


@pytest.mark.parametrize("text", ["", "  \n\ufeff\u3000", b" \t"])
def test_empty_ledger(text: str | bytes) -> None:
    with pytest.raises(LedgerError, match=r"^No ledger provided\. Pass --ledger <file\.json>"):
        parse_ledger(text)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "3",
        '"x"',
        "null",
        '{"goal": 1, "attempts": []}',
        '{"goal": "g", "attempts": {}}',
        '{"goal": "g"}',
        '{"attempts": []}',
    ],
)
def test_invalid_ledger(text: str) -> None:
    with pytest.raises(LedgerError) as info:
        parse_ledger(text)
    assert str(info.value) == INVALID


@pytest.mark.parametrize(
    "text",
    ['{"goal":"g","attempts":[{"tokensUsed": NaN}]}', '{"goal":"g","attempts":[], "x": Infinity}'],
)
def test_nan_and_infinity_literals_are_rejected(text: str) -> None:
    with pytest.raises(LedgerError):
        parse_ledger(text)


def test_bad_attempt_names_the_path() -> None:
    with pytest.raises(LedgerError, match=r"attempts\[1\]"):
        parse_ledger('{"goal":"g","attempts":[{}, null]}')
    with pytest.raises(LedgerError, match=r"tokensUsed"):
        parse_ledger('{"goal":"g","attempts":[{"tokensUsed": "100"}]}')


def test_parse_keeps_reference_names_and_ignores_extras() -> None:
    ledger = parse_ledger(
        '{"goal":"g","pattern":"ci","goal":"h","startedAt":"s","attempts":'
        '[{"iteration":1,"action":"a","outcome":"failure","error":"e","tokensUsed":1500.0}]}'
    )
    assert ledger.goal == "h"  # duplicate keys: the last wins
    assert ledger.started_at == "s"
    assert ledger.attempts[0].tokens_used == 1500
    encoded = msgspec.json.encode(Ledger(goal="g", attempts=(Attempt(tokens_used=3),)))
    assert encoded == b'{"goal":"g","attempts":[{"tokensUsed":3}]}'


@pytest.mark.parametrize(
    ("value", "suffix"),
    [
        (95, f" 95.{NEVER} If you meant 95%, use 0.95."),
        (100, f" 100.{NEVER} If you meant 100%, use 1."),
        (100.0, f" 100.{NEVER} If you meant 100%, use 1."),
        (150, f" 150.{NEVER}"),
        (1.5, f" 1.5.{NEVER}"),
        (float("inf"), f" Infinity.{NEVER}"),
        (0, " 0."),
        (-0.0, " 0."),
        (-0.1, " -0.1."),
        (float("nan"), " NaN."),
        ("0.85", " 0.85."),
        (None, " null."),
        (True, " true."),
    ],
)
def test_similarity_threshold_messages(value: Any, suffix: str) -> None:
    with pytest.raises(ConfigError) as info:
        assert_similarity_threshold(value)
    assert str(info.value) == f"similarityThreshold {FRACTION}{suffix}"


def test_similarity_threshold_label_and_accepted_values() -> None:
    for ok in (1, 1.0, 0.85, 1e-7):
        assert_similarity_threshold(ok)
    with pytest.raises(ConfigError, match=r"^--similarity-threshold must be .* got abc\.$"):
        assert_similarity_threshold("abc", "--similarity-threshold")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (-1, "-1"),
        (2.5, "2.5"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        ("3", "3"),
        (None, "null"),
        (True, "true"),
    ],
)
def test_positive_integer_messages(value: Any, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        assert_positive_integer(value, "window")
    assert str(info.value) == (
        f"window must be a positive integer; got {shown}. An invalid value would switch "
        "this rule off."
    )


def test_positive_integer_accepts_integral_floats() -> None:
    assert_positive_integer(2.0, "x")
    assert_positive_integer(1, "x")


@pytest.mark.parametrize(
    ("config", "label"),
    [
        (BreakerConfig(max_iterations=0, stagnation_threshold=0), "maxIterations"),
        (BreakerConfig(stagnation_threshold=0, similarity_threshold=9), "stagnationThreshold"),
        (BreakerConfig(frustration_threshold=0), "frustrationThreshold"),
        (BreakerConfig(no_progress_threshold=0), "noProgressThreshold"),
        (BreakerConfig(token_budget=0, similarity_threshold=9), "tokenBudget"),
        (BreakerConfig(similarity_threshold=9), "similarityThreshold"),
    ],
)
def test_breaker_config_check_order(config: BreakerConfig, label: str) -> None:
    with pytest.raises(ConfigError, match=f"^{label} must"):
        validate_breaker_config(config)


def test_prune_config_check_order() -> None:
    validate_prune_config(PruneConfig())
    validate_breaker_config(BreakerConfig())
    bad = PruneConfig(max_trace_lines=0, window=0, similarity_threshold=0)
    with pytest.raises(ConfigError, match=r"^maxTraceLines must"):
        validate_prune_config(bad)
    with pytest.raises(ConfigError, match=r"^window must"):
        validate_prune_config(PruneConfig(window=0, similarity_threshold=0))
    with pytest.raises(ConfigError, match=r"^similarityThreshold must"):
        validate_prune_config(PruneConfig(similarity_threshold=0))
