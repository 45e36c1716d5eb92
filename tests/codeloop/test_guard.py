"""Roles that reach outside their loop's branches: refs, hooks, config, pushes (real git)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from loopactors.codeloop import CodeLoop, open_code_loop
from loopactors.codeloop._guard import RepoSnapshot, breaches, refuse_push_env
from loopactors.runtime import Runtime

from .toyrepo import VALIDATE, git, worker


async def new_loop(repo: Path, executor: str = "tamper", reviewer: str = "approve") -> CodeLoop:
    loop = await open_code_loop("fix-calc", path=repo)
    base = repo.parent
    await loop.init(
        objective="make VALUE 42",
        executor=worker(base, executor),
        reviewer=worker(base, reviewer),
        validate=VALIDATE,
        max_rounds=5,
    )
    return loop


def with_origin(repo: Path) -> Path:
    origin = repo.parent / "origin.git"
    git(repo.parent, "init", "-q", "--bare", str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "main")
    git(repo, "fetch", "-q", "origin")
    return origin


async def test_an_executor_that_moves_main_and_makes_refs_trips_safety_and_is_undone(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_TAMPER", "refs")
    main = git(repo, "rev-parse", "main")
    git(repo, "branch", "loop/other/candidate", "main")  # a loop that is not running now
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=3)
    assert (state.status, state.active_gate, state.round, state.merged_rounds) == (
        "blocked",
        "safety",
        1,
        0,
    )
    reason = state.reason or ""
    assert reason.startswith("the executor changed the repository outside loop/fix-calc/:")
    for change in (
        f"refs/heads/main moved {main[:12]} ->",
        "refs/heads/stray created",
        "refs/tags/v-evil created",
        f"refs/heads/loop/other/candidate moved {main[:12]} ->",
    ):
        assert change in reason
    assert reason.endswith("(all put back)")
    # Put back: main and the other loop's candidate where they were, no stray branch or tag.
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "rev-parse", "loop/other/candidate") == main
    assert git(repo, "branch", "--list", "stray") == ""
    assert git(repo, "tag", "--list") == ""
    assert git(repo, "rev-parse", "loop/fix-calc/candidate") == main  # not merged
    assert "gate safety" in loop.ledger.handoff_path.read_text()


def test_the_code_cli_exits_2_on_a_refs_breach(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopactors.cli import main

    monkeypatch.setenv("TOY_TAMPER", "refs")
    base = repo.parent
    assert main(
        ["code", "--repo", str(repo), "init", "--slug", "fix-calc", "--objective", "o",
         "--executor", worker(base, "tamper"), "--reviewer", worker(base, "approve"),
         "--validate", VALIDATE]
    ) == 0  # fmt: skip
    assert main(["code", "--repo", str(repo), "run", "--slug", "fix-calc"]) == 2
    assert "refs/heads/main moved" in capsys.readouterr().out


async def test_a_planted_hook_is_removed_and_never_runs_in_the_loops_git(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = repo.parent / "hook-ran"
    monkeypatch.setenv("TOY_TAMPER", "hook")
    monkeypatch.setenv("TOY_HOOK_MARK", str(mark))
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=3)
    assert (state.status, state.active_gate) == ("blocked", "safety")
    assert "hook post-checkout created" in (state.reason or "")
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    # The round's worktree was removed after the hook was planted: the hook did not run.
    assert not mark.exists()


async def test_a_hook_already_in_the_repository_does_not_run_in_the_loops_git(
    repo: Path, rt: Runtime
) -> None:
    mark = repo.parent / "hook-ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho ran >> {mark}\n")
    hook.chmod(0o755)
    loop = await new_loop(repo, "fix")
    state = await loop.run(rt, rounds=1)
    assert (state.status, state.merged_rounds) == ("ready", 1)  # a hook as such is no breach
    assert not mark.exists()  # git worktree add ran without it


async def test_a_changed_hooks_path_is_put_back(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor points core.hooksPath at a directory of other files (it could be /tmp or
    a home): the config is put back, and the files there are neither reported nor removed."""
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    bystander = elsewhere / "notes.txt"
    bystander.write_text("not a hook\n")
    monkeypatch.setenv("TOY_TAMPER", "hookspath")
    monkeypatch.setenv("TOY_HOOKS", str(elsewhere))
    config = (repo / ".git" / "config").read_bytes()
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=1)
    assert (state.status, state.active_gate) == ("blocked", "safety")
    assert ".git/config changed" in (state.reason or "")
    assert "notes.txt" not in (state.reason or "")
    assert (repo / ".git" / "config").read_bytes() == config
    assert bystander.read_text() == "not a hook\n"


