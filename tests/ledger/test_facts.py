"""The breaker's facts read straight from JSON equal those of the parsed ledger."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopactors.ledger import BreakerConfig, LedgerError, check_circuit_breaker, parse_ledger
from loopactors.ledger._breaker import decide
from loopactors.ledger._facts import BreakerFacts, breaker_facts, read_breaker_facts


def _both(data: bytes, threshold: float = 0.85) -> tuple[Any, Any]:
    """(facts read from bytes, facts of the parsed text), or the error message of each."""
    try:
        quick: Any = read_breaker_facts(data, threshold)
    except LedgerError as exc:
        quick = ("error", str(exc))
    try:
        ledger = parse_ledger(data.decode("utf-8", errors="replace"))
        slow: Any = breaker_facts(ledger.attempts, threshold)
    except LedgerError as exc:
        slow = ("error", str(exc))
    return quick, slow


values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=6)
)
attempt = st.fixed_dictionaries(
    {},
    optional={
        "iteration": values,
        "action": st.sampled_from(["a", "b", "fix it", None]) | values,
        "outcome": st.sampled_from(["failure", "failure", "success", "noop"]) | values,
        "error": st.sampled_from(["E: x 1", "E: x 2", "boom at /a/b.js:1:2", "", None]) | values,
        "tokensUsed": st.sampled_from([0, 0.1, 0.2, 1e308, 10**400, None]) | values,
        "extra": values,
    },
)


@settings(max_examples=300)
@given(st.lists(attempt, max_size=12), st.sampled_from([0.3, 0.85, 1.0]))
def test_quick_read_equals_parsed_ledger(attempts: list[dict[str, Any]], threshold: float) -> None:
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    quick, slow = _both(data, threshold)
    assert quick == slow


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"  \n",
        b"null",
        b"[]",
        b'{"goal": 1, "attempts": []}',
        b'{"goal": "g"}',
        b'{"goal": "g", "attempts": {}}',
        b'{"goal": "g", "attempts": [1]}',
        b'{"goal": "g", "attempts": [{"error": 5}]}',
        b'{"goal": "g", "attempts": [{"outcome": "failure"}, {"tokensUsed": "5"}]}',
        b'{"goal": "g", "attempts": [}',
        b'{"goal": "g", "attempts": [{"a": tru}]}',
        b'\xef\xbb\xbf{"goal": "g", "attempts": []}',
        # Bad UTF-8: replaced (and then read) where the text is read, ignored where it is not.
        b'{"goal": "g", "attempts": [{"outcome": "failure", "error": "E \xff"}]}',
        b'{"goal": "g", "attempts": [{"outcome": "failure", "note": "\xfe"}]}',
        b'{"goal": "g\xff", "other": "\xfe", "attempts": []}',
        b'{"goal": "g", "attempts": [{"tokensUsed": 1e400}]}',
        b'{"goal": "g", "attempts": [{"tokensUsed": NaN}]}',
        b'{"goal": "g", "attempts": [], "attempts": [{"outcome": "failure"}]}',
    ],
)
def test_quick_read_errors_and_edge_cases_equal_parsed_ledger(data: bytes) -> None:
    quick, slow = _both(data)
    assert quick == slow


def test_many_chunks_sum_tokens_oldest_first_and_walk_the_whole_run() -> None:
    # Over several decoding chunks; 0.1 + 0.2 + ... depends on the order of the additions.
    attempts = [{"outcome": "success", "tokensUsed": 0.1 * (i % 7)} for i in range(700)]
    attempts += [
        {"outcome": "failure", "action": "same", "error": f"Error: at /x/{i}.js:{i}:1",
         "tokensUsed": 0.2}
        for i in range(1500)
    ]  # fmt: skip
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    quick, slow = _both(data)
    assert quick == slow
    assert isinstance(quick, BreakerFacts)
    assert (quick.iterations, quick.failure_run, quick.same_error, quick.same_action) == (
        2200, 1500, 1500, 1500
    )  # fmt: skip
    assert quick.last_signature == "Error: at #.js"
    ledger = parse_ledger(data)
    config = BreakerConfig()
    assert decide(quick, config) == check_circuit_breaker(ledger, config)


def test_the_walk_stops_at_the_first_mismatch() -> None:
    attempts = [{"outcome": "failure", "error": f"E{i}: {'x' * i}", "action": f"a{i}"}
                for i in range(50)]  # fmt: skip
    facts = read_breaker_facts(json.dumps({"goal": "g", "attempts": attempts}).encode(), 0.85)
    assert (facts.failure_run, facts.same_error, facts.same_action) == (50, 1, 1)
    assert facts.last_action == "a49"
