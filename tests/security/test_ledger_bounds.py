"""The ledger's work is bounded: memory for one huge attempt, the grouping's operations on
adversarial errors, and the time a round's prompt waits for its ledger block (docs/ledger.md).

Before: ``context --summary`` on one 50 MB error took 3.9 GB (a list of one trigram string
per character, and a list of part sums for each of thousands of part counts); distinct
errors just below the similarity threshold made the grouping enumerate every pair of empty
parts (80 of them: 36 million index look-ups); and an ``--inject-ledger`` loop built its
block on the event loop. Counted here, never timed.
"""

from __future__ import annotations

import io
import random
import string
import threading
import tracemalloc
from array import array
from collections.abc import Callable
from typing import Any

import pytest

from loopactors.ledger import _grouping
from loopactors.ledger._text import trigrams
from loopactors.runtime import _context_builder, open_runtime

from ..runtime import round_fns
from ..runtime.conftest import memory_config


def test_the_trigrams_of_a_long_text_hold_no_gram_per_character() -> None:
    random.seed(7)
    text = "".join(random.choice(string.ascii_lowercase + " ") for _ in range(4_000_000))
    tracemalloc.start()
    try:
        grams = trigrams(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(grams) <= 27**3
    # One copy of the text (lowered) and the distinct grams; a string per character was
    # 4 million strings of about 52 bytes (200 MB).
    assert peak < 2 * len(text), peak


def test_a_huge_signature_probes_a_few_part_counts() -> None:
    """A 20 MB error's signature has some 64,000 distinct grams: it probes the heads of a few
    part counts, not one count (and one list of part sums) per possible head size."""
    assert len(_grouping._probe_counts(64_000, 0.85)) <= 3
    assert len(_grouping._probe_counts(1_090, 0.85)) <= 3


def test_a_heads_numbers_take_two_bytes_and_widen_when_they_do_not_fit() -> None:
    """50,000 heads: a head's size, common-gram count, part count and empty parts took 4-8
    bytes each, now 2 while they fit (docs/benchmarks.md); a signature of more than 65,535
    grams widens them, and the groups stay exact."""
    random.seed(3)
    alphabet = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 90))  # no case: 729,000 grams
    huge = "".join(random.choice(alphabet) for _ in range(80_000))
    small = [f"Error: step {w} of {v} failed" for w in string.ascii_lowercase for v in "xyz"]
    sigs = [*small[:40], huge, huge[:-5] + "tail", *small[40:], huge[3:]]
    grouper = _grouping.PartsGrouper(0.85)
    before = grouper._head_sizes.typecode
    groups = [grouper.add(sig) for sig in sigs]
    assert groups == _grouping._group_by_prefix(sigs, 0.85)
    assert (before, grouper._head_sizes.typecode) == ("H", "i")
    assert max(grouper._head_sizes) > 65_535
    values = _grouping._append(array("H", [1]), 1 << 40, "Q")
    assert (values.typecode, list(values)) == ("Q", [1, 1 << 40])


def _near_threshold(n: int) -> list[str]:
    """Distinct errors sharing a long common text, each pair just below 0.85 similar."""
    random.seed(1)
    base = "".join(random.choice(string.ascii_lowercase + " ") for _ in range(1000))
    tail = string.ascii_lowercase
    return [base + " " + "".join(random.choice(tail) for _ in range(92)) for _ in range(n)]


def test_grouping_near_threshold_errors_makes_a_bounded_number_of_index_lookups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    finds = 0
    real_find = _grouping._KeyIndex.find

    def counted(self: Any, short: int) -> list[int]:
        nonlocal finds
        finds += 1
        return real_find(self, short)

    monkeypatch.setattr(_grouping._KeyIndex, "find", counted)
    signatures = _near_threshold(120)
    groups = _grouping.group_signatures(signatures, 0.85)
    # The same groups as the reference's scan (first similar head, in order).
    heads: list[frozenset[str]] = []
    expected = []
    for sig in signatures:
        grams = trigrams(sig)
        for i, head in enumerate(heads):
            if len(head & grams) / len(head | grams) >= 0.85:
                expected.append(i)
                break
        else:
            expected.append(len(heads))
            heads.append(grams)
    assert groups == expected
    # At most C(12, 2) pair keys per probed count of each signature (it was C(100, 2)).
    assert finds <= 120 * 3 * 66, finds


