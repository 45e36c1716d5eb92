"""``--summary`` read a block at a time (``_summary_read``) against the parsed ledger's summary.

Every case is run through the command on a file and compared with what the parsed ledger
gives (``parse_ledger``, ``summarize_attempts``, ``write_json`` / ``format_summary``): the same
output byte for byte, or the same error. Small blocks and batches make short ledgers cross
every boundary the reader has.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import loopactors.ledger._summary_read as summary_read
import loopactors.ledger._text as text_module
from loopactors.ledger import LedgerError, format_summary, parse_ledger, summarize_attempts
from loopactors.ledger._cli import main
from loopactors.ledger._js import write_json
from tests.hang import HANG

from .edge_ledgers import EDGE_LEDGERS


def expected(data: bytes, as_json: bool) -> tuple[int, str, str]:
    """The command's answer on ``data`` as it was before the block reader."""
    try:
        summary = summarize_attempts(parse_ledger(data.decode("utf-8", errors="replace")))
    except (LedgerError, RecursionError) as exc:
        return 1, "", f"loop-context failed: {exc}\n"
    if not as_json:
        return 0, format_summary(summary) + "\n", ""
    out = io.StringIO()
    write_json(summary, out.write)
    return 0, out.getvalue() + "\n", ""


def run(path: Path, as_json: bool, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["--summary", "-f", str(path), *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    return code, out, err


def both_ways(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    for as_json in (True, False):
        want = expected(data, as_json)
        assert run(path, as_json, capsys) == want
        with monkeypatch.context() as patch:
            patch.setattr(summary_read, "_BLOCK", 7)
            patch.setattr(summary_read, "_BATCH", 40)
            patch.setattr(summary_read, "COMMON_SAMPLE", 3)
            patch.setattr(summary_read, "_MEMO_CHARS", 30)
            assert run(path, as_json, capsys) == want
            # Attempts past 20 characters read a key at a time, errors past 30 as their
            # line only, its signature masked a few characters at a time.
            patch.setattr(summary_read, "_LONG", 20)
            patch.setattr(text_module, "_PIECE", 5)
            assert run(path, as_json, capsys) == want


values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=6)
)
errors = st.sampled_from(
    [
        "E: x 1",
        "E: x 2",
        "E: x y",
        "boom at /a/b.js:1:2",
        "boom at /c/b.js:7:2\n  at f (x.js:1)",
        "\n  Error: late first line",
        "   ",
        "Ü 😀 err",
        "",
        None,
        # Long ones (past the patched memo): masked and grouped from their line alone.
        "\n \t\n  Error: at 2024-01-02 10:11:12Z /usr/lib/a.py:12:3 0xdeadBEEF  x\t y  \nnext",
        'Error:    a  b   c "d" e\\f g h i j k l m n o p q r s t u v w \u00e9 \U0001d538 end  ',
        'Error:    a  b   c "d" e\\f g h i j k l m n o p q r s t u v w \u00e9 \U0001d538 fin',
        "  \u3000 ΑΣ :12 ok C:\\dir\\file.txt 2024-01-02T01:02:03 x 12 y \u2028z \u3000\n",
    ]
)
attempt = st.fixed_dictionaries(
    {},
    optional={
        "iteration": values,
        "action": st.sampled_from(["a", "b", "fix it", "\u00e9", None]) | values,
        "outcome": st.sampled_from(["failure", "failure", "success", "noop"]) | values,
        "error": errors | values,
        "tokensUsed": st.sampled_from([0, 0.1, 0.2, 1e308, 10**400, 2**53 - 1, None])
        | st.integers(0, 2**60)
        | values,
        "repeated": st.sampled_from([2, None, "2"]),
        "extra": values | st.dictionaries(st.text(max_size=3), values, max_size=3),
    },
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attempts=st.lists(attempt, max_size=24), indent=st.sampled_from([None, 0, 2]))
@example(attempts=[{"tokensUsed": 10**400}, {"tokensUsed": 0.1}], indent=None)
@example(attempts=[{"outcome": "failure", "error": "E: x 1"}] * 5, indent=2)
def test_block_reader_equals_parsed_ledger(
    attempts: list[dict[str, Any]],
    indent: int | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = {"goal": "g", "startedAt": {"a": [1, 2.5]}, "attempts": attempts, "z": [None]}
    data = json.dumps(ledger, indent=indent, ensure_ascii=indent is None).encode()
    both_ways(data, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("data", EDGE_LEDGERS)
def test_edge_cases_and_errors_equal_parsed_ledger(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    both_ways(data, tmp_path, capsys, monkeypatch)


def _late_ledger(last: str) -> bytes:
    attempts = ",".join(
        f'{{"iteration": {i}, "action": "try {i % 7}", "outcome": "failure", '
        f'"error": "Error: step {i % 13} of {i % 5} failed", "tokensUsed": 10}}'
        for i in range(8000)
    )
    return f'{{"goal": "g", "attempts": [{attempts}, {last}]}}'.encode()


@pytest.mark.parametrize(
    ("last", "refused"),
    [
        ('{"iteration": 1e400}', True),
        ('{"error": 5}', True),
        ('{"error": "\\udc00"}', True),
        ('"not an attempt"', True),
        ('{"ok": tru}', True),
        # Valid, but left to parse_ledger (duplicate keys: the last one counts).
        ('{"outcome": "success", "outcome": "failure", "error": "E"}', False),
        ("{}", False),
    ],
)
def test_bad_input_in_a_late_block_has_the_parsed_ledgers_answer(
    last: str,
    refused: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _late_ledger(last)
    assert len(data) > 3 * summary_read._BLOCK  # past the first blocks
    both_ways(data, tmp_path, capsys, monkeypatch)
    assert (expected(data, True)[0] == 1) is refused
    if last == "{}":
        assert summary_read.read_summary(io.BytesIO(data).read) is not None


def test_iteration_out_of_range_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ledger.json"
    path.write_bytes(b'{"goal": "g", "attempts": [{"iteration": 1e400}]}')
    code, out, err = run(path, True, capsys)
    assert (code, out) == (1, "")
    assert err.startswith("loop-context failed: Invalid attempt: Number out of range")


def test_many_groups_and_batches_cross_every_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Several hundred attempts: past the sample the common grams are taken from, across
    # bucket-array growth, with repeated errors and actions and long multi-line errors.
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota"]
    attempts = [
        {
            "action": f"fix {words[i % 9]}" if i % 4 else None,
            "outcome": ["failure", "failure", "success", "noop", "failure"][i % 5],
            "error": f"Error: {words[i % 9]} {words[i * 7 % 9]} {words[i % 5]} at /x/{i}.js:{i}:1"
            + ("\n    at f (y.js:1:1)" * (i % 3)),
            "tokensUsed": i * 0.5,
        }
        for i in range(700)
    ]
    data = json.dumps({"goal": "g", "attempts": attempts}).encode()
    assert summary_read.read_summary(io.BytesIO(data).read) is not None  # not left to msgspec
    both_ways(data, tmp_path, capsys, monkeypatch)
    groups = json.loads(expected(data, True)[1])["distinctErrors"]
    assert 10 < len(groups) < 400


def test_summary_of_a_valid_ledger_loads_no_msgspec(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"goal": "g", "attempts": [{"outcome": "failure", "error": "E"}]}))
    code = (
        "import sys; from loopactors.ledger._cli import main; code = main(sys.argv[1:]); "
        "print(code, 'msgspec' in sys.modules, file=sys.stderr)"
    )
    # Without `site` (as tests/cli/test_imports.py runs commands): a .pth file may import
    # anything at start-up.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run(
        [sys.executable, "-S", "-c", code, "--summary", "--json", "-f", str(path)],
        capture_output=True, text=True, timeout=HANG, check=True, env=env,
    )  # fmt: skip
    assert result.stderr.split() == ["0", "False"]
    assert json.loads(result.stdout)["distinctErrors"][0]["count"] == 1


@pytest.mark.parametrize(
    "data",
    [
        b'{"goal": "g", "attempts": [{"outcome": "failure", "error": "E \\ud83d\\ude00"}]}',
        b'{"goal": "g", "attempts": [{"outcome": "failure", "error": "E"}, {"error": 5}]}',
        b'{"goal": "g", "attempts": [{"outcome": "failure", "error": "E"}]}',
    ],
)
def test_a_pipe_is_read_once_even_when_left_to_parse_ledger(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        assert run(fifo, True, capsys) == expected(data, True)
    finally:
        writer.join(timeout=HANG)
