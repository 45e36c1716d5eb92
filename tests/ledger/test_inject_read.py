"""``--inject`` read a block at a time (``_inject_read``) against the parsed ledger's block.

Every case runs the command twice on one file: once as a small file (read whole, then
``parse_ledger`` and ``build_context_injection``, as before) and once as a large one (the
block reader): the same output byte for byte, the same error and exit code. Small blocks
and limits make short ledgers cross every boundary the readers have.
"""

from __future__ import annotations

import io
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import loopactors.ledger._cli as cli
import loopactors.ledger._inject_read as inject_read
import loopactors.ledger._summary_read as summary_read
import loopactors.ledger._text as text_module
from loopactors.ledger import BreakerConfig, PruneConfig, build_context_injection, parse_ledger

from .edge_ledgers import EDGE_LEDGERS
from .test_summary_read import attempt


def run(
    path: Path,
    args: list[str],
    streamed: bool,
    capsys: pytest.CaptureFixture[str],
    operation: str = "--inject",
) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as patch:
        # A file above this size is read a block at a time; below it, whole.
        patch.setattr(cli, "SMALL_LEDGER_BYTES", -1 if streamed else 1 << 62)
        code = cli.main([operation, "-f", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


def both_ways(
    data: bytes,
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    operation: str = "--inject",
) -> tuple[int, str, str]:
    """``operation`` on ``data`` read whole and by the block readers (also with small
    blocks and limits): the same answer. ``--prune`` (``test_prune_read``) shares it."""
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    want = run(path, args, False, capsys, operation)
    assert run(path, args, True, capsys, operation) == want
    with monkeypatch.context() as patch:
        patch.setattr(summary_read, "_BLOCK", 7)
        patch.setattr(inject_read, "_BLOCK", 5)
        patch.setattr(summary_read, "_BATCH", 40)
        patch.setattr(summary_read, "COMMON_SAMPLE", 3)
        # Attempts past 20 characters read a key at a time, errors past 30 kept as their
        # first lines only, signatures masked a few characters at a time.
        patch.setattr(summary_read, "_MEMO_CHARS", 30)
        patch.setattr(inject_read, "_MEMO_CHARS", 30)
        patch.setattr(summary_read, "_LONG", 20)
        patch.setattr(text_module, "_PIECE", 5)
        assert run(path, args, True, capsys, operation) == want
    return want


def streamed_directly(data: bytes, breaker: BreakerConfig, prune: PruneConfig) -> str | None:
    """The block reader's output, or None where it leaves the ledger to ``parse_ledger``."""
    source = io.BytesIO(data)
    out = io.StringIO()
    if not inject_read.write_streamed_injection(
        source.read, lambda: source.seek(0), breaker, prune, out.write
    ):
        assert out.getvalue() == ""  # nothing written before giving up
        return None
    return out.getvalue()


errors = st.sampled_from(
    [
        "E: x 1",
        "E: x 2",
        "\n \n",
        "",
        "  Error: at /a/b.js:1:2\n    at f (x.js:1)\n    at g (y.js:2)\n\n  \n",
        "\n\n\n   \n\t\nError: late",
        "Error: one two three four five six seven eight nine ten eleven twelve thirteen",
        "Error: one two three four five six seven eight nine ten eleven twelve fourteen\nb\nc",
        "  \u3000 \u0391\u03a3 :12 ok C:\\dir\\f.txt 2024-01-02T01:02:03 x \u2028z \u3000\n \n",
        "\U0001d538 \u00e9 " * 12 + "\n  next\n",
    ]
)
inject_attempt = st.fixed_dictionaries(
    {"outcome": st.sampled_from(["failure", "failure", "failure", "success", "noop"])},
    optional={"error": errors | st.none(), "action": st.sampled_from(["a", "b", None])},
)
#: Threshold, window, trace lines and the JSON's indent.
options = st.tuples(
    st.sampled_from(["0.3", "0.6", "0.8", "0.85", "0.95", "1"]),
    st.integers(1, 6),
    st.integers(1, 4),
    st.sampled_from([None, 2]),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attempts=st.lists(inject_attempt | attempt, max_size=14), option=options)
@example(attempts=[{"outcome": "failure", "error": "E: x 1"}] * 4, option=("0.85", 5, 8, 2))
def test_block_reader_equals_parsed_ledger(
    attempts: list[dict[str, Any]],
    option: tuple[str, int, int, int | None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threshold, window, lines, indent = option
    ledger = {"goal": "g \u00e9", "startedAt": "t", "attempts": attempts}
    data = json.dumps(ledger, indent=indent, ensure_ascii=indent is None).encode()
    args = ["--similarity-threshold", threshold, "--window", str(window)]
    args += ["--max-trace-lines", str(lines), "--no-progress", "3"]
    both_ways(data, args, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("data", EDGE_LEDGERS)
def test_edge_cases_and_errors_equal_parsed_ledger(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    both_ways(data, [], tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        ["--similarity-threshold", "0.5"],  # below the parts' threshold: counted grams
        ["--max-iterations", "0"],
        ["--window", "0"],
        ["--max-trace-lines", "0", "--max-iterations", "2"],
        ["--similarity-threshold", "1.5", "--max-iterations", "0"],
    ],
)
def test_bad_configs_and_low_thresholds_have_the_parsed_ledgers_answer(
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts = [{"outcome": "failure", "error": f"Error: step {i % 3}\n at x"} for i in range(9)]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    both_ways(data, args, tmp_path, capsys, monkeypatch)


#: Windows, trace limits and thresholds each long-error comparison runs with (here and in
#: test_prune_read).
LONG_ERROR_ARGS = [
    [],
    ["--window", "4"],
    ["--window", "3", "--max-trace-lines", "1"],
    ["--window", "5", "--max-trace-lines", "2", "--similarity-threshold", "0.9"],
    ["--window", "6", "--similarity-threshold", "0.3"],
    ["--window", "2", "--max-trace-lines", "40"],
    ["--window", "2", "--max-trace-lines", "41"],
]


def _long_ledger(size: int) -> tuple[bytes, list[dict[str, Any]]]:
    """Errors of ``size`` characters and more, some collapsed by the pruner."""
    random.seed(5)
    words = "".join(random.choice(string.ascii_lowercase + "  ") for _ in range(size))
    attempts: list[dict[str, Any]] = [
        {"outcome": "failure", "action": "a", "error": "Error: " + words, "tokensUsed": 4},
        {"outcome": "success", "action": "b"},
        # Long and similar to each other: collapsed into the first by the pruner.
        {"outcome": "failure", "error": "\n \n  Error: " + words + "\n  at f\n" * 30},
        {"outcome": "failure", "error": "Error: " + words[7:] + " \u00e9\n  at g\n" * 3},
        # Long, blank for its kept lines: the pruned text is only the count of the rest.
        {"outcome": "failure", "error": " \n" * 40 + words},
        {"outcome": "failure", "error": "Error: other " + words[::-1] + "\n" * 9},
        {"outcome": "noop"},
    ]
    return json.dumps({"goal": "long", "attempts": attempts}).encode(), attempts


@pytest.mark.parametrize("args", LONG_ERROR_ARGS)
def test_long_errors_equal_parsed_ledger(
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Long for the patched limits of both_ways (and past a block of the default ones).
    data, _ = _long_ledger(70_000)
    code, out, err = both_ways(data, args, tmp_path, capsys, monkeypatch)
    assert (code, err) == (0, "")
    assert "**Most recent error (pruned):**" in out


def test_the_block_reader_serves_a_valid_ledger_and_keeps_long_errors_pruned() -> None:
    data, attempts = _long_ledger(300_000)  # attempts past 256 KiB: read a key at a time
    ledger = parse_ledger(data.decode())
    for window, lines in ((7, 8), (2, 40)):
        breaker = BreakerConfig(no_progress_threshold=2)
        prune = PruneConfig(window=window, max_trace_lines=lines)
        want = build_context_injection(ledger, breaker, prune) + "\n"
        assert streamed_directly(data, breaker, prune) == want
    # A window whose last failure is a huge one-line error: it is printed whole.
    last = json.dumps({"goal": "g", "attempts": attempts[:1]}).encode()
    out = streamed_directly(last, BreakerConfig(), PruneConfig())
    assert out is not None
    assert attempts[0]["error"].strip() in out


def test_a_ledger_that_changes_between_the_reads_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = _long_ledger(300_000)
    reads = []

    def rewind() -> None:
        reads.append(1)
        source.seek(0)
        if len(reads) == 2:  # the third read sees one attempt less
            source.truncate(0)
            source.write(json.dumps({"goal": "g", "attempts": []}).encode())
            source.seek(0)

    source = io.BytesIO(data)
    with pytest.raises(inject_read.LedgerChanged, match="changed while it was read"):
        inject_read.write_streamed_injection(
            source.read, rewind, BreakerConfig(), PruneConfig(), io.StringIO().write
        )