async def test_an_inject_ledger_block_is_built_off_the_event_loop_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The block is built in a worker thread; one that takes longer than LEDGER_SECONDS is
    left out of that round (a note says so) and the loop goes on. Real time (a thread's work
    is not virtual): the bound is set to 3 s, which the second round's tiny block stays far
    under and the third one's, held back on purpose, passes."""
    monkeypatch.setattr(_context_builder, "LEDGER_SECONDS", 3.0)
    threads: list[bool] = []
    release = threading.Event()
    from loopactors.ledger import build_context_injection as real

    def slow(ledger: Any, config: Any) -> str:
        threads.append(threading.current_thread() is threading.main_thread())
        if len(threads) == 2:
            release.wait(timeout=60)  # the second block never comes in time
        return real(ledger, config)

    monkeypatch.setattr(_context_builder, "build_context_injection", slow)
    try:
        async with open_runtime(memory_config()) as runtime:
            handle = runtime.handle(await runtime.start(
                "|loop:3| improve it", worker="python:tests.runtime.round_fns:record",
                inject_ledger=True,
            ))  # fmt: skip
            state = await handle.wait()
    finally:
        release.set()
    assert state.completed_rounds == 3
    assert threads == [False, False]  # never on the event loop's thread
    first, second, third = round_fns.PROMPTS[handle.loop_id]
    assert first == "improve it"
    assert second.startswith("## Loop Context (managed)\n\n**Goal:** improve it\n")
    assert "took over 3s to build and is left out of this round" in third


def test_distinct_errors_of_one_vocabulary_need_no_exact_test_per_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Errors made of the same few words (common grams everywhere: every head was a candidate,
    5,000 took minutes) are refused by the exact bound, without rebuilding head grams."""
    built = 0
    real = trigrams

    def counted(text: str) -> frozenset[str]:
        nonlocal built
        built += 1
        return real(text)

    monkeypatch.setattr(_grouping, "trigrams", counted)
    random.seed(5)
    words = [
        "".join(random.choice(string.ascii_lowercase) for _ in range(random.randint(3, 9)))
        for _ in range(60)
    ]
    signatures = ["Error: " + " ".join(random.choice(words) for _ in range(12)) for _ in range(400)]
    groups = _grouping.group_signatures(signatures, 0.85)
    assert groups == list(range(400))  # all distinct, as the reference's scan finds
    # Each signature's grams once or twice (the common sample, its own), and each head's at
    # most once more (when the grouper indexes heads by their uncommon grams): no head
    # rebuilt per pair (before: 80,000 rebuilds for 400).
    assert built <= 3 * 400, built


def _reference_scan(signatures: list[str], threshold: float) -> list[int]:
    heads: list[frozenset[str]] = []
    expected = []
    for sig in signatures:
        grams = trigrams(sig)
        for i, head in enumerate(heads):
            if len(head & grams) / len(head | grams) >= threshold:
                expected.append(i)
                break
        else:
            expected.append(len(heads))
            heads.append(grams)
    return expected


def test_near_threshold_errors_group_with_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors sharing a long text, each pair just below the threshold (some above): every
    head was a candidate and got an exact test (5,000 took minutes). Counted: the grams
    built, and the (size, common grams) classes of heads bounded per signature, both
    linear; the groups are the reference scan's."""
    built = 0
    classes = 0
    real_trigrams, real_fewest = trigrams, _grouping._fewest

    def counted(text: str) -> frozenset[str]:
        nonlocal built
        built += 1
        return real_trigrams(text)

    def fewest(*args: Any) -> int | None:
        nonlocal classes
        classes += 1
        return real_fewest(*args)

    monkeypatch.setattr(_grouping, "trigrams", counted)
    monkeypatch.setattr(_grouping, "_fewest", fewest)
    signatures = _near_threshold(2000)
    groups = _grouping.group_signatures(signatures, 0.85)
    assert 1 < len(set(groups)) < 2000  # some join a group, most do not
    # Three per signature (sample, own, indexed once), plus the exact tests before the
    # grouper switches: at most _DENSE_AFTER heads for each of as many signatures.
    assert built <= 3 * 2000 + _grouping._DENSE_AFTER**2, built
    assert classes <= 12 * 2000, classes
    monkeypatch.setattr(_grouping, "trigrams", real_trigrams)
    assert groups[:300] == _reference_scan(signatures[:300], 0.85)
    # The same first-match groups on mixed lengths and tails (small alphabet: many match).
    random.seed(2)
    base = "".join(random.choice(string.ascii_lowercase + " ") for _ in range(1000))
    mixed = [
        base[: random.randint(850, 1000)]
        + " "
        + "".join(random.choice("abcdefgh") for _ in range(random.randint(40, 140)))
        for _ in range(500)
    ]
    assert _grouping.group_signatures(mixed, 0.85) == _reference_scan(mixed, 0.85)


