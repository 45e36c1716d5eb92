from __future__ import annotations

import pytest

from loopactors.ledger import (
    Attempt,
    BreakerConfig,
    BreakerDecision,
    DailySpend,
    Ledger,
    apply_daily_budget,
    check_circuit_breaker,
    decode_daily_spend,
    encode_daily_spend,
    encode_json,
    newest_attempt_tokens,
    record_daily_spend,
    total_tokens,
    trailing_failure_run,
    utc_day,
)


def fail(error: str | None = None, action: str | None = "fix", tokens: float = 0) -> Attempt:
    if error is None:
        return Attempt(action=action, outcome="failure", tokens_used=tokens)
    return Attempt(action=action, outcome="failure", error=error, tokens_used=tokens)


def ledger(*attempts: Attempt) -> Ledger:
    return Ledger(goal="g", attempts=attempts)


def test_trailing_failure_run_stops_at_anything_else() -> None:
    a, b = fail("a"), fail("b")
    for other in ("noop", "success", "Failure", None):
        attempts = [a, Attempt(outcome=other), b]
        assert trailing_failure_run(attempts) == [b]
    assert trailing_failure_run([a, b]) == [a, b]
    assert trailing_failure_run([Attempt()]) == []


def test_total_tokens_sums_doubles_and_skips_missing() -> None:
    assert (
        total_tokens(ledger(Attempt(tokens_used=None), Attempt(), Attempt(tokens_used=1.5))) == 1.5
    )
    assert total_tokens(ledger(Attempt(tokens_used=1000.0), Attempt(tokens_used=500))) == 1500
    assert total_tokens(ledger(Attempt(tokens_used=0.1), Attempt(tokens_used=0.2))) == 0.1 + 0.2


def test_ok_decision_and_json_key_order() -> None:
    decision = check_circuit_breaker(ledger(Attempt(outcome="success", tokens_used=1500.0)))
    assert decision == BreakerDecision(
        iterations=1,
        tokens_used=1500,
        should_continue=True,
        escalate=False,
        trigger="ok",
        reason="Within limits \u2014 cleared to continue.",
    )
    assert encode_json(decision, indent=None) == (
        '{"iterations":1,"tokensUsed":1500,"shouldContinue":true,"escalate":false,'
        '"trigger":"ok","reason":"Within limits \u2014 cleared to continue."}'
    )


def test_stagnation_counts_the_whole_matching_tail() -> None:
    err = "Error: connect ECONNREFUSED 127.0.0.1:5432"
    attempts = [fail("other problem entirely", action=f"a{i}") for i in range(1)]
    attempts += [fail(err, action=f"step {i} " + "x" * i * 5) for i in range(4)]
    decision = check_circuit_breaker(ledger(*attempts))
    assert decision.trigger == "stagnation"
    assert not decision.should_continue
    assert decision.escalate
    assert decision.reason == (
        'Same error repeated 4\u00d7 in a row (threshold 3): "Error: connect ECONNREFUSED '
        '#.#.#.#". Escalating instead of retrying.'
    )


def test_stagnation_compares_with_last_not_neighbour() -> None:
    # b is similar to both a and c, but a and c are not similar: only b, c count.
    a, b, c = "aaaa bbbb cccc", "aaaa bbbb cccc dddd", "aaaa bbbb cccc dddd eeee"
    config = BreakerConfig(stagnation_threshold=2, similarity_threshold=0.7)
    steps = [fail(e, action=f"act {i} " + "q" * 9 * i) for i, e in enumerate([a, b, c])]
    decision = check_circuit_breaker(ledger(*steps), config)
    assert decision.reason.startswith("Same error repeated 2\u00d7")


def test_failures_without_error_stagnate_with_empty_signature() -> None:
    decision = check_circuit_breaker(ledger(*[fail(action=f"{i}" * 9) for i in range(3)]))
    assert decision.reason == (
        'Same error repeated 3\u00d7 in a row (threshold 3): "". Escalating instead of retrying.'
    )
    nulls = [Attempt(outcome="failure", error=None, action=str(i) * 9) for i in range(3)]
    assert check_circuit_breaker(ledger(*nulls)).trigger == "stagnation"


def test_frustration() -> None:
    errors = ["disk full", "network is unreachable", "permission denied here"]
    steps = [fail(e, action="run the test suite again") for e in errors]
    decision = check_circuit_breaker(ledger(*steps))
    assert decision.reason == (
        "Semantic looping detected: agent repeated highly similar action 3\u00d7 in a row "
        '(threshold 3): "run the test suite again". Escalating.'
    )


def test_frustration_missing_actions() -> None:
    errors = ["disk full", "network is unreachable", "permission denied here"]
    missing = [Attempt(outcome="failure", error=e) for e in errors]
    decision = check_circuit_breaker(ledger(*missing))
    assert decision.trigger == "frustration"
    assert decision.reason.endswith('(threshold 3): "undefined". Escalating.')
    # Upstream crashes comparing a missing action with a string; here the walk just ends.
    mixed = [*missing[:2], fail(errors[2], action="x")]
    assert check_circuit_breaker(ledger(*mixed)).trigger == "ok"


