"""``--prune`` of a large file (``_prune_read``: only the window's attempts held) against the
whole read: the same output byte for byte, the same error and exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .edge_ledgers import EDGE_LEDGERS
from .test_inject_read import LONG_ERROR_ARGS, _long_ledger, inject_attempt
from .test_inject_read import both_ways as inject_both_ways
from .test_summary_read import attempt


def both_ways(
    data: bytes,
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    return inject_both_ways(data, args, tmp_path, capsys, monkeypatch, operation="--prune")


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    attempts=st.lists(inject_attempt | attempt, max_size=14),
    option=st.tuples(
        st.integers(1, 6),  # window
        st.integers(1, 3),  # trace lines
        st.sampled_from([None, "t", {"a": [1, 2.5, -0.0, 10**30]}, "absent"]),  # startedAt
    ),
)
def test_block_reader_equals_parsed_ledger(
    attempts: list[dict[str, Any]],
    option: tuple[int, int, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window, lines, started = option
    ledger: dict[str, Any] = {"goal": "g \u00e9 \U0001d538", "attempts": attempts, "z": 1}
    if started != "absent":
        ledger["startedAt"] = started
    data = json.dumps(ledger).encode()
    args = ["--window", str(window), "--max-trace-lines", str(lines)]
    both_ways(data, args, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("data", EDGE_LEDGERS)
def test_edge_cases_and_errors_equal_parsed_ledger(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    both_ways(data, [], tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize(
    "args",
    [["--window", "0"], ["--max-trace-lines", "0"], ["--window", "1e400"], ["--window", "9e99"]],
)
def test_bad_and_huge_windows_have_the_parsed_ledgers_answer(
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts = [{"outcome": "failure", "error": f"E {i % 3}\n at x\n at y"} for i in range(9)]
    data = json.dumps({"goal": "g", "startedAt": 5, "attempts": attempts}).encode()
    both_ways(data, args, tmp_path, capsys, monkeypatch)


def test_a_long_error_in_the_window_is_pruned_as_the_whole_read_prunes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    error = "Error: " + "word " * 60_000 + "\n  at f\n" * 20
    attempts = [{"outcome": "failure", "action": "a", "error": error}] * 3
    attempts += [{"outcome": "success", "action": "b"}, {"outcome": "failure", "error": error}]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    code, out, _ = both_ways(data, ["--window", "4"], tmp_path, capsys, monkeypatch)
    assert code == 0
    assert json.loads(out)["attempts"][0]["repeated"] == 2


@pytest.mark.parametrize("args", LONG_ERROR_ARGS)
def test_long_errors_in_the_window_equal_parsed_ledger(
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Long errors (past the patched limits, and past a block of the default ones) kept
    as their pruned lines, compared through their grams, collapsed and written a piece at
    a time: the whole read's output."""
    data, _ = _long_ledger(70_000)
    code, out, err = both_ways(data, args, tmp_path, capsys, monkeypatch)
    assert (code, err) == (0, "")
    kept = json.loads(out)["attempts"]
    assert any(len(a.get("error") or "") > 1000 for a in kept)  # a long error written out


def test_the_block_reader_serves_a_valid_ledger_holding_only_its_window() -> None:
    import io

    from loopactors.ledger import PruneConfig, parse_ledger, prune_ledger
    from loopactors.ledger._prune_read import _Attempts, read_pruned_ledger

    attempts = [{"outcome": "failure", "action": f"a{i}", "error": f"E {i}"} for i in range(500)]
    data = json.dumps({"goal": "g", "startedAt": [1], "attempts": attempts}).encode()
    kept: list[int] = []
    add = _Attempts.add

    def counting(self: _Attempts, attempt: dict[str, Any]) -> None:
        add(self, attempt)
        kept.append(len(self.kept))

    source = io.BytesIO(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Attempts, "add", counting)
        pruned = read_pruned_ledger(source.read, lambda: source.seek(0), PruneConfig(window=3))
    assert pruned == prune_ledger(parse_ledger(data), PruneConfig(window=3))
    assert max(kept) == 3  # the window only