def _peak(call: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_signature_of_a_long_error_holds_few_copies_of_it() -> None:
    """A long one-line error with many whitespace runs: ``re.sub`` held a string per piece
    (about 5x the text on top of it); blocks of pieces hold about two copies."""
    from loopactors.ledger._text import error_signature

    random.seed(11)
    text = "Error: " + "".join(
        random.choice(string.ascii_lowercase + "  ") for _ in range(4_000_000)
    )
    sig, peak = _peak(lambda: error_signature(text))
    assert sig == _text_reference_signature(text)
    assert peak < 2.5 * len(text), peak


def _text_reference_signature(text: str) -> str:
    """The signature by plain ``re.sub`` (what the reference's replace chain does)."""
    from loopactors.ledger import _text as t
    from loopactors.ledger._js import trim

    sig = trim(t._first_line(text))
    for pattern, repl in (
        (t._ISO_TS, "<ts>"), (t._HEX_ADDR, "<addr>"), (t._PATH, t._basename),
        (t._LINE_COL, ""), (t._NUMBER, "#"), (t._WS_RUN, " "),
    ):  # fmt: skip
        sig = pattern.sub(repl, sig)
    return trim(sig)


def test_a_long_text_is_read_back_from_the_flat_buffer_without_a_second_copy() -> None:
    from loopactors.ledger._compact import TextList

    texts = TextList()
    texts.append("x" * 4_000_000)
    text, peak = _peak(lambda: texts[0])
    assert text == "x" * 4_000_000
    assert peak < 1.2 * len(text), peak


def test_a_long_text_goes_into_and_out_of_the_flat_buffer_a_block_at_a_time() -> None:
    """Appending a long text held its encoded copy beside the buffer, and printing it a
    decoded copy and an f-string copy: the blocks hold a fraction of it. Multi-byte and
    astral characters and lone surrogates split across blocks come back the same."""
    from loopactors.ledger._compact import TextList

    text = ("ab\u00e9\U0001f600\ud800c" * 700_000)[:4_000_001]
    texts = TextList()
    texts.append("short")
    size = len(text.encode("utf-8", "surrogatepass"))
    _, peak = _peak(lambda: texts.append(text))
    assert peak < 1.3 * size, peak  # the buffer itself (it was the buffer and a copy: 2x)
    pieces: list[str] = []
    _, peak = _peak(lambda: texts.write(1, pieces.append))
    assert "".join(pieces) == text == texts[1]
    assert max(len(p) for p in pieces) <= 1 << 16
    written = 0

    def count(piece: str) -> None:
        nonlocal written
        written += len(piece)

    _, peak = _peak(lambda: texts.write(1, count))
    assert written == len(text)
    assert peak < 0.25 * len(text), peak  # a decoded copy alone: 4 bytes a character


@pytest.mark.parametrize("as_json", [False, True])
def test_the_summary_of_one_huge_error_holds_one_copy_of_its_line(as_json: bool) -> None:
    """One 2 MB error of words: the summary held the reader's growing buffer, the decoded
    error, its signature, and the group's head and sample (~5x the file). Now its string is
    read a block at a time and only its first line is kept (as UTF-8); the signature is
    masked, its grams taken and it is printed a stretch at a time. Same output as the parsed
    ledger's summary."""
    import io
    import json

    from loopactors.ledger import format_summary, parse_ledger, summarize_attempts
    from loopactors.ledger._js import write_json
    from loopactors.ledger._summary_read import (
        format_streamed_summary,
        read_summary,
        write_summary_json,
    )

    random.seed(5)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(2_000_000))
    error = f"Error: at 2026-12-01T10:00:00Z {words} /x/y.js:12:3\n  at f (z.js:1:1)"
    data = json.dumps(
        {"goal": "g", "attempts": [{"outcome": "failure", "error": error, "action": "a"}]}
    ).encode()
    del words, error

    written = 0

    def count(piece: str) -> None:
        nonlocal written
        written += len(piece)

    def summarize(write: Callable[[str], object]) -> None:
        summary = read_summary(io.BytesIO(data).read)
        assert summary is not None
        assert summary.long  # the huge error's line only
        (write_summary_json if as_json else format_streamed_summary)(summary, write)

    _, peak = _peak(lambda: summarize(count))
    # The line (~1x), blocks, and the set of its grams (~20,000 of this alphabet, 2-3 MB
    # with the frozenset made of it); it was about 5x the file.
    assert peak < len(data) + (4 << 20), peak
    out = io.StringIO()
    summarize(out.write)
    text = out.getvalue()
    assert written == len(text)
    expected = summarize_attempts(parse_ledger(data.decode()))
    if as_json:
        out = io.StringIO()
        write_json(expected, out.write)
        assert text == out.getvalue()
    else:
        assert text == format_summary(expected)