async def test_a_push_from_a_role_is_refused(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = with_origin(repo)
    pushed = repo.parent / "push.out"
    monkeypatch.setenv("TOY_TAMPER", "push")
    monkeypatch.setenv("TOY_PUSH_OUT", str(pushed))
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=1)
    code = pushed.read_text().split("\n", 1)[0]
    assert code != "0"
    assert git(origin, "rev-parse", "main") == main  # origin untouched
    assert (state.status, state.merged_rounds) == ("ready", 1)  # nothing else changed


async def test_a_push_with_an_explicit_pushurl_is_refused_too(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = with_origin(repo)
    git(repo, "config", "remote.origin.pushurl", str(origin))
    pushed = repo.parent / "push.out"
    monkeypatch.setenv("TOY_TAMPER", "push")
    monkeypatch.setenv("TOY_PUSH_OUT", str(pushed))
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo)
    await loop.run(rt, rounds=1)
    assert pushed.read_text().split("\n", 1)[0] != "0"
    assert git(origin, "rev-parse", "main") == main


async def test_a_push_that_gets_out_anyway_is_detected(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = with_origin(repo)
    monkeypatch.setenv("TOY_TAMPER", "push-no-env")  # drops the refusing settings first
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=1)
    assert git(origin, "rev-parse", "main") != main  # it got out ...
    assert (state.status, state.active_gate) == ("blocked", "safety")  # ... and was seen
    reason = state.reason or ""
    assert f"refs/remotes/origin/main moved {main[:12]} ->" in reason
    assert "not put back: refs/remotes/origin/main (a push reached the remote" in reason


def test_a_running_loop_guards_its_own_refs() -> None:
    before = RepoSnapshot(
        refs={"refs/heads/loop/b/candidate": "1" * 40, "refs/heads/main": "1" * 40},
        hooks={},
        config=b"",
    )
    after = RepoSnapshot(
        refs={
            "refs/heads/loop/b/candidate": "2" * 40,
            "refs/heads/loop/a/r001": "3" * 40,
            "refs/heads/main": "1" * 40,
        },
        hooks={},
        config=b"",
    )
    assert breaches(before, after, "a", live={"b"}) == []
    assert breaches(before, after, "a", live=set()) == [
        f"refs/heads/loop/b/candidate moved {'1' * 12} -> {'2' * 12}"
    ]


async def test_a_loop_whose_lease_is_held_may_move_its_refs_meanwhile(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "other" runs in another process now: its lease is held by a live process (this one).
    other = repo / ".loop" / "other"
    other.mkdir(parents=True)
    now = time.time()
    lease = {"owner": "x", "host": socket.gethostname(), "pid": os.getpid()}
    lease |= {"acquired_at": now, "expires_at": now + 600}
    (other / "LEASE.json").write_text(json.dumps(lease))
    git(repo, "branch", "loop/other/candidate", "main")
    monkeypatch.setenv("TOY_TAMPER", "refs")
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=1)
    assert "refs/heads/main moved" in (state.reason or "")
    assert "loop/other" not in (state.reason or "")


def test_the_refusing_push_settings_follow_those_already_in_the_environment() -> None:
    env = refuse_push_env(["ssh://h/r.git"], {"GIT_CONFIG_COUNT": "1"})
    assert env == {
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_1": "url.loopactors-refuses-push://.pushInsteadOf",
        "GIT_CONFIG_VALUE_1": "",
        "GIT_CONFIG_KEY_2": "url.loopactors-refuses-push://.insteadOf",
        "GIT_CONFIG_VALUE_2": "ssh://h/r.git",
    }
