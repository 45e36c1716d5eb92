"""Code loops across processes: ``loopactors code`` racing itself, and killed mid-round."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.hang import HANG

from .toyrepo import VALIDATE, git, worker


def code(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopactors", "code", *args],
        cwd=repo,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=HANG)
    return process.returncode, out, err


def wait_for(path: Path) -> str:
    for _ in range(int(HANG / 0.05)):
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def init(repo: Path) -> None:
    base = repo.parent
    rc, _, err = finish(
        code(
            repo, "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
            "--executor", worker(base, "wait"), "--reviewer", worker(base, "approve"),
            "--validate", VALIDATE, "--max-rounds", "5", "--attendance", "unattended",
        )
    )  # fmt: skip
    assert rc == 0, err


def event_types(repo: Path) -> list[tuple[str, int]]:
    lines = (repo / ".loop" / "fix-calc" / "RUNS.jsonl").read_text().splitlines()
    return [(e["type"], e["round"]) for e in map(json.loads, lines)]


def test_two_processes_racing_to_start_a_round_exactly_one_wins(repo: Path) -> None:
    init(repo)
    sync = repo.parent / "sync"
    sync.mkdir()
    env = {"TOY_SYNC": str(sync)}
    racers = [code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env=env) for _ in "ab"]
    wait_for(sync / "started-1")  # one of them holds the round; the other must give up
    loser = None
    for _ in range(int(HANG / 0.05)):
        loser = next((p for p in racers if p.poll() is not None), None)
        if loser is not None:
            break
        time.sleep(0.05)
    assert loser is not None
    rc, _, err = finish(loser)
    assert rc == 75, err
    assert "lease is held by" in err
    (sync / "release").write_text("go")
    (winner,) = [p for p in racers if p is not loser]
    rc, out, err = finish(winner)
    assert rc == 0, err
    assert "round 1: merged into the candidate" in out
    assert event_types(repo).count(("round_started", 1)) == 1
    assert [t for t in event_types(repo) if t[0] == "round_started"] == [("round_started", 1)]
    assert git(repo, "show", "loop/fix-calc/candidate:calc.py") == "VALUE = 42"


def test_a_process_killed_mid_round_is_reconciled_without_a_duplicate_round(
    repo: Path,
) -> None:
    init(repo)
    sync = repo.parent / "sync"
    sync.mkdir()
    env = {"TOY_SYNC": str(sync)}
    first = code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env=env)
    executor = int(wait_for(sync / "started-1"))
    first.kill()  # no clean-up at all: the lease stays behind, the round stays running
    first.communicate(timeout=HANG)
    os.kill(executor, signal.SIGKILL)  # the executor has a session of its own
    state = json.loads((repo / ".loop" / "fix-calc" / "STATE.json").read_text())
    assert (state["status"], state["round"]) == ("running", 1)
    assert (repo / ".loop" / "fix-calc" / "LEASE.json").exists()
    rc, out, _ = finish(code(repo, "status"))
    assert rc == 0
    assert "fix-calc: running, round 1 of 5" in out
    assert "(stale: its holder is gone or expired)" in out

    (sync / "release").write_text("go")
    rc, _, err = finish(code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env=env))
    assert rc == 0, err
    assert event_types(repo) == [
        ("initialized", 0),
        ("round_started", 1),
        ("round_interrupted", 1),
        ("round_started", 2),
        ("transition", 2),
        ("transition", 2),
        ("round_finished", 2),
    ]
    state = json.loads((repo / ".loop" / "fix-calc" / "STATE.json").read_text())
    assert (state["status"], state["round"], state["merged_rounds"]) == ("ready", 2, 1)
    assert git(repo, "worktree", "list").count("\n") == 0  # round 1's worktree is gone too
    assert "r001: interrupted" in (repo / ".loop" / "fix-calc" / "LESSONS.md").read_text()
    assert not (repo / ".loop" / "fix-calc" / "LEASE.json").exists()


def test_ctrl_c_mid_round_marks_it_interrupted_and_releases_the_lease(repo: Path) -> None:
    init(repo)
    sync = repo.parent / "sync"
    sync.mkdir()
    run = code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env={"TOY_SYNC": str(sync)})
    wait_for(sync / "started-1")
    run.send_signal(signal.SIGINT)
    rc, _, err = finish(run)
    assert rc == 130, err
    state = json.loads((repo / ".loop" / "fix-calc" / "STATE.json").read_text())
    assert (state["status"], state["round"]) == ("ready", 1)
    assert "cancelled" in state["reason"]
    assert event_types(repo)[-1] == ("round_interrupted", 1)
    assert not (repo / ".loop" / "fix-calc" / "LEASE.json").exists()
    assert git(repo, "worktree", "list").count("\n") == 0


def test_a_turn_the_loop_was_killed_in_is_checked_when_it_resumes(repo: Path) -> None:
    """The executor moves main, tags and plants a hook, then the loop is SIGKILLed during its
    turn: the after-check never ran. The next run finds the turn's snapshot in the ledger,
    checks the repository against it, puts back what it can and trips the safety gate."""
    base = repo.parent
    rc, _, err = finish(
        code(
            repo, "init", "--slug", "fix-calc", "--objective", "make VALUE 42",
            "--executor", worker(base, "tamper-wait"), "--reviewer", worker(base, "approve"),
            "--validate", VALIDATE, "--max-rounds", "5", "--attendance", "unattended",
        )
    )  # fmt: skip
    assert rc == 0, err
    main = git(repo, "rev-parse", "main")
    sync = base / "sync"
    sync.mkdir()
    mark = base / "hook-ran"
    env = {"TOY_SYNC": str(sync), "TOY_HOOK_MARK": str(mark)}
    first = code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env=env)
    executor = int(wait_for(sync / "started-1"))
    first.kill()  # during the executor's turn: no after-check
    first.communicate(timeout=HANG)
    os.kill(executor, signal.SIGKILL)
    turn = repo / ".loop" / "fix-calc" / "TURN.json"
    assert json.loads(turn.read_text())["role"] == "executor"
    assert git(repo, "rev-parse", "main") != main  # the breach is there, not yet seen

    rc, out, err = finish(code(repo, "run", "--slug", "fix-calc", "--rounds", "1", env=env))
    assert rc == 2, (out, err)
    state = json.loads((repo / ".loop" / "fix-calc" / "STATE.json").read_text())
    assert (state["status"], state["active_gate"], state["merged_rounds"]) == (
        "blocked", "safety", 0,
    )  # fmt: skip
    reason = state["reason"]
    assert reason.startswith(
        "the executor changed the repository outside loop/fix-calc/ during a turn the loop "
        "crashed in (or since):"
    )
    assert f"refs/heads/main moved {main[:12]} ->" in reason
    assert "refs/tags/v-evil created" in reason
    assert "hook post-checkout created" in reason
    assert reason.endswith("(all put back)")
    assert reason in out + err
    # Put back, and the planted hook never ran in the loop's own git commands.
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "tag", "--list") == ""
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert not mark.exists()
    assert not turn.exists()
    assert ("round_interrupted", 1) in event_types(repo)
    assert [t for t in event_types(repo) if t[0] == "round_started"] == [("round_started", 1)]
    assert "gate safety" in (repo / ".loop" / "fix-calc" / "HANDOFF.md").read_text()