def _late_shared_text(near: int, seed: int = 1) -> list[str]:
    """2,100 errors of random words, then ``near`` errors sharing 1,000 characters with
    distinct 92-letter tails: the common grams, sampled from the first 2,048 distinct
    errors, miss the shared text."""
    from loopactors.ledger._text import error_signature

    rng = random.Random(seed)
    letters = string.ascii_lowercase
    base = "".join(rng.choice(letters + " ") for _ in range(1000))
    errors = [
        "Setup: " + " ".join("".join(rng.choice(letters) for _ in range(7)) for _ in range(8))
        for _ in range(2100)
    ]
    errors += [base + " " + "".join(rng.choice(letters) for _ in range(92)) for _ in range(near)]
    return list(dict.fromkeys(error_signature(e) for e in errors))


def _group_as_the_summary(sigs: list[str]) -> tuple[list[int], _grouping.PartsGrouper]:
    grouper = _grouping.PartsGrouper(0.85, _grouping.common_grams(sigs[:2048]))
    return [grouper.add(sig) for sig in sigs], grouper


def test_a_key_of_another_part_count_met_in_the_index_is_only_a_candidate() -> None:
    """Keys are told apart by 28 bits: a head of a part count no size within reach uses
    can meet a key. It raised ``KeyError`` (found on 2,150 errors); it is no candidate."""
    sigs = _late_shared_text(50)
    groups, _ = _group_as_the_summary(sigs)
    assert groups == _grouping._group_by_prefix(sigs, 0.85)


