"""``loopactors code`` in process: flags, output, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopactors.cli import main

from .toyrepo import VALIDATE, git, worker


def code(repo: Path, *args: str) -> int:
    return main(["code", "--repo", str(repo), *args])


def init(repo: Path, *extra: str) -> int:
    base = repo.parent
    return code(
        repo, "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
        "--executor", worker(base, "fix"), "--reviewer", worker(base, "reject"),
        "--validate", VALIDATE, *extra,
    )  # fmt: skip


def test_init_run_status_handoff(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert init(repo, "--max-rounds", "4") == 0
    assert "fix-calc: ready" in capsys.readouterr().out
    assert code(repo, "run", "--slug", "fix-calc", "--until-gate") == 2
    out = capsys.readouterr().out
    assert "fix-calc round 1: review rejected: the change is too risky -> ready" in out
    assert "fix-calc: blocked (no_progress" in out
    assert code(repo, "status") == 0
    out = capsys.readouterr().out
    assert "fix-calc: blocked, round 2 of 4, 0 merged, attended" in out
    assert "kept branches: loop/fix-calc/r001, loop/fix-calc/r002" in out
    assert code(repo, "status", "--slug", "fix-calc", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state"]["status"] == "blocked"
    assert report["rejected_branches"] == ["loop/fix-calc/r001", "loop/fix-calc/r002"]
    assert code(repo, "handoff", "--slug", "fix-calc") == 0
    assert capsys.readouterr().out.endswith("Not pushed, not merged into main.\n")
    assert code(repo, "run", "--slug", "fix-calc") == 2  # blocked: nothing dispatched
    assert "nothing was dispatched" in capsys.readouterr().err
    assert code(repo, "resume", "--slug", "fix-calc", "--max-rounds", "2") == 0
    assert code(repo, "run", "--slug", "fix-calc") == 2  # 2 of 2 rounds: waiting_review
    assert code(repo, "stop", "--slug", "fix-calc") == 0
    assert "waiting_review -> stopped" in capsys.readouterr().out
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "loop/fix-calc/candidate")


def test_errors_and_usage(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert code(repo, "status") == 0
    assert "no code loops" in capsys.readouterr().out
    assert code(repo, "run", "--slug", "nope") == 1
    assert "no code loop 'nope'" in capsys.readouterr().err
    assert code(repo, "init", "--slug", "../up", "--objective", "x") == 1
    assert "kebab-case" in capsys.readouterr().err
    assert init(repo, "--attendance", "unattended") == 1
    assert "needs a deadline or a maximum number of rounds" in capsys.readouterr().err
    assert init(repo, "--deadline", "2026-12-01T06:00") == 1
    assert "no time zone" in capsys.readouterr().err
    assert code(repo, "frobnicate") == 64
    assert code(repo, "run", "--slug", "x", "--rounds", "0") == 64
    assert code(repo, "run", "--slug", "x", "--rounds", "2", "--until-gate") == 64
    assert code(repo.parent, "status") == 1  # not a git repository
    assert "not inside a git repository" in capsys.readouterr().err


def test_a_done_line_completes_the_loop(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = repo.parent
    assert code(
        repo, "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
        "--executor", worker(base, "finish"), "--reviewer", worker(base, "approve"),
        "--validate", VALIDATE, "--max-rounds", "5",
    ) == 0  # fmt: skip
    capsys.readouterr()
    assert code(repo, "run", "--slug", "fix-calc", "--until-gate") == 0
    out = capsys.readouterr().out
    assert "fix-calc round 1: " in out
    assert "fix-calc: completed after round 1; this run: 1 round, 1 merged; not pushed" in out
    assert git(repo, "show", "loop/fix-calc/candidate:calc.py") == "VALUE = 42"


def test_the_run_summary_names_the_rounds_that_failed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = repo.parent
    assert code(
        repo, "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
        "--executor", worker(base, "flaky"), "--reviewer", worker(base, "approve"),
        "--validate", VALIDATE, "--max-rounds", "3",
    ) == 0  # fmt: skip
    capsys.readouterr()
    assert code(repo, "run", "--slug", "fix-calc", "--until-gate") == 2
    lines = capsys.readouterr().out.splitlines()
    failure = "executor failed: exit code 1: model endpoint unreachable"
    assert lines[-2] == f"fix-calc round 3: {failure} -> waiting_review"
    assert lines[-1] == (
        "fix-calc: waiting_review (max_rounds: 3 of 3 rounds are done) after round 3; "
        f"this run: 3 rounds, 1 merged; not merged: round 2: {failure}; round 3: {failure}; "
        "not pushed"
    )
