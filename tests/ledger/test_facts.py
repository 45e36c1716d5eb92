"""The breaker's facts read straight from JSON equal those of the parsed ledger."""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import loopactors.ledger._facts_read as facts_read
import loopactors.ledger._summary_read as summary_read
from loopactors.ledger import BreakerConfig, LedgerError, check_circuit_breaker, parse_ledger
from loopactors.ledger._breaker import decide
from loopactors.ledger._facts import (
    SMALL_LEDGER_BYTES,
    BreakerFacts,
    breaker_facts,
    read_breaker_facts,
)
from loopactors.ledger._facts_read import read_file_facts, read_large_facts
from loopactors.ledger._facts_stream import read_streamed_facts

from .edge_ledgers import EDGE_LEDGERS


def _both(data: bytes, threshold: float = 0.85) -> tuple[Any, Any]:
    """(facts read from bytes, facts of the parsed text), or the error message of each.

    The bytes are read by every quick path, which must agree: the standard library's (for a
    small ledger), msgspec's in chunks of 512 and msgspec's in chunks of 3 (so a short ledger
    crosses chunk boundaries), msgspec's on a file, and the block reader of a file with a huge
    attempt (also with blocks of 7 bytes and every error past 4 characters kept as its first
    line only).
    """
    readers: list[Callable[[bytes, float], BreakerFacts]] = [
        read_breaker_facts,
        read_large_facts,
        _in_chunks_of_3,
        _from_file,
        _streamed,
        _streamed_in_tiny_blocks,
    ]
    answers: list[Any] = []
    for read in readers:
        try:
            answers.append(read(data, threshold))
        except (LedgerError, RecursionError) as exc:  # msgspec's own limit on nesting
            answers.append(("error", str(exc)))
    for answer in answers[1:]:
        assert answer == answers[0]
    try:
        ledger = parse_ledger(data.decode("utf-8", errors="replace"))
        slow: Any = breaker_facts(ledger.attempts, threshold)
    except (LedgerError, RecursionError) as exc:
        slow = ("error", str(exc))
    return answers[0], slow


def _in_chunks_of_3(data: bytes, threshold: float) -> BreakerFacts:
    chunk = facts_read._CHUNK
    facts_read._CHUNK = 3
    try:
        return read_large_facts(data, threshold)
    finally:
        facts_read._CHUNK = chunk


def _from_file(data: bytes, threshold: float) -> BreakerFacts:
    """``--check`` on a file above the small size (its bytes read into a mapping)."""
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.seek(0)
        return read_file_facts(handle, threshold)


def _streamed(data: bytes, threshold: float) -> BreakerFacts:
    """The block reader as ``--check`` runs it on a file with a huge attempt."""
    long_attempt = facts_read._LONG_ATTEMPT
    facts_read._LONG_ATTEMPT = -1  # every ledger goes to the block reader
    try:
        return _from_file(data, threshold)
    finally:
        facts_read._LONG_ATTEMPT = long_attempt


def _streamed_in_tiny_blocks(data: bytes, threshold: float) -> BreakerFacts:
    saved = summary_read._BLOCK, summary_read._MEMO_CHARS, summary_read._LONG
    summary_read._BLOCK, summary_read._MEMO_CHARS, summary_read._LONG = 7, 4, 20
    try:
        facts = read_streamed_facts(io.BytesIO(data).read, threshold)
    finally:
        summary_read._BLOCK, summary_read._MEMO_CHARS, summary_read._LONG = saved
    return read_large_facts(data, threshold) if facts is None else facts


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
        "tokensUsed": st.sampled_from([0, 0.1, 0.2, 1e308, 10**400, 2**53 - 1, None])
        | st.integers(0, 2**60)
        | values,
        "extra": values,
    },
)


@settings(max_examples=300)
@given(st.lists(attempt, max_size=16), st.sampled_from([0.3, 0.85, 1.0]))
@example([{"tokensUsed": 10**400}, {"tokensUsed": 0.1}], 0.85)  # int sum overflows a float
def test_quick_read_equals_parsed_ledger(attempts: list[dict[str, Any]], threshold: float) -> None:
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    quick, slow = _both(data, threshold)
    assert quick == slow


@pytest.mark.parametrize("data", EDGE_LEDGERS)
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


def test_a_long_run_of_similar_errors_judged_a_chunk_at_a_time() -> None:
    # Chunks of one repeated text, of two similar texts, then one that is not similar.
    error = "TypeError: Cannot read properties of undefined (reading 'id')"
    attempts = [{"outcome": "failure", "error": "Something else entirely", "tokensUsed": 7}]
    attempts += [
        {"outcome": "failure", "action": f"retry {i}", "tokensUsed": 100,
         "error": f"{error}\n    at handler (app.js:{i % 2}:5)" if i > 1500 else error}
        for i in range(3000)
    ]  # fmt: skip
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    assert len(data) > SMALL_LEDGER_BYTES
    quick, slow = _both(data)
    assert quick == slow
    assert (quick.failure_run, quick.same_error, quick.tokens_used) == (3001, 3000, 300007)


def test_token_sums_past_the_exact_integers_add_as_doubles_in_order() -> None:
    # 2**53 + 1 is no double: added one at a time, oldest first, the ones are lost.
    attempts = [{"tokensUsed": 2**53}] + [{"tokensUsed": 1} for _ in range(1200)]
    quick, slow = _both(json.dumps({"goal": "g", "attempts": attempts}).encode())
    assert quick == slow
    assert quick.tokens_used == float(2**53)