def test_a_shared_text_the_sample_missed_becomes_common_as_heads_come() -> None:
    """Its grams were counted through the index for every head that holds them (5,000
    such errors: minutes); a gram held by more than 64 heads (and one in 32) becomes common
    instead, so no index entry list outgrows that, and the groups stay exact."""
    sigs = _late_shared_text(400)
    groups, grouper = _group_as_the_summary(sigs)
    assert groups == _grouping._group_by_prefix(sigs, 0.85)
    dense = grouper._dense
    assert dense is not None  # the counting took over
    heads = len(grouper.heads)
    bound = max(_grouping._PROMOTE_MIN, heads // 32)
    assert max(len(found) for found in dense.postings.values()) <= bound
    assert len(dense.common) > len(grouper.common) + 500  # the shared text's grams


@pytest.mark.parametrize("operation", ["--check", "--status"])
def test_check_and_status_of_one_huge_error_hold_one_copy_of_it(
    operation: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """One 2 MB error: ``--check`` held the file, the attempt's bytes joined for its decode,
    the decoded error and its signature (~4x the file), ``--status`` the decoded text, the
    parsed ledger, the summary's and the breaker's signatures and the output too (7-10x).
    Now the file's bytes are freed once a huge attempt is seen and the ledger is read a block
    at a time (the breaker's facts, then for ``--status`` the summary): the error's first line
    is held once. Same output as the whole read's."""
    import json

    from loopactors.ledger import (
        BreakerConfig,
        check_circuit_breaker,
        format_summary,
        parse_ledger,
        summarize_attempts,
    )
    from loopactors.ledger._cli import main

    random.seed(7)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(2_000_000))
    error = f"Error: at 2026-12-01T10:00:00Z {words} /x/y.js:12:3\n  at f (z.js:1:1)"
    attempts = [
        {"outcome": "success", "action": "b", "tokensUsed": 3},
        {"outcome": "failure", "error": error, "action": "a", "tokensUsed": 7},
    ]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    del words, error, attempts
    path = tmp_path / "ledger.json"
    path.write_bytes(data)

    args = [operation, "--ledger", str(path), "--no-progress", "1"]
    code, peak = _peak(lambda: main(args))
    out = capsys.readouterr().out
    # The line (~1x), the reader's blocks and the set of the line's grams (2-3 MB); the
    # file's bytes, held while msgspec splits the attempts, are freed before the line is read.
    assert peak < len(data) + (4 << 20), peak
    ledger = parse_ledger(data.decode())
    decision = check_circuit_breaker(ledger, BreakerConfig(no_progress_threshold=1))
    assert decision.escalate
    verdict = "ESCALATE" if decision.escalate else "CONTINUE"
    if operation == "--check":
        assert out == f"{verdict} [{decision.trigger}] \u2014 {decision.reason}\n"
    else:
        text = format_summary(summarize_attempts(ledger))
        expected = f"{text}\n\nCircuit breaker: {verdict} [{decision.trigger}]\n  {decision.reason}"
        assert out == expected + "\n"
    assert code == (2 if decision.escalate else 0)


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_inject_of_one_huge_error_holds_one_copy_of_it(
    stdin: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One 3 MB error: ``--inject`` held the decoded text, the parsed ledger, the summary's
    and the breaker's signatures, the pruned copy of the error and the output joined (7-10x
    the file). Now the file is read three times a block at a time (the breaker's facts, the
    summary, the pruning window) and the output written a piece at a time: the error is
    held once (its kept lines, as UTF-8). Standard input was read whole; it is spooled into
    an anonymous temporary file as it arrives and read the same way. Same output as the
    whole read's."""
    import json

    from loopactors.ledger import (
        BreakerConfig,
        PruneConfig,
        build_context_injection,
        parse_ledger,
    )
    from loopactors.ledger._cli import main

    random.seed(7)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(3_000_000))
    attempts = [
        {"outcome": "success", "action": "b", "tokensUsed": 3},
        {"outcome": "failure", "error": f"Error: {words} /x/y.js:12:3\n  at f", "action": "a"},
    ]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    del words, attempts
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    output = tmp_path / "out.txt"
    with output.open("w", encoding="utf-8") as out:
        # A file, not a captured buffer: the output itself is not the command's memory.
        monkeypatch.setattr("sys.stdout", out)
        args = ["--inject", "--ledger", str(path)]
        if stdin:
            monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
            del args[1:]
        code, peak = _peak(lambda: main(args))
    # The error's line (the summary's head) or its kept lines (~1x), the reader's blocks
    # and the line's set of grams (1-2 MB: any three of 27 characters).
    assert peak < len(data) + (5 << 20), peak
    assert code == 0
    ledger = parse_ledger(data.decode())
    expected = build_context_injection(ledger, BreakerConfig(), PruneConfig())
    assert output.read_text(encoding="utf-8") == expected + "\n"


