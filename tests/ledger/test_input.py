"""Standard input and pipes: a ledger past the small-ledger size is spooled into an anonymous
temporary file as it arrives and read as a file is (a block at a time); the answers are
those of the same ledger given as a file, byte for byte."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import loopactors.ledger._cli as cli
from loopactors.ledger._facts import SMALL_LEDGER_BYTES

OPERATIONS = [
    ["--check"],
    ["--check", "--json"],
    ["--summary"],
    ["--summary", "--json"],
    ["--status"],
    ["--inject"],
    ["--inject", "--window", "2", "--max-trace-lines", "1"],
    ["--prune"],
]


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def _ledger(attempts: int, error_size: int = 0) -> bytes:
    rows: list[dict[str, Any]] = [
        {
            "iteration": i,
            "action": f"try {i % 7}",
            "outcome": ["failure", "failure", "success"][i % 3],
            "error": f"Error: step {i % 13} failed\n  at f (/a/{i}.js:1:2)\n  at g",
            "tokensUsed": 10 + i,
        }
        for i in range(attempts)
    ]
    if error_size:
        rows.append({"outcome": "failure", "action": "z", "error": "Error: " + "ab " * error_size})
    return json.dumps({"goal": "g", "attempts": rows}).encode()


def _from_stdin(
    data: bytes,
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", _Stdin(data))
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _from_file(
    path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    code = cli.main([*args, "-f", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", OPERATIONS)
@pytest.mark.parametrize(
    "data",
    [
        _ledger(5),  # small: kept as bytes
        _ledger(2000),  # large: spooled
        _ledger(3, error_size=120_000),  # one attempt past 256 KiB
        _ledger(2000)[:-1],  # bad JSON past the first block
    ],
    ids=["small", "large", "huge-error", "bad"],
)
def test_standard_input_answers_as_the_file_does(
    data: bytes,
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    want = _from_file(path, args, capsys)
    assert _from_stdin(data, args, capsys, monkeypatch) == want
    # A named pipe given as the ledger file is spooled the same way.
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        assert _from_file(fifo, args, capsys) == want
    finally:
        writer.join()


def test_a_large_standard_input_is_spooled_and_a_small_one_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = _ledger(5)
    assert len(small) <= SMALL_LEDGER_BYTES
    monkeypatch.setattr("sys.stdin", _Stdin(small))
    source = cli._Input(None)
    assert (source.handle, source.data) == (None, small)
    large = _ledger(2000)
    monkeypatch.setattr("sys.stdin", _Stdin(large))
    source = cli._Input(None)
    try:
        assert source.data is None
        assert source.large()
        assert source.whole() == large
        assert source.read()(10) == large[:10]  # from its start again
    finally:
        source.close()
