from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopactors.ledger import (
    Attempt,
    AttemptSummary,
    BreakerConfig,
    ErrorGroup,
    Ledger,
    PruneConfig,
    build_context_injection,
    calculate_similarity,
    encode_json,
    error_signature,
    format_summary,
    prune_ledger,
    summarize_attempts,
)
from loopactors.ledger._grouping import group_signatures


def ledger(*attempts: Attempt) -> Ledger:
    return Ledger(goal="ship it", attempts=attempts)


def test_prune_window_traces_and_collapse_with_group_head() -> None:
    trace = "Error: boom at /x/y.js:1:2\n" + "\n".join(f"  at f{i}" for i in range(20))
    attempts = [
        Attempt(iteration=1, action="old", outcome="success"),
        Attempt(iteration=2, action="a", outcome="failure", error=trace, tokens_used=5),
        Attempt(iteration=3, action="b", outcome="failure", error="Error: boom at /z/y.js:9"),
        Attempt(
            iteration=4, action="c", outcome="failure", error="Error: boom at /q/y.js", repeated=4
        ),
        Attempt(iteration=5, action="d", outcome="noop"),
        Attempt(iteration=6, action="e", outcome="failure", error="Error: boom at y.js"),
    ]
    pruned = prune_ledger(
        Ledger(goal="g", started_at="t", attempts=tuple(attempts)), PruneConfig(max_trace_lines=2)
    )
    assert pruned.started_at == "t"
    head, noop, last = pruned.attempts
    assert head.action == "a"  # the head keeps its own fields
    assert head.tokens_used == 5
    assert head.iteration == 4
    assert head.repeated == 3
    assert head.error == "Error: boom at /x/y.js:1:2\n  at f0\n  \u2026 (19 more lines pruned)"
    assert noop.action == "d"
    assert last.repeated is msgspec.UNSET  # the previous output entry is the noop
    assert encode_json(last, indent=None) == (
        '{"iteration":6,"action":"e","outcome":"failure","error":"Error: boom at y.js"}'
    )
    # An entry that already carried ``repeated`` keeps counting from it.
    again = prune_ledger(ledger(attempts[3], attempts[3]))
    assert again.attempts[0].repeated == 5
    # The input is never modified.
    assert attempts[1].repeated is msgspec.UNSET
    assert attempts[1].iteration == 2


def test_prune_drops_top_level_extras_and_omits_missing_started_at() -> None:
    assert encode_json(prune_ledger(ledger()), indent=None) == '{"goal":"ship it","attempts":[]}'


def test_prune_null_error_does_not_crash() -> None:
    pruned = prune_ledger(ledger(Attempt(outcome="failure", error=None)))
    assert pruned.attempts[0].error is None


def test_summary_counts_groups_and_actions() -> None:
    summary = summarize_attempts(
        ledger(
            Attempt(action="a", outcome="success", tokens_used=10),
            Attempt(action="b", outcome="noop"),
            Attempt(action="a", outcome="failure", error="\nError: x at /p/q.js:3"),
            Attempt(outcome="weird", error="Error: x at /r/q.js:4"),
            Attempt(action="c", outcome="failure", error="totally different"),
            Attempt(action="c", outcome="failure", error=""),
            Attempt(action="c"),
        )
    )
    assert summary == AttemptSummary(
        total_attempts=7,
        successes=1,
        failures=5,
        noops=1,
        tokens_used=10,
        distinct_errors=(
            ErrorGroup(signature="Error: x at q.js", count=2, sample=""),
            ErrorGroup(signature="totally different", count=1, sample="totally different"),
        ),
        actions_tried=("a", "b", None, "c"),
    )
    assert format_summary(summary) == (
        "Attempts: 7  (1 ok \u00b7 5 failed \u00b7 1 no-op)\nTokens used: 10\n"
        "Distinct errors (most frequent first):\n  (2\u00d7) \n  (1\u00d7) totally different\n"
        "Actions tried:\n  - a\n  - b\n  - undefined\n  - c"
    )
    assert encode_json(summary).count('"actionsTried"') == 1


