"""A code loop whose executor is the real Claude Code (against the fake endpoint): the agent
works in the round's worktree, its commit is validated, reviewed and merged (a few seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopactors.cli import main

from ..codeloop.toyrepo import VALIDATE, git, make_repo, worker
from ._fakes import AnthropicFake, Turn


def test_claude_as_a_code_loop_executor(
    tmp_path: Path,
    anthropic: AnthropicFake,
    claude_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = make_repo(tmp_path)
    fix = "printf 'VALUE = 42\\n' > calc.py && git commit -qam 'set VALUE' && pwd"
    anthropic.turns = [
        Turn(tools=[("Bash", {"command": fix})]),
        Turn(text="VALUE is 42 now, committed.\n<promise>DONE</promise>"),
    ]

    def code(*args: str) -> int:
        return main(["code", "--repo", str(repo), *args])

    assert code(
        "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
        "--executor", "claude", "--reviewer", worker(tmp_path, "approve"),
        "--validate", VALIDATE, "--max-rounds", "3",
    ) == 0  # fmt: skip
    capsys.readouterr()
    assert code("run", "--slug", "fix-calc", "--until-gate") == 0
    out = capsys.readouterr().out
    assert "fix-calc round 1: " in out
    assert git(repo, "show", "loop/fix-calc/candidate:calc.py") == "VALUE = 42"
    assert "set VALUE" in git(repo, "log", "--format=%s", "loop/fix-calc/candidate")
    assert git(repo, "show", "main:calc.py") == "VALUE = 0"  # the agent worked in its worktree
    first = str(anthropic.conversations[0])
    assert "make VALUE 42" in first
