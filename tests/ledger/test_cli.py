"""``loopactors context`` in-process: parsing, messages, every operation's output and exit code."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopactors.ledger._cli import HELP, main
from loopactors.ledger._cli_args import js_to_number, parse_args

FAILED = "loop-context failed: "


def ledger_json(*attempts: dict[str, Any], goal: str = "Fix CI", **extra: Any) -> str:
    return json.dumps({"goal": goal, "attempts": list(attempts), **extra})


def fail(error: str = "Error: connect ECONNREFUSED 127.0.0.1:5432", **kw: Any) -> dict[str, Any]:
    return {"iteration": 1, "action": "run migration", "outcome": "failure", "error": error, **kw}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(
    capsys: pytest.CaptureFixture[str], args: list[str], stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        # The autouse fixture below restores the real stdin afterwards.
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _restore_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))


# -- Number() conversion and flag validation (spec §9.2) ------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0x10", 16), ("2e0", 2), (" 2 ", 2), ("2.0", 2), ("+2", 2), ("0b10", 2), ("0o2", 2)],
)
def test_positive_int_values_follow_js_number(raw: str, value: int) -> None:
    assert parse_args(["--window", raw]).window == value


@pytest.mark.parametrize("raw", ["1e400", "Infinity", "-0", "1.5", "0", "-3", "1_0", "5abc"])
def test_positive_int_rejects(capsys: pytest.CaptureFixture[str], raw: str) -> None:
    assert run(capsys, ["--window", raw]) == (
        1,
        "",
        f'{FAILED}--window must be a positive integer; got "{raw}".\n',
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("-0x2", "nan"), ("inf", "nan"), ("nan", "nan"), ("", "0.0"), (".5", "0.5"), ("0X1f", "31.0")],
)
def test_js_to_number(raw: str, expected: str) -> None:
    assert str(js_to_number(raw)) == expected


@pytest.mark.parametrize(
    "flag",
    ["--max-iterations", "--stagnation", "--no-progress", "--token-budget", "--window",
     "--max-trace-lines"],
)  # fmt: skip
def test_absent_or_empty_int_value(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    message = f"{FAILED}{flag} requires a positive integer value.\n"
    assert run(capsys, [flag]) == (1, "", message)
    assert run(capsys, [flag, ""]) == (1, "", message)


def test_similarity_threshold_messages(capsys: pytest.CaptureFixture[str]) -> None:
    head = f"{FAILED}--similarity-threshold must be a fraction greater than 0 and at most 1 "
    never = (
        " Similarity is at most 1.0, so no two errors would ever match and the stagnation "
        "rule would never fire."
    )
    cases = {
        "95": f"(default 0.85); got 95.{never} If you meant 95%, use 0.95.",
        "100.0": f"(default 0.85); got 100.{never} If you meant 100%, use 1.",
        "150": f"(default 0.85); got 150.{never}",
        "1.5": f"(default 0.85); got 1.5.{never}",
        "abc": "(default 0.85); got abc.",
        "NaN": "(default 0.85); got NaN.",
        "-0": "(default 0.85); got 0.",
        "0": "(default 0.85); got 0.",
    }
    for raw, tail in cases.items():
        assert run(capsys, ["--similarity-threshold", raw]) == (1, "", f"{head}{tail}\n")
    empty = f"{FAILED}--similarity-threshold requires a value between 0 and 1 (e.g. 0.85).\n"
    assert run(capsys, ["--similarity-threshold"]) == (1, "", empty)
    assert parse_args(["--similarity-threshold", "1e-7"]).similarity_threshold == 1e-7
    assert parse_args(["--similarity-threshold", "0x1"]).similarity_threshold == 1


def test_parsing_rules() -> None:
    opts = parse_args(["--check", "--prune", "--max-iterations=5", "word", "--json"])
    assert (opts.operation, opts.max_iterations, opts.json) == ("prune", 10, True)
    assert parse_args([]).operation == "status"
    # A value flag takes the next token whatever it looks like.
    assert parse_args(["--budget-level", "--json"]).budget_level == "--json"
    assert parse_args(["--budget-level"]).budget_level is None
    # Help stops parsing: later bad values are not validated.
    assert parse_args(["--help", "--window", "0"]).help


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, ["--stagnation", "2", "-h", "--window", "nope"])
    assert (code, err, out) == (0, "", HELP + "\n")
    assert out.startswith("loop-context — stateful memory manager for agent loops\n")
    assert out.endswith("Exit codes: 0 continue · 2 escalate · 1 error\n\n")
    assert "at most 10 s" in out
    # An invalid flag before the help flag has already failed.
    assert run(capsys, ["--window", "0", "--help"])[0] == 1


# -- Reading the ledger (spec §9.4) ----------------------------------------------------------


def test_ledger_sources(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = ledger_json(fail())
    ok = "CONTINUE [ok] — Within limits — cleared to continue.\n"
    assert run(capsys, ["--check", "--ledger", write(tmp_path, text)]) == (0, ok, "")
    assert run(capsys, ["--check", "-f", write(tmp_path, text)]) == (0, ok, "")
    assert run(capsys, ["--check"], stdin=text) == (0, ok, "")
    assert run(capsys, ["--check", "-f", ""], stdin=text) == (0, ok, "")


def test_ledger_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    assert run(capsys, ["--check", "-f", missing]) == (
        1,
        "",
        f"{FAILED}ENOENT: no such file or directory, open '{missing}'\n",
    )
    assert run(capsys, ["-f", str(tmp_path)])[2] == (
        f"{FAILED}EISDIR: illegal operation on a directory, read\n"
    )
    no_ledger = f"{FAILED}No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.\n"
    assert run(capsys, ["--check"], stdin=" \n\ufeff ") == (1, "", no_ledger)
    invalid = f"{FAILED}Invalid ledger: expected {{ goal: string, attempts: Attempt[] }}.\n"
    for bad in ["[]", "5", '"x"', '{"goal": 1, "attempts": []}', '{"goal": "g", "attempts": {}}',
                "null"]:  # fmt: skip
        assert run(capsys, ["--summary"], stdin=bad) == (1, "", invalid)
    code, out, err = run(capsys, ["--check"], stdin='{"goal": "g", "attempts": [NaN]}')
    assert (code, out) == (1, "")
    assert err.startswith(FAILED)
    code, out, err = run(capsys, ["--check"], stdin='{"goal": "g", "attempts": [null]}')
    assert (code, out) == (1, "")
    assert err.startswith(f"{FAILED}Invalid attempt: ")


# -- Operations (spec §9.5) -------------------------------------------------------------------


def test_check_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    text = ledger_json(*[fail(tokensUsed=1500.0, action=f"try {i}") for i in range(3)])
    code, out, err = run(capsys, ["--check"], stdin=text)
    assert (code, err) == (2, "")
    assert out == (
        "ESCALATE [stagnation] — Same error repeated 3\u00d7 in a row (threshold 3): "
        '"Error: connect ECONNREFUSED #.#.#.#". Escalating instead of retrying.\n'
    )
    code, out, _ = run(capsys, ["--check", "--json", "--stagnation", "5"], stdin=text)
    assert code == 0
    assert out == (
        '{\n  "iterations": 3,\n  "tokensUsed": 4500,\n  "shouldContinue": true,\n'
        '  "escalate": false,\n  "trigger": "ok",\n'
        '  "reason": "Within limits — cleared to continue."\n}\n'
    )


@pytest.mark.parametrize(
    ("args", "trigger"),
    [
        (["--max-iterations", "2"], "max-iterations"),
        (["--token-budget", "10"], "token-budget"),
        (["--no-progress", "2", "--stagnation", "9"], "no-progress"),
    ],
)
def test_check_flags_reach_the_breaker(
    capsys: pytest.CaptureFixture[str], args: list[str], trigger: str
) -> None:
    text = ledger_json(fail("a", action="x", tokensUsed=5), fail("b", action="y", tokensUsed=5))
    code, out, _ = run(capsys, ["--check", "--json", *args], stdin=text)
    assert code == 2
    assert json.loads(out)["trigger"] == trigger


def test_similarity_flag_reaches_breaker_and_pruner(capsys: pytest.CaptureFixture[str]) -> None:
    errors = [
        "connection timeout on port 8080",
        "timeout on port 8080",
        "socket timeout on port 8080",
    ]
    text = ledger_json(*[fail(e, action=f"try {i}") for i, e in enumerate(errors)])
    assert run(capsys, ["--check"], stdin=text)[0] == 0
    code, out, _ = run(capsys, ["--check", "--similarity-threshold", "0.45"], stdin=text)
    assert code == 2
    assert "[stagnation]" in out
    code, out, _ = run(capsys, ["--prune", "--similarity-threshold", "0.45"], stdin=text)
    assert json.loads(out)["attempts"][0]["repeated"] == 3


def test_prune(capsys: pytest.CaptureFixture[str]) -> None:
    trace = "\n".join(f"line {i}" for i in range(20))
    text = ledger_json(
        fail("old"), fail(trace), fail(trace), startedAt="2024-01-01", pattern="ci-sweeper"
    )
    code, out, err = run(capsys, ["--prune", "--window", "2", "--max-trace-lines", "3", "--json"],
                         stdin=text)  # fmt: skip
    assert (code, err) == (0, "")
    assert out == (
        '{\n  "goal": "Fix CI",\n  "startedAt": "2024-01-01",\n  "attempts": [\n    {\n'
        '      "iteration": 1,\n      "action": "run migration",\n'
        '      "outcome": "failure",\n'
        '      "error": "line 0\\nline 1\\nline 2\\n  … (17 more lines pruned)",\n'
        '      "repeated": 2\n    }\n  ]\n}\n'
    )


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    text = ledger_json(
        fail(tokensUsed=500),
        fail("Error: connect ECONNREFUSED 127.0.0.1:5433", tokensUsed=500),
        {"iteration": 3, "action": "patch code", "outcome": "success", "tokensUsed": 200},
        {"iteration": 4, "action": "patch code", "outcome": "noop"},
    )
    code, out, err = run(capsys, ["--summary", "--similarity-threshold", "0.99"], stdin=text)
    # The flag is validated but the summary always groups at 0.85 (a reference quirk).
    assert (code, err) == (0, "")
    assert out == (
        "Attempts: 4  (1 ok · 2 failed · 1 no-op)\nTokens used: 1200\n"
        "Distinct errors (most frequent first):\n"
        "  (2\u00d7) Error: connect ECONNREFUSED 127.0.0.1:5432\n"
        "Actions tried:\n  - run migration\n  - patch code\n"
    )
    code, out, _ = run(capsys, ["--summary", "--json"], stdin=text)
    assert code == 0
    assert json.loads(out) == {
        "totalAttempts": 4, "successes": 1, "failures": 2, "noops": 1, "tokensUsed": 1200,
        "distinctErrors": [{"signature": "Error: connect ECONNREFUSED #.#.#.#", "count": 2,
                            "sample": "Error: connect ECONNREFUSED 127.0.0.1:5432"}],
        "actionsTried": ["run migration", "patch code"],
    }  # fmt: skip
    assert out.startswith('{\n  "totalAttempts": 4,\n')
    assert run(capsys, ["--summary"], stdin=ledger_json()) == (
        0,
        "Attempts: 0  (0 ok · 0 failed · 0 no-op)\n",
        "",
    )


def test_inject_exits_zero_even_on_stop(capsys: pytest.CaptureFixture[str]) -> None:
    text = ledger_json(*[fail(tokensUsed=10)] * 3)
    code, out, err = run(capsys, ["--inject", "--json"], stdin=text)
    assert (code, err) == (0, "")
    assert out == (
        "## Loop Context (managed)\n\n**Goal:** Fix CI\n"
        "**Progress:** iteration 3 · 0 ok · 3 failed · 30 tokens\n\n"
        "**Already tried (do NOT repeat):**\n- run migration\n\n"
        "**Failure patterns:**\n- (3\u00d7) Error: connect ECONNREFUSED 127.0.0.1:5432\n\n"
        "**Most recent error (pruned):**\n```\nError: connect ECONNREFUSED 127.0.0.1:5432\n```\n\n"
        "> STOP — circuit breaker tripped (stagnation). Same error repeated 3\u00d7 in a row "
        '(threshold 3): "Error: connect ECONNREFUSED #.#.#.#". Escalating instead of retrying.\n'
    )
    code, out, _ = run(capsys, ["--inject", "--max-iterations", "7"], stdin=ledger_json(fail()))
    assert code == 0
    assert out.endswith("> Circuit breaker: OK (1/7 iterations used).\n")


def test_status_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    text = ledger_json(fail(tokensUsed=5))
    expected = (
        "Attempts: 1  (0 ok · 1 failed · 0 no-op)\nTokens used: 5\n"
        "Distinct errors (most frequent first):\n"
        "  (1\u00d7) Error: connect ECONNREFUSED 127.0.0.1:5432\n"
        "Actions tried:\n  - run migration\n\n"
        "Circuit breaker: CONTINUE [ok]\n  Within limits — cleared to continue.\n"
    )
    assert run(capsys, [], stdin=text) == (0, expected, "")
    assert run(capsys, ["--status", "--json"], stdin=text) == (0, expected, "")
    code, out, _ = run(capsys, ["--check", "--status", "--token-budget", "5"], stdin=text)
    assert code == 2
    assert out.endswith(
        "Circuit breaker: ESCALATE [token-budget]\n"
        "  Token budget reached (5 ≥ 5). Escalating to avoid cost blowup.\n"
    )


def test_crash_cases_exit_one(capsys: pytest.CaptureFixture[str]) -> None:
    # error: null no longer crashes the pruner (a deliberate fix); the breaker reads it as "".
    text = ledger_json({"action": "a", "outcome": "failure", "error": None})
    assert run(capsys, ["--prune"], stdin=text)[0] == 0
    code, out, err = run(capsys, ["--check"], stdin=ledger_json({"outcome": "failure", "error": 5}))
    assert (code, out) == (1, "")
    assert err.startswith(f"{FAILED}Invalid attempt: ")


def test_informational_keys_of_any_type_pass_through(capsys: Any, tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text(
        '{"goal": "g", "startedAt": 123, "attempts": [{"iteration": "1", '
        '"timestamp": 1700000000, "action": "a", "outcome": "failure", "error": "boom"}]}'
    )
    assert main(["--prune", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert '"startedAt": 123' in out
    assert '"iteration": "1"' in out
    assert '"timestamp": 1700000000' in out


def test_help_states_the_hook_timeout_in_use() -> None:
    from loopactors.ledger import _cli, _cli_daily

    assert _cli._HOOK_TIMEOUT == _cli_daily.HOOK_TIMEOUT
    assert f"at most {_cli_daily.HOOK_TIMEOUT:g} s" in HELP


def test_the_example_ledger_of_the_docs_is_read_and_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    page = (Path(__file__).parents[2] / "docs" / "ledger.md").read_text(encoding="utf-8")
    example = re.search(r"## An example ledger.*?```json\n(.*?)```", page, re.S)
    assert example is not None
    path = write(tmp_path, example.group(1))
    code, out, _ = run(capsys, ["--check", "-f", path])
    assert (code, out.strip()) == (0, "CONTINUE [ok] — Within limits — cleared to continue.")
    code, out, _ = run(capsys, ["--summary", "--json", "-f", path])
    assert code == 0
    assert json.loads(out)["totalAttempts"] == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"goal": "g", "attempts": [}', "JSON is malformed: invalid character (byte 27)"),
        ('\ufeff{"goal": "g", "attempts": []}', "JSON is malformed: invalid character (byte 0)"),
        (
            '{"goal": "g", "attempts": [], "x": ' + "[" * 5000 + "]" * 5000 + "}",
            "maximum recursion depth exceeded",
        ),
    ],
)
def test_the_differences_compat_md_lists_for_bad_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    code, _, err = run(capsys, ["--check", "-f", write(tmp_path, text)])
    assert code == 1
    assert err.startswith(FAILED)
    assert message in err


@pytest.mark.parametrize("value", ["1.5", "Infinity"])
def test_a_similarity_threshold_above_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = write(tmp_path, ledger_json())
    code, _, err = run(capsys, ["--check", "--similarity-threshold", value, "-f", path])
    assert code == 1
    assert f"must be a fraction greater than 0 and at most 1 (default 0.85); got {value}" in err
