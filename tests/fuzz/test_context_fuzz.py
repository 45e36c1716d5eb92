"""Fuzzing `loopactors context`: any ledger text and any flags give an answer, never a crash.

The exit code is always 0, 1 or 2, and an error (exit 1) is one line on stderr starting
with ``loop-context failed:``. CI runs a short version; ``just fuzz`` runs long.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopactors.ledger._cli import main

EXAMPLES = int(os.environ.get("LOOPACTORS_FUZZ_EXAMPLES", "150"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
attempts = st.fixed_dictionaries(
    {},
    optional={
        "iteration": json_values,
        "timestamp": json_values,
        "action": st.one_of(st.text(max_size=40), json_values),
        "outcome": st.sampled_from(["success", "failure", "noop", "other"]) | json_values,
        "error": st.one_of(st.text(max_size=80), json_values),
        "tokensUsed": st.one_of(st.integers(-10, 10**6), st.floats(allow_nan=False), json_values),
    },
)
ledgers = st.one_of(
    st.fixed_dictionaries(
        {"goal": st.text(max_size=20), "attempts": st.lists(attempts, max_size=8)},
        optional={"startedAt": json_values},
    ),
    json_values,
)
operations = st.sampled_from(["--check", "--prune", "--inject", "--summary", "--status"])
flags = st.lists(
    st.sampled_from(
        ["--json", "--max-iterations", "--stagnation", "--no-progress", "--token-budget",
         "--window", "--max-trace-lines", "--similarity-threshold", "3", "0", "-1", "0.5",
         "abc", "1e400", "0x10", ""]
    ),
    max_size=4,
)  # fmt: skip


def run(args: list[str], stdin: str, capsys: Any, monkeypatch: Any) -> int:
    monkeypatch.setattr(
        "sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8", "surrogatepass")))
    )
    code = main(args)
    _, err = capsys.readouterr()
    assert code in (0, 1, 2), (args, code)
    if code == 1:
        assert err.startswith("loop-context failed:"), err
        assert "Traceback" not in err
    return code


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ledger=ledgers, operation=operations, extra=flags)
def test_any_ledger_and_flags_get_an_answer(
    ledger: Any, operation: str, extra: list[str], capsys: Any, monkeypatch: Any
) -> None:
    run([operation, *extra], json.dumps(ledger), capsys, monkeypatch)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=st.text(max_size=200), operation=operations)
def test_any_text_gets_an_answer(text: str, operation: str, capsys: Any, monkeypatch: Any) -> None:
    run([operation], text, capsys, monkeypatch)


@pytest.mark.parametrize("operation", ["--check", "--summary"])
def test_a_valid_ledger_is_answered_in_json(operation: str, capsys: Any, monkeypatch: Any) -> None:
    ledger = {"goal": "g", "attempts": [{"action": "a", "outcome": "failure", "error": "e"}]}
    assert run([operation, "--json"], json.dumps(ledger), capsys, monkeypatch) == 0