def test_prune_of_one_huge_error_in_its_window_holds_one_copy_of_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One 6 MB error in ``--prune``'s window: its decoded text, that text as JSON, the
    parsed and the pruned copies and the output's were held one after the other (3.1-3.7x
    the file). Now the window's long error is kept as its first ``--max-trace-lines`` lines
    (UTF-8), compared through its grams and written a piece at a time: held once. Same
    output as the whole read's."""
    import json

    from loopactors.ledger import PruneConfig, parse_ledger, prune_ledger
    from loopactors.ledger._cli import main
    from loopactors.ledger._js import encode_json

    random.seed(7)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(6_000_000))
    attempts = [
        {"outcome": "success", "action": "b", "tokensUsed": 3},
        {"outcome": "failure", "error": f"Error: {words} /x/y.js:12:3\n  at f", "action": "a"},
        # Compared with the huge one (not similar): a group of its own.
        {"outcome": "failure", "error": "Error: other\n  at g", "iteration": 9},
    ]
    data = json.dumps({"goal": "g", "startedAt": 1, "attempts": attempts}).encode()
    del words, attempts
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    output = tmp_path / "out.json"
    with output.open("w", encoding="utf-8") as out:
        monkeypatch.setattr("sys.stdout", out)  # the output itself is not the command's memory
        code, peak = _peak(lambda: main(["--prune", "--ledger", str(path)]))
    # The error's kept lines (~1x), the reader's blocks and the line's set of grams.
    assert peak < len(data) + (4 << 20), peak
    assert code == 0
    expected = encode_json(prune_ledger(parse_ledger(data), PruneConfig()))
    assert output.read_text(encoding="utf-8") == expected + "\n"


def test_inject_below_the_parts_threshold_holds_one_copy_of_a_huge_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--inject --similarity-threshold 0.5``: the summary's grouper took only thresholds
    of at least 0.8 a signature at a time, so below that the ledger was read whole (the
    text, the parsed ledger, the signatures, the pruned copy and the output: several times
    the file). Now the grouper counts shared grams from the first signature on
    (``_grouping``), and the block is read as at 0.85: one 6 MB error held once. Same
    output as the whole read's."""
    import json

    from loopactors.ledger import BreakerConfig, PruneConfig, build_context_injection, parse_ledger
    from loopactors.ledger._cli import main

    random.seed(7)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(6_000_000))
    attempts = [
        {"outcome": "failure", "error": "Error: x is undefined\n  at f", "action": "c"},
        {"outcome": "success", "action": "b", "tokensUsed": 3},
        {"outcome": "failure", "error": f"Error: {words} /x/y.js:12:3\n  at f", "action": "a"},
        {"outcome": "failure", "error": "Error: y is undefined\n  at g", "action": "d"},
    ]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    del words, attempts
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    output = tmp_path / "out.txt"
    args = ["--inject", "--ledger", str(path), "--similarity-threshold", "0.5"]
    with output.open("w", encoding="utf-8") as out:
        monkeypatch.setattr("sys.stdout", out)
        code, peak = _peak(lambda: main(args))
    # The error's line or kept lines (~1x), the reader's blocks, the line's set of grams
    # and the counting index's entry for each (some 20,000 grams of this alphabet, 4-5 MB,
    # whatever the error's length); it was 6x the file.
    assert peak < len(data) + (5 << 20), peak
    assert peak < 2 * len(data), peak
    assert code == 0
    ledger = parse_ledger(data.decode())
    breaker = BreakerConfig(similarity_threshold=0.5)
    expected = build_context_injection(ledger, breaker, PruneConfig(similarity_threshold=0.5))
    assert output.read_text(encoding="utf-8") == expected + "\n"
