"""The REPL with ``/worker claude``: the real Claude Code against the fake endpoint, its tool
calls shown live as they happen (a pexpect session; a few seconds)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect  # type: ignore[import-untyped]

from tests.hang import HANG

from ._fakes import AnthropicFake, Turn, git_workspace


def test_repl_worker_claude_shows_tool_calls_live(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(tools=[("Write", {"file_path": str(ws / "note.txt"), "content": "hi\n"})]),
        Turn(text="note written"),
    ]
    child = pexpect.spawn(
        sys.executable,
        ["-m", "loopactors", "repl", "--store", "memory"],
        env={**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"},
        cwd=str(ws),
        encoding="utf-8",
        timeout=HANG,
        dimensions=(40, 200),
    )
    try:
        child.expect("loop>")
        child.sendline("/worker claude")
        child.expect(f"new loops use: claude:workspace={ws}")  # pinned where the REPL runs
        child.sendline("|loop:1| write a note")
        child.expect(r"round 1 Write \S*note\.txt")
        child.expect("round 1/1 completed")
        child.expect("loop complete")
    finally:
        child.close(force=True)
    assert (ws / "note.txt").read_text() == "hi\n"