def test_summary_first_match_and_stable_sort() -> None:
    # The third error is closer to the second group but joins the first one it matches.
    errors = ["connection refused", "connection reset by peer", "connection reset by"]
    failures = [Attempt(outcome="failure", error=e) for e in errors]
    summary = summarize_attempts(ledger(*failures), 0.45)
    assert [(g.sample, g.count) for g in summary.distinct_errors] == [
        ("connection refused", 2),
        ("connection reset by peer", 1),
    ]
    errors = ["one kind", "two kind", "one kind!", "two kind!", "two kind"]
    summary = summarize_attempts(ledger(*[Attempt(outcome="failure", error=e) for e in errors]), 1)
    assert [(g.sample, g.count) for g in summary.distinct_errors] == [
        ("two kind", 2),
        ("one kind", 1),
        ("one kind!", 1),
        ("two kind!", 1),
    ]


def test_summary_validates_threshold() -> None:
    with pytest.raises(ValueError, match=r"If you meant 85%, use 0\.85"):
        summarize_attempts(ledger(), 85)


def test_format_summary_minimal() -> None:
    assert format_summary(summarize_attempts(ledger())) == (
        "Attempts: 0  (0 ok \u00b7 0 failed \u00b7 0 no-op)"
    )


def test_context_injection_full() -> None:
    text = build_context_injection(
        ledger(
            Attempt(action="try A", outcome="failure", error="Error: a\n at x", tokens_used=1500.0),
            Attempt(action="try A", outcome="failure", error="Error: a", tokens_used=0),
        )
    )
    assert text == (
        "## Loop Context (managed)\n\n**Goal:** ship it\n"
        "**Progress:** iteration 2 \u00b7 0 ok \u00b7 2 failed \u00b7 1500 tokens\n\n"
        "**Already tried (do NOT repeat):**\n- try A\n\n"
        "**Failure patterns:**\n- (2\u00d7) Error: a\n\n"
        "**Most recent error (pruned):**\n```\nError: a\n at x\n```\n\n"
        "> Circuit breaker: OK (2/10 iterations used)."
    )


def test_context_injection_minimal_and_stop() -> None:
    assert build_context_injection(ledger()) == (
        "## Loop Context (managed)\n\n**Goal:** ship it\n"
        "**Progress:** iteration 0 \u00b7 0 ok \u00b7 0 failed\n\n"
        "> Circuit breaker: OK (0/10 iterations used)."
    )
    text = build_context_injection(
        ledger(Attempt(action="x", outcome="noop")), BreakerConfig(max_iterations=1)
    )
    assert text.endswith(
        "\n> STOP \u2014 circuit breaker tripped (max-iterations). "
        "Iteration cap reached (1 \u2265 1). Escalating."
    )


def test_context_injection_validation_order() -> None:
    with pytest.raises(ValueError, match=r"^similarityThreshold"):
        build_context_injection(ledger(), BreakerConfig(similarity_threshold=2, max_iterations=0))
    with pytest.raises(ValueError, match=r"^window"):
        build_context_injection(ledger(), prune=PruneConfig(window=0))


def naive_groups(signatures: list[str], threshold: float) -> list[int]:
    heads: list[str] = []
    result = []
    for sig in signatures:
        for index, head in enumerate(heads):
            if calculate_similarity(head, sig) >= threshold:
                result.append(index)
                break
        else:
            heads.append(sig)
            result.append(len(heads) - 1)
    return result


words = st.sampled_from(["Error", "timeout", "conn", "é", "😀", "x", "refused", "#", "at", "ABC"])
signature = st.lists(words, max_size=6).map(" ".join)


@settings(max_examples=300)
@given(
    st.lists(signature, max_size=40),
    st.sampled_from([1e-7, 0.2, 0.4, 0.5, 0.6, 0.75, 0.85, 0.9, 1.0]),
)
def test_fast_grouping_equals_naive(signatures: list[str], threshold: float) -> None:
    assert group_signatures(signatures, threshold) == naive_groups(signatures, threshold)


@settings(max_examples=100)
@given(st.lists(st.text(alphabet="abcAB 😀é\u03a3", max_size=8), max_size=30), st.floats(0.01, 1))
def test_fast_grouping_equals_naive_any_text(signatures: list[str], threshold: float) -> None:
    assert group_signatures(signatures, threshold) == naive_groups(signatures, threshold)