def test_no_progress() -> None:
    errors = ["disk full", "zebra", "quantum flux", "ok no", "tea"]
    steps = [fail(e, action=e.upper() * 2) for e in errors]
    decision = check_circuit_breaker(ledger(*steps))
    assert decision.trigger == "no-progress"
    assert decision.reason == ("5 consecutive failures with no progress (threshold 5). Escalating.")


def test_token_budget_equality_trips_and_formats() -> None:
    config = BreakerConfig(token_budget=1500)
    hit = ledger(Attempt(outcome="success", tokens_used=1000.0), Attempt(tokens_used=500))
    decision = check_circuit_breaker(hit, config)
    assert decision.trigger == "token-budget"
    assert decision.reason == (
        "Token budget reached (1500 \u2265 1500). Escalating to avoid cost blowup."
    )
    under = ledger(Attempt(outcome="success", tokens_used=1499))
    assert check_circuit_breaker(under, config).trigger == "ok"


def test_max_iterations_counts_entries() -> None:
    steps = [Attempt(outcome="noop", iteration=1) for _ in range(10)]
    decision = check_circuit_breaker(ledger(*steps))
    assert decision.reason == "Iteration cap reached (10 \u2265 10). Escalating."


def test_trigger_order() -> None:
    steps = [fail("same", action="same", tokens=100) for _ in range(10)]
    config = BreakerConfig(token_budget=1)
    assert check_circuit_breaker(ledger(*steps), config).trigger == "stagnation"
    config = BreakerConfig(token_budget=1, stagnation_threshold=11)
    assert check_circuit_breaker(ledger(*steps), config).trigger == "frustration"
    config = BreakerConfig(token_budget=1, stagnation_threshold=11, frustration_threshold=11)
    assert check_circuit_breaker(ledger(*steps), config).trigger == "no-progress"
    config = BreakerConfig(
        token_budget=1, stagnation_threshold=11, frustration_threshold=11, no_progress_threshold=11
    )
    assert check_circuit_breaker(ledger(*steps), config).trigger == "token-budget"
    config = BreakerConfig(
        stagnation_threshold=11, frustration_threshold=11, no_progress_threshold=11
    )
    assert check_circuit_breaker(ledger(*steps), config).trigger == "max-iterations"


def test_breaker_validates_first() -> None:
    with pytest.raises(ValueError, match=r"^maxIterations must be a positive integer"):
        check_circuit_breaker(ledger(), BreakerConfig(max_iterations=0))


def test_a_config_validated_once_is_not_checked_again() -> None:
    # The runtime validates a loop's config once, then checks every round against it.
    config = BreakerConfig(max_iterations=2)
    steps = ledger(fail(), fail())
    assert check_circuit_breaker(steps, config, validated=True) == check_circuit_breaker(
        steps, config
    )
    unchecked = BreakerConfig(max_iterations=0)
    assert check_circuit_breaker(ledger(), unchecked, validated=True).escalate


def test_daily_spend_pure_step() -> None:
    first = record_daily_spend(None, "2026-01-01", 100)
    assert first == DailySpend(date="2026-01-01", tokens_used_today=100)
    assert record_daily_spend(first, "2026-01-01", 50.0).tokens_used_today == 150
    assert record_daily_spend(first, "2026-01-02", 7).tokens_used_today == 7
    assert record_daily_spend(first, "2026-01-01", -30).tokens_used_today == 70
    assert encode_daily_spend(first) == '{\n  "date": "2026-01-01",\n  "tokensUsedToday": 100\n}'
    assert decode_daily_spend(encode_daily_spend(first)) == first
    for corrupt in (b"", b"{", b'{"date": "x", "tokensUsedToday": "5"}', b"[]"):
        assert decode_daily_spend(corrupt) is None
    assert utc_day(0) == "1970-01-01"
    assert utc_day(86400 * 365 - 1) == "1970-12-31"


def test_daily_budget_decision() -> None:
    assert newest_attempt_tokens(ledger()) == 0
    assert newest_attempt_tokens(ledger(Attempt(tokens_used=5), Attempt())) == 0
    assert newest_attempt_tokens(ledger(Attempt(tokens_used=5))) == 5
    ok = check_circuit_breaker(ledger(Attempt(outcome="success", tokens_used=10)))
    assert apply_daily_budget(ok, "ci-sweeper", 999, 1000) is ok
    tripped = apply_daily_budget(ok, "ci-sweeper", 1000.0, 1000)
    assert encode_json(tripped, indent=None) == (
        '{"iterations":1,"tokensUsed":10,"shouldContinue":false,"escalate":true,'
        '"trigger":"daily-budget","reason":"Daily token spend for pattern \\"ci-sweeper\\" '
        'reached 1000 (cap 1000). Escalating to avoid cost blowup."}'
    )
    escalated = check_circuit_breaker(ledger(), BreakerConfig(max_iterations=1)).escalate
    assert escalated is False
    stop = check_circuit_breaker(ledger(Attempt()), BreakerConfig(max_iterations=1))
    assert apply_daily_budget(stop, "p", 10**9, 1) is stop


def test_hundred_thousand_same_failures_is_fast() -> None:
    steps = tuple(fail("Error: x at /a/b.js:1:2", action="same") for _ in range(100_000))
    decision = check_circuit_breaker(Ledger(goal="g", attempts=steps))
    assert decision.reason.startswith("Same error repeated 100000\u00d7")
