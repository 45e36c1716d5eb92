"""An agent CLI's stdout is read a line at a time, each line at most ``MAX_LINE_BYTES``: a
longer one is skipped as it arrives and said so (docs/agent-clis.md, "Bounds while it runs")."""

from __future__ import annotations

import itertools
import json
import logging
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopactors.workers import RoundRequest, _cli_worker, parse_worker
from loopactors.workers._output import LineSplitter


def split_whole(data: bytes, limit: int) -> tuple[list[bytes], int]:
    """What the splitter must give: the stream split at once, long lines left out."""
    *lines, last = data.split(b"\n")
    if last:
        lines.append(last)
    kept = [line for line in lines if len(line) <= limit]
    return kept, len(lines) - len(kept)


@given(
    data=st.binary(max_size=300).map(lambda b: b.replace(b"\x00", b"\n")),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=20),
    limit=st.integers(min_value=1, max_value=40),
)
def test_any_chunking_gives_the_lines_of_the_whole_stream(
    data: bytes, cuts: list[int], limit: int
) -> None:
    splitter = LineSplitter(limit)
    got: list[bytes] = []
    edges = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, end in itertools.pairwise(edges):
        got += splitter.feed(data[start:end])
    last = splitter.end()
    if last is not None:
        got.append(last)
    assert (got, splitter.dropped) == split_whole(data, limit)


def test_an_endless_line_costs_the_limit_not_the_line() -> None:
    splitter = LineSplitter(10)
    for _ in range(1000):
        assert splitter.feed(b"x" * 4096) == []
    assert splitter._size == 0  # nothing of it is held
    assert splitter.feed(b"tail\nnext\n") == [b"next"]
    assert splitter.dropped == 1


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0 bytes"):
        LineSplitter(0)


def fake_claude(tmp_path: Path, lines: list[str]) -> Path:
    """An executable printing these stdout lines, as Claude Code's stream-json would."""
    script = tmp_path / "claude-fake"
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"for line in {lines!r}:\n    sys.stdout.write(line + '\\n')\n"
    )
    script.chmod(0o755)
    return script


def result_line(text: str) -> str:
    return json.dumps(
        {
            "type": "result", "subtype": "success", "is_error": False, "result": text,
            "session_id": "s1", "total_cost_usd": 0.0,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )  # fmt: skip


def request() -> RoundRequest:
    return RoundRequest(
        loop_id="l1", round=1, rounds=1, mode="fresh", prompt="p", task="p", worker="claude"
    )


async def test_a_line_over_the_limit_is_skipped_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_cli_worker, "MAX_LINE_BYTES", 1 << 20)
    binary = fake_claude(tmp_path, ["y" * (3 << 20), result_line("done")])
    worker = parse_worker(f"claude:workspace={tmp_path},binary={binary}")
    with caplog.at_level(logging.WARNING, logger="loopactors.workers"):
        result = await worker.run(request(), None)
    assert result.status == "completed", result.error
    assert result.output == "done"
    assert "1 line(s) of" in caplog.text
    assert "longer than 1 MiB were skipped" in caplog.text


async def test_a_result_line_over_the_limit_fails_the_round_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cli_worker, "MAX_LINE_BYTES", 1 << 20)
    binary = fake_claude(tmp_path, [result_line("z" * (2 << 20))])
    worker = parse_worker(f"claude:workspace={tmp_path},binary={binary}")
    result = await worker.run(request(), None)
    assert result.status == "failed"
    assert result.error is not None
    assert "longer than 1 MiB were skipped" in result.error