def test_two_thousand_distinct_cjk_errors_group_like_naive() -> None:
    errors = [f"Error: failure number {chr(0x4E00 + i)} in module {i % 97}" for i in range(2000)]
    sigs = [error_signature(e) for e in errors]
    assert group_signatures(sigs, 0.85) == naive_groups(sigs, 0.85)


def _vocabulary_errors(count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(25)]
    return [
        "Error: " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))
        for _ in range(count)
    ]


@pytest.mark.parametrize("threshold", [0.8, 0.85, 0.95, 1.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_grouping_with_common_grams_and_empty_parts_equals_naive(
    threshold: float, seed: int
) -> None:
    # Over 64 distinct signatures sharing "Error: ": the common grams are left out of the
    # parts, short signatures leave parts empty, and many pairs are near the threshold.
    sigs = _vocabulary_errors(150, seed)
    assert len(set(sigs)) > 64
    assert group_signatures(sigs, threshold) == naive_groups(sigs, threshold)


@settings(max_examples=10, deadline=None)
@given(st.lists(signature, min_size=70, max_size=90), st.sampled_from([0.8, 0.85, 0.95]))
def test_fast_grouping_equals_naive_many(signatures: list[str], threshold: float) -> None:
    assert group_signatures(signatures, threshold) == naive_groups(signatures, threshold)


def streamed_groups(signatures: list[str], threshold: float) -> list[int]:
    """The groups of ``PartsGrouper`` fed one signature at a time, as ``--inject``'s
    summary feeds it at any threshold (common grams from the distinct signatures)."""
    from loopactors.ledger._grouping import PartsGrouper, common_grams

    distinct = list(dict.fromkeys(signatures))
    grouper = PartsGrouper(threshold, common_grams(distinct))
    group_of = {sig: grouper.add(sig) for sig in distinct}
    return [group_of[sig] for sig in signatures]


@settings(max_examples=200)
@given(st.lists(signature, max_size=40), st.sampled_from([1e-7, 0.2, 0.4, 0.5, 0.6, 0.75, 0.79]))
def test_one_at_a_time_below_the_parts_threshold_equals_naive(
    signatures: list[str], threshold: float
) -> None:
    assert streamed_groups(signatures, threshold) == naive_groups(signatures, threshold)


@pytest.mark.parametrize("threshold", [0.1, 0.3, 0.5, 0.7])
@pytest.mark.parametrize("seed", [1, 2])
def test_one_at_a_time_with_common_grams_below_the_parts_threshold_equals_naive(
    threshold: float, seed: int
) -> None:
    sigs = _vocabulary_errors(300, seed)
    assert len(set(sigs)) > 64  # common grams sampled: counted through the masks
    assert streamed_groups(sigs, threshold) == naive_groups(sigs, threshold)


def test_the_key_index_keeps_every_group_of_a_key_through_growth() -> None:
    from loopactors.ledger._grouping import _KeyIndex, _short

    index = _KeyIndex()
    for group in range(20_000):  # grows from 4,096 buckets several times
        index.add_group([_short(hash(("part", group % 5_000))), _short(hash(("all", group)))])
    assert sorted(index.find(_short(hash(("part", 7))))) == [7, 5_007, 10_007, 15_007]
    assert index.find(_short(hash(("all", 19_999)))) == [19_999]
    assert list(index.find(_short(hash(("no such part",))))) == []
    # Keys equal in their low 32 bits meet: a candidate more, never one less.
    assert _short(0) == _short(1 << 32)
    assert _short(1 << 31) == 1  # never 0, the mark of an empty slot


def test_the_key_index_tells_keys_apart_by_their_low_28_bits_through_growth() -> None:
    from loopactors.ledger._grouping import _KeyIndex

    index = _KeyIndex()
    key = 0x2ABC_D123
    index.add_group([key])
    for group in range(1, 110_000):  # past 2**16 buckets: the marks' bits move into them
        index.add_group([group * 2_654_435_761 % 2**31 | 1 << 30, -group])
    assert index.bits > 16
    assert 0 in index.find(key)
    assert 0 in index.find(key ^ 1 << 29)  # bits 28-31 are not kept: a candidate more
    assert 0 not in index.find(key ^ 1 << 12)
    assert 0 not in index.find(key ^ 1 << 27)
    assert index.find(-109_999) == [109_999]
    assert sorted(index.find(-5)) == [5]
